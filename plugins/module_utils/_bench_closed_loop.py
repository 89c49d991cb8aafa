# Copyright (c) llmops.sglang contributors
# Apache License 2.0 (see LICENSE)
"""The closed-loop runner: a concurrency level keeps exactly C requests in flight, warm-up requests first (excluded),
then ``repeats`` timed runs of N requests each, or fewer when the stopping rule ends the level.

Private to the llmops.sglang collection; do not use it from other collections.
"""
from __future__ import annotations

import asyncio
import gc
import time
import typing as t

from ansible_collections.llmops.sglang.plugins.module_utils._bench_aggregate import aggregate_run
from ansible_collections.llmops.sglang.plugins.module_utils._bench_config import BenchConfig
from ansible_collections.llmops.sglang.plugins.module_utils._bench_session import BenchAborted, LevelRunner
from ansible_collections.llmops.sglang.plugins.module_utils._bench_sse import RequestRecord
from ansible_collections.llmops.sglang.plugins.module_utils._bench_sweep import (
    StopRule, check_level, make_level, stop_after_run)


class ClosedLoopRunner(LevelRunner):
    """The runner of concurrency levels; ``stop_rule`` ends a level's repeats early (sweep_stats)."""

    def __init__(self, session: t.Any, config: BenchConfig, model: str | None,
                 stop_rule: StopRule | None = None) -> None:
        super().__init__(session, config, model)
        self.stop_rule = stop_rule

    async def run_batch(self, concurrency: int, count: int,
                        output_len: int | None = None) -> tuple[list[RequestRecord], float, float]:
        """Send ``count`` requests (of ``output_len`` tokens, default the config's) keeping ``concurrency`` in
        flight; return the records, wall and client CPU time."""
        pending = iter(self.bodies(count, output_len or self.config.output_len))
        records: list[RequestRecord] = []

        async def worker() -> None:
            for body in pending:  # shared iterator: each body is taken by exactly one worker
                records.append(await self.send(body))

        started, cpu_started = time.perf_counter(), time.process_time()
        workers = [asyncio.ensure_future(worker()) for _slot in range(min(concurrency, count))]
        try:
            await asyncio.gather(*workers)
        finally:
            for task in workers:
                task.cancel()
            await asyncio.gather(*workers, return_exceptions=True)
        return records, time.perf_counter() - started, time.process_time() - cpu_started


async def _timed_runs(runner: ClosedLoopRunner, concurrency: int, progress: t.Callable[[dict], None],
                      earlier: list[dict]) -> tuple[list[dict], dict | None]:
    config = runner.config
    requests = config.requests_for(concurrency)
    runs = list(earlier)
    for repeat in range(len(runs) + 1, config.repeats + 1):
        records, wall_s, cpu_s = await runner.run_batch(concurrency, requests)
        run = aggregate_run(records, wall_s=wall_s, output_len=config.output_len, concurrency=concurrency,
                            steady_state=config.steady_state)
        run["repeat"] = repeat
        # Near 100 % means this single-threaded client, not the server, limited the run (docs/bench-schema.md).
        run["client_cpu_pct"] = cpu_s / wall_s * 100.0 if wall_s > 0 else None
        if run["ok"] == 0:
            raise BenchAborted(f"repeat {repeat}: all {requests} requests failed: {run['error_samples']}",
                               "requests_failed")
        runs.append(run)
        progress({"event": "run_done", "concurrency": concurrency, "repeat": repeat, "repeats": config.repeats,
                  "agg_tok_s": run["agg_tok_s"], "per_req_tok_s": run["per_req_tok_s"], "ok": run["ok"],
                  "failed": run["failed"], "wall_s": wall_s})
        stopped = stop_after_run(runner.stop_rule, concurrency, runs, progress)
        if stopped is not None:
            return runs, stopped
    return runs, None


async def run_level(runner: ClosedLoopRunner, concurrency: int, progress: t.Callable[[dict], None],
                    earlier: list[dict]) -> dict:
    """A level's warm-up and timed runs after ``earlier`` ones (a level the stopping rule reopened: warmed up again,
    since other levels ran in between)."""
    config = runner.config
    warmup = config.warmup_for(concurrency)
    progress({"event": "level_start", "concurrency": concurrency, "warmup_requests": warmup,
              "requests": config.requests_for(concurrency), "repeats": config.repeats})
    if warmup:
        records, _wall_s, _cpu_s = await runner.run_batch(concurrency, warmup, config.warmup_tokens())
        if not any(record.ok for record in records):
            raise BenchAborted(f"warm-up: all {warmup} requests failed: {records[0].error}", "requests_failed")
    # Everything alive now (session, interpreter state) outlives the timed runs; frozen objects are skipped by the
    # collector, so its passes during the hot loop stay short.
    gc.collect()
    gc.freeze()
    runs, stopped = await _timed_runs(runner, concurrency, progress, earlier)
    level = check_level(make_level(concurrency, config.requests_for(concurrency), warmup, runs, stopped), config)
    progress({"event": "level_done", "concurrency": concurrency, "agg_tok_s": level["summary"]["agg_tok_s"],
              "per_req_tok_s": level["summary"]["per_req_tok_s"]})
    return level
