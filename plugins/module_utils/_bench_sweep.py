# Copyright (c) llmops.sglang contributors
# Apache License 2.0 (see LICENSE)
"""The sweep document (docs/bench-schema.md) and its levels, the same for both engines of the ``bench`` module (the
native client, bench_client; SGLang's bench_serving, bench_serving): the empty document, a level from its runs, the
stopping rule asked after each run and the order it leaves the levels in, a level with too many failed requests
refused, the end of the sweep with its error, and the progress lines.

Private to the llmops.sglang collection; do not use it from other collections.
"""
from __future__ import annotations

import datetime
import typing as t

from ansible_collections.llmops.sglang.plugins.module_utils._bench_aggregate import MAX_ERROR_SAMPLES
from ansible_collections.llmops.sglang.plugins.module_utils._bench_config import BenchConfig
from ansible_collections.llmops.sglang.plugins.module_utils._bench_session import BenchAborted, client_versions
from ansible_collections.llmops.sglang.plugins.module_utils.sweep_stats import summarize_level

SCHEMA_VERSION = 1

# Why a sweep stopped (``error_kind`` of the sweep, docs/bench-schema.md): ``auth`` (401), ``unreachable`` (no
# connection), ``requests_failed`` (every request of a batch, or more than max_failed_share of a level, failed),
# ``time_limit`` (level_timeout_s), ``server`` (an answer the benchmark cannot use: metadata errors, calibration),
# ``client`` (the benchmark client itself could not run, e.g. bench_serving exited non-zero).
ERROR_KINDS = ("auth", "unreachable", "requests_failed", "time_limit", "server", "client")
# A stopping rule: after each timed run of a level, None to measure another (up to ``repeats``), or a record of why
# the level is done; ``ends_sweep`` in it leaves the remaining levels unmeasured (sweep_stats.sequential_stop_rule).
StopRule = t.Callable[[int, t.List[dict]], t.Optional[dict]]


def _utc_now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")


def new_sweep(config: BenchConfig, engine: str) -> dict:
    """Empty sweep document (docs/bench-schema.md); levels are appended as they complete."""
    return {
        "schema_version": SCHEMA_VERSION, "started_at": _utc_now(), "finished_at": None, "engine": engine,
        "base_url": config.base_url, "endpoint": config.endpoint, "model": config.model,
        "input_len": config.input_len, "output_len": config.output_len, "repeats": config.repeats,
        "warmup_output_len": config.warmup_tokens(), "max_failed_share": config.max_failed_share, "levels": [],
        "not_measured": [], "failed_level": None,
        "error": None,
        "error_kind": None,
        "client": client_versions(),
        **({"workload": workload_document(config)} if config.arrival is not None else {}),
    }


def workload_document(config: BenchConfig) -> dict:
    """The open-loop workload a sweep ran (``sweep.workload``, docs/bench-schema.md)."""
    return {"arrival": config.arrival.as_dict(), "lengths": config.lengths.as_dict(),
            "shared_prefix": config.shared_prefix, "multi_turn": config.multi_turn, "slo": config.slo,
            "max_client_lag_ms": config.max_client_lag_ms, "seed": config.seed}


def make_level(concurrency: int, requests: int, warmup_requests: int, runs: list[dict],
               stopped: dict | None = None) -> dict:
    level = {"concurrency": concurrency, "requests": requests, "warmup_requests": warmup_requests, "runs": runs,
             "summary": summarize_level(runs)}
    if stopped is not None:
        level["sequential"] = stopped
    return level


def stop_after_run(stop_rule: StopRule | None, concurrency: int, runs: list[dict],
                   progress: t.Callable[[dict], None]) -> dict | None:
    """Ask the stopping rule after a run; announce a stop in the progress file (operators see why it stopped)."""
    stopped = stop_rule(concurrency, runs) if stop_rule else None
    if stopped is not None:
        progress({"event": "level_stopped", "concurrency": concurrency, "repeats": len(runs),
                  "decision": stopped.get("decision"), "reason": stopped.get("reason")})
    return stopped


def ends_sweep(sweep: dict, level: dict, remaining: t.Sequence[int]) -> bool:
    """Whether the level's stop ends the sweep; then the remaining levels are listed as not measured, with why."""
    stopped = level.get("sequential") or {}
    if not stopped.get("ends_sweep"):
        return False
    runs = len(level["runs"])
    reason = (f"C={level['concurrency']} {stopped.get('decision')} after {runs} repeat{'s' if runs != 1 else ''}; "
              "the sweep stopped")
    sweep["not_measured"] = [{"concurrency": concurrency, "reason": reason} for concurrency in remaining]
    return True


def sweep_order(sweep: dict, concurrency_levels: t.Sequence[int]) -> t.Iterator[tuple[int, list[dict]]]:
    """The levels to measure, each with the runs it has so far; the caller appends each level to ``sweep["levels"]``
    before asking for the next. A stop that ends the sweep ends it (``ends_sweep``); a stop that reopens earlier
    levels (``reopens``: they stopped not improved, and a regression there now decides the adoption) takes them out
    of the sweep to be measured on next, so ``levels`` lists every level in the order its verdict was settled."""
    pending: list[tuple[int, list[dict]]] = [(concurrency, []) for concurrency in concurrency_levels]
    while pending:
        concurrency, runs = pending.pop(0)
        yield concurrency, runs
        level = sweep["levels"][-1]
        if ends_sweep(sweep, level, [waiting for waiting, _runs in pending]):
            return
        reopens = (level.get("sequential") or {}).get("reopens") or ()
        reopened = [earlier for earlier in sweep["levels"] if earlier["concurrency"] in reopens]
        for earlier in reversed(reopened):
            sweep["levels"].remove(earlier)
            pending.insert(0, (earlier["concurrency"], earlier["runs"]))


def failed_share_error(level: dict, max_failed_share: float) -> str | None:
    """Why a completed level is no measurement: more than ``max_failed_share`` of its timed requests failed.

    Throughput over the requests that happened to succeed says nothing about the configuration, so such a level
    is an error naming the share and sample errors, never a number."""
    runs = level["runs"]
    requested = sum(run["requests"] for run in runs)
    failed = sum(run["failed"] for run in runs)
    if not requested or failed / requested <= max_failed_share:
        return None
    samples: list[str] = []
    for run in runs:
        samples += [sample for sample in run["error_samples"] if sample not in samples]
    return (f"{failed} of {requested} timed requests failed ({failed / requested:.1%}, more than "
            f"max_failed_share={max_failed_share:g}); sample errors: {samples[:MAX_ERROR_SAMPLES]}")


def check_level(level: dict, config: BenchConfig) -> dict:
    """The level, or BenchAborted(kind requests_failed) when too many of its requests failed."""
    error = failed_share_error(level, config.max_failed_share)
    if error:
        raise BenchAborted(error, "requests_failed", level)
    return level


def finish_sweep(sweep: dict, error: str | None, on_progress: t.Callable[[dict], None] | None,
                 kind: str | None = None) -> dict:
    sweep["error"] = error
    sweep["error_kind"] = (kind or "server") if error else None
    sweep["finished_at"] = _utc_now()
    if on_progress:
        on_progress({"event": "error", "message": error} if error else
                    {"event": "sweep_done", "levels": len(sweep["levels"])})
    return sweep


def format_progress(event: dict) -> str:
    """One human-readable progress line (for a file that operators tail)."""
    fields = " ".join(f"{key}={value:.1f}" if isinstance(value, float) else f"{key}={value}"
                      for key, value in event.items() if key != "event")
    return f"{_utc_now()} {event.get('event', 'progress')} {fields}".rstrip()
