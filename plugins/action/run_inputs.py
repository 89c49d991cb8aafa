# Copyright (c) llmops.sglang contributors
# Apache License 2.0 (see LICENSE)
"""llmops.sglang.run_inputs: check a tuning run's inputs on the controller before a stage changes anything."""
from __future__ import annotations

from ansible.errors import AnsibleActionFail
from ansible.utils.display import Display
from ansible_collections.llmops.sglang.plugins.plugin_utils.controller_action import ControllerAction
from ansible_collections.llmops.sglang.plugins.module_utils.run_inputs import InputError, as_bool, validate_run_inputs
from ansible_collections.llmops.sglang.plugins.plugin_utils.run_dir import run_directory
from ansible_collections.llmops.sglang.plugins.plugin_utils.run_variables import unknown_variables
from ansible_collections.llmops.sglang.plugins.plugin_utils.search_stage import check_search

OPTIONS = ("run_id", "stages", "force", "bench", "compare", "sequential", "restart_check", "policy", "moe", "flag_sets",
           "baseline_args", "environment", "skip_ineffective", "emulator_time_scale", "inventory_hosts",
           "service_name")

display = Display()


class ActionModule(ControllerAction):
    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        args = self.arguments()
        if args["llmops_run_id"] is not None:
            # A real deprecation (ansible-playbook, AWX and ansible-runner show it as one, and
            # deprecation_warnings=False silences it), not a warning: the name goes away in 3.0.0.
            display.deprecated(
                "llmops_run_id is deprecated: the run id is named run_id (-e run_id=..., and what every stage "
                "publishes with set_stats for the next AWX workflow node); llmops_run_id still resumes the run",
                version="3.0.0", collection_name="llmops.sglang")
        inputs = {name: args[name] for name in OPTIONS if args.get(name) is not None}
        errors = unknown_variables(args["variables"]) + validate_run_inputs(inputs)
        if args["run_id"] is not None and args["runs_root"] is not None and not any(
                error.startswith("run_id") for error in errors):
            try:
                run_directory(args["runs_root"], str(args["run_id"]))
            except ValueError as exc:
                errors.append(str(exc))
        try:
            search_selected = as_bool("search_selected", args["search_selected"])
        except InputError as exc:
            errors.append(str(exc))
            search_selected = False
        if args["search"] is not None:
            errors += check_search(args["search"])
            inputs["search"] = args["search"]
        elif search_selected:
            errors.append("tuning_run_search: the search stage is selected but its inputs are not set; set knobs, "
                          "budget and slo (docs/run-directory.md, \"Search\")")
        if errors:
            raise AnsibleActionFail(
                f"{len(errors)} input error{'s' if len(errors) > 1 else ''}, nothing was changed: " + "; ".join(errors),
                result={"errors": errors})
        result.update(changed=False, checked=sorted(name for name in inputs if name != "inventory_hosts"),
                      errors=[], msg="inputs can work")
        return result
