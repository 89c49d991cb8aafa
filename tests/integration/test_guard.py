"""The host never stays on an unadopted candidate because the controller went away (issue #15 item 7):
Ctrl-C of ansible-playbook in the middle of a candidate's sweep; the host's guard puts the adopted unit back."""
from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from tests.integration.sglang_server import BASELINE, deploy, disarm_guards, host_state, http_status

pytestmark = pytest.mark.sandbox
REPO_ROOT = Path(__file__).resolve().parents[2]
PLAYBOOK = Path(__file__).parent / "playbooks" / "guard_interrupt.yml"
GUARD = Path(__file__).parent / "playbooks" / "guard.yml"
UNRELATED_JOB = Path(__file__).parent / "playbooks" / "unrelated_job.yml"
LEASE_S = 20
CANDIDATE = {"enable_fused_moe_sum_all_reduce": True}
CANDIDATE_FLAG = "--enable-fused-moe-sum-all-reduce"


def _start_playbook(inventory: Path, **extra_vars) -> subprocess.Popen:
    """ansible-playbook as a user starts it in a terminal: its own process group, which Ctrl-C signals whole."""
    variables = {"guard_lease": LEASE_S, "adopted_args": BASELINE, "candidate_args": CANDIDATE, **extra_vars}
    command = [str(Path(sys.executable).parent / "ansible-playbook"), str(PLAYBOOK), "-i", str(inventory),
               "-e", json.dumps(variables)]
    env = {**os.environ, "ANSIBLE_CONFIG": str(REPO_ROOT / "ansible.cfg"),
           "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}"}
    return subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True)


def _wait_for(predicate, timeout_s: float, what: str) -> float:
    started = time.monotonic()
    while time.monotonic() - started < timeout_s:
        if predicate():
            return time.monotonic() - started
        time.sleep(0.5)
    raise AssertionError(f"not within {timeout_s}s: {what}")


# The registered modules (work files are named by PID) that run on the sglang venv's python: the bench task's
# interpreter in guard_interrupt.yml (the server module's deploy, registered too, runs on /usr/bin/python3).
_SWEEP_PIDS = ('for f in /run/llmops-sglang/work/*.json; do pid=$(basename "$f" .json); '
               'tr "\\0" " " < /proc/$pid/cmdline 2>/dev/null | grep -q "^/opt/sglang/venv/bin/python" && echo $pid; '
               'done')


def _sweep_pid(fleet, host) -> int | None:
    """The PID of the candidate's sweep (the bench module) while it runs, else None."""
    pids = fleet.run(host, "sh", "-c", _SWEEP_PIDS, check=False).stdout.split()
    return int(pids[0]) if pids and CANDIDATE_FLAG in host_state(fleet, host)[0] else None


def _bench_running(fleet, host) -> bool:
    return _sweep_pid(fleet, host) is not None


@pytest.fixture
def adopted_baseline(runner, gpu1, fleet):
    result, _ = deploy(runner, BASELINE)
    assert result.status == "successful", result.stdout
    yield host_state(fleet, gpu1)[0]
    disarm_guards(fleet, gpu1)


