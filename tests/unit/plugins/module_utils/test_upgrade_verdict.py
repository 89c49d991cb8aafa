# Copyright (c) llmops.sglang contributors
# Apache License 2.0 (see LICENSE)
"""The upgrade canary's verdict (issue #37 item 4): the new release held to the serving one on the same host - no
regressed level, no capacity drop beyond the policy, no tuned MoE config lost, latency within the rollout's limits -
and the report that shows old against new."""
from __future__ import annotations

import pytest
from ansible.errors import AnsibleFilterError

from ansible_collections.llmops.sglang.plugins.filter.moe_cost_estimate import moe_cost_estimate
from ansible_collections.llmops.sglang.plugins.filter.upgrade_policy import upgrade_policy
from ansible_collections.llmops.sglang.plugins.filter.upgrade_retune_plan import upgrade_retune_plan
from ansible_collections.llmops.sglang.plugins.filter.upgrade_verdict import upgrade_verdict
from ansible_collections.llmops.sglang.plugins.module_utils.upgrade_verdict import judge, report, retune_summary
from tests.unit.plugins.module_utils.test_sweep_stats import LOW_NOISE, REAL_BASELINE, sweep

ARGS = {"tp_size": 4, "speculative_algorithm": "NEXTN"}
UP = "E=256,N=256,device_name=NVIDIA_RTX_PRO_6000_Blackwell_Server_Edition.json"
DOWN = UP.replace(".json", "_down.json")
FACTS = {"server_args": ARGS, "max_running_requests": 48, "max_total_num_tokens": 612000,
         "moe_configs": [{"kernel": "up", "path": f"/c/triton_3_6_0/{UP}", "status": "used"},
                         {"kernel": "down", "path": f"/c/triton_3_6_0/{DOWN}", "status": "used"}],
         "missing_moe_configs": []}
PREDICTION = {
    "versions": {"current": {"sglang": "0.5.11", "triton": "3.6.0", "torch": None},
                 "new": {"sglang": "0.5.23", "triton": "3.6.0", "torch": None}},
    "moe": [{"kernel": "up", "file_name": UP, "verdict": "kept"}, {"kernel": "down", "file_name": DOWN, "verdict": "kept"}],
    "carry": [], "retune": [], "ready": True, "summary": []}
LOOSE = {"latency_limits": None}  # these sweeps' runs carry no latency summary


def measured(factor: float = 1.0, facts: dict | None = None, failure: str | None = None) -> dict:
    return {"failure": failure, "requested_args": ARGS, "facts": facts or FACTS,
            "sweep": None if failure else sweep({c: [v * factor * m for m in LOW_NOISE] for c, v in REAL_BASELINE.items()})}


def test_a_release_that_serves_as_the_old_one_is_promoted_and_says_so():
    verdict = judge(measured(), measured(1.003), options=LOOSE)
    assert verdict["promote"] is True and verdict["reasons"] == []
    assert verdict["summary"].startswith("promote: throughput within noise")
    assert verdict["moe_lost"] == [] and verdict["side_effects"]["capacity"] == []


def test_a_faster_release_is_promoted_too():
    assert judge(measured(), measured(1.15), options=LOOSE)["promote"] is True


def test_a_throughput_regression_rolls_back_naming_the_levels():
    verdict = judge(measured(), measured(0.62), options=LOOSE)
    assert verdict["promote"] is False
    assert verdict["reasons"][0].startswith("throughput regressed at C=1,4,16,32,64 (")
    assert verdict["summary"].startswith("roll back: throughput regressed")


def test_a_capacity_drop_beyond_the_limit_rolls_back_even_when_throughput_holds():
    smaller = {**FACTS, "max_running_requests": 26, "max_total_num_tokens": 331000}
    verdict = judge(measured(), measured(1.0, smaller), options=LOOSE)
    assert verdict["promote"] is False
    assert verdict["reasons"] == ["capacity dropped 46% (max_running_requests 48 -> 26), beyond the limit of 10%",
                                  "capacity dropped 46% (max_total_num_tokens 612000 -> 331000), beyond the limit of 10%"]
    assert verdict["notes"][0].startswith("throughput within noise")
    allowed = judge(measured(), measured(1.0, smaller), options={**LOOSE, "max_capacity_loss_pct": 50})
    assert allowed["promote"] is True
    assert "capacity dropped 46% (max_running_requests 48 -> 26), within the limit of 50%" in allowed["notes"]


