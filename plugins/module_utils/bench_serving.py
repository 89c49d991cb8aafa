# Copyright (c) llmops.sglang contributors
# Apache License 2.0 (see LICENSE)
"""The ``bench`` module's ``sglang_bench_serving`` engine: run ``python -m sglang.bench_serving`` per level/repeat.

Note that this module util is private to the llmops.sglang collection; do not use it from other collections.

Each invocation writes one JSONL record (the keys sglang 0.5.11 python/sglang/bench_serving.py dumps to
--output-file); ``run_from_bench_serving`` maps it into the same
run schema the native client produces, so sweeps from either engine compare with ``compare_sweeps``. Fields
bench_serving does not report (p90 of TTFT/ITL/TPOT in older versions, steady-state throughput, per-request token
mismatches) are null rather than guessed.
"""
from __future__ import annotations

import json
import os
import subprocess
import typing as t
from pathlib import Path

from ansible_collections.llmops.sglang.plugins.module_utils._bench_config import BenchConfig
from ansible_collections.llmops.sglang.plugins.module_utils._bench_session import BenchAborted, resolve_model
from ansible_collections.llmops.sglang.plugins.module_utils._bench_sweep import (
    StopRule,
    check_level,
    finish_sweep,
    make_level,
    new_sweep,
    stop_after_run,
    sweep_order,
)
from ansible_collections.llmops.sglang.plugins.module_utils.command_runner import command_environment

BACKENDS = {"completions": "sglang-oai", "chat": "sglang-oai-chat", "generate": "sglang"}
REQUIRED_KEYS = ("duration", "completed", "total_output_tokens", "output_throughput", "mean_e2e_latency_ms")
STDERR_TAIL_LINES = 20

RunCommand = t.Callable[[list[str], dict[str, str], t.Optional[float]], tuple[int, str, str]]


def bench_serving_argv(python: str, config: BenchConfig, *, model: str, concurrency: int, requests: int,
                       warmup: int, seed: int, output_file: str) -> list[str]:
    """Command line for one bench_serving run with fixed lengths (range ratio 1) and C in flight."""
    argv = [
        python, "-m", "sglang.bench_serving", "--backend", BACKENDS[config.endpoint], "--base-url", config.base_url,
        "--model", model, "--dataset-name", "random-ids", "--random-input-len", str(config.input_len),
        "--random-output-len", str(config.output_len), "--random-range-ratio", "1", "--max-concurrency",
        str(concurrency), "--num-prompts", str(requests), "--warmup-requests", str(warmup), "--seed", str(seed),
        "--output-file", output_file, "--disable-tqdm",
    ]
    if config.endpoint == "generate":
        # random-ids text re-tokenizes to the wrong length (sglang#15732); the native backend can send the ids.
        argv.append("--tokenize-prompt")
    if config.endpoint == "chat":
        # Outputs must run to output_len; named here because extra_request_body wins over the chat backend's own
        # default (sglang 0.5.11 python/sglang/bench_serving.py, async_request_openai_chat_completions).
        argv += ["--extra-request-body", json.dumps({"ignore_eos": True})]
    return argv


def _number(record: dict, key: str) -> float | None:
    value = record.get(key)
    return None if value is None else float(value)


def run_from_bench_serving(record: dict, *, requested: int, output_len: int, repeat: int) -> dict:
    """Map one bench_serving JSONL record to a run of the bench schema (docs/bench-schema.md).

    per_req_tok_s is mean output tokens / mean E2E latency: bench_serving keeps no per-request pairs in its summary.
    """
    missing = [key for key in REQUIRED_KEYS if record.get(key) is None]
    if missing:
        raise ValueError(f"bench_serving record lacks {', '.join(missing)}")
    completed = int(record["completed"])
    tokens = int(record["total_output_tokens"])
    failed = max(requested - completed, 0)
    mean_e2e_s = float(record["mean_e2e_latency_ms"]) / 1000.0
    per_req = tokens / completed / mean_e2e_s if completed and mean_e2e_s > 0 else 0.0
    return {
        "repeat": repeat, "requests": requested, "ok": completed, "failed": failed,
        "error_samples": [f"bench_serving: {failed} of {requested} requests failed (it reports no error texts)"]
        if failed else [],
        "tokens": tokens, "wall_s": float(record["duration"]), "agg_tok_s": float(record["output_throughput"]),
        "per_req_tok_s": per_req,
        "input_tokens": int(record["total_input_tokens"]) / completed
        if completed and record.get("total_input_tokens") is not None else None,
        "achieved_concurrency": _number(record, "concurrency"),
        # Only the total is known: all-exact totals prove zero mismatches, anything else cannot be attributed.
        "token_mismatch": 0 if tokens == completed * output_len else None,
        "usage_missing": None, "steady_agg_tok_s": None, "steady_window_s": None,
        "ttft_ms": {"p50": _number(record, "median_ttft_ms"), "p90": _number(record, "p90_ttft_ms"),
                    "p99": _number(record, "p99_ttft_ms")},
        "itl_ms": {"p50": _number(record, "median_itl_ms"), "p90": _number(record, "p90_itl_ms"),
                   "p99": _number(record, "p99_itl_ms")},
        "tpot_ms": {"p50": _number(record, "median_tpot_ms"), "p90": _number(record, "p90_tpot_ms"),
                    "p99": _number(record, "p99_tpot_ms")},
        "e2e_ms": {"p50": _number(record, "median_e2e_latency_ms"), "p90": _number(record, "p90_e2e_latency_ms"),
                   "p99": _number(record, "p99_e2e_latency_ms")},
        "client_cpu_pct": None,
        "retokenized_tokens": record.get("total_output_tokens_retokenized"),
        "accept_length": _number(record, "accept_length"),
    }


