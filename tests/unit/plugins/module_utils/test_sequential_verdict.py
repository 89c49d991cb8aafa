# Copyright (c) llmops.sglang contributors
# Apache License 2.0 (see LICENSE)
"""The group-sequential stopping rule: boundaries against published tables, its error rates by seeded simulation
(one level, then whole sweeps through compare_sweeps and decide_trial), caps, and option errors naming the field."""
from __future__ import annotations

import math
import random

import pytest

from ansible_collections.llmops.sglang.plugins.module_utils import sequential_verdict as sv
from benchmarks.verdict_cost import Scenario, real_case_cost_model, simulate_cell

FIVE_EQUAL_LOOKS = (0.2, 0.4, 0.6, 0.8, 1.0)


def design(**options) -> dict:
    return sv.validated_design(options, alpha=options.pop("alpha", 0.05), levels=options.pop("levels", 1))


def log_normal_runs(rng: random.Random, count: int, effect_pct: float = 0.0, cv: float = 0.01) -> list[float]:
    return [math.exp(rng.gauss(math.log1p(effect_pct / 100.0), cv)) * 1000.0 for _run in range(count)]


def test_boundaries_match_the_published_lan_demets_tables() -> None:
    """Two-sided alpha 0.05, five equally spaced looks (Jennison & Turnbull table 7.6; gsDesign sfLDOF/sfLDPocock)."""
    obrien_fleming = sv.crossing_boundaries(FIVE_EQUAL_LOOKS, 0.025, "obrien_fleming", True)
    pocock = sv.crossing_boundaries(FIVE_EQUAL_LOOKS, 0.025, "pocock", True)
    assert obrien_fleming == pytest.approx((4.877, 3.357, 2.680, 2.290, 2.031), abs=2e-3)
    assert pocock == pytest.approx((2.438, 2.427, 2.410, 2.397, 2.386), abs=2e-3)


def test_spending_reaches_the_total_at_the_last_look_and_obrien_fleming_spends_late() -> None:
    for spending in sv.SPENDING_FUNCTIONS:
        assert sv.spent(1.0, 0.05, spending) == pytest.approx(0.05)
        assert sv.spent(0.0, 0.05, spending) == 0.0
    assert sv.spent(0.3, 0.05, "obrien_fleming") < 0.1 * sv.spent(0.3, 0.05, "pocock")


def test_information_fractions_follow_the_shared_reference() -> None:
    """Five reference runs: a candidate's tenth run adds little, its second already gives 43% of the information."""
    fractions = sv.information_fractions(5, 2, 10)
    assert fractions[0] == pytest.approx(0.3 / 0.7) and fractions[-1] == 1.0
    assert list(fractions) == sorted(fractions)


def test_looking_after_every_run_keeps_the_false_change_rate_near_alpha() -> None:
    """No true change, threshold 0 (only the boundaries decide): the rule claims a change in about alpha of the
    trials; a plain t test at 0.05 after every run would claim one three times as often."""
    rng = random.Random(7)
    rule, trials, claimed, naive = design(), 3000, 0, 0
    for _trial in range(trials):
        reference, candidate = log_normal_runs(rng, 5), []
        naive_claim = False
        for _run in range(rule["max_repeats"]):
            candidate += log_normal_runs(rng, 1)
            look = sv.look_at_level(reference, candidate, 0.0, rule)
            naive_claim |= look.get("p_value", 1.0) < 0.05
            if look["decision"] != "continue":
                claimed += look["decision"] in ("improved", "regressed")
                break
        naive += naive_claim
    assert claimed / trials < 0.065  # alpha 0.05 plus three Monte-Carlo standard errors
    assert naive / trials > 0.12


def test_a_change_as_large_as_the_threshold_is_stopped_as_no_change_at_most_beta() -> None:
    rng = random.Random(11)
    rule, trials, no_change = design(beta=0.2), 3000, 0
    for _trial in range(trials):
        reference, candidate = log_normal_runs(rng, 5), []
        for _run in range(rule["max_repeats"]):
            candidate += log_normal_runs(rng, 1, effect_pct=2.0)
            look = sv.look_at_level(reference, candidate, 2.0, rule)
            if look["decision"] != "continue":
                no_change += look["boundary"] == "no_change"
                break
    assert no_change / trials < 0.2 + 0.022


