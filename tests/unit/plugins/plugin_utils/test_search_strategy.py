# Copyright (c) llmops.sglang contributors
# Apache License 2.0 (see LICENSE)
"""Candidate selection of the goodput search (issue 19 deliverable 2) on a synthetic objective: a 100-point grid
with one optimum next to a corner that does not start (OOM), a budget of restarts and GPU-minutes, candidates a
check refuses, and a search resumed from its JSON."""
from __future__ import annotations

import json
import random

import pytest

from ansible_collections.llmops.sglang.plugins.plugin_utils import search_strategy
from ansible_collections.llmops.sglang.plugins.plugin_utils.search_space import parse_space
from ansible_collections.llmops.sglang.plugins.plugin_utils.search_strategy import (
    Budget,
    GoodputSearch,
    parse_budget,
)

KNOBS = {
    "max_running_requests": {"values": [16, 32, 48, 64, 96]},
    "chunked_prefill_size": {"values": [1024, 2048, 4096, 8192]},
    "mem_fraction_static": {"low": 0.80, "high": 0.88, "step": 0.02},
}
SPACE = parse_space(KNOBS)
SEEDS = range(10)


def does_not_start(params: dict) -> bool:
    """The OOM corner: 16 of the 100 points (most memory for weights' neighbours and the most requests)."""
    return params["mem_fraction_static"] >= 0.86 and params["max_running_requests"] >= 64


def max_rate(params: dict) -> float:
    """Highest rate meeting the SLO (req/s): more KV cache helps, running requests and prefill chunks peak."""
    running = {16: 0.55, 32: 0.8, 48: 0.95, 64: 1.0, 96: 0.97}[params["max_running_requests"]]
    chunk = {1024: 0.8, 2048: 0.93, 4096: 1.0, 8192: 0.96}[params["chunked_prefill_size"]]
    memory = 0.85 + 0.15 * (params["mem_fraction_static"] - 0.80) / 0.08
    return 7.3 * running * chunk * memory


GRID = [SPACE.grid_point(index) for index in range(SPACE.grid_size())]
OPTIMUM = max(max_rate(point) for point in GRID if not does_not_start(point))


def run_search(search: GoodputSearch, steps: int | None = None, minutes: float = 5.0) -> list[dict]:
    """Drive ``search`` as the stage would; the proposals in order."""
    proposed = []
    while steps is None or len(proposed) < steps:
        params = search.next_candidate()
        if params is None:
            break
        proposed.append(params)
        if does_not_start(params):
            search.record_failed_start(params, "CUDA out of memory while capturing CUDA graphs", minutes)
        else:
            search.record_result(params, max_rate(params), minutes)
    return proposed


def test_the_grid_has_one_optimum_next_to_the_corner_that_does_not_start():
    assert SPACE.grid_size() == 100 and sum(map(does_not_start, GRID)) == 16
    near = [point for point in GRID if not does_not_start(point) and max_rate(point) >= 0.97 * OPTIMUM]
    assert len(near) == 2  # 20 random picks of 100 include one of them in only about a third of the searches


def test_reaches_97_percent_of_the_optimum_within_a_fifth_of_the_grid_in_most_seeds():
    found, infeasible = [], 0
    for seed in SEEDS:
        search = GoodputSearch(SPACE, Budget(max_restarts=20), seed=seed)
        run_search(search)
        assert search.spent()["restarts"] == 20
        found.append(search.best()[0]["value"] / OPTIMUM)
        infeasible += sum(trial["state"] == "infeasible" for trial in search.trials)
    assert sum(share >= 0.97 for share in found) >= 9, found
    assert min(found) >= 0.9, found
    # Failed starts teach it the corner: told as FAIL instead (which TPE ignores), these seeds lose 64 restarts.
    assert infeasible <= 45, infeasible


