"""The SGLang emulator payload that sandbox hosts mount (built once, cached under .cache/emulator)."""
from __future__ import annotations

import os
from pathlib import Path

# A separate build dir lets a second test session rebuild without touching a running fleet's mounts.
EMULATOR_BUILD_DIR = Path(os.environ.get("LLMOPS_EMULATOR_BUILD_DIR",
                                         Path(__file__).resolve().parents[2] / ".cache" / "emulator"))


def build_emulator() -> Path:
    from tests.emulator.build import build

    build(EMULATOR_BUILD_DIR)
    return EMULATOR_BUILD_DIR
