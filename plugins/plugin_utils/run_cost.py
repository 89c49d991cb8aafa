# Copyright (c) llmops.sglang contributors
# Apache License 2.0 (see LICENSE)
"""The GPU-minutes of one stage of a host, from the records in its stage directory (docs/run-directory.md,
"GPU-minutes"); the arithmetic is module_utils.gpu_cost."""
from __future__ import annotations

import typing as t
from pathlib import Path

from ansible_collections.llmops.sglang.plugins.module_utils import gpu_cost, restart_check
from ansible_collections.llmops.sglang.plugins.plugin_utils import run_dir as layout
from ansible_collections.llmops.sglang.plugins.plugin_utils.run_dir import read_json, record_name

NO_GPU_WORK = "no GPU work: nothing was measured or tuned, the server kept running"


def measurement_dirs(stage_dir: Path) -> list[Path]:
    """The stage's measurements (baseline, MoE and verify measure in the stage directory, flags and the search's
    candidates in trials/, the search's re-verified candidates in verify/)."""
    candidates = [stage_dir] + sorted(path for sub in (layout.TRIALS, layout.VERIFIED)
                                      for path in (stage_dir / sub).glob("*") if path.is_dir())
    return [d for d in candidates if (d / record_name("requested_args")).is_file()]


def _sweeps(directory: Path) -> list[dict]:
    """Every benchmark of a measurement: its sweep (or a failed sweep's part), and the search's open-loop runs (each
    rate probe of a candidate, the goodput at the verification rate of a re-verified one)."""
    sweep = read_json(directory / record_name("sweep")) or (read_json(directory / record_name("failure")) or {}).get("sweep")
    probes = sorted((directory / record_name("probes")).glob("*.json"))
    search = [read_json(path) for path in [*probes, directory / record_name("goodput")]]
    return [s for s in [sweep, *search] if s]


def skipped_dirs(stage_dir: Path) -> list[Path]:
    return [d for d in sorted((stage_dir / layout.TRIALS).glob("*"))
            if (read_json(d / record_name("decision")) or {}).get("action") == "skip"]


def _emulated(directories: t.Iterable[Path]) -> bool:
    return any((read_json(d / record_name("facts")) or {}).get("emulator") for d in directories)


def _benchmark_parts(directory: Path, scales: gpu_cost.Scales, facts: dict | None) -> list[dict]:
    """A measurement's start and every benchmark of it, as cost parts (``facts``: its facts.json)."""
    first, *more = _sweeps(directory) or [None]
    return [gpu_cost.measurement_parts(read_json(directory / record_name("deploy")), facts, first, scales.serving,
                                       scales.startup),
            *(gpu_cost.measurement_parts({"restarted": False}, facts, sweep, scales.serving) for sweep in more)]


def _measurement_cost(directory: Path, emulated: bool, time_scale: dict | None) -> dict:
    """A measurement's GPU-minutes, with its restart check's (a second start of the candidate) when it had one."""
    facts = read_json(directory / record_name("facts"))
    scales = gpu_cost.scales_for(emulated, time_scale)
    check = directory / restart_check.DIRECTORY
    checked = (check / record_name("requested_args")).is_file()
    parts = gpu_cost.add_parts(*_benchmark_parts(directory, scales, facts),
                               *(_benchmark_parts(check, scales, read_json(check / record_name("facts")))
                                 if checked else []))
    gpus, source = gpu_cost.deployment_gpus(facts, read_json(directory / record_name("requested_args")),
                                            read_json(directory / record_name("environment")))
    return gpu_cost.cost_record(parts, gpus, source, emulated, time_scale)


def _skipped_cost(measured: list[float]) -> dict:
    saved = gpu_cost.saved_estimate(measured)
    return {"skipped": True, "gpus": 0, "wall_s": 0.0, "real_s": 0.0, "gpu_minutes": 0.0, "saved_gpu_minutes": saved,
            "saved_from": f"median of the {len([m for m in measured if m])} configurations this run measured"}


def account_stage(stage_dir: Path, wall_s: float | None, time_scale: dict | None) -> tuple[dict, dict[Path, dict]]:
    """(the stage's cost, cost.json content per measurement and skipped trial directory)."""
    run_dir, host = stage_dir.parent.parent, stage_dir.name
    measured = measurement_dirs(stage_dir)
    baseline_dir = layout.path(run_dir, "baseline", host)
    emulated = _emulated(measured + [baseline_dir])
    costs = {d: _measurement_cost(d, emulated, time_scale) for d in measured}
    earlier = [] if baseline_dir in costs else [read_json(baseline_dir / record_name("cost")) or {}]
    spent = [cost["gpu_minutes"] for cost in list(costs.values()) + earlier if "gpu_minutes" in cost]
    costs.update({d: _skipped_cost(spent) for d in skipped_dirs(stage_dir)})
    tuning = gpu_cost.tuning_parts(*(read_json(stage_dir / record_name(name))
                                     for name in ("tune_up", "tune_down", "kernel_benchmark")),
                                   gpu_cost.scales_for(emulated, time_scale).tuning)
    activity = gpu_cost.add_parts(*(cost["parts"] for cost in costs.values() if "parts" in cost), tuning)
    if not activity:
        return {**gpu_cost.cost_record({}, 0, NO_GPU_WORK, False, None), "wall_s": round(wall_s or 0.0, 1)}, costs
    gpus, source = max(((c["gpus"], c["gpus_from"]) for c in costs.values() if c.get("gpus")),
                       default=(None, "unknown: no measurement of this stage names its GPUs"))
    stage = gpu_cost.cost_record(gpu_cost.stage_parts(wall_s, activity), gpus, source, emulated, time_scale)
    if tuning:
        stage["seconds_per_config"] = gpu_cost.measured_seconds_per_config(
            read_json(stage_dir / record_name("tune_up")), gpu_cost.scales_for(emulated, time_scale).tuning)
    return stage, costs
