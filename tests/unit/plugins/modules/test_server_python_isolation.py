# Copyright (c) llmops.sglang contributors
# Apache License 2.0 (see LICENSE)
"""The server module runs the server's python as root (in check mode too) for its checks: SGLang's ``--help`` and
SGLang's own parser on the new argv. A module planted where another user can write, in the unit's working directory
or the user site-packages the server's environment points at, must not be imported by those runs (issue #36 item
14). A real python (the base interpreter of the venv: user site-packages enabled, no sglang of its own), a planted
``sglang`` package that leaves a mark when imported."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from ansible_collections.llmops.sglang.plugins.module_utils import _server_deploy, server_preflight

PYTHON = os.path.join(sys.base_prefix, "bin", "python3")


class Failed(Exception):
    pass


class HostModule:
    """An AnsibleModule's run_command on this machine: real processes, with the cwd asked for."""
    check_mode = True

    def __init__(self, **params) -> None:
        self.params = params

    def run_command(self, argv, environ_update=None, cwd=None):
        done = subprocess.run(argv, capture_output=True, text=True, cwd=cwd, check=False,
                              env={**os.environ, **(environ_update or {})})
        return done.returncode, done.stdout, done.stderr

    def fail_json(self, **result):
        raise Failed(result["msg"])


def _plant(directory: Path, mark: Path) -> None:
    package = directory / "sglang"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text(f"open({str(mark)!r}, 'w').close()\n")


@pytest.fixture(params=["working_directory", "user_site"])
def planted(request, tmp_path):
    """The module params of a server whose working directory or user site-packages holds a planted sglang; the mark
    it leaves when imported."""
    mark = tmp_path / "imported-as-root"
    working_directory, user_base = tmp_path / "srv", tmp_path / "userbase"
    working_directory.mkdir()
    if request.param == "working_directory":
        _plant(working_directory, mark)
    else:
        user_site = subprocess.run([PYTHON, "-c", "import site; print(site.getusersitepackages())"], check=True,
                                   capture_output=True, text=True, env={"PYTHONUSERBASE": str(user_base)}).stdout
        _plant(Path(user_site.strip()), mark)
    params = {"name": "sglang", "python": PYTHON, "working_directory": str(working_directory),
              "environment": {"PYTHONUSERBASE": str(user_base)}, "server_args": {}, "model_path": "/m",
              "port": 30000, "host": "127.0.0.1", "unit_dir": str(tmp_path), "env_dir": str(tmp_path)}
    return params, mark


def test_sglangs_parser_check_does_not_import_a_planted_module(planted, monkeypatch):
    params, mark = planted
    monkeypatch.setattr(_server_deploy, "unit_state", lambda run, unit: type("State", (), {"main_pid": 0}))
    monkeypatch.setattr(_server_deploy, "preflight_errors", lambda run, p, *args, run_python, **kwargs:
                        server_preflight.sglang_parser_errors(run_python, p["python"], ["--port", "1"], {}))
    with pytest.raises(Failed, match="sglang"):  # this python has no sglang of its own
        _server_deploy.ServerDeployment(HostModule(**params), {}).preflight()
    assert not mark.exists(), "a module planted where another user can write ran as root"


def test_sglangs_help_does_not_import_a_planted_module(planted, monkeypatch):
    params, mark = planted
    monkeypatch.chdir(params["working_directory"])  # where a module starts when the login user's home is the unit's
    with pytest.raises(Failed, match="is SGLang installed there"):
        _server_deploy.ServerDeployment(HostModule(**params), {}).validate_flags()
    assert not mark.exists(), "a module planted where another user can write ran as root"
