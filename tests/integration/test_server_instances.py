"""#4 on a sandbox host: two SGLang instances side by side (own name, port, unit, EnvironmentFile, backup and
journal), changed, stopped and removed one at a time while the other keeps running."""
from __future__ import annotations

import pytest

from tests.integration.sglang_server import BASELINE, deploy, host_state, http_status

pytestmark = pytest.mark.sandbox
INSTANCES = {
    "sglang-a": {"sglang_service_name": "sglang-a", "sglang_server_port": 30001, "sglang_server_api_key": "key-a-51c7"},
    "sglang-b": {"sglang_service_name": "sglang-b", "sglang_server_port": 30002, "sglang_server_api_key": "key-b-83e0"},
}
CHANGED = {**BASELINE, "cuda_graph_max_bs": 32}
BACKUP_SUFFIX = ".llmops-backup"


def unit_path(name: str) -> str:
    return f"/etc/systemd/system/{name}.service"


def env_path(name: str) -> str:
    return f"/etc/sglang/{name}.env"


def read(fleet, host, path: str) -> str | None:
    result = fleet.run(host, "cat", path, check=False)
    return result.stdout if result.returncode == 0 else None


def deploy_instance(runner, name: str, server_args: dict = BASELINE, **extra) -> dict:
    result, res = deploy(runner, server_args, **INSTANCES[name], **extra)
    assert result.status == "successful", result.stdout
    return res


@pytest.fixture(scope="module")
def instances(runner):
    """Both instances deployed with the baseline; removed again when the module is done."""
    deployed = {name: deploy_instance(runner, name) for name in INSTANCES}
    yield deployed
    for name in INSTANCES:
        deploy_instance(runner, name, sglang_server_state="absent")


def test_two_instances_run_side_by_side(fleet, gpu1, instances):
    for name, port, other_port in (("sglang-a", 30001, 30002), ("sglang-b", 30002, 30001)):
        unit, invocation, active = host_state(fleet, gpu1, name)
        assert active == "active" and http_status(fleet, gpu1, port) == 200
        assert f"--port {port}" in unit and f"SyslogIdentifier={name}" in unit and "key-" not in unit
        assert read(fleet, gpu1, env_path(name)) == f"SGLANG_API_KEY={INSTANCES[name]['sglang_server_api_key']}\n"
        log = instances[name]["startup_log"]
        assert f"Uvicorn running on http://127.0.0.1:{port}" in log and f":{other_port}" not in log
        journal = fleet.run(gpu1, "journalctl", "--no-pager", "-o", "cat", "-u", f"{name}.service").stdout
        assert f":{other_port}" not in journal, "each instance has its own journal"
        assert instances[name]["invocation_id"] == invocation


def test_changing_one_instance_leaves_the_other_alone(fleet, runner, gpu1, instances):
    for changed, untouched in (("sglang-a", "sglang-b"), ("sglang-b", "sglang-a")):
        unit_before, invocation_before, _ = host_state(fleet, gpu1, changed)
        other_before = host_state(fleet, gpu1, untouched)
        res = deploy_instance(runner, changed, CHANGED)
        assert res["changed"] and res["restarted"] and "--cuda-graph-max-bs 32" in " ".join(res["command"])
        unit, invocation, active = host_state(fleet, gpu1, changed)
        assert active == "active" and invocation != invocation_before and "--cuda-graph-max-bs 32" in unit
        assert read(fleet, gpu1, unit_path(changed) + BACKUP_SUFFIX) == unit_before, "its own backup"
        assert host_state(fleet, gpu1, untouched) == other_before, "the other instance was not restarted"
    # Each instance kept its own backup: a's was not overwritten by b's change.
    assert "SyslogIdentifier=sglang-a" in read(fleet, gpu1, unit_path("sglang-a") + BACKUP_SUFFIX)


def test_stop_then_remove_one_instance(fleet, runner, gpu1, instances):
    other_before = host_state(fleet, gpu1, "sglang-b")

    stopped = deploy_instance(runner, "sglang-a", sglang_server_state="stopped")
    assert stopped["changed"] is True
    unit, _, active = host_state(fleet, gpu1, "sglang-a")
    assert active == "inactive" and "--port 30001" in unit, "stopped keeps the unit"
    assert http_status(fleet, gpu1, 30001) == 0
    assert deploy_instance(runner, "sglang-a", sglang_server_state="stopped")["changed"] is False

    removed = deploy_instance(runner, "sglang-a", sglang_server_state="absent")
    assert removed["changed"] is True
    assert read(fleet, gpu1, unit_path("sglang-a")) is None and read(fleet, gpu1, env_path("sglang-a")) is None
    load_state = fleet.run(gpu1, "systemctl", "show", "-p", "LoadState", "--value", "sglang-a.service").stdout
    assert load_state.strip() == "not-found"
    assert deploy_instance(runner, "sglang-a", sglang_server_state="absent")["changed"] is False

    assert host_state(fleet, gpu1, "sglang-b") == other_before, "the other instance kept running untouched"
    assert http_status(fleet, gpu1, 30002) == 200


def test_two_names_of_different_services_are_refused_before_any_change(fleet, runner, gpu1):
    """sglang_server_name (deprecated) names another service than sglang_service_name (as the example inventory sets
    it): the role fails naming both before it changes anything, where it deployed a unit the stages' guard did not
    watch."""
    result, _ = deploy(runner, BASELINE, sglang_service_name="sglang", sglang_server_name="sglang-old",
                       sglang_server_port=30005)
    assert result.status == "failed"
    assert [(f.task, "sglang_service_name ('sglang') and sglang_server_name ('sglang-old')" in f.message)
            for f in result.failures] == [("Resolve the service name", True)]
    assert read(fleet, gpu1, unit_path("sglang-old")) is None
