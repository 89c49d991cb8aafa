"""The MoE engine (``engine: llmops``) sharded over a real Ray cluster of 3 sandbox hosts x 4 emulated GPUs: the
ray_cluster role forms the cluster, moe_tune runs the engine on the head with ``RAY_ADDRESS``, the engine deals the
batch sizes to the hosts (one Ray task pinned to each, with its 4 GPUs) and merges their results.

Lean on purpose (CI's 45 minutes): one moe_tune task, the emulator's tuning costs compressed 50x; the whole stage over
a cluster (SGLang's tuner, rollout) is test_fleet.py. Every file, unit and process this module creates is removed from
the hosts at the end, and that is checked.
"""
from __future__ import annotations

import json

import pytest
import yaml

from tests.integration.ansible import REPO_ROOT, task_results, write_demo_inventory

pytestmark = [pytest.mark.sandbox]
HOSTS = ["gpu1", "gpu2", "gpu3"]
PLAYBOOK = REPO_ROOT / "tests" / "integration" / "playbooks" / "engine_fleet.yml"
PROFILE = "/etc/sglang-emulator/profile.yaml"
WORK_DIR = "/var/lib/llmops-engine-fleet-test"
UP = "E=256,N=256,device_name=NVIDIA_RTX_PRO_6000_Blackwell_Server_Edition.json"
DOWN = "E=256,N=256,device_name=NVIDIA_RTX_PRO_6000_Blackwell_Server_Edition_down.json"
ENGINE_DIR = f"{WORK_DIR}/engine/{UP}"
# 12 batch sizes for 3 hosts of 4 GPUs: 4 contiguous ones each.
BATCH_SIZES = [1, 2, 4, 8, 16, 24, 32, 48, 64, 96, 128, 256]


def write_host_file(fleet, host, path: str, content: str) -> None:
    fleet.run(host, "python3", "-c", "import pathlib, sys; p = pathlib.Path(sys.argv[1]); "
              "p.parent.mkdir(parents=True, exist_ok=True); p.write_text(sys.argv[2])", path, content)


@pytest.fixture(scope="module")
def hosts(fleet):
    """The three hosts with the emulator's tuning costs compressed 50x; afterwards their profile is restored and every
    trace of this module removed."""
    by_name = {h.name: h for h in fleet.hosts()}
    chosen = [by_name[name] for name in HOSTS]
    originals = {h.name: fleet.run(h, "cat", PROFILE).stdout for h in chosen}
    for host in chosen:
        profile = yaml.safe_load(originals[host.name])
        profile["tuner"] = {**(profile.get("tuner") or {}), "time_scale": 0.02}
        write_host_file(fleet, host, PROFILE, yaml.safe_dump(profile))
    yield chosen
    for host in chosen:
        write_host_file(fleet, host, PROFILE, originals[host.name])
        fleet.run(host, "systemctl", "stop", "llmops-ray.service", check=False)
        fleet.run(host, "rm", "-rf", WORK_DIR, "/etc/systemd/system/llmops-ray.service", "/var/lib/llmops-sglang/ray")
        fleet.run(host, "systemctl", "daemon-reload")
    for host in chosen:
        assert fleet.run(host, "test", "-e", WORK_DIR, check=False).returncode == 1, host.name
        assert fleet.run(host, "pgrep", "-f", "moe_engine.py|raylet|gcs_server", check=False).returncode == 1, host.name


@pytest.fixture(scope="module")
def tuned(runner, fleet, hosts, tmp_path_factory):
    members = {h.name: {"ansible_host": h.address} for h in hosts}
    inventory = write_demo_inventory(tmp_path_factory.mktemp("inventory"), fleet.connection_vars(), members)
    result = runner.run(PLAYBOOK, {"engine_fleet_hosts": HOSTS, "engine_fleet_batch_sizes": BATCH_SIZES,
                                   "engine_fleet_work_dir": WORK_DIR}, inventory=inventory)
    assert result.status == "successful", result.stdout[-6000:]
    up = task_results(result, "Tune with the engine over the cluster")["gpu1"]
    merged = json.loads(fleet.run(hosts[0], "cat", f"{ENGINE_DIR}/result.json").stdout)
    return {"result": result, "up": up, "merged": merged}


def test_the_batch_sizes_are_spread_over_every_host_of_the_cluster(tuned, fleet, hosts):
    up = tuned["up"]
    addresses = sorted(h.address for h in hosts)
    [placement] = up["placements"]
    assert placement["cluster_hosts"] == addresses and placement["cluster_gpus"] == 12
    assert up["hosts_used"] == addresses and up["gpus_used"] == 12
    assert placement["workers_per_host"] == {ip: 4 for ip in addresses}
    shards = {shard["ip"]: shard for shard in placement["shards"]}
    assert sorted(shards) == addresses
    # Contiguous shares of the sorted batch sizes, 4 per host of 4 GPUs, together every batch size once.
    assert sorted(m for shard in shards.values() for m in shard["batch_sizes"]) == BATCH_SIZES
    assert [len(shards[ip]["batch_sizes"]) for ip in addresses] == [4, 4, 4]
    for host in hosts:
        shard = shards[host.address]
        # Where Ray ran the task (its node, the GPUs it assigned) is the host itself: its name as the task saw it.
        assert shard["host"] == fleet.run(host, "hostname").stdout.strip()
        assert shard["gpu_ids"] == ["0", "1", "2", "3"]
        # The shard's own result lies on that host, in its own work dir (a rerun resumes there).
        assert shard["work_dir"] == f"{ENGINE_DIR}/shards/{host.address}"
        own = json.loads(fleet.run(host, "cat", f"{shard['work_dir']}/result.json").stdout)
        assert own["batch_sizes"] == shard["batch_sizes"] and own["gpus"] == 4
        checkpoint = json.loads(fleet.run(host, "cat", f"{shard['work_dir']}/engine-checkpoint.json").stdout)
        assert sorted(map(int, checkpoint["done"])) == shard["batch_sizes"]
    assert up["engine"]["gpus"] == 12
    assert up["engine"]["gpu_minutes"] == pytest.approx(sum(s["gpu_minutes"] for s in shards.values()), abs=0.02)


def test_the_merged_files_have_every_batch_size_and_the_shards_configs(tuned, fleet, hosts):
    up, merged = tuned["up"], tuned["merged"]
    installed = json.loads(fleet.run(hosts[0], "cat", up["output_file"]).stdout)
    assert up["output_file"] == f"{WORK_DIR}/{UP}" and list(installed) == [str(m) for m in BATCH_SIZES]
    assert sorted(map(int, merged["files"]["down"]["configs"])) == BATCH_SIZES
    assert merged["files"]["down"]["name"] == DOWN
    for shard in up["placements"][0]["shards"]:
        host = next(h for h in hosts if h.address == shard["ip"])
        own = json.loads(fleet.run(host, "cat", f"{shard['work_dir']}/result.json").stdout)
        for m, config in own["files"]["up"]["configs"].items():
            assert {key: installed[m][key] for key in config} == config, (host.name, m)
    assert sorted(merged["stats"]["shards"]) == sorted(h.address for h in hosts)


def test_the_cluster_and_the_engine_are_gone_after_the_run(tuned, fleet, hosts):
    for host in hosts:
        assert fleet.run(host, "systemctl", "is-active", "llmops-ray.service", check=False).stdout.strip() == "inactive"
        left = fleet.run(host, "pgrep", "-f", "moe_engine.py|raylet|gcs_server", check=False)
        assert left.returncode == 1, f"{host.name} still runs: {left.stdout}"
