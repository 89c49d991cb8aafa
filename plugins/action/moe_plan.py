# Copyright (c) llmops.sglang contributors
# Apache License 2.0 (see LICENSE)
"""llmops.sglang.moe_plan: the MoE stage's plan on one host (targets, GPU spec, down kernel, tuning cluster, the
tuner tasks' arguments), recorded as targets.json in the run directory; the tuning cluster's check that its hosts
need the same files; the stage's estimate, recorded as estimate.json."""
from __future__ import annotations

from pathlib import Path

from ansible.errors import AnsibleActionFail
from ansible_collections.llmops.sglang.plugins.plugin_utils import adoption
from ansible_collections.llmops.sglang.plugins.plugin_utils.controller_action import ControllerAction
from ansible_collections.llmops.sglang.plugins.plugin_utils.moe_plan import host_plan, same_targets, stage_estimate
from ansible_collections.llmops.sglang.plugins.plugin_utils.run_dir import path, read_json, record_files, record_name

STAGE = "moe_tune"
# What each step cannot do without.
NEEDS = {"targets": ("dir", "run_dir", "adopted", "env", "gpus", "model_path"), "cluster": ("plan", "plans"),
         "estimate": ("dir", "plan", "plans", "up")}


class ActionModule(ControllerAction):
    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        args = self.arguments()
        missing = [name for name in NEEDS[args["step"]] if args[name] is None]
        if missing:
            raise AnsibleActionFail(f"step={args['step']} needs {', '.join(missing)}")
        try:
            if args["step"] == "cluster":
                same_targets(dict(zip(args["plan"]["cluster"]["hosts"], args["plans"])))
                return {**result, "changed": False}
            if args["step"] == "estimate":
                outcome = {"estimate": stage_estimate(args["up"], args["plan"], args["plans"])}
                return self._record(result, args["dir"], "estimate", outcome["estimate"], outcome)
            plan = self._host_plan(args, task_vars["inventory_hostname"])
        except ValueError as exc:
            # The targets' disagreement is moe_targets' (its filter's message).
            raise AnsibleActionFail(f"{'moe_targets' if args['step'] == 'targets' else 'step=' + args['step']}: {exc}") from exc
        except (KeyError, TypeError) as exc:
            raise AnsibleActionFail(f"step={args['step']}: env and gpus must be sglang_env_facts' result and gpu_facts' "
                                    f"summary, plan and plans moe_plan's, up moe_tune's plan: {exc!r}") from exc
        return self._record(result, args["dir"], "targets", plan.pop("record"), plan)

    def _host_plan(self, args: dict, inventory_hostname: str) -> dict:
        """The host's plan, from the adopted configuration's facts and cost as its measurement recorded them, with where
        the tuned configs are kept on the controller (``configs_dir``; the head's, where a member copies them from)."""
        facts_path = adoption.evidence_path(args["run_dir"], args["adopted"], "facts")
        facts = read_json(facts_path)
        if facts is None:
            raise ValueError(f"the adopted configuration's facts {facts_path} are missing; resume the run from the stage "
                             f"that adopted it ({args['adopted'].get('stage')}) with -e force={args['adopted'].get('stage')}")
        host = args["host"] or inventory_hostname
        plan = host_plan(env=args["env"], gpus=args["gpus"], gpu_spec=args["gpu_spec"], adopted=args["adopted"],
                         facts=facts, reference_cost=read_json(adoption.evidence_path(args["run_dir"], args["adopted"], "cost")),
                         settings=args["settings"], host=host, source_dir=args["source_dir"],
                         model_path=args["model_path"], cache_root=str(Path(args["run_dir"]).parent))
        configs = {name: str(path(args["run_dir"], STAGE, name, record="configs")) for name in (host, plan["cluster"]["head"])}
        return {**plan, "configs_dir": configs[host], "head_configs_dir": configs[plan["cluster"]["head"]]}

    def _record(self, result: dict, directory: str, record: str, content: object, returned: dict) -> dict:
        """``returned``, the record written as ``record`` in ``directory`` (unless in check mode)."""
        name = record_name(record)
        written, _removed = record_files(Path(directory), {name: content}, check_mode=self._task.check_mode)
        return {**result, **returned, "changed": bool(written), "path": str(Path(directory) / name),
                "written": [str(path) for path in written]}
