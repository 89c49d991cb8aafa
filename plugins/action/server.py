# Copyright (c) llmops.sglang contributors
# Apache License 2.0 (see LICENSE)
"""Controller half of llmops.sglang.server: renders the systemd unit from a Jinja template and hands it, with the
launcher's source, to the module as its request file (module_utils/action_request.py)."""
from __future__ import annotations

import shlex
from pathlib import Path

from ansible.errors import AnsibleActionFail
from ansible.plugins.action import ActionBase
from ansible.template import trust_as_template
from ansible_collections.llmops.sglang.plugins.module_utils.server_args import (
    canonical_args, parse_help_flags, secret_arg_errors, to_cli_args)
from ansible_collections.llmops.sglang.plugins.module_utils.systemd_unit import template_variables, unit_value_errors
from ansible_collections.llmops.sglang.plugins.plugin_utils.action_request import send_request

COLLECTION_ROOT = Path(__file__).resolve().parents[2]
DEFAULT_TEMPLATE = COLLECTION_ROOT / "roles" / "sglang_server" / "templates" / "sglang.service.j2"
LAUNCHER_SOURCE = COLLECTION_ROOT / "plugins" / "module_utils" / "sglang_launcher.py"
DEFAULT_LAUNCHER_PATH = "/usr/local/libexec/llmops-sglang/sglang_launcher.py"
MODULE = "llmops.sglang.server"
SERVER_MODULE = "sglang.launch_server"
OWN_OPTIONS = ("model_path", "port", "host")
DEFAULT_PYTHON = "/opt/sglang/venv/bin/python"
# NVIDIA device nodes a CUDA process opens. DeviceAllow= takes no globs: /dev/nvidia0..N are the
# "nvidia-frontend" character devices of /proc/devices (major 195), UVM and MIG caps have their own majors.
DEFAULT_DEVICE_ALLOW = ("/dev/nvidiactl rw", "/dev/nvidia-uvm rw", "/dev/nvidia-uvm-tools rw", "/dev/nvidia-modeset rw",
                        "char-nvidia-frontend rw", "char-nvidia-uvm rw", "char-nvidia-caps r")


def server_command(args: dict, known_flags: dict | None = None) -> list[str]:
    """The server argv, without the API key (the launcher adds it in-process), flags in canonical order:
    ``<python> <launcher> sglang.launch_server --model-path M --host H --port P --flag ...`` (sorted by flag).

    ``known_flags``: the host's ``--help`` (server_args.parse_help_flags), which says which false values the
    release needs spelled out (``--no-enable-tf32-matmul``, server_args.to_cli_args)."""
    server_args = dict(args.get("server_args") or {})
    errors = secret_arg_errors(server_args)
    if errors:
        raise AnsibleActionFail("; ".join(errors))
    for option in OWN_OPTIONS:
        if option in server_args:
            raise AnsibleActionFail(f"server_args.{option}: set it with the `{option}` option of the module instead")
    server_args = {"model_path": args.get("model_path"), "host": args.get("host", "127.0.0.1"),
                   "port": args.get("port", 30000), **server_args}
    python = args.get("python", DEFAULT_PYTHON)
    launcher = args.get("launcher_path") or DEFAULT_LAUNCHER_PATH
    return [python, launcher, SERVER_MODULE, *to_cli_args(canonical_args(server_args), known_flags)]


class ActionModule(ActionBase):
    TRANSFERS_FILES = False
    _requires_connection = True

    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        module_args = dict(self._task.args)
        command, warning = None, None
        if module_args.get("state", "started") in ("started", "restarted"):
            if not module_args.get("model_path"):
                raise AnsibleActionFail("model_path is required to deploy a server (state started/restarted)")
            errors = unit_value_errors(module_args)
            if errors:  # a value that could leave its setting never reaches a unit, on the controller already
                raise AnsibleActionFail("cannot deploy, nothing was changed: " + "; ".join(errors),
                                        result={"errors": errors, "actions": []})
            known_flags, warning = self._host_flags(module_args)
            command = server_command(module_args, known_flags)
            send_request(self, MODULE, {"unit_content": self._render_unit(module_args, command, task_vars or {}),
                                        "launcher_content": LAUNCHER_SOURCE.read_text(encoding="utf-8")})
        result.update(self._execute_module(module_name=MODULE, module_args=module_args, task_vars=task_vars))
        if command is not None:
            result["command"] = command
            if warning:
                result["warnings"] = [*result.get("warnings", []), warning]
        return result

    def _host_flags(self, args: dict) -> tuple[dict | None, str | None]:
        """(flags, warning): the host's SGLang flags, read from its ``--help`` only when a requested false needs them
        (a three-state flag takes false only as ``--no-<flag>``, and which flags are three-state differs per
        release); None when nothing is false, or with a warning when the host cannot tell (false is then omitted)."""
        false = [name for name, value in (args.get("server_args") or {}).items() if value is False]
        if not false:
            return None, None
        environment = [f"{name}={value}" for name, value in (args.get("environment") or {}).items()]
        argv = ["env", *environment, args.get("python", DEFAULT_PYTHON), "-m", SERVER_MODULE, "--help"]
        answer = self._low_level_execute_command(shlex.join(argv))
        if answer.get("rc") == 0:
            return parse_help_flags(answer.get("stdout") or ""), None
        return None, (f"server_args {', '.join(false)}: false is left out of the command line, since "
                      f"`{shlex.join(argv[-4:])}` failed on the host (rc={answer.get('rc')}) and only its flags say "
                      "which need --no-<flag>")

    def _render_unit(self, args: dict, command: list[str], task_vars: dict) -> str:
        template = args.get("unit_template")
        source = self._find_needle("templates", template) if template else str(DEFAULT_TEMPLATE)
        template_data = trust_as_template(self._loader.get_text_file_contents(source))
        unit_vars = template_variables(args, command, DEFAULT_DEVICE_ALLOW)
        templar = self._templar.copy_with_new_env(searchpath=[str(Path(source).parent)],
                                                  available_variables={**task_vars, **unit_vars})
        return templar.template(template_data, escape_backslashes=False)
