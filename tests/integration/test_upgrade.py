"""playbooks/upgrade.yml on a sandbox host serving the demo (emulated SGLang 0.5.11, Triton 3.6.0, /opt/sglang/venv):
two newer emulated releases installed side by side from the host's wheelhouse (/srv/wheelhouse, no index), and the
prediction, from each release's own lookup code, of what they do with the host's tuned MoE configs and its flags:
0.5.23 (Triton 3.6.0) keeps them, the future 0.5.24 (Triton 3.9.0, no config directory for it) only falls back to
the 3.6.0 ones and refuses the deprecated fusion switch; configs only the serving venv holds are carried into 0.5.23's
(same Triton, same kernel source). The serving release is never touched and nothing restarts.
"""
from __future__ import annotations

import json

import pytest

from ansible_collections.llmops.sglang.plugins.module_utils.sglang_env import PROBE
from tests.integration.ansible import REPO_ROOT, task_results, write_demo_inventory

pytestmark = pytest.mark.sandbox
UPGRADE = REPO_ROOT / "playbooks" / "upgrade.yml"
INSTALL = "Install the release into its own venv (the serving one stays untouched)"
PREDICT = "Predict what the new release does with the tuned MoE configs and the server arguments"
CONFIG_DIR = "/var/lib/llmops-sglang/upgrade-test-moe"
UP = "E=256,N=256,device_name=NVIDIA_RTX_PRO_6000_Blackwell_Server_Edition.json"
DOWN = UP.replace(".json", "_down.json")
TUNED = {"1": {"BLOCK_SIZE_M": 16, "BLOCK_SIZE_N": 64, "BLOCK_SIZE_K": 128, "GROUP_SIZE_M": 1, "num_warps": 4,
               "num_stages": 3}}
SERVER_ARGS = {"tp_size": 4, "speculative_algorithm": "NEXTN", "enable_flashinfer_allreduce_fusion": True}
SERVING_PYTHON = "/opt/sglang/venv/bin/python"


@pytest.fixture(name="upgrade")
def upgrade_fixture(fleet, gpu1, runner, tmp_path):
    """Runs upgrade.yml on gpu1 (the demo inventory's group vars) with tuned configs in a shared
    SGLANG_MOE_CONFIG_DIR; cleans the host up after."""
    inventory = write_demo_inventory(tmp_path / "inventory", fleet.connection_vars(),
                                     {"gpu1": {"ansible_host": gpu1.address}})
    write_tuned(fleet, gpu1, f"{CONFIG_DIR}/configs/triton_3_6_0")

    def run(version: str, extravars: dict | None = None, **options):
        extravars = {"upgrade_version": version, "upgrade_wheelhouse": "/srv/wheelhouse",
                     "tuning_run_root": str(tmp_path / "runs"), "run_id": "upgrade-test",
                     "upgrade_server_args": SERVER_ARGS, "upgrade_moe_config_dir": CONFIG_DIR,
                     # the install, the prediction and the carry only (test_upgrade_canary.py switches and measures)
                     "upgrade_canary_ab": False, **(extravars or {})}
        return runner.run(UPGRADE, extravars, inventory=inventory, **options)

    yield run
    fleet.run(gpu1, "rm", "-rf", "/opt/sglang/venvs", CONFIG_DIR)


def write_tuned(fleet, gpu1, directory: str) -> None:
    fleet.run(gpu1, "python3", "-c", "import json, pathlib, sys; d = pathlib.Path(sys.argv[1]); "
              "d.mkdir(parents=True, exist_ok=True); [(d / n).write_text(sys.argv[2]) for n in sys.argv[3:]]",
              directory, json.dumps(TUNED), UP, DOWN)


def serving_configs(fleet, gpu1) -> str:
    """The configs directory of the serving release's own config module (where 0.5.11 reads them without
    SGLANG_MOE_CONFIG_DIR)."""
    probe = fleet.run(gpu1, SERVING_PYTHON, "-c", PROBE).stdout
    return json.loads(probe)["config_module_dir"] + "/configs"


def serving_sglang(fleet, gpu1) -> str:
    return fleet.run(gpu1, SERVING_PYTHON, "-c", "import sglang; print(sglang.__version__)").stdout.strip()


