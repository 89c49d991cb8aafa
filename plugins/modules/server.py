#!/usr/bin/python
# Copyright (c) llmops.sglang contributors
# Apache License 2.0 (see LICENSE)
from __future__ import annotations

DOCUMENTATION = r"""
---
module: server
short_description: Deploy an SGLang server as a systemd service, safely
version_added: 1.0.0
description:
  - Renders the systemd unit for an SGLang server on the controller (action plugin), validates the
    requested flags against the SGLang installed on the host, installs the unit, restarts the
    service and waits until it is really ready (unit active, ready marker in this start's journal,
    health endpoint answering).
  - Returns the startup log of exactly this start, selected by the systemd invocation id, and its facts (the log parsed
    by the parser of M(llmops.sglang.server_facts), merged with C(/server_info)). The journal the wait followed is
    the log, so it is read once, and no M(llmops.sglang.server_facts) is needed after a deploy.
  - Every value that reaches the unit is checked on the controller before anything changes. A control character (a
    line break, a carriage return, NUL, ...) in any of them fails the task naming the option (a line break would end
    its setting and start another one), and each setting is quoted by its own systemd syntax. A changed unit is
    checked with C(systemd-analyze verify) on the host (in a temporary file, check mode too) before it replaces the
    installed one; a unit systemd refuses is never installed.
  - When the new configuration fails to start, the cause is classified from the log, the previous
    unit is restored and restarted, and the task fails naming the cause and SGLang's suggested fix.
  - Any other failure after the first change (a C(systemctl) call, reading the unit's state) is undone the same way,
    and the message says what was put back. A first deploy that fails leaves no unit behind (stopped, disabled,
    removed with its API key file); when putting back fails too, the message holds both errors and where the backups are.
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
      - V(started) deploys the unit, enables it (a reboot brings the server back) and makes sure the server runs;
        it restarts only when the unit or the API key changed.
      - V(restarted) is V(started) that always restarts.
      - V(stopped) stops the server now and leaves the unit enabled, as an operator expects of a stop; the next boot
        starts it again (use V(absent) to keep it off for good).
      - V(absent) stops and disables the service and removes the unit (a backup of the unit is kept) and the API key
        file with its backup (a key is never kept for a server that no longer exists).
    type: str
    choices: [started, restarted, stopped, absent]
    default: started
  python:
    description: Python interpreter of the SGLang installation (a venv's C(bin/python)).
    type: path
    default: /opt/sglang/venv/bin/python
  model_path:
    description:
      - Model directory or hub id passed as C(--model-path).
      - A local path (absolute, C(./)-relative, or existing relative to O(working_directory)) must be a directory
        holding C(config.json) that O(user) can read and the unit's sandboxing does not hide; anything else must be
        a hub id (C(org/name)). Checked before anything changes.
    type: str
  server_args:
    description:
      - SGLang server arguments as a mapping of ServerArgs field names (C(tp_size), C(enable_flashinfer_allreduce_fusion), ...).
      - V(true) becomes a bare flag, V(null) is omitted (SGLang's default), lists expand to several values.
      - V(false) is omitted too, except for a flag the host's C(launch_server --help) also lists as C(--no-<flag>)
        (a three-state flag whose default is "auto", such as C(enable_tf32_matmul) of SGLang 0.5.23), which becomes
        C(--no-<flag>). The host's C(--help) is read for this only when a value is V(false).
      - The unit's command line is canonical (C(--model-path), C(--host), C(--port), then the flags sorted), so the
        same arguments in another order change nothing and do not restart the server.
      - C(model_path), C(host) and C(port) are set by their own options. C(api_key) and C(admin_api_key) are refused
        (on a command line a key is readable by every local user); set the key with O(api_key).
    type: dict
    default: {}
  port:
    description:
      - HTTP port of the server (C(--port)).
      - Before anything changes, the task fails naming the process when another process (not this service) listens
        on it.
    type: int
    default: 30000
  host:
    description: Address the server listens on (C(--host)).
    type: str
    default: 127.0.0.1
  api_key:
    description:
      - API key of the server (SGLang's C(--api-key)); omitted = no authentication, and a key file left by an earlier
        deploy is removed (with its backup).
      - At least 8 characters, without control characters and without whitespace at its start or end (the launcher
        strips the line it reads); another key fails the task before anything changes.
      - Written to C(<env_dir>/<name>.env) (root, mode 0600) and passed by systemd as the C(sglang-api-key)
        credential (C(LoadCredential=)); the launcher (O(launcher_path)) gives it to SGLang inside the process and
        writes C(***) in its place in the server's output. It is never in the unit, the server's argv or environment,
        the journal or this module's result. See C(docs/reliability.md), "Secrets".
    type: str
  environment:
    description:
      - Environment variables of the service (C(CUDA_VISIBLE_DEVICES), C(SGLANG_MOE_CONFIG_DIR), ...).
      - Names are variable names (C([A-Za-z_][A-Za-z0-9_]*)); values hold no control character.
    type: dict
    default: {}
  user:
    description:
      - User the server runs as (a user name or a numeric id); it must exist on the host (the C(llmops.sglang.sglang_server) role creates it as a
        system user without a login shell).
      - The unit is hardened for it (C(systemd-analyze security) below 5.0) with no capabilities, the file system
        read-only but for C(/var/lib/sglang) (HOME) and C(/var/cache/sglang) (HF, Triton and TorchInductor caches)
        and O(read_write_paths), NVIDIA devices only (O(device_allow)).
    type: str
    default: sglang
  group:
    description: Group the server runs as (default the user's primary group).
    type: str
  working_directory:
    description: Working directory of the service.
    type: path
    default: /
  unit_template:
    description:
      - Jinja template of the unit, looked up like M(ansible.builtin.template) sources; default the collection's hardened unit.
      - Its variables are ready for their settings (quoted, C(%) escaped), C(sglang_unit_name), C(sglang_description),
        C(sglang_exec_start), C(sglang_user), C(sglang_group), C(sglang_working_directory), C(sglang_api_key_file)
        (empty without a key), and lists of values C(sglang_environment) (for C(Environment=)),
        C(sglang_read_only_paths), C(sglang_read_write_paths) and C(sglang_device_allow).
    type: path
  unit_dir:
    description: Directory of the unit file.
    type: path
    default: /etc/systemd/system
  env_dir:
    description: Directory of the root-only file holding the API key (C(<name>.env), C(SGLANG_API_KEY=<key>)).
    type: path
    default: /etc/sglang
  launcher_path:
    description:
      - Where the collection's launcher is installed on the host (root-owned, mode 0755, updated when the collection
        ships a new one; an update alone does not restart a running server).
      - The unit runs C(<python> <launcher_path> sglang.launch_server <flags>); the launcher adds the API key to
        SGLang's argv in-process and masks it in the output, then runs C(sglang.launch_server) as C(python -m) does.
    type: path
    default: /usr/local/libexec/llmops-sglang/sglang_launcher.py
  read_write_paths:
    description:
      - Paths the server may write besides its state and cache directories (C(ReadWritePaths=); a missing path is
        ignored). Absolute, without C(.) or C(..) components (systemd would ignore such a path).
    type: list
    elements: path
    default: []
  device_allow:
    description:
      - C(DeviceAllow=) entries of the unit (C(DevicePolicy=closed) allows only these and the standard pseudo devices).
      - Default the NVIDIA nodes; DeviceAllow takes no globs, so C(/dev/nvidia0..N) are C(char-nvidia-frontend).
    type: list
    elements: str
  ready_timeout:
    description: Seconds to wait for the server to become ready (weight loading can take many minutes).
    type: int
    default: 1800
  validate_flags:
    description:
      - Check every flag against C(python -m sglang.launch_server --help) of the host before changing anything.
      - Then parse the unit's exact command line with the installed SGLang's own argument parser (C(ServerArgs.add_cli_args),
        parse only, nothing starts), so a wrong type or value (C(tp_size=four)) fails naming the field.
    type: bool
    default: true
notes:
  - The unit is rendered on the controller by the action plugin of the same name, which hands it and the launcher to
    the module as a file in the task's remote tmp dir; so O(state=started) and O(state=restarted) work only as a task
    (through the action plugin), and not with C(become_user) of an unprivileged user other than the connection's.
  - The previous unit is kept as C(<unit>.llmops-backup) on the host. The API key file's backup exists only while a
    deploy restarts the server (it is restored on rollback and removed otherwise).
  - The unit gives up after 5 failed starts within an hour (C(StartLimitBurst=), C(StartLimitIntervalSec=)) instead of
    restarting for good; every restart this module makes resets that count first (C(systemctl reset-failed)).
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
  description: The server command line of the unit (canonical order; the API key is never on it).
  returned: when the state is started or restarted
  type: list
  elements: str
  sample: [/opt/sglang/venv/bin/python, /usr/local/libexec/llmops-sglang/sglang_launcher.py, sglang.launch_server,
           --model-path, /srv/models/m, --host, 127.0.0.1, --port, "30000", --tp-size, "4"]
actions:
  description: What was done (or would be done in check mode), in order.
  returned: always
  type: list
  elements: str
  sample: [write unit, daemon-reload, enable sglang.service, restart sglang.service]
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
facts:
  description:
    - What the server of this start really did, as M(llmops.sglang.server_facts) returns it (C(facts)). The startup
      log parsed (capacity, arguments the server changed, MoE configs, warnings, readiness), merged with
      C(/server_info) (asked with O(api_key)), secrets masked.
    - Null when C(facts_error) says why they could not be read.
  returned: when the service runs
  type: dict
  sample: {max_running_requests: 48, max_total_num_tokens: 1166432, ready: true, missing_moe_configs: []}
sources:
  description: Where each fact came from (V(log), V(server_info) or V(log+server_info) when both agree).
  returned: when the service runs
  type: dict
  sample: {max_running_requests: log+server_info}
mismatches:
  description: Facts where the log and C(/server_info) disagree (the log value is kept).
  returned: when the service runs
  type: list
  elements: dict
server_info:
  description: The C(/server_info) document (secrets masked as V(***)), or null when not reachable.
  returned: when the service runs
  type: dict
log_lines:
  description: Number of lines of C(startup_log).
  returned: when the service runs
  type: int
facts_error:
  description: Why the facts could not be read (C(/server_info) answered 401), else null; the deploy itself succeeded.
  returned: when the service runs
  type: str
failure:
  description:
    - Classified cause of a failed start (from the startup log parser), C(kind) in the operator's terms
      (port_in_use, oom, gpu_unavailable, arch_unsupported, moe_config_error, model_error, install_error, nccl_error,
      cuda_error, warmup_failed, config_error, unknown_traceback, runtime_error; docs/support-matrix.md) with C(message),
      C(lines) and C(suggestion).
    - When the log names no error, how the wait ended (start_timeout, health_check_failed, exited).
  returned: on failure
  type: dict
  sample: {kind: oom, message: "RuntimeError: Not enough memory. Please try to increase --mem-fraction-static.", suggestion: "..."}
rolled_back:
  description:
    - Whether the previous configuration is back after a failure that came after the first change (its unit and key
      file restored, and its server ready again when the deploy had stopped it). False for a failed first deploy.
  returned: on failure after a change
  type: bool
unit_verify:
  description:
    - What C(systemd-analyze verify) said of the changed unit before it was installed (C(verified), C(rc), C(messages)
      about this unit), or why it did not run (C(skipped), for example systemd-analyze not installed; a warning says so).
  returned: when the unit changed (or would, in check mode)
  type: dict
  sample: {verified: true, skipped: null, rc: 0, messages: []}
rollback_seconds:
  description: Seconds from the restart of the restored previous unit until it was ready on its own host and port.
  returned: on failure, when a previous unit was restored
  type: float
errors:
  description:
    - Each problem found before anything changed (a value that cannot go into the unit, flags, SGLang's parser, model
      path, port, what systemd-analyze verify refused), naming the field.
  returned: on failure before any change
  type: list
  elements: str
"""

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.llmops.sglang.plugins.module_utils._server_deploy import deploy


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
            user=dict(type="str", default="sglang"),
            group=dict(type="str"),
            working_directory=dict(type="path", default="/"),
            unit_template=dict(type="path"),
            unit_dir=dict(type="path", default="/etc/systemd/system"),
            env_dir=dict(type="path", default="/etc/sglang"),
            launcher_path=dict(type="path", default="/usr/local/libexec/llmops-sglang/sglang_launcher.py"),
            read_write_paths=dict(type="list", elements="path", default=[]),
            device_allow=dict(type="list", elements="str"),
            ready_timeout=dict(type="int", default=1800),
            validate_flags=dict(type="bool", default=True),
        ),
        required_if=[("state", "started", ("model_path",)), ("state", "restarted", ("model_path",))],
        supports_check_mode=True,
    )
    module.exit_json(**deploy(module))


if __name__ == "__main__":
    main()
