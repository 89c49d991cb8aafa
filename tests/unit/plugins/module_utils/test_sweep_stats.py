# Copyright (c) llmops.sglang contributors
# Apache License 2.0 (see LICENSE)
"""compare_sweeps / sweep_table / summarize_level and the two filter plugins wrapping them."""
from __future__ import annotations

import json
import math
import os
import statistics
import subprocess
import sys
from pathlib import Path

import pytest
from ansible.errors import AnsibleFilterError

from ansible_collections.llmops.sglang.plugins.filter.compare_sweeps import FilterModule as CompareFilters
from ansible_collections.llmops.sglang.plugins.filter.sweep_table import FilterModule as TableFilters
from ansible_collections.llmops.sglang.plugins.module_utils.decisions import decide_trial
from ansible_collections.llmops.sglang.plugins.module_utils.sweep_stats import (
    COMPARE_HEADER,
    SEQUENTIAL_COMPARE_HEADER,
    SWEEP_HEADER,
    compare_sweeps,
    sequential_plan,
    sequential_stop_rule,
    summarize_level,
    sweep_table,
)

REPO_ROOT = Path(__file__).resolve().parents[4]
# The real case of design.md: baseline vs --enable-fused-moe-sum-all-reduce/--enable-flashinfer-allreduce-fusion,
# one 1000-in/1000-out run per level, aggregate output tok/s.
REAL_BASELINE = {1: 121.6, 4: 399.1, 16: 1213.5, 32: 1515.1, 64: 1582.5}
REAL_CANDIDATE = {1: 121.9, 4: 410.8, 16: 1212.7, 32: 1509.2, 64: 1572.4}
# Five run-to-run multipliers with a sample CV of about 0.9 % (serving noise at concurrency >= 8).
LOW_NOISE = (0.990, 1.006, 1.000, 1.012, 0.993)


def run(agg_tok_s: float, concurrency: int, *, ok: int = 32, wall_s: float = 26.4) -> dict:
    return {"agg_tok_s": agg_tok_s, "per_req_tok_s": agg_tok_s / concurrency * 0.97, "tokens": ok * 1000,
            "wall_s": wall_s, "ok": ok, "failed": 0, "token_mismatch": 0,
            "ttft_ms": {"p50": 180.0, "p90": 240.0, "p99": 410.0}}


def sweep(levels: dict[int, list[float]]) -> dict:
    return {"schema_version": 1, "levels": [
        {"concurrency": c, "runs": [run(value, c) for value in values]} for c, values in levels.items()]}


def single_run_sweep(values: dict[int, float]) -> dict:
    return sweep({c: [value] for c, value in values.items()})


def noisy(median: float, multipliers: tuple[float, ...] = LOW_NOISE) -> list[float]:
    return [median * m for m in multipliers]


def test_real_case_single_runs_is_no_significant_change() -> None:
    result = compare_sweeps(single_run_sweep(REAL_BASELINE), single_run_sweep(REAL_CANDIDATE))
    assert result["verdict"] == "no significant change"
    assert [level["verdict"] for level in result["levels"]] == ["within_noise"] * 5
    assert all(level["low_confidence"] and level["method"] == "noise_band" for level in result["levels"])
    assert all(level["p_value"] is None and level["ci_low_pct"] is None for level in result["levels"])
    changes = {level["concurrency"]: round(level["change_pct"], 2) for level in result["levels"]}
    assert changes == {1: 0.25, 4: 2.93, 16: -0.07, 32: -0.39, 64: -0.64}
    assert result["improved"] == [] and result["regressed"] == []
    assert result["table"].splitlines() == [
        COMPARE_HEADER,
        "|---:|---:|---:|---:|---|",
        "| 1 | 121.6 | 121.9 | +0.2% | within_noise (low confidence) |",
        "| 4 | 399.1 | 410.8 | +2.9% | within_noise (low confidence) |",
        "| 16 | 1213.5 | 1212.7 | -0.1% | within_noise (low confidence) |",
        "| 32 | 1515.1 | 1509.2 | -0.4% | within_noise (low confidence) |",
        "| 64 | 1582.5 | 1572.4 | -0.6% | within_noise (low confidence) |",
    ]


