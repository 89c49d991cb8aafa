#!/usr/bin/python
# Copyright (c) llmops.sglang contributors
# Apache License 2.0 (see LICENSE)
from __future__ import annotations

DOCUMENTATION = r"""
---
module: server_guard
short_description: Keep an SGLang service on its adopted configuration when the controller goes away
version_added: 1.0.0
description:
  - Arms, on the host, a guard of one service before a stage changes it (a candidate deployed, the server
    stopped for the MoE tuner). The guard keeps a snapshot of the adopted unit, environment file and any
    config files the stage may replace, and a lease.
  - Every llmops.sglang module that runs on the host for the guard's holder (its environment's
    E(LLMOPS_GUARD_HOLDER) equal to O(armed_by)) renews the lease while its controller is connected; modules of
    other jobs leave it alone, so an abandoned stage's guard runs out even while the host is busy. When
    the lease runs out (the controller was interrupted, crashed or lost the network), the guard ends the
    abandoned work on the host (a sweep, the tuner), stops the units the stage started, puts the snapshot back
    and restarts the service. Its unit is enabled, so after a reboot it restores before a candidate serves on.
  - A stage disarms the guard when it finishes; O(state=adopted) replaces the snapshot with what runs now.
author:
  - llmops.sglang contributors (@llmops)
attributes:
  check_mode:
    description: Reports whether the guard would be armed, re-snapshotted or disarmed.
    support: full
  diff_mode:
    description: Not supported.
    support: none
  idempotent:
    description: Arming an armed guard keeps its snapshot and only renews the lease; disarming twice changes nothing.
    support: partial
options:
  name:
    description:
      - Name of the guarded systemd service (without C(.service)). Letters, digits, C(_), C(.), C(:) and C(-),
        starting with a letter, digit or C(_); another name fails before any file is touched.
    type: str
    required: true
  state:
    description:
      - V(armed) takes a snapshot of what runs now, unless a guard of this service is armed already; then its snapshot
        is kept, since it is the last adopted configuration and what runs now may be an abandoned candidate.
      - V(adopted) replaces the snapshot with what runs now (the stage adopted it).
      - V(disarmed) removes the guard.
    type: str
    choices: [armed, adopted, disarmed]
    default: armed
  lease:
    description: Seconds the host waits for a renewal before it restores the snapshot.
    type: int
    default: 300
  stop_units:
    description: Units the guard stops before it restores (the Ray units of a tuning run).
    type: list
    elements: str
    default: []
  restore_backup_dir:
    description:
      - A backup directory of M(llmops.sglang.moe_configs) whose files the guard puts back too (the configs an
        install replaced or created, so an unadopted install never stays).
    type: path
  armed_by:
    description:
      - The lease's holder (run id and stage), kept in the guard's record. Only modules whose environment has
        E(LLMOPS_GUARD_HOLDER) set to this value renew the lease (set it with the play's C(environment) keyword, as
        the collection's stage playbooks do).
      - Empty (the default) takes E(LLMOPS_GUARD_HOLDER) of this task's environment; with neither, arming fails.
      - Arming a guard another holder armed takes it over (its snapshot is kept).
    type: str
    default: ""
  unit_dir:
    description: Directory of the service's unit file (as O(llmops.sglang.server#module:unit_dir)).
    type: path
    default: /etc/systemd/system
  env_dir:
    description: Directory of the service's environment file (as O(llmops.sglang.server#module:env_dir)).
    type: path
    default: /etc/sglang
  program_path:
    description: Where the guard program is installed on the host (root-owned, mode 0755).
    type: path
    default: /usr/local/libexec/llmops-sglang/server_guard.py
notes:
  - The guard's state lives in C(/var/lib/llmops-sglang/guard/<name>/); after it restored, C(restored.json)
    there says when and why, and the next arming returns it as RV(restored).
  - Arming, adoption, disarming, every renewal and the guard's firing hold the flock of
    C(/var/lib/llmops-sglang/guard/.locks/<name>), so none of them overwrites another's change.
seealso:
  - module: llmops.sglang.server
"""

