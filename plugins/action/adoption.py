# Copyright (c) llmops.sglang contributors
# Apache License 2.0 (see LICENSE)
"""llmops.sglang.adoption: the configuration a stage starts from, the verdict on a measurement against it, and the
record of what is adopted after it (plugin_utils/adoption.py)."""
from __future__ import annotations

from pathlib import Path

from ansible.errors import AnsibleActionFail
from ansible_collections.llmops.sglang.plugins.module_utils import restart_check
from ansible_collections.llmops.sglang.plugins.module_utils.stages import get as get_stage
from ansible_collections.llmops.sglang.plugins.plugin_utils import adoption
from ansible_collections.llmops.sglang.plugins.plugin_utils.controller_action import ControllerAction
from ansible_collections.llmops.sglang.plugins.plugin_utils.run_dir import record_files

# What each step needs besides run_dir and stage.
REQUIRED = {"load": (), "decide": ("measured", "adopted"), "adopt": ("measured",), "record": ()}
STEPS = {"load": "_load", "decide": "_decide", "adopt": "_adopt", "record": "_record_step"}
VERDICT_RECORDS = ("comparison", "side_effects", "decision", "restart_check")


class ActionModule(ControllerAction):
    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        args = self.arguments()
        missing = [name for name in REQUIRED[args["step"]] if args[name] is None]
        if missing:
            raise AnsibleActionFail(f"step={args['step']} needs {', '.join(missing)}")
        try:
            get_stage(args["stage"])
            step = getattr(self, STEPS[args["step"]])
            result.update(step(args, args["host"] or task_vars["inventory_hostname"]))
        except ValueError as exc:
            raise AnsibleActionFail(str(exc)) from exc
        return result

    def _load(self, args: dict, host: str) -> dict:
        run_dir, stage = Path(args["run_dir"]), args["stage"]
        # Check mode records nothing, so a stage after a check-mode one starts from what that one adopted in memory.
        adopted = adoption.latest(run_dir, host, stage) or args["adopted"]
        if adopted is None and get_stage(stage).reads_adopted:
            fix = (f"run the baseline stage first (stages=baseline,{stage}) or resume a run that has it (-e run_id=...)"
                   if get_stage(stage).routine else "name a run whose stages adopted one (-e run_id=...)")
            raise ValueError(f"stage {stage} needs the configuration adopted earlier in run {run_dir.name}, but none is "
                             f"recorded for {host}; {fix}.")
        return {"changed": False, "adopted": adopted}

    def _decide(self, args: dict, host: str) -> dict:
        measured, adopted = args["measured"], adoption.normalized(args["adopted"])
        restart = restart_check.validated(args["restart_check"], "restart_check")
        if self._task.check_mode or measured.get("check_mode"):
            check_dir, _stale = adoption.check_dir(Path(measured["dir"]), args["restarted"], check_mode=True)
            return {"changed": False, "adopt": False, "adopted": adopted, "comparison": None, "side_effects": None,
                    "decision": adoption.CHECK_DECISION, "failure": None, "restart_check": None,
                    "restart_check_levels": [], "restart_check_dir": str(check_dir),
                    "lines": [adoption.CHECK_DECISION["summary"]]}
        outcome = adoption.verdict(Path(args["run_dir"]), measured, adopted, compare=args["compare"],
                                   policy=args["policy"], moe_configs=args["moe_configs"] or (), restart=restart,
                                   restarted=args["restarted"])
        adopt = outcome["decision"]["adopt"]
        if adopt:
            adopted = self._record(args, measured, adopted)
        written, removed = record_files(Path(measured["dir"]),
                                        {f"{name}.json": outcome[name] for name in VERDICT_RECORDS})
        check_dir, stale = adoption.check_dir(Path(measured["dir"]), args["restarted"])
        removed = [*removed, *stale]
        table = (outcome["comparison"] or {}).get("table", "")
        pending = outcome["decision"]["action"] == "restart_check"
        return {"changed": bool(written or removed), "adopt": adopt, "adopted": adopted, **outcome,
                "restart_check_levels": [level["concurrency"] for level in outcome["restart_check"]["levels"]]
                if pending else [],
                "restart_check_dir": str(check_dir),
                "lines": [outcome["decision"]["summary"], *filter(None, table.split("\n"))]}

    def _adopt(self, args: dict, host: str) -> dict:
        previous = adoption.normalized(args["adopted"]) if args["adopted"] else None
        return {"changed": False, "adopted": self._record(args, args["measured"], previous)}

    def _record_step(self, args: dict, host: str) -> dict:
        """Record what the stage adopted (none: remove what an earlier attempt of it recorded), before its stage.json
        says it finished."""
        written, removed = adoption.record(Path(args["run_dir"]), args["stage"], host, args["adopted"],
                                           check_mode=self._task.check_mode)
        return {"changed": bool(written or removed), "adopted": args["adopted"],
                "written": [str(path) for path in written], "removed": [str(path) for path in removed]}

    @staticmethod
    def _record(args: dict, measured: dict, previous: dict | None) -> dict:
        """The adopted record of ``measured``; tuned MoE configs: those given, else those adopted before."""
        moe_configs = args["moe_configs"]
        if moe_configs is None:
            moe_configs = (previous or {}).get("moe_configs") or []
        return adoption.adopt(args["stage"], Path(args["run_dir"]), Path(measured["dir"]),
                              args=measured["requested_args"], environment=measured["environment"],
                              moe_configs=moe_configs)
