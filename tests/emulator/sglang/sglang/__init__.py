# Copyright (c) llmops.sglang contributors
# Apache License 2.0 (see LICENSE)
"""SGLang emulator (llmops.sglang test double): real SGLang's CLI, logs and HTTP API without a GPU."""
from __future__ import annotations

from sglang.version import __version__

__all__ = ["__version__"]
