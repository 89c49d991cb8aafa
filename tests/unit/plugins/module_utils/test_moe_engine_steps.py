# Copyright (c) llmops.sglang contributors
# Apache License 2.0 (see LICENSE)
"""moe_tune's record of where an engine run worked (plugins/module_utils/_moe_engine_steps.py ``engine_placement``):
one host, or the shards of a Ray cluster as the engine's merged result says."""
from __future__ import annotations

from ansible_collections.llmops.sglang.plugins.module_utils import moe_engine
from ansible_collections.llmops.sglang.plugins.module_utils._moe_engine_steps import engine_placement
from tests.unit.plugins.module_utils.test_moe_engine import shard_result


def shard(ip: str, host: str, sizes: list[int], gpus: int) -> dict:
    ran_on = {"node_id": f"node-{ip}", "ip": ip, "hostname": host, "gpu_ids": [str(g) for g in range(gpus)],
              "devices": [str(g) for g in range(gpus)], "work_dir": f"/var/lib/moe/engine/x/shards/{ip}"}
    return {"node": {"node_id": f"node-{ip}", "ip": ip, "name": ip, "host": host, "gpus": gpus, "cpus": 8,
                     "ran_on": ran_on},
            "result": shard_result(sizes, wall=12.0, gpus=gpus)}


def test_a_local_run_names_this_hosts_devices():
    result = shard_result([1, 8], gpus=2)
    assert engine_placement(result, [1, 8], ["0", "1"]) == {"batch_sizes": [1, 8], "gpus_used": 2, "devices": ["0", "1"]}


def test_a_fleet_run_says_where_each_shard_ran():
    cluster = {"address": "10.0.0.1:6379", "gpus": 12,
               "nodes": [{"ip": ip, "host": host, "gpus": 4} for ip, host in
                         (("10.0.0.1", "gpu1"), ("10.0.0.2", "gpu2"), ("10.0.0.3", "gpu3"))]}
    merged = moe_engine.merge_results([shard("10.0.0.1", "gpu1", [1, 2], 4), shard("10.0.0.2", "gpu2", [4, 8], 4),
                                       shard("10.0.0.3", "gpu3", [16], 4)], 20.0, cluster)
    placement = engine_placement(merged, [1, 2, 4, 8, 16], ["0"])
    assert placement["cluster_gpus"] == 12 and placement["gpus_used"] == 12
    assert placement["cluster_hosts"] == placement["hosts_used"] == ["10.0.0.1", "10.0.0.2", "10.0.0.3"]
    assert placement["workers_per_host"] == {"10.0.0.1": 4, "10.0.0.2": 4, "10.0.0.3": 4}
    assert placement["ray_address"] == "10.0.0.1:6379"
    assert [(s["host"], s["batch_sizes"], s["gpu_ids"]) for s in placement["shards"]] == [
        ("gpu1", [1, 2], ["0", "1", "2", "3"]), ("gpu2", [4, 8], ["0", "1", "2", "3"]), ("gpu3", [16], ["0", "1", "2", "3"])]
    assert placement["shards"][0]["work_dir"] == "/var/lib/moe/engine/x/shards/10.0.0.1"
    assert placement["shards"][0]["gpu_minutes"] == 0.8 and placement["shards"][0]["node_id"] == "node-10.0.0.1"
