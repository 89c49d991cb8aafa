# Copyright (c) llmops.sglang contributors
# Apache License 2.0 (see LICENSE)
"""The emulator's profiles as the code around the emulator reads them (its build, the sandbox, the conformance
tests): the effective document of a profile (its ``base`` chain deep-merged) and the release it plays.

The loader is the emulator's own (sglang/_emulator/profile.py), imported from its file so that no ``sglang``
package (the emulator's or a real one) has to be importable here.
"""
from __future__ import annotations

import importlib.util
import re
import sys
from functools import lru_cache
from pathlib import Path
from typing import Any

EMULATOR_DIR = Path(__file__).resolve().parent
PROFILES_DIR = EMULATOR_DIR / "profiles"
_LOADER = EMULATOR_DIR / "sglang" / "sglang" / "_emulator" / "profile.py"


@lru_cache(maxsize=None)
def _profile_module():
    spec = importlib.util.spec_from_file_location("llmops_sglang_emulator_profile", _LOADER)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses resolve their annotations through sys.modules
    spec.loader.exec_module(module)
    return module


def package_version() -> str:
    """The release the emulator's `sglang` distribution says it is (sglang/version.py)."""
    text = (EMULATOR_DIR / "sglang" / "sglang" / "version.py").read_text(encoding="utf-8")
    return re.search(r'^__version__ = "([^"]+)"', text, re.MULTILINE).group(1)


def profile_document(path: str | Path) -> dict[str, Any]:
    """The effective YAML mapping of a profile (``base`` merged in), as the emulator loads it."""
    return _profile_module().load_document(Path(path))


def profile_release(path: str | Path) -> str:
    """The release a profile plays: its ``sglang_version``, else the package's."""
    return str(profile_document(path).get("sglang_version") or package_version())


def profiles() -> list[Path]:
    return sorted(PROFILES_DIR.glob("*.yaml"))


def profile_releases() -> list[str]:
    """Every release a shipped profile plays, the package's first (sorted by version after it)."""
    named = {profile_release(path) for path in profiles()} - {package_version()}
    return [package_version(), *sorted(named, key=lambda version: tuple(int(x) for x in version.split(".")))]
