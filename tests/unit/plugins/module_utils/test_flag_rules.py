from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from ansible_collections.llmops.sglang.plugins.module_utils.flag_rules import evaluate_flag_rules, trial_plan, version_in_range

RULES = yaml.safe_load((Path(__file__).resolve().parents[4] / "roles/sglang_preflight/files/flag_rules.yml").read_text())["rules"]
SM120 = {"sm": "sm120", "gpu_name": "NVIDIA RTX PRO 6000 Blackwell Server Edition", "nnodes": 1, "topk": 8,
         "moe_dtype": None, "sglang_version": "0.5.11"}


def test_demo_case_allreduce_fusion_is_a_no_op_on_sm120():
    findings = evaluate_flag_rules(RULES, {"enable_flashinfer_allreduce_fusion": True}, SM120)
    assert [f["id"] for f in findings] == ["allreduce-fusion-arch"]
    assert findings[0]["message"].startswith("enable_flashinfer_allreduce_fusion will not take effect because "
                                             "FlashInfer all-reduce fusion only runs on SM90/SM100 GPUs; on sm120")
    assert "is_sm90_supported" in findings[0]["source"]


def test_fusion_works_on_a_single_h200_but_not_h20_or_multi_node():
    h200 = {**SM120, "sm": "sm90", "gpu_name": "NVIDIA H200"}
    assert evaluate_flag_rules(RULES, {"enable_flashinfer_allreduce_fusion": True}, h200) == []
    h20 = {**h200, "gpu_name": "NVIDIA H20"}
    assert [f["id"] for f in evaluate_flag_rules(RULES, {"enable_flashinfer_allreduce_fusion": True}, h20)] == ["allreduce-fusion-h20"]
    two_nodes = {**h200, "nnodes": 2}
    assert [f["id"] for f in evaluate_flag_rules(RULES, {"enable_flashinfer_allreduce_fusion": True}, two_nodes)] == [
        "allreduce-fusion-single-node"]


@pytest.mark.parametrize(("context", "expected"), [
    ({"topk": 8}, []),
    ({"topk": 2}, ["fused-moe-sum-topk"]),
    ({"topk": 8, "moe_dtype": "int4_w4a16"}, ["fused-moe-sum-dtype"]),
])
def test_fused_moe_sum_needs_topk_above_two_and_no_weight_only_int(context, expected):
    findings = evaluate_flag_rules(RULES, {"enable_fused_moe_sum_all_reduce": True}, {**SM120, **context})
    assert [f["id"] for f in findings] == expected


def test_speculative_decoding_disables_piecewise_graph_only_on_older_versions():
    old = evaluate_flag_rules(RULES, {"speculative_algorithm": "EAGLE"}, {**SM120, "sglang_version": "0.5.10"})
    assert [f["id"] for f in old] == ["piecewise-cuda-graph-speculative"]
    assert evaluate_flag_rules(RULES, {"speculative_algorithm": "EAGLE"}, SM120) == []


def test_unset_flags_are_not_judged():
    assert evaluate_flag_rules(RULES, {"enable_flashinfer_allreduce_fusion": False}, SM120) == []


def test_version_ranges():
    assert version_in_range("0.5.10.post1", ">=0.5.0,<0.5.11")
    assert not version_in_range("0.5.11", "<0.5.11")
    with pytest.raises(ValueError, match="invalid version range"):
        version_in_range("0.5.11", "~0.5")


@pytest.mark.parametrize("requested", [{"enforce_piecewise_cuda_graph": True},
                                       {"cuda_graph_backend_prefill": "tc_piecewise"}])
def test_rules_speak_the_release_names_whatever_the_request_says(requested):
    """0.5.14+: the old switch is read as cuda_graph_backend_prefill=tc_piecewise; before, the rule does not apply."""
    args = {**requested, "speculative_algorithm": "EAGLE"}
    new = evaluate_flag_rules(RULES, args, {**SM120, "sglang_version": "0.5.14"})
    assert [f["id"] for f in new] == ["prefill-cuda-graph-eagle-target"]
    assert new[0]["message"].startswith("cuda_graph_backend_prefill=tc_piecewise will not take effect because with "
                                         "EAGLE/NEXTN")
    assert evaluate_flag_rules(RULES, {**args, "cuda_graph_backend_prefill": "breakable",
                                       "enforce_piecewise_cuda_graph": False}, {**SM120, "sglang_version": "0.5.23"}) == []
    assert evaluate_flag_rules(RULES, {"enforce_piecewise_cuda_graph": True, "speculative_algorithm": "EAGLE"},
                               {**SM120, "sglang_version": "0.5.11"}) == []