def test_after_an_improved_level_a_regression_as_large_as_the_threshold_passes_at_most_beta() -> None:
    """watch="regression" (a level measured after another one improved): only a regression matters, and the no-regression
    boundary is the lower side of the one-sided beta design, so a true -threshold change stops there at most beta of
    the time; without a change the level stops at once far more often than a full look would."""
    rule, trials = design(), 3000
    for effect_pct, seed in ((-2.0, 13), (0.0, 17)):
        rng, passed, first_look = random.Random(seed), 0, 0
        for _trial in range(trials):
            reference, candidate = log_normal_runs(rng, 5), []
            for _run in range(rule["max_repeats"]):
                candidate += log_normal_runs(rng, 1, effect_pct=effect_pct)
                look = sv.look_at_level(reference, candidate, 2.0, rule, watch="regression")
                if look["decision"] != "continue":
                    passed += look["boundary"] == "no_regression"
                    first_look += len(candidate) == rule["min_repeats"]
                    break
        if effect_pct:
            assert passed / trials < rule["beta"] + 0.022
        else:
            assert passed / trials > 0.95 and first_look / trials > 0.8


def test_before_an_improved_level_an_improvement_as_large_as_the_threshold_passes_at_most_beta() -> None:
    """watch="improvement" (no level of the sweep improved yet): the no-improvement stop is the upper side of the
    one-sided beta design, so a true +threshold change stops there at most beta of the time; without a change the
    level stops sooner than the two-sided no-change stop lets it; a change beyond -threshold is measured on."""
    rule, trials = design(), 3000
    for effect_pct, seed in ((2.0, 19), (0.0, 23)):
        rng, passed, one_sided_runs, two_sided_runs = random.Random(seed), 0, 0, 0
        for _trial in range(trials):
            reference = log_normal_runs(rng, 5)
            runs = log_normal_runs(rng, rule["max_repeats"], effect_pct=effect_pct)
            for count in range(rule["min_repeats"], rule["max_repeats"] + 1):
                look = sv.look_at_level(reference, runs[:count], 2.0, rule, watch="improvement")
                if look["decision"] != "continue":
                    passed += look["boundary"] == "no_improvement"
                    one_sided_runs += count
                    break
            for count in range(rule["min_repeats"], rule["max_repeats"] + 1):
                if sv.look_at_level(reference, runs[:count], 2.0, rule)["decision"] != "continue":
                    two_sided_runs += count
                    break
        if effect_pct:
            assert passed / trials < rule["beta"] + 0.022
        else:
            assert passed / trials > 0.95 and one_sided_runs < 0.9 * two_sided_runs
    rng = random.Random(5)
    falling = sv.look_at_level(log_normal_runs(rng, 5), log_normal_runs(rng, 2, effect_pct=-2.5), 2.0, rule,
                               watch="improvement")
    assert falling["decision"] == "continue" and falling["rules_out_regression"] is False
    with pytest.raises(ValueError, match="watch must be one of improvement, regression or None, got 'both'"):
        sv.look_at_level(log_normal_runs(rng, 5), log_normal_runs(rng, 2), 2.0, rule, watch="both")


def test_a_clear_improvement_stops_at_the_first_look_with_its_reason() -> None:
    rng = random.Random(3)
    look = sv.look_at_level(log_normal_runs(rng, 5), log_normal_runs(rng, 2, effect_pct=15.0), 2.0, design())
    assert (look["decision"], look["boundary"], look["repeats"]) == ("improved", "efficacy_upper", 2)
    assert look["statistic"] > look["efficacy_bound"] and look["ci_low_pct"] > 0
    assert look["reason"].startswith("improved: t = +") and "crossed the upper boundary" in look["reason"]
    assert "at repeat 2 (alpha spent 0.00" in look["reason"]


def test_before_min_repeats_it_continues_and_at_max_repeats_it_always_decides() -> None:
    rule = design(min_repeats=3, max_repeats=4)
    rng = random.Random(5)
    reference = log_normal_runs(rng, 5, cv=0.03)
    early = sv.look_at_level(reference, log_normal_runs(rng, 2, cv=0.03), 2.0, rule)
    assert early["decision"] == "continue" and early["reason"] == "continue: 2 of at least 3 repeats"
    # About +5% at 2.4% CV against a 6% threshold: neither a change nor inside it, so only the cap ends it.
    reference = [1000.0, 1030.0, 970.0, 1015.0, 985.0]
    last = sv.look_at_level(reference, [1050.0, 1080.0, 1020.0, 1065.0], 6.0, rule)
    assert (last["decision"], last["boundary"]) == ("no_change", "max_repeats")
    assert last["reason"].startswith("no change: max_repeats 4 reached without crossing a boundary")
    assert last["alpha_spent"] == pytest.approx(0.05) and last["information_fraction"] == 1.0
    with pytest.raises(ValueError, match="5 candidate runs exceed the design's max_repeats 4"):
        sv.look_at_level(reference, reference, 2.0, rule)
    with pytest.raises(ValueError, match="at least 2 reference runs, got 1"):
        sv.look_at_level(reference[:1], reference[:3], 2.0, rule)


