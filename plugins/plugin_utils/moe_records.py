# Copyright (c) llmops.sglang contributors
# Apache License 2.0 (see LICENSE)
"""The MoE stage's evidence records (docs/run-directory.md, "moe_tune"), built from what its tasks returned: the
tuner's and the benchmarks' results, the install, the GPUs and the installation read on the host. Pure: the action
``moe_records`` writes what these return."""
from __future__ import annotations

import os
import typing as t

from ansible_collections.llmops.sglang.plugins.module_utils.moe_roofline import kernel_table_document
from ansible_collections.llmops.sglang.plugins.plugin_utils.run_dir import record_name


def tuned_down(down: dict | None) -> dict | None:
    """The down kernel's tuner result, or None where the down kernel was not tuned (skipped: the release has no down
    tuner, or the server misses no down config)."""
    return down if down and "output_file" in down else None


def tuning_seconds(up: dict, down: dict | None) -> float:
    """The tuner's time of both kernels."""
    return up["duration_s"] + (down or {}).get("duration_s", 0)


def cluster_record(up: dict, down: dict | None, cluster: dict, now: float) -> dict[str, t.Any]:
    """The record ``cluster``: what the Ray cluster of the tune hosts did, ``now`` (epoch seconds) being when it stopped."""
    return {
        "head": cluster["head"],
        "hosts": cluster["hosts"],
        "ray_address": cluster["ray_address"],
        "nodes": cluster["nodes"],
        "gpus": cluster["gpus"],
        "batch_sizes_per_invocation": up["chunk_size"],
        "tuning_s": tuning_seconds(up, down),
        "wall_time_s": round(now - float(cluster["started"]), 1),
        # As Ray saw the tuner's runs (its GCS: the driver's job, its GPU workers and their nodes).
        "gpus_used": up["gpus_used"],
        "hosts_used": up["hosts_used"],
        "workers_per_host": [placement.get("workers_per_host") for placement in up["placements"]],
        # engine llmops: per node its share of the batch sizes, Ray's node and GPU ids, its time and GPU-minutes.
        "engine_shards": [shard for placement in up["placements"] for shard in placement.get("shards", [])],
    }


def evidence_records(*, up: dict, down: dict | None, before: dict, after: dict, installed: dict, gpus: dict, env: dict,
                     server_args: dict, model_path: str, tuner_args: list, bandwidth_gbs: float | None,
                     tuned_on: list[str]) -> dict[str, t.Any]:
    """The stage's evidence of one host by file name, from its tasks' results (``up``, ``down``, ``before``, ``after``
    the moe_tune runs, ``installed`` the moe_configs install) and what was read of the host and asked of it (``gpus``:
    the gpu_facts summary, ``env``: sglang_env_facts, the adopted ``server_args``, ``model_path``, the targets'
    ``tuner_args``, the GPU's ``bandwidth_gbs``, the hosts it was ``tuned_on``). The record None (no down kernel
    tuned) removes a file of that name."""
    tp_size, ep_size = server_args.get("tp_size", 1), server_args.get("ep_size", 1)
    return {
        record_name("tune_up"): up,
        record_name("tune_down"): tuned_down(down),
        record_name("installed"): installed,
        record_name("kernel_before"): before["kernel_times"],
        record_name("kernel_after"): after["kernel_times"],
        record_name("kernel_benchmark"): {"before_s": before["duration_s"], "after_s": after["duration_s"]},
        record_name("kernel_table"): kernel_table_document(
            before["kernel_times"], after["kernel_times"], env["model"]["moe_shape"], tp_size, ep_size, bandwidth_gbs),
        record_name("provenance"): {
            "gpu": gpus["name"],
            "gpu_count": gpus["count"],
            "versions": env["versions"],
            "triton_dir": env["triton_dir"],
            "model_path": model_path,
            "moe_shape": env["model"]["moe_shape"],
            "tp_size": tp_size,
            "ep_size": ep_size,
            "tuner_args": tuner_args,
            "search_space": up["search_space"],
            "batch_sizes": up["batch_sizes"],
            "batch_sizes_reason": up.get("batch_sizes_reason"),
            "duration_s": tuning_seconds(up, down),
            "tuned_on": tuned_on,
            "files": [os.path.basename(path) for path in installed["installed"]],
        },
    }


def failure(task: str, result: dict, run_id: str, work_dir: str) -> tuple[str, str]:
    """The record ``failure_text`` and the stage's message when its tuning, benchmarks or install failed at ``task``
    (``result`` that task's result): the previous configs are back, and a rerun of ``run_id`` resumes from the
    tuner's checkpoints in ``work_dir``."""
    reason = result.get("msg", "failed")
    return (f"{task}: {reason}",
            f'MoE tuning failed at "{task}": {reason}. Nothing was installed (or it was restored); the server runs the '
            f"previous configs. Rerun with -e run_id={run_id} to resume from the checkpoints in {work_dir}.")


def stage_details(up: dict, down: dict | None) -> dict[str, t.Any]:
    """What stage.json says of the tuning besides the records: engine llmops: per kernel whether the controller's
    cache answered (status, key and its short hash; None where the engine did not tune the kernel: a skipped task's
    result has no cache)."""
    return {"engine_cache": {"up": up.get("cache"), "down": (down or {}).get("cache")}}


def planned(plan: dict) -> dict[str, t.Any]:
    """What the evidence takes from the stage's plan (the action moe_plan's result): the adopted TP and EP sizes and
    the model the tuner ran with, the targets' tuner arguments, the GPU's bandwidth, the hosts whose GPUs tuned."""
    tuner, cluster = plan["tuner"]["up"], plan["cluster"]
    return {"server_args": {"tp_size": tuner.get("tp_size", 1), "ep_size": tuner.get("ep_size", 1)},
            "model_path": tuner["model_path"], "tuner_args": plan["plan"]["tuner_args"],
            "bandwidth_gbs": (plan["spec"] or {}).get("mem_bandwidth_gbs"),
            # Outside a tuning cluster the head is the host itself.
            "tuned_on": cluster["hosts"] if cluster["in_cluster"] else [cluster["head"]]}
