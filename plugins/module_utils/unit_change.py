# Copyright (c) llmops.sglang contributors
# Apache License 2.0 (see LICENSE)
"""One deploy's changes to a service, and their undo: the unit file and the API key file replaced (their backups
beside them), systemd reloaded, the unit enabled, the service restarted.

Private to the llmops.sglang collection. Whatever fails after the first change (a systemctl call, reading the unit's
state, a start that never becomes ready) is undone by :meth:`UnitChange.undo`: the new unit stopped, what this deploy
enabled disabled, the files put back (or removed when the deploy created them), systemd reloaded, and the previous
unit restarted when the deploy had stopped it. It tells what it put back; when a step of it fails too, that error and
where the backups are. Commands run through a ``run(argv, changes=...) -> (rc, out, err)`` callable.
"""
from __future__ import annotations

import os
import stat
from collections.abc import Callable
from dataclasses import dataclass, field

from ansible_collections.llmops.sglang.plugins.module_utils.atomic_write import write_atomically
from ansible_collections.llmops.sglang.plugins.module_utils._unit_file import unit_health_url
from ansible_collections.llmops.sglang.plugins.module_utils.systemd_service import ReadyResult, wait_until_ready

BACKUP_SUFFIX = ".llmops-backup"


class DeployError(Exception):
    """A step of a deploy failed; ``details`` go into the module's result."""

    def __init__(self, message: str, **details) -> None:
        super().__init__(message)
        self.details = details


class StartFailed(Exception):
    """The new configuration did not become ready."""

    def __init__(self, ready: ReadyResult) -> None:
        super().__init__(ready.reason)
        self.ready = ready


def systemctl(run: Callable, actions: list[str], *args: str) -> None:
    """A systemctl call that changes the host, recorded in ``actions``; DeployError when it fails."""
    rc, out, err = run(["systemctl", *args], changes=True)
    if rc != 0:
        raise DeployError(f"systemctl {' '.join(args)} failed: {err.strip() or out.strip()}")
    actions.append(" ".join(args))


def back_up(paths) -> None:
    """A copy of each file beside it, with the file's mode from its creation on (the API key file's copy is never
    readable by others, not even between a copy and a chmod); the stale backup of a file that is absent goes (it
    must not resurrect it)."""
    for path in paths:
        if os.path.exists(path):
            with open(path, "rb") as handle:
                write_atomically(path + BACKUP_SUFFIX, handle.read(), stat.S_IMODE(os.fstat(handle.fileno()).st_mode))
        elif os.path.exists(path + BACKUP_SUFFIX):
            os.remove(path + BACKUP_SUFFIX)


def discard_backup(path: str) -> None:
    if os.path.exists(path + BACKUP_SUFFIX):
        os.remove(path + BACKUP_SUFFIX)


def write_file(path: str, content: str, mode: int) -> None:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    write_atomically(path, content.encode("utf-8"), mode)


def read_text(path: str) -> str | None:
    try:
        with open(path, encoding="utf-8") as handle:
            return handle.read()
    except FileNotFoundError:
        return None


@dataclass
class Undo:
    """What putting the previous state back did: ``done`` in words, ``failed`` steps with their errors."""
    done: list[str] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)
    rolled_back: bool = False
    rollback_seconds: float | None = None

    def step(self, what: str, action: Callable[[], object]) -> object:
        try:
            outcome = action()
        except Exception as exc:  # every step runs, whatever failed before it
            self.failed.append(f"{what} failed: {exc}")
            return None
        self.done.append(what)
        return outcome


