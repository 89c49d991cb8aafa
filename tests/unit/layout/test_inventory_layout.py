"""The commands users type from the checkout do the obvious thing (issue #15 item 2):
`ansible-playbook tune.yml -i inventory` is the embedded default alone, never merged with an example."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[3]
BIN = Path(sys.executable).parent


def _ansible(tool: str, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "ANSIBLE_CONFIG": str(REPO_ROOT / "ansible.cfg")}
    return subprocess.run([str(BIN / tool), *args], cwd=REPO_ROOT, env=env, capture_output=True, text=True,
                          check=True)


def _inventory(*args: str) -> dict:
    return json.loads(_ansible("ansible-inventory", "--list", *args).stdout)


def test_inventory_dir_is_the_embedded_default_alone():
    listed = _inventory("-i", "inventory")
    assert listed["sglang_hosts"]["hosts"] == ["gpu1"]
    assert listed["_meta"]["hostvars"]["gpu1"]["sglang_candidate_flag_sets"][1]["name"] == "flashinfer-allreduce-fusion"


def test_no_inventory_argument_means_the_same_default():
    assert _inventory()["sglang_hosts"]["hosts"] == ["gpu1"]


def test_the_example_fleet_is_its_own_inventory():
    listed = _inventory("-i", "examples/inventory")
    assert listed["sglang_hosts"]["hosts"] == ["gpu-a01", "gpu-a02"]
    assert "gpu1" not in listed["_meta"]["hostvars"]


def test_tune_yml_at_the_root_is_the_whole_routine():
    listed = _ansible("ansible-playbook", "tune.yml", "-i", "inventory", "--list-tasks").stdout
    tags = [line.rsplit("TAGS: ", 1)[1] for line in listed.splitlines() if line.strip().startswith("play #")]
    assert tags == ["[preflight]", "[baseline]", "[flags]", "[moe_tune]", "[verify]", "[report]"]
