# Copyright (c) llmops.sglang contributors
# Apache License 2.0 (see LICENSE)
"""moe_plan: the MoE stage's plan on one host (targets with force, the down kernel, the GPU's spec, the host's part in
the tuning cluster, the tuner tasks' arguments, the cluster's same-targets check and the estimate; what moe_tune.yml's
Jinja decided before issue #41 item 4) and the action recording targets.json and estimate.json."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
from ansible.errors import AnsibleActionFail

from ansible_collections.llmops.sglang.plugins.action.moe_plan import ActionModule
from ansible_collections.llmops.sglang.plugins.filter.moe_cost_estimate import moe_cost_estimate
from ansible_collections.llmops.sglang.plugins.plugin_utils.moe_plan import (
    cluster_role, host_plan, same_targets, stage_estimate, stage_plan, targets_plan, tuner_arguments)
from tests.unit.plugins.action.controller import run_controller_action

REPO = Path(__file__).resolve().parents[4]
QWEN = json.loads((REPO / "tests" / "fixtures" / "moe_configs" / "hf_configs" / "qwen3_5_moe_style_bf16.json").read_text())
RTX_PRO = "NVIDIA RTX PRO 6000 Blackwell Server Edition"
ROOT = "/opt/sglang/venv/lib/python3.11/site-packages/sglang/srt/layers/moe/moe_runner/triton_utils/configs/triton_3_6_0"
UP = "E=256,N=256,device_name=NVIDIA_RTX_PRO_6000_Blackwell_Server_Edition.json"
DOWN = "E=256,N=256,device_name=NVIDIA_RTX_PRO_6000_Blackwell_Server_Edition_down.json"
SPEC = {"mem_bandwidth_gbs": 1792, "smem_per_block": 101376}
ENV = {"model": {"config": QWEN, "moe_shape": {"block_shape": None}}, "versions": {"triton": "3.6.0", "sglang": "0.5.11"},
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


# The stage's settings as the role's defaults give them, and the adopted configuration, measured by the baseline.
SETTINGS = {"engine": "sglang", "batch_sizes": None, "search_space": "full", "work_dir": "/var/lib/llmops-sglang/moe-tune",
            "timeout": 86400, "force": False, "tune_hosts": ["gpu1", "gpu2"], "cache": True, "cache_dir": None}
ADOPTED = {"stage": "baseline", "args": {"tp_size": 4}, "environment": {}, "sweep_file": "baseline/gpu2/sweep.json",
           "facts_file": "baseline/gpu2/facts.json"}


def run_action(monkeypatch, args: dict, check_mode: bool = False) -> dict:
    """The action's run with these arguments, the options it is not given at their documented defaults; the run
    directory beside the stage's ``dir`` holds the adopted configuration's facts (``missing`` the configs they miss)."""
    run_dir = Path(f"{args['dir']}-run")
    (run_dir / "baseline" / "gpu2").mkdir(parents=True, exist_ok=True)
    (run_dir / "baseline" / "gpu2" / "facts.json").write_text(json.dumps({"missing_moe_configs": args.pop("missing", MISSING)}))
    options = {"step": "targets", "gpu_spec": None, "run_dir": str(run_dir), "adopted": ADOPTED, "settings": SETTINGS,
               "source_dir": None, "model_path": "/models/qwen", "host": None, "env": ENV, "gpus": GPUS, "plan": None,
               "plans": None, "up": None}
    return run_controller_action(monkeypatch, ActionModule, {**options, **args}, check_mode=check_mode,
                                 task_vars={"inventory_hostname": "gpu2"})


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


def tuner(**changes):
    """tuner_arguments of the demo's targets (up and down) with the role's default settings."""
    targets = [{"kernel": "up", "file_name": UP}, {"kernel": "down", "file_name": DOWN}]
    return tuner_arguments(**{"settings": SETTINGS, "targets": targets, "tuner_args": ["--tp-size", "4"], "spec": SPEC,
                              "server_args": {"tp_size": 4, "speculative_num_draft_tokens": 4},
                              "facts": {"max_running_requests": 48, "chunked_prefill_size": 8192},
                              "source_dir": None, "model_path": "/models/qwen", "cache_root": "/runs", **changes})


def test_the_tuner_tasks_share_the_plans_arguments_and_each_kernel_adds_its_own():
    arguments = tuner()
    common = {"engine": "sglang", "cache": True, "cache_dir": "/runs/cache/moe-engine", "model_path": "/models/qwen",
              "tp_size": 4, "ep_size": 1, "tuner_args": ["--tp-size", "4"], "work_dir": "/var/lib/llmops-sglang/moe-tune",
              "timeout": 86400}
    assert arguments["up"] == {**common, "kernel": "up", "expected_file_name": UP, "max_running_requests": 48,
                               "chunked_prefill_size": 8192, "speculative_num_draft_tokens": 4, "search_space": "full",
                               "smem_per_block": 101376}
    # SGLang's down screener has its own space; the benchmark measures whatever configs are installed.
    assert arguments["down"] == {**common, "kernel": "down"}
    assert arguments["benchmark"] == {**common, "mode": "benchmark"}


def test_what_is_not_known_is_left_to_the_tuners_defaults():
    arguments = tuner(facts={}, spec=None, server_args={}, settings={**SETTINGS, "batch_sizes": [1, 64], "cache": None})
    assert arguments["up"]["batch_sizes"] == [1, 64] and arguments["up"]["tp_size"] == 1
    assert not {"max_running_requests", "chunked_prefill_size", "speculative_num_draft_tokens", "smem_per_block",
                "cache", "source_dir"} & set(arguments["up"])


def test_the_engine_tunes_down_over_the_up_tasks_space_and_caches_where_told():
    arguments = tuner(settings={**SETTINGS, "engine": "llmops", "search_space": "prefiltered", "cache_dir": "/cache"})
    assert arguments["down"]["search_space"] == "prefiltered" and arguments["down"]["smem_per_block"] == 101376
    assert arguments["up"]["engine"] == "llmops" and arguments["benchmark"]["cache_dir"] == "/cache"


def test_tuner_arguments_name_what_they_lack():
    with pytest.raises(ValueError, match="tuning_run_moe lacks work_dir, timeout"):
        tuner(settings={"search_space": "full"})
    with pytest.raises(ValueError, match="no up kernel's config"):
        tuner(targets=[{"kernel": "down", "file_name": DOWN}])
    assert tuner(targets=[], settings={}) == {}  # nothing to tune: no tuner task runs


def test_the_cluster_hosts_must_need_the_same_files():
    same_targets({"gpu1": plan(), "gpu2": plan()})
    with pytest.raises(ValueError, match=f"gpu1 -> {UP}, {DOWN}; gpu2 -> ; tune these hosts separately"):
        same_targets({"gpu1": plan(), "gpu2": plan(missing=[])})


UP_PLAN = {"batch_sizes": [1, 2, 4, 8], "search_space": {"mode": "full", "total": 1920, "kept": 1920}, "chunk_size": 4,
           "chunks": [[1, 2, 4, 8]], "compile_workers": 15, "devices": ["0", "1", "2", "3"]}


def host(**changes):
    return host_plan(**{"env": ENV, "gpus": GPUS, "gpu_spec": None, "adopted": ADOPTED,
                        "facts": {"missing_moe_configs": MISSING}, "reference_cost": {"real_s": 480.0},
                        "settings": SETTINGS, "host": "gpu1", "source_dir": None, "model_path": "/models/qwen",
                        "cache_root": "/runs", **changes})


def test_the_estimate_spreads_the_tuner_over_every_tuning_host():
    alone = host(settings={**SETTINGS, "tune_hosts": []})
    assert stage_estimate(UP_PLAN, alone, []) == moe_cost_estimate(
        UP_PLAN, workers=4, down=True, reference_cost={"real_s": 480.0}, facts={"missing_moe_configs": MISSING},
        requested_args={"tp_size": 4}, environment={})
    head = host()
    assert stage_estimate(UP_PLAN, head, [head, head])["workers"] == 8
    engine = host(settings={**SETTINGS, "engine": "llmops"})
    assert stage_estimate(UP_PLAN, engine, [engine, engine])["engine_gpus"] == 8
    assert stage_estimate(UP_PLAN, {**engine, "cluster": alone["cluster"]}, [])["engine_gpus"] == 4


def test_the_action_plans_from_the_adopted_facts_and_says_where_the_configs_are_kept(tmp_path, monkeypatch):
    result = run_action(monkeypatch, {"dir": str(tmp_path)})
    run_dir = Path(f"{tmp_path}-run")
    assert result["tuner"]["up"]["expected_file_name"] == UP and result["tuner"]["up"]["cache_dir"] == f"{run_dir.parent}/cache/moe-engine"
    assert result["configs_dir"] == str(run_dir / "moe_tune" / "gpu2" / "configs")
    assert result["head_configs_dir"] == str(run_dir / "moe_tune" / "gpu1" / "configs")
    assert result["gpu_count"] == 4 and result["cost_inputs"]["reference_cost"] is None  # the baseline's cost.json is not there
    (run_dir / "baseline" / "gpu2" / "facts.json").unlink()
    with pytest.raises(AnsibleActionFail, match="facts .*baseline/gpu2/facts.json are missing; .* -e force=baseline"):
        ActionModule.run(ActionModule.__new__(ActionModule), None, {"inventory_hostname": "gpu2"})


def test_the_action_checks_the_cluster_and_records_the_estimate(tmp_path, monkeypatch):
    head = host()
    with pytest.raises(AnsibleActionFail, match="step=cluster: tuning_run_moe.tune_hosts need the same"):
        run_action(monkeypatch, {"dir": str(tmp_path), "step": "cluster", "plan": head, "plans": [head, host(facts={})]})
    assert not run_action(monkeypatch, {"dir": str(tmp_path), "step": "cluster", "plan": head, "plans": [head, head]})["changed"]
    result = run_action(monkeypatch, {"dir": str(tmp_path), "step": "estimate", "plan": head, "plans": [head, head],
                                      "up": UP_PLAN})
    assert json.loads((tmp_path / "estimate.json").read_text()) == result["estimate"] == stage_estimate(UP_PLAN, head, [head, head])
    assert result["path"] == str(tmp_path / "estimate.json") and result["changed"]
    with pytest.raises(AnsibleActionFail, match="step=estimate needs up"):
        run_action(monkeypatch, {"dir": str(tmp_path), "step": "estimate", "plan": head, "plans": []})