def last_record(path: Path) -> dict:
    """bench_serving appends to --output-file; the run's record is the last non-empty line."""
    lines = [line for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    if not lines:
        raise BenchAborted(f"bench_serving wrote no result to {path}")
    try:
        return json.loads(lines[-1])
    except ValueError as exc:
        raise BenchAborted(f"bench_serving result in {path} is not JSON: {exc}") from exc


def run_subprocess(argv: list[str], env: dict[str, str], timeout_s: float | None) -> tuple[int, str, str]:
    """One bench_serving run. subprocess, not run_command: a level has a time limit (level_timeout_s), which
    run_command has not; the environment is the runner's (command_runner.command_environment: the forced locale)."""
    try:
        # pylint: disable-next=ansible-bad-function
        done = subprocess.run(argv, env=command_environment(env, base=os.environ), capture_output=True, text=True, timeout=timeout_s,
                              check=False)
    except subprocess.TimeoutExpired as exc:
        raise BenchAborted(f"bench_serving did not finish within level_timeout_s={timeout_s:g}", "time_limit") from exc
    except OSError as exc:
        raise BenchAborted(f"cannot run {argv[0]}: {exc}", "client") from exc
    return done.returncode, done.stdout, done.stderr


def _run_once(config: BenchConfig, argv: list[str], output_file: Path, run_command: RunCommand) -> dict:
    # The key goes through the environment (bench_serving reads OPENAI_API_KEY), never onto the command line.
    env = {"OPENAI_API_KEY": config.api_key} if config.api_key else {}
    rc, _stdout, stderr = run_command(argv, env, config.level_timeout_s)
    if rc != 0:
        tail = "\n".join(stderr.strip().splitlines()[-STDERR_TAIL_LINES:])
        raise BenchAborted(f"bench_serving exited with rc={rc}: {tail}", "client")
    return last_record(output_file)


def _run_level(config: BenchConfig, model: str, concurrency: int, earlier: list[dict], python: str, workdir: Path,
               run_command: RunCommand, progress: t.Callable[[dict], None], stop_rule: StopRule | None) -> dict:
    """A level's runs after ``earlier`` ones (a level the stopping rule reopened); each invocation warms up."""
    requests, warmup = config.requests_for(concurrency), config.warmup_for(concurrency)
    ordinal = list(config.concurrency_levels).index(concurrency)
    progress({"event": "level_start", "concurrency": concurrency, "warmup_requests": warmup, "requests": requests,
              "repeats": config.repeats})
    runs = list(earlier)
    stopped = None
    for repeat in range(len(runs) + 1, config.repeats + 1):
        output_file = workdir / f"bench_serving_c{concurrency}_r{repeat}.jsonl"
        # A fresh seed per invocation: identical random prompts would turn repeats into prefix-cache hits.
        seed = config.seed * 1000 + ordinal * config.repeats + repeat
        argv = bench_serving_argv(python, config, model=model, concurrency=concurrency, requests=requests,
                                  warmup=warmup, seed=seed, output_file=str(output_file))
        try:
            record = _run_once(config, argv, output_file, run_command)
            run = run_from_bench_serving(record, requested=requests, output_len=config.output_len, repeat=repeat)
        except BenchAborted as exc:
            raise BenchAborted(f"repeat {repeat}: {exc}", exc.kind) from exc
        except ValueError as exc:
            raise BenchAborted(f"repeat {repeat}: {exc}") from exc
        runs.append(run)
        progress({"event": "run_done", "concurrency": concurrency, "repeat": repeat, "repeats": config.repeats,
                  "agg_tok_s": run["agg_tok_s"], "per_req_tok_s": run["per_req_tok_s"], "ok": run["ok"],
                  "failed": run["failed"], "wall_s": run["wall_s"]})
        stopped = stop_after_run(stop_rule, concurrency, runs, progress)
        if stopped is not None:
            break
    level = check_level(make_level(concurrency, requests, warmup, runs, stopped), config)
    progress({"event": "level_done", "concurrency": concurrency, "agg_tok_s": level["summary"]["agg_tok_s"],
              "per_req_tok_s": level["summary"]["per_req_tok_s"]})
    return level


def run_bench_serving_sweep(config: BenchConfig, *, python: str, workdir: Path,
                            run_command: RunCommand = run_subprocess,
                            on_progress: t.Callable[[dict], None] | None = None,
                            stop_rule: StopRule | None = None) -> dict:
    """Sweep with SGLang's own client; same document, error and stopping semantics as ``bench_client.run_sweep``."""
    sweep = new_sweep(config, "sglang_bench_serving")
    sweep["client"]["engine"] = "sglang.bench_serving"
    progress = on_progress or (lambda event: None)
    try:
        sweep["model"] = resolve_model(config)
    except BenchAborted as exc:
        return finish_sweep(sweep, str(exc), on_progress, exc.kind)
    for concurrency, earlier in sweep_order(sweep, config.concurrency_levels):
        try:
            sweep["levels"].append(_run_level(config, sweep["model"], concurrency, earlier, python, workdir,
                                              run_command, progress, stop_rule))
        except BenchAborted as exc:
            sweep["failed_level"] = exc.level
            return finish_sweep(sweep, f"concurrency {concurrency}: {exc}", on_progress, exc.kind)
    return finish_sweep(sweep, None, on_progress)
