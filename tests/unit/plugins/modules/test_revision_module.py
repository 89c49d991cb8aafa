"""The revision module through its real main(): a record on a host's files, the refusals before any change."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
from ansible.module_utils.testing import patch_module_args

from ansible_collections.llmops.sglang.plugins.modules import revision


@pytest.fixture
def host(tmp_path: Path) -> dict:
    units, env = tmp_path / "units", tmp_path / "env"
    units.mkdir()
    env.mkdir()
    (units / "sglang.service").write_text("[Service]\nExecStart=/bin/true\n")
    return {"unit_dir": str(units), "env_dir": str(env), "store_dir": str(tmp_path / "revisions"), "tmp": tmp_path}


def run_module(host: dict, capsys, check: bool = False, **args) -> tuple[int, dict]:
    args = {"unit_dir": host["unit_dir"], "env_dir": host["env_dir"], "store_dir": host["store_dir"],
            "_ansible_check_mode": check, "_ansible_remote_tmp": str(host["tmp"] / "remote_tmp"),
            "_ansible_keep_remote_files": False, **args}
    with patch_module_args(args), pytest.raises(SystemExit) as exit_info:
        revision.main()
    return exit_info.value.code, json.loads(capsys.readouterr().out)


def test_a_record_names_its_revision_and_its_files(host, capsys):
    config = str(host["tmp"] / "E=8,N=64.json")
    rc, result = run_module(host, capsys, paths=[config], label="rollout R")
    assert rc == 0 and result["changed"] and result["revision"] == "000001"
    assert result["files"] == [{"path": f"{host['unit_dir']}/sglang.service", "present": True},
                               {"path": f"{host['env_dir']}/sglang.env", "present": False},
                               {"path": config, "present": False}]
    assert run_module(host, capsys, keep=1)[1]["pruned"] == ["000001"]


def test_check_mode_records_nothing(host, capsys):
    rc, result = run_module(host, capsys, check=True)
    assert rc == 0 and result["revision"] is None and not Path(host["store_dir"]).exists()


def test_an_unknown_revision_is_refused_before_anything_changes(host, capsys):
    run_module(host, capsys)
    rc, result = run_module(host, capsys, state="restored", revision="000009")
    assert rc == 1 and result["msg"].startswith("revision 000009 is not in ") and "(recorded: 000001)" in result["msg"]
    assert result["summary"].startswith("NOT back on revision 000009")


@pytest.mark.parametrize("name", ["..", "", "sglang/a"])
def test_a_name_that_is_no_service_is_refused(host, capsys, name):
    rc, result = run_module(host, capsys, name=name)
    assert rc == 1 and result["msg"].startswith("name: ") and not Path(host["store_dir"]).exists()
