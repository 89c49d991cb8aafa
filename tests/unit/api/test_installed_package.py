"""`pip install llmops-sglang` (a wheel, not the editable checkout) drives a collection that `ansible-galaxy collection
install` put on the collections path, from a directory outside the checkout (tests/installed_package.py); the same
against a sandbox host: tests/integration/test_installed_package.py.
"""
from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.installed_package import Installed, install
from tests.unit.api.scripted_cli import DEMO_RUN

RUN_ID = "20261130T200107Z"  # the recorded demo run's id (its run.json)


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> Installed:
    return install(tmp_path_factory.mktemp("installed"))


def test_the_package_is_the_wheel_not_the_checkout(installed):
    done = subprocess.run([str(installed.venv / "bin" / "python"), "-c",
                           "import llmops_sglang; print(llmops_sglang.__file__)"],
                          cwd=installed.work, env=installed.env, capture_output=True, text=True, check=True)
    assert Path(done.stdout.strip()).is_relative_to(installed.venv)


def test_version_names_the_installed_collection(installed):
    done = installed.cli("--version")
    assert done.returncode == 0, done.stdout + done.stderr
    path = installed.collections / "ansible_collections" / "llmops" / "sglang"
    version = json.loads((path / "MANIFEST.json").read_text())["collection_info"]["version"]
    assert done.stdout.splitlines()[1] == f"llmops.sglang {version} at {path}"
    assert "development install" not in done.stdout


def test_without_the_collection_on_the_path_it_says_how_to_install(installed):
    done = installed.cli("--version", collections=False)
    assert done.returncode == 1
    assert "llmops.sglang: not found: " in done.stdout and "ansible-galaxy collection install" in done.stdout


def test_a_stage_runs_from_the_installed_collection_into_runs_of_the_current_directory(installed):
    shutil.copytree(DEMO_RUN, installed.work / "runs" / RUN_ID)
    inventory = installed.work / "hosts.ini"
    inventory.write_text(f"[sglang_hosts]\ngpu1 ansible_connection=local ansible_python_interpreter={sys.executable}\n")
    checked = installed.cli("stage", "report", "-i", "hosts.ini", "--run-id", RUN_ID, "--check")
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert "check mode: the stages recorded nothing" in checked.stdout
    assert not (installed.work / "runs" / RUN_ID / "report.html").exists()

    done = installed.cli("stage", "report", "-i", "hosts.ini", "--run-id", RUN_ID, "-v")
    assert done.returncode == 0, done.stdout + done.stderr
    # ansible-playbook's own -v lines: no checkout config in play, the playbook is the installed collection's
    assert "No config file found; using defaults" in done.stdout
    assert "running playbook inside collection llmops.sglang" in done.stdout
    report = installed.work / "runs" / RUN_ID / "report.html"
    assert report.is_file() and f"report: {report}" in done.stdout
    assert (installed.work / "runs" / "latest").resolve() == report.parent

    listed = installed.cli("runs")  # the default runs directory, read from the installed collection's role
    assert listed.returncode == 0 and RUN_ID in listed.stdout
