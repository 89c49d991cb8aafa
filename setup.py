"""Stops a source install (pip install ., an sdist) on a Python older than pyproject.toml's requires-python, saying
so: pip before 24 resolves a local project's dependencies before it compares requires-python, and blamed one of them
(ansible-core==... not found) instead. Everything else is in pyproject.toml."""
import re
import sys
from pathlib import Path

# Read, not repeated: requires-python stays the one place the minimum is written (tomllib is 3.11+ only).
MINIMUM = tuple(int(part) for part in re.search(r'^requires-python = ">=(\d+)\.(\d+)', (
    Path(__file__).parent / "pyproject.toml").read_text(encoding="utf-8"), re.M).groups())

if sys.version_info < MINIMUM:
    raise SystemExit(f"llmops-sglang needs Python {'.'.join(map(str, MINIMUM))} or later (pyproject.toml "
                     f"requires-python), not {sys.version.split()[0]}: install it with a newer python (python3.11 -m "
                     "venv ...)")

from setuptools import setup  # noqa: E402  # pylint: disable=wrong-import-position

setup()
