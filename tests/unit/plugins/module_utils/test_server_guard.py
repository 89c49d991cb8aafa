"""The lease between a controller and the host's guard, and the guard program's restore (issue #15 item 7)."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest

from ansible_collections.llmops.sglang.plugins.module_utils import server_guard_program as program
from ansible_collections.llmops.sglang.plugins.module_utils.server_guard import (
    HOLDER_ENV, controller_connected, guard_lock, guard_unit_text, lock_path, read_json, renew_leases,
    snapshot_files, write_json)
from ansible_collections.llmops.sglang.plugins.module_utils.controller_link import HEARTBEAT
from ansible_collections.llmops.sglang.plugins.modules import server_guard as guard_module
from tests.unit.tcp_tables import ACKNOWLEDGED, LISTENER, PARTITIONED, SSH_CONNECTION, write_table

REPO_ROOT = Path(__file__).resolve().parents[4]


def _arm(root: Path, service: str, lease_s: float, expires_at: float, armed_by: str = "R/flags") -> Path:
    path = root / service / "state.json"
    path.parent.mkdir(parents=True)
    write_json(str(path), {"service": f"{service}.service", "lease_s": lease_s, "expires_at": expires_at,
                           "armed_by": armed_by})
    return path


def test_renewal_pushes_the_holders_leases_past_now(tmp_path):
    a = _arm(tmp_path, "sglang-a", 30, 1.0)
    b = _arm(tmp_path, "sglang-b", 300, 2.0)
    assert sorted(renew_leases(str(tmp_path), now=1000.0, holder="R/flags")) == ["sglang-a.service", "sglang-b.service"]
    assert json.loads(a.read_text())["expires_at"] == 1030.0
    assert json.loads(b.read_text())["expires_at"] == 1300.0


def test_nothing_armed_renews_nothing(tmp_path):
    assert renew_leases(str(tmp_path / "none"), holder="R/flags") == []


def test_only_the_holder_renews_its_lease(tmp_path, monkeypatch):
    """Issue 36 item 8: any llmops module renewed every guard, so an unrelated job kept an abandoned stage's guard
    alive. A module renews only the guard its environment's holder armed; without a holder, none."""
    abandoned = _arm(tmp_path, "sglang-a", 30, 1.0, armed_by="R1/flags")
    current = _arm(tmp_path, "sglang-b", 30, 1.0, armed_by="R2/baseline")
    monkeypatch.delenv(HOLDER_ENV, raising=False)
    assert renew_leases(str(tmp_path), now=1000.0) == []
    monkeypatch.setenv(HOLDER_ENV, "R2/baseline")
    assert renew_leases(str(tmp_path), now=1000.0) == ["sglang-b.service"]
    assert json.loads(abandoned.read_text())["expires_at"] == 1.0
    assert json.loads(current.read_text())["expires_at"] == 1030.0


def test_a_renewal_waits_for_the_guards_lock_and_never_writes_back_an_older_state(tmp_path):
    """Issue 36 item 8: renewal was a read-modify-write without a lock; one that read before an adoption wrote its
    stale copy (the candidate's snapshot gone) back after it."""
    state = _arm(tmp_path, "sglang", 30, 1.0)
    renewal = threading.Thread(target=renew_leases, kwargs={"root": str(tmp_path), "now": 1000.0, "holder": "R/flags"})
    with guard_lock("sglang", str(tmp_path)):  # an adoption in progress
        renewal.start()
        renewal.join(0.5)
        assert renewal.is_alive(), "the renewal waits for the lock"
        adopted = {**json.loads(state.read_text()), "files": ["adopted snapshot"]}
        write_json(str(state), adopted)
    renewal.join(10)
    assert json.loads(state.read_text()) == {**adopted, "expires_at": 1030.0}
    assert Path(lock_path("sglang", str(tmp_path))).parent == tmp_path / ".locks"


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
        import os, subprocess, sys, time
        os.environ["{HOLDER_ENV}"] = "R/flags"  # what the stage playbook sets for its tasks
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


