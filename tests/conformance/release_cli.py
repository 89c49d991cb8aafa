# Copyright (c) llmops.sglang contributors
# Apache License 2.0 (see LICENSE)
"""Each real release's ``launch_server --help``, option table and ServerArgs fields, taken once from its wheel.

``real_cli(version)`` runs tests/conformance/real_cli.py on the unpacked wheel (tests.conformance.conftest
``extracted``) in a fresh interpreter and caches the JSON under ``.cache/conformance/cli-<version>.json``
(keyed by the wheel and the probe's source, so a new wheel or probe is read again). 0.5.20+ declare
ServerArgs with msgspec (a light pure dependency, not in the project venv): ``conformance_deps()`` installs
the pinned version under ``.cache/conformance/deps`` with pip once.
"""
from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from functools import lru_cache
from pathlib import Path

from tests.conformance.conftest import EXTRACTED, extracted, release_wheel

PROBE = Path(__file__).with_name("real_cli.py")
DEPS = EXTRACTED / "deps"
MSGSPEC = "msgspec==0.23.0"


def conformance_deps() -> Path:
    if not (DEPS / "msgspec").is_dir():
        install = subprocess.run(
            [sys.executable, "-m", "pip", "install", "--disable-pip-version-check", "--quiet", "--no-deps",
             "--target", str(DEPS), MSGSPEC], capture_output=True, text=True, timeout=600, check=False)
        if install.returncode != 0:
            raise RuntimeError(f"pip install {MSGSPEC} failed: {install.stderr.strip()[-800:]}")
    return DEPS


# Some choices are built from sets (0.5.11's --sampling-backend): their order, and so the --help text, follows
# the string hash seed. One seed makes the release's --help the same on every machine and in every run.
HASH_SEED = "0"


@lru_cache(maxsize=None)
def real_cli(version: str) -> dict:
    """``{"prog", "help", "options": [...], "fields": [[name, default repr], ...]}`` of ``sglang==version``."""
    stamp = f"{release_wheel(version).name} {hashlib.sha256(PROBE.read_bytes()).hexdigest()[:16]} hashseed={HASH_SEED}"
    cache = EXTRACTED / f"cli-{version}.json"
    if cache.exists():
        cached = json.loads(cache.read_text(encoding="utf-8"))
        if cached.get("stamp") == stamp:
            return cached
    probe = subprocess.run([sys.executable, str(PROBE), str(extracted(version)), str(conformance_deps())],
                           capture_output=True, text=True, timeout=300, check=False,
                           env={"PATH": "/usr/bin:/bin", "COLUMNS": "100", "PYTHONHASHSEED": HASH_SEED})
    if probe.returncode != 0:
        raise RuntimeError(f"the --help of sglang {version} could not be built: {probe.stderr[-3000:]}")
    result = {**json.loads(probe.stdout), "stamp": stamp}
    cache.write_text(json.dumps(result), encoding="utf-8")
    return result


def real_options(version: str, *, hidden: bool = False) -> dict[str, dict]:
    """The release's options by ``--`` option string (argparse SUPPRESSed ones only with ``hidden``)."""
    return {string: option for option in real_cli(version)["options"] if hidden or not option["hidden"]
            for string in option["option_strings"] if string.startswith("--")}


# What the emulator's CLI is built from (tests/emulator/sglang/sglang/_emulator/cli/sglang-<version>.json).
EMULATOR_TABLE_KEYS = ("option_strings", "dest", "nargs", "choices", "const", "const_value", "action", "hidden",
                       "metavar", "type", "required", "new_flag", "help")


def emulator_table(version: str) -> dict:
    """The release's option table as the emulator ships it: prog, every option (choices computed from
    a stubbed module are left out: null, any value passes) and the names of its ServerArgs fields in
    declaration order (what a ``server_args=`` dump of the release lists, in its order)."""
    options = []
    for option in real_cli(version)["options"]:
        entry = {key: option[key] for key in EMULATOR_TABLE_KEYS}
        if entry["choices"] is not None and any("<stub" in str(choice) for choice in entry["choices"]):
            entry["choices"] = None
        options.append(entry)
    return {"source": f"sglang {version} wheel, ServerArgs.add_cli_args (tests/conformance/real_cli.py)",
            "prog": real_cli(version)["prog"], "options": options,
            "fields": [name for name, _default in real_cli(version)["fields"]]}


EMULATOR_TABLES = Path(__file__).resolve().parents[1] / "emulator" / "sglang" / "sglang" / "_emulator" / "cli"


def write_emulator_table(version: str) -> Path:
    """Write the emulator's copy of the release's table (``python -m tests.conformance.release_cli VERSION``)."""
    path = EMULATOR_TABLES / f"sglang-{version}.json"
    path.write_text(json.dumps(emulator_table(version), indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    return path


if __name__ == "__main__":
    for release in sys.argv[1:]:
        print(write_emulator_table(release))
