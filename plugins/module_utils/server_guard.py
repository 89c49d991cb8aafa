# Copyright (c) llmops.sglang contributors
# Apache License 2.0 (see LICENSE)
"""The lease between a controller and the guard of a service it is changing (llmops.sglang.server_guard).

Private to the llmops.sglang collection. A stage that may leave a service on an unadopted configuration
(a candidate serving, the server stopped for the MoE tuner) arms a guard on the host first: a snapshot of the
adopted unit, environment file and config files, and a lease. Every llmops module that runs on the host
renews its stage's guard lease at its start and, while it works (``guarded_work``), every few seconds for as long
as its controller is still connected and acknowledges the heartbeat the module sends it (controller_link.py: a
silent network partition never hangs the SSH channel up). When the controller goes away (Ctrl-C, a crash, a lost
network) the lease runs out and the guard program (server_guard_program.py) ends the abandoned work and puts the
snapshot back. A stage that finishes disarms its guard.

Only the lease's holder renews it: the guard records who armed it (``armed_by``, the run id and stage), and a
module renews a guard only when its environment names the same holder (``LLMOPS_GUARD_HOLDER``, set by the stage
playbooks for every task of the stage). An unrelated job on the host (another run, a fact-gathering playbook) never
keeps an abandoned stage's guard alive. Every read-modify-write of a guard's state (renewal, arming, adoption,
disarming, the guard program's firing) holds the flock of ``<guard root>/.locks/<service>``, so a renewal never writes back
a state older than an adoption.
"""
from __future__ import annotations

import glob
import json
import os
import select
import shutil
import signal
import stat
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

from ansible_collections.llmops.sglang.plugins.module_utils.atomic_write import write_atomically
from ansible_collections.llmops.sglang.plugins.module_utils.controller_link import (
    TCP_TABLES, controller_silent, send_heartbeat, session_connection)
from ansible_collections.llmops.sglang.plugins.module_utils.moe_install import read_manifest
from ansible_collections.llmops.sglang.plugins.module_utils.server_guard_program import locked, process_identity
from ansible_collections.llmops.sglang.plugins.module_utils.systemd_unit import SERVICE_NAME

GUARD_ROOT = "/var/lib/llmops-sglang/guard"
WORK_DIR = "/run/llmops-sglang/work"
STATE_FILE = "state.json"
RECORD_FILE = "restored.json"
RENEW_EVERY_S = 5.0
# Who holds the leases a module renews: the stage playbooks set it for every task of a stage (run id/stage).
HOLDER_ENV = "LLMOPS_GUARD_HOLDER"


def guard_dir(service: str, root: str = GUARD_ROOT) -> str:
    """``<root>/<service>``; ValueError for a name that is not a unit name's stem: ``..`` would name the root's parent
    (disarming removed everything there), an empty name the root itself (every other service's guard)."""
    if not isinstance(service, str) or not SERVICE_NAME.fullmatch(service):
        raise ValueError(f"name: {service!r} is not a service name (letters, digits, '_', '.', ':' and '-', starting "
                         "with a letter, digit or '_', without .service); nothing was changed")
    return os.path.join(root, service)


def remove_guard_dir(path: str, root: str) -> None:
    """Remove a guard's directory, only when it resolves to a directory right under the guard root (never through a
    link planted in its place)."""
    if os.path.islink(path) or os.path.dirname(os.path.realpath(path)) != os.path.realpath(root):
        raise ValueError(f"{path} is not a guard directory right under {root}; left alone")
    shutil.rmtree(path, ignore_errors=True)


def lock_path(service: str, root: str = GUARD_ROOT) -> str:
    """``<root>/.locks/<service>``: outside the guard's directory (disarming removes that) and under a name no
    service can have (a service name never starts with '.'), so no lock is another service's file."""
    return os.path.join(root, ".locks", service)