EXAMPLES = r"""
---
- name: Guard the adopted configuration while candidates are tried
  llmops.sglang.server_guard:
    name: sglang
    lease: 300
    armed_by: "{{ run_id }}/flags"  # the play sets environment LLMOPS_GUARD_HOLDER to the same value

- name: The candidate is adopted; it is what the guard restores from now on
  llmops.sglang.server_guard:
    name: sglang
    state: adopted

- name: Stage finished
  llmops.sglang.server_guard:
    name: sglang
    state: disarmed
"""

RETURN = r"""
guard_unit:
  description: The guard's systemd unit.
  returned: always
  type: str
  sample: llmops-guard-sglang.service
expires_at:
  description: When the lease runs out without a renewal (epoch seconds).
  returned: when armed
  type: float
snapshot:
  description: The files the guard puts back (null source = the file did not exist and is removed).
  returned: when armed
  type: list
  elements: dict
restored:
  description: What an earlier guard of this service restored because its controller went away (then cleared).
  returned: when a guard restored since the last arming
  type: dict
  sample: {restored_at: 1764580000.0, service: sglang.service, action: restart, rc: 0, armed_by: 20261201T0900Z/flags}
"""

import contextlib
import inspect
import os
import shutil
import sys
import time

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.llmops.sglang.plugins.module_utils import server_guard_program
from ansible_collections.llmops.sglang.plugins.module_utils.atomic_write import write_atomically
from ansible_collections.llmops.sglang.plugins.module_utils.command_runner import CommandRunner
from ansible_collections.llmops.sglang.plugins.module_utils.server_guard import (
    GUARD_ROOT, HOLDER_ENV, RECORD_FILE, STATE_FILE, WORK_DIR, current_holder, guard_dir, guard_lock, guard_unit,
    guard_unit_text, lock_path, read_json, remove_guard_dir, snapshot_files, with_backup, write_json)