def test_plus_15_percent_with_five_runs_at_one_percent_cv_is_improved() -> None:
    result = compare_sweeps(sweep({16: noisy(1213.5)}), sweep({16: noisy(1213.5 * 1.15)}))
    level = result["levels"][0]
    assert result["verdict"] == "improved" and result["improved"] == [16]
    assert level["verdict"] == "improved" and level["method"] == "mann_whitney+bootstrap"
    assert level["n_baseline"] == 5 and level["n_candidate"] == 5 and not level["low_confidence"]
    assert level["change_pct"] == pytest.approx(15.0, abs=0.01)
    assert level["p_value"] == pytest.approx(2 / 252)  # exact two-sided minimum for 5 vs 5: 2 / C(10, 5)
    assert 10.0 < level["ci_low_pct"] < 15.0 < level["ci_high_pct"] < 20.0
    assert level["cv_baseline_pct"] == pytest.approx(0.9, abs=0.1)
    assert level["threshold_pct"] == pytest.approx(2.0, abs=0.01)


def test_minus_8_percent_is_regressed() -> None:
    result = compare_sweeps(sweep({64: noisy(1582.5)}), sweep({64: noisy(1582.5 * 0.92)}))
    assert result["verdict"] == "regressed" and result["regressed"] == [64]
    assert result["levels"][0]["change_pct"] == pytest.approx(-8.0, abs=0.01)
    assert result["levels"][0]["ci_high_pct"] < 0


def test_small_change_with_five_runs_stays_within_noise_even_if_significant() -> None:
    """+1.5 % separates the samples completely, but is below the 2 % minimum effect."""
    result = compare_sweeps(sweep({32: noisy(1515.1, (1.0, 1.001, 0.999, 1.0005, 0.9995))}),
                            sweep({32: noisy(1515.1 * 1.015, (1.0, 1.001, 0.999, 1.0005, 0.9995))}))
    level = result["levels"][0]
    assert level["significant"] is True and level["verdict"] == "within_noise"
    assert result["verdict"] == "no significant change"


def test_large_but_noisy_change_with_three_runs_is_within_noise() -> None:
    """Low-concurrency spec decoding: CV ~10 % makes +8 % unresolvable."""
    result = compare_sweeps(sweep({1: [121.6, 109.0, 134.0]}), sweep({1: [131.3, 118.0, 146.0]}))
    level = result["levels"][0]
    assert level["verdict"] == "within_noise" and level["low_confidence"]
    assert level["threshold_pct"] > 15.0
    assert level["p_value"] > 0.05


def test_single_run_outside_the_noise_band_is_low_confidence() -> None:
    result = compare_sweeps(single_run_sweep({16: 1213.5}), single_run_sweep({16: 1213.5 * 1.07}))
    level = result["levels"][0]
    assert level["verdict"] == "improved" and level["low_confidence"] is True
    assert level["threshold_pct"] == 5.0 and level["significant"] is None
    assert "noise band ±5.00%" in level["evidence"]
    assert result["low_confidence"] is True


def test_mixed_when_one_level_improves_and_another_regresses() -> None:
    baseline = sweep({4: noisy(399.1), 64: noisy(1582.5)})
    candidate = sweep({4: noisy(399.1 * 1.10), 64: noisy(1582.5 * 0.90)})
    result = compare_sweeps(baseline, candidate)
    assert result["verdict"] == "mixed"
    assert result["improved"] == [4] and result["regressed"] == [64]


def test_per_request_change_is_reported_next_to_the_aggregate() -> None:
    result = compare_sweeps(single_run_sweep({4: 399.1}), single_run_sweep({4: 410.8}))
    level = result["levels"][0]
    assert level["baseline_per_req_median"] == pytest.approx(399.1 / 4 * 0.97)
    assert level["per_req_change_pct"] == pytest.approx((410.8 / 399.1 - 1) * 100)


