# Copyright (c) llmops.sglang contributors
# Apache License 2.0 (see LICENSE)
"""Emulated `triton` distribution: only the version string SGLang reads to pick its MoE config dir."""
from __future__ import annotations

__version__ = "3.6.0"