def test_never_proposes_a_point_twice_and_stops_when_the_space_is_exhausted():
    small = parse_space({"page_size": {"values": [1, 16]}, "max_running_requests": {"values": [32, 64, 96]},
                         "schedule_policy": {"values": ["fcfs", "lpm"]}})
    search = GoodputSearch(small, Budget(max_restarts=50), seed=3, startup_trials=2)
    proposed = []
    while (params := search.next_candidate()) is not None:
        proposed.append(params)
        if params["max_running_requests"] == 96:
            search.record_failed_start(params, "OOM", 1.0)
        else:
            search.record_result(params, params["max_running_requests"] / 10, 1.0)
    assert len({small.key(params) for params in proposed}) == len(proposed) == 12
    assert search.stop_reason() == "space exhausted: all 12 candidates tried or rejected"


def test_an_infeasible_point_is_recorded_with_its_reason_and_counts_as_a_restart():
    search = GoodputSearch(SPACE, Budget(max_restarts=20), seed=0)
    proposed = run_search(search)
    failed = [trial for trial in search.trials if trial["state"] == "infeasible"]
    assert failed and all(trial["reason"].startswith("CUDA out of memory") for trial in failed)
    assert all(does_not_start(trial["params"]) for trial in failed)
    assert len({SPACE.key(params) for params in proposed}) == len(proposed) == 20
    with pytest.raises(ValueError, match="already recorded"):
        search.record_failed_start(failed[0]["params"], "OOM", 1.0)


def test_refused_candidates_are_skipped_without_spending_budget():
    def rejects(params):
        if params["chunked_prefill_size"] == 1024 and params["max_running_requests"] >= 48:
            return "flag rules: chunked_prefill_size 1024 starves 48+ running requests of prefill"
        return None

    search = GoodputSearch(SPACE, Budget(max_restarts=15), seed=1, rejects=rejects)
    proposed = run_search(search)
    refused = [trial for trial in search.trials if trial["state"] == "invalid"]
    assert refused and all(trial["reason"].startswith("flag rules:") and trial["gpu_minutes"] == 0
                           for trial in refused)
    assert not any(rejects(params) for params in proposed)
    assert len(proposed) == search.spent()["restarts"] == 15


def test_a_check_that_refuses_everything_ends_the_search_with_its_reason(monkeypatch):
    small = parse_space({"page_size": {"values": [1, 16]}, "schedule_policy": {"values": ["fcfs", "lpm"]}})
    search = GoodputSearch(small, Budget(max_restarts=5), seed=0, rejects=lambda params: "no such flag")
    assert search.next_candidate() is None
    assert search.stop_reason() == "space exhausted: all 4 candidates tried or rejected"
    monkeypatch.setattr(search_strategy, "MAX_REJECTED_IN_A_ROW", 30)  # 200 by default; the same rule, faster
    continuous = parse_space({"schedule_conservativeness": {"low": 0.3, "high": 1.5}})
    search = GoodputSearch(continuous, Budget(max_restarts=5), seed=0, rejects=lambda params: "no such flag")
    assert search.next_candidate() is None
    assert search.stop_reason().startswith("the last 30 candidates were all rejected (the latest: no such flag)")


def test_a_gpu_minute_budget_stops_before_a_start_it_cannot_pay_for():
    search = GoodputSearch(SPACE, Budget(max_gpu_minutes=18.0), seed=0)
    run_search(search, minutes=4.0)
    assert search.spent() == {"restarts": 4, "gpu_minutes": 16.0}
    assert search.stop_reason() == "budget spent: 16 of 18 GPU-minutes (a start costs up to 4)"


def test_a_contenders_extra_runs_do_not_count_in_the_cost_of_a_start():
    search = GoodputSearch(SPACE, Budget(max_gpu_minutes=100.0))
    search.record_result(GRID[0], 5.0, 20.0)
    search.record_result(GRID[1], 6.0, 45.0)
    assert search.stop_reason().startswith("budget spent: 65 of 100 GPU-minutes (a start costs up to 45)")
    search.trials[-1]["contender_gpu_minutes"] = 25.0  # the stage's extra runs of a close candidate: 20 without them
    assert search.stop_reason() is None


