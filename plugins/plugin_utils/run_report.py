# Copyright (c) llmops.sglang contributors
# Apache License 2.0 (see LICENSE)
"""summary.json, report.md and report.html of a tuning run, built only from its run directory.

Controller-side (plugin_utils): needs matplotlib and markdown, which are controller requirements of the
collection. The run directory layout is documented in docs/run-directory.md.
"""
from __future__ import annotations

import io
import json
import math
import re
import statistics
import textwrap
import typing as t
from pathlib import Path

from ansible_collections.llmops.sglang.plugins.module_utils.drift import verdicts_within_drift
from ansible_collections.llmops.sglang.plugins.module_utils.gpu_cost import PART_LABELS, PARTS
from ansible_collections.llmops.sglang.plugins.module_utils.server_diff import diff_server_facts
from ansible_collections.llmops.sglang.plugins.module_utils.stages import DEFAULT, RECORDED
from ansible_collections.llmops.sglang.plugins.plugin_utils import adoption
from ansible_collections.llmops.sglang.plugins.plugin_utils.run_dir import read_json
from ansible_collections.llmops.sglang.plugins.plugin_utils.search_stage import STATE_FILE, trial_name
from ansible_collections.llmops.sglang.plugins.plugin_utils.search_strategy import objective

try:
    import markdown
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import pyplot
    HAS_REPORT_LIBS = True
except ImportError:  # pragma: no cover - reported by the action plugin
    HAS_REPORT_LIBS = False

SCHEMA_VERSION = 1
STAGES = RECORDED  # the stages with per-host records (stage.json, adopted.json), in run order
MEASURED_FILES = ("sweep.json", "facts.json", "comparison.json", "decision.json", "side_effects.json",
                  "requested_args.json", "cost.json", "findings.json", "drift.json")
KEY_LEVEL_HINT = "the highest concurrency measured in both the baseline and the final sweep"
# Each decision's plain sentence, before its evidence (decisions.decide_trial, restart_check, flag_rules).
DECISION_SENTENCES = {"adopt": "Adopted: it measured better than the configuration before it.",
                      "revert": "Not adopted: the configuration before it stays.",
                      "skip": "Not measured: the preflight found it would change nothing on this host.",
                      "restart_check": "Not adopted yet: a fresh restart must confirm the gain first."}
# The search's trial states as the report names them: an invalid candidate was skipped without a start.
SEARCH_STATES = {"complete": "complete", "infeasible": "infeasible", "invalid": "skipped"}
# The latencies the Pareto fronts plot goodput against, at p99 of the candidate's boundary runs.
FRONT_LATENCIES = {"ttft_ms": "TTFT", "tpot_ms": "TPOT"}
FRONT_PERCENTILE = "p99"
REASON_WIDTH = 160  # a failed start's reason is the server's whole error; summary.json keeps it


def _measurement(stage: str, label: str, directory: Path) -> dict | None:
    documents = {name.removesuffix(".json"): read_json(directory / name) for name in MEASURED_FILES}
    if documents["sweep"] is None and documents["decision"] is None:
        return None
    return {"stage": stage, "label": label, "dir": str(directory), **documents}


def host_measurements(run_dir: Path, host: str) -> list[dict]:
    """Every measured configuration of a host in pipeline order (baseline, each flag trial, MoE, verify)."""
    found = []
    for stage in STAGES:
        stage_dir = run_dir / stage / host
        if stage == "search":
            # the re-verified candidates, each with its decision (search_step verdict)
            verified = sorted(p.name for p in (stage_dir / "verify").glob("*") if p.is_dir() and p.name != "adopted")
            candidates = [(f"search: {name}", stage_dir / "verify" / name) for name in verified]
        elif stage == "flags":
            order = (read_json(stage_dir / "stage.json") or {}).get("trials") or sorted(
                p.name for p in (stage_dir / "trials").glob("*") if p.is_dir())
            candidates = [(f"flags: {name}", stage_dir / "trials" / name) for name in order]
        else:
            candidates = [(stage, stage_dir)]
        found += [m for m in (_measurement(stage, label, d) for label, d in candidates) if m]
    return found


def level_values(sweep: dict | None, field: str, percentile: str | None = None) -> dict[int, float]:
    """Median over runs of a level summary field, by concurrency (levels without it are left out)."""
    values = {}
    for level in (sweep or {}).get("levels", []):
        value = (level.get("summary") or {}).get(field)
        if percentile is not None:
            value = value.get(percentile) if isinstance(value, dict) else None
        if isinstance(value, (int, float)):
            values[level["concurrency"]] = float(value)
    return values


def level_spread(sweep: dict | None, field: str) -> dict[int, tuple[float, float]]:
    """Lowest and highest of a per-run field by concurrency, at levels measured more than once."""
    spread = {}
    for level in (sweep or {}).get("levels", []):
        values = [run[field] for run in level.get("runs", []) if isinstance(run.get(field), (int, float))]
        if len(values) > 1:
            spread[level["concurrency"]] = (float(min(values)), float(max(values)))
    return spread


def _hosts(run_dir: Path) -> list[str]:
    return sorted({p.name for stage in STAGES for p in (run_dir / stage).glob("*") if p.is_dir()})


