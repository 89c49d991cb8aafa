# Copyright (c) llmops.sglang contributors
# Apache License 2.0 (see LICENSE)
"""A timed run's numbers from its request records: throughput over the wall time, per-request rates, latency
percentiles (TTFT, ITL, TPOT, E2E), token checks, the steady-state window; for an open-loop run also the arrival
rate, the client's send lag and the goodput under the SLO.

Private to the llmops.sglang collection; do not use it from other collections. Pure and stdlib-only.
"""
from __future__ import annotations

import bisect
import math
import statistics
import typing as t

from ansible_collections.llmops.sglang.plugins.module_utils._bench_config import BenchConfig
from ansible_collections.llmops.sglang.plugins.module_utils._bench_sse import RequestRecord
from ansible_collections.llmops.sglang.plugins.module_utils.workload import lag_check, request_latencies, slo_report

QUANTILES = (50, 90, 99)
# Tokens are counted for steady_agg_tok_s only while at least this share of C requests is in flight (sglang#30918).
STEADY_STATE_RATIO = 0.9
MAX_ERROR_SAMPLES = 3


def percentiles(values: t.Sequence[float], quantiles: t.Sequence[int] = QUANTILES) -> dict[str, float | None]:
    """Linear-interpolation percentiles (numpy's default) keyed ``p50``...; None for an empty sample."""
    ordered = sorted(values)
    result: dict[str, float | None] = {}
    for quantile in quantiles:
        if not ordered:
            result[f"p{quantile}"] = None
            continue
        position = (len(ordered) - 1) * quantile / 100.0
        low = math.floor(position)
        high = min(low + 1, len(ordered) - 1)
        result[f"p{quantile}"] = ordered[low] + (ordered[high] - ordered[low]) * (position - low)
    return result


def steady_window(intervals: t.Sequence[tuple[float, float]], threshold: int) -> tuple[float, float] | None:
    """Longest contiguous time span with at least ``threshold`` requests in flight (None if never reached)."""
    # At equal timestamps a finish is processed before a start, so touching requests never count as overlapping.
    events = sorted([(start, 1) for start, _end in intervals] + [(end, -1) for _start, end in intervals])
    best: tuple[float, float] | None = None
    in_flight = 0
    opened: float | None = None
    for moment, delta in events:
        in_flight += delta
        if in_flight >= threshold and opened is None:
            opened = moment
        elif in_flight < threshold and opened is not None:
            if best is None or moment - opened > best[1] - best[0]:
                best = (opened, moment)
            opened = None
    return best


def tokens_in_window(records: t.Sequence[RequestRecord], window: tuple[float, float]) -> float:
    """Output tokens that arrived inside ``window``; a request's tokens are spread evenly over its token chunks."""
    start, end = window
    total = 0.0
    for record in records:
        if not record.chunk_times:
            continue
        inside = bisect.bisect_right(record.chunk_times, end) - bisect.bisect_left(record.chunk_times, start)
        total += record.output_tokens * inside / len(record.chunk_times)
    return total


def _latency_samples(records: t.Sequence[RequestRecord]) -> dict[str, list[float]]:
    samples: dict[str, list[float]] = {"ttft_ms": [], "itl_ms": [], "tpot_ms": [], "e2e_ms": []}
    for record in records:
        e2e = record.end - record.start
        samples["e2e_ms"].append(e2e * 1000.0)
        if not record.chunk_times:
            continue
        ttft = record.chunk_times[0] - record.start
        samples["ttft_ms"].append(ttft * 1000.0)
        times = record.chunk_times
        # Chunks taken from the same socket read share a timestamp: they reached the client as one delivery.
        samples["itl_ms"].extend((later - earlier) * 1000.0 for earlier, later in zip(times, times[1:])
                                 if later > earlier)
        if record.output_tokens > 1:
            samples["tpot_ms"].append((e2e - ttft) * 1000.0 / (record.output_tokens - 1))
    return samples


def aggregate_run(records: t.Sequence[RequestRecord], *, wall_s: float, output_len: int, concurrency: int,
                  steady_state: bool) -> dict:
    """One timed run: throughput over the wall time, per-request rates, latency percentiles, token checks.

    ITL is the gap between successive deliveries of tokens (token-bearing chunks read together count once);
    TPOT = (E2E - TTFT)/(tokens - 1).
    """
    ok = [record for record in records if record.ok]
    failed = [record for record in records if not record.ok]
    tokens = sum(record.output_tokens for record in ok)
    prompt_tokens = [record.prompt_tokens for record in ok if record.prompt_tokens is not None]
    run: dict[str, t.Any] = {
        "requests": len(records), "ok": len(ok), "failed": len(failed),
        "error_samples": [record.error or "no output tokens" for record in failed[:MAX_ERROR_SAMPLES]],
        "tokens": tokens, "wall_s": wall_s,
        "agg_tok_s": tokens / wall_s if wall_s > 0 else 0.0,
        "per_req_tok_s": statistics.fmean(r.output_tokens / (r.end - r.start) for r in ok) if ok else 0.0,
        "input_tokens": statistics.median(prompt_tokens) if prompt_tokens else None,
        "achieved_concurrency": sum(r.end - r.start for r in records) / wall_s if wall_s > 0 else 0.0,
        "token_mismatch": sum(1 for record in ok if record.output_tokens != (
            output_len if record.expected_tokens is None else record.expected_tokens)),
        "usage_missing": sum(1 for record in ok if record.tokens is None),
        "steady_agg_tok_s": None, "steady_window_s": None,
    }
    run.update({name: percentiles(values) for name, values in _latency_samples(ok).items()})
    if steady_state:
        window = steady_window([(r.start, r.end) for r in records], math.ceil(STEADY_STATE_RATIO * concurrency))
        if window and window[1] > window[0]:
            run["steady_window_s"] = window[1] - window[0]
            run["steady_agg_tok_s"] = tokens_in_window(ok, window) / run["steady_window_s"]
    return run


def open_loop_run(records: t.Sequence[RequestRecord], wall_s: float, cpu_s: float, rate: float,
                  config: BenchConfig) -> dict:
    """One timed open-loop run: the closed-loop run fields plus arrival rate, client lag and SLO goodput."""
    run = aggregate_run(records, wall_s=wall_s, output_len=config.output_len, concurrency=1, steady_state=False)
    run["client_cpu_pct"] = cpu_s / wall_s * 100.0 if wall_s > 0 else None
    run["request_rate"] = rate
    run["achieved_rate_rps"] = len(records) / wall_s if wall_s > 0 else 0.0
    run.update(lag_check([record.lag * 1000.0 for record in records if record.lag is not None],
                         config.max_client_lag_ms, run["client_cpu_pct"]))
    if config.slo:
        ok = [record for record in records if record.ok]
        latencies = [request_latencies(r.start, r.end, r.chunk_times, r.output_tokens) if r.ok else None
                     for r in records]
        run.update(slo_report(latencies, wall_s, config.slo, _latency_samples(ok)["itl_ms"]))
    return run
