# Copyright (c) llmops.sglang contributors
# Apache License 2.0 (see LICENSE)
"""Open-loop workloads for the ``bench`` module: arrivals, lengths, shared prefixes, conversations, SLOs, goodput.

Note that this module util is private to the llmops.sglang collection; do not use it from other collections.

Pure and stdlib-only (the sanity import test and the GPU host's SGLang venv both import it); bench_client.py drives
the requests. Upstream anchors:

* arrivals: SGLang's bench_serving samples Poisson gaps (``np.random.exponential(1 / request_rate)``, sglang 0.5.14
  python/sglang/bench_serving.py ``get_request``; sglang 0.5.23 sglang/benchmark/serving.py); the burstiness
  factor is vLLM's (vllm/benchmarks/serve.py ``get_request``): gamma gaps with shape = burstiness and
  scale = 1 / (rate * burstiness), so the mean rate stays ``rate`` and the gaps' CV is 1/sqrt(burstiness);
* shared prefixes: sglang 0.5.23 sglang/benchmark/datasets/generated_shared_prefix.py (a system prompt of
  ``system_prompt_len`` tokens shared by ``prompts_per_group`` requests, then a question per request);
* goodput: sglang 0.5.23 sglang/benchmark/goodput.py ``calculate_goodput`` (good = a successful request that met
  every SLO; goodput = good / duration; attainment = good / requests sent, so failed requests count as missed;
  a one-token response has TPOT 0).
"""
from __future__ import annotations

import json
import math
import random
import typing as t
from dataclasses import dataclass

ARRIVAL_PROCESSES = ("poisson", "constant", "gamma")
LENGTH_DISTRIBUTIONS = ("fixed", "uniform", "file")
SLO_METRICS = ("ttft_ms", "tpot_ms", "itl_ms", "e2e_ms")
DEFAULT_SLO_PERCENTILE = 99.0
# The client's own scheduling lag that still leaves its latencies meaningful: well under any TTFT SLO worth setting.
DEFAULT_MAX_CLIENT_LAG_MS = 50.0
# A single-threaded asyncio client near one full core is the limit itself, whatever its lag says.
CLIENT_CPU_LIMIT_PCT = 90.0
# Seconds of arrivals per timed run and per warm-up when requests_per_level / warmup_requests are not set.
DEFAULT_RUN_SECONDS = 60.0
DEFAULT_WARMUP_SECONDS = 10.0
RATE_TABLE_HEADER = "| Rate (req/s) | Achieved (req/s) | Goodput (req/s) | SLO met | Agg tok/s | Lag p99 (ms) | Ok |"


def _number(name: str, value: t.Any, *, minimum: float = 0.0, strict: bool = True, integer: bool = False) -> None:
    kinds = (int,) if integer else (int, float)
    valid = not isinstance(value, bool) and isinstance(value, kinds) and math.isfinite(value)
    if not valid or value < minimum or (strict and value == minimum):
        kind = "an integer" if integer else "a number"
        raise ValueError(f"{name} must be {kind} {'>' if strict else '>='} {minimum:g}, got {value!r}")


@dataclass(frozen=True)
class Arrival:
    """Open-loop arrivals: one level per request rate (requests/s), each sent on a seeded schedule."""

    request_rates: tuple[float, ...]
    process: str = "poisson"
    burstiness: float = 1.0
    max_concurrency: int | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "request_rates", tuple(self.request_rates))
        if self.process not in ARRIVAL_PROCESSES:
            raise ValueError(f"arrival.process must be one of {', '.join(ARRIVAL_PROCESSES)}, got {self.process!r}")
        if not self.request_rates:
            raise ValueError("arrival.request_rates must list at least one rate (requests/s)")
        for rate in self.request_rates:
            _number("arrival.request_rates", rate)
        _number("arrival.burstiness", self.burstiness)
        if self.burstiness != 1.0 and self.process != "gamma":
            raise ValueError(f"arrival.burstiness={self.burstiness:g} needs arrival.process=gamma "
                             f"(process {self.process} has a fixed burstiness)")
        if self.max_concurrency is not None:
            _number("arrival.max_concurrency", self.max_concurrency, integer=True)

    def as_dict(self) -> dict:
        return {"process": self.process, "request_rates": list(self.request_rates), "burstiness": self.burstiness,
                "max_concurrency": self.max_concurrency}