def test_the_same_candidate_is_proposed_until_its_outcome_is_recorded():
    search = GoodputSearch(SPACE, Budget(max_restarts=3), seed=5)
    assert search.next_candidate() == search.next_candidate()


def test_a_search_resumed_from_its_json_proposes_what_an_uninterrupted_one_would():
    uninterrupted = run_search(GoodputSearch(SPACE, Budget(max_restarts=14), seed=7))
    first = GoodputSearch(SPACE, Budget(max_restarts=14), seed=7)
    before = run_search(first, steps=9)
    state = json.loads(json.dumps(first.to_json()))
    resumed = GoodputSearch.from_json(state, SPACE, Budget(max_restarts=14))
    assert before + run_search(resumed) == uninterrupted
    assert state["spent"] == {"restarts": 9, "gpu_minutes": 45.0} and len(state["trials"]) == 9


def test_resuming_with_other_knobs_or_an_unknown_state_fails():
    state = GoodputSearch(SPACE, Budget(max_restarts=3)).to_json()
    other = parse_space({**KNOBS, "page_size": {"values": [1, 16]}})
    with pytest.raises(ValueError, match="made for other knobs"):
        GoodputSearch.from_json(state, other, Budget(max_restarts=3))
    broken = {**state, "trials": [{"number": 0, "params": GRID[0], "state": "running"}]}
    with pytest.raises(ValueError, match="trial 0 has state 'running'"):
        GoodputSearch.from_json(broken, SPACE, Budget(max_restarts=3))


def test_best_lists_the_completed_candidates_to_reverify_highest_first():
    search = GoodputSearch(SPACE, Budget(max_restarts=10), seed=2)
    run_search(search)
    best, smoothed = search.best(3), search.smoothed()
    assert [smoothed[trial["number"]] for trial in best] == sorted((smoothed[trial["number"]] for trial in best),
                                                                   reverse=True)
    assert all(trial["state"] == "complete" for trial in best)
    # exact measurements: the posterior mean stays within a few per cent of them, and the ranking is in the state
    assert all(smoothed[trial["number"]] == pytest.approx(trial["value"], rel=0.05) for trial in search.trials
               if trial["state"] == "complete")
    ranking = search.to_json()["ranking"]
    assert [entry["number"] for entry in ranking[:3]] == [trial["number"] for trial in best]


@pytest.mark.parametrize("budget", [Budget(max_restarts=12), Budget(max_gpu_minutes=60.0)])
def test_the_last_starts_go_where_the_surrogate_expects_the_most_improvement(budget):
    search = GoodputSearch(SPACE, budget, seed=4, surrogate_starts=3)
    proposed = run_search(search)  # every start costs 5 GPU-minutes: 60 of them pay for 12 starts
    assert len(proposed) == 12
    plain = run_search(GoodputSearch(SPACE, budget, seed=4))
    assert proposed[:9] == plain[:9] and proposed[9:] != plain[9:]  # TPE's proposals until the reserved starts
    for number in (9, 10, 11):
        earlier = GoodputSearch(SPACE, budget, trials=search.trials[:number])
        untried = earlier._untried_candidates()
        assert len(untried) == 100 - number and proposed[number] == earlier._most_promising(untried)
        assert SPACE.key(proposed[number]) not in {SPACE.key(params) for params in proposed[:number]}
    assert search.to_json()["surrogate_starts"] == 3


def test_of_two_equally_promising_candidates_the_one_away_from_a_failed_start_is_taken():
    line = parse_space({"max_running_requests": {"values": list(range(9))}})
    search = GoodputSearch(line, Budget(max_restarts=20), surrogate_starts=1)
    search.record_failed_start({"max_running_requests": 0}, "CUDA out of memory", 1.0)
    for value, rate in ((2, 1.0), (3, 2.0), (4, 3.0), (5, 2.0), (6, 1.0)):  # symmetric around 4
        search.record_result({"max_running_requests": value}, rate, 1.0)
    candidates = [{"max_running_requests": 1}, {"max_running_requests": 7}]  # as far from the top, 1 next to 0
    assert search._most_promising(candidates) == {"max_running_requests": 7}


