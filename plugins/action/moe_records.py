# Copyright (c) llmops.sglang contributors
# Apache License 2.0 (see LICENSE)
"""llmops.sglang.moe_records: the MoE stage's evidence records, built from its tasks' results, in the run directory."""
from __future__ import annotations

import time
from pathlib import Path

from ansible.errors import AnsibleActionFail
from ansible_collections.llmops.sglang.plugins.plugin_utils.controller_action import ControllerAction
from ansible_collections.llmops.sglang.plugins.plugin_utils.moe_records import cluster_record, evidence_records
from ansible_collections.llmops.sglang.plugins.plugin_utils.run_dir import record_files, record_name

# What the evidence is built from besides up and down.
EVIDENCE = ("before", "after", "installed", "gpus", "env", "server_args", "model_path", "tuner_args", "tuned_on",
            "bandwidth_gbs")
# What each step cannot do without; an unknown bandwidth fails the kernel table, naming the setting that gives it.
NEEDS = {"cluster": ("cluster",), "evidence": EVIDENCE[:-1]}


class ActionModule(ControllerAction):
    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        args = self.arguments()
        missing = [name for name in NEEDS[args["step"]] if args[name] is None]
        if missing:
            raise AnsibleActionFail(f"step={args['step']} needs {', '.join(missing)}")
        try:
            if args["step"] == "cluster":
                files = {record_name("cluster"): cluster_record(args["up"], args["down"], args["cluster"], time.time())}
            else:
                files = evidence_records(up=args["up"], down=args["down"], **{name: args[name] for name in EVIDENCE})
        except ValueError as exc:
            raise AnsibleActionFail(f"{record_name('kernel_table')}: {exc}") from exc
        except (KeyError, TypeError) as exc:
            raise AnsibleActionFail(f"step={args['step']}: a task's result lacks what its record needs: {exc!r}") from exc
        directory = Path(args["dir"])
        written, removed = record_files(directory, files, check_mode=self._task.check_mode)
        present = [name for name, content in files.items() if content is not None]
        result.update(changed=bool(written or removed), paths=[str(directory / name) for name in present],
                      written=[str(path) for path in written], removed=[str(path) for path in removed])
        return result