def test_unmatched_and_failed_levels_are_skipped_with_a_reason() -> None:
    baseline = single_run_sweep({1: 121.6, 4: 399.1, 16: 1213.5})
    candidate = single_run_sweep({4: 410.8, 16: 1212.7, 32: 1509.2})
    baseline["levels"][2]["runs"] = []
    result = compare_sweeps(baseline, candidate)
    assert [level["concurrency"] for level in result["levels"]] == [4]
    assert result["skipped"] == [
        {"concurrency": 1, "reason": "level missing from the candidate sweep"},
        {"concurrency": 16, "reason": "no runs on baseline"},
        {"concurrency": 32, "reason": "level missing from the baseline sweep"},
    ]


def test_results_are_reproducible_for_a_seed() -> None:
    baseline, candidate = sweep({16: noisy(1213.5)}), sweep({16: noisy(1213.5 * 1.03)})
    assert compare_sweeps(baseline, candidate) == compare_sweeps(baseline, candidate)


@pytest.mark.parametrize(("mutate", "field"), [
    (lambda s: s["levels"][0]["runs"][1].pop("agg_tok_s"), "candidate.levels[0].runs[1].agg_tok_s"),
    (lambda s: s["levels"][0].update(concurrency=0), "candidate.levels[0].concurrency"),
    (lambda s: s["levels"][0].update(runs="1213.5"), "candidate.levels[0].runs"),
    (lambda s: s.pop("levels"), "candidate.levels"),
])
def test_malformed_input_names_the_field(mutate, field: str) -> None:
    candidate = sweep({16: noisy(1213.5)})
    mutate(candidate)
    with pytest.raises(ValueError, match=field.replace("[", r"\[").replace("]", r"\]")):
        compare_sweeps(sweep({16: noisy(1213.5)}), candidate)


def test_metric_must_be_a_throughput() -> None:
    with pytest.raises(ValueError, match="metric must be one of"):
        compare_sweeps(single_run_sweep(REAL_BASELINE), single_run_sweep(REAL_CANDIDATE), metric="ttft_ms")


def test_summarize_level_takes_medians_and_totals() -> None:
    runs = [run(1210.0, 16, wall_s=26.0), run(1220.0, 16, wall_s=27.0), run(1190.0, 16, ok=31, wall_s=28.0)]
    runs[2]["failed"] = 1
    runs[1]["ttft_ms"]["p99"] = 900.0
    summary = summarize_level(runs)
    assert summary["n_runs"] == 3
    assert summary["agg_tok_s"] == 1210.0 and summary["wall_s"] == 27.0
    assert summary["agg_tok_s_min"] == 1190.0 and summary["agg_tok_s_max"] == 1220.0
    assert summary["ok"] == 95 and summary["failed"] == 1
    assert summary["ttft_ms"] == {"p50": 180.0, "p90": 240.0, "p99": 410.0}
    assert summary["agg_tok_s_cv_pct"] == pytest.approx(1.26, abs=0.01)


def test_sweep_table_has_the_operators_columns() -> None:
    document = sweep({1: [121.6, 122.4, 120.9], 64: [1582.5]})
    document["levels"][0]["runs"][1]["failed"] = 1
    assert sweep_table(document) == "\n".join([
        SWEEP_HEADER,
        "|---:|---:|---:|---:|---:|---:|",
        "| 1 | 121.6 | 118.0 | 32000 | 26.40 | 96/97 |",
        "| 64 | 1582.5 | 24.0 | 32000 | 26.40 | 32/32 |",
    ])
    assert SWEEP_HEADER == "| C | Agg tok/s | Per-req tok/s | Tokens | Wall(s) | Ok |"


