# Copyright (c) llmops.sglang contributors
# Apache License 2.0 (see LICENSE)
"""llmops.sglang.search_step: one step of the goodput search of one host (plugins/plugin_utils/search_stage.py)."""
from __future__ import annotations

from ansible.errors import AnsibleActionFail
from ansible_collections.llmops.sglang.plugins.module_utils.flag_rules import evaluate_flag_rules
from ansible_collections.llmops.sglang.plugins.module_utils.gpu_cost import scales_for
from ansible_collections.llmops.sglang.plugins.module_utils.run_inputs import InputError, as_bool
from ansible_collections.llmops.sglang.plugins.module_utils.server_args import parse_help_flags, validate_server_args
from ansible_collections.llmops.sglang.plugins.plugin_utils.controller_action import ControllerAction
from ansible_collections.llmops.sglang.plugins.plugin_utils.search_stage import Inputs, SearchInputError, Stage


def candidate_check(adopted_args: dict, help_text: str | None, rules: list | None, context: dict | None,
                    skip_ineffective: bool):
    """``rejects(params)`` of the strategy: why the installed SGLang (its --help) refuses a candidate's knob values,
    or why the flag rules say a knob cannot take effect here (unless skip_ineffective is off); None to start it."""
    known_flags = parse_help_flags(help_text) if help_text else None

    def rejects(params: dict):
        if known_flags is not None:
            errors = validate_server_args(params, known_flags)
            if errors:
                return "the installed SGLang refuses it: " + "; ".join(errors)
        if rules and skip_ineffective:
            findings = evaluate_flag_rules(rules, {**adopted_args, **params}, {**(context or {}), "help_text": help_text})
            own = [finding for finding in findings if finding["flag"].split("=", 1)[0] in params]
            if own:
                return "ineffective here: " + "; ".join(finding["message"] for finding in own)
        return None
    return rejects


class ActionModule(ControllerAction):
    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        args = self.arguments()
        try:
            inputs = Inputs(args["search"])
            skip = as_bool("skip_ineffective", args["skip_ineffective"])
        except SearchInputError as exc:
            raise AnsibleActionFail(f"{len(exc.errors)} input error{'s' if len(exc.errors) > 1 else ''}, nothing "
                                    f"was changed: {exc}", result={"errors": exc.errors}) from exc
        except InputError as exc:
            raise AnsibleActionFail(str(exc)) from exc
        scales = scales_for(bool(args["time_scale"]), args["time_scale"] or None)
        try:
            stage = Stage(args["dir"], inputs, check_mode=self._task.check_mode,
                          rejects=candidate_check(args["adopted_args"], args["help_text"], args["rules"],
                                                  args["context"], skip))
            step = args["step"]
            if step == "plan":
                answer = stage.plan()
            elif step == "next":
                answer = stage.next_candidate(args["adopted_args"])
                answer["max_candidates"] = inputs.max_candidates()
            elif step == "probe":
                answer = stage.probe(args["sweep"], args["facts"], args["environment"], scales)
            elif step == "failed_start":
                answer = stage.failed_start(args["failure"] or {}, args["environment"], scales)
            elif step == "best":
                answer = stage.best(args["adopted_args"])
            else:
                answer = stage.verdict(args["reference_sweep"] or {}, args["candidate_sweeps"] or {})
        except ValueError as exc:
            raise AnsibleActionFail(f"search_step {args['step']}: {exc}") from exc
        result.update(answer)
        result.update(changed=bool(stage.written), written=stage.written)
        return result
