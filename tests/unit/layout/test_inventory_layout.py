"""The commands users type from the checkout do the obvious thing (issue #15 item 2):
`ansible-playbook tune.yml -i inventory` is the embedded default alone, never merged with an example."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from tests.emulator import make_importable

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
    assert tags == ["[preflight]", "[baseline]", "[flags]", "[search]", "[moe_tune]", "[verify]", "[report]"]


def test_the_demo_accounts_the_emulator_at_its_profiles_time_scales():
    """The demo inventory's tuning_run_emulator_time_scale is the demo profile's (its effective document, tuner
    and startup sections included), so the report's real-GPU GPU-minutes are what the profile's real-GPU durations say."""
    make_importable()
    from sglang._emulator.kernels import TunerSettings  # noqa: PLC0415 - the emulator is not on the default path
    from sglang._emulator.profile import load_profile  # noqa: PLC0415

    profile = load_profile(REPO_ROOT / "tests" / "emulator" / "profiles" / "demo.yaml")
    tuner = TunerSettings.from_profile(profile)
    scales = _inventory("-i", "inventory")["_meta"]["hostvars"]["gpu1"]["tuning_run_emulator_time_scale"]
    assert scales == {"serving": profile.time_scale, "tuning": tuner.time_scale or profile.time_scale,
                      "startup": profile.startup.time_scale or profile.time_scale}


def test_the_demo_measures_the_fusion_the_preflight_finds_ineffective():
    """The demo keeps showing the real case's capacity drop (48 -> 26): its fusion candidate is forced."""
    sets = _inventory("-i", "inventory")["_meta"]["hostvars"]["gpu1"]["sglang_candidate_flag_sets"]
    assert {s["name"]: s.get("force", False) for s in sets} == {"fused-moe-sum-all-reduce": False,
                                                                "flashinfer-allreduce-fusion": True}
