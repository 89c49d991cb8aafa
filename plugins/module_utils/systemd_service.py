# Copyright (c) llmops.sglang contributors
# Apache License 2.0 (see LICENSE)
"""systemd + journald access for one SGLang service: unit state, the journal of one invocation,
and the wait until the server is really ready.

Private to the llmops.sglang collection. Commands run through a ``run(argv) -> (rc, out, err)``
callable (``command_runner.CommandRunner`` in modules, with :data:`SYSTEMD_ENVIRON`) so the logic stays testable.
"""
from __future__ import annotations

import os
import select
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from urllib.error import HTTPError, URLError

from ansible.module_utils.urls import open_url
from ansible_collections.llmops.sglang.plugins.module_utils.command_runner import command_environment

READY_MARKER = "The server is fired up and ready to roll!"
# How stale the unit state may get while the journal is quiet or busy.
STATE_CHECK_INTERVAL_S = 0.5
# Environment of every systemctl/journalctl call (besides the forced locale): never a pager.
SYSTEMD_ENVIRON = {"SYSTEMD_PAGER": ""}

Runner = Callable[[list], tuple]


@dataclass
class UnitState:
    active_state: str
    sub_state: str
    invocation_id: str
    main_pid: int
    n_restarts: int

    @property
    def running(self) -> bool:
        return self.active_state in ("active", "activating", "reloading") and self.sub_state != "auto-restart"


@dataclass
class ReadyResult:
    ready: bool
    reason: str
    invocation_id: str
    log: str
    seconds: float
    health_status: int | None = None
    events: list[str] = field(default_factory=list)


def unit_state(run: Runner, unit: str) -> UnitState:
    rc, out, err = run(["systemctl", "show", unit, "--property=ActiveState,SubState,InvocationID,MainPID,NRestarts"])
    if rc != 0:
        raise RuntimeError(f"systemctl show {unit} failed: {err.strip()}")
    props = dict(line.split("=", 1) for line in out.splitlines() if "=" in line)
    return UnitState(active_state=props.get("ActiveState", ""), sub_state=props.get("SubState", ""),
                     invocation_id=props.get("InvocationID", ""), main_pid=int(props.get("MainPID") or 0),
                     n_restarts=int(props.get("NRestarts") or 0))


def invocation_log(run: Runner, invocation_id: str) -> str:
    """Every journal line of exactly one start of a unit (selected by invocation id, not by time)."""
    if not invocation_id:
        return ""
    rc, out, err = run(["journalctl", "--no-pager", "--output=cat", "--all", f"_SYSTEMD_INVOCATION_ID={invocation_id}"])
    if rc != 0:
        raise RuntimeError(f"journalctl failed: {err.strip()}")
    return out


def health_status(url: str, timeout_s: float = 2.0) -> int | None:
    """HTTP status of the health endpoint, or None when nothing answers."""
    try:
        with open_url(url, timeout=timeout_s, validate_certs=False) as response:
            return response.status
    except HTTPError as exc:
        return exc.code
    except (URLError, OSError):
        return None


def wait_until_ready(run: Runner, unit: str, health_url: str, timeout_s: float) -> ReadyResult:
    """Wait until the unit is active AND its current invocation logged the ready marker AND the
    health endpoint answers 200, or until the invocation fails or the time is up.

    The journal of the invocation is followed (``journalctl -f``), so the wait returns as soon as
    the marker is written instead of sleeping in fixed steps; unit state is re-read only while idle.
    """
    started = time.monotonic()
    first = unit_state(run, unit)
    invocation = first.invocation_id
    # A raw Popen, not run_command (it returns when the program ended): the wait reacts to each line as it is
    # written. Its environment is the forced locale of every other command (command_runner.command_environment).
    follower = subprocess.Popen(
        ["journalctl", "--no-pager", "--output=cat", "--all", "--follow", f"_SYSTEMD_INVOCATION_ID={invocation}"],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=command_environment(SYSTEMD_ENVIRON, base=os.environ))
    marker_seen = False
    reason = "timeout"
    buffer = b""
    next_state_check = 0.0
    try:
        while time.monotonic() - started < timeout_s:
            readable = select.select([follower.stdout], [], [], STATE_CHECK_INTERVAL_S)[0]
            if readable:
                chunk = os.read(follower.stdout.fileno(), 65536)
                buffer = (buffer + chunk)[-65536:]
                marker_seen = marker_seen or READY_MARKER.encode() in buffer
            if time.monotonic() < next_state_check and not marker_seen:
                continue
            next_state_check = time.monotonic() + STATE_CHECK_INTERVAL_S
            state = unit_state(run, unit)
            if state.invocation_id != invocation or not state.running:
                reason = f"the service stopped while starting (state {state.active_state}/{state.sub_state})"
                break
            if marker_seen:
                status = health_status(health_url)
                if status == 200:
                    return ReadyResult(True, "ready", invocation, invocation_log(run, invocation),
                                       time.monotonic() - started, status)
                reason = f"ready marker logged but {health_url} answered {status}"
        else:
            reason = (f"not ready within {timeout_s:.0f}s"
                      + ("" if marker_seen else " (no ready marker in the log)"))
    finally:
        follower.kill()
        follower.wait()
    return ReadyResult(False, reason, invocation, invocation_log(run, invocation), time.monotonic() - started)


def start_failure(reason: str) -> dict:
    """A failed start's cause when the log names no error, from how :func:`wait_until_ready` ended, in the
    operator's words (``start_timeout``, ``health_check_failed``, ``exited``); ``unknown`` otherwise."""
    if reason.startswith("not ready within") and "no ready marker" not in reason:
        kind, suggestion = "health_check_failed", (
            "The server logged that it is ready but its health endpoint never answered 200 in time: check `host` "
            "and `port`, and that no proxy or other process answers there.")
    elif reason.startswith("not ready within"):
        kind, suggestion = "start_timeout", (
            "The server did not become ready in time: raise `ready_timeout` if loading the weights and capturing "
            "CUDA graphs takes longer, else look at the log for where the start stalled.")
    elif reason.startswith("ready marker logged but"):
        kind, suggestion = "health_check_failed", (
            "The server logged that it is ready but its health endpoint did not answer 200: check `host` and "
            "`port`, and that no proxy or other process answers there.")
    elif reason.startswith("the service stopped while starting"):
        kind, suggestion = "exited", (
            "The server exited without an error line the log parser knows: read the log lines of this start.")
    else:
        kind, suggestion = "unknown", None
    return {"kind": kind, "message": reason, "lines": [], "suggestion": suggestion}
