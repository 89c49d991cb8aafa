# Copyright (c) llmops.sglang contributors
# Apache License 2.0 (see LICENSE)
"""decide_trial: the decision policy of a tuning trial, on real comparisons and side-effect diffs."""
from __future__ import annotations

import pytest
from ansible.errors import AnsibleFilterError

from ansible_collections.llmops.sglang.plugins.filter.trial_decision import trial_decision
from ansible_collections.llmops.sglang.plugins.module_utils.decisions import decide_trial
from ansible_collections.llmops.sglang.plugins.module_utils.server_diff import diff_server_facts
from ansible_collections.llmops.sglang.plugins.module_utils.sweep_stats import compare_sweeps, sequential_plan
from tests.unit.plugins.module_utils.test_sweep_stats import LOW_NOISE, REAL_BASELINE, REAL_CANDIDATE, run, sweep

BASE_ARGS = {"tp_size": 4, "speculative_algorithm": "NEXTN", "disable_piecewise_cuda_graph": False}
BASELINE_FACTS = {"server_args": BASE_ARGS, "max_running_requests": 48, "max_total_num_tokens": 612000}
FUSION_FACTS = {"server_args": {**BASE_ARGS, "enable_flashinfer_allreduce_fusion": True,
                                "disable_piecewise_cuda_graph": True},
                "max_running_requests": 26, "max_total_num_tokens": 331000}


def single_run_sweep(values: dict[int, float]) -> dict:
    return {"levels": [{"concurrency": c, "runs": [run(v, c)]} for c, v in values.items()]}


def five_run_sweep(values: dict[int, float], factor: float = 1.0) -> dict:
    return sweep({c: [v * factor * m for m in LOW_NOISE] for c, v in values.items()})


def fusion_side_effects() -> dict:
    return diff_server_facts(BASELINE_FACTS, FUSION_FACTS, {"tp_size": 4},
                             {"tp_size": 4, "enable_flashinfer_allreduce_fusion": True})


def test_real_case_reverts_within_noise_and_names_the_capacity_loss():
    comparison = compare_sweeps(single_run_sweep(REAL_BASELINE), single_run_sweep(REAL_CANDIDATE))
    decision = decide_trial(comparison, fusion_side_effects())
    assert decision["adopt"] is False and decision["action"] == "revert"
    assert decision["reasons"][0].startswith("within noise (")
    assert "low confidence" in decision["reasons"][0]
    assert "capacity dropped 46% (max_running_requests 48 -> 26) with no throughput gain" in decision["reasons"]
    assert "disable_piecewise_cuda_graph set by the server, not requested" in decision["reasons"]
    assert decision["summary"].startswith("revert: within noise")


def test_true_improvement_is_adopted_and_says_where():
    comparison = compare_sweeps(five_run_sweep(REAL_BASELINE), five_run_sweep(REAL_BASELINE, 1.15))
    decision = decide_trial(comparison)
    assert decision["adopt"] is True
    assert decision["summary"].startswith("adopt: improved at C=1,4,16,32,64 (best +")


def test_improvement_with_capacity_loss_is_still_reported_and_can_be_limited():
    comparison = compare_sweeps(five_run_sweep(REAL_BASELINE), five_run_sweep(REAL_BASELINE, 1.15))
    reported = decide_trial(comparison, fusion_side_effects())
    assert reported["adopt"] is True
    assert "capacity dropped 46% (max_running_requests 48 -> 26)" in reported["reasons"]
    limited = decide_trial(comparison, fusion_side_effects(), {"max_capacity_loss_pct": 10})
    assert limited["adopt"] is False
    assert limited["reasons"][-1] == "capacity loss above the policy limit of 10%"


def test_regression_reverts():
    comparison = compare_sweeps(five_run_sweep(REAL_BASELINE), five_run_sweep(REAL_BASELINE, 0.92))
    decision = decide_trial(comparison)
    assert decision["adopt"] is False
    assert decision["reasons"][0].startswith("regressed at C=1,4,16,32,64")


