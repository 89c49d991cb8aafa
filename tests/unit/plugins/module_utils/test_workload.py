# Copyright (c) llmops.sglang contributors
# Apache License 2.0 (see LICENSE)
"""Open-loop workloads: arrival processes, length sampling, prompt construction, goodput and the lag check."""
from __future__ import annotations

import random
import statistics

import pytest

from ansible_collections.llmops.sglang.plugins.module_utils.workload import (
    Arrival,
    Lengths,
    group_of,
    inter_arrival_times,
    lag_check,
    parse_length_lines,
    rate_level_summary,
    rate_table,
    read_length_file,
    request_latencies,
    sample_lengths,
    send_offsets,
    slo_report,
    turn_prompt,
    validate_slo,
    validate_workload,
)

DRAWS = 10_000


def gaps(process: str, rate: float, burstiness: float = 1.0, seed: int = 7) -> list[float]:
    arrival = Arrival(request_rates=(rate,), process=process, burstiness=burstiness)
    return inter_arrival_times(arrival, rate, DRAWS, random.Random(seed))


@pytest.mark.parametrize(("process", "burstiness"), [("poisson", 1.0), ("gamma", 0.25), ("gamma", 1.0),
                                                     ("gamma", 4.0)])
def test_arrival_rate_and_burstiness_within_two_percent(process: str, burstiness: float) -> None:
    """Mean rate 1/mean(gap) and the gaps' CV 1/sqrt(burstiness) (1 for Poisson) over 10k seeded draws."""
    draws = gaps(process, 5.0, burstiness)
    assert 1.0 / statistics.fmean(draws) == pytest.approx(5.0, rel=0.02)
    cv = statistics.stdev(draws) / statistics.fmean(draws)
    assert cv == pytest.approx(burstiness ** -0.5, rel=0.02)