def test_a_continuous_space_draws_the_surrogate_candidates_from_neighbours_and_random_points():
    space = parse_space({"mem_fraction_static": {"low": 0.7, "high": 0.9},
                         "schedule_conservativeness": {"low": 0.1, "high": 10.0, "log": True}})
    search = GoodputSearch(space, Budget(max_restarts=8), seed=0, startup_trials=3, surrogate_starts=4)
    while (params := search.next_candidate()) is not None:
        assert 0.7 <= params["mem_fraction_static"] <= 0.9 and 0.1 <= params["schedule_conservativeness"] <= 10.0
        search.record_result(params, 5.0 - 10 * (params["mem_fraction_static"] - 0.85) ** 2, 1.0)
    assert len(search.trials) == 8
    assert len(search._untried_candidates()) > search_strategy.RANDOM_CANDIDATES


def noisy(params: dict, rng) -> float:
    """``max_rate`` measured with short runs: 7 % log-normal noise, as benchmarks/goodput_search.py's runs have."""
    return max_rate(params) * rng.lognormvariate(0.0, 0.07)


def test_on_noisy_measurements_the_surrogate_ranking_and_starts_pick_the_optimum_more_often():
    def share(search: GoodputSearch, seed: int) -> float:
        rng = random.Random(seed)
        while (params := search.next_candidate()) is not None:
            if does_not_start(params):
                search.record_failed_start(params, "CUDA out of memory", 5.0)
            else:
                search.record_result(params, noisy(params, rng), 5.0)
        raw = max((trial for trial in search.trials if trial["state"] == "complete"), key=search_strategy.objective)
        return max_rate(search.best(1)[0]["params"]) / OPTIMUM, max_rate(raw["params"]) / OPTIMUM

    smoothed_hits = raw_hits = 0
    for seed in range(10):
        ours, _raw = share(GoodputSearch(SPACE, Budget(max_restarts=20), seed=seed, surrogate_starts=5), seed)
        _ours, raw = share(GoodputSearch(SPACE, Budget(max_restarts=20), seed=seed), seed)
        smoothed_hits += ours >= 0.97
        raw_hits += raw >= 0.97
    assert smoothed_hits > raw_hits, (smoothed_hits, raw_hits)


def test_with_no_untried_candidate_left_the_reserved_starts_go_back_to_tpe():
    small = parse_space({"page_size": {"values": [1, 16]}, "max_running_requests": {"values": [32, 64]}})
    search = GoodputSearch(small, Budget(max_restarts=4), seed=1, startup_trials=1, surrogate_starts=3)
    while (params := search.next_candidate()) is not None:
        search.record_result(params, params["max_running_requests"] / 10 + params["page_size"] / 100, 1.0)
    assert search.stop_reason() == "budget spent: 4 of 4 restarts" and len(search.trials) == 4


def test_candidates_are_ranked_by_their_capacity_estimate_and_promise_their_confirmed_rate():
    search = GoodputSearch(SPACE, Budget(max_restarts=5), seed=0)
    low, high = GRID[3], GRID[4]
    search.record_result(low, 7.0, 5.0, estimate_rps=7.2)
    search.record_result(high, 7.0, 5.0, estimate_rps=7.6)
    best = search.best(2)
    assert [trial["params"] for trial in best] == [high, low] and best[0]["value"] == 7.0
    assert search_strategy.objective({"value": 6.5}) == 6.5  # recorded before estimates
    assert [trial.value for trial in search._study().trials] == [7.2, 7.6]  # what TPE learns from