def _stage_status(run_dir: Path, stage: str, host: str) -> dict:
    record = read_json(run_dir / stage / host / "stage.json")
    if record:
        return record
    # stage.json is written when the stage ends: a stage folder without it is a stage still running or interrupted
    # (a run directory copied mid-stage), not one that never ran
    return {"status": "unfinished" if (run_dir / stage / host).is_dir() else "not run"}


def _key_numbers(measurements: list[dict]) -> dict:
    """Baseline and final throughput by concurrency (JSON keys: strings) and the change at the key level."""
    baseline = next((m for m in measurements if m["stage"] == "baseline" and m["sweep"]), None)
    final = next((m for m in reversed(measurements) if m["stage"] == "verify" and m["sweep"]), None)
    numbers: dict[str, t.Any] = {}
    for name, measurement in (("baseline", baseline), ("final", final)):
        if measurement:
            throughput = level_values(measurement["sweep"], "agg_tok_s")
            numbers[f"{name}_agg_tok_s"] = {str(c): v for c, v in sorted(throughput.items())}
            numbers[f"{name}_max_running_requests"] = (measurement["facts"] or {}).get("max_running_requests")
    common = set(numbers.get("baseline_agg_tok_s", {})) & set(numbers.get("final_agg_tok_s", {}))
    if common:
        key = max(common, key=int)
        before, after = numbers["baseline_agg_tok_s"][key], numbers["final_agg_tok_s"][key]
        numbers["key_concurrency"] = int(key)
        numbers["key_change_pct"] = round((after - before) / before * 100, 1) if before else None
    return numbers


def measured_hosts(run_dir: Path) -> dict[str, list[dict]]:
    """Every host's measurements, read once for the summary, the Markdown and the plots."""
    return {host: host_measurements(run_dir, host) for host in _hosts(run_dir)}


def _trial_cost(measurement: dict) -> dict:
    cost, findings = measurement["cost"] or {}, measurement["findings"] or {}
    return {"stage": measurement["stage"], "label": measurement["label"], "gpu_minutes": cost.get("gpu_minutes"),
            "skipped": bool(cost.get("skipped")), "saved_gpu_minutes": cost.get("saved_gpu_minutes"),
            "forced_by": findings.get("forced_by")}


def _moe_cost(run_dir: Path, host: str, stage_cost: dict | None) -> dict | None:
    """The MoE stage's estimate (made before the server stopped) next to what it cost."""
    estimate = read_json(run_dir / "moe_tune" / host / "estimate.json")
    if estimate is None:
        return None
    actual = stage_cost or {}
    return {"estimate_gpu_minutes": estimate["gpu_minutes"], "estimate_tuning_gpu_minutes": estimate["tuning_gpu_minutes"],
            "actual_gpu_minutes": actual.get("gpu_minutes"),
            "actual_tuning_gpu_minutes": ((actual.get("parts") or {}).get("tuning") or {}).get("gpu_minutes"),
            "seconds_per_config": estimate.get("seconds_per_config"),
            "measured_seconds_per_config": actual.get("seconds_per_config"), "summary": estimate.get("summary"),
            "engine": _engine_cost(run_dir / "moe_tune" / host, estimate)}


def _engine_cost(stage_dir: Path, estimate: dict) -> dict | None:
    """engine: llmops - per tuned file (shape and kernel) the controller cache's answer and its key's short hash,
    and the engine's GPU-minutes as estimated (its model, gpu_cost.moe_engine_estimate) and as its runs reported."""
    if estimate.get("engine") != "llmops":
        return None
    tasks = [task for task in (read_json(stage_dir / "tune_up.json"), read_json(stage_dir / "tune_down.json")) if task]
    shapes = [{"file_name": task.get("file_name"), "cache": (task.get("cache") or {}).get("status"),
               "key_short": (task.get("cache") or {}).get("key_short"),
               "engine_gpu_minutes": (task.get("engine") or {}).get("gpu_minutes")} for task in tasks]
    spent = [shape["engine_gpu_minutes"] for shape in shapes if shape["engine_gpu_minutes"] is not None]
    return {"estimate_gpu_minutes": estimate.get("engine_gpu_minutes"),
            "actual_gpu_minutes": round(sum(spent), 2) if tasks else None, "shapes": shapes}


def host_cost(run_dir: Path, host: str, stages: dict, measurements: list[dict]) -> dict:
    """GPU-minutes of the host: total over its stages, per measured (or skipped) configuration, the MoE estimate."""
    costs = {stage: record["cost"] for stage, record in stages.items() if record.get("cost")}
    trials = [_trial_cost(m) for m in measurements if m["cost"]]
    return {"gpu_minutes": round(sum(c["gpu_minutes"] for c in costs.values()), 1),
            "wall_gpu_minutes": round(sum(c["wall_gpu_minutes"] for c in costs.values()), 1),
            "emulated": any(c.get("emulated") for c in costs.values()),
            "trials": trials, "saved_gpu_minutes": round(sum(t["saved_gpu_minutes"] or 0 for t in trials), 1),
            "moe": _moe_cost(run_dir, host, costs.get("moe_tune"))}


def _drift(measurements: list[dict]) -> dict | None:
    """verify's drift check with the decisions of the run a drift of its size could have flipped."""
    check = next((m["drift"] for m in measurements if m["drift"]), None)
    if check is None:
        return None
    decided = [{"label": m["label"], "action": m["decision"]["action"], "comparison": m["comparison"]}
               for m in measurements if m["decision"] and m["comparison"]]
    fields = ("drifted", "earlier", "same_start", "moved", "drift_pct", "largest_pct", "summary")
    return {key: check[key] for key in fields} | {
        "within_drift": verdicts_within_drift(check, decided)}