def inter_arrival_times(arrival: Arrival, rate: float, count: int, rng: random.Random) -> list[float]:
    """``count`` gaps in seconds between successive sends at ``rate`` requests/s (the first send is at 0)."""
    if arrival.process == "constant":
        return [1.0 / rate] * count
    shape = 1.0 if arrival.process == "poisson" else arrival.burstiness  # gamma with shape 1 is the exponential
    scale = 1.0 / (rate * shape)
    return [rng.gammavariate(shape, scale) for _gap in range(count)]


def send_offsets(arrival: Arrival, rate: float, count: int, rng: random.Random) -> list[float]:
    """Seconds from the run's start at which each of ``count`` arrivals is due."""
    offsets, clock = [], 0.0
    for gap in [0.0] + inter_arrival_times(arrival, rate, count - 1, rng):
        clock += gap
        offsets.append(clock)
    return offsets


@dataclass(frozen=True)
class Lengths:
    """Input/output token lengths per request: ``fixed`` (the bench's input_len/output_len), ``uniform``, ``file``."""

    distribution: str = "fixed"
    input_min: int | None = None
    input_max: int | None = None
    output_min: int | None = None
    output_max: int | None = None
    samples: tuple[tuple[int, int], ...] = ()  # distribution=file: the pairs read by read_length_file
    file: str | None = None

    def __post_init__(self) -> None:
        if self.distribution not in LENGTH_DISTRIBUTIONS:
            raise ValueError(f"lengths.distribution must be one of {', '.join(LENGTH_DISTRIBUTIONS)}, "
                             f"got {self.distribution!r}")
        bounds = ("input_min", "input_max", "output_min", "output_max")
        if self.distribution == "uniform":
            for name in bounds:
                _number(f"lengths.{name}", getattr(self, name), minimum=1, strict=False, integer=True)
            for side in ("input", "output"):
                if getattr(self, f"{side}_min") > getattr(self, f"{side}_max"):
                    raise ValueError(f"lengths.{side}_min ({getattr(self, f'{side}_min')}) must not exceed "
                                     f"lengths.{side}_max ({getattr(self, f'{side}_max')})")
        elif any(getattr(self, name) is not None for name in bounds):
            raise ValueError(f"lengths.input_min/input_max/output_min/output_max need lengths.distribution=uniform, "
                             f"got {self.distribution}")
        if self.distribution == "file" and not self.samples:
            raise ValueError("lengths.distribution=file needs lengths.file, a JSONL file with at least one request")
        if self.distribution != "file" and self.file is not None:
            raise ValueError(f"lengths.file needs lengths.distribution=file, got {self.distribution}")

    def as_dict(self) -> dict:
        return {"distribution": self.distribution, "input_min": self.input_min, "input_max": self.input_max,
                "output_min": self.output_min, "output_max": self.output_max, "file": self.file,
                "file_requests": len(self.samples) if self.distribution == "file" else None}


def parse_length_lines(lines: t.Iterable[str], source: str) -> tuple[tuple[int, int], ...]:
    """(input_tokens, output_tokens) of each JSONL line ``{"input_tokens": 812, "output_tokens": 164}``.

    Other keys are ignored (a request log may carry timestamps or ids); blank lines are skipped. Errors name the
    file, the line and the field."""
    pairs = []
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        where = f"{source} line {number}"
        try:
            entry = json.loads(line)
        except ValueError as exc:
            raise ValueError(f"{where}: not JSON ({exc}); each line must be one object such as "
                             '{"input_tokens": 812, "output_tokens": 164}') from exc
        if not isinstance(entry, dict):
            raise ValueError(f"{where}: must be a JSON object, got {type(entry).__name__}")
        pair = []
        for field in ("input_tokens", "output_tokens"):
            value = entry.get(field)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                problem = "is missing" if field not in entry else f"must be an integer >= 1, got {value!r}"
                raise ValueError(f"{where}: {field} {problem}")
            pair.append(value)
        pairs.append((pair[0], pair[1]))
    if not pairs:
        raise ValueError(f"{source}: no requests (one JSON object per line with input_tokens and output_tokens)")
    return tuple(pairs)


def read_length_file(path: str) -> tuple[tuple[int, int], ...]:
    try:
        with open(path, encoding="utf-8") as stream:
            return parse_length_lines(stream, f"lengths.file {path}")
    except OSError as exc:
        raise ValueError(f"lengths.file {path} cannot be read: {exc.strerror or exc}") from exc


