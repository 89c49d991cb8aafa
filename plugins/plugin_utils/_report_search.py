# Copyright (c) llmops.sglang contributors
# Apache License 2.0 (see LICENSE)
"""The goodput search of a host in summary.json (``hosts.<host>.search``): each candidate's outcome and goodput with
the latencies at its SLO-meeting rate, the Pareto fronts of goodput against p99 TTFT and TPOT, and the recommendation
with its re-verification and side effects, read only from the search's records (docs/run-directory.md, "Search").

Private to the llmops.sglang collection (plugin_utils/run_report.py is the report's interface); controller-side.
"""
from __future__ import annotations

import math
import statistics
from pathlib import Path

from ansible_collections.llmops.sglang.plugins.module_utils.server_diff import diff_server_facts
from ansible_collections.llmops.sglang.plugins.plugin_utils import adoption
from ansible_collections.llmops.sglang.plugins.plugin_utils import run_dir as layout
from ansible_collections.llmops.sglang.plugins.plugin_utils.run_dir import read_json, record_name
from ansible_collections.llmops.sglang.plugins.plugin_utils.search_stage import trial_dir, trial_name
from ansible_collections.llmops.sglang.plugins.plugin_utils.search_strategy import objective

# The latencies the Pareto fronts plot goodput against, at p99 of the candidate's boundary runs.
FRONT_LATENCIES = {"ttft_ms": "TTFT", "tpot_ms": "TPOT"}
FRONT_PERCENTILE = "p99"


def _boundary_runs(trial_dir: Path, rate: float | None) -> list[dict]:
    """The open-loop runs at a candidate's SLO-meeting rate: the bisection and the confirmation may both have
    probed it, each probe one file."""
    runs: list[dict] = []
    if not rate:
        return runs
    for path in sorted((trial_dir / record_name("probes")).glob("*.json")):
        level = ((read_json(path) or {}).get("levels") or [{}])[0]
        if math.isclose(level.get("request_rate") or 0.0, rate):
            runs += level.get("runs") or []
    return runs


def _median_run_value(runs: list[dict], field: str, percentile: str | None = None) -> float | None:
    values = [run.get(field) for run in runs]
    if percentile is not None:
        values = [value.get(percentile) if isinstance(value, dict) else None for value in values]
    values = [value for value in values if isinstance(value, (int, float))]
    return round(statistics.median(values), 3) if values else None


def _search_candidate(stage_dir: Path, trial: dict, smoothed: dict[int, float]) -> dict:
    """One trial of the search: its outcome, its goodput (the highest rate at which every run met the SLO) and the
    latencies and throughput at that rate."""
    directory = trial_dir(stage_dir, trial["number"])
    result = read_json(directory / record_name("rate_search")) or {}
    complete = trial["state"] == "complete"
    runs = _boundary_runs(directory, trial["value"] if complete else None)
    boundary = None
    if runs:
        boundary = {"runs": len(runs), "agg_tok_s": _median_run_value(runs, "agg_tok_s"),
                    **{f"{metric}_{FRONT_PERCENTILE}": _median_run_value(runs, metric, FRONT_PERCENTILE)
                       for metric in FRONT_LATENCIES}}
    return {"name": trial_name(trial["number"]), "params": trial["params"], "state": trial["state"],
            "reason": trial.get("reason") or result.get("reason"),
            "goodput_rps": trial["value"] if complete else None,
            # its capacity estimate: inside the final bracket (rate_search.py)
            "estimate_rps": objective(trial) if complete else None,
            # what the search ranks it by: the surrogate's posterior mean of the estimates (search_strategy.py)
            "smoothed_rps": smoothed.get(trial["number"], objective(trial)) if complete else None,
            "measured_goodput_rps": result.get("goodput_rps"),
            "probes": (result.get("cost") or {}).get("probes", 0), "gpu_minutes": trial["gpu_minutes"],
            "boundary": boundary}


def pareto_front(points: dict[str, tuple[float, float]]) -> list[str]:
    """The names of the (latency, goodput) points no other point dominates: none has at least the goodput at no more
    latency and is better in one of them."""
    return [name for name, (latency, goodput) in points.items()
            if not any(other_latency <= latency and other_goodput >= goodput
                       and (other_latency < latency or other_goodput > goodput)
                       for other_latency, other_goodput in points.values())]