def _emulated(measurements: list[dict], cost: dict) -> bool:
    """Whether the host's numbers come from the emulator: its server said so at startup (facts ``emulator``), or its
    GPU-minutes were scaled from an emulated run."""
    return cost["emulated"] or any((m["facts"] or {}).get("emulator") for m in measurements)


def host_summary(run_dir: Path, host: str, measurements: list[dict]) -> dict:
    decisions = [{"stage": m["stage"], "label": m["label"], **{k: m["decision"][k] for k in ("action", "summary", "reasons")}}
                 for m in measurements if m["decision"]]
    # a stage a run does not select by default (the search) is listed when it ran
    stages = {stage: _stage_status(run_dir, stage, host) for stage in STAGES
              if stage in DEFAULT or (run_dir / stage / host).is_dir()}
    cost = host_cost(run_dir, host, stages, measurements)
    return {
        "stages": stages,
        "decisions": decisions,
        "adopted": adoption.latest(run_dir, host, "report"),
        "numbers": _key_numbers(measurements),
        "cost": cost,
        "emulated": _emulated(measurements, cost),
        "drift": _drift(measurements),
        "search": search_summary(run_dir, host, stages.get("search")),
    }


def build_summary(run_dir: Path, measured: dict[str, list[dict]] | None = None) -> dict:
    measured = measured if measured is not None else measured_hosts(run_dir)
    run = read_json(run_dir / "run.json") or {}
    hosts = {host: host_summary(run_dir, host, measurements) for host, measurements in measured.items()}
    return {
        "schema_version": SCHEMA_VERSION,
        "run_id": run.get("run_id", run_dir.name),
        "created_at": run.get("created_at"),
        "gpu_minutes": round(sum(h["cost"]["gpu_minutes"] for h in hosts.values()), 1),
        "emulated_hosts": [host for host, data in hosts.items() if data["emulated"]],
        "hosts": hosts,
    }


# ---- the goodput search ---------------------------------------------------------------------------

def _boundary_runs(trial_dir: Path, rate: float | None) -> list[dict]:
    """The open-loop runs at a candidate's SLO-meeting rate: the bisection and the confirmation may both have
    probed it, each probe one file."""
    runs: list[dict] = []
    if not rate:
        return runs
    for path in sorted((trial_dir / "probes").glob("*.json")):
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
    trial_dir = stage_dir / "trials" / trial_name(trial["number"])
    result = read_json(trial_dir / "rate_search.json") or {}
    complete = trial["state"] == "complete"
    runs = _boundary_runs(trial_dir, trial["value"] if complete else None)
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
    for path in sorted((stage_dir / "trials").glob("*/probes/*.json")):
        slo = ((read_json(path) or {}).get("workload") or {}).get("slo")
        if slo:
            return slo
    return None


def _verification(stage_dir: Path, decision: dict | None) -> dict | None:
    """The re-verification's test of the adopted candidate, or of the best one when none was adopted."""
    if not decision or not decision.get("comparisons"):
        return None
    name = decision.get("candidate") or next(iter(decision["comparisons"]))
    comparison = decision["comparisons"][name]
    reference = read_json(stage_dir / "verify" / "adopted" / "goodput.json") or {}
    rate = ((reference.get("levels") or [{}])[0]).get("request_rate")
    keys = ("verdict", "change_pct", "p_value", "ci_low_pct", "ci_high_pct", "significant", "evidence", "runs",
            "slo_held_in_every_run", "goodput_rps", "reference_goodput_rps")
    return {"candidate": name, "rate_rps": rate, **{key: comparison.get(key) for key in keys}}


def _side_effects(run_dir: Path, host: str, candidate_dir: Path) -> dict | None:
    """What the server set by itself for the adopted candidate: its facts against those of the configuration adopted
    before the search (the one it was verified against), as the flags stage diffs its trials."""
    before = adoption.latest(run_dir, host, "search")
    facts = read_json(candidate_dir / "facts.json")
    if before is None or facts is None or not before.get("facts_file"):
        return None
    reference = read_json(run_dir / before["facts_file"])
    if reference is None:
        return None
    diff = diff_server_facts(reference, facts, before.get("args"), read_json(candidate_dir / "requested_args.json"))
    return {"against": before["stage"], **diff}


def _recommendation(run_dir: Path, host: str, candidates: list[dict], record: dict) -> dict:
    stage_dir = run_dir / "search" / host
    decision = read_json(stage_dir / "verify" / "decision.json")
    chosen = (decision or {}).get("candidate")
    by_name = {c["name"]: c for c in candidates}
    best = max((c for c in candidates if c["goodput_rps"]), key=lambda c: c["smoothed_rps"], default=None)
    summary = (decision or {}).get("summary") or (record.get("search") or {}).get("decision")
    recommendation = {"action": "adopt" if chosen else "keep", "candidate": chosen, "summary": summary,
                      "params": by_name[chosen]["params"] if chosen else None,
                      "goodput_rps": by_name[chosen]["goodput_rps"] if chosen else None,
                      "best_candidate": best["name"] if best else None,
                      "verification": _verification(stage_dir, decision), "side_effects": None}
    if chosen:
        recommendation["args"] = (read_json(stage_dir / "adopted.json") or {}).get("args")
        recommendation["side_effects"] = _side_effects(run_dir, host, stage_dir / "verify" / chosen)
    return recommendation


