# Copyright (c) llmops.sglang contributors
# Apache License 2.0 (see LICENSE)
"""moe_records: the MoE stage's evidence records built from its tasks' results (what moe_tune.yml's Jinja built before
issue #41 item 4), and the action writing them into the stage's directory."""
from __future__ import annotations

import json

import pytest
from ansible.errors import AnsibleActionFail

from ansible_collections.llmops.sglang.plugins.action.moe_records import ActionModule
from ansible_collections.llmops.sglang.plugins.module_utils.moe_roofline import kernel_table_document
from ansible_collections.llmops.sglang.plugins.plugin_utils.moe_records import (
    cluster_record, evidence_records, failure, planned, stage_details)
from tests.unit.plugins.action.controller import run_controller_action

# Qwen3.5-122B-A10B (tests/emulator/models) at TP=4 on an RTX PRO 6000 (1792 GB/s).
SHAPE = {"num_experts": 256, "topk": 8, "hidden_size": 3072, "moe_intermediate_size": 1024, "dtype": "bfloat16",
         "quant_method": None}
UP = {"changed": True, "output_file": "/var/lib/llmops/moe/E=256,N=256,device_name=NVIDIA_RTX_PRO_6000.json",
      "duration_s": 120.5, "chunk_size": 2, "search_space": {"BLOCK_SIZE_M": [16, 32]}, "batch_sizes": [1, 64],
      "batch_sizes_reason": "up to max_running_requests 48", "gpus_used": 8, "hosts_used": ["10.0.0.1", "10.0.0.2"],
      "placements": [{"workers_per_host": {"10.0.0.1": 4, "10.0.0.2": 4},
                      "shards": [{"ip": "10.0.0.1", "gpus": 4}, {"ip": "10.0.0.2", "gpus": 4}]},
                     {"workers_per_host": {"10.0.0.1": 4}}]}
DOWN = {"changed": True, "output_file": "/var/lib/llmops/moe/E=256,N=256,device_name=NVIDIA_RTX_PRO_6000_down.json",
        "duration_s": 60.0}
SKIPPED = {"changed": False, "skipped": True, "skip_reason": "Conditional result was False"}
BEFORE = {"kernel_times": {"1": {"kernel_time_us": 38.1}, "64": {"kernel_time_us": 812.2}}, "duration_s": 10.0}
AFTER = {"kernel_times": {"1": {"kernel_time_us": 37.1}, "64": {"kernel_time_us": 727.7}}, "duration_s": 9.0}
INSTALLED = {"changed": True, "installed": ["/opt/configs/triton_3_6_0/E=256,N=256,device_name=NVIDIA_RTX_PRO_6000.json"],
             "backup_dir": "/opt/configs/.backup/1"}
ENV = {"versions": {"sglang": "0.5.9", "triton": "3.6.0"}, "triton_dir": "/opt/configs/triton_3_6_0",
       "model": {"moe_shape": SHAPE}}
HOST = {"before": BEFORE, "after": AFTER, "installed": INSTALLED, "gpus": {"name": "NVIDIA RTX PRO 6000", "count": 4},
        "env": ENV, "server_args": {"tp_size": 4}, "model_path": "/models/qwen", "tuner_args": ["--tp-size", "4"],
        "bandwidth_gbs": 1792.0, "tuned_on": ["gpu1"]}
# What moe_plan returned on gpu1 (the parts the evidence reads), and what the action takes of it.
PLAN = {"tuner": {"up": {"model_path": "/models/qwen", "tp_size": 4}}, "plan": {"tuner_args": ["--tp-size", "4"]},
        "spec": {"mem_bandwidth_gbs": 1792.0}, "cluster": {"hosts": [], "in_cluster": False, "head": "gpu1"}}
ACTION_HOST = {"before": BEFORE, "after": AFTER, "installed": INSTALLED, "gpus": HOST["gpus"], "env": ENV, "plan": PLAN}
CLUSTER = {"head": "gpu1", "hosts": ["gpu1", "gpu2"], "ray_address": "10.0.0.1:6379", "nodes": 2, "gpus": 8,
           "started": 1000.0}