class Guard:
    def __init__(self, module: AnsibleModule, root: str = GUARD_ROOT) -> None:
        self.module = module
        self.params = module.params
        self.service = self.params["name"]
        self.root = root
        try:  # before any file is touched: a name such as '..' or '' would reach beyond this service's guard
            self.dir = guard_dir(self.service, root)
        except ValueError as exc:
            module.fail_json(msg=str(exc))
        self.state_path = os.path.join(self.dir, STATE_FILE)
        self.record_path = os.path.join(os.path.dirname(self.dir), f"{self.service}.{RECORD_FILE}")
        self.unit = guard_unit(self.service)
        self.unit_path = os.path.join(self.params["unit_dir"], self.unit)
        self.run = CommandRunner(module)

    def systemctl(self, *args: str) -> None:
        rc, out, err = self.run(["systemctl", *args], changes=True)
        if rc != 0:
            self.module.fail_json(msg=f"systemctl {' '.join(args)} failed: {err.strip() or out.strip()}")

    def snapshot(self) -> list[dict]:
        """Copies of the service's unit and environment file as they are now (the adopted configuration)."""
        snapshot_dir = os.path.join(self.dir, f"snapshot-{time.time_ns()}")
        os.makedirs(snapshot_dir, mode=0o700)
        return snapshot_files([(os.path.join(self.params["unit_dir"], f"{self.service}.service"), 0o644),
                               (os.path.join(self.params["env_dir"], f"{self.service}.env"), 0o600)], snapshot_dir)

    def remove_old_snapshots(self, keep: list[dict]) -> None:
        kept = {os.path.dirname(f["source"]) for f in keep if f["source"]}
        for name in os.listdir(self.dir):
            path = os.path.join(self.dir, name)
            if name.startswith("snapshot-") and path not in kept:
                shutil.rmtree(path)

    def take_record(self) -> dict | None:
        record = read_json(self.record_path)
        if record is not None and not self.module.check_mode:
            os.remove(self.record_path)
        return record

    def install_program(self) -> None:
        path = self.params["program_path"]
        content = inspect.getsource(server_guard_program).encode("utf-8")
        try:
            with open(path, "rb") as handle:
                if handle.read() == content:
                    return
        except FileNotFoundError:
            os.makedirs(os.path.dirname(path), mode=0o755, exist_ok=True)
        write_atomically(path, content, 0o755)

    def holder(self) -> str:
        """Who holds the lease: O(armed_by), else the holder of this task's environment (the stage playbooks set it)."""
        holder = self.params["armed_by"] or current_holder()
        if not holder:
            self.module.fail_json(msg=f"armed_by: a guard needs its holder (the run id and stage; only modules whose "
                                      f"environment has {HOLDER_ENV} set to it renew the lease): set armed_by or "
                                      f"{HOLDER_ENV}; nothing was changed")
        return holder

    def arm(self, replace_snapshot: bool) -> dict:
        holder = self.holder()
        with contextlib.nullcontext() if self.module.check_mode else guard_lock(self.service, self.root):
            return self._arm(replace_snapshot, holder)

    def _arm(self, replace_snapshot: bool, holder: str) -> dict:
        state = read_json(self.state_path)
        backup = bool(self.params["restore_backup_dir"])
        taken_over = state is not None and state.get("armed_by") != holder
        result = {"changed": state is None or replace_snapshot or backup or taken_over, "guard_unit": self.unit}
        restored = self.take_record()
        if restored:
            result["restored"] = restored
        if self.module.check_mode:
            return result
        if state is None or replace_snapshot:
            files = self.snapshot()
            state = {"service": f"{self.service}.service", "guard_unit": self.unit, "work_dir": WORK_DIR,
                     "record_path": self.record_path, "files": files, "service_existed": files[0]["source"] is not None}
        if backup:
            try:
                state = with_backup(state, self.params["restore_backup_dir"])
            except ValueError as exc:
                self.module.fail_json(msg=f"restore_backup_dir: {exc}")
        # An arming by another stage takes the guard over (its snapshot, the last adopted configuration, is kept):
        # from now on only that stage's modules renew it.
        state.update(armed_by=holder, lock_path=lock_path(self.service, self.root),
                     lease_s=self.params["lease"], expires_at=time.time() + self.params["lease"],
                     stop_units=self.params["stop_units"] or state.get("stop_units", []))
        write_json(self.state_path, state)
        self.remove_old_snapshots(keep=state["files"])
        self.install_program()
        self.install_unit()
        return {**result, "expires_at": state["expires_at"], "snapshot": state["files"]}

    def install_unit(self) -> None:
        unit_text = guard_unit_text(self.service, sys.executable, self.params["program_path"], self.state_path)
        try:
            with open(self.unit_path, encoding="utf-8") as handle:
                current = handle.read() == unit_text
        except FileNotFoundError:
            current = False
        if not current:
            write_atomically(self.unit_path, unit_text.encode("utf-8"), 0o644)
            self.systemctl("daemon-reload")
        self.systemctl("enable", "--now", self.unit)

    def disarm(self) -> dict:
        armed = os.path.exists(self.dir) or os.path.exists(self.unit_path)
        result = {"changed": armed, "guard_unit": self.unit}
        restored = self.take_record()
        if restored:
            result["restored"] = restored
        if armed and not self.module.check_mode:
            with guard_lock(self.service, self.root):  # first: a guard waking now finds nothing to restore
                try:
                    remove_guard_dir(self.dir, self.root)
                except ValueError as exc:
                    self.module.fail_json(msg=f"name: {exc}")
            if os.path.exists(self.unit_path):
                self.systemctl("disable", "--now", self.unit)
                os.remove(self.unit_path)
                self.systemctl("daemon-reload")
        return result


def main() -> None:
    module = AnsibleModule(
        argument_spec=dict(
            name=dict(type="str", required=True),
            state=dict(type="str", default="armed", choices=["armed", "adopted", "disarmed"]),
            lease=dict(type="int", default=300),
            stop_units=dict(type="list", elements="str", default=[]),
            restore_backup_dir=dict(type="path"),
            armed_by=dict(type="str", default=""),
            unit_dir=dict(type="path", default="/etc/systemd/system"),
            env_dir=dict(type="path", default="/etc/sglang"),
            program_path=dict(type="path", default="/usr/local/libexec/llmops-sglang/server_guard.py"),
        ),
        supports_check_mode=True,
    )
    if module.params["lease"] < 10:
        module.fail_json(msg=f"lease: {module.params['lease']} s is too short to renew; give at least 10 seconds")
    guard = Guard(module)
    state = module.params["state"]
    result = guard.disarm() if state == "disarmed" else guard.arm(replace_snapshot=state == "adopted")
    module.exit_json(**result)


if __name__ == "__main__":
    main()