def test_tuned_configs_the_new_server_reports_missing_roll_back():
    lost = {**FACTS, "moe_configs": [{"kernel": "up", "path": f"/v/triton_3_9_0/{UP}", "status": "missing"},
                                     {"kernel": "down", "path": f"/v/triton_3_9_0/{DOWN}", "status": "missing"}],
            "missing_moe_configs": [f"/v/triton_3_9_0/{UP}", f"/v/triton_3_9_0/{DOWN}"]}
    verdict = judge(measured(), measured(1.0, lost), options=LOOSE)
    assert verdict["promote"] is False and verdict["moe_lost"] == [UP, DOWN]
    assert verdict["reasons"] == [f"the new release runs default kernels where the old one loaded tuned MoE configs: "
                                  f"{UP}, {DOWN}"]


def test_a_new_release_that_failed_rolls_back_and_a_failed_old_one_is_no_reference():
    failed = judge(measured(), measured(failure="did not start: exit 1"))
    assert failed["promote"] is False and failed["comparison"] is None
    assert failed["reasons"] == ["the new release failed on the canary: did not start: exit 1"]
    with pytest.raises(ValueError, match="the serving release's measurement failed"):
        judge(measured(failure="unreachable"), measured())


def test_latency_is_judged_with_the_rollout_limits_unless_turned_off():
    def with_latency(tpot_p99: float) -> dict:
        result = measured()
        for level in result["sweep"]["levels"]:
            level["summary"] = {"ttft_ms": {"p99": 400.0}, "tpot_ms": {"p99": tpot_p99}}
        return result

    verdict = judge(with_latency(20.0), with_latency(30.0))
    assert verdict["promote"] is False
    assert "level 1: p99 TPOT 30.0 ms is +50.0% over 20.0 ms before the change (limit +10%)" in verdict["reasons"]
    assert judge(with_latency(20.0), with_latency(30.0), options=LOOSE)["promote"] is True


def test_bad_policy_fails_naming_the_field():
    with pytest.raises(AnsibleFilterError, match=r"upgrade_canary_policy: unknown max_loss \(known: "):
        upgrade_policy({"max_loss": 5})
    with pytest.raises(AnsibleFilterError, match=r"upgrade_canary_policy.max_capacity_loss_pct: a number >= 0"):
        upgrade_policy({"max_capacity_loss_pct": "ten"})
    with pytest.raises(AnsibleFilterError, match=r"upgrade_canary_policy.latency_limits: rollout analysis limits: unknown"):
        upgrade_policy({"latency_limits": {"p99": 3}})
    with pytest.raises(AnsibleFilterError, match=r"upgrade_canary_policy.max_goodput_loss_pct: a number >= 0 and < 100"):
        upgrade_policy({"max_goodput_loss_pct": -1})
    assert upgrade_policy(None)["max_capacity_loss_pct"] == 10.0


SLO = {"ttft_ms": {"target": 300, "percentile": 90}}
SERVING_GOODPUT = {"slo": SLO, "rate_rps": 8.0, "estimate_rps": 8.4, "goodput_rps": 7.9,
                   "reason": "8 req/s met the SLO in all of 3 runs, below 8.8 req/s (the SLO failed there); within 5%"}


def new_goodput(held: bool | None, failed: int = 0, reason: str | None = None) -> dict:
    return {"slo": SLO, "rate_rps": 7.6, "max_loss_pct": 5.0, "held": held, "runs": 3, "failed_runs": failed,
            "goodput_rps": 7.5 if held else 5.1, "reason": reason}


def test_under_the_runs_slo_a_new_release_that_misses_the_serving_rate_less_the_loss_rolls_back():
    """Throughput at the closed-loop levels holds, but the SLO's goodput fell (a longer TTFT tail, say)."""
    missed = judge(measured(), measured(1.003), options=LOOSE,
                   goodput={"old": SERVING_GOODPUT, "new": new_goodput(False, failed=2)})
    assert missed["promote"] is False
    assert missed["reasons"] == ["goodput under the SLO fell: the new release missed the SLO in 2 of 3 runs at 7.6 "
                                 "req/s (the serving release's 8 less 5%)"]
    assert missed["goodput"]["serving_rate_rps"] == 8.0 and missed["goodput"]["held"] is False
    held = judge(measured(), measured(1.003), options=LOOSE, goodput={"old": SERVING_GOODPUT, "new": new_goodput(True)})
    assert held["promote"] is True
    assert "goodput under the SLO held: all 3 runs of the new release met the SLO at 7.6 req/s (the serving release's 8 less 5%)" in held["notes"]
    markdown = report(held, PREDICTION, host="gpu1")["markdown"]
    assert markdown.endswith("## Goodput under the SLO\n\n- SLO: p90 ttft_ms <= 300 ms\n- the serving release met it up "
                             "to 8 req/s (estimate 8.4 req/s, goodput 7.9 req/s); the new release's goodput at its "
                             "check: 7.5 req/s\n- goodput under the SLO held: all 3 runs of the new release met the "
                             "SLO at 7.6 req/s (the serving release's 8 less 5%)\n"), markdown


