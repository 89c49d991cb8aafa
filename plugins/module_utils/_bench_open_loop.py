# Copyright (c) llmops.sglang contributors
# Apache License 2.0 (see LICENSE)
"""The open-loop runner: a level is a request rate; requests are sent on workload.py's seeded schedule (the same
for every configuration), with its lengths, shared prefixes and conversations (turn n+1 due when turn n finished),
whatever the server's pace; each timed run reports goodput under the SLO and the client's send lag.

Private to the llmops.sglang collection; do not use it from other collections.
"""
from __future__ import annotations

import asyncio
import gc
import json
import random
import time
import typing as t

from ansible_collections.llmops.sglang.plugins.module_utils._bench_aggregate import open_loop_run
from ansible_collections.llmops.sglang.plugins.module_utils._bench_requests import request_body
from ansible_collections.llmops.sglang.plugins.module_utils._bench_session import BenchAborted, LevelRunner
from ansible_collections.llmops.sglang.plugins.module_utils._bench_sse import RequestRecord
from ansible_collections.llmops.sglang.plugins.module_utils._bench_sweep import check_level
from ansible_collections.llmops.sglang.plugins.module_utils.sweep_stats import summarize_level
from ansible_collections.llmops.sglang.plugins.module_utils.workload import (
    group_of, rate_level_summary, sample_lengths, send_offsets, turn_prompt)


class OpenLoopRunner(LevelRunner):
    """The runner of request-rate levels."""

    async def converse(self, lengths: t.Sequence[tuple[int, int]], system: list[int] | str | None,
                       scheduled: float, semaphore: asyncio.Semaphore | None, records: list[RequestRecord]) -> None:
        """One conversation (a single request without multi_turn): turn n+1 is due when turn n has finished."""
        users: list[list[int] | str] = []
        outputs: list[list[int] | str] = []
        for turn, (input_len, output_len) in enumerate(lengths):
            users.append(self.piece(input_len))
            prompt = turn_prompt(system, users, outputs)
            body = json.dumps(request_body(self.config.endpoint, self.model, prompt, output_len)).encode()
            lag = time.perf_counter() - scheduled
            if semaphore is None:
                record = await self.send(body)
            else:
                async with semaphore:
                    record = await self.send(body)
            record.lag, record.expected_tokens = lag, output_len
            records.append(record)
            if not record.ok:
                for later in range(turn + 1, len(lengths)):  # never sent, yet part of the offered load
                    skipped = RequestRecord(record.end)
                    skipped.error = f"not sent: turn {turn + 1} of its conversation failed"
                    skipped.expected_tokens = lengths[later][1]
                    records.append(skipped)
                return
            # The output's stand-in has the server-reported length; the text itself is not kept (docs/bench-schema.md).
            outputs.append(self.piece(record.output_tokens))
            scheduled = record.end

    async def run_open_loop(self, rate: float, conversations: int,
                            rng: random.Random) -> tuple[list[RequestRecord], float, float]:
        """Start ``conversations`` at the arrival process's times; return the records, wall and client CPU time."""
        config = self.config
        turns = config.turns
        lengths = sample_lengths(config.lengths, (config.input_len, config.output_len), conversations * turns, rng)
        offsets = send_offsets(config.arrival, rate, conversations, rng)
        per_group = config.shared_prefix["requests_per_group"] if config.shared_prefix else None
        systems: dict[int, list[int] | str] = {}
        cap = config.arrival.max_concurrency
        semaphore = asyncio.Semaphore(cap) if cap else None
        records: list[RequestRecord] = []
        tasks = []
        started, cpu_started = time.perf_counter(), time.process_time()
        try:
            for index, offset in enumerate(offsets):
                group = group_of(index, per_group)
                if group is not None and group not in systems:
                    systems[group] = self.piece(config.shared_prefix["system_prompt_len"])
                delay = started + offset - time.perf_counter()
                if delay > 0:
                    await asyncio.sleep(delay)
                tasks.append(asyncio.ensure_future(self.converse(
                    lengths[index * turns:(index + 1) * turns], systems.get(group), started + offset, semaphore,
                    records)))
            await asyncio.gather(*tasks)
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
        return records, time.perf_counter() - started, time.process_time() - cpu_started


async def run_rate_level(runner: OpenLoopRunner, rate: float, progress: t.Callable[[dict], None]) -> dict:
    config = runner.config
    warmup = config.conversations_for_rate(rate, warmup=True)
    conversations = config.conversations_for_rate(rate)
    progress({"event": "level_start", "request_rate": rate, "warmup_requests": warmup * config.turns,
              "requests": conversations * config.turns, "repeats": config.repeats})
    rng = random.Random(f"{config.seed}:{rate!r}")  # the same schedule and lengths for every configuration
    if warmup:
        records, _wall_s, _cpu_s = await runner.run_open_loop(rate, warmup, rng)
        if not any(record.ok for record in records):
            raise BenchAborted(f"warm-up: all {len(records)} requests failed: {records[0].error}", "requests_failed")
    gc.collect()
    gc.freeze()
    runs = []
    for repeat in range(1, config.repeats + 1):
        records, wall_s, cpu_s = await runner.run_open_loop(rate, conversations, rng)
        run = open_loop_run(records, wall_s, cpu_s, rate, config)
        run["repeat"] = repeat
        if run["ok"] == 0:
            raise BenchAborted(f"repeat {repeat}: all {len(records)} requests failed: {run['error_samples']}",
                               "requests_failed")
        runs.append(run)
        progress({"event": "run_done", "request_rate": rate, "repeat": repeat, "repeats": config.repeats,
                  "achieved_rate_rps": run["achieved_rate_rps"], "goodput_rps": run.get("goodput_rps"),
                  "lag_p99_ms": run["lag_ms"]["p99"], "ok": run["ok"], "failed": run["failed"], "wall_s": wall_s})
    level = {"request_rate": rate, "requests": conversations * config.turns, "warmup_requests": warmup * config.turns,
             "runs": runs, "summary": summarize_level(runs), "open_loop": rate_level_summary(runs)}
    check_level(level, config)
    progress({"event": "level_done", "request_rate": rate, "goodput_rps": level["open_loop"].get("goodput_rps"),
              "client_limited": level["open_loop"]["client_limited"]})
    return level
