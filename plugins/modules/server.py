#!/usr/bin/python
# Copyright (c) llmops.sglang contributors
# Apache License 2.0 (see LICENSE)
from __future__ import annotations

DOCUMENTATION = r"""
---
module: server
short_description: Deploy an SGLang server as a systemd service, safely
version_added: 0.1.0
description:
  - Renders the systemd unit for an SGLang server on the controller (action plugin), validates the
    requested flags against the SGLang installed on the host, installs the unit, restarts the
    service and waits until it is really ready (unit active, ready marker in this start's journal,
    health endpoint answering).
  - Returns the startup log of exactly this start, selected by the systemd invocation id.
  - When the new configuration fails to start, the cause is classified from the log, the previous
    unit is restored and restarted, and the task fails naming the cause and SGLang's suggested fix.
author:
  - llmops.sglang contributors (@llmops)
attributes:
  check_mode:
    description: Reports what would change (unit, environment file, restart) without touching the host.
    support: full
  diff_mode:
    description: Shows the unit file before and after.
    support: full
  idempotent:
    description: A second run with the same inputs changes nothing and does not restart the server.
    support: full
options:
  name:
    description: Name of the systemd service (without C(.service)). Several instances per host need distinct names and ports.
    type: str
    required: true
  state:
    description:
      - V(started) deploys the unit and makes sure the server runs; it restarts only when the unit changed.
      - V(restarted) always restarts. V(stopped) stops the service. V(absent) stops it and removes the unit (a backup is kept).
    type: str
    choices: [started, restarted, stopped, absent]
    default: started
  python:
    description: Python interpreter of the SGLang installation (a venv's C(bin/python)).
    type: path
    default: /opt/sglang/venv/bin/python
  model_path:
    description: Model directory or hub id passed as C(--model-path).
    type: str
  server_args:
    description:
      - SGLang server arguments as a mapping of ServerArgs field names (C(tp_size), C(enable_flashinfer_allreduce_fusion), ...).
      - V(true) becomes a bare flag, V(false) and V(null) are omitted, lists expand to several values.
      - C(model_path), C(port) and C(api_key) are set by their own options.
    type: dict
    default: {}
  port:
    description: HTTP port of the server (C(--port)).
    type: int
    default: 30000
  host:
    description: Address the server listens on (C(--host)).
    type: str
    default: 127.0.0.1
  api_key:
    description: API key (C(--api-key)). Written to a mode 0600 EnvironmentFile, never into the unit or the logs.
    type: str
  environment:
    description: Environment variables of the service (C(CUDA_VISIBLE_DEVICES), C(SGLANG_MOE_CONFIG_DIR), ...).
    type: dict
    default: {}
  user:
    description: User the server runs as.
    type: str
    default: root
  group:
    description: Group the server runs as (default the user's primary group).
    type: str
  working_directory:
    description: Working directory of the service.
    type: path
    default: /
  unit_template:
    description: Jinja template of the unit, looked up like M(ansible.builtin.template) sources; default the collection's hardened unit.
    type: path
  unit_dir:
    description: Directory of the unit file.
    type: path
    default: /etc/systemd/system
  env_dir:
    description: Directory of the EnvironmentFile holding the API key.
    type: path
    default: /etc/sglang
  ready_timeout:
    description: Seconds to wait for the server to become ready (weight loading can take many minutes).
    type: int
    default: 1800
  validate_flags:
    description: Check every flag against C(python -m sglang.launch_server --help) of the host before changing anything.
    type: bool
    default: true
  _unit_content:
    description: Internal; the unit rendered on the controller by the action plugin.
    type: str
notes:
  - The unit is rendered on the controller by the action plugin of the same name.
  - The previous unit is kept as C(<unit>.llmops-backup) on the host.
seealso:
  - module: llmops.sglang.server_facts
"""

EXAMPLES = r"""
---
- name: Deploy the baseline configuration
  llmops.sglang.server:
    name: sglang
    model_path: /srv/models/Qwen3.5-122B-A10B
    server_args:
      tp_size: 4
      speculative_algorithm: NEXTN
      max_running_requests: null
    environment:
      CUDA_VISIBLE_DEVICES: "0,1,2,3"
  register: deploy

- name: Try a flag; a failed start restores the previous unit
  llmops.sglang.server:
    name: sglang
    model_path: /srv/models/Qwen3.5-122B-A10B
    server_args:
      tp_size: 4
      enable_flashinfer_allreduce_fusion: true
    api_key: "{{ vault_sglang_api_key }}"
"""