def test_goodput_that_could_not_be_compared_is_a_note_not_a_reason():
    never = {"slo": SLO, "rate_rps": None, "estimate_rps": None, "goodput_rps": None, "reason": "no rate meets the SLO"}
    verdict = judge(measured(), measured(), options=LOOSE, goodput={
        "old": never, "new": new_goodput(None, reason="the serving release met the SLO at no rate its search tried")})
    assert verdict["promote"] is True and verdict["goodput"]["held"] is None
    assert ("goodput under the SLO not compared: the serving release met the SLO at no rate its search tried"
            in verdict["notes"])
    assert "- SLO: p90 ttft_ms <= 300 ms\n- goodput under the SLO not compared" in report(verdict, PREDICTION, host="gpu1")["markdown"]


def test_the_report_shows_old_against_new():
    prediction = {**PREDICTION, "moe": [{"kernel": "up", "file_name": UP, "verdict": "lost"},
                                        {"kernel": "down", "file_name": DOWN, "verdict": "fallback"}],
                  "retune": [{"kernel": "down", "file_name": DOWN, "why": "it was tuned for triton_3_6_0"}]}
    result = upgrade_verdict(measured(), measured(0.62), prediction=prediction, host="gpu1", carried=[UP],
                             policy=LOOSE)
    record = result["report"]
    assert record["decision"] == "roll back" and record["host"] == "gpu1"
    assert record["versions"] == {"current": {"sglang": "0.5.11", "triton": "3.6.0", "torch": None},
                                  "new": {"sglang": "0.5.23", "triton": "3.6.0", "torch": None}}
    assert record["configs"] == {"kept": [], "fallback": [DOWN], "missing": [UP], "carried": [UP], "retuned": [],
                                 "retune": [DOWN]}
    assert record["retune_cost"] is None and "retuned on this host" not in record["markdown"]
    markdown = record["markdown"]
    assert markdown.startswith("# Upgrade canary: gpu1\n\n**Decision: roll back.** roll back: throughput regressed")
    assert "| sglang | 0.5.11 | 0.5.23 |" in markdown and f"- carried: {UP}" in markdown
    assert "| 32 | 1515.1 | 939.4 | -38.0% | regressed |" in markdown  # the comparison's table
    assert result["policy"] == {"max_capacity_loss_pct": 10.0, "latency_limits": None, "max_goodput_loss_pct": 5.0}
    assert record["goodput"] is None and "Goodput" not in markdown
    assert report(judge(measured(), measured(), options=LOOSE), PREDICTION, host="gpu1")["decision"] == "promote"


def test_the_report_shows_what_the_canary_retuned_its_gpu_minutes_and_the_cache():
    """The retune's moe_tune results (up by the engine, down from the same run's cache entry) as canary.json and
    upgrade.md show them; a task that did not run (skipped: no output_file) is not counted."""
    up = {"file_name": UP, "output_file": f"/w/{UP}", "engine": {"gpu_minutes": 1.25}, "cache": {"status": "miss"}}
    down = {"file_name": DOWN, "output_file": f"/w/{DOWN}", "engine": None, "cache": {"status": "hit"}}
    assert retune_summary([up, {"skipped": True}]) == {"files": [UP], "gpu_minutes": 1.25, "cache": {UP: "miss"},
                                                       "estimate": None}
    assert retune_summary([{"skipped": True}]) is None
    result = upgrade_verdict(measured(), measured(), prediction=PREDICTION, host="gpu1", retuned=[up, down],
                             policy=LOOSE)
    record = result["report"]
    assert record["configs"]["retuned"] == sorted([UP, DOWN]) and record["decision"] == "promote"
    assert record["retune_cost"] == {"files": [UP, DOWN], "gpu_minutes": 1.25, "cache": {UP: "miss", DOWN: "hit"},
                                     "estimate": None}
    assert (f"- retuned on this host with the engine: 1.25 GPU-minutes; engine cache: {UP}: miss; {DOWN}: hit"
            in record["markdown"])