def test_ctrl_c_during_a_candidates_sweep_puts_the_adopted_unit_back(fleet, gpu1, adopted_baseline):
    playbook = _start_playbook(fleet.inventory_file)
    try:
        _wait_for(lambda: _bench_running(fleet, gpu1), 240, "the candidate's sweep started")
    except AssertionError:
        playbook.kill()
        raise AssertionError(playbook.communicate()[0][-3000:]) from None
    os.killpg(playbook.pid, signal.SIGINT)  # what the terminal sends on Ctrl-C
    interrupted = time.monotonic()
    output = playbook.communicate(timeout=60)[0]
    assert playbook.returncode != 0, output[-2000:]

    # The abandoned sweep ends itself once its SSH channel is gone, so the lease runs out LEASE_S later.
    _wait_for(lambda: fleet.run(gpu1, "sh", "-c", "ls /run/llmops-sglang/work/ 2>/dev/null", check=False)
              .stdout.strip() == "", 30, "the abandoned sweep ended")
    _wait_for(lambda: host_state(fleet, gpu1)[0] == adopted_baseline and host_state(fleet, gpu1)[2] == "active"
              and http_status(fleet, gpu1, 30000) == 200, LEASE_S + 90, "the adopted unit serves again")
    restored_after = time.monotonic() - interrupted
    print(f"adopted configuration serving again {restored_after:.1f}s after Ctrl-C (lease {LEASE_S}s)")
    assert restored_after < LEASE_S + 90
    record = fleet.run(gpu1, "cat", "/var/lib/llmops-sglang/guard/sglang.restored.json").stdout
    assert '"action": "restart"' in record and "guard-interrupt-test" in record
    assert fleet.run(gpu1, "systemctl", "is-enabled", "llmops-guard-sglang.service", check=False).stdout.strip() \
        == "disabled"
    assert "bench" not in fleet.run(gpu1, "ps", "-eo", "args").stdout


def test_a_silent_partition_during_a_candidates_sweep_puts_the_adopted_unit_back(fleet, gpu1, adopted_baseline):
    """Issue 36 item 11: every packet between the controller and the host dropped in the middle of the candidate's
    sweep, the controller's ssh multiplexed through a ControlMaster (ansible's default). No FIN or RST arrives, so the
    SSH channel never hangs up; the sweep (long enough to run for hours) stops renewing once its heartbeat goes
    unacknowledged, and the guard fires a lease later and ends it. Before, the module renewed until TCP keepalive gave
    up (hours)."""
    control_dir = Path(tempfile.mkdtemp(prefix="llmops-cm-"))  # short: a ControlPath is a unix socket's path
    master = control_dir / "gpu1"
    playbook = _start_playbook(fleet.inventory_file, bench_repeats=100000,
                               ansible_ssh_args=f"-o ControlMaster=auto -o ControlPersist=60s -o ControlPath={master}")
    try:
        try:
            _wait_for(lambda: _bench_running(fleet, gpu1), 240, "the candidate's sweep started")
        except AssertionError:
            _kill(playbook)
            raise AssertionError(playbook.communicate()[0][-3000:]) from None
        assert master.is_socket(), "the controller's ssh goes through its ControlMaster"
        sweep = _sweep_pid(fleet, gpu1)
        with fleet.partitioned(gpu1):
            partitioned = time.monotonic()
            _wait_for(lambda: host_state(fleet, gpu1)[0] == adopted_baseline and host_state(fleet, gpu1)[2] == "active"
                      and http_status(fleet, gpu1, 30000) == 200, LEASE_S + 90, "the adopted unit serves again")
            restored_after = time.monotonic() - partitioned
            print(f"adopted configuration serving again {restored_after:.1f}s after the partition (lease {LEASE_S}s)")
            assert playbook.poll() is None, "the controller was told nothing either: a partition, not a hang-up"
            _kill(playbook)  # before the partition heals: nothing of this run may reach the host afterwards
        assert restored_after < LEASE_S + 90
        record = fleet.run(gpu1, "cat", "/var/lib/llmops-sglang/guard/sglang.restored.json").stdout
        assert '"action": "restart"' in record and "guard-interrupt-test" in record
        assert fleet.run(gpu1, "test", "-e", f"/proc/{sweep}", check=False).returncode != 0, "the guard ended the sweep"
    finally:
        _kill(playbook)
        subprocess.run(["ssh", "-o", f"ControlPath={master}", "-O", "exit", "gpu1"], capture_output=True, check=False)
        shutil.rmtree(control_dir, ignore_errors=True)
    assert fleet.port_state(gpu1) == "forwarding", "the partition outlived its test"
    with socket.create_connection((gpu1.address, 22), timeout=10) as ssh:
        assert ssh.recv(4) == b"SSH-", "the host is reachable again"


