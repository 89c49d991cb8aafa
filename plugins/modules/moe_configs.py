#!/usr/bin/python
# Copyright (c) llmops.sglang contributors
# Apache License 2.0 (see LICENSE)
from __future__ import annotations

DOCUMENTATION = r"""
---
module: moe_configs
short_description: Validate, install and restore SGLang's fused-MoE Triton config files
version_added: 1.0.0
description:
  - Works on the directory SGLang reads fused-MoE configs from, C(configs/triton_X_Y_Z/) next to the installed
    package's config module, or a managed C(SGLANG_MOE_CONFIG_DIR) given as O(config_dir).
  - V(present) validates every file first (names SGLang can look up, batch-size keys, kernel fields with sane
    values) and installs nothing when one fails. An up file and its C(_down) file (given, or already installed) are
    paired as the server pairs them; where they pick a different BLOCK_SIZE_M, releases up to 0.5.12 assert (the
    server crashes at its first forward), so the install is refused there, while later releases override the
    down value, so it is a warning (RV(pairing_warnings)). The rules are the installed SGLang's (module_utils/moe_rules).
    Then it
    backs up what it replaces (and records what it creates) in a timestamped directory on the host, writes each file
    atomically, and restores everything when a step fails.
  - A managed O(config_dir) used for the first time is seeded with the package's built-in configs, because with
    C(SGLANG_MOE_CONFIG_DIR) set SGLang no longer searches the package.
  - V(restored) puts a backup back exactly (files the install created are removed).
  - M(llmops.sglang.moe_configs_info) lists what is installed without changing anything.
author:
  - llmops.sglang contributors (@llmops)
attributes:
  check_mode:
    description: Validates, and reports what would be installed, replaced, seeded or restored without writing.
    support: full
  diff_mode:
    description: Shows each installed file before and after.
    support: full
  idempotent:
    description: Files already installed with the same content are left alone and report no change.
    support: full
options:
  python:
    description: Python interpreter of the SGLang installation; finds the package's config directory and the Triton version.
    type: path
    default: /opt/sglang/venv/bin/python
  config_dir:
    description:
      - Managed C(SGLANG_MOE_CONFIG_DIR) (the server must run with it set); files go to C(<config_dir>/configs/<triton_dir>/).
      - Default the installed package's own C(configs/) directory.
    type: path
  state:
    description: V(present) installs O(configs); V(restored) puts O(backup_dir) back.
    type: str
    choices: [present, restored]
    default: present
  configs:
    description: Config files to install (O(state=present)).
    type: list
    elements: dict
    default: []
    suboptions:
      src:
        description: Path of a JSON file on the host (e.g. M(llmops.sglang.moe_tune)'s RV(llmops.sglang.moe_tune#module:output_file)).
        type: path
      name:
        description: File name to install under; required with O(configs[].content), default the basename of O(configs[].src).
        type: str
      content:
        description: The config as a mapping of batch size to kernel config.
        type: dict
  triton_dir:
    description: Target C(triton_X_Y_Z) directory; default the one of the installed Triton.
    type: str
  backup:
    description: Keep the backup directory after a successful install (it is always made, for the rollback).
    type: bool
    default: true
  backup_root:
    description: Where V(present) creates its timestamped backup directories.
    type: path
    default: /var/lib/llmops-sglang/moe-configs-backup
  backup_dir:
    description: A backup directory returned by V(present), to restore (O(state=restored)).
    type: path
  guard:
    description:
      - Name of the service (without C(.service)) whose armed guard (M(llmops.sglang.server_guard)) puts back what
        this install changes if the stage is abandoned. It is told between the complete backup and the first file
        replaced, in this same task, so a controller lost right after the install leaves no unadopted config served.
      - Fails, with nothing installed, when no guard of that service is armed on the host, or with O(backup=false)
        (the guard restores from the backup).
    type: str
    version_added: 2.1.0
seealso:
  - module: llmops.sglang.moe_configs_info
  - module: llmops.sglang.moe_tune
  - plugin: llmops.sglang.moe_targets
    plugin_type: filter
"""

EXAMPLES = r"""
---
- name: Install the tuned up and down configs where SGLang reads them
  llmops.sglang.moe_configs:
    configs:
      - src: "{{ tuned_up.output_file }}"
      - src: "{{ tuned_down.output_file }}"
  register: installed

- name: Install them while a stage changes the server, the host's guard told what to put back if it is abandoned
  llmops.sglang.moe_configs:
    guard: sglang
    configs:
      - src: "{{ tuned_up.output_file }}"

- name: Go back to what was there before
  llmops.sglang.moe_configs:
    state: restored
    backup_dir: "{{ installed.backup_dir }}"
"""