def test_the_report_sets_the_retunes_estimate_beside_what_it_spent():
    """The estimate made before the server stopped (the MoE stage's moe_cost_estimate over the up kernel's plan), in the
    engine's GPU-minutes as the spent ones are, and the deployment's GPUs it held."""
    plan = {"search_space": {"kept": 100}, "batch_sizes": [1, 16], "chunks": [[1, 16]], "compile_workers": 16,
            "devices": [0, 1, 2, 3], "cache": {"status": "miss"}}
    estimate = moe_cost_estimate(plan, engine="llmops", down=True, requested_args={"tp_size": 4})
    up = {"file_name": UP, "output_file": f"/w/{UP}", "engine": {"gpu_minutes": 0.5}, "cache": {"status": "miss"}}
    record = upgrade_verdict(measured(), measured(), prediction=PREDICTION, host="gpu1", retuned=[up],
                             retune_estimate=estimate, policy=LOOSE)["report"]
    expected = record["retune_cost"]["estimate"]
    assert expected == {"engine_gpu_minutes": estimate["engine_gpu_minutes"], "gpu_minutes": estimate["gpu_minutes"],
                        "gpus": 4, "summary": estimate["summary"]}
    assert expected["engine_gpu_minutes"] > 0 and expected["gpu_minutes"] > 0
    assert (f"- retuned on this host with the engine: 0.5 GPU-minutes (estimated {estimate['engine_gpu_minutes']:g} "
            f"before the server stopped; the deployment's 4 GPUs held for an estimated {estimate['gpu_minutes']:g}); "
            f"engine cache: {UP}: miss") in record["markdown"]
    with pytest.raises(AnsibleFilterError, match="upgrade_verdict: retune_estimate must be a dict"):
        upgrade_verdict(measured(), measured(), prediction=PREDICTION, host="gpu1", retune_estimate=[1])


def test_prediction_markdown_shows_the_first_prediction_before_what_the_release_starts_with():
    from ansible_collections.llmops.sglang.plugins.filter.upgrade_prediction_markdown import upgrade_prediction_markdown

    after = {"summary": ["up E=256.json: kept", "flags: none changed"]}
    before = {"summary": ["up E=256.json: lost: RETUNE it"]}
    assert upgrade_prediction_markdown(after, host="gpu1") == (
        "# Upgrade prediction: gpu1\n\n- up E=256.json: kept\n- flags: none changed\n")
    text = upgrade_prediction_markdown(after, host="gpu1", before=before)
    assert text.index("- up E=256.json: lost: RETUNE it") < text.index("## What the new release starts with") \
        < text.index("- up E=256.json: kept") and "\\n" not in text
    with pytest.raises(AnsibleFilterError, match="upgrade_prediction_markdown: before must be a dict, got list"):
        upgrade_prediction_markdown(after, host="gpu1", before=["x"])


RTX = "NVIDIA RTX PRO 6000 Blackwell Server Edition"
RETUNED = {"changed": True, "installed": [f"/opt/sglang/venvs/0.5.24/c/triton_3_9_0/{UP}",
                                          f"/opt/sglang/venvs/0.5.24/c/triton_3_9_0/{DOWN}"]}
LOST = {**PREDICTION, "ready": False,
        "moe": [{"kernel": "up", "file_name": UP, "verdict": "lost"}, {"kernel": "down", "file_name": DOWN, "verdict": "lost"}],
        "summary": [f"up {UP}: lost: MISSES it", f"down {DOWN}: lost: MISSES it"]}


def promoted(host: str = "gpu2", **changes):
    from ansible_collections.llmops.sglang.plugins.filter.upgrade_promotion import upgrade_promotion
    options = {"canary": "gpu1", "prediction": PREDICTION, "retune_names": [], "canary_retuned": None, "gpu": RTX,
               "canary_gpu": RTX, **changes}
    return upgrade_promotion(host, **options)


def test_a_ready_host_is_promoted_and_the_canary_is_not_switched_again():
    assert promoted() == {"mismatches": [], "moe_configs": []}
    assert promoted("gpu1")["mismatches"] == ["the canary of this upgrade: switched and measured by its A/B"]