def test_two_releases_install_beside_the_serving_one_and_the_prediction_says_what_each_keeps(upgrade, fleet, gpu1,
                                                                                            tmp_path):
    checked = upgrade("0.5.24", check=True)
    assert checked.status == "successful", checked.stdout
    plan = task_results(checked, INSTALL).get("gpu1")
    assert plan is not None, checked.stdout
    assert plan["changed"] is True and plan["plan"]["triton"] == {"version": "3.9.0", "from": "pinned by sglang 0.5.24"}
    assert fleet.run(gpu1, "test", "-e", "/opt/sglang/venvs", check=False).returncode == 1

    predictions, run_dir = {}, tmp_path / "runs" / "upgrade-test" / "upgrade" / "gpu1"
    for version in ("0.5.23", "0.5.24"):
        result = upgrade(version)
        assert result.status == "successful", result.stdout
        assert task_results(result, INSTALL)["gpu1"]["python"] == f"/opt/sglang/venvs/{version}/bin/python"
        predictions[version] = json.loads((run_dir / "prediction.json").read_text())
    installed = fleet.run(gpu1, "sh", "-c", "cat /opt/sglang/venvs/*/llmops-release.json").stdout
    assert installed.count('"state": "installed"') == 2
    assert serving_sglang(fleet, gpu1) == "0.5.11"

    kept, future = predictions["0.5.23"], predictions["0.5.24"]
    assert kept["lookup_source"] == future["lookup_source"] == {"current": "release", "new": "release"}
    assert [row["verdict"] for row in kept["moe"]] == ["kept", "kept"]
    assert [row["current"]["path"] for row in kept["moe"]] == [f"{CONFIG_DIR}/configs/triton_3_6_0/{UP}",
                                                               f"{CONFIG_DIR}/configs/triton_3_6_0/{DOWN}"]
    assert future["versions"]["new"]["triton"] == "3.9.0"
    assert [(row["verdict"], row["new"]["path"]) for row in future["moe"]] == [
        ("fallback", f"{CONFIG_DIR}/configs/triton_3_6_0/{UP}"), ("fallback", f"{CONFIG_DIR}/configs/triton_3_6_0/{DOWN}")]
    assert kept["flags"]["errors"] == [] and kept["flags"]["warnings"]
    assert future["flags"]["errors"][0].startswith("server_args.enable_flashinfer_allreduce_fusion: SGLang 0.5.24 has "
                                                   "no --enable-flashinfer-allreduce-fusion")
    assert future["ready"] is False
    report = (run_dir / "prediction.md").read_text()
    assert f"- up {UP}: fallback: falls back to {CONFIG_DIR}/configs/triton_3_6_0/{UP}" in report

    again = upgrade("0.5.24")
    assert again.status == "successful" and task_results(again, INSTALL)["gpu1"]["changed"] is False


def test_configs_only_the_serving_venv_holds_are_carried_when_triton_and_kernel_are_unchanged(upgrade, fleet, gpu1,
                                                                                              tmp_path):
    serving = f"{serving_configs(fleet, gpu1)}/triton_3_6_0"
    write_tuned(fleet, gpu1, serving)
    try:
        result = upgrade("0.5.23", {"upgrade_moe_config_dir": None})
        assert result.status == "successful", result.stdout
        first = task_results(result, PREDICT)["gpu1"]
        assert [row["verdict"] for row in first["moe"]] == ["lost", "lost"]
        assert first["carry"] == [{"src": f"{serving}/{UP}", "name": UP}, {"src": f"{serving}/{DOWN}", "name": DOWN}]
        assert first["retune"] == []

        run_dir = tmp_path / "runs" / "upgrade-test" / "upgrade" / "gpu1"
        carried = json.loads((run_dir / "carry.json").read_text())
        assert carried["changed"] is True
        after = json.loads((run_dir / "prediction.json").read_text())
        assert [row["verdict"] for row in after["moe"]] == ["kept", "kept"]
        assert all(row["new"]["path"].startswith("/opt/sglang/venvs/0.5.23/") for row in after["moe"])
        assert after["carry"] == []
        assert serving_sglang(fleet, gpu1) == "0.5.11"
    finally:
        fleet.run(gpu1, "rm", "-f", f"{serving}/{UP}", f"{serving}/{DOWN}")
