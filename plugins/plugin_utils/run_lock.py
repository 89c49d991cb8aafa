# Copyright (c) llmops.sglang contributors
# Apache License 2.0 (see LICENSE)
"""The lock of a run directory: one ansible-playbook at a time works in a run.

Two invocations with the same run id both passed the check that a stage is done and deployed to the same servers.
Entering a run (role ``tuning_run``, ``main.yml``) takes the flock of ``<run dir>/.lock`` for the ansible-playbook
process that runs the play, until that process ends. An action plugin runs in a worker process that Ansible forks
for one task, and a flock ends with its holder; so a small holder process (this file run as a program, standard
library only) takes the lock, writes who it holds it for, and keeps it until ansible-playbook exits (Ctrl-C, a
crash or the end of the playbook alike: the kernel tells it through a pidfd). The next stage of the same
ansible-playbook (``tune.yml`` imports every stage) finds the lock its own and goes on; another ansible-playbook
fails naming the process that holds the run.
"""
from __future__ import annotations

import fcntl
import json
import os
import select
import socket
import subprocess
import sys
import time
from pathlib import Path

LOCK_FILE = ".lock"
# A holder whose ansible-playbook has just exited notices at once (pidfd); this bounds the wait for it to let go.
STALE_WAIT_S = 10.0
POLL_S = 0.2


class RunLocked(Exception):
    """Another live ansible-playbook holds the run."""


def start_time(pid: object) -> int | None:
    """Start time of process ``pid`` (clock ticks after boot, /proc/<pid>/stat field 22); None when there is none.
    It tells a process from a later one given the same PID."""
    if not isinstance(pid, int) or pid <= 0:
        return None
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as handle:
            return int(handle.read().rsplit(")", 1)[1].split()[19])
    except (OSError, ValueError, IndexError):
        return None


def owner_of(pid: int) -> dict:
    return {"pid": pid, "start": start_time(pid), "host": socket.gethostname()}


def read_owner(path: Path) -> dict:
    try:
        owner = json.loads(path.read_text(encoding="utf-8") or "{}")
    except (FileNotFoundError, ValueError):
        return {}
    return owner if isinstance(owner, dict) else {}


def owner_alive(owner: dict) -> bool:
    """Whether the process a lock names is still running; one on another host (a shared runs root) is taken as
    running: only its own host can tell."""
    if owner.get("host") != socket.gethostname():
        return True
    return owner.get("start") is not None and start_time(owner.get("pid")) == owner["start"]


def is_held(path: Path) -> bool:
    """Whether some process holds the flock of ``path`` now (probed without taking it for long)."""
    try:
        fd = os.open(path, os.O_RDWR)  # writable: NFS emulates flock with fcntl locks, exclusive ones need it
    except FileNotFoundError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)
    return False


def describe(owner: dict) -> str:
    return (f"ansible-playbook PID {owner.get('pid')} on {owner.get('host')} (since {owner.get('since', '?')})"
            if owner else "another process")


def lock_run(run_dir: str | os.PathLike, owner_pid: int, *, check_mode: bool = False) -> str:
    """Hold ``<run_dir>/.lock`` for the ansible-playbook process ``owner_pid``: ``acquired``, ``held`` (it holds the
    run already: a later stage of the same playbook) or, in check mode, ``free`` (nothing is taken). RunLocked when
    another live ansible-playbook holds it; a holder left by one that just exited is waited for."""
    path = Path(run_dir) / LOCK_FILE
    me = owner_of(owner_pid)
    deadline = time.monotonic() + STALE_WAIT_S
    while True:
        owner = read_owner(path)
        held = is_held(path)
        mine = {key: owner.get(key) for key in me} == me
        if held and mine:
            return "held"
        if held and (owner_alive(owner) or time.monotonic() >= deadline):
            raise RunLocked(f"run {Path(run_dir).name} is in use by {describe(owner)}: two runs of one run id would "
                            f"deploy to the same servers. Wait for it to end, or remove {path} if no such process "
                            "runs")
        if check_mode:
            return "free"
        if not held and _spawn_holder(path, me):
            return "acquired"
        if time.monotonic() >= deadline:  # free, yet no holder of ours could take it (it could not start?)
            raise RunLocked(f"run {Path(run_dir).name}: the lock {path} could not be taken within {STALE_WAIT_S:g} s")
        time.sleep(POLL_S)  # its holder is letting go, or another run took it just now: look again


def _spawn_holder(path: Path, owner: dict) -> bool:
    """Start the holder (its own session: a Ctrl-C of the playbook's process group does not end it before the
    playbook); whether it got the lock."""
    # pylint: disable-next=ansible-bad-function
    holder = subprocess.Popen(
        [sys.executable, os.path.abspath(__file__), str(path), json.dumps(owner)], stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, cwd="/", start_new_session=True, close_fds=True)
    with holder.stdout:
        answer = holder.stdout.readline().strip()
    if answer != b"locked":
        holder.wait()
        return False
    return True


def wait_for_exit(pid: int, start: int) -> None:
    """Return once process ``pid`` (started at ``start``) has exited."""
    try:
        pidfd = os.pidfd_open(pid)
    except (AttributeError, OSError):  # Python < 3.9, a kernel < 5.3, or gone already
        pidfd = None
    try:
        if pidfd is not None and start_time(pid) == start:
            select.select([pidfd], [], [])  # readable once the process has exited
        while start_time(pid) == start:
            time.sleep(POLL_S)
    finally:
        if pidfd is not None:
            os.close(pidfd)


def hold(path: str, owner: dict) -> int:
    """The holder program: take the flock, name the owner in the file, say ``locked``, keep it until the owner ends."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        sys.stdout.write("busy\n")
        return 1
    os.ftruncate(fd, 0)
    os.pwrite(fd, json.dumps({**owner, "since": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}).encode(), 0)
    sys.stdout.write("locked\n")
    sys.stdout.flush()
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 1)  # the action stops reading; nothing of ours may write into its closed pipe
    wait_for_exit(owner["pid"], owner["start"])
    return 0


if __name__ == "__main__":
    sys.exit(hold(sys.argv[1], json.loads(sys.argv[2])))