def test_a_silent_controller_gets_no_renewal_until_it_acknowledges_again(tmp_path):
    """Issue 36 item 11: a silent partition never hangs the SSH channel up, so stdout stays connected. The module's
    SSH connection (SSH_CONNECTION) is looked up in a kernel table the test writes: while the table shows the
    connection retransmitting, the lease is not renewed and the module keeps working (a partition shorter than the
    lease costs nothing); acknowledged again, renewals resume. Heartbeats go to stderr, never into the result."""
    root, table = tmp_path / "guard", tmp_path / "tcp"
    state = _arm(root, "sglang", 600, time.time() + 600)
    write_table(table, LISTENER, ACKNOWLEDGED)
    child = textwrap.dedent(f"""
        import time
        from ansible_collections.llmops.sglang.plugins.module_utils.server_guard import guarded_work
        with guarded_work(root={str(root)!r}, work_dir={str(tmp_path / "work")!r}, every_s=0.1,
                          tables=({str(table)!r},)):
            print("working", flush=True)
            time.sleep(120)
        """)
    env = {**os.environ, HOLDER_ENV: "R/flags", "SSH_CONNECTION": SSH_CONNECTION}
    proc = subprocess.Popen([sys.executable, "-c", child], stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env,
                            cwd=REPO_ROOT / "collections")
    try:
        assert proc.stdout.readline() == b"working\n"

        def expires_after_ticks(ticks: int) -> float:
            """The lease once ``ticks`` more heartbeats came (each tick decides, renews or not, then beats): after two,
            every tick in between read the table as it is now."""
            assert proc.stderr.read(ticks) == HEARTBEAT * ticks, "only heartbeats on stderr"
            return json.loads(state.read_text())["expires_at"]

        acknowledged = expires_after_ticks(2)
        assert expires_after_ticks(2) > acknowledged, "renews while the controller acknowledges"
        write_table(table, LISTENER, PARTITIONED)
        silent = expires_after_ticks(2)
        assert expires_after_ticks(5) == silent, "no renewal while the controller is silent"
        assert proc.poll() is None, "the module keeps working: its stdout is still connected"
        write_table(table, LISTENER, ACKNOWLEDGED)
        assert expires_after_ticks(2) > silent, "renewals resume once the controller acknowledges again"
    finally:
        proc.kill()
        proc.wait()


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


class GuardFailed(Exception):
    pass


class StubGuardModule:
    """What llmops.sglang.server_guard's Guard asks of its module; systemctl calls are recorded, not run."""
    check_mode = False

    def __init__(self, tmp_path: Path, **params) -> None:
        self.params = {"name": "sglang", "state": "armed", "lease": 300, "stop_units": [], "restore_backup_dir": None,
                       "armed_by": "", "unit_dir": str(tmp_path / "units"), "env_dir": str(tmp_path / "env"),
                       "program_path": str(tmp_path / "libexec" / "server_guard.py"), **params}
        self.commands: list[str] = []

    def fail_json(self, **result):
        raise GuardFailed(result["msg"])

    def run_command(self, argv, **_):
        self.commands.append(" ".join(argv))
        return 0, "", ""


def _host_with_guards(tmp_path: Path) -> tuple[Path, list[Path]]:
    """/var/lib/llmops-sglang/guard/{sglang,other}/ and, beside the guard root, what rollbacks need."""
    root = tmp_path / "lib" / "guard"
    kept = [root / "sglang" / "state.json", root / "other" / "state.json", tmp_path / "lib" / "moe-backups" / "m.json"]
    for path in kept:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("{}")
    return root, kept


@pytest.mark.parametrize("name", ["..", "", ".", "a/..", "../lib", "sglang/../other", "x\ny"])
def test_a_guard_name_that_is_no_service_name_fails_before_any_file_is_touched(tmp_path, name):
    """Issue 36 item 7: disarming name '..' removed everything under the guard root's parent (the MoE config backups
    rollbacks need), an empty name (sglang_service_name: "") every other service's guard."""
    root, kept = _host_with_guards(tmp_path)
    for state in ("disarmed", "armed"):
        with pytest.raises(GuardFailed, match=r"^name: .* is not a service name"):
            guard = guard_module.Guard(StubGuardModule(tmp_path, name=name, state=state, armed_by="R/flags"), str(root))
            guard.disarm() if state == "disarmed" else guard.arm(replace_snapshot=False)
    assert all(path.exists() for path in kept)


