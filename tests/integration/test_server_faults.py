"""llmops.sglang.server under faults on a sandbox host: a failed start that also moved the port rolls back
to the previous unit on its own port, fast; a port held by another process, a wrong value type and a
missing model path fail before anything changes (check mode too), naming the field."""
from __future__ import annotations

import time
from pathlib import Path

import pytest

from tests.integration.sglang_server import BASELINE, deploy, host_state, http_status

pytestmark = pytest.mark.sandbox

PORT = 30000  # the role's default, where BASELINE serves
NEW_PORT = 30011
SQUATTER = "llmops-test-port-squatter.service"


def server_snapshot(fleet, host) -> tuple:
    """(unit text, invocation id, active state, MainPID) of sglang.service."""
    main_pid = fleet.run(host, "systemctl", "show", "-p", "MainPID", "--value", "sglang.service").stdout.strip()
    return (*host_state(fleet, host), main_pid)


@pytest.fixture
def baseline(fleet, runner, gpu1) -> tuple:
    """BASELINE serving on PORT; the snapshot of it."""
    result, _ = deploy(runner, BASELINE)
    assert result.status == "successful", result.stdout
    assert http_status(fleet, gpu1, PORT) == 200
    return server_snapshot(fleet, gpu1)


def test_failed_start_on_a_new_port_rolls_back_on_the_previous_port_fast(fleet, runner, gpu1, baseline):
    # too small a static fraction: "Not enough memory" at start (see test_server_deploy), and a new port
    result, res = deploy(runner, {**BASELINE, "mem_fraction_static": 0.5},
                         sglang_server_port=NEW_PORT, sglang_server_ready_timeout=300)
    assert result.status == "failed", result.stdout
    # Fast: the wait ended when the start died, not at ready_timeout (that reason would be "not ready within
    # 300s"); the rollback's wait ended ready, so it asked the previous unit's own port (the new one never answers).
    assert "the service stopped while starting" in res["msg"], res["msg"]
    assert res["failure"]["kind"] == "oom" and res["rolled_back"] is True, res["msg"]
    assert "the previous unit was restored and is running again" in res["msg"]
    print(f"rollback_seconds={res['rollback_seconds']}")
    unit, invocation, active, _ = server_snapshot(fleet, gpu1)
    assert unit == baseline[0] and active == "active" and invocation != baseline[1]
    assert http_status(fleet, gpu1, PORT) == 200
    assert http_status(fleet, gpu1, NEW_PORT) == 0


@pytest.fixture
def squatter(fleet, gpu1):
    """Another process (its own transient unit) listening on NEW_PORT; stopped afterwards."""
    fleet.run(gpu1, "systemd-run", f"--unit={SQUATTER}", "--collect", "--quiet",
              "python3", "-m", "http.server", "--bind", "127.0.0.1", str(NEW_PORT))
    try:
        deadline = time.monotonic() + 20
        while http_status(fleet, gpu1, NEW_PORT, "/") != 200:
            assert time.monotonic() < deadline, "the squatter never listened"
            time.sleep(0.2)
        yield fleet.run(gpu1, "systemctl", "show", "-p", "MainPID", "--value", SQUATTER).stdout.strip()
    finally:
        fleet.run(gpu1, "systemctl", "stop", SQUATTER, check=False)


@pytest.mark.parametrize("check", [False, True], ids=["apply", "check_mode"])
def test_port_held_by_another_process_fails_before_any_change(fleet, runner, gpu1, baseline, squatter, check):
    result, res = deploy(runner, BASELINE, sglang_server_port=NEW_PORT, check=check)
    assert result.status == "failed", result.stdout
    msg = res["msg"]
    assert msg.startswith("cannot deploy, nothing was changed: port: 127.0.0.1:30011 is already in use by "
                          f"pid {squatter} (")
    assert "http.server" in msg and SQUATTER in msg, msg
    assert res["actions"] == []
    assert server_snapshot(fleet, gpu1) == baseline, "unit and running server must be untouched"
    assert http_status(fleet, gpu1, PORT) == 200


@pytest.mark.parametrize("check", [False, True], ids=["apply", "check_mode"])
def test_wrong_value_type_fails_before_any_change(fleet, runner, gpu1, baseline, check):
    result, res = deploy(runner, {**BASELINE, "tp_size": "four"}, check=check)
    assert result.status == "failed", result.stdout
    assert "server_args.tp_size: invalid int value 'four' (SGLang's parser)" in res["msg"], res["msg"]
    assert res["errors"] == ["server_args.tp_size: invalid int value 'four' (SGLang's parser)"]
    assert server_snapshot(fleet, gpu1) == baseline


@pytest.mark.parametrize("check", [False, True], ids=["apply", "check_mode"])
def test_missing_model_path_fails_before_any_change(fleet, runner, gpu1, baseline, check):
    result, res = deploy(runner, BASELINE, sglang_server_model_path="/srv/models/does-not-exist", check=check)
    assert result.status == "failed", result.stdout
    assert res["errors"] == ["model_path: /srv/models/does-not-exist does not exist on the host"], res["msg"]
    assert server_snapshot(fleet, gpu1) == baseline


PWNED = "/run/llmops-test-pwned"
INJECTED = f"x\nExecStartPre=+/usr/bin/touch {PWNED}\nDescription=y"