# ---- skipping candidates that cannot help (issue 18 item 4) ----------------------------------------------------------

FUSION = {"name": "flashinfer-allreduce-fusion", "args": {"enable_flashinfer_allreduce_fusion": True}}
DEMO_BASELINE = {"tp_size": 4, "speculative_algorithm": "NEXTN"}


def findings_for(candidate: dict, context: dict = SM120) -> list[dict]:
    """What the preflight records for a candidate: the rules over the baseline args plus the candidate's."""
    return evaluate_flag_rules(RULES, {**DEMO_BASELINE, **candidate["args"]}, context)


def test_a_candidate_the_preflight_found_ineffective_is_skipped_with_the_finding():
    plan = trial_plan(FUSION, findings_for(FUSION))
    assert plan["skip"] and plan["ineffective"] and plan["forced_by"] is None
    decision = plan["decision"]
    assert (decision["action"], decision["adopt"]) == ("skip", False)
    assert decision["reasons"] == ["preflight: enable_flashinfer_allreduce_fusion will not take effect because "
                                   "FlashInfer all-reduce fusion only runs on SM90/SM100 GPUs; on sm120 it does nothing "
                                   "for speed and its workspace still costs KV-cache memory"]
    assert decision["summary"].startswith("skip: preflight: enable_flashinfer_allreduce_fusion will not take effect")


@pytest.mark.parametrize(("candidate", "skip_ineffective", "forced_by"), [
    ({**FUSION, "force": True}, True, "force: true on the candidate"),
    (FUSION, False, "tuning_run_skip_ineffective: false"),
])
def test_an_ineffective_candidate_is_measured_when_forced(candidate, skip_ineffective, forced_by):
    plan = trial_plan(candidate, findings_for(candidate), skip_ineffective)
    assert not plan["skip"] and plan["ineffective"] and plan["forced_by"] == forced_by
    assert "decision" not in plan and [f["id"] for f in plan["findings"]] == ["allreduce-fusion-arch"]


def test_a_candidate_that_works_here_or_has_one_effective_flag_is_measured():
    h200 = {**SM120, "sm": "sm90", "gpu_name": "NVIDIA H200"}
    assert trial_plan(FUSION, findings_for(FUSION, h200)) == {"skip": False, "ineffective": False, "findings": [],
                                                              "forced_by": None}
    mixed = {"name": "fusion-and-compile", "args": {**FUSION["args"], "enable_torch_compile": True}}
    plan = trial_plan(mixed, findings_for(mixed))
    assert not plan["skip"] and not plan["ineffective"] and plan["findings"]  # reported, still measured


def test_findings_about_the_baseline_flags_do_not_skip_a_candidate():
    # Before 0.5.11 the preflight finds speculative decoding disables piecewise CUDA graph: a baseline flag.
    older = {**SM120, "sglang_version": "0.5.10"}
    moe_sum = {"name": "fused-moe-sum-all-reduce", "args": {"enable_fused_moe_sum_all_reduce": True}}
    findings = findings_for(moe_sum, older)
    assert [f["id"] for f in findings] == ["piecewise-cuda-graph-speculative"]
    assert trial_plan(moe_sum, findings, version="0.5.10")["skip"] is False


def test_the_skip_reads_the_candidate_in_the_release_names():
    # 0.5.14+ spell the switch flashinfer_allreduce_fusion_backend=auto; the candidate keeps 0.5.11's name.
    newest = {**SM120, "sglang_version": "0.5.23"}
    plan = trial_plan(FUSION, findings_for(FUSION, newest), version="0.5.23")
    assert plan["skip"] and plan["decision"]["reasons"][0].startswith(
        "preflight: flashinfer_allreduce_fusion_backend=auto will not take effect because")


def test_a_candidate_that_turns_a_flag_off_is_measured():
    off = {"name": "no-fusion", "args": {"enable_flashinfer_allreduce_fusion": False}}
    assert trial_plan(off, findings_for(FUSION))["skip"] is False
