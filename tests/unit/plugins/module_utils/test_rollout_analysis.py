"""A rollout's analysis of an updated host against its own previous configuration (issue #36 item 15)."""
from __future__ import annotations

import pytest
from ansible.errors import AnsibleFilterError

from ansible_collections.llmops.sglang.plugins.filter.rollout_analysis import rollout_analysis
from ansible_collections.llmops.sglang.plugins.filter.rollout_analysis_settings import rollout_analysis_settings
from ansible_collections.llmops.sglang.plugins.module_utils.rollout_analysis import DEFAULT_BENCH, DEFAULT_LIMITS, analyse


def level(concurrency: int, ttft_p99: float | None, tpot_p99: float | None, requests: int = 32, failed: int = 0) -> dict:
    """A level as the bench module writes it: its runs' counts and the summary's median percentiles."""
    return {"concurrency": concurrency,
            "runs": [{"repeat": 1, "requests": requests, "ok": requests - failed, "failed": failed}],
            "summary": {"ttft_ms": {"p50": 1.0, "p99": ttft_p99}, "tpot_ms": {"p50": 1.0, "p99": tpot_p99}}}


def sweep(*levels, error: str | None = None, failed_level: dict | None = None) -> dict:
    return {"schema_version": 1, "levels": list(levels), "error": error, "failed_level": failed_level}


BEFORE = sweep(level(4, 200.0, 20.0))


def test_the_same_service_within_the_limits_passes_with_its_numbers():
    decision = analyse(BEFORE, sweep(level(4, 215.0, 21.0)))
    assert decision["passed"] and decision["reasons"] == []
    assert decision["levels"]["4"] == {"error_rate": {"before": 0.0, "after": 0.0},
                                       "ttft_ms": {"before_p99": 200.0, "after_p99": 215.0, "change_pct": 7.5},
                                       "tpot_ms": {"before_p99": 20.0, "after_p99": 21.0, "change_pct": 5.0}}
    assert decision["limits"] == DEFAULT_LIMITS


def test_a_slower_decode_fails_on_p99_tpot_though_the_server_is_healthy():
    decision = analyse(BEFORE, sweep(level(4, 205.0, 32.0)))
    assert not decision["passed"]
    assert decision["reasons"] == ["level 4: p99 TPOT 32.0 ms is +60.0% over 20.0 ms before the change (limit +10%)"]


def test_failed_requests_over_the_limit_fail_even_when_latency_holds():
    decision = analyse(BEFORE, sweep(level(4, 200.0, 20.0, requests=200, failed=3)))
    assert decision["reasons"] == ["level 4: error rate 1.5% (3 of 200 requests) > 1.0%"]
    assert analyse(BEFORE, sweep(level(4, 200.0, 20.0, requests=200, failed=2)))["passed"], "1% is within 1%"


def test_a_level_the_bench_gave_up_on_counts_with_its_failures():
    after = sweep(error="level C=4: 32 of 32 requests failed", failed_level=level(4, None, None, failed=32))
    decision = analyse(BEFORE, after)
    assert decision["reasons"] == ["level 4: error rate 100.0% (32 of 32 requests) > 1.0%"]
    assert decision["after_error"] == "level C=4: 32 of 32 requests failed"


def test_a_server_that_does_not_answer_after_the_change_fails():
    decision = analyse(BEFORE, sweep(error="cannot connect to http://127.0.0.1:30000"))
    assert decision["reasons"] == ["the measurement after the change failed: cannot connect to http://127.0.0.1:30000"]


def test_every_level_is_judged_and_one_missing_after_the_change_fails():
    before = sweep(level(1, 100.0, 10.0), level(8, 300.0, 30.0))
    decision = analyse(before, sweep(level(1, 100.0, 10.0), error="time limit"))
    assert decision["reasons"] == ["level 8: not measured after the change (time limit)"]


def test_operator_limits_replace_the_defaults():
    decision = analyse(BEFORE, sweep(level(4, 205.0, 32.0)), {"max_tpot_p99_increase_pct": 75, "max_error_rate": None})
    assert decision["passed"] and decision["limits"]["max_error_rate"] == 0.01


def test_without_a_measurement_before_the_change_there_is_nothing_to_judge_by():
    with pytest.raises(ValueError, match="before the change has no result to compare with: unreachable"):
        analyse(sweep(error="unreachable"), BEFORE)


@pytest.mark.parametrize("limits, message", [
    ({"max_p50_pct": 3}, "unknown max_p50_pct"),
    ({"max_error_rate": -1}, "max_error_rate must be a number >= 0"),
    ({"max_ttft_p99_increase_pct": True}, "must be a number"),
])
def test_limits_that_mean_nothing_are_refused(limits, message):
    with pytest.raises(ValueError, match=message):
        analyse(BEFORE, BEFORE, limits)


def test_the_filter_names_what_is_wrong():
    assert rollout_analysis(BEFORE, BEFORE)["passed"]
    with pytest.raises(AnsibleFilterError, match="rollout_analysis: after must be a dict, got str"):
        rollout_analysis(BEFORE, "sweep")
    with pytest.raises(AnsibleFilterError, match="rollout_analysis: the measurement before the change"):
        rollout_analysis(sweep(), BEFORE)


def test_the_analysis_settings_put_the_operators_bench_and_limits_over_the_defaults():
    settings = rollout_analysis_settings({"bench": {"requests_per_level": 160, "concurrency_levels": [4]},
                                          "limits": {"max_tpot_p99_increase_pct": 25}})
    assert settings["on"] is True
    assert settings["bench"] == {**DEFAULT_BENCH, "requests_per_level": 160, "concurrency_levels": [4]}
    assert settings["limits"] == {**DEFAULT_LIMITS, "max_tpot_p99_increase_pct": 25}
    assert rollout_analysis_settings({}) == {"on": True, "bench": DEFAULT_BENCH, "limits": DEFAULT_LIMITS}
    assert rollout_analysis_settings({"bench": None, "limits": None})["bench"] == DEFAULT_BENCH


def test_a_null_analysis_turns_it_off():
    assert rollout_analysis_settings(None)["on"] is False


@pytest.mark.parametrize("analysis, message", [
    ({"limit": {}}, "rollout_analysis: unknown limit (known: bench, limits)"),
    ({"limits": {"max_p50": 1}}, "unknown max_p50"),
    ({"limits": {"max_error_rate": -1}}, "max_error_rate must be a number >= 0"),
    ({"bench": [8]}, "rollout_analysis.bench must be a dict of bench options"),
    ("fast", "rollout_analysis must be a dict with bench and limits, or null to turn the analysis off; got str"),
])
def test_analysis_settings_that_mean_nothing_are_refused_before_any_host_changes(analysis, message):
    with pytest.raises(AnsibleFilterError, match=message.replace("(", r"\(").replace(")", r"\)")):
        rollout_analysis_settings(analysis)
