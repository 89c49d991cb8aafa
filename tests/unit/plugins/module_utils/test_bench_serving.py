# Copyright (c) llmops.sglang contributors
# Apache License 2.0 (see LICENSE)
"""The sglang_bench_serving engine: command lines, JSONL mapping (python/sglang/bench_serving.py's keys, commit
0033168f) and the sweep driver."""
from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import pytest

from ansible_collections.llmops.sglang.plugins.module_utils._bench_config import BenchConfig
from ansible_collections.llmops.sglang.plugins.module_utils._bench_session import BenchAborted
from ansible_collections.llmops.sglang.plugins.module_utils.bench_serving import (
    bench_serving_argv,
    run_bench_serving_sweep,
    run_from_bench_serving,
    run_subprocess,
)
from ansible_collections.llmops.sglang.plugins.module_utils.sweep_stats import (
    compare_sweeps,
    sequential_plan,
    sequential_stop_rule,
)

# One line as the mid-2025 bench_serving appends it (json.dumps of its result dict, so `Infinity` for
# request_rate=inf): sglang-oai, random-ids 1000/1000, --max-concurrency 16, --num-prompts 32, spec decoding on.
JSONL_MID_2025 = (
    '{"backend": "sglang-oai", "dataset_name": "random-ids", "request_rate": Infinity, "max_concurrency": 16, '
    '"sharegpt_output_len": null, "random_input_len": 1000, "random_output_len": 1000, "random_range_ratio": 1.0, '
    '"duration": 26.3701, "completed": 32, "total_input_tokens": 32000, "total_output_tokens": 32000, '
    '"total_output_tokens_retokenized": 31994, "request_throughput": 1.2135, "input_throughput": 1213.5, '
    '"output_throughput": 1213.5, "mean_e2e_latency_ms": 13105.2, "median_e2e_latency_ms": 13098.7, '
    '"std_e2e_latency_ms": 41.3, "p99_e2e_latency_ms": 13190.4, "mean_ttft_ms": 412.8, "median_ttft_ms": 398.1, '
    '"std_ttft_ms": 88.2, "p99_ttft_ms": 640.9, "mean_tpot_ms": 12.71, "median_tpot_ms": 12.70, '
    '"std_tpot_ms": 0.09, "p99_tpot_ms": 12.93, "mean_itl_ms": 12.71, "median_itl_ms": 11.02, "std_itl_ms": 6.3, '
    '"p95_itl_ms": 24.8, "p99_itl_ms": 33.5, "concurrency": 15.91, "accept_length": 2.31}'
)
# A newer version's line: extra keys, two failed requests out of 32, no accept_length (spec decoding off).
JSONL_NEWER = json.dumps({
    "tag": "baseline", "backend": "sglang", "dataset_name": "random-ids", "request_rate": "inf",
    "max_concurrency": 16, "random_input_len": 1000, "random_output_len": 1000, "random_range_ratio": 1.0,
    "duration": 27.9, "completed": 30, "total_input_tokens": 30000, "total_input_text_tokens": 30000,
    "total_input_vision_tokens": 0, "total_output_tokens": 30000, "total_output_tokens_retokenized": 30000,
    "request_throughput": 1.075, "input_throughput": 1075.3, "output_throughput": 1075.3, "total_throughput": 2150.5,
    "mean_e2e_latency_ms": 14010.0, "median_e2e_latency_ms": 14002.0, "p90_e2e_latency_ms": 14090.0,
    "p99_e2e_latency_ms": 14180.0, "mean_ttft_ms": 450.0, "median_ttft_ms": 440.0, "p99_ttft_ms": 700.0,
    "mean_tpot_ms": 13.57, "median_tpot_ms": 13.55, "p99_tpot_ms": 13.9, "mean_itl_ms": 13.57,
    "median_itl_ms": 13.5, "p95_itl_ms": 14.2, "p99_itl_ms": 15.1, "concurrency": 15.06,
    "max_output_tokens_per_s": 1216.0, "max_concurrent_requests": 16, "server_info": {"version": "0.5.11"},
})


def config(**overrides) -> BenchConfig:
    settings = dict(base_url="http://127.0.0.1:30000", model="/models/Qwen3.5-122B-A10B", concurrency_levels=(4, 16),
                    repeats=2, input_len=1000, output_len=1000)
    settings.update(overrides)
    return BenchConfig(**settings)


