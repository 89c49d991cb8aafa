"""`pip install llmops-sglang` (a wheel, not the editable checkout) next to a collection that `ansible-galaxy
collection install` put on the collections path, used from a directory outside the checkout: what a user who
installs both gets (tests/unit/api/test_installed_package.py, tests/integration/test_installed_package.py).

The wheel goes into a throwaway venv whose only other packages are the project venv's (a .pth line, so the project
venv's own .pth files, the editable install's path to src/ among them, are not read). ansible-playbook comes from
the project venv's bin, standing for the one pip installs next to the package.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
from dataclasses import dataclass
from pathlib import Path

CHECKOUT = Path(__file__).resolve().parents[1]
PROJECT_BIN = Path(sys.executable).parent


@dataclass(frozen=True)
class Installed:
    venv: Path
    collections: Path      # the -p of ansible-galaxy collection install
    work: Path             # where the user runs the CLI: outside the checkout
    env: dict[str, str]    # ANSIBLE_COLLECTIONS_PATH -> collections, no ANSIBLE_CONFIG, no PYTHONPATH

    def cli(self, *argv: str, collections: bool = True, timeout: float = 120) -> subprocess.CompletedProcess:
        env = dict(self.env)
        if not collections:
            env.pop("ANSIBLE_COLLECTIONS_PATH")
        return subprocess.run([str(self.venv / "bin" / "llmops-sglang"), *argv], cwd=self.work, env=env,
                              capture_output=True, text=True, timeout=timeout, check=False)


def _run(*argv: str | Path, cwd: Path) -> None:
    subprocess.run([str(a) for a in argv], cwd=cwd, check=True, capture_output=True, text=True, timeout=180,
                   env={k: v for k, v in os.environ.items() if k not in ("ANSIBLE_CONFIG", "PYTHONPATH")})


def install(tmp: Path) -> Installed:
    """The package's wheel and the collection's Galaxy artifact, installed under ``tmp``."""
    # The wheel, built from a copy of the package's sources: setuptools writes build/ and *.egg-info beside them.
    source = tmp / "source"
    source.mkdir()
    for name in ("pyproject.toml", "setup.py", "README.md", "LICENSE"):
        shutil.copy(CHECKOUT / name, source)
    shutil.copytree(CHECKOUT / "src", source / "src", ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
    _run(sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", tmp / "dist", source, cwd=tmp)
    wheel, = (tmp / "dist").glob("llmops_sglang-*.whl")
    venv = tmp / "venv"
    _run(sys.executable, "-m", "venv", "--without-pip", venv, cwd=tmp)
    site_packages = Path(sysconfig.get_path("purelib", vars={"base": str(venv)}))
    (site_packages / "project-venv.pth").write_text(sysconfig.get_path("purelib") + "\n")
    _run(sys.executable, "-m", "pip", "--python", venv / "bin" / "python", "install", "--no-deps", "--no-index", "-q",
         wheel, cwd=tmp)
    # The collection as a user gets it: the built artifact, installed by ansible-galaxy (it declares no dependency;
    # --no-deps keeps Galaxy out of it).
    _run(PROJECT_BIN / "ansible-galaxy", "collection", "build", "--output-path", tmp, CHECKOUT, cwd=tmp)
    tarball, = tmp.glob("llmops-sglang-*.tar.gz")
    collections = tmp / "collections"
    _run(PROJECT_BIN / "ansible-galaxy", "collection", "install", "--no-deps", "-p", collections, tarball, cwd=tmp)
    work = tmp / "work"
    work.mkdir()
    env = {k: v for k, v in os.environ.items() if k not in ("ANSIBLE_CONFIG", "PYTHONPATH")}
    env.update(ANSIBLE_COLLECTIONS_PATH=str(collections), ANSIBLE_HOME=str(tmp / "ansible-home"),
               PATH=os.pathsep.join([str(venv / "bin"), str(PROJECT_BIN), os.environ.get("PATH", os.defpath)]))
    return Installed(venv=venv, collections=collections, work=work, env=env)
