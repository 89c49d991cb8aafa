# Copyright (c) llmops.sglang contributors
# Apache License 2.0 (see LICENSE)
"""moe_plan: the MoE stage's plan on one host (targets with force, the down kernel, the GPU's spec, the host's part in
the tuning cluster; what moe_tune.yml's Jinja decided before issue #41 item 4) and the action recording targets.json."""
from __future__ import annotations

import json
import types
from pathlib import Path

import pytest
from ansible.errors import AnsibleActionFail
from ansible.plugins.action import ActionBase

from ansible_collections.llmops.sglang.plugins.action.moe_plan import ActionModule
from ansible_collections.llmops.sglang.plugins.plugin_utils.controller_action import ControllerAction
from ansible_collections.llmops.sglang.plugins.plugin_utils.moe_plan import cluster_role, stage_plan, targets_plan

REPO = Path(__file__).resolve().parents[4]
QWEN = json.loads((REPO / "tests" / "fixtures" / "moe_configs" / "hf_configs" / "qwen3_5_moe_style_bf16.json").read_text())
RTX_PRO = "NVIDIA RTX PRO 6000 Blackwell Server Edition"
ROOT = "/opt/sglang/venv/lib/python3.11/site-packages/sglang/srt/layers/moe/moe_runner/triton_utils/configs/triton_3_6_0"
UP = "E=256,N=256,device_name=NVIDIA_RTX_PRO_6000_Blackwell_Server_Edition.json"
DOWN = "E=256,N=256,device_name=NVIDIA_RTX_PRO_6000_Blackwell_Server_Edition_down.json"
SPEC = {"mem_bandwidth_gbs": 1792, "smem_per_block": 101376}
ENV = {"model": {"config": QWEN}, "versions": {"triton": "3.6.0", "sglang": "0.5.11"},
       "tuner": {"scripts": ["tuning_fused_moe_triton.py", "tune_down_moe.py"]}}
GPUS = {"name": RTX_PRO, "count": 4, "spec": SPEC}
MISSING = [f"{ROOT}/{UP}", f"{ROOT}/{DOWN}"]


def plan(**changes):
    return stage_plan(**{"env": ENV, "gpus": GPUS, "server_args": {"tp_size": 4}, "missing": MISSING, "force": False,
                         "engine": "sglang", "host": "gpu1", "tune_hosts": [], **changes})


def test_the_targets_are_what_the_server_misses_checked_against_the_derivation():
    result = plan()
    assert result["plan"] == targets_plan(QWEN, 4, 1, RTX_PRO, "3.6.0", MISSING, installed_sglang="0.5.11")
    assert [target["file_name"] for target in result["targets"]] == [UP, DOWN]
    assert result["record"] == {**result["plan"], "tuned": result["targets"]}
    assert result["tunes_down"] is True and result["spec"] == SPEC
    assert result["cluster"] == {"hosts": [], "in_cluster": False, "head": "gpu1", "tunes_here": True}


def test_nothing_missing_tunes_nothing_unless_forced():
    assert plan(missing=[])["targets"] == [] and plan(missing=[])["tunes_down"] is False
    forced = plan(missing=[], force=True)
    assert [target["file_name"] for target in forced["targets"]] == [UP, DOWN]
    assert forced["record"]["targets"] == [] and forced["record"]["tuned"] == forced["targets"]


def test_the_down_kernel_needs_the_engine_or_the_releases_down_tuner():
    old = {**ENV, "tuner": {"scripts": ["tuning_fused_moe_triton.py"]}}
    assert plan(env=old)["tunes_down"] is False
    assert plan(env=old, engine="llmops")["tunes_down"] is True


def test_an_inventory_gpu_spec_overrides_the_gpus():
    assert plan(gpu_spec={"mem_bandwidth_gbs": 1000})["spec"] == {"mem_bandwidth_gbs": 1000}
    assert plan(gpus={"name": RTX_PRO})["spec"] is None


def test_the_cluster_head_tunes_for_the_others_and_a_host_outside_tunes_alone():
    assert cluster_role("gpu1", ["gpu1", "gpu2"]) == {"hosts": ["gpu1", "gpu2"], "in_cluster": True, "head": "gpu1",
                                                      "tunes_here": True}
    assert cluster_role("gpu2", ["gpu1", "gpu2"]) == {"hosts": ["gpu1", "gpu2"], "in_cluster": True, "head": "gpu1",
                                                      "tunes_here": False}
    assert cluster_role("gpu3", ["gpu1", "gpu2"]) == {"hosts": ["gpu1", "gpu2"], "in_cluster": False, "head": "gpu3",
                                                      "tunes_here": True}


def test_a_disagreement_and_bad_input_name_the_problem():
    with pytest.raises(ValueError, match="E=128"):
        plan(missing=[f"{ROOT}/{UP.replace('E=256', 'E=128')}"])
    with pytest.raises(ValueError, match="parsed config.json"):
        targets_plan("config.json", 4)
    with pytest.raises(ValueError, match="device_name"):
        targets_plan(QWEN, 4, triton_version="3.6.0")


def run_action(monkeypatch, args: dict, check_mode: bool = False) -> dict:
    """The action's run with these arguments, the options it is not given at their documented defaults."""
    options = {"gpu_spec": None, "server_args": {"tp_size": 4}, "missing": MISSING, "force": False, "engine": "sglang",
               "tune_hosts": ["gpu1", "gpu2"], "host": None, "env": ENV, "gpus": GPUS}
    monkeypatch.setattr(ActionBase, "run", lambda self, tmp=None, task_vars=None: {})
    monkeypatch.setattr(ControllerAction, "arguments", lambda self: {**options, **args})
    action = ActionModule.__new__(ActionModule)
    action._task = types.SimpleNamespace(check_mode=check_mode)
    return action.run(None, {"inventory_hostname": "gpu2"})


def test_the_action_records_targets_json_once(tmp_path, monkeypatch):
    result = run_action(monkeypatch, {"dir": str(tmp_path)})
    record = json.loads((tmp_path / "targets.json").read_text())
    assert record["tuned"] == result["targets"] and record["tuner_args"] == result["plan"]["tuner_args"]
    assert result["cluster"]["head"] == "gpu1" and result["cluster"]["tunes_here"] is False
    assert result["changed"] and result["written"] == [str(tmp_path / "targets.json")] and "record" not in result
    assert not run_action(monkeypatch, {"dir": str(tmp_path)})["changed"]


def test_the_action_in_check_mode_plans_and_writes_nothing(tmp_path, monkeypatch):
    result = run_action(monkeypatch, {"dir": str(tmp_path)}, check_mode=True)
    assert result["changed"] and result["targets"] and list(tmp_path.iterdir()) == []


def test_the_action_fails_naming_the_disagreement_and_writes_nothing(tmp_path, monkeypatch):
    with pytest.raises(AnsibleActionFail, match="(?s)moe_targets: .*E=128"):
        run_action(monkeypatch, {"dir": str(tmp_path), "missing": [f"{ROOT}/{UP.replace('E=256', 'E=128')}"]})
    with pytest.raises(AnsibleActionFail, match="sglang_env_facts"):
        run_action(monkeypatch, {"dir": str(tmp_path), "env": {"model": {}}})
    assert list(tmp_path.iterdir()) == []