def sample_lengths(lengths: Lengths, fixed: tuple[int, int], count: int, rng: random.Random) -> list[tuple[int, int]]:
    """``count`` (input, output) pairs: the fixed pair, uniform integers within the bounds, or draws from the file."""
    if lengths.distribution == "fixed":
        return [fixed] * count
    if lengths.distribution == "file":
        return rng.choices(lengths.samples, k=count)
    return [(rng.randint(lengths.input_min, lengths.input_max), rng.randint(lengths.output_min, lengths.output_max))
            for _request in range(count)]


def join_pieces(pieces: t.Sequence[list[int] | str]) -> list[int] | str:
    """One prompt from its pieces: token ids concatenate, text joins with a space (word boundaries stay words)."""
    if pieces and isinstance(pieces[0], str):
        return " ".join(piece for piece in pieces if piece)
    return [token for piece in pieces for token in piece]


def turn_prompt(system: list[int] | str | None, users: t.Sequence[list[int] | str],
                outputs: t.Sequence[list[int] | str]) -> list[int] | str:
    """Prompt of turn n = len(users): the system prompt, every earlier user message and its output, then user n.

    A multi-turn client resends the whole history each turn (what chat applications do), so the server's prefix
    cache can serve it; ``outputs`` are the n-1 outputs of the earlier turns."""
    if len(outputs) != len(users) - 1:
        raise ValueError(f"turn {len(users)} needs the outputs of the {len(users) - 1} turns before it, "
                         f"got {len(outputs)}")
    history: list[list[int] | str] = [system] if system else []
    for user, output in zip(users, outputs):
        history += [user, output]
    return join_pieces(history + [users[-1]])


def group_of(conversation: int, requests_per_group: int | None) -> int | None:
    """Shared-prefix group of the n-th conversation of a run (consecutive conversations share a system prompt)."""
    return None if not requests_per_group else conversation // requests_per_group


def validate_workload(shared_prefix: dict | None, multi_turn: dict | None) -> None:
    if shared_prefix is not None:
        _number("shared_prefix.system_prompt_len", shared_prefix.get("system_prompt_len"), minimum=1, strict=False,
                integer=True)
        _number("shared_prefix.requests_per_group", shared_prefix.get("requests_per_group"), minimum=1,
                strict=False, integer=True)
    if multi_turn is not None:
        _number("multi_turn.turns", multi_turn.get("turns"), minimum=1, strict=False, integer=True)


def validate_slo(slo: dict | None) -> dict | None:
    """``{metric: {target, percentile}}`` with targets in ms and percentiles in (0, 100]; None for no SLO."""
    if slo is None:
        return None
    cleaned = {}
    for metric, spec in slo.items():
        if spec is None:
            continue
        if metric not in SLO_METRICS:
            raise ValueError(f"slo.{metric} is not an SLO metric; use {', '.join(SLO_METRICS)}")
        if not isinstance(spec, dict):
            raise ValueError(f"slo.{metric} must be {{target: <ms>, percentile: <1-100>}}, got {spec!r}")
        target, percentile = spec.get("target"), spec.get("percentile", DEFAULT_SLO_PERCENTILE)
        _number(f"slo.{metric}.target", target)
        _number(f"slo.{metric}.percentile", percentile)
        if percentile > 100:
            raise ValueError(f"slo.{metric}.percentile must be at most 100, got {percentile!r}")
        cleaned[metric] = {"target": float(target), "percentile": float(percentile)}
    if not cleaned:
        raise ValueError(f"slo must set at least one of {', '.join(SLO_METRICS)}")
    return cleaned


