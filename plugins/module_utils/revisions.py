# Copyright (c) llmops.sglang contributors
# Apache License 2.0 (see LICENSE)
"""Revisions of a host's serving configuration: the files one service runs with (its unit, its API key file, the MoE
config files a change will write), kept as they were before each change, several of them, so a rollout can put a host
back to a recorded revision (docs/reliability.md, "Rollouts").

A store is a directory per service (``<root>/<service>/``) holding one directory per revision, named by its id (a
zero-padded sequence number, so ids sort by age): ``manifest.json`` lists each file's path, whether it existed and its
mode; ``files/<n>`` holds the n-th file's bytes. A revision directory appears whole (written under a temporary name,
then renamed) and the oldest beyond ``keep`` are removed. The store is root's only (0700): it holds the API key file.

Private to the llmops.sglang collection. Runs on the managed host: stdlib only.
"""
from __future__ import annotations

import json
import os
import shutil
import stat
import tempfile
import time

from ansible_collections.llmops.sglang.plugins.module_utils._unit_file import unit_health_url
from ansible_collections.llmops.sglang.plugins.module_utils.atomic_write import write_atomically
from ansible_collections.llmops.sglang.plugins.module_utils.systemd_service import Runner, unit_state, wait_until_ready

MANIFEST = "manifest.json"
ID_WIDTH = 6


class RevisionError(Exception):
    """A revision that cannot be recorded or restored as asked."""


def revision_ids(store: str) -> list[str]:
    """The ids of the revisions in ``store``, oldest first (partial directories of a record never match)."""
    if not os.path.isdir(store):
        return []
    return sorted(name for name in os.listdir(store) if name.isdigit() and len(name) == ID_WIDTH)


def read_manifest(store: str, revision: str) -> dict:
    path = os.path.join(store, revision, MANIFEST)
    try:
        with open(path, encoding="utf-8") as handle:
            return json.load(handle)
    except FileNotFoundError:
        known = ", ".join(revision_ids(store)) or "none"
        raise RevisionError(f"revision {revision} is not in {store} (recorded: {known})") from None


def record(store: str, paths: list[str], *, label: str, keep: int) -> dict:
    """A new revision holding each of ``paths`` as it is now (absent ones recorded as absent); the oldest revisions
    beyond ``keep`` go. Returns its manifest with ``pruned``, the ids removed."""
    if keep < 1:
        raise RevisionError(f"keep must be at least 1, not {keep}")
    os.makedirs(store, mode=0o700, exist_ok=True)
    os.chmod(store, 0o700)
    existing = revision_ids(store)
    revision = str(int(existing[-1]) + 1 if existing else 1).zfill(ID_WIDTH)
    staging = tempfile.mkdtemp(dir=store, prefix=f".{revision}.")
    try:
        manifest = {"id": revision, "label": label, "recorded_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                    "files": [_keep_file(staging, index, path) for index, path in enumerate(dict.fromkeys(paths))]}
        write_atomically(os.path.join(staging, MANIFEST), json.dumps(manifest, indent=2).encode("utf-8"), 0o600)
        os.rename(staging, os.path.join(store, revision))
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    pruned = [*existing, revision][:-keep]
    for old in pruned:
        shutil.rmtree(os.path.join(store, old))
    return {**manifest, "pruned": pruned}


def _keep_file(staging: str, index: int, path: str) -> dict:
    """The manifest entry of ``path``; its bytes copied under ``files/`` with its own mode from their creation on."""
    if not os.path.exists(path):  # and whether its directory existed: an install may create it (triton_X_Y_Z)
        return {"path": path, "present": False, "dir_present": os.path.isdir(os.path.dirname(path))}
    with open(path, "rb") as handle:
        mode = stat.S_IMODE(os.fstat(handle.fileno()).st_mode)
        os.makedirs(os.path.join(staging, "files"), mode=0o700, exist_ok=True)
        write_atomically(os.path.join(staging, "files", str(index)), handle.read(), mode)
    return {"path": path, "present": True, "mode": mode, "stored": f"files/{index}"}


def restore(store: str, revision: str) -> list[str]:
    """Each file of ``revision`` put back as it was (written atomically with its mode, or removed when it was absent);
    the paths that changed. Files already as recorded are left alone."""
    changed = []
    for entry in read_manifest(store, revision)["files"]:
        path = entry["path"]
        if not entry["present"]:
            if os.path.exists(path):
                os.remove(path)
                changed.append(path)
            _remove_created_dir(os.path.dirname(path), entry)
            continue
        with open(os.path.join(store, revision, entry["stored"]), "rb") as handle:
            content = handle.read()
        if _current(path) != (content, entry["mode"]):
            os.makedirs(os.path.dirname(path), exist_ok=True)
            write_atomically(path, content, entry["mode"])
            changed.append(path)
    return changed


def _remove_created_dir(directory: str, entry: dict) -> None:
    """The directory of a file absent at the revision goes when it did not exist then either and is empty now (an
    empty ``triton_X_Y_Z`` directory still counts as present to SGLang's config lookup)."""
    if entry.get("dir_present", True) or not os.path.isdir(directory):
        return
    try:
        os.rmdir(directory)
    except OSError:  # not empty: something besides this change put files there
        pass


def _current(path: str) -> tuple[bytes, int] | None:
    try:
        with open(path, "rb") as handle:
            return handle.read(), stat.S_IMODE(os.fstat(handle.fileno()).st_mode)
    except FileNotFoundError:
        return None


def put_back(run: Runner, store: str, revision: str, *, unit: str, unit_path: str, ready_timeout: float) -> dict:
    """The host back on ``revision``: its files restored, systemd reloaded and the service restarted when a file
    changed or it is not running, then waited on at the restored unit's own address. A revision without the unit
    (recorded before the first deploy) stops and disables the service before its unit goes. ``restarted``, ``ready``
    (None when it was not restarted) and ``reason`` say how it went; a systemctl that fails raises RevisionError."""
    had_unit = any(entry["path"] == unit_path and entry["present"] for entry in read_manifest(store, revision)["files"])
    if not had_unit and os.path.exists(unit_path):
        _systemctl(run, revision, ["stop", unit], ["disable", unit])  # disable reads the unit's [Install]: before it goes
    changed = restore(store, revision)
    result = {"revision": revision, "changed_paths": changed, "restarted": False, "ready": None, "reason": ""}
    if not had_unit:
        _systemctl(run, revision, ["daemon-reload"])
        return {**result, "reason": "the revision has no unit: the service is stopped and disabled"}
    if not changed and unit_state(run, unit).running:
        return {**result, "reason": "already on this revision and running"}
    _systemctl(run, revision, ["daemon-reload"], ["reset-failed", unit], ["restart", unit])
    with open(unit_path, encoding="utf-8") as handle:
        url = unit_health_url(handle.read())
    ready = wait_until_ready(run, unit, url, ready_timeout)
    return {**result, "restarted": True, "ready": ready.ready, "reason": ready.reason,
            "ready_seconds": round(ready.seconds, 3)}


def _systemctl(run: Runner, revision: str, *calls: list[str]) -> None:
    for args in calls:
        rc, out, err = run(["systemctl", *args], changes=True)
        if rc != 0 and args[0] != "reset-failed":  # it fails for a unit that is not failed
            raise RevisionError(f"systemctl {' '.join(args)} failed after revision {revision} was put back: "
                                f"{err.strip() or out.strip()}")
