"""The lease between a controller and the host's guard, and the guard program's restore (issue #15 item 7)."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from ansible_collections.llmops.sglang.plugins.module_utils import server_guard_program as program
from ansible_collections.llmops.sglang.plugins.module_utils.server_guard import (
    controller_connected, renew_leases, snapshot_files, write_json)

REPO_ROOT = Path(__file__).resolve().parents[4]


def _arm(root: Path, service: str, lease_s: float, expires_at: float) -> Path:
    path = root / service / "state.json"
    path.parent.mkdir(parents=True)
    write_json(str(path), {"service": f"{service}.service", "lease_s": lease_s, "expires_at": expires_at})
    return path


def test_renewal_pushes_every_armed_lease_past_now(tmp_path):
    a = _arm(tmp_path, "sglang-a", 30, 1.0)
    b = _arm(tmp_path, "sglang-b", 300, 2.0)
    assert sorted(renew_leases(str(tmp_path), now=1000.0)) == ["sglang-a.service", "sglang-b.service"]
    assert json.loads(a.read_text())["expires_at"] == 1030.0
    assert json.loads(b.read_text())["expires_at"] == 1300.0


def test_nothing_armed_renews_nothing(tmp_path):
    assert renew_leases(str(tmp_path / "none")) == []


def test_controller_connection_seen_through_the_pipe_behind_stdout(tmp_path):
    read_end, write_end = os.pipe()
    try:
        assert controller_connected(write_end) is True
        os.close(read_end)
        assert controller_connected(write_end) is False
    finally:
        os.close(write_end)
    with open(tmp_path / "file", "w", encoding="utf-8") as handle:
        assert controller_connected(handle.fileno()) is None  # async task output: tells nothing


def test_a_module_whose_controller_went_away_ends_itself_and_its_tuner(tmp_path):
    """A child with a guard armed, its stdout a pipe (as under sshd), starts a process group like the tuner;
    when the reading end goes away it stops renewing, ends the group and exits."""
    root, work_dir = tmp_path / "guard", tmp_path / "work"
    state = _arm(root, "sglang", 600, time.time() + 600)
    child = textwrap.dedent(f"""
        import subprocess, sys, time
        from ansible_collections.llmops.sglang.plugins.module_utils.server_guard import guarded_work
        with guarded_work(root={str(root)!r}, work_dir={str(work_dir)!r}, every_s=0.2) as work:
            tuner = subprocess.Popen(["sleep", "300"], start_new_session=True)
            work.add_process_group(tuner.pid)
            print(tuner.pid, flush=True)
            time.sleep(60)
        """)
    proc = subprocess.Popen([sys.executable, "-c", child], stdout=subprocess.PIPE, cwd=REPO_ROOT / "collections")
    tuner_pid = int(proc.stdout.readline())
    renewed = json.loads(state.read_text())["expires_at"]
    time.sleep(0.5)
    assert json.loads(state.read_text())["expires_at"] > renewed, "renews while the controller reads"
    assert list(work_dir.iterdir()), "registered where the guard finds it"
    proc.stdout.close()
    assert proc.wait(timeout=10) == 75
    deadline = time.monotonic() + 5
    while _alive(tuner_pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not _alive(tuner_pid), "the tuner's process group must end with its module"
    assert list(work_dir.iterdir()) == []


def _alive(pid: int) -> bool:
    try:
        os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        pass
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"


@pytest.fixture
def systemctl_log(tmp_path, monkeypatch):
    """systemctl as seen by the guard program: records its arguments (the real one is used on sandbox hosts)."""
    log = tmp_path / "systemctl.log"
    monkeypatch.setattr(program, "systemctl", lambda *args: log.open("a").write(" ".join(args) + "\n") and 0)
    return log


def test_restore_puts_the_snapshot_back_and_restarts(tmp_path, systemctl_log):
    unit, env, created = tmp_path / "sglang.service", tmp_path / "sglang.env", tmp_path / "configs" / "new.json"
    unit.write_text("adopted unit\n")
    env.write_text("SGLANG_API_KEY=k\n")
    snap = tmp_path / "snap"
    snap.mkdir()
    files = snapshot_files([(str(unit), 0o644), (str(env), 0o600)], str(snap))
    files.append({"path": str(created), "source": None, "mode": 0o644})
    unit.write_text("candidate unit\n")
    env.unlink()
    created.parent.mkdir()
    created.write_text("{}")
    record = program.restore({"work_dir": str(tmp_path / "work"), "files": files, "service": "sglang.service",
                              "stop_units": ["ray-head.service"], "expires_at": 1.0, "armed_by": "run/flags"})
    assert unit.read_text() == "adopted unit\n"
    assert env.read_text() == "SGLANG_API_KEY=k\n" and env.stat().st_mode & 0o777 == 0o600
    assert not created.exists()
    # the start limit an abandoned candidate's crash loop hit must not refuse the adopted configuration's start
    assert systemctl_log.read_text().splitlines() == ["stop ray-head.service", "daemon-reload",
                                                      "reset-failed sglang.service", "restart sglang.service"]
    assert record["action"] == "restart" and record["armed_by"] == "run/flags"


def test_nothing_to_put_back_and_serving_means_no_restart(tmp_path, systemctl_log):
    unit = tmp_path / "sglang.service"
    unit.write_text("adopted unit\n")
    snap = tmp_path / "snap"
    snap.mkdir()
    files = snapshot_files([(str(unit), 0o644), (str(tmp_path / "absent.env"), 0o600)], str(snap))
    record = program.restore({"work_dir": str(tmp_path / "work"), "files": files, "service": "sglang.service",
                              "expires_at": 1.0})
    assert record["action"] == "none"
    assert systemctl_log.read_text().splitlines() == ["is-active --quiet sglang.service"]


def test_guard_waits_for_the_lease_then_restores_once(tmp_path, systemctl_log):
    unit = tmp_path / "sglang.service"
    unit.write_text("candidate\n")
    source = tmp_path / "adopted"
    source.write_text("adopted\n")
    state_path = tmp_path / "state.json"
    expires = time.time() + 1.0
    write_json(str(state_path), {"service": "sglang.service", "guard_unit": "llmops-guard-sglang.service",
                                 "work_dir": str(tmp_path / "work"), "record_path": str(tmp_path / "restored.json"),
                                 "files": [{"path": str(unit), "source": str(source), "mode": 0o644}],
                                 "expires_at": expires, "lease_s": 1})
    assert program.main(str(state_path)) == 0
    assert time.time() >= expires
    assert unit.read_text() == "adopted\n"
    assert not state_path.exists()
    assert json.loads((tmp_path / "restored.json").read_text())["service"] == "sglang.service"
    assert systemctl_log.read_text().splitlines()[-1] == "disable llmops-guard-sglang.service"


def test_a_disarmed_guard_exits_without_touching_anything(tmp_path, systemctl_log):
    assert program.main(str(tmp_path / "gone.json")) == 0
    assert not systemctl_log.exists()


def test_abandoned_work_is_ended_before_the_restore(tmp_path):
    """A module registered as llmops modules register (Work) and the process group it started both end."""
    work_dir = tmp_path / "work"
    child = textwrap.dedent(f"""
        import subprocess, time
        from ansible_collections.llmops.sglang.plugins.module_utils.server_guard import Work
        work = Work({str(work_dir)!r})
        tuner = subprocess.Popen(["sleep", "300"], start_new_session=True)
        work.add_process_group(tuner.pid)
        print(tuner.pid, flush=True)
        time.sleep(300)
        """)
    module = subprocess.Popen([sys.executable, "-c", child], stdout=subprocess.PIPE, cwd=REPO_ROOT / "collections")
    tuner_pid = int(module.stdout.readline())
    program.end_abandoned_work(str(work_dir))
    assert module.wait(timeout=5) == -signal.SIGTERM
    assert _ended(tuner_pid), "the module's process group must end with it"
    assert list(work_dir.iterdir()) == []


def _ended(pid: int, within_s: float = 5.0) -> bool:
    deadline = time.monotonic() + within_s
    while _alive(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    return not _alive(pid)


def _record(work_dir: Path, work: dict) -> Path:
    work_dir.mkdir(exist_ok=True)
    path = work_dir / "4242.json"
    path.write_text(json.dumps(work))
    return path


def test_a_pid_given_to_another_process_since_is_not_signalled(tmp_path):
    """A record whose module and group have ended, their numbers since given to another process (same PID, another
    start time): the guard leaves that process alone and drops the record."""
    other = subprocess.Popen(["sleep", "300"], start_new_session=True)
    try:
        before = program.process_identity(other.pid)["start"] - 1  # the registered process started earlier
        record = _record(tmp_path / "work", {"pid": other.pid, "start": before, "cgroup": None,
                                             "groups": [{"pgid": other.pid, "start": before}]})
        program.end_abandoned_work(str(tmp_path / "work"))
        assert other.poll() is None, "a process that only has a registered PID must not be signalled"
        assert not record.exists()
    finally:
        other.kill()
        other.wait()


@pytest.mark.parametrize("same_cgroup", [True, False])
def test_a_group_whose_leader_exited_ends_only_the_members_still_ours(tmp_path, same_cgroup):
    """The tuner's leader exited and left a worker in its group: the worker is ended, being in the group, started
    after the leader and in the module's cgroup; in another cgroup (the group's number given to a new process
    tree since) it is left alone."""
    leader = subprocess.Popen(["sh", "-c", "sleep 300 & echo $!"], stdout=subprocess.PIPE, start_new_session=True)
    worker = int(leader.stdout.readline())
    started = program.process_identity(leader.pid)["start"]  # a zombie until reaped: still readable
    leader.wait()
    cgroup = program.process_identity(os.getpid())["cgroup"] if same_cgroup else "0::/another.scope\n"
    try:
        _record(tmp_path / "work", {"pid": leader.pid, "start": started, "cgroup": cgroup,
                                    "groups": [{"pgid": leader.pid, "start": started}]})
        program.end_abandoned_work(str(tmp_path / "work"))
        assert _ended(worker, within_s=2.0 if same_cgroup else 0.5) is same_cgroup
    finally:
        if _alive(worker):
            os.kill(worker, signal.SIGKILL)