def test_identical_runs_leave_no_variance_and_still_decide() -> None:
    same = sv.look_at_level([1000.0] * 5, [1000.0] * 2, 2.0, design())
    assert (same["decision"], same["boundary"], same["statistic"]) == ("no_change", "no_change", 0.0)
    faster = sv.look_at_level([1000.0] * 5, [1100.0] * 2, 2.0, design())
    assert faster["decision"] == "improved" and faster["statistic"] == math.inf


def test_each_level_spends_its_share_of_alpha() -> None:
    rule = design(levels=5)
    assert rule["level_alpha"] == pytest.approx(0.01)
    looks = sv.look_table(5, 2, 10, 0.01, 0.2, "obrien_fleming", "pocock")
    assert looks[-1]["alpha_spent"] == pytest.approx(0.01) and looks[-1]["beta_spent"] == pytest.approx(0.2)


@pytest.mark.parametrize(("options", "message"), [
    ({"min_repeats": 11}, "sequential.min_repeats must be an integer from 1 to 10, got 11"),
    ({"max_repeats": 0}, "sequential.max_repeats must be an integer from 1 to 50, got 0"),
    ({"max_repeats": "10"}, "sequential.max_repeats must be an integer from 1 to 50, got '10'"),
    ({"spending": "haybittle"}, "sequential.spending must be one of obrien_fleming, pocock, got 'haybittle'"),
    ({"futility_spending": None, "beta": 0.5}, "sequential.beta must be a number above 0 and below 0.5, got 0.5"),
    ({"stop_on_regression": "yes"}, "sequential.stop_on_regression must be true or false, got 'yes'"),
    ({"min_repeat": 3}, "sequential: unknown option(s) min_repeat; known: min_repeats, max_repeats"),
])
def test_bad_options_name_the_field(options: dict, message: str) -> None:
    with pytest.raises(ValueError) as error:
        sv.validated_design(options, alpha=0.05, levels=5)
    assert str(error.value).startswith(message)


def test_alpha_and_levels_must_be_usable() -> None:
    with pytest.raises(ValueError, match="alpha must be a number above 0 and below 1, got 1.5"):
        sv.validated_design({}, alpha=1.5, levels=5)
    with pytest.raises(ValueError, match="levels must be an integer from 1 to 1000, got 0"):
        sv.validated_design({}, alpha=0.05, levels=0)


# ---- whole sweeps: the benchmark's simulator, the collection's compare_sweeps and decide_trial -------------------

@pytest.fixture(scope="module")
def cost():
    return real_case_cost_model()


@pytest.mark.parametrize("run_cv", [0.01, 0.03])
def test_false_adopt_rate_of_whole_sweeps_is_at_most_five_percent(cost, run_cv: float) -> None:
    """1000 seeded candidates without a true change per noise level (2000 in all), five levels each, judged by
    compare_sweeps + decide_trial: under the rule's own model (independent runs) at most 5% are adopted."""
    cell = simulate_cell(Scenario(0.0, run_cv, 0.0), 1000, seed=181, cost=cost, options={},
                         policies=("sequential",))
    assert cell["sequential"]["adopt_pct"] <= 5.0
    assert cell["sequential"]["repeats_per_level"] < 4.0


@pytest.mark.parametrize(("effect", "run_cv"), [(0.03, 0.01), (0.08, 0.01), (0.03, 0.03), (0.08, 0.03)])
def test_improvements_of_three_percent_and_more_are_missed_no_more_than_by_five_fixed_repeats(
        cost, effect: float, run_cv: float) -> None:
    """Same draws for both policies, the emulator's restart noise included; tolerance: two standard errors."""
    trials = 300
    cell = simulate_cell(Scenario(effect, run_cv, 0.006), trials, seed=183, cost=cost, options={})
    missed = {policy: 100.0 - cell[policy]["adopt_pct"] for policy in ("fixed", "sequential")}
    tolerance = 2 * 100.0 * math.sqrt(0.25 / trials)
    assert missed["sequential"] <= missed["fixed"] + tolerance, missed