@contextmanager
def guard_lock(service: str, root: str = GUARD_ROOT) -> Iterator[None]:
    """Exclusive flock on the service's lock file for one read-modify-write of its guard's state."""
    path = lock_path(service, root)
    os.makedirs(os.path.dirname(path), mode=0o700, exist_ok=True)
    with locked(path):  # the guard program's own: both sides take the same flock the same way
        yield


def current_holder() -> str:
    """The holder this module renews for (empty: none, so it renews nothing)."""
    return os.environ.get(HOLDER_ENV, "")


def guard_unit(service: str) -> str:
    return f"llmops-guard-{service}.service"


def guard_unit_text(service: str, python: str, program: str, state_path: str) -> str:
    """The guard's unit: enabled, so after a reboot it restores before anyone could serve a candidate."""
    return f"""# Managed by Ansible (llmops.sglang.server_guard): removed when the stage that armed it finishes.
[Unit]
Description=llmops.sglang guard of {service}.service (restores the adopted configuration when the lease expires)
After=network-online.target

[Service]
Type=simple
ExecStart={python} {program} {state_path}
Restart=on-failure
RestartSec=5
# What it writes back includes the API key file: nothing it creates is readable by others.
UMask=0077

[Install]
WantedBy=multi-user.target
"""


def snapshot_files(paths: list[tuple[str, int]], snapshot_dir: str) -> list[dict]:
    """Copy each (path, mode) into ``snapshot_dir``; the guard's ``files`` list (source None = was absent)."""
    files = []
    for index, (path, mode) in enumerate(paths):
        source = None
        if os.path.exists(path):
            source = os.path.join(snapshot_dir, f"{index}-{os.path.basename(path)}")
            with open(path, "rb") as handle:
                write_atomically(source, handle.read(), 0o600)
        files.append({"path": path, "source": source, "mode": mode})
    return files


def read_json(path: str) -> dict | None:
    try:
        with open(path, encoding="utf-8") as handle:
            return json.load(handle)
    except (FileNotFoundError, ValueError):
        return None


def write_json(path: str, data: dict, mode: int = 0o600) -> None:
    write_atomically(path, (json.dumps(data, indent=2) + "\n").encode("utf-8"), mode)


def backup_files(backup_dir: str) -> list[dict]:
    """The guard's ``files`` entries that undo an install of MoE configs (moe_install.apply_changes): each file it
    replaced from the backup's copy, each it created removed (source None)."""
    entries = read_manifest(backup_dir)["entries"]
    return [{"path": e["path"], "source": e["backup"] and os.path.join(backup_dir, e["backup"]), "mode": 0o644}
            for e in entries]


def with_backup(state: dict, backup_dir: str) -> dict:
    """``state`` whose files are its snapshot (unit, environment file) and what the install behind ``backup_dir``
    changed."""
    return {**state, "files": state["files"][:2] + backup_files(backup_dir)}


def register_backup(service: str, backup_dir: str, root: str | None = None) -> None:
    """Have the armed guard of ``service`` also put back what an install is about to change (``backup_dir``, complete
    before its first change): a controller lost right after the install then leaves no unadopted config served.
    ValueError naming ``guard`` when no guard of the service is armed."""
    root = root or GUARD_ROOT
    state_path = os.path.join(guard_dir(service, root), STATE_FILE)
    with guard_lock(service, root):
        state = read_json(state_path)
        if state is None:
            raise ValueError(f"guard: no guard of {service}.service is armed on this host (arm it with "
                             "llmops.sglang.server_guard first, or leave guard out); nothing was installed")
        write_json(state_path, with_backup(state, backup_dir))


def renew_leases(root: str = GUARD_ROOT, now: float | None = None, holder: str | None = None) -> list[str]:
    """Push the leases ``holder`` holds (default: this process's ``LLMOPS_GUARD_HOLDER``) ``lease_s`` past now, each
    under its guard's lock; the services renewed. Without a holder nothing is renewed."""
    holder = current_holder() if holder is None else holder
    renewed = []
    for path in glob.glob(os.path.join(root, "*", STATE_FILE)) if holder else []:
        if (read_json(path) or {}).get("armed_by") != holder:
            continue  # another stage's guard: it must run out when its own controller is gone
        with guard_lock(os.path.basename(os.path.dirname(path)), root):
            state = read_json(path)  # again, under the lock: an adoption or a disarm may have come in between
            if state is None or state.get("armed_by") != holder:
                continue
            state["expires_at"] = (time.time() if now is None else now) + state["lease_s"]
            write_json(path, state)
        renewed.append(state["service"])
    return renewed