RETURN = r"""
install_dir:
  description: The C(configs/<triton_dir>) directory installed into.
  returned: state=present
  type: str
  sample: /opt/sglang/venv/lib/python3.11/site-packages/sglang/srt/layers/moe/moe_runner/triton_utils/configs/triton_3_6_0
installed:
  description: Paths of every requested file (in place after the task).
  returned: state=present
  type: list
  elements: str
replaced:
  description: Paths whose previous content was replaced (and backed up).
  returned: state=present
  type: list
  elements: str
created:
  description: Paths that did not exist before.
  returned: state=present
  type: list
  elements: str
seeded:
  description: Built-in package configs copied into a managed O(config_dir) on its first use.
  returned: state=present
  type: list
  elements: str
backup_dir:
  description: Backup of this install (restore it with O(state=restored)); null when nothing changed or O(backup=false).
  returned: state=present or state=restored
  type: str
restored:
  description: Paths given back their previous content.
  returned: state=restored
  type: list
  elements: str
removed:
  description: Files and directories the install had created, removed again.
  returned: state=restored
  type: list
  elements: str
listing:
  description:
    - Per C(triton_*) directory, its fused-MoE files parsed (C(file_name), C(kernel) up/down, C(E), C(N),
      C(device_name), C(dtype), C(block_shape), C(per_channel_quant)).
  returned: state=present
  type: dict
  sample:
    triton_3_6_0:
      - {file_name: "E=256,N=256,device_name=NVIDIA_RTX_PRO_6000_Blackwell_Server_Edition.json", kernel: up, E: 256, N: 256}
pairing_warnings:
  description: Up/down pairs whose BLOCK_SIZE_M the installed release overrides (installed anyway).
  returned: state=present
  type: list
  elements: str
moe_rules:
  description:
    - How the installed SGLang looks configs up (C(config_module), C(fallback) V(fixed) or V(all_dirs),
      C(block_m_mismatch) V(assert) or V(override), C(down_missing), C(checked), C(note)).
  returned: state=present
  type: dict
errors:
  description: Every validation failure (nothing was installed).
  returned: when validation fails
  type: list
  elements: str
"""

import os

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.llmops.sglang.plugins.module_utils.command_runner import CommandRunner
from ansible_collections.llmops.sglang.plugins.module_utils.moe_install import (
    apply_changes, config_roots, install_changes, list_configs, read_requested, restore_backup, seed_changes,
    validation_report)
from ansible_collections.llmops.sglang.plugins.module_utils.server_guard import register_backup, renew_leases


class InvalidConfigs(ValueError):
    def __init__(self, errors: list[str]) -> None:
        super().__init__("nothing was installed; fix these configs (or re-run the tuner): " + "; ".join(errors))
        self.details = {"errors": errors}


def present(module: AnsibleModule) -> dict:
    params = module.params
    if params["guard"] and not params["backup"]:
        raise ValueError("guard: the guard restores from the install's backup; set backup=true or leave guard out")
    requested = read_requested(params["configs"])
    roots = config_roots(CommandRunner(module), params["python"], params["config_dir"], params["triton_dir"])
    install_dir = os.path.join(roots.root, roots.triton_dir)
    errors, warnings = validation_report(requested, roots.rules, install_dir, roots.triton_dir)
    if errors:
        raise InvalidConfigs(errors)
    for warning in warnings:
        module.warn(warning)
    changes = install_changes(install_dir, requested)
    requested_paths = {os.path.join(install_dir, config.name) for config in requested}
    # A requested file wins over the built-in one of the same name.
    seeds = [seed for seed in (seed_changes(roots.builtin, roots.root) if params["config_dir"] else [])
             if seed.path not in requested_paths]
    all_changes = seeds + changes
    backup_dir = None
    if all_changes and not module.check_mode:
        guard = params["guard"]
        backup_dir = apply_changes(all_changes, params["backup_root"], params["backup"],
                                   before_install=guard and (lambda backup: register_backup(guard, backup)))
    return {
        "changed": bool(all_changes),
        "install_dir": install_dir,
        "installed": sorted(requested_paths),
        "replaced": [c.path for c in changes if c.before is not None],
        "created": [c.path for c in changes if c.before is None],
        "seeded": [seed.path for seed in seeds],
        "backup_dir": backup_dir,
        "listing": list_configs(roots.root),
        "pairing_warnings": warnings,
        "moe_rules": roots.rules,
        "diff": [{"before_header": c.path, "after_header": c.path, "before": (c.before or b"").decode(errors="replace"),
                  "after": c.content.decode(errors="replace")} for c in changes],
    }


def restored(module: AnsibleModule) -> dict:
    result = restore_backup(module.params["backup_dir"], check_mode=module.check_mode)
    return {**result, "backup_dir": module.params["backup_dir"]}


STATES = {"present": present, "restored": restored}


def main() -> None:
    module = AnsibleModule(
        argument_spec=dict(
            python=dict(type="path", default="/opt/sglang/venv/bin/python"),
            config_dir=dict(type="path"),
            state=dict(type="str", choices=list(STATES), default="present"),
            configs=dict(type="list", elements="dict", default=[],
                         options=dict(src=dict(type="path"), name=dict(type="str"), content=dict(type="dict")),
                         mutually_exclusive=[("src", "content")], required_one_of=[("src", "content")],
                         required_by={"content": "name"}),
            triton_dir=dict(type="str"),
            backup=dict(type="bool", default=True),
            backup_root=dict(type="path", default="/var/lib/llmops-sglang/moe-configs-backup"),
            backup_dir=dict(type="path"),
            guard=dict(type="str"),
        ),
        required_if=[("state", "restored", ("backup_dir",))],
        supports_check_mode=True,
    )
    renew_leases()  # a sign of the controller, which the host's guards of a running stage wait for
    try:
        result = STATES[module.params["state"]](module)
    except (ValueError, OSError) as exc:
        module.fail_json(msg=str(exc), **getattr(exc, "details", {}))
    if not module._diff:
        result.pop("diff", None)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
