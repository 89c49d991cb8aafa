# Copyright (c) llmops.sglang contributors
# Apache License 2.0 (see LICENSE)
"""The lease between a controller and the guard of a service it is changing (llmops.sglang.server_guard).

Private to the llmops.sglang collection. A stage that may leave a service on an unadopted configuration
(a candidate serving, the server stopped for the MoE tuner) arms a guard on the host first: a snapshot of the
adopted unit, environment file and config files, and a lease. Every llmops module that runs on the host
renews every guard's lease at its start and, while it works (``guarded_work``), every few seconds for as long
as its controller is still connected. When the controller goes away (Ctrl-C, a crash, a lost network) the
lease runs out and the guard program (server_guard_program.py) ends the abandoned work and puts the snapshot
back. A stage that finishes disarms its guard.
"""
from __future__ import annotations

import glob
import json
import os
import select
import signal
import stat
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

from ansible_collections.llmops.sglang.plugins.module_utils.atomic_write import write_atomically
from ansible_collections.llmops.sglang.plugins.module_utils.server_guard_program import process_identity

GUARD_ROOT = "/var/lib/llmops-sglang/guard"
WORK_DIR = "/run/llmops-sglang/work"
STATE_FILE = "state.json"
RECORD_FILE = "restored.json"
RENEW_EVERY_S = 5.0


def guard_dir(service: str, root: str = GUARD_ROOT) -> str:
    return os.path.join(root, service)


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


def renew_leases(root: str = GUARD_ROOT, now: float | None = None) -> list[str]:
    """Push every armed guard's lease ``lease_s`` past now; the services renewed."""
    now = time.time() if now is None else now
    renewed = []
    for path in glob.glob(os.path.join(root, "*", STATE_FILE)):
        state = read_json(path)
        if state is None:
            continue
        state["expires_at"] = now + state["lease_s"]
        try:
            write_json(path, state)
        except FileNotFoundError:  # disarmed meanwhile
            continue
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


def _renew_while_connected(work: Work, stop: threading.Event, root: str, every_s: float) -> None:
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
        renew_leases(root)


@contextmanager
def guarded_work(root: str = GUARD_ROOT, work_dir: str = WORK_DIR, every_s: float = RENEW_EVERY_S) -> Iterator[Work]:
    """Renew the leases now and, while the body runs, every ``every_s`` seconds as long as the controller
    is connected; a module whose controller went away ends itself and the process groups it registered.
    Without an armed guard on the host this costs one directory listing and registers nothing."""
    if not renew_leases(root):
        yield Work(None)
        return
    work = Work(work_dir)
    stop = threading.Event()
    thread = threading.Thread(target=_renew_while_connected, args=(work, stop, root, every_s), daemon=True)
    thread.start()
    try:
        yield work
    finally:
        stop.set()
        thread.join()
        work.end()
