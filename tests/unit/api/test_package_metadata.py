"""What pip says about the package before anything is installed (issue #39 item 12): on a Python older than
requires-python, that the package needs a newer one (pip 23, Python 3.10's own, blamed a pinned dependency it could
not find instead); and `pip install .` leaves nothing git would show in the checkout."""
from __future__ import annotations

import glob
import os
import shutil
import subprocess
from pathlib import Path

import pytest

CHECKOUT = Path(__file__).resolve().parents[3]


def older_python() -> str | None:
    """A Python 3.10: on PATH, else pyenv's (scripts/pythons.sh looks in the same places)."""
    found = shutil.which("python3.10")
    if found and subprocess.run([found, "-c", ""], capture_output=True, check=False).returncode == 0:
        return found
    pyenv = os.environ.get("PYENV_ROOT", str(Path.home() / ".pyenv"))
    return next(iter(sorted(glob.glob(f"{pyenv}/versions/3.10.*/bin/python3.10"))), None)


def test_pip_on_an_older_python_says_the_package_needs_a_newer_one(tmp_path):
    python = older_python()
    if python is None:
        pytest.skip("no Python 3.10 here (python3.10 on PATH or pyenv's versions/3.10.*)")
    subprocess.run([python, "-m", "venv", tmp_path / "venv"], check=True, capture_output=True)
    source = tmp_path / "source"
    source.mkdir()
    for name in ("pyproject.toml", "setup.py", "README.md", "LICENSE"):
        shutil.copy(CHECKOUT / name, source)
    shutil.copytree(CHECKOUT / "src", source / "src", ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
    # Offline: the venv's own pip and setuptools, nothing fetched (the check comes before any dependency is looked at).
    pip = subprocess.run([tmp_path / "venv" / "bin" / "python", "-m", "pip", "install", "--no-build-isolation",
                          "--no-deps", "--no-index", "--disable-pip-version-check", source],
                         capture_output=True, text=True, check=False, timeout=300,
                         env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "PIP_CONFIG_FILE": os.devnull})
    assert pip.returncode != 0
    said = pip.stdout + pip.stderr
    assert "llmops-sglang needs Python 3.11 or later (pyproject.toml requires-python), not 3.10." in said


def test_what_pip_install_dot_writes_into_the_checkout_is_ignored():
    """setuptools builds in build/ and writes src/*.egg-info beside the sources."""
    for written in ("build/lib/llmops_sglang/api.py", "build/bdist.linux-x86_64/x",
                    "src/llmops_sglang.egg-info/PKG-INFO"):
        ignored = subprocess.run(["git", "check-ignore", "-q", written], cwd=CHECKOUT, check=False)
        assert ignored.returncode == 0, written
