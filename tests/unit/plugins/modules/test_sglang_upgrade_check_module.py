# Copyright (c) llmops.sglang contributors
# Apache License 2.0 (see LICENSE)
"""sglang_upgrade_check through its real main(): the emulator's 0.5.23 (Triton 3.6.0, the serving release) and the
future 0.5.24 (Triton 3.9.0, no config directory for it) really installed side by side by sglang_release's logic
from the emulator's wheelhouse; tuned configs of the demo shape where a real host keeps them; each release's own
lookup code answers, or the model where that code cannot run."""
from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
from ansible.module_utils.testing import patch_module_args

from ansible_collections.llmops.sglang.plugins.module_utils._sglang_release import ensure_release
from ansible_collections.llmops.sglang.plugins.module_utils.sglang_env import probe_sglang
from ansible_collections.llmops.sglang.plugins.modules import moe_configs, sglang_upgrade_check
from tests.emulator.build import build_wheelhouse

REPO = Path(__file__).resolve().parents[4]
MODEL = REPO / "tests" / "emulator" / "models" / "Qwen3.5-122B-A10B"
GPU = "NVIDIA RTX PRO 6000 Blackwell Server Edition"
UP = "E=256,N=256,device_name=NVIDIA_RTX_PRO_6000_Blackwell_Server_Edition.json"
DOWN = UP.replace(".json", "_down.json")
TUNED = {"1": {"BLOCK_SIZE_M": 16, "BLOCK_SIZE_N": 64, "BLOCK_SIZE_K": 128, "GROUP_SIZE_M": 1, "num_warps": 4,
               "num_stages": 3}}
pytestmark = pytest.mark.skipif(not os.access("/usr/bin/python3", os.X_OK), reason="needs Debian's python3 (with venv)")


def _run(argv, *, changes=False, check=False, environ=None, cwd=None):
    """CommandRunner's contract for the release logic (no module: the venvs are fixtures)."""
    result = subprocess.run([str(arg) for arg in argv], capture_output=True, text=True, check=False,
                            env={**os.environ, **(environ or {})})
    if check and result.returncode:
        raise AssertionError(result.stderr)
    return result.returncode, result.stdout, result.stderr


