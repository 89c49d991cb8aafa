# Copyright (c) llmops.sglang contributors
# Apache License 2.0 (see LICENSE)
"""llmops.sglang.run_record: atomic evidence files in the run directory on the controller."""
from __future__ import annotations

from pathlib import Path

from ansible.errors import AnsibleActionFail
from ansible_collections.llmops.sglang.plugins.plugin_utils.controller_action import ControllerAction
from ansible_collections.llmops.sglang.plugins.plugin_utils.run_dir import record_files


class ActionModule(ControllerAction):
    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        args = self.arguments()
        directory = Path(args["dir"])
        try:
            # null content (e.g. no sweep for a candidate that failed to start) removes the record
            written, removed = record_files(directory, args["files"], check_mode=self._task.check_mode)
        except ValueError as exc:
            raise AnsibleActionFail(f"files: {exc}") from exc
        present = [name for name, content in args["files"].items() if content is not None]
        result.update(changed=bool(written or removed), paths=[str(directory / name) for name in present],
                      written=[str(path) for path in written], removed=[str(path) for path in removed])
        return result