def test_evidence_records_hold_the_results_the_benchmarks_and_the_provenance():
    records = evidence_records(up=UP, down=DOWN, **HOST)
    assert records["tune_up.json"] is UP and records["tune_down.json"] is DOWN and records["installed.json"] is INSTALLED
    assert records["kernel_before.json"] == BEFORE["kernel_times"] and records["kernel_after.json"] == AFTER["kernel_times"]
    assert records["kernel_benchmark.json"] == {"before_s": 10.0, "after_s": 9.0}
    assert records["kernel_table.json"] == kernel_table_document(BEFORE["kernel_times"], AFTER["kernel_times"], SHAPE, 4, 1,
                                                                 1792.0)
    assert records["provenance.json"] == {
        "gpu": "NVIDIA RTX PRO 6000", "gpu_count": 4, "versions": ENV["versions"], "triton_dir": "/opt/configs/triton_3_6_0",
        "model_path": "/models/qwen", "moe_shape": SHAPE, "tp_size": 4, "ep_size": 1, "tuner_args": ["--tp-size", "4"],
        "search_space": UP["search_space"], "batch_sizes": [1, 64], "batch_sizes_reason": "up to max_running_requests 48",
        "duration_s": 180.5, "tuned_on": ["gpu1"], "files": ["E=256,N=256,device_name=NVIDIA_RTX_PRO_6000.json"]}


def test_a_down_kernel_not_tuned_has_no_record_and_no_time():
    up = {key: value for key, value in UP.items() if key != "batch_sizes_reason"}
    for down in (SKIPPED, None):
        records = evidence_records(up=up, down=down, **{**HOST, "server_args": {"tp_size": 4, "ep_size": 2}})
        assert records["tune_down.json"] is None
        assert records["provenance.json"]["duration_s"] == 120.5
        assert records["provenance.json"]["batch_sizes_reason"] is None
        assert (records["provenance.json"]["tp_size"], records["provenance.json"]["ep_size"]) == (4, 2)


def test_an_unknown_bandwidth_names_the_setting():
    with pytest.raises(ValueError, match="sglang_gpu_spec.mem_bandwidth_gbs"):
        evidence_records(up=UP, down=DOWN, **{**HOST, "bandwidth_gbs": None})


def test_cluster_record_says_what_ray_ran_where():
    record = cluster_record(UP, DOWN, CLUSTER, now=1234.56)
    assert record == {
        "head": "gpu1", "hosts": ["gpu1", "gpu2"], "ray_address": "10.0.0.1:6379", "nodes": 2, "gpus": 8,
        "batch_sizes_per_invocation": 2, "tuning_s": 180.5, "wall_time_s": 234.6, "gpus_used": 8,
        "hosts_used": ["10.0.0.1", "10.0.0.2"],
        "workers_per_host": [{"10.0.0.1": 4, "10.0.0.2": 4}, {"10.0.0.1": 4}],
        "engine_shards": [{"ip": "10.0.0.1", "gpus": 4}, {"ip": "10.0.0.2", "gpus": 4}]}
    assert cluster_record(UP, SKIPPED, CLUSTER, now=1000.0)["tuning_s"] == 120.5


def run_action(monkeypatch, args: dict, check_mode: bool = False) -> dict:
    """The action's run with these (already validated) arguments; every option it does not get is None, as
    argument_spec leaves it."""
    options = dict.fromkeys(("up", "down", "before", "after", "installed", "gpus", "env", "plan", "cluster",
                             "failed_task", "failed_result", "work_dir"))
    return run_controller_action(monkeypatch, ActionModule, {**options, **args}, check_mode=check_mode)


