# Copyright (c) llmops.sglang contributors
# Apache License 2.0 (see LICENSE)
"""Controller half of llmops.sglang.moe_tune: plans on the host, then runs the tuner one chunk of
batch sizes per module call and prints a progress line after each, so a run of hours shows where
it is (and a crash loses at most one chunk)."""
from __future__ import annotations

import time

from ansible.plugins.action import ActionBase
from ansible.utils.display import Display
from ansible_collections.llmops.sglang.plugins.module_utils.moe_tuning import MODULE, progress_entry, progress_line
from ansible_collections.llmops.sglang.plugins.plugin_utils.action_request import send_request

display = Display()
# Plan keys returned to the playbook as they are.
SUMMARY_KEYS = ("file_name", "batch_sizes", "batch_sizes_reason", "search_space", "chunk_size", "resumed",
                "checkpoint", "checkpoint_discarded", "tuner_cli", "notes")


class ActionModule(ActionBase):
    TRANSFERS_FILES = False
    _requires_connection = True

    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        args = dict(self._task.args)
        started = time.monotonic()
        planned = self._execute_module(module_name=MODULE, module_args=args, task_vars=task_vars)
        if planned.get("failed"):
            return {**result, **planned}
        plan = planned["plan"]
        deadline = started + plan["timeout"]
        summary = {key: plan[key] for key in SUMMARY_KEYS if key in plan}
        if self._play_context.check_mode:
            would_change = plan["mode"] == "tune" and not plan["output_current"]
            return {**result, **summary, "changed": would_change, "chunks": plan.get("chunks", []), "progress": []}
        if plan["mode"] == "benchmark":
            measured = self._step(args, task_vars, "benchmark", plan=plan, timeout=deadline - time.monotonic())
            return {**result, **summary, **measured, "duration_s": round(time.monotonic() - started, 1)}
        return {**result, **summary, **self._tune(args, task_vars, plan, started, deadline)}

    def _tune(self, args: dict, task_vars: dict, plan: dict, started: float, deadline: float) -> dict:
        host = task_vars.get("inventory_hostname", "?")
        progress, tuner_seconds, placements, tuned, process_seconds, engine = [], [], [], 0, 0.0, None
        for chunk in plan["chunks"]:
            if time.monotonic() >= deadline:
                return self._failed(f"timeout: {plan['timeout']}s spent with batch sizes "
                                    f"{chunk} and later not tuned; a rerun resumes from {plan['checkpoint']}",
                                    progress, started)
            step = self._step(args, task_vars, "chunk", plan=plan, chunk=chunk, timeout=deadline - time.monotonic())
            if step.get("failed"):
                return {**step, "progress": progress, "duration_s": round(time.monotonic() - started, 1)}
            tuned += len(chunk)
            process_seconds += step["seconds"]
            entry = progress_entry(chunk, step["done"], len(plan["batch_sizes"]), time.monotonic() - started, tuned)
            entry["tuner_seconds"] = step["tuner_seconds"]
            progress.append(entry)
            if step["tuner_seconds"] is not None:
                tuner_seconds.append(step["tuner_seconds"])
            if step["placement"] is not None:
                placements.append(step["placement"])
            engine = step.get("engine", engine)
            display.display(progress_line(host, plan["kernel"], plan["file_name"], entry))
        finished = self._step(args, task_vars, "finish", plan=plan)
        if finished.get("failed"):
            return {**finished, "progress": progress}
        return {"changed": bool(plan["chunks"]) or finished["changed"], "output_file": finished["output_file"],
                "progress": progress, "tuner_seconds": round(sum(tuner_seconds), 2) if tuner_seconds else None,
                "process_seconds": round(process_seconds, 1),
                "placements": placements,
                "gpus_used": max((p["gpus_used"] for p in placements if "gpus_used" in p), default=None),
                "hosts_used": sorted({host for p in placements for host in p.get("hosts_used", [])}),
                "engine": engine,
                "duration_s": round(time.monotonic() - started, 1)}

    def _step(self, args: dict, task_vars: dict, step: str, **request) -> dict:
        """A step after the plan: the module finds it as its request file (module_utils/action_request.py)."""
        send_request(self, MODULE, {"step": step, **request})
        return self._execute_module(module_name=MODULE, module_args=args, task_vars=task_vars)

    @staticmethod
    def _failed(msg: str, progress: list, started: float) -> dict:
        return {"failed": True, "msg": msg, "progress": progress, "duration_s": round(time.monotonic() - started, 1)}