def controller_connected(fd: int = 1) -> bool | None:
    """Whether the controller still reads this module's output: False once the SSH channel behind stdout is
    closed (the pipe or socket reports an error or hang-up); None when stdout is no pipe or socket (async
    tasks, a terminal) and so tells nothing."""
    try:
        mode = os.fstat(fd).st_mode
    except OSError:
        return False
    if not (stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode)):
        return None
    poller = select.poll()
    poller.register(fd, select.POLLOUT)
    broken = select.POLLERR | select.POLLHUP | select.POLLNVAL
    return not any(events & broken for _fd, events in poller.poll(0))


class Work:
    """A module at work on this host, registered where the guard finds it (and the process groups it starts), each
    with its start time, and the module's cgroup: the guard signals only processes that are still these."""

    def __init__(self, work_dir: str | None) -> None:
        self.path = os.path.join(work_dir, f"{os.getpid()}.json") if work_dir else None
        self.groups: list[dict] = []
        if self.path:
            os.makedirs(work_dir, mode=0o755, exist_ok=True)
            self.save()

    def save(self) -> None:
        if self.path:
            me = process_identity(os.getpid()) or {}
            write_json(self.path, {"pid": os.getpid(), "start": me.get("start"), "cgroup": me.get("cgroup"),
                                   "groups": self.groups}, 0o644)

    def add_process_group(self, pgid: int) -> None:
        """``pgid``: the PID of a child started in a group of its own (its leader), before it can have been reaped."""
        self.groups.append({"pgid": pgid, "start": (process_identity(pgid) or {}).get("start")})
        self.save()

    def end(self) -> None:
        if self.path and os.path.exists(self.path):
            os.unlink(self.path)


def _renew_while_connected(work: Work, stop: threading.Event, root: str, every_s: float,
                           tables: tuple[str, ...]) -> None:
    connection = session_connection()
    while not stop.wait(every_s):
        if controller_connected() is False:
            # The controller is gone: nobody will read a result, and the guard must find the GPUs free.
            for group in work.groups:
                try:
                    os.killpg(group["pgid"], signal.SIGTERM)
                except ProcessLookupError:
                    pass
            work.end()
            os._exit(75)  # pylint: disable=protected-access
        # A silent controller (the last heartbeat unacknowledged: a partition sends no hang-up) gets no renewal, so
        # the lease runs out as after a Ctrl-C, and the guard ends this module; a partition shorter than the lease
        # costs nothing. Without a connection to ask (None), the hang-up alone decides, as before.
        if not controller_silent(connection, tables):
            renew_leases(root)
        if connection:
            send_heartbeat()


@contextmanager
def guarded_work(root: str = GUARD_ROOT, work_dir: str = WORK_DIR, every_s: float = RENEW_EVERY_S,
                 tables: tuple[str, ...] = TCP_TABLES) -> Iterator[Work]:
    """Renew the leases now and, while the body runs, every ``every_s`` seconds while the controller is connected
    and acknowledged the last heartbeat (controller_link); a module whose controller hung up ends itself and the
    process groups it registered. Without a guard of this module's holder on the host this costs one directory
    listing and registers nothing."""
    if not renew_leases(root):
        yield Work(None)
        return
    work = Work(work_dir)
    stop = threading.Event()
    thread = threading.Thread(target=_renew_while_connected, args=(work, stop, root, every_s, tables), daemon=True)
    thread.start()
    try:
        yield work
    finally:
        stop.set()
        thread.join()
        work.end()