RETURN = r"""
unit_path:
  description: Path of the unit file.
  returned: always
  type: str
  sample: /etc/systemd/system/sglang.service
command:
  description: The server command line (API key not included).
  returned: always
  type: list
  elements: str
  sample: [/opt/sglang/venv/bin/python, -m, sglang.launch_server, --model-path, /srv/models/m, --tp-size, "4"]
actions:
  description: What was done (or would be done in check mode), in order.
  returned: always
  type: list
  elements: str
  sample: [write unit, daemon-reload, restart, wait ready]
restarted:
  description: Whether the service was (re)started by this task.
  returned: always
  type: bool
invocation_id:
  description: systemd invocation id of the running start.
  returned: when the service runs
  type: str
startup_log:
  description: Journal lines of this invocation only (selected by C(_SYSTEMD_INVOCATION_ID)).
  returned: when the service runs
  type: str
ready_seconds:
  description: Seconds from restart to ready.
  returned: when restarted
  type: float
failure:
  description: Classified cause of a failed start (from the startup log parser).
  returned: on failure
  type: dict
  sample: {kind: oom, message: "RuntimeError: Not enough memory. Please try to increase --mem-fraction-static.", suggestion: "..."}
rolled_back:
  description: Whether the previous unit was restored after a failed start.
  returned: on failure
  type: bool
"""

import os
import shutil

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.llmops.sglang.plugins.module_utils.atomic_write import write_atomically
from ansible_collections.llmops.sglang.plugins.module_utils.server_args import (
    parse_help_flags, validate_server_args)
from ansible_collections.llmops.sglang.plugins.module_utils.startup_log import parse_startup_log
from ansible_collections.llmops.sglang.plugins.module_utils.systemd_service import (
    invocation_log, unit_state, wait_until_ready)

BACKUP_SUFFIX = ".llmops-backup"


class ServerDeployment:
    def __init__(self, module: AnsibleModule) -> None:
        self.module = module
        self.params = module.params
        self.name = self.params["name"]
        self.unit = f"{self.name}.service"
        self.unit_path = os.path.join(self.params["unit_dir"], self.unit)
        self.env_path = os.path.join(self.params["env_dir"], f"{self.name}.env")
        self.actions: list[str] = []

    # ---- helpers --------------------------------------------------------------------------
    def run(self, argv: list) -> tuple:
        return self.module.run_command(argv, environ_update={"LC_ALL": "C", "SYSTEMD_PAGER": ""})

    def fail(self, msg: str, **extra) -> None:
        self.module.fail_json(msg=msg, unit_path=self.unit_path, actions=self.actions, **extra)

    @staticmethod
    def read(path: str) -> str | None:
        try:
            with open(path, encoding="utf-8") as handle:
                return handle.read()
        except FileNotFoundError:
            return None

    def env_content(self) -> str | None:
        key = self.params["api_key"]
        return None if key is None else f"SGLANG_API_KEY={key}\n"

    def health_url(self) -> str:
        host = self.params["host"]
        host = "127.0.0.1" if host in ("0.0.0.0", "::", "") else host
        return f"http://{host}:{self.params['port']}/health"

    # ---- validation -----------------------------------------------------------------------
    def validate_flags(self) -> None:
        python = self.params["python"]
        if not os.path.exists(python):
            self.fail(f"python: {python} does not exist on the host; set `python` to the SGLang venv's interpreter")
        rc, out, err = self.run([python, "-m", "sglang.launch_server", "--help"])
        if rc != 0:
            self.fail(f"`{python} -m sglang.launch_server --help` failed (rc={rc}); is SGLang installed there? {err.strip()[-500:]}")
        requested = dict(self.params["server_args"])
        requested.update({"model_path": self.params["model_path"], "port": self.params["port"], "host": self.params["host"]})
        errors = validate_server_args(requested, parse_help_flags(out))
        if errors:
            self.fail("invalid SGLang flags, nothing was changed: " + "; ".join(errors), errors=errors)

    # ---- state changes --------------------------------------------------------------------
    def write_atomically(self, path: str, content: str, mode: int) -> None:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        write_atomically(path, content.encode("utf-8"), mode)

    def backup(self) -> None:
        for path in (self.unit_path, self.env_path):
            if os.path.exists(path):
                shutil.copy2(path, path + BACKUP_SUFFIX)
            elif os.path.exists(path + BACKUP_SUFFIX):
                os.remove(path + BACKUP_SUFFIX)  # a stale backup must not resurrect a file that was absent

    def restore_backup(self) -> bool:
        restored = False
        for path in (self.unit_path, self.env_path):
            if os.path.exists(path + BACKUP_SUFFIX):
                os.replace(path + BACKUP_SUFFIX, path)
                restored = restored or path == self.unit_path
        return restored

    def systemctl(self, *args: str) -> None:
        rc, out, err = self.run(["systemctl", *args])
        if rc != 0:
            self.fail(f"systemctl {' '.join(args)} failed: {err.strip() or out.strip()}")
        self.actions.append(" ".join(args))

    def restart_and_wait(self):
        self.systemctl("restart", self.unit)
        return wait_until_ready(self.run, self.unit, self.health_url(), self.params["ready_timeout"])

    # ---- states ---------------------------------------------------------------------------
    def present(self, force_restart: bool) -> dict:
        new_unit = self.params["_unit_content"]
        new_env = self.env_content()
        old_unit, old_env = self.read(self.unit_path), self.read(self.env_path)
        unit_changed = old_unit != new_unit
        env_changed = new_env is not None and old_env != new_env
        state = unit_state(self.run, self.unit)
        needs_restart = force_restart or unit_changed or env_changed or not state.running
        result = {"changed": unit_changed or env_changed or needs_restart, "restarted": False,
                  "diff": {"before": old_unit or "", "after": new_unit,
                           "before_header": self.unit_path, "after_header": self.unit_path}}
        if self.module.check_mode or not result["changed"]:
            self.actions += [a for a, on in (("write unit", unit_changed), ("write environment file", env_changed),
                                             ("restart", needs_restart)) if on]
            if state.running and not self.module.check_mode:
                result.update(invocation_id=state.invocation_id, startup_log=invocation_log(self.run, state.invocation_id))
            return result

        self.backup()
        if unit_changed:
            self.write_atomically(self.unit_path, new_unit, 0o644)
            self.actions.append("write unit")
        if env_changed:
            self.write_atomically(self.env_path, new_env, 0o600)
            self.actions.append("write environment file")
        self.systemctl("daemon-reload")
        ready = self.restart_and_wait()
        result.update(restarted=True, invocation_id=ready.invocation_id, startup_log=ready.log,
                      ready_seconds=round(ready.seconds, 3))
        if not ready.ready:
            self.handle_failed_start(ready, had_previous=old_unit is not None)
        return result

    def handle_failed_start(self, ready, had_previous: bool) -> None:
        facts = parse_startup_log(ready.log)
        failure = facts.get("error") or {"kind": "unknown", "message": ready.reason, "lines": []}
        rolled_back = False
        restored_note = "there was no previous unit, so the service is left stopped"
        self.run(["systemctl", "stop", self.unit])
        if had_previous and self.restore_backup():
            self.systemctl("daemon-reload")
            previous = self.restart_and_wait()
            rolled_back = previous.ready
            restored_note = ("the previous unit was restored and is running again" if previous.ready
                             else f"the previous unit was restored but did not become ready: {previous.reason}")
        else:
            self.actions.append("stop")
        suggestion = failure.get("suggestion")
        lines = "\n".join(failure.get("lines") or [])
        self.fail(f"SGLang failed to start ({failure['kind']}): {failure['message']}. {ready.reason}; {restored_note}."
                  + (f" SGLang suggests: {suggestion}" if suggestion else "")
                  + (f"\nLog lines:\n{lines}" if lines else ""),
                  failure=failure, rolled_back=rolled_back, startup_log=ready.log, invocation_id=ready.invocation_id)

    def stopped(self) -> dict:
        state = unit_state(self.run, self.unit)
        changed = state.running
        if changed and not self.module.check_mode:
            self.systemctl("stop", self.unit)
        return {"changed": changed, "restarted": False}

    def absent(self) -> dict:
        result = self.stopped()
        exists = os.path.exists(self.unit_path) or os.path.exists(self.env_path)
        result["changed"] = result["changed"] or exists
        result["diff"] = {"before": self.read(self.unit_path) or "", "after": ""}
        if exists and not self.module.check_mode:
            self.backup()
            for path in (self.unit_path, self.env_path):
                if os.path.exists(path):
                    os.remove(path)
            self.systemctl("daemon-reload")
            self.actions.append("remove unit")
        return result


