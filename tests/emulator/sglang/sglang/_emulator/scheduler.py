# Copyright (c) llmops.sglang contributors
# Apache License 2.0 (see LICENSE)
"""Continuous-batching scheduler loop (asyncio) driven by the performance model.

Each iteration is a prefill batch or a decode step, prefill first when one can be formed, as in
sglang 0.5.23 sglang/srt/managers/scheduler.py get_next_batch_to_run ("Run prefill first if possible").
A prefill batch takes waiting requests in the policy's order (fcfs; lpm: longest cached prefix first)
within max_running_requests, max_prefill_tokens, chunked_prefill_size and KV room; a cached prefix
(prefix_cache.py) is not prefilled again; a batch holds at most chunked_prefill_size new tokens, the
request that crosses it is truncated to the rest and is the chunked request, prefilled one chunk per
iteration until its last chunk; with --enable-mixed-chunk the running
requests decode one token inside each prefill batch. A request's last prefill chunk yields its first
token; a decode step gives every running request its accept length in tokens. Iterations end at absolute deadlines
(start + sum of step times x time_scale), so event-loop overhead and timer slack do not add up:
the wall-clock throughput stays real/time_scale while the loop keeps up.
"""
from __future__ import annotations

import asyncio
import logging
import math
import random
import time
from collections import deque
from dataclasses import dataclass, field

from sglang._emulator import tokens
from sglang._emulator.logs import as_rank, set_rank
from sglang._emulator.perf import PerfModel
from sglang._emulator.prefix_cache import PrefixCache, page_keys

logger = logging.getLogger(__name__)

# Falling further behind than this (event loop overloaded) drops the backlog instead of bursting.
MAX_LAG_S = 0.05
# sglang 0.5.23 sglang/srt/managers/schedule_policy.py WAITING_QUEUE_PREFIX_MATCH_MAX: a longer queue makes
# lpm fall back to fcfs ("Turn off the expensive prefix matching and sorting when the #queue is large").
LPM_MAX_QUEUE = 128


def lognormal_factor(rng: random.Random, cv: float) -> float:
    """A multiplicative noise factor with mean 1 and coefficient of variation `cv`."""
    if cv <= 0:
        return 1.0
    sigma = math.sqrt(math.log(1 + cv ** 2))
    return rng.lognormvariate(-sigma ** 2 / 2, sigma)


@dataclass
class GenRequest:
    rid: str
    input_len: int
    max_new_tokens: int
    stop_after: int | None
    eos_token_id: int
    # What the prefix cache compares (text or token ids); None: never matched or cached (the health probe).
    prompt: str | list[int] | None = None
    arrival: float = field(default_factory=time.monotonic)
    prefix_keys: list[int] = field(default_factory=list)
    # Prompt tokens whose KV exists: the cached prefix, then each prefilled chunk.
    prefilled: int = 0
    cached_tokens: int = 0
    generated: int = 0
    verify_steps: int = 0
    accept_length: float = 1.0
    finish_reason: dict | None = None
    first_token_at: float | None = None
    finished_at: float | None = None
    updated: asyncio.Event = field(default_factory=asyncio.Event)

    @property
    def done(self) -> bool:
        return self.finish_reason is not None

    def abort(self, message: str) -> None:
        if not self.done:
            self.finish_reason = {"type": "abort", "message": message}
            self.finished_at = time.monotonic()
            self.updated.set()


@dataclass(frozen=True)
class SchedulerLimits:
    max_running_requests: int
    max_total_num_tokens: int
    max_prefill_tokens: int
    decode_log_interval: int
    speculative: bool
    # None or <= 0: no chunking (SGLang's --chunked-prefill-size -1).
    chunked_prefill_size: int | None = None
    mixed_chunk: bool = False
    radix_cache: bool = False
    schedule_policy: str = "fcfs"
    page_size: int = 1


@dataclass
class PrefillBatch:
    requests: list[GenRequest] = field(default_factory=list)
    # Prompt tokens each request prefills in this iteration (all of them, or its chunk).
    extend: list[int] = field(default_factory=list)
    hit_tokens: int = 0
    # Running requests decoding inside this batch (--enable-mixed-chunk).
    decoding: list[GenRequest] = field(default_factory=list)

    @property
    def new_tokens(self) -> int:
        return sum(self.extend)

    def add(self, request: GenRequest, tokens: int) -> None:
        self.requests.append(request)
        self.extend.append(tokens)


