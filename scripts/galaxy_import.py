#!/usr/bin/env python3
# Copyright (c) llmops.sglang contributors
# Apache License 2.0 (see LICENSE)
"""Import check of a built collection tarball as Galaxy and Automation Hub run it (galaxy-importer).

    python scripts/galaxy_import.py dist/llmops-sglang-2.0.0.tar.gz

Runs ``python -m galaxy_importer.main`` once per settings file in scripts/galaxy-importer/ (found by the importer
through GALAXY_IMPORTER_CONFIG, galaxy_importer/config.py). The importer fails only on what stops an import; what a
reviewer reads as a finding (ansible-lint of the collection, ansible-doc problems) it logs as WARNING or ERROR lines
and still exits 0. So this check fails on either: a failed import, or any WARNING/ERROR line but the one below.
"""
from __future__ import annotations

import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

SETTINGS = Path(__file__).resolve().parent / "galaxy-importer"
DONE = "Importer processing completed successfully"
# Logged for any ignore file (galaxy_importer/loaders/collection.py, _check_ansible_test_ignore_files). Ours holds
# only validate-modules:missing-gplv3-license (Apache-2.0 modules), an ignore Automation Hub permits; one it does
# not permit is logged by the importer's ansible-lint run (sanity[cannot-ignore]) and fails this check.
EXPECTED = (re.compile(r"WARNING: Ignore files skip ansible-test sanity tests, found ignore-[\d.]+\.txt with \d+ statement\(s\)"),)


def findings(output: str) -> list[str]:
    """The importer's WARNING and ERROR lines that are not expected."""
    return [line for line in output.splitlines()
            if line.startswith(("WARNING", "ERROR")) and not any(pattern.fullmatch(line) for pattern in EXPECTED)]


def import_check(tarball: Path, settings: Path) -> list[str]:
    """Problems of one import of ``tarball`` with ``settings`` (empty: accepted)."""
    env = {**os.environ, "GALAXY_IMPORTER_CONFIG": str(settings),
           # ansible-doc and ansible-lint of the importer's own venv, which is this one.
           "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"}
    with tempfile.TemporaryDirectory() as cwd:  # the importer writes importer_result.json into its cwd
        run = subprocess.run([sys.executable, "-m", "galaxy_importer.main", str(tarball.resolve())], cwd=cwd, env=env,
                             capture_output=True, text=True, check=False)
    output = run.stdout + run.stderr
    problems = findings(output)
    if run.returncode != 0 or DONE not in output:
        problems.append(f"the import failed (exit {run.returncode}):\n{output}")
    return problems


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print(__doc__, file=sys.stderr)
        return 2
    failed = False
    for settings in sorted(SETTINGS.glob("*.cfg")):
        problems = import_check(Path(argv[0]), settings)
        print(f"galaxy-importer ({settings.stem}): " + ("accepted" if not problems else "REJECTED"))
        for problem in problems:
            print(f"  {problem}")
        failed = failed or bool(problems)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