def main() -> None:
    module = AnsibleModule(
        argument_spec=dict(
            name=dict(type="str", required=True),
            state=dict(type="str", default="started", choices=["started", "restarted", "stopped", "absent"]),
            python=dict(type="path", default="/opt/sglang/venv/bin/python"),
            model_path=dict(type="str"),
            server_args=dict(type="dict", default={}),
            port=dict(type="int", default=30000),
            host=dict(type="str", default="127.0.0.1"),
            api_key=dict(type="str", no_log=True),
            environment=dict(type="dict", default={}),
            user=dict(type="str", default="root"),
            group=dict(type="str"),
            working_directory=dict(type="path", default="/"),
            unit_template=dict(type="path"),
            unit_dir=dict(type="path", default="/etc/systemd/system"),
            env_dir=dict(type="path", default="/etc/sglang"),
            ready_timeout=dict(type="int", default=1800),
            validate_flags=dict(type="bool", default=True),
            _unit_content=dict(type="str"),
        ),
        required_if=[("state", "started", ("model_path", "_unit_content")),
                     ("state", "restarted", ("model_path", "_unit_content"))],
        supports_check_mode=True,
    )
    deployment = ServerDeployment(module)
    state = module.params["state"]
    if state in ("started", "restarted"):
        if module.params["validate_flags"]:
            deployment.validate_flags()
        result = deployment.present(force_restart=state == "restarted")
    elif state == "stopped":
        result = deployment.stopped()
    else:
        result = deployment.absent()
    if not module._diff:
        result.pop("diff", None)
    module.exit_json(unit_path=deployment.unit_path, actions=deployment.actions, **result)


if __name__ == "__main__":
    main()
