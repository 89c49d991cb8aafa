# Copyright (c) llmops.sglang contributors
# Apache License 2.0 (see LICENSE)
"""The host-side guard of one SGLang service: puts the last adopted configuration back when the controller
that changed the service stops renewing its lease.

Installed on the host by llmops.sglang.server_guard and run by the guard's own unit
(``llmops-guard-<service>.service``, enabled, so it also runs after a reboot) as
``python3 <this file> <state file>``. Standalone: standard library only, nothing else of the collection.

The state file (JSON, written atomically by the module) says what to put back:
``files``: ``[{"path": ..., "source": <snapshot file> | null, "mode": int}]`` (null: the file did not exist
then, remove it), ``stop_units`` (the Ray units of a tuning run, ...), ``service`` (restarted afterwards, or
stopped when its unit did not exist), and ``expires_at`` (epoch seconds) which the llmops modules of the stage
that holds the guard (``armed_by``) push forward while their controller is connected (module_utils/server_guard.py),
under the flock of ``lock_path``, which this program holds too when it fires. Modules at work
register under ``work_dir`` (their PID, start time and cgroup, and the process groups they started, e.g. the MoE
tuner); the guard ends them before it restores, so nothing of an abandoned stage keeps the GPUs, and signals only
processes that are still the ones registered (a PID or process group number reused since is left alone).
"""
from __future__ import annotations

import contextlib
import fcntl
import glob
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time

POLL_S = 2.0
GRACE_S = 10.0


def say(message: str) -> None:
    """One line to the guard unit's journal."""
    sys.stdout.write(f"guard: {message}\n")
    sys.stdout.flush()


def read_state(path: str) -> dict | None:
    try:
        with open(path, encoding="utf-8") as handle:
            return json.load(handle)
    except (FileNotFoundError, ValueError):
        return None


def process_identity(pid: object) -> dict | None:
    """What tells this process from a later one given the same PID: its start time (clock ticks after boot, field
    22 of ``/proc/<pid>/stat``), its process group, its state, its cgroup. None when there is no such process."""
    if not isinstance(pid, int) or pid <= 0:
        return None
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as handle:
            fields = handle.read().rsplit(")", 1)[1].split()
        with open(f"/proc/{pid}/cgroup", encoding="utf-8") as handle:
            cgroup = handle.read()
    except (OSError, IndexError):
        return None
    return {"state": fields[0], "pgid": int(fields[2]), "start": int(fields[19]), "cgroup": cgroup}


def _ours(pid: object, start: object, running: bool = False) -> bool:
    """Whether ``pid`` is still the process registered with start time ``start`` (a PID the kernel gave to another
    process since has another start time); with ``running``, one that has not exited (no zombie)."""
    seen = process_identity(pid)
    return seen is not None and seen["start"] == start and not (running and seen["state"] == "Z")


def _group_members(group: dict, cgroup: object) -> list[int]:
    """The processes of a registered process group that are still ours, to be signalled one by one: those in the
    group, started no earlier than its leader, in the cgroup of the module that registered it. Once every member
    has exited the kernel may give the group's number to a new process; one of another cgroup or started before
    the leader is not ours."""
    pgid, start = group.get("pgid"), group.get("start")
    members = []
    for entry in os.listdir("/proc"):
        seen = process_identity(int(entry)) if entry.isdigit() else None
        if (seen and seen["pgid"] == pgid and seen["state"] != "Z" and isinstance(start, int)
                and seen["start"] >= start and seen["cgroup"] == cgroup):
            members.append(int(entry))
    return members


def _work_processes(work: dict) -> list[int]:
    """The PIDs (negative: whole process groups) of a work record that are still the processes it registered."""
    targets = []
    for group in work.get("groups", []):
        if not isinstance(group, dict):
            continue
        if _ours(group.get("pgid"), group.get("start")):
            targets.append(-group["pgid"])  # the leader is ours, so its group is
        elif process_identity(group.get("pgid")) is None:
            targets.extend(_group_members(group, work.get("cgroup")))
    if _ours(work.get("pid"), work.get("start")):
        targets.append(work["pid"])
    return targets


def _signal_work(work_dir: str, sig: int) -> list[int]:
    """Send ``sig`` to every registered module and the process groups it started, each checked to be still the
    process registered (start time, cgroup) so that a PID reused since is never signalled; the modules still
    running."""
    running = []
    for entry in glob.glob(os.path.join(work_dir, "*.json")):
        work = read_state(entry) or {}
        for pid in _work_processes(work):
            try:
                os.kill(pid, sig)
            except (ProcessLookupError, PermissionError):
                pass
        if _ours(work.get("pid"), work.get("start"), running=True):
            running.append(work["pid"])
        else:
            os.unlink(entry)
    return running


