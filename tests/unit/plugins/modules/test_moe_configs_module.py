# Copyright (c) llmops.sglang contributors
# Apache License 2.0 (see LICENSE)
"""The moe_configs and moe_configs_info modules run through their real main(): a stand-in SGLang python
answers the environment probe with a package config directory under tmp_path; files are really installed,
backed up, restored and listed."""
from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from ansible.module_utils.testing import patch_module_args

from ansible_collections.llmops.sglang.plugins.module_utils import moe_install, server_guard, server_guard_program
from ansible_collections.llmops.sglang.plugins.modules import moe_configs, moe_configs_info

FIXTURES = Path(__file__).resolve().parents[3] / "fixtures" / "moe_configs"
H200_UP = "E=257,N=256,device_name=NVIDIA_H200,dtype=fp8_w8a8,block_shape=[128, 128].json"
H200_DOWN = "E=257,N=256,device_name=NVIDIA_H200,dtype=fp8_w8a8,block_shape=[128, 128]_down.json"
ENTRY = {"BLOCK_SIZE_M": 16, "BLOCK_SIZE_N": 64, "BLOCK_SIZE_K": 128, "GROUP_SIZE_M": 1, "num_warps": 4, "num_stages": 4}
# What `python -c PROBE` prints for an SGLang 0.5.11 + Triton 3.6.0 venv whose config module lives in {module_dir}.
FAKE_PYTHON = """#!{python}
import json
print(json.dumps({{"versions": {{"python": "3.11.2", "sglang": "0.5.11", "triton": "3.6.0", "torch": None, "ray": None}},
                  "config_module_dir": "{module_dir}"}}))
"""


@pytest.fixture
def host(tmp_path: Path) -> dict:
    """A package config module dir with one built-in Triton 3.5.1 config, and the fake SGLang python."""
    module_dir = tmp_path / "site-packages" / "triton_utils"
    builtin = module_dir / "configs" / "triton_3_5_1"
    builtin.mkdir(parents=True)
    (builtin / H200_UP).write_bytes((FIXTURES / H200_UP).read_bytes())
    python = tmp_path / "python"
    python.write_text(FAKE_PYTHON.format(python=sys.executable, module_dir=module_dir))
    python.chmod(0o755)
    tuned = tmp_path / "tuned"
    tuned.mkdir()
    for name in (H200_UP, H200_DOWN):
        (tuned / name).write_bytes((FIXTURES / name).read_bytes())
    return {"python": str(python), "configs": module_dir / "configs", "tuned": tuned,
            "backup_root": str(tmp_path / "backups"), "tmp": tmp_path}


def run_module(host: dict, capsys: pytest.CaptureFixture, check: bool = False, diff: bool = False, **args) -> tuple[int, dict]:
    args = {"python": host["python"], "backup_root": host["backup_root"], "_ansible_check_mode": check,
            "_ansible_diff": diff, "_ansible_remote_tmp": str(host["tmp"] / "remote_tmp"),
            "_ansible_keep_remote_files": False, **args}
    with patch_module_args(args), pytest.raises(SystemExit) as exit_info:
        moe_configs.main()
    return exit_info.value.code, json.loads(capsys.readouterr().out)


def tuned_pair(host: dict) -> list[dict]:
    return [{"src": str(host["tuned"] / H200_UP)}, {"src": str(host["tuned"] / H200_DOWN)}]


def test_install_into_the_package_dir_then_rerun_is_unchanged(host, capsys):
    install_dir = host["configs"] / "triton_3_6_0"
    code, result = run_module(host, capsys, configs=tuned_pair(host))
    assert code == 0, result
    assert result["changed"] is True and result["install_dir"] == str(install_dir)
    assert result["created"] == [str(install_dir / H200_UP), str(install_dir / H200_DOWN)] and result["replaced"] == []
    assert (install_dir / H200_DOWN).read_bytes() == (FIXTURES / H200_DOWN).read_bytes()
    assert [e["file_name"] for e in result["listing"]["triton_3_6_0"]] == [H200_UP, H200_DOWN]
    assert Path(result["backup_dir"], "manifest.json").exists()
    code, again = run_module(host, capsys, configs=tuned_pair(host))
    assert code == 0 and again["changed"] is False and again["backup_dir"] is None


def test_check_mode_reports_and_diffs_without_writing(host, capsys):
    run_module(host, capsys, configs=tuned_pair(host))
    target = host["configs"] / "triton_3_6_0" / H200_UP
    before = target.read_bytes()
    code, result = run_module(host, capsys, check=True, diff=True,
                              configs=[{"name": H200_UP, "content": {"1": ENTRY}}])
    assert code == 0 and result["changed"] is True
    assert result["replaced"] == [str(target)] and result["backup_dir"] is None
    assert result["diff"][0]["before"] == before.decode() and '"BLOCK_SIZE_N": 64' in result["diff"][0]["after"]
    assert target.read_bytes() == before


def test_invalid_json_is_refused_with_the_reason_and_nothing_installed(host, capsys):
    broken = host["tuned"] / "E=256,N=256,device_name=NVIDIA_H200.json"
    broken.write_text('{"1": {"BLOCK_SIZE_M": 16,')
    code, result = run_module(host, capsys, configs=[{"src": str(host["tuned"] / H200_UP)}, {"src": str(broken)}])
    assert code == 1
    assert result["msg"].startswith("nothing was installed; fix these configs")
    assert result["errors"] == [f"configs[1] ({broken}): not valid JSON: Expecting property name enclosed in double "
                                "quotes: line 1 column 27 (char 26)"]
    assert not (host["configs"] / "triton_3_6_0").exists()


