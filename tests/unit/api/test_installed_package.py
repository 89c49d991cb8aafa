"""`pip install llmops-sglang` (a wheel, not the editable checkout) drives a collection that `ansible-galaxy collection
install` put on the collections path, from a directory outside the checkout.

The wheel goes into a throwaway venv whose only other packages are the project venv's (a .pth line, so the project
venv's own .pth files, the editable install's path to src/ among them, are not read). ansible-playbook comes from
the project venv's bin, standing for the one pip installs next to the package.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.unit.api.scripted_cli import DEMO_RUN

CHECKOUT = Path(__file__).resolve().parents[3]
PROJECT_BIN = Path(sys.executable).parent
RUN_ID = "20261130T200107Z"  # the recorded demo run's id (its run.json)


@dataclass(frozen=True)
class Installed:
    venv: Path
    collections: Path      # the -p of ansible-galaxy collection install
    work: Path             # where the user runs the CLI: outside the checkout
    env: dict[str, str]    # ANSIBLE_COLLECTIONS_PATH -> collections, no ANSIBLE_CONFIG, no PYTHONPATH

    def cli(self, *argv: str, collections: bool = True) -> subprocess.CompletedProcess:
        env = dict(self.env)
        if not collections:
            env.pop("ANSIBLE_COLLECTIONS_PATH")
        return subprocess.run([str(self.venv / "bin" / "llmops-sglang"), *argv], cwd=self.work, env=env,
                              capture_output=True, text=True, timeout=120, check=False)


def run(*argv: str | Path, cwd: Path) -> None:
    subprocess.run([str(a) for a in argv], cwd=cwd, check=True, capture_output=True, text=True, timeout=180,
                   env={k: v for k, v in os.environ.items() if k not in ("ANSIBLE_CONFIG", "PYTHONPATH")})


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> Installed:
    tmp = tmp_path_factory.mktemp("installed")
    # The wheel, built from a copy of the package's sources: setuptools writes build/ and *.egg-info beside them.
    source = tmp / "source"
    source.mkdir()
    for name in ("pyproject.toml", "README.md", "LICENSE"):
        shutil.copy(CHECKOUT / name, source)
    shutil.copytree(CHECKOUT / "src", source / "src", ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
    run(sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", tmp / "dist", source, cwd=tmp)
    wheel, = (tmp / "dist").glob("llmops_sglang-*.whl")
    venv = tmp / "venv"
    run(sys.executable, "-m", "venv", "--without-pip", venv, cwd=tmp)
    site_packages = Path(sysconfig.get_path("purelib", vars={"base": str(venv)}))
    (site_packages / "project-venv.pth").write_text(sysconfig.get_path("purelib") + "\n")
    run(sys.executable, "-m", "pip", "--python", venv / "bin" / "python", "install", "--no-deps", "--no-index", "-q",
        wheel, cwd=tmp)
    # The collection as a user gets it: the built artifact, installed by ansible-galaxy (its dependencies, awx.awx
    # for awx_configure.yml, are not what this test is about).
    run(PROJECT_BIN / "ansible-galaxy", "collection", "build", "--output-path", tmp, CHECKOUT, cwd=tmp)
    tarball, = tmp.glob("llmops-sglang-*.tar.gz")
    collections = tmp / "collections"
    run(PROJECT_BIN / "ansible-galaxy", "collection", "install", "--no-deps", "-p", collections, tarball, cwd=tmp)
    work = tmp / "work"
    work.mkdir()
    env = {k: v for k, v in os.environ.items() if k not in ("ANSIBLE_CONFIG", "PYTHONPATH")}
    env.update(ANSIBLE_COLLECTIONS_PATH=str(collections), ANSIBLE_HOME=str(tmp / "ansible-home"),
               PATH=os.pathsep.join([str(venv / "bin"), str(PROJECT_BIN), os.environ.get("PATH", os.defpath)]))
    return Installed(venv=venv, collections=collections, work=work, env=env)


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
