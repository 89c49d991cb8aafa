# Copyright (c) llmops.sglang contributors
# Apache License 2.0 (see LICENSE)
"""moe_tune's ``engine: llmops`` steps, private to it: install the engine program (moe_engine.py) in the work dir,
write its job, run it with the SGLang installation's python as the tuner is run (own process group, registered
with the host's guard, bounded by the task's timeout) and take its files into moe_tune's checkpoint, so the finish
step writes the output exactly as for SGLang's tuner.

Private to the llmops.sglang collection. Stdlib only besides the collection's own module_utils.
"""
from __future__ import annotations

import inspect
import json
import os

from ansible_collections.llmops.sglang.plugins.module_utils import moe_engine
from ansible_collections.llmops.sglang.plugins.module_utils.atomic_write import write_atomically
from ansible_collections.llmops.sglang.plugins.module_utils.moe_engine_key import result_host_parts
from ansible_collections.llmops.sglang.plugins.module_utils.moe_search_space import (
    compute_bound_search_space, read_search_space_file)
from ansible_collections.llmops.sglang.plugins.module_utils.moe_tuning import (
    TuneError, invocation_dir, log_tail, merge_into_checkpoint, read_checkpoint, run_tuner, tuner_environment)

# Seconds the engine keeps of the task's time to report and write its checkpoint before the tuner-style kill.
DEADLINE_MARGIN_S = 30.0
# What moe_tune's plan needs to know of a tuner's CLI, for the engine: every batch size in one run, any space.
ENGINE_CLI = {"script": "moe_engine.py", "options": [], "batch_sizes_per_run": "many", "search_space_file": True}


def engine_work_dir(work_dir: str, up_file_name: str) -> str:
    """One engine directory per target (its checkpoint and Triton cache): up and down share it."""
    return os.path.join(work_dir, "engine", up_file_name.replace("/", "_"))


def install_program(directory: str) -> str:
    """moe_engine.py alone in ``directory`` (beside collection files it would shadow the stdlib's ``secrets``)."""
    os.makedirs(directory, exist_ok=True)
    path = os.path.join(directory, "moe_engine.py")
    content = inspect.getsource(moe_engine).encode("utf-8")
    try:
        with open(path, "rb") as handle:
            current = handle.read()
    except FileNotFoundError:
        current = None
    if current != content:
        write_atomically(path, content)
    return path


def engine_job(params: dict, plan: dict, sizes: list[int], timeout_s: float) -> dict:
    """The job file's content: the plan's search space (its file; SGLang's whole space for ``full``)."""
    space_file = plan["search_space_file"]
    configs = read_search_space_file(space_file) if space_file else compute_bound_search_space()
    work = plan["engine_work_dir"]
    return {"shape": plan["engine_shape"], "kernels": plan["engine_kernels"], "batch_sizes": sizes,
            "configs": configs, "gpus": plan["devices"], "compile_workers": plan["compile_workers"],
            "work_dir": work, "output": os.path.join(work, "result.json"), "model_path": params["model_path"],
            "deadline_s": max(60.0, timeout_s - DEADLINE_MARGIN_S)}


def run_engine(module, plan: dict, chunk: list[int], timeout_s: float, on_start) -> dict:
    """Tune ``chunk`` (both kernels: they share BLOCK_SIZE_M), merge this task's kernel into moe_tune's checkpoint;
    the step's result. TuneError with the engine's own reason and log tail otherwise."""
    params = module.params
    work = plan["engine_work_dir"]
    program = install_program(work)
    job = engine_job(params, plan, chunk, timeout_s)
    job_path = os.path.join(work, "job.json")
    write_atomically(job_path, json.dumps(job, indent=1).encode())
    run_dir = invocation_dir(params["work_dir"], "engine-")
    env = tuner_environment(dict(os.environ), params["environment"])
    run = run_tuner([params["python"], program, job_path], run_dir, env, timeout_s, on_start=on_start)
    if run.rc != 0 or run.timed_out:
        raise _engine_failure(plan, chunk, run, run_dir)
    with open(job["output"], encoding="utf-8") as handle:
        result = json.load(handle)
    produced = result["files"][plan["kernel"]]
    if produced["name"] != plan["file_name"]:
        raise TuneError(f"the installed SGLang reads {produced['name']} for the {plan['kernel']} kernel, not "
                        f"{plan['file_name']}; the engine's files were not taken (result in {job['output']})")
    merge_into_checkpoint(plan["checkpoint"], plan["fingerprint"], plan["inputs"], produced["configs"],
                          plan["kernel"], chunk)
    configs = read_checkpoint(plan["checkpoint"], plan["fingerprint"])[0]
    return {"changed": True, "done": len([size for size in plan["batch_sizes"] if str(size) in configs]),
            "tuner_seconds": result["wall_s"], "seconds": round(run.seconds, 1),
            "placement": engine_placement(result, chunk, plan["devices"]),
            "engine": engine_summary(result, plan["kernel"]),
            # For the controller's cache: every kernel's file of this run and what it was tuned with.
            "engine_files": result["files"], "engine_host": result_host_parts(result)}