@pytest.fixture(name="releases", scope="module")
def releases_fixture(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    wheelhouse = build_wheelhouse(REPO / ".cache" / "emulator-wheelhouse" / "wheels")
    venvs = tmp_path_factory.mktemp("venvs")
    pythons = {}
    for version in ("0.5.11", "0.5.23", "0.5.24"):
        params = {"version": version, "venvs_dir": str(venvs), "wheelhouse": str(wheelhouse),
                  "base_python": "/usr/bin/python3"}
        pythons[version] = ensure_release(_run, params, check_mode=False)["python"]
    return pythons


def package_configs(python: str) -> Path:
    """The configs directory of the release's own config module (where it moved between releases)."""
    return Path(probe_sglang(_run, python)["config_module_dir"], "configs")


def tune(configs: Path, triton_dir: str) -> Path:
    target = configs / triton_dir
    target.mkdir(parents=True, exist_ok=True)
    for name in (UP, DOWN):
        (target / name).write_text(json.dumps(TUNED))
    return target


def run_module(capsys, releases, **args) -> tuple[int, dict]:
    args = {"python": releases["0.5.24"], "current_python": releases["0.5.23"], "model_path": str(MODEL),
            "gpu_name": GPU, "server_args": {"tp_size": 4}, **args}
    with patch_module_args(args), pytest.raises(SystemExit) as exit_info:
        sglang_upgrade_check.main()
    return exit_info.value.code, json.loads(capsys.readouterr().out)


def by_kernel(result: dict) -> dict[str, dict]:
    return {row["kernel"]: row for row in result["moe"]}


def test_configs_in_the_old_venv_are_lost_by_the_new_one(releases, capsys):
    tuned = tune(package_configs(releases["0.5.23"]), "triton_3_6_0")
    try:
        code, result = run_module(capsys, releases)
    finally:
        for name in (UP, DOWN):
            (tuned / name).unlink()
    assert code == 0, result
    assert result["changed"] is False and result["ready"] is False
    assert result["lookup_source"] == {"current": "release", "new": "release"}
    assert result["versions"]["current"]["triton"] == "3.6.0" and result["versions"]["new"]["triton"] == "3.9.0"
    rows = by_kernel(result)
    assert rows["up"]["file_name"] == UP and rows["down"]["file_name"] == DOWN
    assert rows["up"]["current"] == {"status": "used", "path": str(tuned / UP), "reuses_up_config": False}
    assert rows["up"]["new"]["status"] == "missing" and rows["up"]["verdict"] == "lost"
    assert rows["down"]["verdict"] == "lost"
    assert any(line.startswith(f"up {UP}: lost: MISSES it") for line in result["summary"])
    assert rows["up"]["action"] == "retune" and result["carry"] == []
    assert rows["up"]["action_reason"] == "it was tuned for triton_3_6_0, the new release runs Triton 3.9.0"
    assert [row["file_name"] for row in result["retune"]] == [UP, DOWN]


def test_a_config_for_the_same_triton_and_kernel_is_carried_and_then_loaded(releases, capsys, tmp_path):
    """0.5.11 -> 0.5.23, both on Triton 3.6.0 with the same kernel source: the configs in the old venv's package are
    lost by the new venv, carried by moe_configs as the plan says, and then the new release's own lookup loads them."""
    tuned = tune(package_configs(releases["0.5.11"]), "triton_3_6_0")
    carried = package_configs(releases["0.5.23"]) / "triton_3_6_0"
    try:
        code, result = run_module(capsys, releases, python=releases["0.5.23"], current_python=releases["0.5.11"])
        assert code == 0, result
        assert [(row["verdict"], row["action"]) for row in result["moe"]] == [("lost", "carry"), ("lost", "carry")]
        assert by_kernel(result)["up"]["action_reason"].startswith("same Triton (3.6.0) and kernel source (")
        assert result["carry"] == [{"src": str(tuned / UP), "name": UP}, {"src": str(tuned / DOWN), "name": DOWN}]
        assert result["retune"] == [] and result["ready"] is False
        assert result["versions"]["new"]["kernel_source_sha256"] == result["versions"]["current"]["kernel_source_sha256"]
        install = {"python": releases["0.5.23"], "configs": result["carry"], "backup_root": str(tmp_path / "backups")}
        with patch_module_args(install), pytest.raises(SystemExit) as exit_info:
            moe_configs.main()
        installed = json.loads(capsys.readouterr().out)
        assert exit_info.value.code == 0 and installed["installed"] == [str(carried / UP), str(carried / DOWN)]
        code, after = run_module(capsys, releases, python=releases["0.5.23"], current_python=releases["0.5.11"])
        assert [(row["verdict"], row["new"]["path"]) for row in after["moe"]] == [
            ("kept", str(carried / UP)), ("kept", str(carried / DOWN))]
        assert after["carry"] == [] and after["ready"] is True
    finally:
        for name in (UP, DOWN):
            (tuned / name).unlink()
            (carried / name).unlink(missing_ok=True)


def test_a_shared_config_dir_is_read_through_the_new_releases_fallback(releases, capsys, tmp_path):
    tuned = tune(tmp_path / "moe" / "configs", "triton_3_6_0")
    code, result = run_module(capsys, releases, moe_config_dir=str(tmp_path / "moe"))
    assert code == 0, result
    rows = by_kernel(result)
    assert rows["up"]["current"]["status"] == "used"
    assert rows["up"]["new"] == {"status": "fallback", "path": str(tuned / UP), "reuses_up_config": False}
    assert rows["up"]["verdict"] == "fallback" and rows["down"]["verdict"] == "fallback"
    assert result["ready"] is True and result["lookup_source"]["new"] == "release"


def test_only_an_up_config_for_the_new_triton_is_reused_for_down(releases, capsys, tmp_path):
    tuned = tune(tmp_path / "moe" / "configs", "triton_3_9_0")
    (tuned / DOWN).unlink()
    code, result = run_module(capsys, releases, moe_config_dir=str(tmp_path / "moe"))
    rows = by_kernel(result)
    assert code == 0 and rows["up"]["new"] == {"status": "used", "path": str(tuned / UP), "reuses_up_config": False}
    assert rows["up"]["current"]["status"] == "fallback" and rows["up"]["verdict"] == "kept"  # 0.5.23 falls back to it
    assert rows["down"]["new"] == {"status": "missing", "path": None, "reuses_up_config": True}
    assert rows["down"]["verdict"] == "untuned"


def test_the_model_answers_where_the_release_cannot_and_says_so(releases, capsys, tmp_path):
    """A release whose lookup cannot run (here: its python refuses the lookup program) is modelled (moe_rules)."""
    broken = tmp_path / "python"
    broken.write_text(f'#!/bin/sh\ncase "$2" in *get_moe_configs*) echo "ImportError: no CUDA" >&2; exit 1;; esac\n'
                      f'exec {releases["0.5.24"]} "$@"\n')
    broken.chmod(0o755)
    tuned = tune(tmp_path / "moe" / "configs", "triton_3_6_0")
    code, result = run_module(capsys, releases, python=str(broken), moe_config_dir=str(tmp_path / "moe"))
    assert code == 0, result
    assert result["lookup_source"] == {"current": "release", "new": "model"}
    assert "no CUDA" in result["lookup_model_reason"]["new"]
    assert by_kernel(result)["up"]["new"] == {"status": "fallback", "path": str(tuned / UP), "reuses_up_config": False}


def test_flags_the_new_release_refuses_name_the_replacement(releases, capsys):
    args = {"tp_size": 4, "enable_flashinfer_allreduce_fusion": True, "cuda_graph_max_bs": 48}
    code, result = run_module(capsys, releases, server_args=args)
    assert code == 0 and result["ready"] is False
    errors = result["flags"]["errors"]
    assert ("server_args.enable_flashinfer_allreduce_fusion: SGLang 0.5.24 has no --enable-flashinfer-allreduce-fusion "
            "(a deprecated alias from 0.5.14, no longer accepted); use --flashinfer-allreduce-fusion-backend=auto"
            in errors[0]), errors
    assert errors[1].startswith("server_args.cuda_graph_max_bs: SGLang 0.5.24 has no --cuda-graph-max-bs (a deprecated "
                                "alias from 0.5.14, removed in 0.5.20); use --cuda-graph-max-bs-decode=48")
    assert result["flags"]["removed_options"] == ["--enable-flashinfer-allreduce-fusion"]
    code, same = run_module(capsys, releases, python=releases["0.5.23"], server_args=args)
    assert same["flags"]["warnings"][0].startswith("server_args.enable_flashinfer_allreduce_fusion: in SGLang 0.5.23 ")


def test_bad_input_names_the_field(releases, capsys, tmp_path):
    code, result = run_module(capsys, releases, model_path=str(tmp_path))
    assert code == 1 and result["msg"].startswith(f"model_path: cannot read {tmp_path}/config.json")
    code, result = run_module(capsys, releases, python=str(tmp_path / "nope"))
    assert code == 1 and result["msg"].startswith(f"python: {tmp_path}/nope does not exist")
    code, result = run_module(capsys, releases, current_python="/usr/bin/python3")
    assert code == 1 and result["msg"].startswith("current_python: sglang is not installed for /usr/bin/python3")