def _kill(playbook: subprocess.Popen) -> None:
    if playbook.poll() is None:
        os.killpg(playbook.pid, signal.SIGKILL)
        playbook.wait()


def test_a_finished_stage_disarms_and_nothing_is_restored(fleet, gpu1, runner, adopted_baseline):
    result = runner.run(PLAYBOOK, {"guard_lease": LEASE_S, "adopted_args": BASELINE,
                                   "candidate_args": {"max_running_requests": 8}, "bench_repeats": 1}, limit="gpu1")
    assert result.status == "successful", result.stdout
    assert fleet.run(gpu1, "test", "-e", "/var/lib/llmops-sglang/guard/sglang", check=False).returncode != 0
    assert fleet.run(gpu1, "test", "-e", "/etc/systemd/system/llmops-guard-sglang.service",
                     check=False).returncode != 0


def test_a_reboot_mid_stage_comes_back_on_the_adopted_unit(fleet, gpu1, runner, adopted_baseline):
    """The controller and the host go down together while a candidate serves: after the reboot the enabled
    candidate starts, the enabled guard finds the lease unrenewed and puts the adopted unit back."""
    armed = runner.run(GUARD, {"guard_lease": LEASE_S, "guard_armed_by": "reboot-test"}, limit="gpu1")
    assert armed.status == "successful", armed.stdout
    result, _ = deploy(runner, {**BASELINE, **CANDIDATE}, guard_holder="reboot-test")  # the stage's own deploy
    assert result.status == "successful" and CANDIDATE_FLAG in host_state(fleet, gpu1)[0]
    fleet.reboot(gpu1)
    rebooted = time.monotonic()
    _wait_for(lambda: host_state(fleet, gpu1)[0] == adopted_baseline and host_state(fleet, gpu1)[2] == "active"
              and http_status(fleet, gpu1, 30000) == 200, LEASE_S + 120, "the adopted unit serves after the reboot")
    print(f"adopted configuration serving {time.monotonic() - rebooted:.1f}s after the reboot (lease {LEASE_S}s)")
    assert fleet.run(gpu1, "systemctl", "is-enabled", "sglang.service").stdout.strip() == "enabled"
    assert "reboot-test" in fleet.run(gpu1, "cat", "/var/lib/llmops-sglang/guard/sglang.restored.json").stdout


def test_an_unrelated_job_does_not_keep_an_abandoned_stages_guard_alive(fleet, gpu1, runner, adopted_baseline):
    """Issue 36 item 8: every llmops module renewed every guard; a job of gpu_facts every 5 s for LEASE_S + 40 s kept
    the abandoned stage's candidate serving. Only the holder renews: the guard fires within the job."""
    armed = runner.run(GUARD, {"guard_lease": LEASE_S, "guard_armed_by": "abandoned-stage"}, limit="gpu1")
    assert armed.status == "successful", armed.stdout
    result, _ = deploy(runner, {**BASELINE, **CANDIDATE}, guard_holder="abandoned-stage")  # then the stage is lost
    assert result.status == "successful" and CANDIDATE_FLAG in host_state(fleet, gpu1)[0]
    job = runner.run(UNRELATED_JOB, {"job_rounds": (LEASE_S + 40) // 5}, limit="gpu1")
    assert job.status == "successful", job.stdout
    record = fleet.run(gpu1, "cat", "/var/lib/llmops-sglang/guard/sglang.restored.json", check=False).stdout
    assert "abandoned-stage" in record, "the guard fired while the unrelated job ran"
    _wait_for(lambda: host_state(fleet, gpu1)[0] == adopted_baseline and host_state(fleet, gpu1)[2] == "active"
              and http_status(fleet, gpu1, 30000) == 200, 90, "the adopted unit serves again")