@dataclass
class SchedulerStats:
    prompt_tokens: int = 0
    generation_tokens: int = 0
    finished_requests: int = 0
    last_gen_throughput: float = 0.0
    accept_length_sum: float = 0.0
    accept_length_steps: int = 0
    # Wall seconds the loop fell behind its modelled timeline by more than MAX_LAG_S and gave up on: the CPU, not
    # the model, took them (a loaded machine), so a test can tell the two apart.
    behind_s: float = 0.0


class Scheduler:
    def __init__(
        self,
        perf: PerfModel,
        limits: SchedulerLimits,
        time_scale: float,
        noise_cv: float,
        instance_cv: float,
        request_accept_cv: float,
        rng: random.Random,
        log_prefix: str,
    ) -> None:
        self.perf, self.limits, self.time_scale = perf, limits, time_scale
        self.rng, self.log_prefix = rng, log_prefix
        self.request_accept_cv, self.noise_cv = request_accept_cv, noise_cv
        # Run-to-run variation of a whole server instance (clocks, placement), drawn once.
        self.instance_factor = lognormal_factor(rng, instance_cv)
        self.waiting: deque[GenRequest] = deque()
        self.running: list[GenRequest] = []
        # The request whose prompt is being prefilled chunk by chunk (SGLang's Scheduler.chunked_req).
        self.chunked: GenRequest | None = None
        self.cache = PrefixCache(limits.page_size) if limits.radix_cache else None
        self.stats = SchedulerStats()
        self._wake = asyncio.Event()
        self._progress = asyncio.Event()
        self._decode_steps = 0
        self._window = (time.monotonic(), 0, 0.0, 0)

    @property
    def used_tokens(self) -> int:
        in_prefill = self.chunked.prefilled if self.chunked else 0
        return sum(r.input_len + r.generated for r in self.running) + in_prefill

    def submit(self, request: GenRequest) -> None:
        if self.cache is not None and request.prompt is not None:
            request.prefix_keys = page_keys(tokens.token_units(request.prompt), self.limits.page_size)
        self.waiting.append(request)
        self._wake.set()

    async def wait_for_progress(self) -> None:
        """Return once any request produces output (what SGLang's health check waits for)."""
        await self._progress.wait()

    def try_flush_cache(self) -> bool:
        """SGLang flushes the radix cache only when idle; the scheduler (rank 0) logs the outcome."""
        with as_rank(self.log_prefix):
            if self.waiting or self.running or self.chunked:
                logger.warning(
                    "Cache not flushed because there are pending requests. "
                    f"#queue-req: {len(self.waiting)}, #running-req: {len(self.running)}"
                )
                return False
            if self.cache is not None:
                self.cache = PrefixCache(self.limits.page_size)
            logger.info("Cache flushed successfully!")
            return True

    async def run(self) -> None:
        set_rank(self.log_prefix)
        loop = asyncio.get_running_loop()
        deadline = loop.time()
        while True:
            self._drop_aborted()
            if not self.running and not self.waiting and not self.chunked:
                self._wake.clear()
                await self._wake.wait()
                deadline = loop.time()
                continue
            batch, cost = self.plan_step()
            noisy_cost = cost * self.instance_factor * lognormal_factor(self.rng, self.noise_cv)
            deadline = self.kept_up(deadline + noisy_cost * self.time_scale, loop.time())
            await asyncio.sleep(max(deadline - loop.time(), 0.0))
            self.finish_step(batch)
            self._progress.set()
            self._progress = asyncio.Event()

    def kept_up(self, deadline: float, now: float) -> float:
        """The end of the next step on the loop's clock: the modelled ``deadline`` while the loop is at most
        MAX_LAG_S behind it (it catches up); beyond that the lag is given up and counted in ``behind_s``."""
        behind = now - MAX_LAG_S - deadline
        if behind <= 0:
            return deadline
        self.stats.behind_s += behind
        return deadline + behind

    def plan_step(self) -> tuple[PrefillBatch | None, float]:
        """The next iteration (a prefill batch, or None: a decode step) and its noise-free real-GPU cost."""
        batch = self._admit()
        return batch, self._step_cost(batch)

    def finish_step(self, batch: PrefillBatch | None) -> None:
        if batch:
            self._finish_prefill(batch)
        else:
            self._finish_decode()

    def _drop_aborted(self) -> None:
        if any(r.done for r in self.waiting):
            self.waiting = deque(r for r in self.waiting if not r.done)
        self.running = [r for r in self.running if not r.done]
        if self.chunked is not None and self.chunked.done:
            self.chunked = None

    def _step_cost(self, batch: PrefillBatch | None) -> float:
        """A mixed batch is one forward over the chunk's tokens plus one token per running request."""
        if batch is None:
            return self.perf.decode_step_s(len(self.running))
        if batch.decoding:
            return self.perf.prefill_s(batch.new_tokens + len(batch.decoding))
        return self.perf.prefill_s(batch.new_tokens)

    def _admit(self) -> PrefillBatch | None:
        """sglang 0.5.23 sglang/srt/managers/scheduler.py _get_new_batch_prefill_raw with schedule_policy.py's
        PrefillAdder (0.5.11 the same): the chunked request continues first (add_chunked_req); every request
        admitted spends its tokens of the batch's chunk budget (rem_chunk_tokens = chunked_prefill_size), and
        the one whose rest exceeds what is left is truncated to it, page-aligned (add_one_req's trunc_len), and
        becomes the chunked request; an exhausted budget closes the batch (budget_state: OTHER). So a batch
        prefills at most chunked_prefill_size tokens and only one request is chunked at a time."""
        batch = PrefillBatch()
        budget = self.limits.max_prefill_tokens
        free_tokens = self.limits.max_total_num_tokens - self.used_tokens
        size = self.limits.chunked_prefill_size
        chunk_budget = size if size and size > 0 else None  # None: chunking off (SGLang's rem_chunk_tokens)
        if self.chunked is not None:
            chunk_budget, budget, free_tokens = self._continue_chunked(batch, chunk_budget, budget, free_tokens)
        self._order_waiting()
        while (self.waiting and self.chunked is None and (chunk_budget is None or chunk_budget > 0)
               and len(self.running) + len(batch.requests) < self.limits.max_running_requests):
            request = self.waiting[0]
            prefix = self.cache.match(request.prefix_keys, request.input_len) if self.cache else 0
            extend = request.input_len - prefix
            chunk = self._chunk(extend, chunk_budget)
            if (batch.requests and extend > budget) or extend > free_tokens or chunk <= 0:
                break
            self.waiting.popleft()
            request.prefilled = request.cached_tokens = prefix
            batch.hit_tokens += prefix
            batch.add(request, chunk)
            budget -= chunk
            free_tokens -= chunk
            chunk_budget = None if chunk_budget is None else chunk_budget - chunk
            if chunk < extend:
                self.chunked = request
        if not batch.requests:
            return None
        if self.limits.mixed_chunk:
            batch.decoding = list(self.running)
        return batch

    def _continue_chunked(self, batch: PrefillBatch, chunk_budget: int | None, budget: int,
                          free_tokens: int) -> tuple[int | None, int, int]:
        """add_chunked_req: the rest of the chunked request, at most a chunk."""
        request = self.chunked
        rest = request.input_len - request.prefilled
        chunk = rest if chunk_budget is None else min(rest, chunk_budget)
        batch.add(request, chunk)
        if chunk == rest:
            self.chunked = None
        return None if chunk_budget is None else chunk_budget - chunk, budget - chunk, free_tokens - chunk

    def _chunk(self, extend: int, chunk_budget: int | None) -> int:
        """The tokens a new request prefills in this batch: all of them if they fit the chunk budget, else the
        budget left rounded down to whole pages (0: it waits for the next batch)."""
        if chunk_budget is None or extend <= chunk_budget:
            return extend
        page = self.limits.page_size
        return chunk_budget // page * page

    def _order_waiting(self) -> None:
        """lpm: longest cached prefix first (schedule_policy.py _sort_by_longest_prefix, a stable sort); matching
        every waiting request also refreshes its prefix's LRU time, so queued prefixes outlive the rest. Without
        a radix cache SGLang runs fcfs whatever the policy (SchedulePolicy._validate_and_adjust_policy)."""
        if (self.cache is None or self.limits.schedule_policy != "lpm" or len(self.waiting) < 2
                or len(self.waiting) > LPM_MAX_QUEUE):
            return
        matched = {id(r): self.cache.match(r.prefix_keys, r.input_len) for r in self.waiting}
        self.waiting = deque(sorted(self.waiting, key=lambda r: -matched[id(r)]))

    def _finish_prefill(self, batch: PrefillBatch) -> None:
        now = time.monotonic()
        completed = [r for r, tokens in zip(batch.requests, batch.extend) if self._prefilled(r, tokens)]
        self.stats.prompt_tokens += sum(r.input_len for r in completed)
        logger.info(
            f"Prefill batch. #new-seq: {len(batch.requests)}, #new-token: {batch.new_tokens}, "
            f"#cached-token: {batch.hit_tokens}, token usage: {self._usage():.2f}, "
            f"#running-req: {len(self.running)}, #queue-req: {len(self.waiting)}, "
        )
        # 0.5.23 speculative_hook.py: "Mixed steps degrade running requests to a plain 1-token decode."
        for request in batch.decoding:
            self._advance(request, 1, now)
        self.running = [r for r in self.running if not r.done]
        for request in completed:
            request.accept_length = self._request_accept_length()
            request.first_token_at = now
            self._advance(request, 1, now)
            if not request.done:
                self.running.append(request)

    def _prefilled(self, request: GenRequest, tokens: int) -> bool:
        """Count a prefilled chunk; a complete prompt goes into the prefix cache (cache_unfinished_req)."""
        request.prefilled += tokens
        if request.prefilled < request.input_len:
            return False
        self._cache_insert(request.prefix_keys)
        return True

    def _cache_insert(self, keys: list[int]) -> None:
        """Insert, then evict LRU pages so the cache fits the pool beside the running requests."""
        if self.cache is None or not keys:
            return
        self.cache.insert(keys)
        self.cache.evict_to(self.limits.max_total_num_tokens - self.used_tokens)

    def _request_accept_length(self) -> float:
        mean = self.perf.accept_length
        if mean <= 1.0:
            return 1.0
        drawn = self.rng.gauss(mean, mean * self.request_accept_cv)
        return min(max(drawn, 1.0), float(self.perf.max_accept))

    def _finish_decode(self) -> None:
        now = time.monotonic()
        batch_size = len(self.running)
        produced = 0
        for request in self.running:
            whole, fraction = divmod(request.accept_length, 1.0)
            tokens = int(whole) + (1 if self.rng.random() < fraction else 0)
            request.verify_steps += 1
            produced += self._advance(request, tokens, now)
        self.running = [r for r in self.running if not r.done]
        self._decode_steps += 1
        self._log_decode(batch_size, produced, now)

    def _advance(self, request: GenRequest, tokens: int, now: float) -> int:
        """Add up to `tokens` output tokens; finish on max_new_tokens or (without ignore_eos) EOS."""
        limit = request.max_new_tokens if request.stop_after is None else min(request.max_new_tokens, request.stop_after)
        added = min(tokens, limit - request.generated)
        request.generated += added
        self.stats.generation_tokens += added
        if request.generated >= limit:
            if request.stop_after is not None and request.stop_after < request.max_new_tokens:
                request.finish_reason = {"type": "stop", "matched": request.eos_token_id}
            else:
                request.finish_reason = {"type": "length", "length": request.max_new_tokens}
            request.finished_at = now
            self.stats.finished_requests += 1
            self._cache_finished(request)
        request.updated.set()
        return added

    def _cache_finished(self, request: GenRequest) -> None:
        """cache_finished_req: the prompt and its output stay cached, so the next turn of a conversation hits."""
        if self.cache is not None and request.prompt is not None:
            units = tokens.token_units(request.prompt, request.generated)
            self._cache_insert(page_keys(units, self.limits.page_size))

    def _usage(self) -> float:
        return self.used_tokens / self.limits.max_total_num_tokens if self.limits.max_total_num_tokens else 0.0

    def _log_decode(self, batch_size: int, produced: int, now: float) -> None:
        started, tokens, accept_sum, steps = self._window
        self._window = (started, tokens + produced, accept_sum + produced / max(batch_size, 1), steps + 1)
        if self._decode_steps % self.limits.decode_log_interval:
            return
        started, tokens, accept_sum, steps = self._window
        throughput = tokens / (now - started) if now > started else 0.0
        self.stats.last_gen_throughput = throughput
        self.stats.accept_length_sum += accept_sum
        self.stats.accept_length_steps += steps
        accept = f"accept len: {accept_sum / steps:.2f}, " if self.limits.speculative else ""
        logger.info(
            f"Decode batch. #running-req: {batch_size}, #token: {self.used_tokens}, token usage: {self._usage():.2f}, "
            f"{accept}cuda graph: {batch_size <= self.perf.cuda_graph_max_bs}, "
            f"gen throughput (token/s): {throughput:.2f}, #queue-req: {len(self.waiting)}, "
        )
        self._window = (now, 0, 0.0, 0)