def test_the_action_writes_the_evidence_and_removes_a_stale_down_record(tmp_path, monkeypatch):
    (tmp_path / "tune_down.json").write_text("{}")
    result = run_action(monkeypatch, {"step": "evidence", "dir": str(tmp_path), "up": UP, "down": SKIPPED, **ACTION_HOST})
    assert result["removed"] == [str(tmp_path / "tune_down.json")] and not (tmp_path / "tune_down.json").exists()
    assert sorted(path.name for path in tmp_path.iterdir()) == sorted(
        ["tune_up.json", "installed.json", "kernel_before.json", "kernel_after.json", "kernel_benchmark.json",
         "kernel_table.json", "provenance.json"])
    assert json.loads((tmp_path / "provenance.json").read_text())["files"] == [
        "E=256,N=256,device_name=NVIDIA_RTX_PRO_6000.json"]
    assert result["changed"] and len(result["written"]) == 7
    assert result["stage_details"] == {"engine_cache": {"up": None, "down": None}}  # SGLang's tuner: no cache
    again = run_action(monkeypatch, {"step": "evidence", "dir": str(tmp_path), "up": UP, "down": SKIPPED, **ACTION_HOST})
    assert not again["changed"] and again["written"] == [] and again["removed"] == []


def test_the_action_in_check_mode_writes_nothing(tmp_path, monkeypatch):
    result = run_action(monkeypatch, {"step": "cluster", "dir": str(tmp_path), "up": UP, "cluster": CLUSTER},
                        check_mode=True)
    assert result["changed"] and result["paths"] == [str(tmp_path / "cluster.json")]
    assert list(tmp_path.iterdir()) == []


def test_the_action_names_what_a_step_lacks(tmp_path, monkeypatch):
    with pytest.raises(AnsibleActionFail, match="step=cluster needs cluster"):
        run_action(monkeypatch, {"step": "cluster", "dir": str(tmp_path), "up": UP})
    with pytest.raises(AnsibleActionFail, match="step=evidence needs before, after"):
        run_action(monkeypatch, {"step": "evidence", "dir": str(tmp_path), "up": UP})
    with pytest.raises(AnsibleActionFail, match="kernel_table.json: bandwidth_gbs is unknown"):
        run_action(monkeypatch, {"step": "evidence", "dir": str(tmp_path), "up": UP, **ACTION_HOST,
                                 "plan": {**PLAN, "spec": None}})
    with pytest.raises(AnsibleActionFail, match="lacks what its record needs: KeyError"):
        run_action(monkeypatch, {"step": "evidence", "dir": str(tmp_path), "up": {}, **ACTION_HOST})
    assert list(tmp_path.iterdir()) == []


def test_the_plan_gives_the_provenance_what_the_tuner_ran_with():
    provenance = ("model_path", "tuner_args", "bandwidth_gbs", "tuned_on")
    assert planned(PLAN) == {"server_args": {"tp_size": 4, "ep_size": 1}, **{key: HOST[key] for key in provenance}}
    cluster = {**PLAN, "cluster": {"hosts": ["gpu1", "gpu2"], "in_cluster": True, "head": "gpu1"}}
    assert planned(cluster)["tuned_on"] == ["gpu1", "gpu2"]


def test_the_stage_says_per_kernel_whether_the_engines_cache_answered():
    hit = {"status": "hit", "key": "k", "short": "abc"}
    assert stage_details({**UP, "cache": hit}, SKIPPED) == {"engine_cache": {"up": hit, "down": None}}
    assert stage_details(UP, {**DOWN, "cache": hit})["engine_cache"]["down"] == hit


def test_a_failure_is_recorded_and_fails_the_task_saying_how_to_resume(tmp_path, monkeypatch):
    stage_dir = tmp_path / "run-1" / "moe_tune" / "gpu1"
    stage_dir.mkdir(parents=True)
    result = run_action(monkeypatch, {"step": "failure", "dir": str(stage_dir), "failed_task": "Tune the up kernel",
                                      "failed_result": {"msg": "timeout: 60s spent"}, "work_dir": "/var/lib/moe"})
    assert (stage_dir / "failure.txt").read_text() == "Tune the up kernel: timeout: 60s spent"
    assert result["failed"] and result["msg"] == (
        'MoE tuning failed at "Tune the up kernel": timeout: 60s spent. Nothing was installed (or it was restored); the '
        "server runs the previous configs. Rerun with -e run_id=run-1 to resume from the checkpoints in /var/lib/moe.")
    assert failure("Copy", {}, "run-1", "/w")[0] == "Copy: failed"
    with pytest.raises(AnsibleActionFail, match="step=failure needs failed_result, work_dir"):
        run_action(monkeypatch, {"step": "failure", "dir": str(stage_dir), "failed_task": "Copy"})
