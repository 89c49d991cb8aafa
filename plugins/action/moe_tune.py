# Copyright (c) llmops.sglang contributors
# Apache License 2.0 (see LICENSE)
"""Controller half of llmops.sglang.moe_tune: plans on the host, then runs the tuner one chunk of
batch sizes per module call and prints a progress line after each, so a run of hours shows where
it is (and a crash loses at most one chunk)."""
from __future__ import annotations

import time

from ansible.plugins.action import ActionBase
from ansible.utils.display import Display
from ansible_collections.llmops.sglang.plugins.module_utils.moe_engine_key import host_mismatch
from ansible_collections.llmops.sglang.plugins.module_utils.moe_tuning import MODULE, progress_entry, progress_line
from ansible_collections.llmops.sglang.plugins.plugin_utils.action_request import send_request
from ansible_collections.llmops.sglang.plugins.plugin_utils.moe_engine_cache import DEFAULT_CACHE_DIR, EngineCache

display = Display()
# Plan keys returned to the playbook as they are.
SUMMARY_KEYS = ("file_name", "batch_sizes", "batch_sizes_reason", "search_space", "chunk_size", "resumed",
                "checkpoint", "checkpoint_discarded", "tuner_cli", "notes", "compile_workers", "devices")


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
        cache = _CacheUse(args, plan)
        if self._play_context.check_mode:
            would_change = plan["mode"] == "tune" and not plan["output_current"]
            return {**result, **summary, "changed": would_change, "chunks": plan.get("chunks", []), "progress": [],
                    "cache": cache.report}
        if plan["mode"] == "benchmark":
            measured = self._step(args, task_vars, "benchmark", plan=plan, timeout=deadline - time.monotonic())
            return {**result, **summary, **measured, "duration_s": round(time.monotonic() - started, 1)}
        return {**result, **summary, **self._tune(args, task_vars, plan, cache, started, deadline)}

    def _tune(self, args: dict, task_vars: dict, plan: dict, cache: _CacheUse, started: float,
              deadline: float) -> dict:
        host = task_vars.get("inventory_hostname", "?")
        progress, tuner_seconds, placements, tuned, process_seconds, engine = [], [], [], 0, 0.0, None
        if cache.warning:
            display.warning(cache.warning)
        if cache.hit:
            installed = self._install_cached(args, task_vars, plan, cache, started)
            if installed.get("failed"):
                return {**installed, "cache": cache.report}
            progress.append(installed["progress"])
        for chunk in [] if cache.hit else plan["chunks"]:
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
            cache.keep(step, host)
            display.display(progress_line(host, plan["kernel"], plan["file_name"], entry))
        finished = self._step(args, task_vars, "finish", plan=plan)
        if finished.get("failed"):
            return {**finished, "progress": progress, "cache": cache.report}
        return {"changed": bool(plan["chunks"]) or finished["changed"], "output_file": finished["output_file"],
                "progress": progress, "tuner_seconds": round(sum(tuner_seconds), 2) if tuner_seconds else None,
                "process_seconds": round(process_seconds, 1),
                "placements": placements,
                "gpus_used": max((p["gpus_used"] for p in placements if "gpus_used" in p), default=None),
                "hosts_used": sorted({host for p in placements for host in p.get("hosts_used", [])}),
                "engine": engine, "cache": cache.report,
                "duration_s": round(time.monotonic() - started, 1)}

    def _install_cached(self, args: dict, task_vars: dict, plan: dict, cache: _CacheUse, started: float) -> dict:
        """A cache hit: its configs into the host's checkpoint for every batch size still to tune; no engine."""
        sizes = [size for chunk in plan["chunks"] for size in chunk]
        step = self._step(args, task_vars, "cached", plan=plan, configs=cache.hit["file"]["configs"], sizes=sizes)
        if step.get("failed"):
            return step
        entry = progress_entry(sizes, step["done"], len(plan["batch_sizes"]), time.monotonic() - started, len(sizes))
        display.display(f"{task_vars.get('inventory_hostname', '?')}: {plan['kernel']} {plan['file_name']}: installed "
                        f"from the MoE engine cache (key {cache.report['key_short']}); the engine did not start")
        return {"progress": {**entry, "tuner_seconds": None, "cache": "hit"}}

    def _step(self, args: dict, task_vars: dict, step: str, **request) -> dict:
        """A step after the plan: the module finds it as its request file (module_utils/action_request.py)."""
        send_request(self, MODULE, {"step": step, **request})
        return self._execute_module(module_name=MODULE, module_args=args, task_vars=task_vars)

    @staticmethod
    def _failed(msg: str, progress: list, started: float) -> dict:
        return {"failed": True, "msg": msg, "progress": progress, "duration_s": round(time.monotonic() - started, 1)}


class _CacheUse:
    """This task's use of the controller's engine cache (docs/moe-engine.md, "Cache"): the lookup before the engine
    would start, the entries stored from its result, and the task's ``cache`` return value (``report``)."""

    def __init__(self, args: dict, plan: dict) -> None:
        self.hit, self.warning, self._key = None, None, None
        settings = plan.get("engine_cache")
        if settings is None:  # engine: sglang, or benchmark mode
            self.report = None
            return
        if not settings["enabled"]:
            self.report = {"status": "off", "reason": settings["reason"]}
            return
        self._key, self._store = settings["key"], EngineCache(args.get("cache_dir") or DEFAULT_CACHE_DIR)
        lookup = self._store.lookup(self._key)
        self.report = {"status": "miss", "key_sha256": lookup.sha256, "key_short": lookup.sha256[:12],
                       "key": self._key, "dir": self._store.root, "entry": lookup.path}
        if not plan.get("chunks"):  # the host's checkpoint holds every batch size: nothing to ask
            self.report["status"] = "not needed"
        elif not settings["lookup"]:
            self.report["reason"] = "force: tuned again, the entry is replaced"
        elif lookup.entry is not None:
            self.hit = lookup.entry
            self.report.update(status="hit", source=lookup.entry["source"])
        elif lookup.warning:
            self.warning = self.report["warning"] = lookup.warning

    def keep(self, step: dict, host: str) -> None:
        """Store every kernel's file of the engine run behind ``step`` (up and down: the down task then hits), under
        this task's key with the kernel replaced, when the engine tuned on what the probe read."""
        if self._key is None or "engine_files" not in step:
            return
        mismatch = host_mismatch(self._key, step["engine_host"])
        if mismatch:
            self.report["not_stored"] = "the engine ran on other parts than the key's: " + "; ".join(mismatch)
            return
        engine = step["engine"]
        source = {"host": host, "device": engine["device"], "release": engine["release"],
                  "gpu_minutes": engine["gpu_minutes"], "wall_s": engine["wall_s"]}
        try:
            self.report["stored"] = {kernel: self._store.store({**self._key, "kernel": kernel}, file, source)
                                     for kernel, file in step["engine_files"].items()}
        except ValueError as exc:  # e.g. a run of only the batch sizes the host's checkpoint lacked
            self.report["not_stored"] = str(exc)
