# Copyright (c) llmops.sglang contributors
# Apache License 2.0 (see LICENSE)
"""Controller half of llmops.sglang.server: renders the systemd unit from a Jinja template."""
from __future__ import annotations

from pathlib import Path

from ansible.errors import AnsibleActionFail
from ansible.plugins.action import ActionBase
from ansible.template import trust_as_template
from ansible_collections.llmops.sglang.plugins.module_utils.server_args import systemd_exec_line, to_cli_args

DEFAULT_TEMPLATE = Path(__file__).resolve().parents[2] / "roles" / "sglang_server" / "templates" / "sglang.service.j2"
OWN_OPTIONS = ("model_path", "port", "host", "api_key")


def server_command(args: dict) -> list[str]:
    """The server argv without the API key (that comes from the EnvironmentFile)."""
    server_args = dict(args.get("server_args") or {})
    for option in OWN_OPTIONS:
        if option in server_args:
            raise AnsibleActionFail(f"server_args.{option}: set it with the `{option}` option of the module instead")
    server_args = {"model_path": args.get("model_path"), "host": args.get("host", "127.0.0.1"),
                   "port": args.get("port", 30000), **server_args}
    python = args.get("python", "/opt/sglang/venv/bin/python")
    return [python, "-m", "sglang.launch_server", *to_cli_args(server_args)]


class ActionModule(ActionBase):
    TRANSFERS_FILES = False
    _requires_connection = True

    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        module_args = dict(self._task.args)
        command = None
        if module_args.get("state", "started") in ("started", "restarted"):
            if not module_args.get("model_path"):
                raise AnsibleActionFail("model_path is required to deploy a server (state started/restarted)")
            command = server_command(module_args)
            module_args["_unit_content"] = self._render_unit(module_args, command, task_vars or {})
        result.update(self._execute_module(module_name="llmops.sglang.server", module_args=module_args,
                                           task_vars=task_vars))
        if command is not None:
            result["command"] = command
        return result

    def _render_unit(self, args: dict, command: list[str], task_vars: dict) -> str:
        template = args.get("unit_template")
        source = self._find_needle("templates", template) if template else str(DEFAULT_TEMPLATE)
        template_data = trust_as_template(self._loader.get_text_file_contents(source))
        unit_vars = {
            "sglang_unit_name": args["name"],
            "sglang_model_path": args["model_path"],
            "sglang_exec_start": systemd_exec_line(command)
            + (" --api-key ${SGLANG_API_KEY}" if args.get("api_key") is not None else ""),
            "sglang_environment": args.get("environment") or {},
            "sglang_env_file": f"{args.get('env_dir', '/etc/sglang')}/{args['name']}.env",
            "sglang_user": args.get("user", "root"),
            "sglang_group": args.get("group"),
            "sglang_working_directory": args.get("working_directory", "/"),
        }
        templar = self._templar.copy_with_new_env(searchpath=[str(Path(source).parent)],
                                                  available_variables={**task_vars, **unit_vars})
        return templar.template(template_data, escape_backslashes=False)