def end_abandoned_work(work_dir: str) -> None:
    """SIGTERM to what an abandoned stage left working, SIGKILL after a grace period; their records removed."""
    if _signal_work(work_dir, signal.SIGTERM):
        deadline = time.monotonic() + GRACE_S
        while time.monotonic() < deadline and _signal_work(work_dir, 0):
            time.sleep(0.5)
        _signal_work(work_dir, signal.SIGKILL)
    for entry in glob.glob(os.path.join(work_dir, "*.json")):
        os.unlink(entry)


def put_back(files: list[dict]) -> None:
    for entry in files:
        path, source = entry["path"], entry.get("source")
        if source is None:
            if os.path.lexists(path):
                os.unlink(path)
            continue
        os.makedirs(os.path.dirname(path), exist_ok=True)
        # mkstemp creates the copy 0600: the API key file is never readable by others, not even before the chmod
        fd, partial = tempfile.mkstemp(dir=os.path.dirname(path), prefix=f".{os.path.basename(path)}.",
                                       suffix=".llmops-guard-partial")
        try:
            with os.fdopen(fd, "wb") as copy, open(source, "rb") as adopted:
                shutil.copyfileobj(adopted, copy)
            os.chmod(partial, entry.get("mode", 0o644))
            os.replace(partial, path)
        except BaseException:
            os.unlink(partial)
            raise


def systemctl(*args: str) -> int:
    # subprocess, not run_command: this program runs on the host under systemd, where no module is
    # pylint: disable-next=ansible-bad-function
    return subprocess.run(["systemctl", *args], check=False).returncode


def _same(entry: dict) -> bool:
    path, source = entry["path"], entry.get("source")
    if source is None:
        return not os.path.lexists(path)
    try:
        with open(path, "rb") as current, open(source, "rb") as adopted:
            return current.read() == adopted.read()
    except FileNotFoundError:
        return False


def restore(state: dict) -> dict:
    """Undo the abandoned stage: its work ended, its extra units stopped, the files put back, the service
    restarted on them (unless all of it is as adopted and serving already). Returns the record of what was done."""
    end_abandoned_work(state["work_dir"])
    for unit in state.get("stop_units", []):
        systemctl("stop", unit)
    service = state["service"]
    if all(_same(entry) for entry in state["files"]) and systemctl("is-active", "--quiet", service) == 0:
        action, rc = "none", 0  # the stage had put everything back itself: no restart, no downtime
    else:
        put_back(state["files"])
        systemctl("daemon-reload")
        action = "restart" if state.get("service_existed", True) else "stop"
        systemctl("reset-failed", service)  # a crash loop's start limit must not refuse the adopted configuration
        rc = systemctl(action, service)
    return {"restored_at": time.time(), "service": service, "action": action, "rc": rc,
            "armed_by": state.get("armed_by"), "expired_at": state["expires_at"]}


@contextlib.contextmanager
def locked(path: str | None):
    """The guard's flock (its state's ``lock_path``), which every renewal, arming and disarming holds too."""
    if not path:  # a state written by an earlier release
        yield
        return
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def main(state_path: str) -> int:
    while True:
        state = read_state(state_path)
        if state is None:
            say(f"{state_path} is gone (disarmed); nothing to do")
            return 0
        remaining = state["expires_at"] - time.time()
        if remaining <= 0:
            # Decided under the lock, on the state read again: a renewal or a disarm that came in meanwhile wins.
            with locked(state.get("lock_path")):
                state = read_state(state_path)
                if state is None or state["expires_at"] > time.time():
                    continue
                return fire(state_path, state, state["expires_at"] - time.time())
        time.sleep(min(POLL_S, remaining))


def fire(state_path: str, state: dict, remaining: float) -> int:
    say(f"lease of {state['service']} expired {-remaining:.0f}s ago without renewal "
        f"(armed by {state.get('armed_by')}); putting the adopted configuration back")
    record = restore(state)
    with open(state["record_path"], "w", encoding="utf-8") as handle:
        json.dump(record, handle)
    os.unlink(state_path)
    say(f"{record['action']} {record['service']} rc={record['rc']}")
    systemctl("disable", state["guard_unit"])
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1]))
