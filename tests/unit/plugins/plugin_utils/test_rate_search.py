# Copyright (c) llmops.sglang contributors
# Apache License 2.0 (see LICENSE)
"""The highest request rate meeting the SLO (issue 19 deliverable 2), on a synthetic server whose SLO holds below
its capacity, fails above it and is noisy near it."""
from __future__ import annotations

import math
import random

import pytest

from ansible_collections.llmops.sglang.plugins.plugin_utils import rate_search
from ansible_collections.llmops.sglang.plugins.plugin_utils.rate_search import find_max_rate

CAPACITY = 7.3  # req/s


class SyntheticServer:
    """Runs shaped as bench's open-loop runs: the SLO holds with a probability that falls from 1 to 0 over
    +-``noise`` (relative) around the capacity; goodput follows the offered rate up to the capacity."""

    def __init__(self, capacity: float = CAPACITY, noise: float = 0.04, seed: int = 0, client_limit: float = 1e9):
        self.capacity, self.noise, self.client_limit = capacity, noise, client_limit
        self.rng = random.Random(seed)
        self.calls: list[tuple[float, int]] = []

    def hold_probability(self, rate: float) -> float:
        position = math.log(rate / self.capacity) / self.noise  # -1 .. 1 across the noisy band
        return min(1.0, max(0.0, 0.5 - position / 2))

    def measure(self, rate: float, repeats: int) -> list[dict]:
        self.calls.append((rate, repeats))
        return [self.run(rate) for _repeat in range(repeats)]

    def run(self, rate: float) -> dict:
        holds = self.rng.random() < self.hold_probability(rate)
        return {"request_rate": rate, "slo_holds": holds, "goodput_rps": min(rate, self.capacity) * 0.99,
                "client_limited": rate > self.client_limit}


@pytest.mark.parametrize("seed", range(8))
def test_finds_the_capacity_within_the_resolution_without_overshooting_it(seed):
    server = SyntheticServer(seed=seed)
    result = find_max_rate(server.measure, start_rate=1.0, resolution=0.05, repeats=3, max_probes=16)
    assert result["converged"], result["reason"]
    # At or below the noisy band's top (a rate that fails a third of its runs is no promise), within 5% + band.
    assert CAPACITY * (1 - 0.05 - server.noise) <= result["rate_rps"] <= CAPACITY * (1 + server.noise)
    lower, upper = result["bracket"]
    assert lower == result["rate_rps"] and upper / lower <= 1.05
    assert result["goodput_rps"] == pytest.approx(min(result["rate_rps"], CAPACITY) * 0.99)


def test_the_reported_rate_held_in_every_repeat_and_each_probe_is_recorded():
    server = SyntheticServer(seed=3)
    result = find_max_rate(server.measure, start_rate=1.0, repeats=3)
    at_rate = [probe for probe in result["probes"] if probe["rate_rps"] == result["rate_rps"]]
    assert sum(probe["repeats"] for probe in at_rate) == 3 and all(all(p["holds"]) for p in at_rate)
    assert [(p["rate_rps"], p["repeats"]) for p in result["probes"]] == server.calls
    assert result["cost"] == {"probes": len(server.calls), "runs": sum(runs for _rate, runs in server.calls)}
    assert result["probes"][0]["phase"] == "bracket" and "bisect" in {p["phase"] for p in result["probes"]}
    assert "met the SLO in all of 3 runs" in result["reason"]


def test_one_failing_repeat_means_the_rate_does_not_meet_the_slo():
    def measure(rate, repeats):
        return [{"slo_holds": rate < 4 or index > 0, "goodput_rps": rate} for index in range(repeats)]

    result = find_max_rate(measure, start_rate=1.0, repeats=3, resolution=0.05)
    assert result["rate_rps"] < 4 <= result["bracket"][1]


def test_a_rate_held_once_in_the_bracket_is_confirmed_with_all_repeats_before_it_is_reported():
    # Every first run holds up to 8 req/s, every later run only below 6: 4 req/s (bracket, 1 run) must be re-run.
    def measure(rate, repeats):
        seen[rate] = seen.get(rate, 0) + repeats
        return [{"slo_holds": rate < 6 or (rate <= 8 and seen[rate] - repeats + index == 0), "goodput_rps": rate}
                for index in range(repeats)]

    seen: dict[float, int] = {}
    result = find_max_rate(measure, start_rate=1.0, repeats=3, resolution=0.05, max_probes=20)
    assert 6 / 1.05 <= result["rate_rps"] < 6
    assert "confirm" in {probe["phase"] for probe in result["probes"]}


