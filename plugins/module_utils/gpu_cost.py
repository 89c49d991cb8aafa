# Copyright (c) llmops.sglang contributors
# Apache License 2.0 (see LICENSE)
"""GPU-minutes of a tuning run, from the run's own records (docs/run-directory.md, "GPU-minutes").

Note that this module util is private to the llmops.sglang collection; do not use it from other collections.

A stage that measures or tunes holds the deployment's GPUs from its start to its end (the server is under test, or
stopped for the tuner, instead of serving), so it costs GPUs x its wall time. Its parts say where the time went:
server starts (restart until ready), the warm-up and the timed runs of each sweep, MoE tuning, the kernel
benchmarks, and ``other`` (facts, comparisons, installs, restores between them).

A server that reports itself as an emulator (``facts.emulator``, from its startup log) runs real-GPU durations x a
time scale: one for serving, one for its tuner and one for its starts (``Scales``). With the scales given, ``real_s``
is what real GPUs would have spent: the time a GPU program timed as its own work (the server's log from its first
line to ready, the benchmark's sweep, the tuner's ``Tuning took``) is divided by its scale, the rest (process
start-up, the controller's tasks) is kept as measured, since the emulator does not speed it up. On real GPUs
``real_s`` is the wall time.
"""
from __future__ import annotations

import math
import statistics
import typing as t
from datetime import datetime

from ansible_collections.llmops.sglang.plugins.module_utils.moe_search_space import down_candidate_count

PARTS = ("server_start", "warmup", "benchmark", "tuning", "kernel_benchmark", "other")
MEASUREMENT_PARTS = ("server_start", "warmup", "benchmark")
# Wall seconds of SGLang's main tuner per config and batch size: 1920 configs at one batch size took 2643.9 s on an
# H100 (Mixtral, TP2; sgl-project/sglang#29484). Real H200 measurements (docs/run-directory.md, "MoE estimate")
# agree that the Triton compile of each config, not its timing, is what costs: 0.37-0.58 s serial compile, 0.01 s
# timing per config and batch size.
SECONDS_PER_CONFIG = 1.4
SECONDS_PER_CONFIG_SOURCE = "sgl-project/sglang#29484: 1920 configs at one batch size in 2643.9 s on an H100"


def seconds_between(start: str | None, end: str | None) -> float | None:
    """Seconds from one ISO 8601 time to another (``Z`` or an offset); None when either is missing."""
    if not start or not end:
        return None
    return (_parse_time(end) - _parse_time(start)).total_seconds()


def _parse_time(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))  # Python < 3.11 reads no "Z"


def _size(args: dict, name: str) -> int:
    value = args.get(name)
    return int(value) if isinstance(value, (int, float)) and value >= 1 else 1


