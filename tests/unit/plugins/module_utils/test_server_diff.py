# Copyright (c) llmops.sglang contributors
# Apache License 2.0 (see LICENSE)
"""Tests for the startup-facts diff, on facts parsed from tests/fixtures/logs (see its README)."""
from __future__ import annotations

import copy
from pathlib import Path

import pytest

from ansible_collections.llmops.sglang.plugins.module_utils.server_diff import diff_server_facts
from ansible_collections.llmops.sglang.plugins.module_utils.startup_log import parse_startup_log

LOGS = Path(__file__).resolve().parents[3] / "fixtures" / "logs"
CONFIGS = "/opt/sglang/venv/lib/python3.12/site-packages/sglang/srt/layers/moe/moe_runner/triton_utils/configs/triton_3_6_0/"
UP_FILE = "E=256,N=256,device_name=NVIDIA_RTX_PRO_6000_Blackwell_Server_Edition.json"
DOWN_FILE = "E=256,N=256,device_name=NVIDIA_RTX_PRO_6000_Blackwell_Server_Edition_down.json"
BASELINE_REQUESTED = {
    "model_path": "/models/Qwen3.5-122B-A10B",
    "tp_size": 4,
    "mem_fraction_static": 0.82,
    "speculative_algorithm": "EAGLE",
    "speculative_num_steps": 3,
    "speculative_eagle_topk": 1,
    "speculative_num_draft_tokens": 4,
}
TRIAL_REQUESTED = {**BASELINE_REQUESTED, "enable_flashinfer_allreduce_fusion": True}


def read_log(name: str) -> str:
    return (LOGS / name).read_text(encoding="utf-8")


@pytest.fixture(scope="module")
def baseline() -> dict:
    return parse_startup_log(read_log("modern_tp4_spec_baseline.log"))


@pytest.fixture(scope="module")
def trial() -> dict:
    return parse_startup_log(read_log("modern_tp4_spec_allreduce_fusion.log"))


def test_demo_case(baseline, trial):
    diff = diff_server_facts(baseline, trial, BASELINE_REQUESTED, TRIAL_REQUESTED)
    assert diff["auto_adjusted"] == [
        {"arg": "disable_piecewise_cuda_graph", "requested": None, "effective": True, "baseline": False},
    ]
    assert diff["capacity"] == [
        {"metric": "max_running_requests", "baseline": 48, "candidate": 26, "change_pct": -45.8},
        {"metric": "max_total_num_tokens", "baseline": 1183744, "candidate": 1097728, "change_pct": -7.3},
        {"metric": "kv_cache_tokens", "baseline": 1183744, "candidate": 1097728, "change_pct": -7.3},
    ]
    assert diff["warnings_appeared"] == [] and diff["warnings_vanished"] == []
    assert diff["moe_configs_changed"] == []
    assert diff["summary_lines"] == [
        "disable_piecewise_cuda_graph set by the server (not requested): False -> True",
        "max_running_requests 48 -> 26 (-46%)",
        "max_total_num_tokens 1183744 -> 1097728 (-7%)",
        "kv_cache_tokens 1183744 -> 1097728 (-7%)",
    ]


def test_random_seed_is_not_an_adjustment(baseline, trial):
    assert baseline["server_args"]["random_seed"] != trial["server_args"]["random_seed"]
    diff = diff_server_facts(baseline, trial, BASELINE_REQUESTED, TRIAL_REQUESTED)
    assert "random_seed" not in [entry["arg"] for entry in diff["auto_adjusted"]]


def test_request_overridden_by_the_server(baseline, trial):
    requested = {**TRIAL_REQUESTED, "speculative_algorithm": "NEXTN", "disable_piecewise_cuda_graph": False}
    diff = diff_server_facts(baseline, trial, BASELINE_REQUESTED, requested)
    assert diff["auto_adjusted"] == [
        {"arg": "speculative_algorithm", "requested": "NEXTN", "effective": "EAGLE", "baseline": "EAGLE"},
        {"arg": "disable_piecewise_cuda_graph", "requested": False, "effective": True, "baseline": False},
    ]
    assert diff["summary_lines"][:2] == [
        "speculative_algorithm requested 'NEXTN' but the server used 'EAGLE'",
        "disable_piecewise_cuda_graph requested False but the server used True",
    ]