def test_brackets_downwards_from_a_start_above_capacity():
    result = find_max_rate(SyntheticServer(capacity=0.4, noise=0.01).measure, start_rate=50.0, max_probes=16)
    assert 0.4 * 0.94 <= result["rate_rps"] <= 0.4 * 1.01


def test_no_rate_meets_the_slo_above_min_rate():
    result = find_max_rate(SyntheticServer(capacity=0.05, noise=0.01).measure, start_rate=4.0, min_rate=0.5)
    assert result["rate_rps"] is None and not result["converged"]
    assert result["reason"] == "no rate meets the SLO: it failed at 0.5 req/s and min_rate is 0.5"


def test_max_probes_stops_the_search_and_says_it_did_not_converge():
    server = SyntheticServer(seed=1)
    result = find_max_rate(server.measure, start_rate=0.01, max_probes=4)
    assert result["cost"]["probes"] == 4 and not result["converged"]
    assert result["rate_rps"] is None and result["reason"] == "no rate was confirmed within max_probes"


def test_a_rate_the_client_cannot_drive_bounds_the_search_and_is_reported():
    result = find_max_rate(SyntheticServer(client_limit=3.0).measure, start_rate=1.0)
    assert result["limited_by_client"] and result["rate_rps"] <= 3.0
    assert "the client could not drive it" in result["reason"]


def power_law_server(capacity: float, power: float = 4.0):
    """TTFT p90 grows like a power of the offered rate and meets its 1 s target exactly at ``capacity``."""
    def measure(rate, repeats):
        observed = 1000.0 * (rate / capacity) ** power
        return [{"slo_holds": observed <= 1000.0, "goodput_rps": rate,
                 "slo": {"ttft_ms": {"target": 1000.0, "percentile": 90.0, "observed": observed}}}] * repeats
    return measure


def test_the_estimate_places_the_capacity_inside_the_bracket_from_the_slo_margins():
    results = {capacity: find_max_rate(power_law_server(capacity), start_rate=1.0, resolution=0.1, repeats=2)
               for capacity in (7.4, 7.7)}
    for capacity, result in results.items():
        lower, upper = result["bracket"]
        assert result["rate_rps"] == lower < capacity < upper
        assert result["estimate_rps"] == pytest.approx(capacity, rel=1e-6)  # a power law is a line on log-log axes
        margins = {probe["rate_rps"]: probe["slo_margin"] for probe in result["probes"]}  # recorded per run
        assert max(margins[lower]) < 1 < min(margins[upper])
    # 4 % apart: the same promised rate (one bracket of 10 %), told apart by the estimate
    assert results[7.4]["rate_rps"] == results[7.7]["rate_rps"]
    assert results[7.4]["estimate_rps"] < results[7.7]["estimate_rps"]


@pytest.mark.parametrize("server", [SyntheticServer(seed=2).measure,  # runs without SLO details
                                    SyntheticServer(client_limit=3.0).measure])  # the client bounded the search
def test_without_margins_on_both_sides_the_estimate_is_the_promised_rate(server):
    result = find_max_rate(server, start_rate=1.0)
    assert result["estimate_rps"] == result["rate_rps"] is not None


@pytest.mark.parametrize(("options", "message"), [
    ({"start_rate": 0}, "start_rate must be a number > 0"),
    ({"start_rate": 1.0, "min_rate": 2.0}, "min_rate (2) must not exceed start_rate (1)"),
    ({"start_rate": 1.0, "repeats": 0}, "repeats must be an integer >= 1"),
    ({"start_rate": 1.0, "resolution": float("nan")}, "resolution must be a number > 0"),
])
def test_wrong_options_fail_before_anything_is_measured(options, message):
    server = SyntheticServer()
    with pytest.raises(ValueError) as error:
        find_max_rate(server.measure, **options)
    assert message in str(error.value) and not server.calls


def margin_runs(margins: list[float]) -> list[dict]:
    """Open-loop runs whose TTFT p90 is ``margin`` x its 1 s target (<= 1: the SLO held)."""
    return [{"slo_holds": margin <= 1.0, "goodput_rps": 1.0,
             "slo": {"ttft_ms": {"target": 1000.0, "percentile": 90.0, "observed": 1000.0 * margin}}}
            for margin in margins]


