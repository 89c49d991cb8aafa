"""The SGLang emulator payload that sandbox hosts mount (built once, cached under .cache/emulator)."""
from __future__ import annotations

from pathlib import Path

EMULATOR_BUILD_DIR = Path(__file__).resolve().parents[2] / ".cache" / "emulator"


def build_emulator() -> Path:
    from tests.emulator.build import build

    build(EMULATOR_BUILD_DIR)
    return EMULATOR_BUILD_DIR