def test_mid_2025_record_maps_to_the_run_schema() -> None:
    run = run_from_bench_serving(json.loads(JSONL_MID_2025), requested=32, output_len=1000, repeat=2)
    assert run["repeat"] == 2 and (run["requests"], run["ok"], run["failed"]) == (32, 32, 0)
    assert run["error_samples"] == []
    assert (run["tokens"], run["wall_s"], run["agg_tok_s"]) == (32000, 26.3701, 1213.5)
    assert run["per_req_tok_s"] == pytest.approx(1000 / 13.1052)
    assert run["input_tokens"] == 1000.0 and run["achieved_concurrency"] == 15.91
    assert run["token_mismatch"] == 0 and run["retokenized_tokens"] == 31994 and run["accept_length"] == 2.31
    assert run["ttft_ms"] == {"p50": 398.1, "p90": None, "p99": 640.9}
    assert run["itl_ms"] == {"p50": 11.02, "p90": None, "p99": 33.5}
    assert run["tpot_ms"] == {"p50": 12.70, "p90": None, "p99": 12.93}
    assert run["e2e_ms"] == {"p50": 13098.7, "p90": None, "p99": 13190.4}
    assert run["steady_agg_tok_s"] is None and run["client_cpu_pct"] is None


def test_newer_record_with_failures_maps_p90_and_failed_count() -> None:
    run = run_from_bench_serving(json.loads(JSONL_NEWER), requested=32, output_len=1000, repeat=1)
    assert (run["ok"], run["failed"]) == (30, 2)
    assert run["error_samples"] == ["bench_serving: 2 of 32 requests failed (it reports no error texts)"]
    assert run["e2e_ms"]["p90"] == 14090.0 and run["accept_length"] is None


def test_short_outputs_cannot_be_attributed_so_mismatch_is_unknown() -> None:
    record = json.loads(JSONL_MID_2025) | {"total_output_tokens": 31488}
    assert run_from_bench_serving(record, requested=32, output_len=1000, repeat=1)["token_mismatch"] is None


def test_record_without_throughput_names_the_missing_keys() -> None:
    record = json.loads(JSONL_MID_2025)
    del record["output_throughput"], record["duration"]
    with pytest.raises(ValueError, match="lacks duration, output_throughput"):
        run_from_bench_serving(record, requested=32, output_len=1000, repeat=1)


@pytest.mark.parametrize(("endpoint", "backend", "extra"), [
    ("completions", "sglang-oai", []),
    ("generate", "sglang", ["--tokenize-prompt"]),
    ("chat", "sglang-oai-chat", ["--extra-request-body", '{"ignore_eos": true}']),
])
def test_argv_fixes_lengths_and_concurrency(endpoint: str, backend: str, extra: list[str]) -> None:
    argv = bench_serving_argv("/opt/sglang/venv/bin/python", config(endpoint=endpoint, api_key="sk-secret"),
                              model="/models/Qwen3.5-122B-A10B", concurrency=16, requests=32, warmup=16, seed=7,
                              output_file="/var/lib/sglang-bench/c16_r1.jsonl")
    assert argv == [
        "/opt/sglang/venv/bin/python", "-m", "sglang.bench_serving", "--backend", backend,
        "--base-url", "http://127.0.0.1:30000", "--model", "/models/Qwen3.5-122B-A10B", "--dataset-name", "random-ids",
        "--random-input-len", "1000", "--random-output-len", "1000", "--random-range-ratio", "1",
        "--max-concurrency", "16", "--num-prompts", "32", "--warmup-requests", "16", "--seed", "7",
        "--output-file", "/var/lib/sglang-bench/c16_r1.jsonl", "--disable-tqdm", *extra,
    ]
    assert not any("sk-secret" in part for part in argv)


class FakeBenchServing:
    """Stands in for the subprocess: checks the call and appends a JSONL line as bench_serving does."""

    def __init__(self, fail_at_call: int | None = None) -> None:
        self.calls: list[tuple[list[str], dict[str, str]]] = []
        self.fail_at_call = fail_at_call

    def __call__(self, argv: list[str], env: dict[str, str], timeout_s: float | None) -> tuple[int, str, str]:
        self.calls.append((argv, env))
        if len(self.calls) == self.fail_at_call:
            return 1, "", ("Traceback (most recent call last):\n  ...\naiohttp.client_exceptions.ClientConnectorError: "
                           "Cannot connect to host 127.0.0.1:30000 ssl:default [Connect call failed]\n")
        concurrency = int(argv[argv.index("--max-concurrency") + 1])
        record = json.loads(JSONL_MID_2025) | {"max_concurrency": concurrency,
                                               "output_throughput": 1213.5 + len(self.calls)}
        with open(argv[argv.index("--output-file") + 1], "a", encoding="utf-8") as stream:
            stream.write(json.dumps(record) + "\n")
        return 0, "============ Serving Benchmark Result ============\n", ""