def test_requested_changes_are_not_server_adjustments(baseline, trial):
    # The trial requested PCG off itself: its value differs from the baseline because of the request.
    requested = {**TRIAL_REQUESTED, "--disable-piecewise-cuda-graph": True}
    assert diff_server_facts(baseline, trial, BASELINE_REQUESTED, requested)["auto_adjusted"] == []
    # The baseline requested a value the trial dropped: a change of request, not of the server.
    dropped = diff_server_facts(trial, baseline, {**TRIAL_REQUESTED, "disable_piecewise_cuda_graph": True}, BASELINE_REQUESTED)
    assert dropped["auto_adjusted"] == []


def test_requested_values_compare_by_meaning(baseline, trial):
    requested = {
        **TRIAL_REQUESTED,
        "mem-fraction-static": "0.82",
        "cuda_graph_max_bs": "48",
        "enable_flashinfer_allreduce_fusion": "True",
        "mm_process_config": '{"image": {"max_pixels": 1003520, "min_pixels": 3136}, "video": {"fps": 2.0, "max_frames": 768}}',
        "cuda_graph_bs": (1, 2, 4, 8, 12, 16, 24, 32, 40, 48),
        "lora_paths": None,
        "disable_piecewise_cuda_graph": True,
    }
    assert diff_server_facts(baseline, trial, BASELINE_REQUESTED, requested)["auto_adjusted"] == []


def _after_tuning(text: str) -> str:
    """The baseline log as it looks once tuned configs are installed for both kernels."""
    url = "https://github.com/sgl-project/sglang/tree/main/benchmark/kernels/fused_moe_triton"
    return (
        text.replace(
            f"Using default MoE kernel config. Performance might be sub-optimal! Config file not found at {CONFIGS}{UP_FILE}, "
            f"you can create them with {url}",
            f"Using MoE kernel config from {CONFIGS}{UP_FILE}.",
        ).replace(
            f"Using MoE kernel config with down_moe=False. Performance might be sub-optimal! Config file not found at "
            f"{CONFIGS}{DOWN_FILE}, you can create them with {url}",
            f"Using MoE kernel config from {CONFIGS}{DOWN_FILE}.",
        )
    )


def test_tuned_configs_show_up_as_moe_changes_and_vanished_warnings(baseline):
    tuned = parse_startup_log(_after_tuning(read_log("modern_tp4_spec_baseline.log")))
    diff = diff_server_facts(baseline, tuned, BASELINE_REQUESTED, BASELINE_REQUESTED)
    assert [(entry["kernel"], entry["file"], entry["baseline"]["status"], entry["candidate"]["status"])
            for entry in diff["moe_configs_changed"]] == [("up", UP_FILE, "missing", "used"), ("down", DOWN_FILE, "missing", "used")]
    assert diff["warnings_appeared"] == []
    assert len(diff["warnings_vanished"]) == 2
    assert all("Performance might be sub-optimal!" in warning for warning in diff["warnings_vanished"])
    assert diff["auto_adjusted"] == [] and diff["capacity"] == []
    assert diff["summary_lines"][-2:] == [
        f"MoE up kernel config {UP_FILE}: missing -> used",
        f"MoE down kernel config {DOWN_FILE}: missing -> used",
    ]


def test_moe_config_reported_only_on_one_side(baseline):
    without_moe = {**baseline, "moe_configs": []}
    diff = diff_server_facts(without_moe, baseline, {}, {})
    assert [entry["baseline"] for entry in diff["moe_configs_changed"]] == [None, None]
    assert diff["summary_lines"][-1] == f"MoE down kernel config {DOWN_FILE}: not reported -> missing"