@pytest.mark.parametrize(("server_args", "role_vars", "field"), [
    (BASELINE, {"sglang_server_environment": {"CUDA_VISIBLE_DEVICES": "0,1,2,3", "FOO": INJECTED}}, "environment.FOO"),
    ({**BASELINE, "chat_template": "chatml\n"}, {}, "server_args.chat_template"),
    (BASELINE, {"sglang_server_model_path": f"/srv/models/Qwen3.5-122B-A10B\nExecStartPre=+/usr/bin/touch {PWNED}"},
     "model_path"),
], ids=["environment", "block_scalar_server_arg", "model_path"])
def test_a_line_break_in_a_value_cannot_reach_the_unit(fleet, runner, gpu1, baseline, server_args, role_vars, field):
    """The issue's proof: a newline in a value added `ExecStartPre=+...` (run as root) to a unit systemd accepted, and a
    YAML block scalar's trailing newline broke the unit after it was installed. Both are refused before any change."""
    fleet.run(gpu1, "rm", "-f", PWNED)
    result, res = deploy(runner, server_args, **role_vars)
    assert result.status == "failed", result.stdout
    assert res["msg"].startswith("cannot deploy, nothing was changed: "), res["msg"]
    assert any(error.startswith(f"{field}: contains a newline") for error in res.get("errors", [])), res["msg"]
    assert server_snapshot(fleet, gpu1) == baseline, "unit and running server must be untouched"
    assert fleet.run(gpu1, "test", "-e", PWNED, check=False).returncode == 1, "the injected command ran"


TWO_EXEC_START = str(Path(__file__).parent / "playbooks" / "templates" / "two_exec_start.service.j2")


@pytest.mark.parametrize("check", [False, True], ids=["apply", "check_mode"])
def test_a_unit_systemd_refuses_is_never_installed(fleet, runner, gpu1, baseline, check):
    """systemd-analyze verify judges the rendered unit in a temporary file before it replaces the installed one."""
    result, res = deploy(runner, {**BASELINE, "cuda_graph_max_bs": 32}, sglang_server_unit_template=TWO_EXEC_START,
                         check=check)
    assert result.status == "failed", result.stdout
    assert "systemd-analyze verify refuses the rendered unit" in res["msg"], res["msg"]
    assert "more than one ExecStart=" in res["msg"], res["msg"]
    assert res["actions"] == []
    assert server_snapshot(fleet, gpu1) == baseline


WANTS = "/etc/systemd/system/multi-user.target.wants"


@pytest.fixture
def enable_fails(fleet, gpu1):
    """`systemctl enable sglang.service` fails on gpu1: the unit is disabled and its target's wants directory is a
    file; everything is put back afterwards."""
    fleet.run(gpu1, "systemctl", "disable", "sglang.service")
    fleet.run(gpu1, "mv", WANTS, WANTS + ".saved")
    fleet.run(gpu1, "touch", WANTS)
    try:
        yield
    finally:
        fleet.run(gpu1, "rm", "-f", WANTS)
        fleet.run(gpu1, "mv", WANTS + ".saved", WANTS)
        fleet.run(gpu1, "systemctl", "enable", "sglang.service")


def test_a_failure_after_the_unit_is_written_puts_everything_back(fleet, runner, gpu1, baseline, enable_fails):
    """`systemctl enable` fails after the new unit and the API key file were written: both are put back, systemd
    reloaded, and the message says so. The previous server was never stopped. (It stayed installed before, with the
    key file of a deploy that failed.)"""
    result, res = deploy(runner, {**BASELINE, "cuda_graph_max_bs": 32}, sglang_server_api_key="sk-never-kept")
    assert result.status == "failed", result.stdout
    msg = res["msg"]
    assert msg.startswith("systemctl enable sglang.service failed: "), msg
    assert "the previous unit was restored; its server kept running (it was not restarted)" in msg, msg
    assert "put back the previous unit" in msg and "removed the API key file" in msg, msg
    assert res["rolled_back"] is True
    assert server_snapshot(fleet, gpu1) == baseline, "the previous unit must be back and its server never restarted"
    assert fleet.run(gpu1, "ls", "/etc/sglang/", check=False).stdout.split() == [], "no key file, no backup"


def test_a_failed_first_deploy_leaves_no_unit_enabled(fleet, runner, gpu1):
    """With no previous unit, a start that fails stops, disables and removes the new unit: it would crash-loop at every
    boot otherwise. The key file goes with it."""
    deploy(runner, BASELINE, sglang_server_state="absent")
    try:
        result, res = deploy(runner, {**BASELINE, "mem_fraction_static": 0.5}, sglang_server_api_key="sk-first")
        assert result.status == "failed", result.stdout
        assert res["failure"]["kind"] == "oom" and res["rolled_back"] is False, res["msg"]
        assert "there was no previous unit: the new one is disabled and removed" in res["msg"], res["msg"]
        unit, _, active = host_state(fleet, gpu1)
        assert unit == "" and active in ("inactive", "failed", "unknown"), active
        enabled = fleet.run(gpu1, "systemctl", "is-enabled", "sglang.service", check=False)
        assert enabled.returncode != 0 and "enabled" not in enabled.stdout.split(), enabled.stdout
        wants = fleet.run(gpu1, "ls", "/etc/systemd/system/multi-user.target.wants/", check=False).stdout.split()
        assert "sglang.service" not in wants
        assert fleet.run(gpu1, "test", "-e", "/etc/sglang/sglang.env", check=False).returncode == 1
    finally:
        deploy(runner, BASELINE)  # the later tests start from the baseline serving