class UnitChange:
    """The changes of one deploy to ``unit`` (its file ``unit_path``, the API key file ``env_path``)."""

    def __init__(self, run: Callable, unit: str, unit_path: str, env_path: str, *, was_enabled: bool,
                 was_running: bool, ready_timeout: float, actions: list[str]) -> None:
        self.run, self.unit, self.ready_timeout, self.actions = run, unit, ready_timeout, actions
        self.paths = {"unit": unit_path, "API key file": env_path}
        self.existed = {what: os.path.exists(path) for what, path in self.paths.items()}
        self.was_enabled, self.was_running = was_enabled, was_running
        self.enabled = False  # by this deploy
        self.restarted = False  # this deploy stopped what ran (a restart stops it first)

    def systemctl(self, *args: str) -> None:
        systemctl(self.run, self.actions, *args)

    def backup(self) -> None:
        back_up(self.paths.values())

    def write(self, what: str, content: str | None, mode: int) -> None:
        """The unit or the API key file with ``content`` (None: removed)."""
        path = self.paths[what]
        if content is None:
            os.remove(path)
            self.actions.append(f"remove {what}")
            return
        write_file(path, content, mode)
        self.actions.append(f"write {what}")

    def enable(self) -> None:
        self.enabled = not self.was_enabled
        self.systemctl("enable", self.unit)

    def restart(self, health_url: str) -> ReadyResult:
        """Restart and wait until ready. The start limit of a crash loop is reset first: a deploy is a decision."""
        self.run(["systemctl", "reset-failed", self.unit], changes=True)
        self.restarted = True
        self.systemctl("restart", self.unit)
        return wait_until_ready(self.run, self.unit, health_url, self.ready_timeout)

    def finish(self) -> None:
        """The key file's backup exists for a rollback only: once the deploy is decided it must not outlive it."""
        discard_backup(self.paths["API key file"])

    # ---- undo -----------------------------------------------------------------------------------

    def undo(self) -> Undo:
        """Put back what was there before this deploy; each step runs even when an earlier one failed."""
        undo = Undo()
        if self.restarted:
            undo.step(f"stopped {self.unit}", lambda: self.systemctl("stop", self.unit))
        if self.enabled:  # before its file goes: disable reads the unit's [Install]
            undo.step(f"disabled {self.unit}", lambda: self.systemctl("disable", self.unit))
        for what in self.paths:
            self._put_back(undo, what)
        undo.step("reloaded systemd", lambda: self.systemctl("daemon-reload"))
        if not self.existed["unit"]:
            self.run(["systemctl", "reset-failed", self.unit], changes=True)  # forget the failed unit's state
        elif self.restarted:
            self._restart_previous(undo)
        else:
            undo.rolled_back = not undo.failed
        return undo

    def _put_back(self, undo: Undo, what: str) -> None:
        path = self.paths[what]
        if os.path.exists(path + BACKUP_SUFFIX):
            undo.step(f"put back the previous {what}", lambda: os.replace(path + BACKUP_SUFFIX, path))
        elif not self.existed[what] and os.path.exists(path):
            undo.step(f"removed the {what}" if what != "unit" else "removed the new unit", lambda: os.remove(path))

    def _restart_previous(self, undo: Undo) -> None:
        """The previous unit's server, waited on at its own host and port (the deploy may have moved them)."""
        url = unit_health_url(read_text(self.paths["unit"]))
        ready = undo.step(f"restarted {self.unit} on the previous unit", lambda: self.restart(url))
        if ready is not None:
            undo.rolled_back = ready.ready and not undo.failed
            undo.rollback_seconds = round(ready.seconds, 3)
            if not ready.ready:
                undo.failed.append(f"the previous unit did not become ready: {ready.reason}")

    def describe(self, undo: Undo) -> str:
        """What the undo did, for the failure message; when a step of it failed, that error and where the backups are."""
        if undo.failed:
            backups = [path + BACKUP_SUFFIX for path in self.paths.values() if os.path.exists(path + BACKUP_SUFFIX)]
            summary = ("putting the previous state back failed too: " + "; ".join(undo.failed)
                       + (f"; the backups are {', '.join(backups)}" if backups else ""))
        elif not self.existed["unit"]:
            summary = "there was no previous unit: the new one is disabled and removed"
        elif not self.restarted:
            kept = "its server kept running (it was not restarted)" if self.was_running else "its server was not running"
            summary = f"the previous unit was restored; {kept}"
        else:
            summary = "the previous unit was restored and is running again"
        return f"{summary} (undone: {', '.join(undo.done) or 'nothing'})"