def test_constant_arrivals_are_evenly_spaced_and_seeded_arrivals_repeat() -> None:
    assert gaps("constant", 4.0)[:3] == [0.25, 0.25, 0.25]
    assert gaps("poisson", 3.0, seed=1) == gaps("poisson", 3.0, seed=1) != gaps("poisson", 3.0, seed=2)
    arrival = Arrival(request_rates=(2.0,), process="constant")
    assert send_offsets(arrival, 2.0, 4, random.Random(0)) == [0.0, 0.5, 1.0, 1.5]


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"request_rates": ()}, "arrival.request_rates must list at least one rate"),
    ({"request_rates": (1.0, 0)}, "arrival.request_rates must be a number > 0, got 0"),
    ({"request_rates": (1.0,), "process": "uniform"}, "arrival.process must be one of poisson, constant, gamma"),
    ({"request_rates": (1.0,), "burstiness": 0.5}, "arrival.burstiness=0.5 needs arrival.process=gamma"),
    ({"request_rates": (1.0,), "process": "gamma", "burstiness": 0}, "arrival.burstiness must be a number > 0"),
    ({"request_rates": (1.0,), "max_concurrency": 0}, "arrival.max_concurrency must be an integer > 0"),
])
def test_arrival_options_are_checked_naming_the_field(kwargs: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        Arrival(**kwargs)


def test_uniform_lengths_stay_within_their_bounds_and_reach_both() -> None:
    lengths = Lengths(distribution="uniform", input_min=10, input_max=20, output_min=1, output_max=3)
    pairs = sample_lengths(lengths, (1000, 1000), 2000, random.Random(3))
    inputs, outputs = {pair[0] for pair in pairs}, {pair[1] for pair in pairs}
    assert inputs == set(range(10, 21)) and outputs == {1, 2, 3}
    assert sample_lengths(Lengths(), (300, 24), 3, random.Random(0)) == [(300, 24)] * 3


def test_uniform_lengths_need_ordered_bounds_and_distribution_uniform() -> None:
    with pytest.raises(ValueError, match=r"lengths.input_min \(30\) must not exceed lengths.input_max \(20\)"):
        Lengths(distribution="uniform", input_min=30, input_max=20, output_min=1, output_max=3)
    with pytest.raises(ValueError, match="lengths.output_max must be an integer >= 1, got None"):
        Lengths(distribution="uniform", input_min=1, input_max=2, output_min=1)
    with pytest.raises(ValueError, match="need lengths.distribution=uniform, got fixed"):
        Lengths(input_min=1)
    with pytest.raises(ValueError, match="lengths.distribution=file needs lengths.file"):
        Lengths(distribution="file")


def test_length_file_lines_are_parsed_and_sampled_from() -> None:
    lines = ['{"input_tokens": 812, "output_tokens": 164, "ts": 1733}\n', "\n",
             '{"input_tokens": 5, "output_tokens": 1}']
    samples = parse_length_lines(lines, "requests.jsonl")
    assert samples == ((812, 164), (5, 1))
    drawn = sample_lengths(Lengths(distribution="file", samples=samples), (1, 1), 500, random.Random(0))
    assert set(drawn) == {(812, 164), (5, 1)}


@pytest.mark.parametrize(("line", "message"), [
    ("{not json", r"requests.jsonl line 2: not JSON"),
    ("[1, 2]", r"requests.jsonl line 2: must be a JSON object, got list"),
    ('{"input_tokens": 10}', r"requests.jsonl line 2: output_tokens is missing"),
    ('{"input_tokens": 0, "output_tokens": 3}', r"requests.jsonl line 2: input_tokens must be an integer >= 1, got 0"),
    ('{"input_tokens": 4, "output_tokens": "3"}', r"line 2: output_tokens must be an integer >= 1, got '3'"),
    ('{"input_tokens": true, "output_tokens": 3}', r"line 2: input_tokens must be an integer >= 1, got True"),
])
def test_length_file_errors_name_the_line_and_field(line: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        parse_length_lines(['{"input_tokens": 1, "output_tokens": 1}', line], "requests.jsonl")


def test_length_file_that_is_empty_or_missing_is_an_error(tmp_path) -> None:
    empty = tmp_path / "empty.jsonl"
    empty.write_text("\n\n")
    with pytest.raises(ValueError, match="no requests"):
        read_length_file(str(empty))
    with pytest.raises(ValueError, match="cannot be read: No such file or directory"):
        read_length_file(str(tmp_path / "absent.jsonl"))


def test_turn_prompts_resend_the_system_prompt_and_the_whole_history() -> None:
    system, users, outputs = [1, 2], [[10], [20, 21], [30]], [[100], [200, 201]]
    assert turn_prompt(system, users[:1], []) == [1, 2, 10]
    assert turn_prompt(system, users[:2], outputs[:1]) == [1, 2, 10, 100, 20, 21]
    assert turn_prompt(system, users, outputs) == [1, 2, 10, 100, 20, 21, 200, 201, 30]
    assert turn_prompt(None, ["hello there", "and"], ["general kenobi"]) == "hello there general kenobi and"
    with pytest.raises(ValueError, match="turn 2 needs the outputs of the 1 turns before it, got 0"):
        turn_prompt(None, [[1], [2]], [])


def test_shared_prefix_groups_are_consecutive_conversations() -> None:
    assert [group_of(index, 3) for index in range(7)] == [0, 0, 0, 1, 1, 1, 2]
    assert group_of(5, None) is None
    with pytest.raises(ValueError, match="shared_prefix.requests_per_group must be an integer >= 1, got 0"):
        validate_workload({"system_prompt_len": 10, "requests_per_group": 0}, None)
    with pytest.raises(ValueError, match="multi_turn.turns must be an integer >= 1"):
        validate_workload(None, {"turns": 0})


def test_slo_option_is_checked_and_defaults_to_p99() -> None:
    assert validate_slo({"ttft_ms": {"target": 2000}, "tpot_ms": None}) == {
        "ttft_ms": {"target": 2000.0, "percentile": 99.0}}
    assert validate_slo(None) is None
    for slo, message in [({"ttft": {"target": 1}}, "slo.ttft is not an SLO metric"),
                         ({"e2e_ms": {"target": -1}}, "slo.e2e_ms.target must be a number > 0"),
                         ({"itl_ms": {"target": 5, "percentile": 101}}, "slo.itl_ms.percentile must be at most 100"),
                         ({"ttft_ms": None}, "slo must set at least one of")]:
        with pytest.raises(ValueError, match=message):
            validate_slo(slo)


def test_request_latencies_take_the_largest_delivery_gap_and_tpot_like_sglang() -> None:
    latencies = request_latencies(10.0, 10.5, [10.1, 10.2, 10.2, 10.45], 4)
    assert latencies == pytest.approx({"ttft_ms": 100.0, "tpot_ms": 400.0 / 3, "itl_ms": 250.0, "e2e_ms": 500.0})
    assert request_latencies(0.0, 0.2, [0.2], 1)["tpot_ms"] == 0.0


def test_goodput_counts_requests_meeting_every_slo_and_failures_as_misses() -> None:
    slo = validate_slo({"ttft_ms": {"target": 200, "percentile": 50}, "e2e_ms": {"target": 1000, "percentile": 90}})
    latencies = [
        {"ttft_ms": 100.0, "tpot_ms": 1.0, "itl_ms": 1.0, "e2e_ms": 900.0},   # meets both
        {"ttft_ms": 150.0, "tpot_ms": 1.0, "itl_ms": 1.0, "e2e_ms": 1200.0},  # misses E2E
        {"ttft_ms": 300.0, "tpot_ms": 1.0, "itl_ms": 1.0, "e2e_ms": 800.0},   # misses TTFT
        {"ttft_ms": 180.0, "tpot_ms": 1.0, "itl_ms": 1.0, "e2e_ms": 700.0},   # meets both
        None,                                                                   # failed
    ]
    report = slo_report(latencies, 2.0, slo, itl_gaps_ms=[1.0])
    assert (report["good"], report["slo_attainment"], report["goodput_rps"]) == (2, 0.4, 1.0)
    ttft, e2e = report["slo"]["ttft_ms"], report["slo"]["e2e_ms"]
    assert ttft["observed"] == pytest.approx(165.0) and ttft["holds"] and ttft["attainment"] == 0.6
    assert e2e["observed"] == pytest.approx(1110.0) and not e2e["holds"] and e2e["attainment"] == 0.6
    assert report["slo_holds"] is False


def test_itl_percentile_is_over_all_gaps_and_attainment_over_each_requests_largest_gap() -> None:
    slo = validate_slo({"itl_ms": {"target": 20, "percentile": 50}})
    latencies = [{"ttft_ms": 1.0, "tpot_ms": 1.0, "itl_ms": 30.0, "e2e_ms": 1.0},
                 {"ttft_ms": 1.0, "tpot_ms": 1.0, "itl_ms": 10.0, "e2e_ms": 1.0}]
    report = slo_report(latencies, 1.0, slo, itl_gaps_ms=[10.0, 10.0, 10.0, 30.0])
    assert report["slo"]["itl_ms"]["holds"] and report["slo"]["itl_ms"]["attainment"] == 0.5
    assert report["good"] == 1


def test_lag_check_flags_a_client_that_fell_behind_or_ran_out_of_cpu() -> None:
    calm = lag_check([0.5] * 99 + [3.0], 50.0, 20.0)
    assert calm == {"lag_ms": {"p50": 0.5, "p99": pytest.approx(0.525), "max": 3.0}, "client_limited": False,
                    "client_limited_reason": None}
    behind = lag_check([1.0] * 90 + [120.0] * 10, 50.0, 40.0)
    assert behind["client_limited"] and behind["client_limited_reason"] == (
        "send lag p99 120.0 ms > max_client_lag_ms=50")
    busy = lag_check([1.0], 50.0, 97.0)
    assert busy["client_limited_reason"] == "client CPU 97% of one core > 90%"


def test_level_summary_and_table_of_rate_levels() -> None:
    runs = [{"repeat": 1, "achieved_rate_rps": 3.9, "lag_ms": {"p99": 2.0}, "client_limited": False,
             "client_limited_reason": None, "goodput_rps": 3.5, "slo_attainment": 0.9,
             "slo": {"ttft_ms": {"holds": True}}},
            {"repeat": 2, "achieved_rate_rps": 4.1, "lag_ms": {"p99": 80.0}, "client_limited": True,
             "client_limited_reason": "send lag p99 80.0 ms > max_client_lag_ms=50", "goodput_rps": 3.1,
             "slo_attainment": 0.8, "slo": {"ttft_ms": {"holds": False}}}]
    summary = rate_level_summary(runs)
    assert summary["goodput_rps"] == pytest.approx(3.3) and summary["slo_attainment"] == pytest.approx(0.85)
    assert summary["slo_holds"] == {"ttft_ms": False} and summary["client_limited"]
    assert summary["client_limited_reasons"] == ["repeat 2: send lag p99 80.0 ms > max_client_lag_ms=50"]
    table = rate_table([{"request_rate": 4.0, "open_loop": summary,
                         "summary": {"agg_tok_s": 96.0, "ok": 40, "failed": 0}}])
    assert table.splitlines()[2] == "| 4 | 4.00 | 3.30 | 85.0% | 96.0 | 41.0 | 40/40 |"