def test_managed_dir_is_seeded_and_restored_exactly(host, capsys):
    managed = host["tmp"] / "moe"
    # sglang 0.5.11 with Triton 3.6.0 never falls back to triton_3_5_1: a down file alone would run against
    # SGLang's default up config (BLOCK_SIZE_M 64 for block-FP8) and crash on its assert.
    code, refused = run_module(host, capsys, config_dir=str(managed), configs=[{"src": str(host["tuned"] / H200_DOWN)}])
    assert code == 1 and "BLOCK_SIZE_M differs from SGLang's default up config" in refused["msg"]
    assert "sglang 0.5.11 asserts they are equal" in refused["msg"] and not managed.exists()
    code, result = run_module(host, capsys, config_dir=str(managed), configs=tuned_pair(host))
    assert code == 0, result
    assert result["seeded"] == [str(managed / "configs" / "triton_3_5_1" / H200_UP)]
    assert sorted(result["listing"]) == ["triton_3_5_1", "triton_3_6_0"]
    code, restored = run_module(host, capsys, state="restored", backup_dir=result["backup_dir"])
    assert code == 0 and restored["changed"] is True
    assert not managed.exists()
    code, again = run_module(host, capsys, state="restored", backup_dir=result["backup_dir"])
    assert again["changed"] is False


def test_info_module_lists_with_an_explicit_triton_dir(host, capsys):
    args = {"python": host["python"], "triton_dir": "triton_3_5_1", "_ansible_remote_tmp": str(host["tmp"] / "remote_tmp"),
            "_ansible_keep_remote_files": False}
    with patch_module_args(args), pytest.raises(SystemExit) as exit_info:
        moe_configs_info.main()
    code, result = exit_info.value.code, json.loads(capsys.readouterr().out)
    assert code == 0 and result["changed"] is False
    assert result["install_dir"] == str(host["configs"] / "triton_3_5_1")
    assert result["listing"]["triton_3_5_1"][0]["E"] == 257


def test_src_and_content_together_are_rejected(host, capsys):
    code, result = run_module(host, capsys, configs=[{"src": "/x.json", "name": "y", "content": {"1": ENTRY}}])
    assert code == 1 and "mutually exclusive: src|content" in result["msg"]


@pytest.fixture
def armed_guard(tmp_path, monkeypatch) -> Path:
    """An armed guard of service sglang under a guard root in tmp_path: its state as server_guard writes it (the unit
    and environment file snapshot) and its lock."""
    root = tmp_path / "guard"
    monkeypatch.setattr(server_guard, "GUARD_ROOT", str(root))
    (root / "sglang").mkdir(parents=True)
    state = {"service": "sglang.service", "armed_by": "R1/moe_tune", "expires_at": 1.0, "work_dir": str(tmp_path / "w"),
             "files": [{"path": str(tmp_path / "sglang.service"), "source": None, "mode": 0o644},
                       {"path": str(tmp_path / "sglang.env"), "source": None, "mode": 0o600}]}
    (root / "sglang" / "state.json").write_text(json.dumps(state))
    return root / "sglang" / "state.json"


def test_the_hosts_guard_learns_what_to_put_back_before_the_first_config_is_replaced(host, capsys, armed_guard,
                                                                                    monkeypatch):
    """Issue 36 item 5: a controller lost between the install and a later guard task left the unadopted tuned configs
    served after the guard restored the unit. The install itself tells the guard, before its first change."""
    install_dir = host["configs"] / "triton_3_6_0"
    install_dir.mkdir(parents=True)
    (install_dir / H200_UP).write_text("the adopted config\n")
    seen_at_first_change = []
    real_write = moe_install.write_atomically

    def write(path, content, *args):
        if path == str(install_dir / H200_UP):
            seen_at_first_change.append(json.loads(armed_guard.read_text())["files"][2:])
        return real_write(path, content, *args)
    monkeypatch.setattr(moe_install, "write_atomically", write)
    code, result = run_module(host, capsys, configs=tuned_pair(host), guard="sglang")
    assert code == 0, result
    entries = [{"path": str(install_dir / H200_UP), "source": str(Path(result["backup_dir"], "files", "0")),
                "mode": 0o644}, {"path": str(install_dir / H200_DOWN), "source": None, "mode": 0o644}]
    assert seen_at_first_change == [entries], "the guard knew before the first config was replaced"
    # the controller is gone now: the guard fires and the server restarts on the adopted configs
    server_guard_program.put_back(json.loads(armed_guard.read_text())["files"][2:])
    assert (install_dir / H200_UP).read_text() == "the adopted config\n" and not (install_dir / H200_DOWN).exists()


def test_a_guard_that_is_not_armed_fails_the_install_with_nothing_changed(host, capsys, armed_guard):
    armed_guard.unlink()
    code, result = run_module(host, capsys, configs=tuned_pair(host), guard="sglang")
    assert code == 1 and result["msg"].startswith("guard: no guard of sglang.service is armed on this host")
    assert not (host["configs"] / "triton_3_6_0").exists()
    assert list(Path(host["backup_root"]).iterdir()) == [], "its backup went too"
    code, result = run_module(host, capsys, configs=tuned_pair(host), guard="sglang", backup=False)
    assert code == 1 and result["msg"].startswith("guard: the guard restores from the install's backup")