def test_driver_runs_each_level_and_repeat_and_builds_a_comparable_sweep(tmp_path: Path) -> None:
    runner = FakeBenchServing()
    events: list[dict] = []
    sweep = run_bench_serving_sweep(config(api_key="sk-secret", requests_per_level=32),
                                    python="/opt/sglang/venv/bin/python", workdir=tmp_path, run_command=runner,
                                    on_progress=events.append)
    assert sweep["error"] is None and sweep["engine"] == "sglang_bench_serving"
    assert [level["concurrency"] for level in sweep["levels"]] == [4, 16]
    assert [run["agg_tok_s"] for level in sweep["levels"] for run in level["runs"]] == [1214.5, 1215.5, 1216.5, 1217.5]
    seeds = [argv[argv.index("--seed") + 1] for argv, _env in runner.calls]
    assert len(set(seeds)) == 4
    assert all(env == {"OPENAI_API_KEY": "sk-secret"} for _argv, env in runner.calls)
    assert [e["event"] for e in events].count("run_done") == 4 and events[-1]["event"] == "sweep_done"
    assert compare_sweeps(sweep, sweep)["verdict"] == "no significant change"


def test_driver_stops_with_the_stderr_tail_and_keeps_finished_levels(tmp_path: Path) -> None:
    sweep = run_bench_serving_sweep(config(), python="python3", workdir=tmp_path, run_command=FakeBenchServing(3))
    assert [level["concurrency"] for level in sweep["levels"]] == [4]
    assert sweep["error"].startswith("concurrency 16: repeat 1: bench_serving exited with rc=1: Traceback")
    assert "Cannot connect to host 127.0.0.1:30000" in sweep["error"]


def test_subprocess_runner_passes_env_and_enforces_the_time_limit() -> None:
    code = "import os, sys; print(os.environ['OPENAI_API_KEY']); sys.stderr.write('warn'); sys.exit(3)"
    assert run_subprocess([sys.executable, "-c", code], {"OPENAI_API_KEY": "sk-x"}, 30.0) == (3, "sk-x\n", "warn")
    started = time.monotonic()
    with pytest.raises(BenchAborted, match="did not finish within level_timeout_s=0.5"):
        run_subprocess([sys.executable, "-c", "import time; time.sleep(30)"], {}, 0.5)
    assert time.monotonic() - started < 30.0, "ended at the limit, not when the program would have"


def test_a_stop_rule_ends_a_level_early_and_a_regression_ends_the_sweep(tmp_path: Path) -> None:
    """The real stopping rule against a reference 10x faster than the fake: C=4 regresses at its second run."""
    reference = {"levels": [{"concurrency": c, "runs": [{"agg_tok_s": v} for v in (12150.0, 12100.0, 12200.0)]}
                            for c in (4, 16)]}
    plan = sequential_plan(reference, [4, 16], {"max_repeats": 6})
    events: list[dict] = []
    sweep = run_bench_serving_sweep(config(repeats=6), python="python3", workdir=tmp_path,
                                    run_command=FakeBenchServing(), on_progress=events.append,
                                    stop_rule=sequential_stop_rule(reference, plan))
    assert [(level["concurrency"], len(level["runs"])) for level in sweep["levels"]] == [(4, 2)]
    assert sweep["levels"][0]["sequential"]["decision"] == "regressed"
    assert sweep["not_measured"] == [{"concurrency": 16, "reason": "C=4 regressed after 2 repeats; the sweep stopped"}]
    stopped = [event for event in events if event["event"] == "level_stopped"]
    assert stopped == [{"event": "level_stopped", "concurrency": 4, "repeats": 2, "decision": "regressed",
                        "reason": sweep["levels"][0]["sequential"]["reason"]}]


def test_a_level_the_stop_rule_reopens_is_measured_on_after_the_level_that_reopened_it(tmp_path: Path) -> None:
    """C=4 stops after 1 run, C=16's stop reopens it: C=4 gets its second and third runs (fresh seeds, warm-up
    again) and is listed after C=16, the order in which the verdicts were settled."""
    def stop_rule(concurrency: int, runs: list[dict]) -> dict | None:
        if concurrency == 4 and len(runs) in (1, 3):
            return {"decision": "not_improved" if len(runs) == 1 else "not_regressed", "reason": "decided"}
        if concurrency == 16 and len(runs) == 1:
            return {"decision": "improved", "reason": "faster", "reopens": [4]}
        return None

    runner = FakeBenchServing()
    sweep = run_bench_serving_sweep(config(repeats=4), python="python3", workdir=tmp_path, run_command=runner,
                                    stop_rule=stop_rule)
    assert sweep["error"] is None
    assert [(level["concurrency"], len(level["runs"])) for level in sweep["levels"]] == [(16, 1), (4, 3)]
    assert [run["repeat"] for run in sweep["levels"][1]["runs"]] == [1, 2, 3]
    assert sweep["levels"][1]["sequential"]["decision"] == "not_regressed"
    seeds = [argv[argv.index("--seed") + 1] for argv, _env in runner.calls]
    assert len(runner.calls) == 4 and len(set(seeds)) == 4
