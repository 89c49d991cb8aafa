# Copyright (c) llmops.sglang contributors
# Apache License 2.0 (see LICENSE)
"""summary.json of a tuning run (docs/run-directory.md, "summary.json"): per host its measurements in pipeline order,
the status of every stage, every decision, the adopted configuration, the key numbers, the GPU-minutes and the
drift check, read only from the run directory.

Private to the llmops.sglang collection (plugin_utils/run_report.py is the report's interface); controller-side.
"""
from __future__ import annotations

import typing as t
from pathlib import Path

from ansible_collections.llmops.sglang.plugins.module_utils.drift import verdicts_within_drift
from ansible_collections.llmops.sglang.plugins.module_utils.stages import DEFAULT, RECORDED
from ansible_collections.llmops.sglang.plugins.plugin_utils import adoption
from ansible_collections.llmops.sglang.plugins.plugin_utils._report_search import search_summary
from ansible_collections.llmops.sglang.plugins.plugin_utils._report_upgrade import upgrade_summary
from ansible_collections.llmops.sglang.plugins.plugin_utils import run_dir as layout
from ansible_collections.llmops.sglang.plugins.plugin_utils.run_dir import read_json, read_record, record_name

SCHEMA_VERSION = 1
STAGES = RECORDED  # the stages with per-host records (stage.json, adopted.json), in run order
MEASURED_RECORDS = ("sweep", "facts", "comparison", "decision", "side_effects", "requested_args", "cost", "findings",
                    "drift")


def _measurement(stage: str, label: str, directory: Path) -> dict | None:
    documents = {name: read_json(directory / record_name(name)) for name in MEASURED_RECORDS}
    if documents["sweep"] is None and documents["decision"] is None:
        return None
    return {"stage": stage, "label": label, "dir": str(directory), **documents}


def host_measurements(run_dir: Path, host: str) -> list[dict]:
    """Every measured configuration of a host in pipeline order (baseline, each flag trial, MoE, verify)."""
    found = []
    for stage in STAGES:
        # a stage's one measurement is labelled by the stage, its candidates (flag trials, re-verified search
        # candidates) by the stage and their name
        candidates = [(stage if name is None else f"{stage}: {name}", directory)
                      for name, directory in layout.measurement_dirs(run_dir, stage, host)]
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
    return layout.hosts(run_dir, STAGES)


def _stage_status(run_dir: Path, stage: str, host: str) -> dict:
    record = read_record(run_dir, stage, host, record="stage")
    if record:
        return record
    # stage.json is written when the stage ends: a stage folder without it is a stage still running or interrupted
    # (a run directory copied mid-stage), not one that never ran
    return {"status": "unfinished" if layout.path(run_dir, stage, host).is_dir() else "not run"}


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
    estimate = read_record(run_dir, "moe_tune", host, record="estimate")
    if estimate is None:
        return None
    actual = stage_cost or {}
    return {"estimate_gpu_minutes": estimate["gpu_minutes"], "estimate_tuning_gpu_minutes": estimate["tuning_gpu_minutes"],
            "actual_gpu_minutes": actual.get("gpu_minutes"),
            "actual_tuning_gpu_minutes": ((actual.get("parts") or {}).get("tuning") or {}).get("gpu_minutes"),
            "seconds_per_config": estimate.get("seconds_per_config"),
            "measured_seconds_per_config": actual.get("seconds_per_config"), "summary": estimate.get("summary"),
            "engine": _engine_cost(layout.path(run_dir, "moe_tune", host), estimate)}


def _engine_cost(stage_dir: Path, estimate: dict) -> dict | None:
    """engine: llmops - per tuned file (shape and kernel) the controller cache's answer and its key's short hash,
    and the engine's GPU-minutes as estimated (its model, gpu_cost.moe_engine_estimate) and as its runs reported."""
    if estimate.get("engine") != "llmops":
        return None
    tasks = [task for task in (read_json(stage_dir / record_name(name)) for name in ("tune_up", "tune_down")) if task]
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
              if stage in DEFAULT or layout.path(run_dir, stage, host).is_dir()}
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
    run = read_record(run_dir, record="run") or {}
    hosts = {host: host_summary(run_dir, host, measurements) for host, measurements in measured.items()}
    return {
        "schema_version": SCHEMA_VERSION,
        "run_id": run.get("run_id", run_dir.name),
        "created_at": run.get("created_at"),
        "gpu_minutes": round(sum(h["cost"]["gpu_minutes"] for h in hosts.values()), 1),
        "emulated_hosts": [host for host, data in hosts.items() if data["emulated"]],
        "hosts": hosts,
        "upgrade": upgrade_summary(run_dir),
    }