def install_cached(plan: dict, configs: dict, sizes: list[int]) -> dict:
    """The step of a cache hit: the cached configs of ``sizes`` into moe_tune's checkpoint, as an engine run's are
    (the finish step writes the output file from there); no engine starts."""
    merge_into_checkpoint(plan["checkpoint"], plan["fingerprint"], plan["inputs"],
                          {str(size): configs[str(size)] for size in sizes}, plan["kernel"], sizes)
    done = read_checkpoint(plan["checkpoint"], plan["fingerprint"])[0]
    return {"changed": True, "done": len([size for size in plan["batch_sizes"] if str(size) in done]),
            "tuner_seconds": None, "seconds": 0.0, "placement": None}


def engine_placement(result: dict, chunk: list[int], devices: list[str]) -> dict:
    """Where the engine's run worked: this host's devices; on a Ray cluster (the result's ``fleet``) as the SGLang
    path's placements say it (``cluster_gpus``, ``cluster_hosts``, ``gpus_used``, ``hosts_used``,
    ``workers_per_host``: the GPUs each host's shard held) and ``shards``: per node its address, Ray's node id and GPU
    ids as the shard's task saw them, the host name, its batch sizes, wall time and GPU-minutes, its work dir."""
    fleet = result.get("fleet")
    if not fleet:
        return {"batch_sizes": chunk, "gpus_used": result["gpus"], "devices": devices}
    shards = [{"ip": shard["ip"], "host": shard["ran_on"]["hostname"], "node_id": shard["ran_on"]["node_id"],
               "gpus": shard["gpus"], "gpu_ids": shard["ran_on"]["gpu_ids"], "batch_sizes": shard["batch_sizes"],
               "wall_s": shard["wall_s"], "gpu_minutes": shard["gpu_minutes"],
               "resumed_batch_sizes": shard["resumed_batch_sizes"], "work_dir": shard["ran_on"]["work_dir"]}
              for shard in fleet["shards"]]
    return {"batch_sizes": chunk, "ray_address": fleet["address"], "cluster_gpus": fleet["gpus"],
            "cluster_hosts": sorted(node["ip"] for node in fleet["nodes"]), "gpus_used": result["gpus"],
            "hosts_used": sorted(shard["ip"] for shard in shards),
            "workers_per_host": {shard["ip"]: shard["gpus"] for shard in shards}, "shards": shards}


def engine_summary(result: dict, kernel: str) -> dict:
    """What the report and the playbook need of one engine run: per batch size the pick, its time and the
    default's; compile failures; wall time and GPU-minutes."""
    per_m = {}
    for m, entry in result["per_m"].items():
        pick_us = entry["pick"].get(f"{kernel}_us")
        default_us = entry["default_us"].get(kernel)
        per_m[m] = {"config": entry["pick"][kernel], "kernel_us": pick_us, "default": entry["default"][kernel],
                    "default_us": default_us,
                    "speedup": round(default_us / pick_us, 3) if pick_us and default_us else None}
    return {"device": result["device"]["name"], "release": result["release"], "candidates": result["candidates"],
            "failures": result["failures"], "wall_s": result["wall_s"], "gpus": result["gpus"],
            "gpu_minutes": result["gpu_minutes"], "resumed_batch_sizes": result["resumed_batch_sizes"],
            "per_batch_size": per_m}


def _engine_failure(plan: dict, chunk: list[int], run, run_dir: str) -> TuneError:
    events = [json.loads(line) for line in run.stdout.splitlines() if line.startswith('{"event"')]
    last = events[-1] if events else {}
    if run.timed_out or last.get("event") == "deadline":
        what = "reached the task timeout"
    elif last.get("event") == "failed":
        what = f"failed: {last.get('error')}"
    else:
        what = f"exited with rc={run.rc}"
    done = read_checkpoint(plan["checkpoint"], plan["fingerprint"])[0]
    tail = log_tail(run)
    return TuneError(
        f"the MoE engine {what} while tuning batch sizes {chunk}; the engine keeps every finished batch size in "
        f"{plan['engine_work_dir']} (on a Ray cluster in shards/<node address> there, on each node) and a rerun "
        f"resumes there; nothing was written to {plan['output_file']}. "
        f"Log tail:\n{tail}",
        batch_sizes_done=[size for size in plan["batch_sizes"] if str(size) in done], log_tail=tail,
        log_dir=run_dir, failed_runs=[{"batch_sizes": chunk, "device": None, "log_dir": run_dir}])
