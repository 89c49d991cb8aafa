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
stopped when its unit did not exist), and ``expires_at`` (epoch seconds) which every llmops module that works on
this host pushes forward while its controller is connected (module_utils/server_guard.py). Modules at work
register under ``work_dir``; the guard ends them (and the process groups they started, e.g. the MoE tuner)
before it restores, so nothing of an abandoned stage keeps the GPUs.
"""
from __future__ import annotations

import glob
import json
import os
import shutil
import signal
import subprocess
import sys
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


def _running(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as handle:
            return handle.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False


def _signal_work(work_dir: str, sig: int) -> list[int]:
    """Send ``sig`` to every registered module and the process groups it started; the modules still running."""
    running = []
    for entry in glob.glob(os.path.join(work_dir, "*.json")):
        work = read_state(entry) or {}
        for pid in [*(-pgid for pgid in work.get("pgids", [])), work.get("pid")]:
            try:
                os.kill(pid, sig)
            except (ProcessLookupError, PermissionError, TypeError):
                pass
        if isinstance(work.get("pid"), int) and _running(work["pid"]):
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
        partial = f"{path}.llmops-guard-partial"
        shutil.copyfile(source, partial)
        os.chmod(partial, entry.get("mode", 0o644))
        os.replace(partial, path)


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


def main(state_path: str) -> int:
    while True:
        state = read_state(state_path)
        if state is None:
            say(f"{state_path} is gone (disarmed); nothing to do")
            return 0
        remaining = state["expires_at"] - time.time()
        if remaining <= 0:
            break
        time.sleep(min(POLL_S, remaining))
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
