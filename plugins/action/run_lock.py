# Copyright (c) llmops.sglang contributors
# Apache License 2.0 (see LICENSE)
"""llmops.sglang.run_lock: one ansible-playbook at a time in a run directory (the controller's flock)."""
from __future__ import annotations

import os

from ansible.errors import AnsibleActionFail
from ansible_collections.llmops.sglang.plugins.plugin_utils.controller_action import ControllerAction
from ansible_collections.llmops.sglang.plugins.plugin_utils.run_dir import run_directory
from ansible_collections.llmops.sglang.plugins.plugin_utils.run_lock import RunLocked, lock_run


class ActionModule(ControllerAction):
    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        args = self.arguments()
        try:
            run_dir = run_directory(args["runs_root"], args["run_id"])
        except ValueError as exc:
            raise AnsibleActionFail(str(exc)) from exc
        if not run_dir.is_dir():  # check mode creates no run directory: nothing to lock, nobody else in it
            result.update(changed=False, lock="free", run_dir=str(run_dir))
            return result
        try:
            # The worker running this task is a child of ansible-playbook, which holds the lock until it exits.
            lock = lock_run(run_dir, os.getppid(), check_mode=self._task.check_mode)
        except RunLocked as exc:
            raise AnsibleActionFail(str(exc)) from exc
        # A lock held for this playbook's lifetime changes nothing a rerun could find different: a rerun of a done
        # run must still report changed=0.
        result.update(changed=False, lock=lock, run_dir=str(run_dir))
        return result
