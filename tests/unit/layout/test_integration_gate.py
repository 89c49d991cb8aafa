# Copyright (c) llmops.sglang contributors
# Apache License 2.0 (see LICENSE)
"""`make test` does not pass by skipping the integration tests (issue #36 item 16): where sandbox hosts cannot run
(not root, no namespaces) scripts/gates.sh fails before any gate starts, naming what is missing, and the integration
tests themselves error instead of skipping; LLMOPS_SKIP_INTEGRATION=1 skips them on purpose, and the run says so.

The machine's lack is faked with LLMOPS_SANDBOX_UNSUPPORTED (tests/sandbox/fleet.py). gates.sh runs from a copy of
scripts/ whose gates and pytest are stand-ins that only say they ran, so nothing of the real suite runs here."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]
FAKED = "faked for the test: sandbox hosts need root"
STAND_IN = '#!/usr/bin/env bash\necho "ran $(basename "$0") $*" >> "$(dirname "$0")/../ran.log"\n'


@pytest.fixture
def checkout(tmp_path: Path) -> Path:
    """gates.sh and integration.sh as they are, beside stand-ins for the gates and pytest; the real tests/ (for
    ``python -m tests.sandbox check``)."""
    (tmp_path / "scripts").mkdir()
    for script in ("gates.sh", "integration.sh"):
        shutil.copy(REPO / "scripts" / script, tmp_path / "scripts" / script)
    for stand_in in ("pytest.sh", "lint.sh", "unit-py313.sh"):
        (tmp_path / "scripts" / stand_in).write_text(STAND_IN)
    (tmp_path / "tests").symlink_to(REPO / "tests")
    return tmp_path


def _gates(checkout: Path, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", "scripts/gates.sh"], cwd=checkout, capture_output=True, text=True, timeout=120,
                          check=False, env={**os.environ, "VENV": sys.prefix, "LLMOPS_SANDBOX_UNSUPPORTED": FAKED,
                                            **env})


def _ran(checkout: Path) -> list[str]:
    log = checkout / "ran.log"
    return log.read_text().splitlines() if log.exists() else []


def test_a_failed_gate_fails_the_run_after_every_gate_has_ended_and_its_log_gives_its_time(checkout):
    (checkout / "scripts" / "lint.sh").write_text(STAND_IN + "exit 3\n")
    done = _gates(checkout, LLMOPS_SKIP_INTEGRATION="1")
    assert done.returncode == 1
    assert done.stderr.strip().splitlines()[-1] == "failed: lint (see .cache/logs/)"
    assert len(_ran(checkout)) == 3, "the other stream ran to its end"
    assert "gates: lint ended with status 3 after " in done.stdout
    assert "gates: unit-py313 ended with status 0 after " in done.stdout


def test_make_test_fails_before_any_gate_where_the_integration_tests_cannot_run(checkout):
    done = _gates(checkout)
    assert done.returncode == 1
    assert f"integration tests cannot run here: {FAKED}" in done.stderr
    assert "LLMOPS_SKIP_INTEGRATION=1" in done.stderr, "the message names the way to skip them on purpose"
    assert _ran(checkout) == [], "no gate and no test ran"


def test_an_explicit_skip_runs_the_gates_and_says_the_integration_tests_did_not_run(checkout):
    done = _gates(checkout, LLMOPS_SKIP_INTEGRATION="1")
    assert done.returncode == 0, done.stderr
    assert "the integration tests are NOT run" in done.stderr
    assert done.stderr.strip().splitlines()[-1] == "passed: lint unit-py311 unit-py313; integration NOT RUN " \
                                                   "(LLMOPS_SKIP_INTEGRATION=1)"
    ran = _ran(checkout)  # lint in a stream of its own, the unit tests one after another in the other
    assert sorted(ran) == ["ran lint.sh ", "ran pytest.sh tests/unit tests/conformance", "ran unit-py313.sh "]
    assert ran.index("ran pytest.sh tests/unit tests/conformance") < ran.index("ran unit-py313.sh ")


@pytest.mark.parametrize("skip", ["", "1"])
def test_the_integration_tests_error_rather_than_skip_unless_asked(skip):
    """pytest on an integration module directly (make integration's pytest, an IDE): the fleet fixture."""
    done = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", "-rs",
                           "tests/integration/test_sandbox_foundation.py"], cwd=REPO, capture_output=True, text=True,
                          timeout=300, check=False,
                          env={**os.environ, "LLMOPS_SANDBOX_UNSUPPORTED": FAKED, "LLMOPS_SKIP_INTEGRATION": skip})
    assert f"sandbox hosts unavailable: {FAKED}" in done.stdout
    if skip:
        assert done.returncode == 0 and " skipped" in done.stdout and " error" not in done.stdout, done.stdout[-2000:]
    else:
        assert done.returncode == 1 and " error" in done.stdout and " passed" not in done.stdout, done.stdout[-2000:]
