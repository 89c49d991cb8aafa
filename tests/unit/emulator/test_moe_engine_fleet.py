# Copyright (c) llmops.sglang contributors
# Apache License 2.0 (see LICENSE)
"""The MoE engine sharded over a Ray cluster (plugins/module_utils/moe_engine.py ``run_fleet``), on the SGLang
emulator's kernels: a real Ray cluster of two nodes on this machine (``ray.cluster_utils.Cluster``, 2 and 1 GPUs),
the engine program run as moe_tune runs it, with ``ray_address`` in its job. The sandbox hosts' cluster over SSH is
tests/integration/test_engine_fleet.py.
"""
from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest
from ray import cluster_utils as ray_cluster_utils  # the project's test dependency (pyproject.toml)

from tests.unit.emulator.test_moe_engine_emulated import EMULATOR, make_job, run_engine, space, write_profile

SIZES = [1, 16, 64, 512, 1024, 2048]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory):
    """Two Ray nodes (2 GPUs, 1 GPU) whose workers import the emulator; shut down afterwards."""
    base = tmp_path_factory.mktemp("fleet")
    profile = write_profile(base / "profile.yaml")
    saved = dict(os.environ)
    # The nodes' workers inherit the environment the nodes start in, as the ray_cluster role's nodes do.
    os.environ.update(PYTHONPATH=os.pathsep.join([str(EMULATOR / "sglang"), str(EMULATOR / "triton")]),
                      SGLANG_EMULATOR_PROFILE=str(profile))
    for name in [name for name in os.environ if name.startswith("CUDA_") or name == "RAY_ADDRESS"]:
        del os.environ[name]
    ray_cluster = ray_cluster_utils.Cluster(initialize_head=True, head_node_args={"num_gpus": 2, "num_cpus": 3})
    ray_cluster.add_node(num_gpus=1, num_cpus=2)
    ray_cluster.wait_for_nodes()
    try:
        yield {"address": ray_cluster.address, "profile": profile, "base": base}
    finally:
        ray_cluster.shutdown()
        os.environ.clear()
        os.environ.update(saved)


def fleet_run(cluster: dict, base: Path, **extra: Any) -> tuple[int, list[dict], str, dict | None]:
    job = make_job(base, space(), batch_sizes=SIZES, ray_address=cluster["address"], **extra)
    rc, events, stderr = run_engine(base, cluster["profile"], job, timeout=180)
    result = json.loads((base / "result.json").read_text()) if rc == 0 else None
    return rc, events, stderr, result


@pytest.fixture(scope="module")
def tuned(cluster: dict, tmp_path_factory: pytest.TempPathFactory) -> dict:
    base = tmp_path_factory.mktemp("tuned")
    first = fleet_run(cluster, base)
    again = fleet_run(cluster, base)
    return {"base": base, "first": first, "again": again}


def test_the_batch_sizes_are_sharded_over_both_nodes_and_merged_into_one_result(tuned: dict) -> None:
    rc, events, stderr, result = tuned["first"]
    assert rc == 0, (events[-3:], stderr[-3000:])
    fleet = next(event for event in events if event["event"] == "fleet")
    # Contiguous in the nodes' order and balanced by GPUs: the 2-GPU node gets 4 batch sizes, the 1-GPU node 2.
    assert [m for shard in fleet["shards"] for m in shard["batch_sizes"]] == SIZES
    assert all(len(shard["batch_sizes"]) == 2 * shard["gpus"] for shard in fleet["shards"]), fleet
    assert result["batch_sizes"] == SIZES and sorted(map(int, result["per_m"])) == SIZES
    for kernel in ("up", "down"):
        assert sorted(map(int, result["files"][kernel]["configs"])) == SIZES
    shards = result["fleet"]["shards"]
    assert sorted(len(shard["batch_sizes"]) for shard in shards) == [2, 4]
    assert result["gpus"] == 3 and result["fleet"]["gpus"] == 3
    assert result["gpu_minutes"] == pytest.approx(sum(shard["gpu_minutes"] for shard in shards), abs=0.011)
    for shard in shards:
        # Ray ran each shard's task on the node it was pinned to, with all of that node's GPUs.
        assert shard["ran_on"]["node_id"] == shard["node_id"]
        assert len(shard["ran_on"]["gpu_ids"]) == len(shard["ran_on"]["devices"]) == shard["gpus"]
        shard_result = json.loads((Path(shard["ran_on"]["work_dir"]) / "result.json").read_text())
        assert shard_result["batch_sizes"] == shard["batch_sizes"] and shard_result["gpus"] == shard["gpus"]
        assert result["stats"]["shards"][shard["name"]]["compiles"] > 0  # each node's own stats (the rerun's on disk)
        for kernel in ("up", "down"):
            for m, config in shard_result["files"][kernel]["configs"].items():
                assert result["files"][kernel]["configs"][m] == config


def test_a_rerun_resumes_each_nodes_checkpoint(tuned: dict) -> None:
    rc, events, stderr, result = tuned["again"]
    assert rc == 0, (events[-3:], stderr[-3000:])
    assert result["resumed_batch_sizes"] == len(SIZES)
    assert all(shard["resumed_batch_sizes"] == len(shard["batch_sizes"]) for shard in result["fleet"]["shards"])
    assert result["files"] == tuned["first"][3]["files"]


def test_a_failed_shard_fails_the_run_naming_its_node_and_the_other_is_ended(
        cluster: dict, tmp_path: Path) -> None:
    # The 1-GPU node's shard cannot make its work dir (a file is in the way): its task fails on that node.
    shards = tmp_path / "work" / "shards"
    shards.mkdir(parents=True)
    ip = cluster["address"].split(":")[0]
    (shards / f"{ip}-2").write_text("in the way")
    rc, events, stderr, _result = fleet_run(cluster, tmp_path)
    assert rc == 1, (events[-3:], stderr[-3000:])
    failed = events[-1]
    assert failed["event"] == "failed" and f"the shard on {ip}" in failed["error"], failed
    assert "NotADirectoryError" in failed["error"] or "FileExistsError" in failed["error"], failed
    assert not (tmp_path / "result.json").exists()
    # The other shard was cancelled: its engine's process group is gone (what it had finished stays checkpointed
    # there, as the rerun test shows for a finished one).
    left = subprocess.run(["pgrep", "-f", str(tmp_path)], capture_output=True, text=True, check=False)
    assert left.returncode == 1, left.stdout


def test_no_engine_process_outlives_the_runs(tuned: dict) -> None:
    left = subprocess.run(["pgrep", "-f", str(tuned["base"])], capture_output=True, text=True, check=False)
    assert left.returncode == 1, left.stdout
