#!/usr/bin/python
# Copyright (c) llmops.sglang contributors
# Apache License 2.0 (see LICENSE)
from __future__ import annotations

DOCUMENTATION = r"""
---
module: revision
short_description: Record a host's serving configuration as a revision, or put the host back on one
version_added: 2.1.0
description:
  - A revision is the service's unit file, its API key file and any further files named in O(paths) (for example the
    MoE config files an install is about to write), as they are at that moment, absent ones recorded as absent.
  - V(recorded) keeps a new revision under C(<store_dir>/<name>/<id>/) and removes the oldest beyond O(keep); its id
    comes back as RV(revision). The store is root's only (0700), as a revision holds the API key file.
  - V(restored) puts every file of O(revision) back as it was (files absent then are removed), reloads systemd and
    restarts the service when a file changed or it is not running, and waits until it is ready at the restored
    unit's own address. A revision recorded before the first deploy (no unit) stops and disables the service and
    removes its unit. Fails when the server does not become ready.
  - C(playbooks/rollout.yml) records one before each host's change and restores it on every
    host it updated when a batch fails.
  - The server module's own C(<unit>.llmops-backup) (the undo of one failed deploy) is unchanged and independent.
author:
  - llmops.sglang contributors (@llmops)
attributes:
  check_mode:
    description: Records nothing and restores nothing; V(restored) checks that the revision exists.
    support: full
  diff_mode:
    description: No diff; the result names the files a restore put back or removed.
    support: none
  platform:
    description: Linux hosts with systemd.
    support: full
    platforms: posix
options:
  name:
    description: The service's name, without C(.service) (as the server module's O(llmops.sglang.server#module:name)).
    type: str
    default: sglang
  state:
    description: V(recorded) keeps a new revision; V(restored) puts the host back on O(revision).
    type: str
    choices: [recorded, restored]
    default: recorded
  paths:
    description: Files recorded besides the unit and the API key file (V(recorded)).
    type: list
    elements: path
    default: []
  label:
    description: Why the revision was recorded, kept in its manifest (for example the rollout's run id).
    type: str
    default: ""
  keep:
    description: Revisions kept per service (V(recorded)); the oldest beyond it are removed.
    type: int
    default: 5
  revision:
    description: The id to restore (V(restored)), as RV(revision) of the V(recorded) task returned it.
    type: str
  ready_timeout:
    description: Seconds the restored server gets to become ready (V(restored)).
    type: int
    default: 1800
  store_dir:
    description: Where the revisions of every service are kept.
    type: path
    default: /var/lib/llmops-sglang/revisions
  unit_dir:
    description: Directory of the unit file.
    type: path
    default: /etc/systemd/system
  env_dir:
    description: Directory of the API key file C(<name>.env).
    type: path
    default: /etc/sglang
"""

EXAMPLES = r"""
- name: Record what the host runs before the change
  llmops.sglang.revision:
    paths: "{{ moe_install_check.installed }}"
    label: "rollout of run {{ run_id }}"
  register: before_change

- name: Put the host back on it
  llmops.sglang.revision:
    state: restored
    revision: "{{ before_change.revision }}"
"""

RETURN = r"""
revision:
  description: The id recorded (V(recorded)) or restored (V(restored)).
  returned: always
  type: str
  sample: "000007"
files:
  description: The files of the revision, each with C(path) and C(present).
  returned: state=recorded
  type: list
  elements: dict
pruned:
  description: Ids of the old revisions removed (V(recorded)).
  returned: state=recorded
  type: list
  elements: str
changed_paths:
  description: Files the restore wrote or removed (V(restored)).
  returned: state=restored
  type: list
  elements: str
restarted:
  description: Whether the service was restarted (V(restored)).
  returned: state=restored
  type: bool
ready:
  description: Whether the restarted server became ready; null when it was not restarted (V(restored)).
  returned: state=restored
  type: bool
reason:
  description: How the restore ended, in words (V(restored)).
  returned: state=restored
  type: str
summary:
  description: One line of what the restore did, also when it failed (V(restored)).
  returned: state=restored
  type: str
  sample: back on revision 000007, restarted and ready in 41.2 s
"""

import os

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.llmops.sglang.plugins.module_utils.command_runner import CommandRunner
from ansible_collections.llmops.sglang.plugins.module_utils.revisions import (
    RevisionError, put_back, read_manifest, record)
from ansible_collections.llmops.sglang.plugins.module_utils.systemd_service import SYSTEMD_ENVIRON
from ansible_collections.llmops.sglang.plugins.module_utils.systemd_unit import service_name_error


def main() -> None:
    module = AnsibleModule(
        argument_spec=dict(
            name=dict(type="str", default="sglang"),
            state=dict(type="str", default="recorded", choices=["recorded", "restored"]),
            paths=dict(type="list", elements="path", default=[]),
            label=dict(type="str", default=""),
            keep=dict(type="int", default=5),
            revision=dict(type="str"),
            ready_timeout=dict(type="int", default=1800),
            store_dir=dict(type="path", default="/var/lib/llmops-sglang/revisions"),
            unit_dir=dict(type="path", default="/etc/systemd/system"),
            env_dir=dict(type="path", default="/etc/sglang"),
        ),
        required_if=[("state", "restored", ("revision",))],
        supports_check_mode=True,
    )
    params = module.params
    problem = service_name_error("name", params["name"])
    if problem:
        module.fail_json(msg=problem)
    store = os.path.join(params["store_dir"], params["name"])
    unit = f"{params['name']}.service"
    unit_path = os.path.join(params["unit_dir"], unit)
    if params["state"] == "recorded":
        if module.check_mode:
            module.exit_json(changed=True, revision=None, files=[], pruned=[])
        paths = [unit_path, os.path.join(params["env_dir"], f"{params['name']}.env"), *params["paths"]]
        try:
            manifest = record(store, paths, label=params["label"], keep=params["keep"])
        except (RevisionError, OSError) as exc:
            module.fail_json(msg=f"no revision was recorded: {exc}")
        files = [{"path": entry["path"], "present": entry["present"]} for entry in manifest["files"]]
        module.exit_json(changed=True, revision=manifest["id"], files=files, pruned=manifest["pruned"])
    revision = params["revision"]
    try:
        read_manifest(store, revision)
        if module.check_mode:
            module.exit_json(changed=True, revision=revision, summary=f"would go back to revision {revision}")
        outcome = put_back(CommandRunner(module, environ=SYSTEMD_ENVIRON), store, revision, unit=unit,
                           unit_path=unit_path, ready_timeout=params["ready_timeout"])
    except (RevisionError, OSError) as exc:
        module.fail_json(msg=str(exc), revision=revision, summary=f"NOT back on revision {revision}: {exc}")
    changed = bool(outcome["changed_paths"]) or outcome["restarted"]
    if outcome["ready"] is False:
        msg = f"revision {revision} was put back but its server did not become ready: {outcome['reason']}"
        module.fail_json(msg=msg, changed=changed, summary=f"NOT serving on revision {revision}: {outcome['reason']}",
                         **outcome)
    module.exit_json(changed=changed, summary=summary(outcome), **outcome)


def summary(outcome: dict) -> str:
    """One line of what the restore did, for the rollout's failure message and summary."""
    if outcome["restarted"]:
        return f"back on revision {outcome['revision']}, restarted and ready in {outcome['ready_seconds']} s"
    return f"back on revision {outcome['revision']}: {outcome['reason']}"


if __name__ == "__main__":
    main()