@pytest.mark.parametrize(("budget", "message"), [
    ({}, "search.budget: set max_restarts and/or max_gpu_minutes"),
    ({"max_restarts": 0}, "search.budget.max_restarts: must be an integer >= 1, got 0"),
    ({"max_gpu_minutes": -5}, "search.budget.max_gpu_minutes: must be a number > 0"),
    ({"max_restarts": 5, "restarts": 3}, "unknown key 'restarts'"),
])
def test_a_wrong_budget_fails_naming_the_field(budget, message):
    with pytest.raises(ValueError) as error:
        parse_budget(budget)
    assert message in str(error.value)


def test_a_budget_of_both_kinds_parses():
    assert parse_budget({"max_restarts": 12, "max_gpu_minutes": 600}) == Budget(12, 600.0)


def test_the_pick_is_reported_with_its_confidence_and_estimates_of_more_runs_weigh_more():
    space = parse_space({"max_running_requests": {"values": [8, 16, 24, 32, 40, 48, 56]}})
    hill = {8: 6.0, 16: 8.0, 24: 9.4, 32: 10.0, 40: 9.4, 48: 8.0, 56: 6.0}

    def measured(lucky_runs: int, lucky: float) -> GoodputSearch:
        """Every value measured exactly from 4 runs, except 40: ``lucky`` req/s from ``lucky_runs``."""
        search = GoodputSearch(space, Budget(max_restarts=10))
        for value, rate in hill.items():
            if value == 40:
                search.record_result({"max_running_requests": 40}, lucky, 5.0, lucky, lucky_runs)
            else:
                search.record_result({"max_running_requests": value}, rate, 5.0, rate, 4)
        return search

    # one lucky run at 40 is outweighed by its neighbours; the same value from many runs is believed
    one, many = measured(1, 10.6), measured(40, 10.6)
    assert one.trials[4]["estimate_runs"] == 1
    assert one.smoothed()[4] < many.smoothed()[4]
    assert many.best(1)[0]["params"] == {"max_running_requests": 40}
    state = many.to_json()
    assert state["confidence"] == pytest.approx(many.confidence(), abs=1e-3) and 0.5 < state["confidence"] <= 1.0
    assert state["ranking"][0]["number"] == many.best(1)[0]["number"]
    assert GoodputSearch(space, Budget(max_restarts=1)).confidence() is None


@pytest.mark.parametrize("seed", range(5))
def test_a_latin_hypercube_start_measures_every_stratum_of_every_knob_before_tpe(seed):
    space = parse_space({"max_running_requests": {"values": [8, 16, 24, 32, 48]},
                         "cuda_graph_max_bs": {"values": [8, 16, 32, 48]},
                         "speculative_num_steps": {"values": [1, 2, 3]},
                         "mem_fraction_static": {"low": 0.80, "high": 0.90}})
    search = GoodputSearch(space, Budget(max_restarts=8), seed=seed, start_design="latin_hypercube")
    first = []
    for _start in range(5):
        params = search.next_candidate()
        first.append(params)
        search.record_result(params, 1.0, 1.0)
    # 5 starts, 5 strata per knob: every value of the 5-value knob once, the low and high end of every other
    assert sorted(point["max_running_requests"] for point in first) == [8, 16, 24, 32, 48]
    for name in ("cuda_graph_max_bs", "speculative_num_steps"):
        values = space.knobs[space.names.index(name)].values
        assert {values[0], values[-1]} <= {point[name] for point in first}
    fractions = sorted(point["mem_fraction_static"] for point in first)
    assert [int((value - 0.80) / 0.02) for value in fractions] == [0, 1, 2, 3, 4]
    again = GoodputSearch(space, Budget(max_restarts=8), seed=seed, start_design="latin_hypercube")
    assert again.next_candidate() == first[0]  # seeded
    assert search.to_json()["start_design"] == "latin_hypercube"
    with pytest.raises(ValueError, match="start_design: one of random, latin_hypercube"):
        GoodputSearch(space, Budget(max_restarts=8), start_design="sobol")