def test_disarm_removes_only_its_own_guard_and_never_follows_a_link(tmp_path):
    root, kept = _host_with_guards(tmp_path)
    guard_module.Guard(StubGuardModule(tmp_path), str(root)).disarm()
    assert not (root / "sglang").exists() and kept[1].exists() and kept[2].exists()
    (root / "sglang").symlink_to(tmp_path / "lib" / "moe-backups")  # planted where the guard's directory was
    with pytest.raises(GuardFailed, match="is not a guard directory right under"):
        guard_module.Guard(StubGuardModule(tmp_path), str(root)).disarm()
    assert kept[2].exists()


def test_a_guard_records_its_holder_and_an_arming_by_another_stage_takes_it_over(tmp_path, monkeypatch):
    root = tmp_path / "guard"
    (tmp_path / "units").mkdir()
    (tmp_path / "units" / "sglang.service").write_text("adopted unit\n")
    monkeypatch.setenv(HOLDER_ENV, "R1/flags")
    guard_module.Guard(StubGuardModule(tmp_path), str(root)).arm(replace_snapshot=False)
    state = read_json(str(root / "sglang" / "state.json"))
    assert state["armed_by"] == "R1/flags" and state["lock_path"] == str(root / ".locks" / "sglang")
    (tmp_path / "units" / "sglang.service").write_text("abandoned candidate\n")
    result = guard_module.Guard(StubGuardModule(tmp_path, armed_by="R2/baseline"), str(root)).arm(replace_snapshot=False)
    state = read_json(str(root / "sglang" / "state.json"))
    assert result["changed"] and state["armed_by"] == "R2/baseline"
    assert Path(state["files"][0]["source"]).read_text() == "adopted unit\n", "the snapshot is kept"
    monkeypatch.delenv(HOLDER_ENV)
    with pytest.raises(GuardFailed, match="^armed_by: a guard needs its holder"):
        guard_module.Guard(StubGuardModule(tmp_path), str(root)).arm(replace_snapshot=True)


def test_the_guard_puts_the_key_file_back_never_readable_by_others(tmp_path, systemctl_log, modes_seen):
    """Issue 36 item 10: the key file was copied (0644 under umask 022), then chmod 0600."""
    env = tmp_path / "sglang.env"
    env.write_text("SGLANG_API_KEY=sk-guarded-key\n")
    env.chmod(0o600)
    snap = tmp_path / "snap"
    snap.mkdir()
    files = snapshot_files([(str(env), 0o600)], str(snap))
    env.unlink()
    modes_seen.clear()  # the test's own setup
    program.put_back(files)
    assert env.read_text() == "SGLANG_API_KEY=sk-guarded-key\n" and env.stat().st_mode & 0o777 == 0o600
    key_files = [(path, mode) for path, mode in modes_seen if "sglang.env" in path]
    assert key_files and all(mode & 0o077 == 0 for _path, mode in key_files), key_files
    assert "\nUMask=0077\n" in guard_unit_text("sglang", "/usr/bin/python3", "/p.py", "/s.json")


def test_the_guard_program_decides_to_fire_under_the_lock_on_the_state_read_again(tmp_path, systemctl_log):
    """A renewal that got the lock first wins: the guard waits for the renewed lease instead of firing on what it read."""
    unit, source = tmp_path / "sglang.service", tmp_path / "adopted"
    unit.write_text("candidate\n")
    source.write_text("adopted\n")
    state_path, lock = tmp_path / "state.json", tmp_path / ".locks" / "sglang"
    lock.parent.mkdir()
    state = {"service": "sglang.service", "guard_unit": "llmops-guard-sglang.service", "lock_path": str(lock),
             "work_dir": str(tmp_path / "work"), "record_path": str(tmp_path / "restored.json"),
             "files": [{"path": str(unit), "source": str(source), "mode": 0o644}], "expires_at": 1.0, "lease_s": 1}
    write_json(str(state_path), state)
    guard = threading.Thread(target=program.main, args=(str(state_path),))
    with guard_lock("sglang", str(tmp_path)):
        guard.start()
        guard.join(0.5)
        assert guard.is_alive() and unit.read_text() == "candidate\n", "the expired guard waits for the lock"
        renewed = time.time() + 1.0
        write_json(str(state_path), {**state, "expires_at": renewed})
    guard.join(30)
    assert json.loads((tmp_path / "restored.json").read_text())["expired_at"] == renewed