def _fronts(candidates: list[dict]) -> dict[str, list[str]]:
    fronts = {}
    for metric in FRONT_LATENCIES:
        key = f"{metric}_{FRONT_PERCENTILE}"
        points = {c["name"]: (c["boundary"][key], c["goodput_rps"]) for c in candidates
                  if c["boundary"] and c["boundary"][key] is not None}
        fronts[metric] = pareto_front(points)
    return fronts


def _probe_slo(stage_dir: Path) -> dict | None:
    """The SLO as the bench module recorded it with the probes (targets and percentiles)."""
    for path in sorted((stage_dir / layout.TRIALS).glob(f"*/{record_name('probes')}/*.json")):
        slo = ((read_json(path) or {}).get("workload") or {}).get("slo")
        if slo:
            return slo
    return None


def _verification(run_dir: Path, host: str, decision: dict | None) -> dict | None:
    """The re-verification's test of the adopted candidate, or of the best one when none was adopted."""
    if not decision or not decision.get("comparisons"):
        return None
    name = decision.get("candidate") or next(iter(decision["comparisons"]))
    comparison = decision["comparisons"][name]
    reference = layout.read_record(run_dir, "search", host, measurement=layout.REFERENCE, record="goodput") or {}
    rate = ((reference.get("levels") or [{}])[0]).get("request_rate")
    keys = ("verdict", "change_pct", "p_value", "ci_low_pct", "ci_high_pct", "significant", "evidence", "runs",
            "slo_held_in_every_run", "goodput_rps", "reference_goodput_rps")
    return {"candidate": name, "rate_rps": rate, **{key: comparison.get(key) for key in keys}}


def _side_effects(run_dir: Path, host: str, candidate_dir: Path) -> dict | None:
    """What the server set by itself for the adopted candidate: its facts against those of the configuration adopted
    before the search (the one it was verified against), as the flags stage diffs its trials."""
    before = adoption.latest(run_dir, host, "search")
    facts = read_json(candidate_dir / record_name("facts"))
    if before is None or facts is None or not before.get("facts_file"):
        return None
    reference = read_json(run_dir / before["facts_file"])
    if reference is None:
        return None
    diff = diff_server_facts(reference, facts, before.get("args"),
                             read_json(candidate_dir / record_name("requested_args")))
    return {"against": before["stage"], **diff}


def _recommendation(run_dir: Path, host: str, candidates: list[dict], record: dict) -> dict:
    decision = read_json(layout.path(run_dir, "search", host) / layout.VERIFIED / record_name("decision"))
    chosen = (decision or {}).get("candidate")
    by_name = {c["name"]: c for c in candidates}
    best = max((c for c in candidates if c["goodput_rps"]), key=lambda c: c["smoothed_rps"], default=None)
    summary = (decision or {}).get("summary") or (record.get("search") or {}).get("decision")
    recommendation = {"action": "adopt" if chosen else "keep", "candidate": chosen, "summary": summary,
                      "params": by_name[chosen]["params"] if chosen else None,
                      "goodput_rps": by_name[chosen]["goodput_rps"] if chosen else None,
                      "best_candidate": best["name"] if best else None,
                      "verification": _verification(run_dir, host, decision), "side_effects": None}
    if chosen:
        recommendation["args"] = (layout.read_record(run_dir, "search", host, record="adopted") or {}).get("args")
        recommendation["side_effects"] = _side_effects(run_dir, host, layout.path(run_dir, "search", host,
                                                                                  measurement=chosen))
    return recommendation


def search_summary(run_dir: Path, host: str, record: dict | None) -> dict | None:
    """The search stage of a host in machine form (summary.json ``hosts.<host>.search``), None when it did not run."""
    stage_dir = layout.path(run_dir, "search", host)
    state = read_json(stage_dir / record_name("search"))
    if state is None or not state.get("strategy"):
        return None
    record = record or {}
    # the strategy's ranking (a state before it had none: the estimates)
    smoothed = {entry["number"]: entry["smoothed_rps"] for entry in state["strategy"].get("ranking") or []}
    candidates = [_search_candidate(stage_dir, trial, smoothed) for trial in state["strategy"]["trials"]]
    return {"status": record.get("status", "not run"), "slo": _probe_slo(stage_dir),
            "stop_reason": state["strategy"].get("stop_reason"), "spent": state["strategy"].get("spent"),
            "candidates": candidates, "front": _fronts(candidates),
            "recommendation": {**_recommendation(run_dir, host, candidates, record),
                               # the surrogate's probability that best_candidate is the best measured
                               "best_candidate_confidence": state["strategy"].get("confidence")},
            "gpu_minutes": (record.get("cost") or {}).get("gpu_minutes")}
