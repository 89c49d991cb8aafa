# Copyright (c) llmops.sglang contributors
# Apache License 2.0 (see LICENSE)
"""llmops.sglang.canary_goodput: one step of the upgrade canary's goodput under the run's SLO
(plugins/plugin_utils/canary_goodput.py)."""
from __future__ import annotations

from ansible.errors import AnsibleActionFail
from ansible_collections.llmops.sglang.plugins.plugin_utils.canary_goodput import Goodput
from ansible_collections.llmops.sglang.plugins.plugin_utils.controller_action import ControllerAction
from ansible_collections.llmops.sglang.plugins.plugin_utils.search_stage import SearchInputError


class ActionModule(ControllerAction):
    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        args = self.arguments()
        try:
            goodput = Goodput(args["dir"], args["search"], args["phase"], policy=args["policy"],
                              reference=args["reference"], check_mode=self._task.check_mode)
            answer = goodput.step(args["sweep"])
        except SearchInputError as exc:
            raise AnsibleActionFail(f"tuning_run_search (the SLO the canary's goodput is measured under): {exc}",
                                    result={"errors": exc.errors}) from exc
        except ValueError as exc:
            raise AnsibleActionFail(f"canary_goodput {args['phase']}: {exc}") from exc
        result.update(answer, max_probes=goodput.max_probes(), changed=bool(goodput.written), written=goodput.written)
        return result
