# Copyright (c) llmops.sglang contributors
# Apache License 2.0 (see LICENSE)
"""The highest open-loop request rate at which one server configuration meets the SLO.

Controller-side (plugin_utils), stdlib only. ``measure(rate, repeats)`` runs the bench module at one request rate
and returns its runs (docs/bench-schema.md, "Open-loop run": ``slo_holds``, ``goodput_rps``, ``client_limited``).

The search brackets the capacity by doubling or halving from ``start_rate`` with one run per probe (far from the
boundary one run decides), then bisects geometrically (the midpoint of 2 and 32 req/s is 8: capacity spans orders
of magnitude, so the resolution is relative). A rate meets the SLO only when it held in **all** of ``repeats``
runs: the answer is a rate an operator will promise, and one that fails one run in three misses its percentile a
third of the time, while a majority rule would settle where the SLO holds about half the time. Any failing run
decides "does not meet". The lower end of the final bracket is topped up to ``repeats`` runs before it is
reported; a run the client could not drive (``client_limited``) is not a measurement of the server, so such a
rate bounds the search from above and the result says so.

Candidates are ranked by ``estimate_rps``, not by the promised ``rate_rps``: two candidates whose capacities
are 5 % apart often end in the same bracket of a 10 % resolution, and the lower end of a bracket says nothing
about where in it the capacity lies. Every run reports how far its worst SLO metric is from its target
(``observed / target``: below 1 it held), so the estimate is where that margin, worst run of each end, crosses 1
between the bracket's ends, interpolated on log-log axes (latency grows like a power of the load near capacity).
It needs no extra run and stays within the bracket; it is the lower end when the margins do not straddle 1.
Each end's margin is the geometric mean over its runs, not the worst run: the worst of more runs is higher, so a
candidate given more runs would rank lower for its extra evidence; the mean of more runs is only steadier.

``contender_probe`` adds runs at the final bracket's ends after the search converged: the search stage asks for
them while the server is still up when the candidate's estimate is close to the best one's, where a few percent of
run noise decides the ranking (search_stage.py). They are ordinary runs of the search: a failing one moves the
bracket down like any other.
"""
from __future__ import annotations

import math
import statistics
import typing as t

Measure = t.Callable[[float, int], list[dict]]
DEFAULT_RESOLUTION = 0.05
DEFAULT_REPEATS = 3
DEFAULT_MAX_PROBES = 12
BRACKET_FACTOR = 2.0


def _check_options(start_rate: float, min_rate: float, resolution: float, repeats: int, max_probes: int) -> None:
    for name, value in (("start_rate", start_rate), ("min_rate", min_rate), ("resolution", resolution)):
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
            raise ValueError(f"rate search: {name} must be a number > 0, got {value!r}")
    if min_rate > start_rate:
        raise ValueError(f"rate search: min_rate ({min_rate:g}) must not exceed start_rate ({start_rate:g})")
    for name, value in (("repeats", repeats), ("max_probes", max_probes)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"rate search: {name} must be an integer >= 1, got {value!r}")


class _Probes:
    """What was measured so far, per rate: every run's ``slo_holds`` and ``goodput_rps``."""

    def __init__(self, repeats: int, resolution: float) -> None:
        self.repeats, self.resolution = repeats, resolution
        self.runs: dict[float, list[dict]] = {}
        self.log: list[dict] = []

    def add(self, rate: float, phase: str, runs: list[dict]) -> None:
        if not runs:
            raise ValueError(f"rate search: measure({rate:g} req/s) returned no runs")
        runs = [{**run, "slo_margin": run.get("slo_margin", slo_margin(run))} for run in runs]
        self.runs.setdefault(rate, []).extend(runs)
        holds = [bool(run.get("slo_holds")) for run in runs]
        self.log.append({"rate_rps": rate, "phase": phase, "repeats": len(runs), "holds": holds,
                         "goodput_rps": [run.get("goodput_rps") for run in runs],
                         "slo_margin": [run["slo_margin"] for run in runs],
                         "client_limited": any(run.get("client_limited") for run in runs)})

    def log_margin(self, rate: float) -> float | None:
        """The mean log SLO margin of the runs at ``rate``, or None when a run has none."""
        margins = [run["slo_margin"] for run in self.runs[rate]]
        if not margins or any(margin is None or margin <= 0 for margin in margins):
            return None
        return statistics.fmean(math.log(margin) for margin in margins)

    def fails(self, rate: float) -> bool:
        return any(not run.get("slo_holds") or run.get("client_limited") for run in self.runs[rate])

    def confirmed(self, rate: float) -> bool:
        return not self.fails(rate) and len(self.runs[rate]) >= self.repeats

    def upper(self) -> float | None:
        """The lowest rate that failed: the SLO is not met there (rates above it are not trusted to hold)."""
        return min((rate for rate in self.runs if self.fails(rate)), default=None)

    def lower(self) -> float | None:
        """The highest rate below ``upper`` at which every run held."""
        upper = self.upper()
        held = [rate for rate in self.runs if not self.fails(rate) and (upper is None or rate < upper)]
        return max(held, default=None)

    def best_confirmed(self) -> float | None:
        upper = self.upper()
        return max((rate for rate in self.runs if self.confirmed(rate) and (upper is None or rate < upper)),
                   default=None)