def percentile(values: t.Sequence[float], quantile: float) -> float | None:
    """Linear-interpolation percentile (numpy's default); None for an empty sample."""
    ordered = sorted(values)
    if not ordered:
        return None
    position = (len(ordered) - 1) * quantile / 100.0
    low = math.floor(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


def request_latencies(start: float, end: float, chunk_times: t.Sequence[float], output_tokens: int) -> dict:
    """One successful request's SLO metrics in ms; ``itl_ms`` is its largest gap between token deliveries.

    The largest gap, because a request meets an ITL target only if no delivery was later than it; TPOT as
    SGLang's goodput (0 for a one-token answer)."""
    ttft = (chunk_times[0] - start) * 1000.0 if chunk_times else (end - start) * 1000.0
    e2e = (end - start) * 1000.0
    gaps = [later - earlier for earlier, later in zip(chunk_times, chunk_times[1:]) if later > earlier]
    return {"ttft_ms": ttft, "tpot_ms": (e2e - ttft) / (output_tokens - 1) if output_tokens > 1 else 0.0,
            "itl_ms": max(gaps) * 1000.0 if gaps else 0.0, "e2e_ms": e2e}


def slo_report(latencies: t.Sequence[dict | None], wall_s: float, slo: dict,
               itl_gaps_ms: t.Sequence[float]) -> dict:
    """Goodput and SLO attainment of one run; ``latencies`` has one entry per request sent, None for a failure.

    Per metric: ``attainment`` (share of requests sent that met its target), ``observed`` (the value at its
    percentile over the successful requests; ITL over all token gaps, as the run's ``itl_ms``) and ``holds``."""
    sent = len(latencies)
    ok = [entry for entry in latencies if entry is not None]
    good = sum(1 for entry in ok if all(entry[metric] <= spec["target"] for metric, spec in slo.items()))
    per_metric = {}
    for metric, spec in slo.items():
        values = itl_gaps_ms if metric == "itl_ms" else [entry[metric] for entry in ok]
        observed = percentile(values, spec["percentile"])
        per_metric[metric] = {
            "target": spec["target"], "percentile": spec["percentile"], "observed": observed,
            "holds": observed is not None and observed <= spec["target"],
            "attainment": sum(1 for entry in ok if entry[metric] <= spec["target"]) / sent if sent else 0.0,
        }
    return {"good": good, "slo_attainment": good / sent if sent else 0.0,
            "goodput_rps": good / wall_s if wall_s > 0 else 0.0,
            "slo_holds": all(entry["holds"] for entry in per_metric.values()), "slo": per_metric}


def lag_check(lags_ms: t.Sequence[float], max_lag_ms: float, cpu_pct: float | None) -> dict:
    """The client's send lag (actual minus scheduled send time) and whether the client, not the server, limited it.

    Lag is measured before any wait for a max_concurrency slot (that wait is the cap working, not the client)."""
    p99 = percentile(lags_ms, 99)
    reasons = []
    if p99 is not None and p99 > max_lag_ms:
        reasons.append(f"send lag p99 {p99:.1f} ms > max_client_lag_ms={max_lag_ms:g}")
    if cpu_pct is not None and cpu_pct > CLIENT_CPU_LIMIT_PCT:
        reasons.append(f"client CPU {cpu_pct:.0f}% of one core > {CLIENT_CPU_LIMIT_PCT:g}%")
    return {"lag_ms": {"p50": percentile(lags_ms, 50), "p99": p99, "max": max(lags_ms) if lags_ms else None},
            "client_limited": bool(reasons), "client_limited_reason": "; ".join(reasons) or None}


def _median(values: list[float]) -> float | None:
    ordered = sorted(values)
    return percentile(ordered, 50)


def rate_level_summary(runs: t.Sequence[dict]) -> dict:
    """Level-wide open-loop facts: medians over runs; an SLO holds only if it held in every run."""
    summary: dict[str, t.Any] = {
        "achieved_rate_rps": _median([run["achieved_rate_rps"] for run in runs]),
        "lag_p99_ms": _median([run["lag_ms"]["p99"] for run in runs if run["lag_ms"]["p99"] is not None]),
        "client_limited": any(run["client_limited"] for run in runs),
        "client_limited_reasons": [f"repeat {run['repeat']}: {run['client_limited_reason']}"
                                   for run in runs if run["client_limited"]],
    }
    if runs and "slo" in runs[0]:
        summary["goodput_rps"] = _median([run["goodput_rps"] for run in runs])
        summary["slo_attainment"] = _median([run["slo_attainment"] for run in runs])
        summary["slo_holds"] = {metric: all(run["slo"][metric]["holds"] for run in runs) for metric in runs[0]["slo"]}
    return summary


def _cell(value: float | None, digits: int = 1) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def rate_table(levels: t.Sequence[dict]) -> str:
    """Operators' Markdown table of an open-loop sweep, one row per request rate (medians over repeats)."""
    lines = [RATE_TABLE_HEADER, "|---:|---:|---:|---:|---:|---:|---:|"]
    for level in levels:
        open_loop, summary = level["open_loop"], level["summary"]
        attainment = open_loop.get("slo_attainment")
        lines.append(" | ".join([
            f"| {level['request_rate']:g}", _cell(open_loop["achieved_rate_rps"], 2),
            _cell(open_loop.get("goodput_rps"), 2), "-" if attainment is None else f"{attainment:.1%}",
            _cell(summary["agg_tok_s"]), _cell(open_loop["lag_p99_ms"]),
            f"{summary['ok']}/{summary['ok'] + summary['failed']} |"]))
    return "\n".join(lines)