def search_summary(run_dir: Path, host: str, record: dict | None) -> dict | None:
    """The search stage of a host in machine form (summary.json ``hosts.<host>.search``), None when it did not run."""
    stage_dir = run_dir / "search" / host
    state = read_json(stage_dir / STATE_FILE)
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


# ---- Markdown ------------------------------------------------------------------------------------

def _number(value: float | None) -> str:
    return "-" if value is None else f"{value:,.1f}"


def _table(header: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    return "\n".join(lines + ["| " + " | ".join(row) + " |" for row in rows])


def _throughput_table(measurements: list[dict], field: str) -> str:
    columns = {m["label"]: level_values(m["sweep"], field) for m in measurements if m["sweep"]}
    levels = sorted({c for values in columns.values() for c in values})
    rows = [[str(c)] + [_number(values.get(c)) for values in columns.values()] for c in levels]
    return _table(["C", *columns], rows)


def _outcome_row(host: str, summary: dict) -> list[str]:
    numbers, adopted = summary["numbers"], summary["adopted"] or {}
    key = str(numbers.get("key_concurrency"))
    change = numbers.get("key_change_pct")
    name = f"{host} (emulated)" if summary["emulated"] else host
    return [name, key if key != "None" else "-", _number(numbers.get("baseline_agg_tok_s", {}).get(key)),
            _number(numbers.get("final_agg_tok_s", {}).get(key)), "-" if change is None else f"{change:+.1f}%",
            f"{numbers.get('baseline_max_running_requests', '-')} -> {numbers.get('final_max_running_requests', '-')}",
            adopted.get("stage", "-"), _number(summary["cost"]["gpu_minutes"])]


def _cost_note(cost: dict) -> str:
    if not cost["emulated"]:
        return "GPUs x wall time of each stage that measured or tuned."
    return ("Emulated GPUs: the real-GPU equivalent (the time the server, the benchmark and the tuner timed as their "
            f"work divided by the emulator's time scale; the rest as measured). Wall time here: "
            f"{cost['wall_gpu_minutes']:,.1f} GPU-min.")


def _trial_note(trial: dict) -> str:
    if trial["skipped"]:
        saved = trial["saved_gpu_minutes"]
        return "skipped (preflight)" + (f", saved ~{saved:,.1f} GPU-min" if saved is not None else "")
    return f"measured although the preflight found it ineffective ({trial['forced_by']})" if trial["forced_by"] else ""


def _cost_section(summary: dict) -> list[str]:
    cost = summary["cost"]
    rows = []
    for stage in (name for name in STAGES if name in summary["stages"]):
        record = summary["stages"][stage].get("cost")
        if record:
            parts = record.get("parts") or {}
            rows.append([stage, str(record["gpus"]), _number(record["real_s"] / 60), _number(record["gpu_minutes"])]
                        + [_number((parts.get(name) or {}).get("gpu_minutes")) for name in PARTS])
    if not rows:
        return []  # a run from before the accounting
    header = ["Stage", "GPUs", "Minutes", "GPU-min", *(PART_LABELS[name] for name in PARTS)]
    parts = ["### GPU-minutes", f"Total: **{cost['gpu_minutes']:,.1f} GPU-min**. {_cost_note(cost)}", _table(header, rows)]
    trials = [[t["label"], _number(t["gpu_minutes"]), _trial_note(t)] for t in cost["trials"]]
    if trials:
        parts.append(_table(["Configuration", "GPU-min", "Note"], trials))
    if cost["moe"]:
        parts.append(_moe_cost_text(cost["moe"]))
    return parts


def _drift_section(drift: dict | None) -> list[str]:
    if drift is None:
        return []
    lines = [f"- {entry['label']} ({entry['action']}): {entry['why']}" for entry in drift["within_drift"]]
    if lines:
        lines.insert(0, "Decisions a drift of this size could have flipped (measure them again):")
    return ["### Drift check", drift["summary"] + "."] + (["\n".join(lines)] if lines else [])


def _moe_cost_text(moe: dict) -> str:
    measured, per_config = moe["measured_seconds_per_config"], moe["seconds_per_config"]
    estimated = f", {per_config:g} s per config" if per_config else ""
    measured_text = f", {measured:g} s per config measured" if measured else ""
    text = (f"MoE stage: estimated {_number(moe['estimate_gpu_minutes'])} GPU-min before the server stopped (tuning "
            f"{_number(moe['estimate_tuning_gpu_minutes'])}{estimated}), actual {_number(moe['actual_gpu_minutes'])} "
            f"GPU-min (tuning {_number(moe['actual_tuning_gpu_minutes'])}{measured_text}).")
    return text + (" " + _engine_cost_text(moe["engine"]) if moe.get("engine") else "")


def _engine_cost_text(engine: dict) -> str:
    """``MoE engine: estimated 3.9 engine GPU-min, actual 4.1; <file>: cache miss (key 3f9a1c2b4d5e), ...``."""
    shapes = "; ".join(f"{shape['file_name']}: cache {shape['cache'] or 'not used'}"
                       + (f" (key {shape['key_short']})" if shape["key_short"] else "") for shape in engine["shapes"])
    return (f"MoE engine: estimated {_number(engine['estimate_gpu_minutes'])} engine GPU-min, actual "
            f"{_number(engine['actual_gpu_minutes'])}" + (f"; {shapes}" if shapes else "") + ".")


def _params_text(params: dict) -> str:
    return ", ".join(f"{name}={value}" for name, value in params.items())


def _slo_text(slo: dict | None) -> str:
    if not slo:
        return "not recorded"
    return ", ".join(f"p{spec['percentile']:g} {metric.removesuffix('_ms').upper()} <= {spec['target']:g} ms"
                     for metric, spec in slo.items())


def _percentile_note(slo: dict | None) -> str:
    """Which latencies the SLO judges at another percentile than the fronts' p99, or does not judge at all."""
    notes = []
    for metric, label in FRONT_LATENCIES.items():
        spec = (slo or {}).get(metric)
        if spec is None:
            notes.append(f"{label} is not in the SLO")
        elif spec["percentile"] != 99:
            notes.append(f"the SLO judges {label} at p{spec['percentile']:g}, the plot shows p99")
    return ("Note: " + "; ".join(notes) + ".") if notes else ""


def _candidate_row(candidate: dict, knobs: list[str]) -> list[str]:
    boundary = candidate["boundary"] or {}
    goodput = candidate["goodput_rps"]
    return ([candidate["name"]] + [str(candidate["params"].get(knob, "-")) for knob in knobs]
            + [SEARCH_STATES.get(candidate["state"], candidate["state"]), "-" if goodput is None else f"{goodput:,.2f}"]
            + [_number(boundary.get(f"{metric}_{FRONT_PERCENTILE}")) for metric in FRONT_LATENCIES]
            + [_number(boundary.get("agg_tok_s")), str(candidate["probes"]), _number(candidate["gpu_minutes"]),
               textwrap.shorten(candidate["reason"] or "", REASON_WIDTH, placeholder=" ...")])


def _candidate_table(search: dict) -> str:
    knobs = list(dict.fromkeys(knob for c in search["candidates"] for knob in c["params"]))
    header = (["Candidate", *knobs, "State", "Goodput (req/s)"]
              + [f"{FRONT_PERCENTILE} {label} (ms)" for label in FRONT_LATENCIES.values()]
              + ["Output tok/s", "Probes", "GPU-min", "Reason"])
    return _table(header, [_candidate_row(c, knobs) for c in search["candidates"]])


def _verification_text(verification: dict | None) -> str:
    if verification is None:
        return "Nothing was re-verified."
    median = statistics.median
    held = "the SLO held in every run" if verification["slo_held_in_every_run"] else "the SLO missed in a run"
    return (f"Re-verified on fresh starts at {verification['rate_rps']:g} req/s, {verification['runs']} runs each: "
            f"candidate {verification['candidate']} {median(verification['goodput_rps']):,.2f} req/s of goodput "
            f"(median) against {median(verification['reference_goodput_rps']):,.2f} for the adopted configuration; "
            f"{verification['verdict']} ({verification['evidence']}); {held}.")


def _recommendation_text(search: dict) -> list[str]:
    recommendation = search["recommendation"]
    if recommendation["action"] == "adopt":
        head = (f"**Adopt candidate {recommendation['candidate']}** ({_params_text(recommendation['params'])}): "
                f"goodput {recommendation['goodput_rps']:,.2f} req/s under the SLO.")
    else:
        best = recommendation["best_candidate"]
        head = "**The adopted configuration stays**" + (f" (the best candidate was {best})." if best else ".")
    parts = ["#### Recommendation", head + f" Verdict: {recommendation['summary']}.",
             _verification_text(recommendation["verification"])]
    side_effects = recommendation["side_effects"]
    if side_effects is not None:
        lines = [(f"search: {recommendation['candidate']}", line) for line in side_effects["summary_lines"]]
        parts += [f"#### Side effects (against the configuration adopted by {side_effects['against']})",
                  _side_effect_lines(lines) if lines else
                  "None: the server ran it as requested, with the same capacity and warnings."]
    return parts


def _search_cost_text(search: dict, cost: dict | None, emulated: bool) -> str:
    """The stage's GPU-minutes by part (its cost.json accounting, as every stage's), next to the budget's count."""
    if not cost:
        return ""
    real = " (real-GPU equivalent of the emulated run)" if emulated else ""
    parts = ", ".join(f"{PART_LABELS[name].lower()} {cost['parts'][name]['gpu_minutes']:,.1f}" for name in PARTS
                      if (cost.get("parts") or {}).get(name, {}).get("gpu_minutes"))
    spent = search["spent"] or {}
    return (f"The search cost {cost['gpu_minutes']:,.1f} GPU-min{real} ({parts}); its budget counted "
            f"{spent.get('restarts', 0)} restarts and {spent.get('gpu_minutes') or 0.0:,.1f} GPU-min for the "
            f"candidates, the re-verification not included.")


def _search_section(host: str, search: dict, cost: dict | None, emulated: bool) -> list[str]:
    fronts = "; ".join(f"vs {FRONT_PERCENTILE} {label}: {', '.join(search['front'][metric]) or 'none'}"
                       for metric, label in FRONT_LATENCIES.items())
    parts = ["### Goodput search",
             f"SLO: {_slo_text(search['slo'])}. Goodput: the highest request rate at which the SLO held in every run "
             f"of the rate search; latencies and throughput are the medians of those runs; GPU-min is what the "
             f"search counted against its budget. Stopped: "
             f"{search['stop_reason'] or 'the space was exhausted'}.",
             _candidate_table(search), f"Pareto front (goodput {fronts})."]
    if any(search["front"].values()):
        parts.append(f"![goodput against latency](plots/{host}-search.svg)")
    parts += [note for note in (_percentile_note(search["slo"]),) if note]
    parts += _recommendation_text(search)
    parts += [text for text in (_search_cost_text(search, cost, emulated),) if text]
    return parts


def _side_effect_lines(lines: list[tuple[str, str]]) -> str:
    """What the server changed by itself, one line per (configuration label, change)."""
    return "\n".join(f"- {label}: {line}" for label, line in lines)


def _host_section(run_dir: Path, host: str, summary: dict, measurements: list[dict]) -> str:
    stages = ", ".join(f"{stage} {summary['stages'][stage]['status']}" for stage in STAGES if stage in summary["stages"])
    mark = "; emulated" if summary["emulated"] else ""
    parts = [f"## {host}", f"Stages: {stages}.", "### Decisions"]
    parts.append("\n".join(_decision_item(d) for d in summary["decisions"]) or "No trials.")
    if summary["search"]:
        parts += _search_section(host, summary["search"], summary["stages"]["search"].get("cost"),
                                 summary["cost"]["emulated"])
    parts += _cost_section(summary) + _drift_section(summary["drift"])
    parts += [f"### Aggregate output throughput (tok/s, median of runs{mark})", _throughput_table(measurements, "agg_tok_s"),
              f"### Per-request output throughput (tok/s, median of runs{mark})",
              _throughput_table(measurements, "per_req_tok_s"), f"![throughput and latency](plots/{host}.svg)"]
    side_effects = [(m["label"], line) for m in measurements for line in (m["side_effects"] or {}).get("summary_lines", [])]
    if side_effects:
        parts += ["### What the server changed by itself", _side_effect_lines(side_effects)]
    kernel_table = read_json(run_dir / "moe_tune" / host / "kernel_table.json")
    if kernel_table and kernel_table.get("table"):
        parts += [f"### MoE kernels before and after tuning{' (emulated)' if summary['emulated'] else ''}",
                  kernel_table["table"]]
    adopted = summary["adopted"]
    if adopted:
        parts += [f"### Adopted configuration (from {adopted['stage']})",
                  "```json\n" + json.dumps(adopted.get("args", {}), indent=2, sort_keys=True) + "\n```"]
        if adopted.get("moe_configs"):
            parts.append("Tuned MoE configs: " + ", ".join(f"`{name}`" for name in adopted["moe_configs"]))
    return "\n\n".join(parts)


def _decision_item(decision: dict) -> str:
    """A decision as a plain sentence, with its evidence (the decision's reasons) beneath."""
    failed = decision["action"] == "revert" and decision["reasons"][:1] and decision["reasons"][0].startswith("failed:")
    sentence = "Not adopted: it failed." if failed else DECISION_SENTENCES.get(decision["action"], decision["action"])
    evidence = "".join(f"\n    - {reason}" for reason in decision["reasons"])
    return f"- **{decision['label']}**: {sentence}{evidence}"


def report_title(summary: dict) -> str:
    return f"SGLang tuning run {summary['run_id']}" + (" (emulated)" if summary["emulated_hosts"] else "")


def _emulated_note(summary: dict) -> list[str]:
    hosts = summary["emulated_hosts"]
    if not hosts:
        return []
    return [f"> **Emulated: nothing here was measured on a GPU.** {', '.join(hosts)} ran SGLang's emulator on sandbox "
            "hosts. Every throughput, latency and kernel time for them (marked *emulated*) is the emulator's model of "
            "the GPUs it names, not a measurement."]


def _level_changes(host: str, numbers: dict) -> str | None:
    """Baseline -> final at every concurrency both measured: the outcome table shows only the highest."""
    before, after = numbers.get("baseline_agg_tok_s", {}), numbers.get("final_agg_tok_s", {})
    levels = sorted((set(before) & set(after)), key=int)
    changes = [f"C={c} {(after[c] - before[c]) / before[c] * 100:+.1f}%" for c in levels if before[c]]
    return f"{host}: {', '.join(changes)}" if len(changes) > 1 else None


def render_markdown(run_dir: Path, summary: dict, measured: dict[str, list[dict]]) -> str:
    hosts = summary["hosts"]
    header = ["Host", "C", "Baseline tok/s", "Final tok/s", "Change", "max_running_requests", "Adopted from", "GPU-min"]
    parts = [f"# {report_title(summary)}", *_emulated_note(summary),
             f"Outcome per host at the key concurrency C ({KEY_LEVEL_HINT}):",
             _table(header, [_outcome_row(host, hosts[host]) for host in hosts])]
    changes = [line for line in (_level_changes(host, hosts[host]["numbers"]) for host in hosts) if line]
    if changes:
        parts.append("Baseline -> final at every concurrency measured by both:\n\n"
                     + "\n".join(f"- {line}" for line in changes)
                     + "\n\nEach decision below compares one change with the configuration before it, at every level, "
                     "so its gains (\"best +X% at C=...\") are not these end-to-end changes.")
    if summary["gpu_minutes"]:
        parts.append(f"The run cost {summary['gpu_minutes']:,.1f} GPU-minutes"
                     + (" (real-GPU equivalent of the emulated run)." if any(h["cost"]["emulated"] for h in hosts.values())
                        else "."))
    parts += [_host_section(run_dir, host, hosts[host], measured[host]) for host in hosts]
    return "\n\n".join(parts) + "\n"


def summary_text(summary: dict) -> list[str]:
    """The few lines printed at the end of the playbook."""
    lines = []
    for host, data in summary["hosts"].items():
        numbers = data["numbers"]
        if numbers.get("key_change_pct") is not None:
            key = str(numbers["key_concurrency"])
            lines.append(f"{host}: C={key} {_number(numbers['baseline_agg_tok_s'][key])} -> "
                         f"{_number(numbers['final_agg_tok_s'][key])} tok/s ({numbers['key_change_pct']:+.1f}%"
                         f"{', emulated' if data['emulated'] else ''}), "
                         f"adopted from {(data['adopted'] or {}).get('stage', '-')}")
        lines += [f"{host}: {d['label']}: {d['summary']}" for d in data["decisions"]]
        if data["drift"]:
            flippable = len(data["drift"]["within_drift"])
            lines.append(f"{host}: {data['drift']['summary']}"
                         + (f" ({flippable} decision(s) within the drift: see the report)" if flippable else ""))
        lines += _cost_lines(host, data)
        lines += _search_lines(host, data["search"])
    return lines


def _search_lines(host: str, search: dict | None) -> list[str]:
    """The search's recommendation with its goodput and its evidence, and what the search cost."""
    if search is None:
        return []
    recommendation, slo = search["recommendation"], _slo_text(search["slo"])
    name = recommendation["candidate"] or recommendation["best_candidate"]
    best = next((c for c in search["candidates"] if c["name"] == name), None)
    goodput = (f"candidate {name} ({_params_text(best['params'])}): goodput {best['goodput_rps']:,.2f} req/s under the "
               f"SLO ({slo})") if best else f"no candidate met the SLO ({slo})"
    if recommendation["action"] == "adopt":
        line = f"{host}: search recommends {goodput}"
    elif best:
        line = f"{host}: search recommends keeping the adopted configuration; best {goodput}"
    else:
        line = f"{host}: search recommends keeping the adopted configuration: {goodput}"
    verification = recommendation["verification"]
    if verification:
        line += (f"; re-verified at {verification['rate_rps']:g} req/s: "
                 f"{statistics.median(verification['goodput_rps']):,.2f} vs "
                 f"{statistics.median(verification['reference_goodput_rps']):,.2f} req/s of goodput for the adopted "
                 f"configuration, {verification['verdict']}")
    cost = search["gpu_minutes"]
    return [line + ("" if cost is None else f"; the search cost {cost:,.1f} GPU-min")]


def search_lines(summary: dict) -> list[str]:
    """Every host's search recommendation (make demo-slo prints them from summary.json)."""
    return [line for host, data in summary["hosts"].items() for line in _search_lines(host, data.get("search"))]


def _cost_lines(host: str, data: dict) -> list[str]:
    cost = data["cost"]
    costs = {stage: data["stages"][stage].get("cost") for stage in STAGES  # summary.json sorts its keys
             if stage in data["stages"]}
    stages = ", ".join(f"{stage} {cost['gpu_minutes']:,.1f}" for stage, cost in costs.items() if cost)
    if not stages:
        return []
    real = " (real-GPU equivalent of the emulated run)" if cost["emulated"] else ""
    lines = [f"{host}: GPU-minutes{real}: {stages}; total {cost['gpu_minutes']:,.1f}"]
    lines += [f"{host}: {t['label']}: {_trial_note(t)}" for t in cost["trials"] if _trial_note(t)]
    if cost["moe"]:
        lines.append(f"{host}: {_moe_cost_text(cost['moe'])}")
    return lines


# ---- plots and HTML ------------------------------------------------------------------------------

def render_plot(measurements: list[dict], host: str) -> str:
    """One SVG with throughput, per-request throughput and TTFT p50/p99 against concurrency."""
    pyplot.rcParams["svg.hashsalt"] = "llmops-sglang"  # stable element ids: same run dir, same bytes
    figure, axes = pyplot.subplots(1, 3, figsize=(15, 4.2))
    panels = (("agg_tok_s", None, "Aggregate output tok/s (band: runs' range)"),
              ("per_req_tok_s", None, "Per-request output tok/s (band: runs' range)"),
              ("ttft_ms", "p50", "TTFT ms (p50 solid, p99 dashed)"))
    for axis, (field, percentile, title) in zip(axes, panels):
        for index, measurement in enumerate(m for m in measurements if m["sweep"]):
            color = f"C{index % 10}"
            values = level_values(measurement["sweep"], field, percentile)
            if values:
                levels = sorted(values)
                axis.plot(levels, [values[c] for c in levels], marker="o", color=color, label=measurement["label"])
            spread = level_spread(measurement["sweep"], field) if percentile is None else {}
            if spread:
                levels = sorted(spread)
                axis.fill_between(levels, [spread[c][0] for c in levels], [spread[c][1] for c in levels], color=color,
                                  alpha=0.15, linewidth=0)
            if field == "ttft_ms":
                tail = level_values(measurement["sweep"], field, "p99")
                levels = sorted(tail)
                axis.plot(levels, [tail[c] for c in levels], linestyle="--", color=color)
        axis.set_xscale("log", base=2)
        levels = sorted({c for m in measurements if m["sweep"] for c in level_values(m["sweep"], "agg_tok_s")})
        axis.set_xticks(levels, [str(c) for c in levels])
        axis.minorticks_off()
        axis.set_xlabel("concurrency")
        axis.set_title(title)
        axis.grid(True, alpha=0.3)
    axes[0].legend(fontsize="small")
    figure.suptitle(host)
    figure.tight_layout()
    return _svg(figure)


def render_search_plot(search: dict, host: str) -> str:
    """One SVG with the candidates' goodput against p99 TTFT and against p99 TPOT at their SLO-meeting rate, the
    Pareto front of each highlighted, the SLO's target where it judges that latency at p99."""
    pyplot.rcParams["svg.hashsalt"] = "llmops-sglang"
    figure, axes = pyplot.subplots(1, len(FRONT_LATENCIES), figsize=(11, 4.2))
    for axis, metric in zip(axes, FRONT_LATENCIES):
        _front_panel(axis, search, metric)
    adopted = search["recommendation"]["candidate"]
    figure.suptitle(f"{host}: goodput search" + (f" (star: the adopted candidate {adopted})" if adopted else ""))
    figure.tight_layout()
    return _svg(figure)


def _front_panel(axis: t.Any, search: dict, metric: str) -> None:
    key, front, label = f"{metric}_{FRONT_PERCENTILE}", search["front"][metric], FRONT_LATENCIES[metric]
    measured = [c for c in search["candidates"] if c["boundary"] and c["boundary"][key] is not None]
    for candidate in measured:
        on_front = candidate["name"] in front
        point = (candidate["boundary"][key], candidate["goodput_rps"])
        axis.scatter(*point, s=80 if on_front else 40, color="C3" if on_front else "0.6", zorder=3,
                     marker="*" if candidate["name"] == search["recommendation"]["candidate"] else "o")
        axis.annotate(candidate["name"], point, textcoords="offset points", xytext=(5, 5), fontsize="small")
    points = sorted((c["boundary"][key], c["goodput_rps"]) for c in measured if c["name"] in front)
    if points:
        axis.plot(*zip(*points), color="C3", drawstyle="steps-post", label="Pareto front")
    spec = (search["slo"] or {}).get(metric)
    if spec and spec["percentile"] == 99:
        axis.axvline(spec["target"], color="0.3", linestyle="--", label=f"SLO p99 <= {spec['target']:g} ms")
    axis.set_xlim(left=0)  # from zero: the gaps between candidates at their true size
    axis.set_ylim(0, max((c["goodput_rps"] for c in measured), default=1.0) * 1.15)  # room for the labels on top
    axis.set_xlabel(f"{FRONT_PERCENTILE} {label} ms at the SLO-meeting rate")
    axis.set_ylabel("goodput (req/s)")
    axis.set_title(f"Goodput vs {FRONT_PERCENTILE} {label}")
    axis.grid(True, alpha=0.3)
    axis.legend(fontsize="small")


def _svg(figure: t.Any) -> str:
    buffer = io.StringIO()
    figure.savefig(buffer, format="svg", metadata={"Date": None})
    pyplot.close(figure)
    return buffer.getvalue()


HTML_PAGE = """<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>{title}</title>
<style>body{{font-family:sans-serif;max-width:1200px;margin:2em auto;line-height:1.4}}
table{{border-collapse:collapse;margin:1em 0}}td,th{{border:1px solid #bbb;padding:3px 8px;text-align:right}}
td:first-child,th:first-child{{text-align:left}}pre{{background:#f5f5f5;padding:1em;overflow:auto}}
table{{display:block;max-width:100%;overflow-x:auto}}p,li,td,code{{overflow-wrap:anywhere}}
blockquote{{border-left:6px solid #c60;background:#fff4e5;margin:1em 0;padding:.5em 1em}}
figure{{margin:0}}figure svg{{width:100%;height:auto}}</style></head>
<body>
{body}
</body></html>
"""


def render_html(markdown_text: str, plots: dict[str, str], title: str) -> str:
    """report.md as HTML with each plot's SVG (``plots``: by file name under plots/, without .svg) inlined where the
    Markdown links it (no external file)."""
    body = markdown.markdown(markdown_text, extensions=["tables", "fenced_code"])
    for name, svg in plots.items():
        figure = f"<figure>{svg[svg.index('<svg'):]}</figure>"
        image = re.compile(rf'(<p>)?<img alt="[^"]*" src="plots/{re.escape(name)}\.svg" />(?(1)</p>)')
        body = image.sub(lambda _match, figure=figure: figure, body)
    return HTML_PAGE.format(title=title, body=body)


def report_files(run_dir: Path) -> dict[str, str]:
    """Relative path -> content of everything the report consists of."""
    measured = measured_hosts(run_dir)
    summary = build_summary(run_dir, measured)
    markdown_text = render_markdown(run_dir, summary, measured)
    plots = {host: render_plot(measured[host], host + (" (emulated)" if data["emulated"] else ""))
             for host, data in summary["hosts"].items()}
    plots.update({f"{host}-search": render_search_plot(data["search"], host) for host, data in summary["hosts"].items()
                  if data["search"] and any(data["search"]["front"].values())})
    files = {"summary.json": json.dumps(summary, indent=2, sort_keys=True) + "\n", "report.md": markdown_text,
             "report.html": render_html(markdown_text, plots, report_title(summary))}
    files.update({f"plots/{host}.svg": svg for host, svg in plots.items()})
    return files
