# Copyright (c) llmops.sglang contributors
# Apache License 2.0 (see LICENSE)
"""The real SGLang releases the conformance tests read: their PyPI wheels, downloaded once into
``.cache/wheels`` and unpacked once into ``.cache/conformance/sglang-<version>/``.

``release_wheel(version) -> Path`` runs ``pip download --no-deps sglang==<version>`` when the wheel is not
cached (CI has PyPI access); ``extracted(version) -> Path`` is the unpacked wheel (the directory holding
``sglang/``). Both are plain functions (import them from ``tests.conformance.conftest``) and fixtures of
the same names return them.
"""
from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
WHEELS = ROOT / ".cache" / "wheels"
EXTRACTED = ROOT / ".cache" / "conformance"
# Every release and post-release on PyPI from 0.5.10 to 0.5.23 (`pip index versions sglang`, 2026-12-06; 0.5.23:
# the newest then): the support matrix covers each.
RELEASES = ("0.5.10", "0.5.10.post1", "0.5.11", "0.5.12", "0.5.12.post1", "0.5.13", "0.5.13.post1", "0.5.14",
            "0.5.15", "0.5.15.post1", "0.5.16", "0.5.17", "0.5.18", "0.5.19", "0.5.20", "0.5.21", "0.5.22", "0.5.23")


def release_wheel(version: str) -> Path:
    """The wheel of ``sglang==version`` (downloaded when missing)."""
    found = sorted(WHEELS.glob(f"sglang-{version}-*.whl"))
    if not found:
        WHEELS.mkdir(parents=True, exist_ok=True)
        download = subprocess.run(
            [sys.executable, "-m", "pip", "download", "--no-deps", "--disable-pip-version-check", "--quiet",
             f"sglang=={version}", "-d", str(WHEELS)], capture_output=True, text=True, timeout=600, check=False)
        found = sorted(WHEELS.glob(f"sglang-{version}-*.whl"))
        if download.returncode != 0 or not found:
            raise RuntimeError(f"pip download sglang=={version} failed: {download.stderr.strip()[-800:]}")
    return found[0]


def extracted(version: str) -> Path:
    """The unpacked wheel of ``sglang==version`` (a directory holding ``sglang/``), unpacked once."""
    target = EXTRACTED / f"sglang-{version}"
    stamp = target / ".unpacked"
    wheel = release_wheel(version)
    if not stamp.exists() or stamp.read_text(encoding="utf-8") != wheel.name:
        partial = target.with_name(target.name + ".partial")
        subprocess.run(["rm", "-rf", str(partial)], check=True)
        with zipfile.ZipFile(wheel) as archive:
            archive.extractall(partial)
        (partial / ".unpacked").write_text(wheel.name, encoding="utf-8")
        subprocess.run(["rm", "-rf", str(target)], check=True)
        partial.rename(target)
    return target


@pytest.fixture(name="release_wheel", scope="session")
def release_wheel_fixture():
    return release_wheel


@pytest.fixture(name="extracted", scope="session")
def extracted_fixture():
    return extracted


def pytest_collection_modifyitems(items):
    """Every test under tests/conformance is selectable as ``-m conformance`` (and runs in ``make test``)."""
    here = Path(__file__).parent
    for item in items:
        if here in Path(str(item.fspath)).parents:
            item.add_marker(pytest.mark.conformance)