def test_mixed_result_is_not_adopted():
    candidate = {**REAL_BASELINE, 1: REAL_BASELINE[1] * 1.2, 64: REAL_BASELINE[64] * 0.85}
    comparison = compare_sweeps(five_run_sweep(REAL_BASELINE), five_run_sweep(candidate))
    decision = decide_trial(comparison)
    assert comparison["verdict"] == "mixed"
    assert decision["adopt"] is False
    assert decision["reasons"][0] == "mixed: improved at C=1, regressed at C=64"


def test_failure_reverts_without_a_comparison():
    decision = decide_trial({}, failure="oom: Not enough memory")
    assert decision == {"adopt": False, "action": "revert", "reasons": ["failed: oom: Not enough memory"],
                        "summary": "revert: failed: oom: Not enough memory",
                        "policy": {"require_verdict": "improved", "max_capacity_loss_pct": None,
                                   "allow_low_confidence": False}}


def test_bad_input_names_the_problem():
    with pytest.raises(ValueError, match="unknown decision policy key"):
        decide_trial({"verdict": "improved"}, policy={"max_loss": 3})
    with pytest.raises(AnsibleFilterError, match="comparison must be the result of compare_sweeps"):
        trial_decision({"levels": []})


def test_low_confidence_improvement_is_not_adopted():
    comparison = compare_sweeps(single_run_sweep(REAL_BASELINE), single_run_sweep({c: v * 1.15 for c, v in REAL_BASELINE.items()}))
    decision = decide_trial(comparison)
    assert comparison["verdict"] == "improved" and decision["adopt"] is False
    assert decision["reasons"][-1] == "too few runs to adopt (low confidence: fewer than 5 per side); measure with repeats >= 5"
    assert decide_trial(comparison, policy={"allow_low_confidence": True})["adopt"] is True


def test_adjustments_the_reference_had_too_are_not_the_candidates_doing():
    reference = {"server_args": {**BASE_ARGS, "speculative_algorithm": "EAGLE"}, "max_running_requests": 48}
    candidate = {"server_args": {**BASE_ARGS, "speculative_algorithm": "EAGLE", "enable_fused_moe_sum_all_reduce": True},
                 "max_running_requests": 48}
    side_effects = diff_server_facts(reference, candidate, {"speculative_algorithm": "NEXTN"},
                                     {"speculative_algorithm": "NEXTN", "enable_fused_moe_sum_all_reduce": True})
    assert side_effects["auto_adjusted"], "the diff itself lists the NEXTN -> EAGLE adjustment"
    comparison = compare_sweeps(single_run_sweep(REAL_BASELINE), single_run_sweep(REAL_CANDIDATE))
    assert decide_trial(comparison, side_effects)["reasons"] == [decide_trial(comparison)["reasons"][0]]


def test_three_runs_with_one_slow_baseline_run_do_not_adopt():
    baseline = sweep({1: [1200.0, 1195.0, 1050.0]})
    candidate = sweep({1: [1204.0, 1201.0, 1199.0]})
    comparison = compare_sweeps(baseline, candidate)
    assert decide_trial(comparison)["adopt"] is False


def test_a_sequential_verdict_is_confident_with_two_runs_and_says_how_many_repeats_it_took():
    reference = five_run_sweep({16: 1213.5, 64: 1582.5})
    candidate = sweep({16: [1213.5 * 1.15 * m for m in LOW_NOISE[:2]], 64: [1582.5 * 1.15 * m for m in LOW_NOISE[:2]]})
    candidate["sequential"] = sequential_plan(reference, [16, 64], {})
    decision = decide_trial(compare_sweeps(reference, candidate))
    assert decision["adopt"] is True
    assert decision["reasons"][-1].startswith("repeats needed (sequential, 2-10 per level): C=16 2 (improved, t = +")
    assert decision["summary"].startswith("adopt: improved at C=16,64")


def test_a_sequential_candidate_left_undecided_is_not_adopted_and_says_so():
    reference = five_run_sweep({16: 1213.5})
    candidate = sweep({16: [1213.5 * 1.15]})
    candidate["sequential"] = sequential_plan(reference, [16], {})
    decision = decide_trial(compare_sweeps(reference, candidate))
    assert decision["adopt"] is False
    assert decision["reasons"][0] == "within noise (+15.0%) (undecided by the stopping rule)"
    assert decision["reasons"][-1] == "repeats needed (sequential, 2-10 per level): C=16 1 (undecided)"
