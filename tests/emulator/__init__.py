"""The SGLang emulator (README.md): its ``sglang`` and ``triton`` distributions live in ``sglang/`` and ``triton/``."""
from __future__ import annotations

import sys
from pathlib import Path

EMULATOR = Path(__file__).resolve().parent


def make_importable() -> None:
    """Put the emulator's ``sglang`` and ``triton`` packages first on ``sys.path`` (tests import them in-process)."""
    for package_root in (EMULATOR / "sglang", EMULATOR / "triton"):
        if str(package_root) not in sys.path:
            sys.path.insert(0, str(package_root))