def slo_margin(run: dict) -> float | None:
    """How far a bench open-loop run's worst SLO metric is from its target (observed / target; <= 1: it held), or
    None when a metric has no observation or a target of 0."""
    ratios = []
    for spec in (run.get("slo") or {}).values():
        observed, target = spec.get("observed"), spec.get("target")
        if observed is None or not target:
            return None
        ratios.append(observed / target)
    return max(ratios) if ratios else None


def _estimate(probes: _Probes, rate: float | None) -> float | None:
    """Where the runs' mean SLO margin crosses 1 between ``rate`` and the lowest failing rate (log-log; the upper
    end when its runs failed less than their mean margin says, as one failing run of several can)."""
    upper = probes.upper()
    if rate is None or upper is None or _client_limited(probes, upper):
        return rate
    below, above = probes.log_margin(rate), probes.log_margin(upper)
    if below is None or above is None or not below < 0 or above <= below:
        return rate
    share = min(-below / (above - below), 1.0)
    return rate * (upper / rate) ** share


def _estimate_runs(probes: _Probes, rate: float | None) -> int:
    """How many runs the estimate rests on: those at ``rate`` and at the lowest failing rate above it."""
    upper = probes.upper()
    return sum(len(probes.runs[end]) for end in (rate, upper) if end is not None)


def _next_probe(probes: _Probes, start_rate: float, min_rate: float) -> tuple | None:
    """(rate, runs, phase) of the next measurement, or None when the answer is known or cannot be found."""
    lower, upper = probes.lower(), probes.upper()
    if lower is None and upper is None:
        return start_rate, 1, "bracket"
    if upper is None:
        return lower * BRACKET_FACTOR, 1, "bracket"
    if lower is None:
        rate = upper / BRACKET_FACTOR
        return (rate, 1, "bracket") if rate >= min_rate else None
    if upper / lower > 1.0 + probes.resolution:
        return math.sqrt(lower * upper), probes.repeats, "bisect"
    if not probes.confirmed(lower):
        return lower, probes.repeats - len(probes.runs[lower]), "confirm"
    return None


def _median_goodput(runs: list[dict]) -> float | None:
    values = [run["goodput_rps"] for run in runs if run.get("goodput_rps") is not None]
    return statistics.median(values) if values else None


def _client_limited(probes: _Probes, rate: float | None) -> bool:
    return rate is not None and any(run.get("client_limited") for run in probes.runs[rate])


def _reason(rate: float | None, upper: float | None, converged: bool, probes: _Probes, min_rate: float) -> str:
    if rate is None and upper is not None and upper / BRACKET_FACTOR < min_rate:
        return f"no rate meets the SLO: it failed at {upper:g} req/s and min_rate is {min_rate:g}"
    if rate is None:
        return "no rate was confirmed within max_probes"
    limit = "the client could not drive it" if _client_limited(probes, upper) else "the SLO failed there"
    bound = f"below {upper:g} req/s ({limit})" if upper is not None else "no failing rate found"
    done = f"within {probes.resolution:.0%}" if converged else "max_probes reached before the resolution"
    return f"{rate:g} req/s met the SLO in all of {len(probes.runs[rate])} runs, {bound}; {done}"


def _probes_of(log: t.Sequence[dict], repeats: int, resolution: float) -> _Probes:
    """The probes of a recorded log (``probes`` of a result, or of ``add_probe``): its runs rebuilt per rate."""
    probes = _Probes(repeats, resolution)
    for entry in log:
        margins = entry.get("slo_margin") or [None] * len(entry["holds"])  # logs before the estimate had none
        runs = [{"slo_holds": holds, "goodput_rps": goodput, "slo_margin": margin,
                 "client_limited": entry.get("client_limited", False)}
                for holds, goodput, margin in zip(entry["holds"], entry["goodput_rps"], margins)]
        probes.add(float(entry["rate_rps"]), entry["phase"], runs)
    return probes


def add_probe(log: t.Sequence[dict], rate: float, phase: str, runs: list[dict]) -> list[dict]:
    """The log with one more measurement: ``runs`` are bench open-loop runs (``slo_holds``, ``goodput_rps``,
    ``client_limited``, ``slo``) at ``rate``. The log is all the state a stepped search needs (resumable as JSON)."""
    probes = _Probes(DEFAULT_REPEATS, DEFAULT_RESOLUTION)
    probes.add(float(rate), phase, list(runs))
    return [*log, *probes.log]


