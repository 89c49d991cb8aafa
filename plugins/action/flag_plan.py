# Copyright (c) llmops.sglang contributors
# Apache License 2.0 (see LICENSE)
"""llmops.sglang.flag_plan: the flags stage's plan of one candidate, from what the preflight of this run found, and
its records in the candidate's trial folder of the run directory."""
from __future__ import annotations

from ansible.errors import AnsibleActionFail
from ansible_collections.llmops.sglang.plugins.plugin_utils.controller_action import ControllerAction
from ansible_collections.llmops.sglang.plugins.plugin_utils.flag_plan import candidate_plan, preflight_findings, trial_records
from ansible_collections.llmops.sglang.plugins.plugin_utils.run_dir import path, record_files


class ActionModule(ControllerAction):
    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        args = self.arguments()
        host = args["host"] or task_vars["inventory_hostname"]
        try:
            findings, sglang_version = preflight_findings(args["run_dir"], host)
            plan = candidate_plan(args["candidate"], findings, args["skip_ineffective"], sglang_version)
            directory = path(args["run_dir"], args["stage"], host, measurement=args["candidate"]["name"])
        except ValueError as exc:
            raise AnsibleActionFail(f"flag_plan: {exc}") from exc
        written, removed = record_files(directory, trial_records(plan), check_mode=self._task.check_mode)
        result.update(plan, dir=str(directory), changed=bool(written or removed), written=[str(p) for p in written],
                      removed=[str(p) for p in removed])
        return result
