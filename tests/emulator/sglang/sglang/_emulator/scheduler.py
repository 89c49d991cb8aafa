# Copyright (c) llmops.sglang contributors
# Apache License 2.0 (see LICENSE)
"""Continuous-batching scheduler loop (asyncio) driven by the performance model.

Each iteration is a prefill batch (new requests, FIFO, within max_running_requests,
max_prefill_tokens and KV room; yields each request's first token) or a decode step (every
running request gains its accept length in tokens). Iterations end at absolute deadlines
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

from sglang._emulator.logs import as_rank, set_rank
from sglang._emulator.perf import PerfModel

logger = logging.getLogger(__name__)

# Falling further behind than this (event loop overloaded) drops the backlog instead of bursting.
MAX_LAG_S = 0.05


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
    arrival: float = field(default_factory=time.monotonic)
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


@dataclass
class SchedulerStats:
    prompt_tokens: int = 0
    generation_tokens: int = 0
    finished_requests: int = 0
    last_gen_throughput: float = 0.0
    accept_length_sum: float = 0.0
    accept_length_steps: int = 0


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
        self.stats = SchedulerStats()
        self._wake = asyncio.Event()
        self._progress = asyncio.Event()
        self._decode_steps = 0
        self._window = (time.monotonic(), 0, 0.0, 0)

    @property
    def used_tokens(self) -> int:
        return sum(r.input_len + r.generated for r in self.running)

    def submit(self, request: GenRequest) -> None:
        self.waiting.append(request)
        self._wake.set()

    async def wait_for_progress(self) -> None:
        """Return once any request produces output (what SGLang's health check waits for)."""
        await self._progress.wait()

    def try_flush_cache(self) -> bool:
        """SGLang flushes the radix cache only when idle; the scheduler (rank 0) logs the outcome."""
        with as_rank(self.log_prefix):
            if self.waiting or self.running:
                logger.warning(
                    "Cache not flushed because there are pending requests. "
                    f"#queue-req: {len(self.waiting)}, #running-req: {len(self.running)}"
                )
                return False
            logger.info("Cache flushed successfully!")
            return True

    async def run(self) -> None:
        set_rank(self.log_prefix)
        loop = asyncio.get_running_loop()
        deadline = loop.time()
        while True:
            self._drop_aborted()
            if not self.running and not self.waiting:
                self._wake.clear()
                await self._wake.wait()
                deadline = loop.time()
                continue
            batch = self._admit()
            cost = self.perf.prefill_s(sum(r.input_len for r in batch)) if batch else self.perf.decode_step_s(
                len(self.running))
            noisy_cost = cost * self.instance_factor * lognormal_factor(self.rng, self.noise_cv)
            deadline = max(deadline + noisy_cost * self.time_scale, loop.time() - MAX_LAG_S)
            await asyncio.sleep(max(deadline - loop.time(), 0.0))
            if batch:
                self._finish_prefill(batch)
            else:
                self._finish_decode()
            self._progress.set()
            self._progress = asyncio.Event()

    def _drop_aborted(self) -> None:
        if any(r.done for r in self.waiting):
            self.waiting = deque(r for r in self.waiting if not r.done)
        self.running = [r for r in self.running if not r.done]

    def _admit(self) -> list[GenRequest]:
        batch: list[GenRequest] = []
        budget = self.limits.max_prefill_tokens
        free_tokens = self.limits.max_total_num_tokens - self.used_tokens
        while self.waiting and len(self.running) + len(batch) < self.limits.max_running_requests:
            request = self.waiting[0]
            if (batch and request.input_len > budget) or request.input_len > free_tokens:
                break
            batch.append(self.waiting.popleft())
            budget -= request.input_len
            free_tokens -= request.input_len
        return batch

    def _finish_prefill(self, batch: list[GenRequest]) -> None:
        now = time.monotonic()
        new_tokens = sum(r.input_len for r in batch)
        self.stats.prompt_tokens += new_tokens
        logger.info(
            f"Prefill batch. #new-seq: {len(batch)}, #new-token: {new_tokens}, #cached-token: 0, "
            f"token usage: {self._usage():.2f}, #running-req: {len(self.running)}, #queue-req: {len(self.waiting)}, "
        )
        for request in batch:
            request.accept_length = self._request_accept_length()
            request.first_token_at = now
            self._advance(request, 1, now)
            if not request.done:
                self.running.append(request)

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
        request.updated.set()
        return added

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