def next_probe(log: t.Sequence[dict], *, start_rate: float, min_rate: float = 0.01,
               resolution: float = DEFAULT_RESOLUTION, repeats: int = DEFAULT_REPEATS,
               max_probes: int = DEFAULT_MAX_PROBES) -> dict | None:
    """The next measurement of a stepped search over ``log``: ``{rate_rps, repeats, phase}``, or None when the
    answer is known, cannot be found or ``max_probes`` are spent (then ``rate_result`` says which). A caller that
    measures each probe itself (a playbook calling the bench module) alternates this, its measurement and
    ``add_probe``; ``find_max_rate`` is the same loop with a ``measure`` function."""
    _check_options(start_rate, min_rate, resolution, repeats, max_probes)
    if sum(entry["phase"] != "contender" for entry in log) >= max_probes:  # contender runs have their own count
        return None
    step = _next_probe(_probes_of(log, repeats, resolution), start_rate, min_rate)
    if step is None:
        return None
    rate, runs, phase = step
    return {"rate_rps": rate, "repeats": runs, "phase": phase}


def contender_probe(log: t.Sequence[dict], runs: int, *, repeats: int = DEFAULT_REPEATS,
                    resolution: float = DEFAULT_RESOLUTION) -> dict | None:
    """The next of ``runs`` extra runs at the ends of the final bracket (``{rate_rps, repeats, phase: contender}``),
    half at each end, the end with fewer runs first; None once they are spent or without a bracket of a rate that
    held and one that failed (nothing to tighten; a client-limited end measures the client)."""
    probes = _probes_of(log, repeats, resolution)
    spent = sum(entry["repeats"] for entry in log if entry["phase"] == "contender")
    lower, upper = probes.best_confirmed(), probes.upper()
    if spent >= runs or lower is None or upper is None or _client_limited(probes, upper):
        return None
    rate = lower if len(probes.runs[lower]) <= len(probes.runs[upper]) else upper
    return {"rate_rps": rate, "repeats": min(runs - spent, max(runs // 2, 1)), "phase": "contender"}


def rate_result(log: t.Sequence[dict], *, start_rate: float, min_rate: float = 0.01,
                resolution: float = DEFAULT_RESOLUTION, repeats: int = DEFAULT_REPEATS) -> dict:
    """The answer of the measurements in ``log`` (the keys of ``find_max_rate``)."""
    probes = _probes_of(log, repeats, resolution)
    rate, upper = probes.best_confirmed(), probes.upper()
    converged = _next_probe(probes, start_rate, min_rate) is None and rate is not None
    # a search stopped before it confirmed a rate (max_probes, or the stage's cutoff of a candidate that cannot
    # lead) still has a bracket: its estimate is where the margins cross between the highest rate that held and
    # the lowest that failed, the rate it promises none
    judged = rate if rate is not None else probes.lower()
    return {
        "rate_rps": rate,
        "estimate_rps": _estimate(probes, judged),
        "estimate_runs": _estimate_runs(probes, judged),
        "goodput_rps": _median_goodput(probes.runs[rate]) if rate is not None else None,
        "bracket": [probes.lower(), upper],
        "converged": converged,
        "limited_by_client": _client_limited(probes, upper),
        "rule": f"all {repeats} runs at the rate hold the SLO",
        "resolution": resolution,
        "reason": _reason(rate, upper, converged, probes, min_rate),
        "probes": probes.log,
        "cost": {"probes": len(probes.log), "runs": sum(entry["repeats"] for entry in probes.log)},
    }


def find_max_rate(measure: Measure, *, start_rate: float, min_rate: float = 0.01,
                  resolution: float = DEFAULT_RESOLUTION, repeats: int = DEFAULT_REPEATS,
                  max_probes: int = DEFAULT_MAX_PROBES) -> dict:
    """The highest request rate meeting the SLO in all ``repeats`` runs, to ``resolution`` (relative).

    ``start_rate`` is a guess of the capacity (the best candidate's rate so far saves bracket probes); the search
    never reports a rate below ``min_rate``. Returns ``rate_rps`` (None when no rate was confirmed),
    ``goodput_rps`` (median over its runs), ``bracket`` ([highest rate that held in every run so far, lowest that
    failed]), ``estimate_rps`` (the capacity within the bracket, interpolated from the SLO margins: what candidates
    are ranked by), ``converged``, ``limited_by_client``, ``reason``, ``probes`` (every
    measurement in order: rate, phase, repeats, holds, goodput_rps, client_limited) and ``cost`` (probes, runs)."""
    options = {"start_rate": start_rate, "min_rate": min_rate, "resolution": resolution, "repeats": repeats}
    log: list[dict] = []
    while True:
        step = next_probe(log, max_probes=max_probes, **options)
        if step is None:
            break
        log = add_probe(log, step["rate_rps"], step["phase"], list(measure(step["rate_rps"], step["repeats"])))
    return rate_result(log, **options)
