# Copyright (c) llmops.sglang contributors
# Apache License 2.0 (see LICENSE)
"""llmops.sglang.moe_records: the MoE stage's evidence records, built from its tasks' results, in the run directory."""
from __future__ import annotations

import time
from pathlib import Path

from ansible.errors import AnsibleActionFail
from ansible_collections.llmops.sglang.plugins.plugin_utils.controller_action import ControllerAction
from ansible_collections.llmops.sglang.plugins.plugin_utils.moe_records import (
    cluster_record, evidence_records, failure, planned, stage_details)
from ansible_collections.llmops.sglang.plugins.plugin_utils.run_dir import record_files, record_name

# What the evidence is built from besides up, down and the plan.
EVIDENCE = ("before", "after", "installed", "gpus", "env")
# What each step cannot do without.
NEEDS = {"cluster": ("up", "cluster"), "evidence": ("up",) + EVIDENCE + ("plan",),
         "failure": ("failed_task", "failed_result", "work_dir")}


class ActionModule(ControllerAction):
    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        args = self.arguments()
        missing = [name for name in NEEDS[args["step"]] if args[name] is None]
        if missing:
            raise AnsibleActionFail(f"step={args['step']} needs {', '.join(missing)}")
        if args["step"] == "failure":
            return self._failure(result, args)
        try:
            if args["step"] == "cluster":
                files = {record_name("cluster"): cluster_record(args["up"], args["down"], args["cluster"], time.time())}
            else:
                files = evidence_records(up=args["up"], down=args["down"], **{name: args[name] for name in EVIDENCE},
                                         **planned(args["plan"]))
        except ValueError as exc:
            raise AnsibleActionFail(f"{record_name('kernel_table')}: {exc}") from exc
        except (KeyError, TypeError) as exc:
            raise AnsibleActionFail(f"step={args['step']}: a task's result lacks what its record needs: {exc!r}") from exc
        directory = Path(args["dir"])
        written, removed = record_files(directory, files, check_mode=self._task.check_mode)
        present = [name for name, content in files.items() if content is not None]
        result.update(changed=bool(written or removed), paths=[str(directory / name) for name in present],
                      written=[str(path) for path in written], removed=[str(path) for path in removed])
        if args["step"] == "evidence":
            result["stage_details"] = stage_details(args["up"], args["down"])
        return result

    def _failure(self, result: dict, args: dict) -> dict:
        """Records why the stage failed and fails the task with the message saying how to resume."""
        directory = Path(args["dir"])
        # The stage's directory is <run directory>/<stage>/<host>.
        text, message = failure(args["failed_task"], args["failed_result"], directory.parents[1].name, args["work_dir"])
        written, _removed = record_files(directory, {record_name("failure_text"): text}, check_mode=self._task.check_mode)
        return {**result, "failed": True, "msg": message, "changed": bool(written), "written": [str(path) for path in written]}
