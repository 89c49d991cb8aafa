# Copyright (c) llmops.sglang contributors
# Apache License 2.0 (see LICENSE)
"""Version of the SGLang release this emulator imitates."""
from __future__ import annotations

__version__ = "0.5.11"
