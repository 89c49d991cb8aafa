# Copyright (c) llmops.sglang contributors
# Apache License 2.0 (see LICENSE)
"""`python -m sglang.launch_server ...`: SGLang's server entry point (emulated; see sglang._emulator)."""
from __future__ import annotations

import sys

from sglang._emulator.server import main

if __name__ == "__main__":
    sys.exit(main())
