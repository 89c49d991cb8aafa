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
# The followed journal of a start is kept whole up to this size (a start logs some hundred KB; a flood of warnings
# a few MB). Beyond it only a tail is kept to see the ready marker, and the log is read once from the journal.
MAX_FOLLOWED_BYTES = 32 * 1024 * 1024
# After the wait ended, journal lines already stored still reach the follower: read until it is quiet this long
# (or DRAIN_MAX_S passed), so the followed log ends where a read of the journal at that moment would.
DRAIN_QUIET_S = 0.3
DRAIN_MAX_S = 3.0

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
    # True when ``log`` is the followed journal, False when it had to be read from the journal after the wait.
    followed: bool = True


def unit_state(run: Runner, unit: str) -> UnitState:
    rc, out, err = run(["systemctl", "show", unit, "--property=ActiveState,SubState,InvocationID,MainPID,NRestarts"])
    if rc != 0:
        raise RuntimeError(f"systemctl show {unit} failed: {err.strip()}")
    props = dict(line.split("=", 1) for line in out.splitlines() if "=" in line)
    return UnitState(active_state=props.get("ActiveState", ""), sub_state=props.get("SubState", ""),
                     invocation_id=props.get("InvocationID", ""), main_pid=int(props.get("MainPID") or 0),
                     n_restarts=int(props.get("NRestarts") or 0))


def journal_argv(invocation_id: str, follow: bool = False) -> list[str]:
    """journalctl of every line of one invocation, as text; ``follow``: from its first line on (``--no-tail``:
    ``--follow`` alone starts at the last 10), then each new line as journald stores it."""
    return ["journalctl", "--no-pager", "--output=cat", "--all", *(("--follow", "--no-tail") if follow else ()),
            f"_SYSTEMD_INVOCATION_ID={invocation_id}"]


def invocation_log(run: Runner, invocation_id: str) -> str:
    """Every journal line of exactly one start of a unit (selected by invocation id, not by time)."""
    if not invocation_id:
        return ""
    rc, out, err = run(journal_argv(invocation_id))
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


class _JournalFollower:
    """``journalctl --follow`` of one invocation, keeping every byte it printed (up to MAX_FOLLOWED_BYTES).

    A raw ``subprocess.Popen``: the wait must react to each line as it is written, which ``run_command`` (it returns
    when the program ended) cannot do. Its environment comes from ``command_runner.command_environment``, the forced
    locale of every other command.
    """

    def __init__(self, invocation_id: str) -> None:
        self.data = bytearray()
        self.tail = b""  # the last bytes, to find the marker across reads (and in a log over the limit)
        self.complete = True  # False once bytes were dropped or journalctl ended before it was stopped
        self.marker_seen = False
        try:
            # pylint: disable-next=ansible-bad-function
            self.process = subprocess.Popen(journal_argv(invocation_id, follow=True), stdout=subprocess.PIPE,
                                            stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL,
                                            env=command_environment(SYSTEMD_ENVIRON, base=os.environ))
        except OSError:
            self.process, self.complete = None, False

    def read(self, wait_s: float) -> bool:
        """Read what is there within ``wait_s``; True when something was read."""
        if self.process is None or self.process.stdout.closed:
            time.sleep(wait_s)
            return False
        if not select.select([self.process.stdout], [], [], wait_s)[0]:
            return False
        chunk = os.read(self.process.stdout.fileno(), 65536)
        if not chunk:  # journalctl ended: what it printed may lack lines
            self.complete = False
            self.process.stdout.close()
            return False
        window = self.tail + chunk
        self.marker_seen = self.marker_seen or READY_MARKER.encode() in window
        self.tail = window[-65536:]
        if self.complete and len(self.data) + len(chunk) <= MAX_FOLLOWED_BYTES:
            self.data += chunk
        elif self.complete:
            self.complete, self.data = False, bytearray()
        return True

    def drain(self) -> None:
        deadline = time.monotonic() + DRAIN_MAX_S
        while time.monotonic() < deadline and self.read(DRAIN_QUIET_S):
            pass

    def stop(self) -> None:
        if self.process is not None:
            self.process.kill()
            self.process.wait()
            if not self.process.stdout.closed:
                self.process.stdout.close()

    def text(self) -> str:
        # as run_command decodes a program's output, so the text is the same as invocation_log's
        return bytes(self.data).decode("utf-8", errors="surrogateescape")


def wait_until_ready(run: Runner, unit: str, health_url: str, timeout_s: float) -> ReadyResult:
    """Wait until the unit is active AND its current invocation logged the ready marker AND the
    health endpoint answers 200, or until the invocation fails or the time is up.

    The journal of the invocation is followed (``journalctl --follow --no-tail``), so the wait returns as soon as
    the marker is written instead of sleeping in fixed steps; unit state is re-read only while idle. The followed
    lines are the start's log (``ReadyResult.log``): the journal is read once. Only when the follow could not give
    all of it (journalctl ended early or could not start, or the log is over MAX_FOLLOWED_BYTES) is it read from the
    journal after the wait (``followed`` False).
    """
    started = time.monotonic()
    first = unit_state(run, unit)
    invocation = first.invocation_id
    follower = _JournalFollower(invocation)
    reason = "timeout"
    next_state_check = 0.0
    ready = False
    status = None
    try:
        while time.monotonic() - started < timeout_s:
            follower.read(STATE_CHECK_INTERVAL_S)
            if time.monotonic() < next_state_check and not follower.marker_seen:
                continue
            next_state_check = time.monotonic() + STATE_CHECK_INTERVAL_S
            state = unit_state(run, unit)
            if state.invocation_id != invocation or not state.running:
                reason = f"the service stopped while starting (state {state.active_state}/{state.sub_state})"
                break
            if follower.marker_seen:
                status = health_status(health_url)
                if status == 200:
                    ready, reason = True, "ready"
                    break
                reason = f"ready marker logged but {health_url} answered {status}"
        else:
            reason = (f"not ready within {timeout_s:.0f}s"
                      + ("" if follower.marker_seen else " (no ready marker in the log)"))
        seconds = time.monotonic() - started
        follower.drain()
    finally:
        follower.stop()
    followed = follower.complete and bool(invocation)
    log = follower.text() if followed else invocation_log(run, invocation)
    return ReadyResult(ready, reason, invocation, log, seconds, status if ready else None, followed=followed)


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
