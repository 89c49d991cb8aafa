# Copyright (c) llmops.sglang contributors
# Apache License 2.0 (see LICENSE)
"""llmops.sglang.moe_plan: the MoE stage's plan on one host (targets, GPU spec, down kernel, tuning cluster), recorded
as targets.json in the run directory."""
from __future__ import annotations

from pathlib import Path

from ansible.errors import AnsibleActionFail
from ansible_collections.llmops.sglang.plugins.plugin_utils.controller_action import ControllerAction
from ansible_collections.llmops.sglang.plugins.plugin_utils.moe_plan import stage_plan
from ansible_collections.llmops.sglang.plugins.plugin_utils.run_dir import record_files, record_name


class ActionModule(ControllerAction):
    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        args = self.arguments()
        try:
            plan = stage_plan(env=args["env"], gpus=args["gpus"], server_args=args["server_args"],
                              missing=args["missing"], force=args["force"], engine=args["engine"],
                              host=args["host"] or task_vars["inventory_hostname"], tune_hosts=args["tune_hosts"],
                              gpu_spec=args["gpu_spec"])
        except ValueError as exc:
            raise AnsibleActionFail(f"moe_targets: {exc}") from exc
        except (KeyError, TypeError) as exc:
            raise AnsibleActionFail(f"env and gpus must be sglang_env_facts' result and gpu_facts' summary: {exc!r}") from exc
        directory, name = Path(args["dir"]), record_name("targets")
        written, _removed = record_files(directory, {name: plan.pop("record")}, check_mode=self._task.check_mode)
        result.update(plan, changed=bool(written), path=str(directory / name), written=[str(path) for path in written])
        return result