def deployment_gpus(facts: dict | None, requested_args: dict | None, environment: dict | None) -> tuple[int | None, str]:
    """GPUs the server of one host uses, and where that comes from.

    tp x pp x dp replicas divided by nnodes, from the args the server reported (facts) or else those requested;
    CUDA_VISIBLE_DEVICES when neither is known. Attention DP runs inside the TP group (0.5.22
    sglang/srt/runtime_context.py line 73: ``attn_tp_size = tp_size // attn_dp_size // attn_cp_size``), so it adds
    no GPUs: ``dp_size`` counts replicas, except in the pre-0.5.22 spelling ``--dp-size N --enable-dp-attention``
    (no ``attn_dp_size`` wider than 1), where it counts the attention-DP groups and 0.5.22+ read it as
    ``attn_dp_size=N, dp_size=1`` (arg_groups/parallel_hook.py lines 40-62). A 0.5.22+ dump reports
    ``enable_dp_attention`` true beside ``attn_dp_size`` (server_args.py line 331) while ``dp_size`` holds replicas.
    """
    for args, source in (((facts or {}).get("server_args"), "facts"), (requested_args, "requested args")):
        if args:
            dp = 1 if args.get("enable_dp_attention") and _size(args, "attn_dp_size") == 1 else _size(args, "dp_size")
            gpus = _size(args, "tp_size") * _size(args, "pp_size") * dp
            gpus = max(gpus // _size(args, "nnodes"), 1)
            return gpus, f"tp_size x pp_size x dp_size / nnodes = {gpus} ({source})"
    visible = str((environment or {}).get("CUDA_VISIBLE_DEVICES") or "")
    devices = [device for device in visible.split(",") if device.strip()]
    if devices:
        return len(devices), f"CUDA_VISIBLE_DEVICES lists {len(devices)}"
    return None, "unknown (no facts, args or CUDA_VISIBLE_DEVICES)"


def part(wall_s: float | None, work_s: float | None = 0.0, scale: float | None = None) -> dict[str, float]:
    """One part: its wall seconds and the real-GPU seconds (``work_s`` of the wall divided by ``scale``)."""
    wall = max(float(wall_s or 0.0), 0.0)
    work = min(max(float(work_s or 0.0), 0.0), wall)
    real = wall - work + work / scale if scale else wall
    return {"wall_s": round(wall, 1), "real_s": round(real, 1)}


def add_parts(*part_maps: dict[str, dict]) -> dict[str, dict]:
    total: dict[str, dict] = {}
    for parts in part_maps:
        for name, value in parts.items():
            entry = total.setdefault(name, {"wall_s": 0.0, "real_s": 0.0})
            entry["wall_s"] = round(entry["wall_s"] + value["wall_s"], 1)
            entry["real_s"] = round(entry["real_s"] + value["real_s"], 1)
    return total


def _sweep_seconds(sweep: dict | None) -> tuple[float, float]:
    """(wall, timed) seconds of a sweep: start to end, and the sum of its timed runs (the rest is warm-up)."""
    if not sweep:
        return 0.0, 0.0
    levels = list(sweep.get("levels") or []) + ([sweep["failed_level"]] if sweep.get("failed_level") else [])
    timed = sum(run.get("wall_s") or 0.0 for level in levels for run in level.get("runs") or [])
    wall = seconds_between(sweep.get("started_at"), sweep.get("finished_at"))
    return (max(wall, timed) if wall is not None else timed), timed


def measurement_parts(deploy: dict | None, facts: dict | None, sweep: dict | None,
                      scale: float | None = None, startup_scale: float | None = None) -> dict[str, dict]:
    """Server start, warm-up and benchmark of one measurement (a deploy that did not restart started nothing).

    ``deploy``: the server module's ``{restarted, ready_seconds}`` (deploy.json); the server's own log (facts
    ``timings.total``: first line to ready) is the part of the start ``startup_scale`` (default ``scale``) applies to.
    """
    log_s = ((facts or {}).get("timings") or {}).get("total")
    if deploy is None:  # recorded before deploy.json existed: the log is all there is
        start_s = log_s
    else:
        start_s = deploy.get("ready_seconds") if deploy.get("restarted") else 0.0
    wall, timed = _sweep_seconds(sweep)
    return {"server_start": part(start_s, log_s, startup_scale or scale), "warmup": part(wall - timed, wall - timed, scale),
            "benchmark": part(timed, timed, scale)}


def tuning_parts(tune_up: dict | None, tune_down: dict | None, kernel_benchmark: dict | None,
                 scale: float | None = None) -> dict[str, dict]:
    """MoE tuning (up and down kernels) and the kernel benchmarks before and after it.

    The up tuner times its own work (``Tuning took``: tuner_seconds); the down screener prints no time, so its
    processes' wall time is its work (for an emulator an upper bound: its start-up is scaled too). The kernel
    benchmarks time one config per batch size, their GPU work is negligible next to their start-up: kept as measured.
    """
    tuning = [part(run.get("duration_s"), run.get("tuner_seconds") or run.get("process_seconds"), scale)
              for run in (tune_up, tune_down) if run]
    benchmarks = [part(seconds) for seconds in (kernel_benchmark or {}).values()]
    parts = {}
    if tuning:
        parts["tuning"] = add_parts(*({"tuning": p} for p in tuning))["tuning"]
    if benchmarks:
        parts["kernel_benchmark"] = add_parts(*({"kernel_benchmark": p} for p in benchmarks))["kernel_benchmark"]
    return parts


def cost_record(parts: dict[str, dict], gpus: int | None, gpus_from: str, emulated: bool,
                time_scale: dict | None) -> dict[str, t.Any]:
    """GPU-minutes of ``parts`` on ``gpus``: ``gpu_minutes`` (real GPUs) and ``wall_gpu_minutes`` (as measured)."""
    wall = round(sum(p["wall_s"] for p in parts.values()), 1)
    real = round(sum(p["real_s"] for p in parts.values()), 1)
    count = gpus or 0
    record = {"gpus": count, "gpus_from": gpus_from, "wall_s": wall, "real_s": real,
              "gpu_minutes": round(count * real / 60, 1), "wall_gpu_minutes": round(count * wall / 60, 1),
              "parts": {name: {**value, "gpu_minutes": round(count * value["real_s"] / 60, 1)}
                        for name, value in parts.items()},
              "emulated": emulated}
    if emulated:
        record["time_scale"] = time_scale
    return record


def stage_parts(wall_s: float | None, activity: dict[str, dict]) -> dict[str, dict]:
    """The stage's parts: its activities plus ``other``, the rest of its wall time (kept as measured)."""
    busy = sum(p["wall_s"] for p in activity.values())
    return {**activity, "other": part(max((wall_s or 0.0) - busy, 0.0))}


class Scales(t.NamedTuple):
    """Wall seconds per real-GPU second of an emulated server's serving, its tuner and its starts."""

    serving: float | None = None
    tuning: float | None = None
    startup: float | None = None


def scales_for(emulated: bool, time_scale: dict | None) -> Scales:
    """The scales to apply: only to an emulated server, only the ones given (tuning and startup default to serving)."""
    if not emulated or not time_scale:
        return Scales()
    serving = time_scale.get("serving")
    return Scales(serving, time_scale.get("tuning") or serving, time_scale.get("startup") or serving)


def saved_estimate(measured_gpu_minutes: list[float]) -> float | None:
    """What a skipped candidate saved: the median cost of the configurations this run measured."""
    values = [value for value in measured_gpu_minutes if value]
    return round(statistics.median(values), 1) if values else None


# ---- MoE stage estimate ---------------------------------------------------------------------------


def moe_stage_estimate(plan: dict, *, workers: int | None = None, down: bool = False, block_shape: list | None = None,
                       seconds_per_config: float | None = None, reference_cost: dict | None = None,
                       facts: dict | None = None, requested_args: dict | None = None, environment: dict | None = None,
                       engine: str = "sglang", engine_gpus: int | None = None) -> dict[str, t.Any]:
    """The MoE stage's estimate from the up tuner's ``plan`` (llmops.sglang.moe_tune in check mode): the engine's
    model (:func:`moe_engine_estimate`) or SGLang's tuner's (:func:`moe_estimate`), on the GPUs of the deployment
    (``facts``, else ``requested_args``, else the ``environment``), with a measurement like ``reference_cost``'s (the
    cost.json of a configuration measured in this run). ValueError when ``plan`` is not such a plan."""
    if not isinstance(plan, dict) or "search_space" not in plan or "batch_sizes" not in plan:
        raise ValueError("the input must be the moe_tune result of the up kernel's plan (check mode), with search_space "
                         "and batch_sizes")
    gpus = deployment_gpus(facts, requested_args, environment)[0] or 0
    measurement = (reference_cost or {}).get("real_s")
    if engine == "llmops":
        return moe_engine_estimate(plan, gpus=gpus, down=bool(down), measurement_s=measurement,
                                   engine_gpus=int(engine_gpus) if engine_gpus else None)
    return moe_estimate(plan, gpus=gpus, workers=int(workers or plan.get("chunk_size") or 1),
                        down_candidates=down_candidate_count(block_shape) if down else None,
                        seconds_per_config=float(seconds_per_config or SECONDS_PER_CONFIG), measurement_s=measurement)


def moe_estimate(plan: dict, *, gpus: int, workers: int, down_candidates: int | None,
                 seconds_per_config: float = SECONDS_PER_CONFIG, measurement_s: float | None = None) -> dict[str, t.Any]:
    """GPU-minutes the MoE stage will cost, from the up tuner's plan (llmops.sglang.moe_tune in check mode).

    Up: the tuner hands one batch size still to tune (the plan's chunks) to each of ``workers`` GPUs at a time, so it
    takes ceil(batch sizes / workers) rounds of (configs in the search space x ``seconds_per_config``); a tuner that
    takes one ``--batch-size`` per run keeps one GPU busy, a round per batch size. Down (``down_candidates`` configs
    per batch size, None = no down tuning): ``tune_down_moe.py`` uses one GPU, so moe_tune runs one process per GPU
    of a chunk (min(chunk size, ``gpus``) at once, :func:`_down_processes`), ceil(batch sizes / processes) rounds of
    (``down_candidates`` x ``seconds_per_config``). ``measurement_s``: the restart and sweep of the tuned configs,
    estimated by a configuration measured earlier in this run. The deployment's ``gpus`` are held for all of it.
    """
    configs = plan["search_space"]["kept"]
    todo = sum(len(chunk) for chunk in plan.get("chunks") or [])
    one_per_run = (plan.get("tuner_cli") or {}).get("batch_sizes_per_run") == "one"
    rounds = todo if one_per_run else math.ceil(todo / max(workers, 1))
    up_s = rounds * configs * seconds_per_config
    processes = _down_processes(plan, gpus, one_per_run)
    down_rounds = math.ceil(len(plan["batch_sizes"]) / processes) if down_candidates else 0
    down_s = down_rounds * (down_candidates or 0) * seconds_per_config
    parts = {"tuning_up": up_s, "tuning_down": down_s, "measurement": measurement_s or 0.0}
    seconds = sum(parts.values())
    engine_s = seconds - parts["measurement"]
    estimate = {"gpus": gpus, "workers": workers, "batch_sizes": len(plan["batch_sizes"]),
                "resumed": plan.get("resumed", 0), "rounds": rounds, "search_space": plan["search_space"],
                "down_candidates": down_candidates, "down_processes": processes, "down_rounds": down_rounds,
                "seconds_per_config": seconds_per_config,
                "parts_s": {name: round(value, 1) for name, value in parts.items()}, "real_s": round(seconds, 1),
                "gpu_minutes": round(gpus * seconds / 60, 1),
                "tuning_gpu_minutes": round(gpus * (up_s + down_s) / 60, 1)}
    return {**estimate, "summary": _estimate_text(estimate, configs)}


def _down_processes(plan: dict, gpus: int, one_per_run: bool) -> int:
    """``tune_down_moe.py`` processes moe_tune runs at once: one per device of a chunk, min(chunk size, ``gpus``).
    The down task's chunk size is the up plan's (both default to the host's devices), except where the up tuner
    takes one ``--batch-size`` per run (``one_per_run``): its chunks are of one, the down screener's are not."""
    chunk_size = (None if one_per_run else plan.get("chunk_size")) or gpus
    return max(min(chunk_size, gpus or chunk_size), 1)


def _estimate_text(estimate: dict, configs: int) -> str:
    down = (f" + down {estimate['down_rounds']} rounds ({estimate['batch_sizes']} batch sizes on "
            f"{estimate['down_processes']} GPUs) x {estimate['down_candidates']} configs"
            if estimate["down_candidates"] else "")
    measured = " + one measurement" if estimate["parts_s"]["measurement"] else ""
    return (f"estimate: {estimate['gpu_minutes']:.1f} GPU-min on {estimate['gpus']} GPUs: tuning "
            f"{estimate['tuning_gpu_minutes']:.1f} GPU-min (up {estimate['rounds']} rounds x {configs} configs "
            f"on {estimate['workers']} GPUs{down}, {estimate['seconds_per_config']:g} s per config){measured}")


# The engine's cost (engine: llmops, docs/moe-engine.md "What it costs"), from its run on an NVIDIA H100 80GB HBM3
# (benchmarks/results/moe_engine_gpu.json, 2026-12-07: Qwen3.5-122B-A10B at TP4, 624 configs x SGLang's 18 batch sizes
# x up and down, staged compiles, 15 compile workers, one GPU): 33.5 s until the first compile (the fork server's
# preload, 10.8 s, initialised CUDA on that host, so the workers were spawned after it, each importing torch and the
# release), 1,129 compiles that built 1,123 Triton specialisations ("variants") in 456.3 compile core-seconds, 83.3 s
# wall in all. Compiles are spread over the compile workers; the rest of the wall time is timing, per (config, batch
# size, kernel) on one GPU (the leaders are re-timed, so it includes the refinement).
ENGINE_START_S = 33.5
ENGINE_VARIANTS_PER_CONFIG = 1123 / (624 * 2)            # 0.90 per config and kernel: staged, not 3 classes each
ENGINE_COMPILE_CORE_S_PER_VARIANT = 456.3 / 1123         # 0.406 core-seconds
ENGINE_TIMING_S_PER_POINT = (83.3 - ENGINE_START_S - 456.3 / 15) / (624 * 18 * 2)  # 0.86 ms per (config, M, kernel)
ENGINE_COST_SOURCE = ("benchmarks/results/moe_engine_gpu.json, NVIDIA H100 80GB HBM3: 33.5 s start, 1,123 variants, "
                      "456.3 compile core-s, 83.3 s wall on 15 workers for 624 configs x 18 batch sizes x up+down")


def moe_engine_estimate(plan: dict, *, gpus: int, down: bool, measurement_s: float | None = None,
                        engine_gpus: int | None = None) -> dict[str, t.Any]:
    """GPU-minutes the MoE stage will cost with the engine (``engine: llmops``), from the up task's plan in check mode:
    one engine run tunes both kernels (``down``) over the batch sizes still to tune: it starts its processes (S),
    compiles the variants its stages build on the plan's ``compile_workers`` (C = configs x kernels x variants per
    config x core-s / workers) and times every (config, M, kernel) on the plan's GPUs (T = configs x M x kernels x
    s per point / GPUs). A hit in the
    controller's cache (the plan's ``cache``) costs no engine time. The deployment's ``gpus`` are held for all of it.
    ``engine_gpus``: the GPUs it times on where that is not the plan's ``devices`` - a Ray cluster's, whose nodes each
    tune a share of the batch sizes, each compiling on its own CPUs (the compile part stays one node's: each node
    compiles the classes of its share, about what one host compiles for all of them, staged).
    """
    configs = plan["search_space"]["kept"]
    todo = sum(len(chunk) for chunk in plan.get("chunks") or [])
    cache = (plan.get("cache") or {}).get("status")
    kernels = 2 if down else 1
    workers = max(plan.get("compile_workers") or 1, 1)
    engine_gpus = max(engine_gpus or len(plan.get("devices") or []), 1)
    runs = bool(todo) and cache != "hit"
    variants = configs * kernels * ENGINE_VARIANTS_PER_CONFIG
    compile_s = variants * ENGINE_COMPILE_CORE_S_PER_VARIANT / workers if runs else 0.0
    timing_s = configs * todo * kernels * ENGINE_TIMING_S_PER_POINT / engine_gpus if runs else 0.0
    parts = {"engine_start": ENGINE_START_S if runs else 0.0, "engine_compile": compile_s, "engine_timing": timing_s,
             "measurement": measurement_s or 0.0}
    seconds = sum(parts.values())
    engine_s = seconds - parts["measurement"]
    estimate = {"engine": "llmops", "gpus": gpus, "batch_sizes": len(plan["batch_sizes"]),
                "resumed": plan.get("resumed", 0), "search_space": plan["search_space"], "kernels": kernels,
                "compile_workers": workers, "engine_gpus": engine_gpus, "cache": cache,
                "model": {"start_s": ENGINE_START_S, "variants_per_config": round(ENGINE_VARIANTS_PER_CONFIG, 3),
                          "compile_core_s_per_variant": round(ENGINE_COMPILE_CORE_S_PER_VARIANT, 3),
                          "timing_s_per_point": round(ENGINE_TIMING_S_PER_POINT, 5), "source": ENGINE_COST_SOURCE},
                "parts_s": {name: round(value, 1) for name, value in parts.items()}, "real_s": round(seconds, 1),
                "engine_s": round(engine_s, 1),
                "engine_gpu_minutes": round(engine_gpus * engine_s / 60, 2),
                "gpu_minutes": round(gpus * seconds / 60, 1),
                "tuning_gpu_minutes": round(gpus * engine_s / 60, 1)}
    return {**estimate, "summary": _engine_estimate_text(estimate, configs, todo)}


def _engine_estimate_text(estimate: dict, configs: int, todo: int) -> str:
    if estimate["cache"] == "hit":
        work = "the engine's result is in the controller's cache (no engine run)"
    elif not todo:
        work = "every batch size is checkpointed (no engine run)"
    else:
        work = (f"engine {estimate['engine_s']:.0f} s: start {estimate['parts_s']['engine_start']:.0f} s + compile "
                f"{configs} configs x {estimate['kernels']} kernels on "
                f"{estimate['compile_workers']} workers {estimate['parts_s']['engine_compile']:.0f} s + time {todo} "
                f"batch sizes on {estimate['engine_gpus']} GPUs {estimate['parts_s']['engine_timing']:.0f} s, "
                f"{estimate['engine_gpu_minutes']:.1f} engine GPU-min")
    measured = " + one measurement" if estimate["parts_s"]["measurement"] else ""
    return (f"estimate: {estimate['gpu_minutes']:.1f} GPU-min on {estimate['gpus']} GPUs: tuning "
            f"{estimate['tuning_gpu_minutes']:.1f} GPU-min ({work}){measured}")


def measured_seconds_per_config(tune_up: dict | None, scale: float | None = None) -> float | None:
    """The up tuner's real seconds per config and batch size in this run (its own ``Tuning took`` over the rounds it
    ran), to compare with the estimate's and to set ``seconds_per_config`` next time."""
    work = (tune_up or {}).get("tuner_seconds")
    if not work or (tune_up or {}).get("cache") is not None:  # the engine's cost is per variant and point, not config
        return None
    workers = tune_up.get("chunk_size") or 1
    rounds = sum(math.ceil(len(entry["batch_sizes"]) / workers) for entry in tune_up.get("progress") or [])
    configs = (tune_up.get("search_space") or {}).get("kept")
    return round(work / (scale or 1.0) / (rounds * configs), 3) if rounds and configs else None


# ---- text ------------------------------------------------------------------------------------------

PART_LABELS = {"server_start": "server starts", "warmup": "warm-up", "benchmark": "benchmark", "tuning": "tuning",
               "kernel_benchmark": "kernel benchmarks", "other": "other"}


def cost_line(cost: dict) -> str:
    """``62.1 GPU-min (4 GPUs x 15.5 min: server starts 8.3, warm-up 4.0, benchmark 48.9, other 0.9)``, and for an
    emulator what its GPUs really spent."""
    if not cost.get("gpus"):
        return f"0 GPU-min ({cost.get('gpus_from', 'no GPU work')})"
    parts = ", ".join(f"{PART_LABELS.get(name, name)} {value['gpu_minutes']:.1f}"
                      for name, value in cost["parts"].items() if value.get("gpu_minutes"))
    line = f"{cost['gpu_minutes']:.1f} GPU-min ({cost['gpus']} GPUs x {cost['real_s'] / 60:.1f} min: {parts})"
    if cost.get("emulated"):
        scale = cost.get("time_scale")
        line += (f"; real-GPU equivalent of an emulated {cost['wall_gpu_minutes']:.1f} GPU-min (time scale "
                 f"{_scales_text(scale)})" if scale else
                 "; emulated GPUs, no time scale given (tuning_run_emulator_time_scale): wall time only")
    return line


def _scales_text(scale: dict) -> str:
    scales = scales_for(True, scale)
    others = [f"{value:g} {name}" for name, value in scales._asdict().items()
              if name != "serving" and value != scales.serving]
    return ", ".join([f"{scales.serving:g} serving", *others]) if others else f"{scales.serving:g}"
