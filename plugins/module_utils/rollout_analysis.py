# Copyright (c) llmops.sglang contributors
# Apache License 2.0 (see LICENSE)
"""A rollout's analysis of one updated host: the same short benchmark before and after the change on that host, and
whether the new configuration kept its error rate and its p99 TTFT and TPOT within limits of the previous one
(docs/reliability.md, "Rollouts"). A health check says a server answers; this says it still serves as well.

Pure: sweeps in (the bench module's schema, docs/bench-schema.md), a decision with its numbers out.

Private to the llmops.sglang collection.
"""
from __future__ import annotations

# What an operator would pick: at most 1 % failed requests, p99 TTFT and TPOT at most 10 % above the previous
# configuration's on the same host.
DEFAULT_LIMITS = {"max_error_rate": 0.01, "max_ttft_p99_increase_pct": 10.0, "max_tpot_p99_increase_pct": 10.0}
LATENCIES = (("ttft_ms", "max_ttft_p99_increase_pct", "p99 TTFT"), ("tpot_ms", "max_tpot_p99_increase_pct", "p99 TPOT"))
# The analysis' benchmark (llmops.sglang.bench's options): short (64 requests at C=8, one run, a few seconds on a GPU),
# every request counted (a failed one is evidence, not an abort).
DEFAULT_BENCH = {"concurrency_levels": [8], "requests_per_level": 64, "warmup_requests": 8, "input_len": 512,
                 "output_len": 128, "repeats": 1, "max_failed_share": 1.0, "request_timeout_s": 120,
                 "level_timeout_s": 300}


def limits_with_defaults(limits: dict | None) -> dict:
    unknown = sorted(set(limits or {}) - set(DEFAULT_LIMITS))
    if unknown:
        raise ValueError(f"rollout analysis limits: unknown {', '.join(unknown)} (known: {', '.join(DEFAULT_LIMITS)})")
    merged = {**DEFAULT_LIMITS, **{key: value for key, value in (limits or {}).items() if value is not None}}
    for key, value in merged.items():
        if not isinstance(value, (int, float)) or isinstance(value, bool) or value < 0:
            raise ValueError(f"rollout analysis limits: {key} must be a number >= 0, not {value!r}")
    return merged


def analysis_settings(analysis: dict | None) -> dict:
    """The rollout's ``rollout_analysis`` input as the batches use it: ``on`` (null turns the analysis off: health
    only), ``bench`` (its options over :data:`DEFAULT_BENCH`) and ``limits`` (checked here, before any host changes)."""
    if analysis is None:
        return {"on": False, "bench": dict(DEFAULT_BENCH), "limits": limits_with_defaults(None)}
    unknown = sorted(set(analysis) - {"bench", "limits"})
    if unknown:
        raise ValueError(f"rollout_analysis: unknown {', '.join(unknown)} (known: bench, limits)")
    for key in ("bench", "limits"):
        if not isinstance(analysis.get(key) or {}, dict):
            raise ValueError(f"rollout_analysis.{key} must be a dict of {'bench options' if key == 'bench' else 'limits'}")
    return {"on": True, "bench": {**DEFAULT_BENCH, **(analysis.get("bench") or {})},
            "limits": limits_with_defaults(analysis.get("limits"))}


def sweep_numbers(sweep: dict) -> dict:
    """Requests, failures and p99 latencies of a sweep, per level (keyed by concurrency or request rate). A level the
    bench gave up on (``failed_level``) counts with its failures; a sweep that stopped (``error``) says why."""
    levels = list(sweep.get("levels") or []) + ([sweep["failed_level"]] if sweep.get("failed_level") else [])
    numbers = {}
    for level in levels:
        runs = level.get("runs") or []
        summary = level.get("summary") or {}
        key = str(level.get("concurrency", level.get("request_rate")))
        numbers[key] = {"requests": sum(run.get("requests", 0) for run in runs),
                        "failed": sum(run.get("failed", 0) for run in runs),
                        **{latency[0]: (summary.get(latency[0]) or {}).get("p99") for latency in LATENCIES}}
    return {"levels": numbers, "error": sweep.get("error")}


def analyse(before: dict, after: dict, limits: dict | None = None) -> dict:
    """The decision on one host: ``passed``, ``reasons`` (each limit crossed, with its numbers), ``levels`` (before,
    after and change of each number) and the ``limits`` used. ``before`` must be a measurement: without one
    there is nothing to hold the new configuration to."""
    limits = limits_with_defaults(limits)
    old, new = sweep_numbers(before), sweep_numbers(after)
    if old["error"] or not old["levels"]:
        raise ValueError(f"the measurement before the change has no result to compare with: "
                         f"{old['error'] or 'no level measured'}")
    reasons, levels = [], {}
    if new["error"] and not new["levels"]:
        reasons.append(f"the measurement after the change failed: {new['error']}")
    for key, was in old["levels"].items():
        now = new["levels"].get(key)
        if now is None:
            if new["levels"]:
                reasons.append(f"level {key}: not measured after the change ({new['error'] or 'missing'})")
            continue
        levels[key] = _level(key, was, now, limits, reasons)
    return {"passed": not reasons, "reasons": reasons, "levels": levels, "limits": limits,
            "after_error": new["error"]}


def _level(key: str, was: dict, now: dict, limits: dict, reasons: list[str]) -> dict:
    rate = now["failed"] / now["requests"] if now["requests"] else 1.0
    row = {"error_rate": {"before": _rate(was), "after": round(rate, 4)}}
    if rate > limits["max_error_rate"]:
        reasons.append(f"level {key}: error rate {rate:.1%} ({now['failed']} of {now['requests']} requests) > "
                       f"{limits['max_error_rate']:.1%}")
    for metric, limit_key, name in LATENCIES:
        old_p99, new_p99 = was[metric], now[metric]
        change = round((new_p99 / old_p99 - 1) * 100, 1) if old_p99 and new_p99 is not None else None
        row[metric] = {"before_p99": old_p99, "after_p99": new_p99, "change_pct": change}
        if change is not None and change > limits[limit_key]:
            reasons.append(f"level {key}: {name} {new_p99:.1f} ms is {change:+.1f}% over {old_p99:.1f} ms before the "
                           f"change (limit +{limits[limit_key]:g}%)")
    return row


def _rate(numbers: dict) -> float | None:
    return round(numbers["failed"] / numbers["requests"], 4) if numbers["requests"] else None