@pytest.mark.parametrize("changes, why", [
    ({"check_mode": True}, "check mode: the canary is not measured, so nothing is promoted"),
    ({"measured": False}, "upgrade_canary_ab=false: no canary measured, so nothing is promoted"),
    ({"promote": False}, "upgrade_promote=false: the canary passed, the rest is left for a later run"),
    ({"prediction": {"skipped": True}}, "the prediction is not ready here: not made"),
], ids=["check", "no canary", "no promote", "no prediction"])
def test_nothing_is_promoted_without_a_measured_canary_or_a_prediction(changes, why):
    assert promoted(**changes)["mismatches"] == [why]


def test_a_host_that_needs_what_the_canary_retuned_on_its_gpu_gets_those_files():
    fits = promoted(prediction=LOST, retune_names=[DOWN, UP], canary_retuned=RETUNED)
    assert fits == {"mismatches": [], "moe_configs": [UP, DOWN]}
    other_gpu = promoted(prediction=LOST, retune_names=[UP, DOWN], canary_retuned=RETUNED, gpu="NVIDIA H100 80GB HBM3")
    assert other_gpu["moe_configs"] == [] and other_gpu["mismatches"] == [
        f"the prediction is not ready here: up {UP}: lost: MISSES it; down {DOWN}: lost: MISSES it; the canary "
        f"retuned {UP}, {DOWN} on {RTX}, this host has NVIDIA H100 80GB HBM3 and needs {UP}, {DOWN} retuned: "
        "retune it on its own canary"]
    refused = {**LOST, "flags": {"errors": ["--enable-foo"]}, "summary": [*LOST["summary"], "flag error: --enable-foo"]}
    assert promoted(prediction=refused, retune_names=[UP, DOWN], canary_retuned=RETUNED)["mismatches"][0].startswith(
        "the prediction is not ready here: ")
    assert promoted(prediction=LOST, retune_names=[UP, DOWN], canary_retuned={"skipped": True})["moe_configs"] == []


RETUNE_BOTH = {**LOST, "retune": [{"kernel": "up", "file_name": UP}, {"kernel": "down", "file_name": DOWN}]}


def retune_plan(host: str = "gpu1", **changes):
    return upgrade_retune_plan(host, **{"canary": "gpu1", "prediction": RETUNE_BOTH, **changes})


def test_the_canary_retunes_what_its_prediction_lists_and_names_each_kernels_file():
    assert retune_plan() == {"retune": True, "names": [UP, DOWN], "down": True, "expected": {"up": UP, "down": DOWN}}
    only_up = retune_plan(prediction={**LOST, "retune": [{"kernel": "up", "file_name": UP}]})
    assert only_up["retune"] and only_up["names"] == [UP] and not only_up["down"]


@pytest.mark.parametrize("host, changes", [
    ("gpu2", {}),
    ("gpu1", {"retune": "false"}),
    ("gpu1", {"measured": False}),
    ("gpu1", {"check_mode": True}),
    ("gpu1", {"prediction": {**LOST, "retune": []}}),
    ("gpu1", {"prediction": {**LOST, "retune": [{"kernel": "up", "file_name": UP}],
                             "flags": {"errors": ["--enable-foo: unrecognized"]}}}),
    ("gpu1", {"prediction": {**LOST, "retune": [{"kernel": "up", "file_name": UP}],
                             "moe": [{"kernel": "up", "file_name": UP, "verdict": "error"}]}}),
    ("gpu1", {"carry": False, "prediction": {**LOST, "retune": [{"kernel": "up", "file_name": UP}],
                                             "carry": [{"name": DOWN}]}}),
], ids=["not the canary", "upgrade_retune false", "no A/B", "check mode", "nothing to retune", "a refused flag",
        "a lookup error", "a skipped carry"])
def test_no_retune_off_the_canary_without_its_ab_or_when_a_retune_cannot_make_it_ready(host, changes):
    assert retune_plan(host, **changes)["retune"] is False


def test_a_prediction_not_made_retunes_nothing_and_a_wrong_one_is_named():
    assert retune_plan(prediction={"skipped": True}) == {"retune": False, "names": [], "down": False,
                                                         "expected": {"up": None, "down": None}}
    assert retune_plan(prediction=None)["names"] == []
    with pytest.raises(AnsibleFilterError, match="upgrade_retune_plan: prediction must be a dict or null, got list"):
        retune_plan(prediction=[])
