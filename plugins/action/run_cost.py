# Copyright (c) llmops.sglang contributors
# Apache License 2.0 (see LICENSE)
"""llmops.sglang.run_cost: the GPU-minutes of a stage of one host, from its records in the run directory."""
from __future__ import annotations

from datetime import datetime, timezone
from pathlib import Path

from ansible.errors import AnsibleActionFail
from ansible_collections.llmops.sglang.plugins.plugin_utils.controller_action import ControllerAction
from ansible_collections.llmops.sglang.plugins.module_utils.gpu_cost import cost_line, seconds_between
from ansible_collections.llmops.sglang.plugins.module_utils.run_inputs import validate_run_inputs
from ansible_collections.llmops.sglang.plugins.plugin_utils.run_cost import account_stage
from ansible_collections.llmops.sglang.plugins.plugin_utils.run_dir import record_name, serialize, write_files


class ActionModule(ControllerAction):
    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        args = self.arguments()
        errors = validate_run_inputs({"emulator_time_scale": args["time_scale"]})
        if errors:
            raise AnsibleActionFail("; ".join(errors))
        stage_dir = Path(args["stage_dir"])
        finished_at = datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
        try:
            wall_s = seconds_between(args["started_at"], finished_at)
        except ValueError as exc:
            raise AnsibleActionFail(f"started_at: {args['started_at']!r} is not an ISO 8601 time ({exc})") from exc
        cost, records = account_stage(stage_dir, wall_s, _numbers(args["time_scale"]))
        written = [path for directory, record in records.items()
                   for path in write_files(directory, {record_name("cost"): serialize(record)},
                                           check_mode=self._task.check_mode)]
        result.update(changed=bool(written), cost=cost, started_at=args["started_at"], finished_at=finished_at,
                      line=f"{stage_dir.parent.name}: {cost_line(cost)}", written=[str(path) for path in written])
        return result


def _numbers(time_scale):
    """The scales as floats (templated values may arrive as strings); validated before."""
    if not time_scale:
        return None
    return {name: float(value) for name, value in time_scale.items() if value is not None}
