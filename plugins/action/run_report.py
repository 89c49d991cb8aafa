# Copyright (c) llmops.sglang contributors
# Apache License 2.0 (see LICENSE)
"""llmops.sglang.run_report: summary.json, report.md and report.html from the run directory."""
from __future__ import annotations

import json
from pathlib import Path

from ansible.errors import AnsibleActionFail
from ansible_collections.llmops.sglang.plugins.plugin_utils.controller_action import ControllerAction
from ansible_collections.llmops.sglang.plugins.plugin_utils import run_report
from ansible_collections.llmops.sglang.plugins.plugin_utils.run_dir import path, record_name, write_files


class ActionModule(ControllerAction):
    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        args = self.arguments()
        run_dir = Path(args["run_dir"])
        if not run_report.HAS_REPORT_LIBS:
            raise AnsibleActionFail("the report needs matplotlib and markdown on the controller "
                                    "(pip install matplotlib markdown, or the project's pyproject.toml)")
        if not path(run_dir, record="run").is_file():
            raise AnsibleActionFail(f"run_dir: {run_dir} is not a run directory (no {record_name('run')}); "
                                    "pass runs/<run_id> of an earlier run")
        files = run_report.report_files(run_dir)
        written = write_files(run_dir, files, check_mode=self._task.check_mode)
        summary = json.loads(files[record_name("summary")])
        result.update(changed=bool(written), summary=summary, lines=run_report.summary_text(summary),
                      report_md=str(path(run_dir, record="report_md")), report_html=str(path(run_dir, record="report_html")),
                      summary_json=str(path(run_dir, record="summary")), written=[str(p) for p in written])
        return result