def test_warnings_compare_without_measured_values(baseline):
    imbalance = ("The memory capacity is unbalanced. Some GPUs may be occupied by other processes. "
                 "min_per_gpu_memory=93.12, local_gpu_memory=94.97, local_gpu_memory * 0.9=85.47")
    before = {**baseline, "warnings": [imbalance]}
    after = {**baseline, "warnings": [imbalance.replace("93.12", "92.80"), "KV cache pool is full. Retract requests."]}
    diff = diff_server_facts(before, after, {}, {})
    assert diff["warnings_appeared"] == ["KV cache pool is full. Retract requests."]
    assert diff["warnings_vanished"] == []
    assert diff["summary_lines"] == ["new warning: KV cache pool is full. Retract requests."]


def test_capacity_edge_cases(baseline):
    candidate = copy.deepcopy(baseline)
    candidate["max_running_requests"] = 52
    del candidate["kv_cache_tokens"]
    zero = {**baseline, "max_total_num_tokens": 0}
    diff = diff_server_facts(zero, candidate, {}, {})
    assert diff["capacity"] == [
        {"metric": "max_running_requests", "baseline": 48, "candidate": 52, "change_pct": 8.3},
        {"metric": "max_total_num_tokens", "baseline": 0, "candidate": 1183744, "change_pct": None},
    ]
    assert diff["summary_lines"] == ["max_running_requests 48 -> 52 (+8%)", "max_total_num_tokens 0 -> 1183744"]


def test_failed_candidate_without_server_args(baseline):
    failed = parse_startup_log(read_log("argparse_error.log"))
    diff = diff_server_facts(baseline, failed, BASELINE_REQUESTED, TRIAL_REQUESTED)
    assert diff["auto_adjusted"] == [] and diff["capacity"] == []
    assert len(diff["warnings_vanished"]) == 3


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        (([], {}, {}, {}), "baseline must be a mapping of startup facts, got list"),
        (({}, "facts", {}, {}), "candidate must be a mapping of startup facts, got str"),
        (({}, {}, ["tp_size"], {}), "baseline_requested must be a mapping of server args, got list"),
        (({}, {}, {}, 4), "candidate_requested must be a mapping of server args, got int"),
    ],
)
def test_bad_arguments_are_named(arguments, message):
    with pytest.raises(TypeError, match=message):
        diff_server_facts(*arguments)


def test_requested_may_be_none(baseline, trial):
    diff = diff_server_facts(baseline, trial, None, None)
    assert [entry["arg"] for entry in diff["auto_adjusted"]] == ["enable_flashinfer_allreduce_fusion", "disable_piecewise_cuda_graph"]


def test_a_newer_releases_dump_is_read_in_its_names():
    """0.5.23 dumps the fusion switch reset (False) beside its backend, and every phase's graph settings in one
    resolved ``cuda_graph_config``: the request in 0.5.11's names is no adjustment, the prefill graph turned off is
    one, by its path (sglang 0.5.23 sglang/srt/arg_groups/serving_hook.py, cuda_graph_hook.py)."""
    def graphs(prefill_backend):
        return {"decode": {"backend": "full", "max_bs": 512}, "prefill": {"backend": prefill_backend, "max_bs": 8192}}
    baseline = {"server_args": {"tp_size": 4, "enable_flashinfer_allreduce_fusion": False,
                                "flashinfer_allreduce_fusion_backend": None, "cuda_graph_config": graphs("breakable")}}
    candidate = {"server_args": {"tp_size": 4, "enable_flashinfer_allreduce_fusion": False,
                                 "flashinfer_allreduce_fusion_backend": "auto", "cuda_graph_config": graphs("disabled")}}
    diff = diff_server_facts(baseline, candidate, {"tp_size": 4},
                             {"tp_size": 4, "enable_flashinfer_allreduce_fusion": True})
    assert diff["auto_adjusted"] == [{"arg": "cuda_graph_config.prefill.backend", "requested": None,
                                      "effective": "disabled", "baseline": "breakable"}]
