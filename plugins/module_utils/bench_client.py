# Copyright (c) llmops.sglang contributors
# Apache License 2.0 (see LICENSE)
"""Concurrency-sweep load generator for SGLang's streaming HTTP API (the ``bench`` module's native engine).

With ``arrival`` the levels are request rates instead (open loop: _bench_open_loop sends on workload.py's seeded
schedule, lengths, shared prefixes and conversations, and reports goodput under the SLO and the client's send lag).

Note that this module util is private to the llmops.sglang collection; do not use it from other collections.

It runs on the GPU host with the SGLang venv's Python (which ships aiohttp); aiohttp is imported behind a guard
so the collection's sanity import test (stdlib only) passes. One asyncio process with one ClientSession keeps
exactly C requests in flight per concurrency level: warm-up requests first (excluded), then ``repeats`` timed runs
of N requests each. Fixed input lengths come from token-id prompts (/v1/completions, /generate) or from word text
calibrated against the server's own prompt token count (/v1/chat/completions); fixed output lengths from
max_tokens + ignore_eos; output token counts from the server's usage/meta_info, never from the client.
Unique prompts per request keep the server's prefix cache from turning repeats into cache hits.

Server-side trouble (HTTP 401, refused connections, a server that dies or hangs) never raises and never hangs:
the sweep keeps the levels completed so far and sets ``error``. Bad arguments raise ValueError naming the option.

This module runs the sweep; its parts, one concern each: _bench_config (the options and their validation),
_bench_requests (prompts and request bodies), _bench_sse (a streamed answer into its request's record),
_bench_aggregate (a run's numbers), _bench_session (aiohttp, the session, the server's model), _bench_closed_loop and
_bench_open_loop (the two runners), _bench_sweep (the sweep document, shared with bench_serving).
"""
from __future__ import annotations

import asyncio
import gc
import typing as t

from ansible_collections.llmops.sglang.plugins.module_utils._bench_closed_loop import ClosedLoopRunner, run_level
from ansible_collections.llmops.sglang.plugins.module_utils._bench_config import BenchConfig
from ansible_collections.llmops.sglang.plugins.module_utils._bench_open_loop import OpenLoopRunner, run_rate_level
from ansible_collections.llmops.sglang.plugins.module_utils._bench_session import (
    BenchAborted, client_session, require_aiohttp, resolve_model)
from ansible_collections.llmops.sglang.plugins.module_utils._bench_sweep import (
    StopRule, finish_sweep, new_sweep, sweep_order)


async def _sweep_rates(runner: OpenLoopRunner, sweep: dict,
                       progress: t.Callable[[dict], None]) -> tuple[str | None, str | None]:
    """Append completed open-loop levels to ``sweep``; return the error that stopped the sweep and its kind."""
    for rate in runner.config.arrival.request_rates:
        stopped = await _append_level(sweep, runner.config, f"request rate {rate:g}/s",
                                      run_rate_level(runner, rate, progress))
        if stopped:
            return stopped
    return None, None


async def _append_level(sweep: dict, config: BenchConfig, what: str,
                        level: t.Coroutine[t.Any, t.Any, dict]) -> tuple[str, str] | None:
    """Run one level within level_timeout_s and append it to ``sweep``; the error that stops the sweep and its kind,
    or None."""
    try:
        async with asyncio.timeout(config.level_timeout_s):
            sweep["levels"].append(await level)
    except BenchAborted as exc:
        sweep["failed_level"] = exc.level
        return f"{what}: {exc}", exc.kind
    except TimeoutError:
        return f"{what} did not finish within level_timeout_s={config.level_timeout_s:g}", "time_limit"
    finally:
        gc.unfreeze()
    return None


async def _sweep_levels(config: BenchConfig, sweep: dict, progress: t.Callable[[dict], None],
                        stop_rule: StopRule | None) -> tuple[str | None, str | None]:
    """Append completed levels to ``sweep``; return the error that stopped the sweep and its kind, if any."""
    async with client_session(config) as session:
        runner = (OpenLoopRunner(session, config, sweep["model"]) if config.arrival is not None
                  else ClosedLoopRunner(session, config, sweep["model"], stop_rule))
        try:
            if config.endpoint == "chat":
                runner.words = await runner.calibrate_words()
        except BenchAborted as exc:
            return str(exc), exc.kind
        if config.arrival is not None:
            return await _sweep_rates(runner, sweep, progress)
        for concurrency, earlier in sweep_order(sweep, config.concurrency_levels):
            stopped = await _append_level(sweep, config, f"concurrency {concurrency}",
                                          run_level(runner, concurrency, progress, earlier))
            if stopped:
                return stopped
    return None, None


def run_sweep(config: BenchConfig, on_progress: t.Callable[[dict], None] | None = None,
              stop_rule: StopRule | None = None) -> dict:
    """Run the whole sweep and return the sweep document; ``on_progress`` gets one dict per level/run event.

    With ``stop_rule`` a level's repeats end when the rule says so (``config.repeats`` is then the cap)."""
    require_aiohttp()
    sweep = new_sweep(config, "native")
    progress = on_progress or (lambda event: None)
    try:
        sweep["model"] = resolve_model(config)
    except BenchAborted as exc:
        return finish_sweep(sweep, str(exc), on_progress, exc.kind)
    error, kind = asyncio.run(_sweep_levels(config, sweep, progress, stop_rule))
    return finish_sweep(sweep, error, on_progress, kind)