def test_filters_wrap_the_functions_and_name_the_bad_field() -> None:
    compare = CompareFilters().filters()["compare_sweeps"]
    table = TableFilters().filters()["sweep_table"]
    baseline, candidate = single_run_sweep(REAL_BASELINE), single_run_sweep(REAL_CANDIDATE)
    assert compare(baseline, candidate, noise_band_pct=2.0)["levels"][1]["verdict"] == "improved"
    assert table(baseline) == sweep_table(baseline)
    candidate["levels"][3]["runs"][0]["agg_tok_s"] = "fast"
    with pytest.raises(AnsibleFilterError, match=r"candidate\.levels\[3\]\.runs\[0\]\.agg_tok_s"):
        compare(baseline, candidate)
    with pytest.raises(AnsibleFilterError, match=r"sweep\.levels must be a list"):
        table({"levels": None})
    baseline["levels"][1]["runs"][0]["ttft_ms"] = 398.1
    with pytest.raises(AnsibleFilterError, match=r"sweep\.levels\[1\]\.runs\[0\]\.ttft_ms must be an object"):
        table(baseline)


def test_filters_load_by_fqcn_in_a_playbook(tmp_path: Path) -> None:
    """The filters as Ansible loads them: FQCN lookup, templated arguments, result back as data."""
    baseline, candidate = single_run_sweep(REAL_BASELINE), single_run_sweep(REAL_CANDIDATE)
    playbook = tmp_path / "compare.yml"
    playbook.write_text(f"""
- hosts: localhost
  gather_facts: false
  vars:
    baseline: {json.dumps(baseline)}
    candidate: {json.dumps(candidate)}
  tasks:
    - ansible.builtin.copy:
        dest: {tmp_path / 'result.json'}
        content: "{{{{ {{'verdict': (baseline | llmops.sglang.compare_sweeps(candidate)).verdict,
                       'table': baseline | llmops.sglang.sweep_table}} | to_json }}}}"
""")
    (tmp_path / "ansible.cfg").write_text("[defaults]\n")  # isolate from any ansible.cfg around the test run
    env = {**os.environ, "ANSIBLE_COLLECTIONS_PATH": str(REPO_ROOT / "collections"),
           "ANSIBLE_CONFIG": str(tmp_path / "ansible.cfg"),
           "ANSIBLE_LOCAL_TEMP": str(tmp_path / "tmp"), "ANSIBLE_REMOTE_TMP": str(tmp_path / "tmp"),
           "ANSIBLE_HOME": str(tmp_path / "home")}
    done = subprocess.run([str(Path(sys.executable).parent / "ansible-playbook"), "-i", "localhost,", "-c", "local",
                           "-e", f"ansible_python_interpreter={sys.executable}", str(playbook)],
                          env=env, capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    result = json.loads((tmp_path / "result.json").read_text())
    assert result == {"verdict": "no significant change", "table": sweep_table(baseline)}


# ---- sweeps measured with the stopping rule ---------------------------------------------------------------------

def sequential_sweep(levels: dict[int, list[float]], reference: dict, **rule) -> dict:
    """A candidate as the bench module records it after measuring against ``reference`` with a stopping rule."""
    document = sweep(levels)
    document["sequential"] = sequential_plan(reference, list(levels), rule)
    return document


def test_a_sequential_candidate_is_judged_by_its_rule_and_says_why_each_level_stopped() -> None:
    reference = sweep({16: noisy(1213.5), 64: noisy(1582.5)})
    candidate = sequential_sweep({16: noisy(1213.5 * 1.15, LOW_NOISE[:2]), 64: noisy(1582.5, LOW_NOISE[1:4])},
                                 reference, one_sided_stops=False)
    result = compare_sweeps(reference, candidate)
    improved, same = result["levels"]
    assert result["verdict"] == "improved" and result["low_confidence"] is False
    assert (improved["method"], improved["n_candidate"], improved["low_confidence"]) == ("group_sequential", 2, False)
    assert improved["sequential"]["boundary"] == "efficacy_upper" and improved["significant"] is True
    assert improved["evidence"].startswith("improved: t = +")
    assert same["verdict"] == "within_noise" and same["sequential"]["decision"] == "no_change"
    assert result["sequential"]["repeats"] == {16: 2, 64: 3} and result["sequential"]["decided"] is True
    assert result["sequential"]["summary"].startswith(
        "repeats needed (sequential, 2-10 per level): C=16 2 (improved, t = +")
    assert "; C=64 3 (no change, inside ±2.0%)" in result["sequential"]["summary"]
    assert result["table"].splitlines()[0] == SEQUENTIAL_COMPARE_HEADER
    assert result["table"].splitlines()[2].endswith("| improved | 2 (efficacy upper) |")


def test_after_an_improved_level_the_next_only_has_to_show_it_did_not_regress() -> None:
    """one_sided_stops (the default): C=64 (+1.5 %, neither improved nor inside +-2 % yet), measured after C=16
    improved, stops once a regression of the threshold is ruled out; its verdict is within noise, the sweep's
    improved."""
    reference = sweep({16: noisy(1213.5), 64: noisy(1582.5)})
    candidate = sequential_sweep({16: noisy(1213.5 * 1.15, LOW_NOISE[:2]), 64: noisy(1582.5 * 1.015, LOW_NOISE[1:3])},
                                 reference)
    result = compare_sweeps(reference, candidate)
    improved, guarded = result["levels"]
    assert result["verdict"] == "improved" and result["low_confidence"] is False
    assert improved["sequential"]["decision"] == "improved" and improved["sequential"]["watch"] == "improvement"
    assert guarded["sequential"]["watch"] == "regression" and guarded["verdict"] == "within_noise"
    assert (guarded["sequential"]["decision"], guarded["sequential"]["boundary"]) == ("not_regressed", "no_regression")
    assert guarded["evidence"].startswith("not regressed: the change +1.")
    assert "; C=64 2 (not regressed, above -2.0% (a level before it improved))" in result["sequential"]["summary"]


def test_a_level_that_stopped_not_improved_must_rule_out_a_regression_once_a_later_level_improved() -> None:
    """C=16 (-1 % in 2 runs) stopped not improved without ruling out a -2 % regression; C=64 then improved. The
    adoption now hinges on C=16 having not regressed, which it did not show: undecided, not adopted."""
    reference = sweep({16: noisy(1213.5), 64: noisy(1582.5)})
    candidate = sequential_sweep({16: [1213.5 * 0.99 * 0.995, 1213.5 * 0.99 * 1.005],
                                  64: noisy(1582.5 * 1.15, LOW_NOISE[:2])}, reference)
    result = compare_sweeps(reference, candidate)
    open_level, improved = result["levels"]
    assert open_level["sequential"]["decision"] == "not_improved"
    assert open_level["sequential"]["rules_out_regression"] is False and open_level["low_confidence"] is True
    assert open_level["evidence"].endswith("C=64 improved after it and this level's interval does not rule out a "
                                           "regression beyond -2.00%: undecided")
    assert improved["verdict"] == "improved" and result["verdict"] == "improved"
    assert result["low_confidence"] is True and result["sequential"]["decided"] is False
    assert ("C=16 2 (not improved, below +2.0%, but a regression is not ruled out and C=64 improved after it)"
            in result["sequential"]["summary"])
    assert decide_trial(result)["adopt"] is False
    # C=16 without a change rules a regression out in the same 2 runs: the improvement is adopted
    tight = sequential_sweep({16: [1213.5 * 0.997, 1213.5 * 1.003], 64: noisy(1582.5 * 1.15, LOW_NOISE[:2])},
                             reference)
    settled = compare_sweeps(reference, tight)
    assert settled["levels"][0]["sequential"]["decision"] == "not_improved"
    assert settled["low_confidence"] is False and decide_trial(settled)["adopt"] is True


def test_the_stop_rule_reopens_the_unsettled_levels_when_a_later_level_improves() -> None:
    """C=16 stops not improved without ruling out a regression; C=64's improvement reopens it; measured on (a level
    after the improved one) it only has to rule out a regression, and the sweep so recorded is adopted."""
    reference = sweep({16: noisy(1213.5), 64: noisy(1582.5)})
    plan = sequential_plan(reference, [16, 64], {})
    stop_rule = sequential_stop_rule(reference, plan)
    first = [run(1213.5 * 0.99 * 0.995, 16), run(1213.5 * 0.99 * 1.005, 16)]
    assert stop_rule(16, first)["decision"] == "not_improved"
    improved = [run(value, 64) for value in noisy(1582.5 * 1.15, LOW_NOISE[:2])]
    assert stop_rule(64, improved)["reopens"] == [16]
    more = first + [run(1213.5 * value, 16) for value in (1.0, 0.998, 1.003, 1.001)]
    looks = [stop_rule(16, more[:count]) for count in range(3, len(more) + 1)]
    settled = next(look for look in looks if look is not None)
    assert (settled["decision"], settled["watch"]) == ("not_regressed", "regression")
    recorded = {"levels": [{"concurrency": 64, "runs": improved},
                           {"concurrency": 16, "runs": more[:settled["repeats"]]}], "sequential": plan}
    result = compare_sweeps(reference, recorded)
    assert result["low_confidence"] is False and decide_trial(result)["adopt"] is True


def test_levels_watch_one_side_in_the_order_they_were_measured_and_old_designs_both() -> None:
    reference = sweep({16: noisy(1213.5), 64: noisy(1582.5)})
    # C=64 measured first (the sweep's order) watches for an improvement, and so does C=16 (C=64 did not improve)
    candidate = sequential_sweep({64: noisy(1582.5, LOW_NOISE[1:4]), 16: noisy(1213.5 * 1.15, LOW_NOISE[:2])},
                                 reference)
    levels = {level["concurrency"]: level for level in compare_sweeps(reference, candidate)["levels"]}
    assert [levels[c]["sequential"]["watch"] for c in (16, 64)] == ["improvement", "improvement"]
    assert levels[64]["sequential"]["decision"] == "not_improved"
    # a design recorded before the option existed settled both sides of every level
    old = sequential_sweep({16: noisy(1213.5 * 1.15, LOW_NOISE[:2]), 64: noisy(1582.5, LOW_NOISE[1:4])}, reference)
    del old["sequential"]["design"]["one_sided_stops"]
    same = compare_sweeps(reference, old)["levels"][1]
    assert same["sequential"]["watch"] is None and same["sequential"]["decision"] == "no_change"


def test_the_stop_rule_watches_the_levels_after_an_improved_one_as_compare_sweeps_judges_them() -> None:
    reference = sweep({16: noisy(1213.5), 64: noisy(1582.5)})
    plan = sequential_plan(reference, [16, 64], {})
    stop_rule = sequential_stop_rule(reference, plan)
    first = [run(value, 16) for value in noisy(1213.5 * 1.15, LOW_NOISE[:2])]
    assert stop_rule(16, first[:1]) is None and stop_rule(16, first)["decision"] == "improved"
    second = [run(value, 64) for value in noisy(1582.5 * 1.015, LOW_NOISE[1:3])]
    stopped = stop_rule(64, second)
    assert (stopped["decision"], stopped["watch"], stopped["ends_sweep"]) == ("not_regressed", "regression", False)
    recorded = {"levels": [{"concurrency": 16, "runs": first}, {"concurrency": 64, "runs": second}],
                "sequential": plan}
    assert compare_sweeps(reference, recorded)["levels"][1]["sequential"]["decision"] == "not_regressed"


def test_a_sequential_level_shows_the_change_its_rule_held_against_the_threshold() -> None:
    """Skewed runs put the medians' ratio and the rule's mean-log estimate apart; the one shown is the rule's."""
    reference = sweep({16: [1000.0, 1000.0, 1000.0, 1000.0, 1300.0]})
    candidate = sequential_sweep({16: [1020.0, 1020.0, 1400.0]}, reference)
    level = compare_sweeps(reference, candidate)["levels"][0]
    mean_log = (statistics.fmean(map(math.log, (1020.0, 1020.0, 1400.0)))
                - statistics.fmean(map(math.log, (1000.0, 1000.0, 1000.0, 1000.0, 1300.0))))
    assert level["change_pct"] == pytest.approx((math.exp(mean_log) - 1) * 100)
    assert level["change_pct"] == pytest.approx(level["sequential"]["estimate_pct"])
    assert level["median_change_pct"] == pytest.approx(2.0)
    assert f"{level['change_pct']:+.1f}%" in compare_sweeps(reference, candidate)["table"]


def test_a_level_still_measuring_is_low_confidence_and_left_out_levels_say_why() -> None:
    reference = sweep({1: noisy(121.6), 4: noisy(399.1)})
    candidate = sequential_sweep({1: noisy(121.6, LOW_NOISE[:1])}, reference)
    candidate["not_measured"] = [{"concurrency": 4, "reason": "C=1 regressed after 2 repeats; the sweep stopped"}]
    result = compare_sweeps(reference, candidate)
    level = result["levels"][0]
    assert level["sequential"]["decision"] == "continue" and level["low_confidence"] is True
    assert level["p_value"] is None and level["significant"] is None
    assert result["skipped"] == [{"concurrency": 4, "reason": "C=1 regressed after 2 repeats; the sweep stopped",
                                  "not_measured": True}]
    assert result["sequential"]["decided"] is False and result["sequential"]["not_measured"] == [4]
    assert result["sequential"]["summary"].endswith("C=4 not measured (C=1 regressed after 2 repeats; the sweep "
                                                    "stopped)")


def test_a_sequential_candidate_must_be_compared_with_its_own_reference_and_options() -> None:
    reference = sweep({16: noisy(1213.5)})
    candidate = sequential_sweep({16: noisy(1213.5, LOW_NOISE[:2])}, reference)
    with pytest.raises(ValueError, match=r"candidate\.sequential\.design\.alpha is 0\.05 but this comparison uses 0\.1"):
        compare_sweeps(reference, candidate, alpha=0.1)
    with pytest.raises(ValueError, match="C=16 was measured against 5 reference runs but this baseline has 3"):
        compare_sweeps(sweep({16: noisy(1213.5, LOW_NOISE[:3])}), candidate)
    candidate["sequential"]["design"]["min_repeats"] = 0
    with pytest.raises(ValueError, match="candidate.sequential.design.min_repeats must be an integer from 1 to 10"):
        compare_sweeps(reference, candidate)


@pytest.mark.parametrize(("reference", "rule", "message"), [
    ({16: [1213.5]}, {}, r"reference_sweep\.levels\[0\] \(concurrency 16\) has 1 run\(s\); a sequential verdict "
                         r"needs at least 2 reference runs"),
    ({64: noisy(1582.5)}, {}, r"reference_sweep has no level with concurrency 16 \(it has \[64\]\)"),
    ({16: noisy(1213.5)}, {"alpha": 2.0}, r"sequential\.alpha must be between 0 and 1, got 2\.0"),
    ({16: noisy(1213.5)}, {"metric": "ttft_ms"}, r"sequential\.metric must be one of agg_tok_s"),
    ({16: noisy(1213.5)}, {"max_repeats": 1, "min_repeats": 2},
     r"sequential\.min_repeats must be an integer from 1 to 1, got 2"),
])
def test_a_stopping_rule_that_cannot_work_is_refused_naming_the_field(reference, rule, message) -> None:
    with pytest.raises(ValueError, match=message):
        sequential_plan(sweep(reference), [16], rule)


def test_the_stop_rule_asks_compare_sweeps_and_ends_the_sweep_on_a_regression() -> None:
    reference = sweep({16: noisy(1213.5)})
    stop = sequential_stop_rule(reference, sequential_plan(reference, [16], {}))
    first = [run(1213.5 * 0.9, 16)]
    assert stop(16, first) is None  # one run: below min_repeats
    stopped = stop(16, first + [run(1213.5 * 0.9 * 1.004, 16)])
    assert (stopped["decision"], stopped["ends_sweep"], stopped["repeats"]) == ("regressed", True, 2)
    keep_going = sequential_stop_rule(reference, sequential_plan(reference, [16], {"stop_on_regression": False}))
    assert keep_going(16, first + [run(1213.5 * 0.9 * 1.004, 16)])["ends_sweep"] is False