def test_the_estimate_interpolates_each_ends_mean_margin_not_its_worst_run():
    log = rate_search.add_probe([], 8.0, "bracket", margin_runs([0.5, 0.9]))
    log = rate_search.add_probe(log, 10.0, "bracket", margin_runs([1.2]))
    result = rate_search.rate_result(log, start_rate=8.0, resolution=0.5, repeats=2)
    # the lower end's geometric mean margin is sqrt(0.45); the worst run's (0.9) would give 8.67 req/s
    share = -math.log(math.sqrt(0.45)) / (math.log(1.2) - math.log(math.sqrt(0.45)))
    assert result["estimate_rps"] == pytest.approx(8.0 * 1.25 ** share) == pytest.approx(9.33, abs=0.01)
    assert result["estimate_runs"] == 3
    # more runs of the same margins leave it where it was: extra runs only steady it
    more = rate_search.add_probe(log, 8.0, "contender", margin_runs([0.5, 0.9]))
    assert rate_search.rate_result(more, start_rate=8.0, resolution=0.5, repeats=2)["estimate_rps"] == \
        pytest.approx(result["estimate_rps"])


def test_a_search_stopped_before_it_confirmed_a_rate_is_estimated_in_its_bracket_and_promises_none():
    # one run held at 8 (2 are needed to confirm it), one failed at 16: stopped there (max_probes, or the stage's cutoff)
    log = rate_search.add_probe([], 8.0, "bracket", margin_runs([0.8]))
    log = rate_search.add_probe(log, 16.0, "bracket", margin_runs([1.3]))
    result = rate_search.rate_result(log, start_rate=8.0, resolution=0.1, repeats=2)
    share = -math.log(0.8) / (math.log(1.3) - math.log(0.8))
    assert result["rate_rps"] is None and not result["converged"] and result["bracket"] == [8.0, 16.0]
    assert result["estimate_rps"] == pytest.approx(8.0 * 2.0 ** share) and result["estimate_runs"] == 2
    # nothing held: no estimate
    failed = rate_search.add_probe([], 8.0, "bracket", margin_runs([1.3]))
    assert rate_search.rate_result(failed, start_rate=8.0, resolution=0.1, repeats=2)["estimate_rps"] is None


def test_contender_runs_go_to_both_ends_of_the_final_bracket_and_have_their_own_probe_count():
    options = {"start_rate": 1.0, "resolution": 0.1, "repeats": 2}
    log = find_max_rate(power_law_server(7.7), **options)["probes"]
    lower, upper = rate_search.rate_result(log, **options)["bracket"]
    measure, added = power_law_server(7.7), []
    while (step := rate_search.contender_probe(log, 4, repeats=2, resolution=0.1)) is not None:
        added.append((step["rate_rps"], step["repeats"], step["phase"]))
        log = rate_search.add_probe(log, step["rate_rps"], step["phase"], measure(step["rate_rps"], step["repeats"]))
    assert sorted(added) == [(lower, 2, "contender"), (upper, 2, "contender")]
    assert rate_search.contender_probe(log, 4, repeats=2, resolution=0.1) is None  # all 4 spent


def test_no_contender_runs_without_a_bracket_of_a_held_and_a_failed_rate():
    log = rate_search.add_probe([], 8.0, "bracket", margin_runs([0.5]))
    assert rate_search.contender_probe(log, 4, repeats=1, resolution=0.1) is None


def test_a_failing_contender_run_moves_the_bracket_down_and_the_search_goes_on_past_its_max_probes():
    options = {"start_rate": 4.0, "resolution": 0.3, "repeats": 2}
    log = rate_search.add_probe([], 4.0, "bracket", margin_runs([0.5]))
    log = rate_search.add_probe(log, 8.0, "bracket", margin_runs([1.5]))
    log = rate_search.add_probe(log, math.sqrt(32.0), "bisect", margin_runs([0.9, 0.9]))
    log = rate_search.add_probe(log, math.sqrt(8.0 * math.sqrt(32.0)), "bisect", margin_runs([1.1, 1.1]))
    assert rate_search.next_probe(log, max_probes=4, **options) is None  # converged: 5.66 req/s
    failed = rate_search.add_probe(log, math.sqrt(32.0), "contender", margin_runs([1.02]))
    # 5.66 no longer holds in every run: the promise falls to the bracket below it, bisected by a probe of the
    # search's own: with max_probes 5 it has one left, the contender probe counts against the contender runs
    step = rate_search.next_probe(failed, max_probes=5, **options)
    assert step == {"rate_rps": pytest.approx(math.sqrt(4.0 * math.sqrt(32.0))), "repeats": 2, "phase": "bisect"}
