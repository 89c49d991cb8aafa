# Copyright (c) llmops.sglang contributors
# Apache License 2.0 (see LICENSE)
"""What a benchmark sweep measures (:class:`BenchConfig`, the ``bench`` module's options) and its validation: bad
arguments raise ValueError naming the option, before any request.

Private to the llmops.sglang collection; do not use it from other collections. Pure and stdlib-only.
"""
from __future__ import annotations

import math
import typing as t
from dataclasses import dataclass, field

from ansible_collections.llmops.sglang.plugins.module_utils.secrets import api_key_problem
from ansible_collections.llmops.sglang.plugins.module_utils.workload import (
    DEFAULT_MAX_CLIENT_LAG_MS,
    DEFAULT_RUN_SECONDS,
    DEFAULT_WARMUP_SECONDS,
    Arrival,
    Lengths,
    validate_slo,
    validate_workload,
)

ENDPOINT_PATHS = {"completions": "/v1/completions", "chat": "/v1/chat/completions", "generate": "/generate"}
DEFAULT_CONCURRENCY_LEVELS = (1, 4, 16, 32, 64)
# Requests in flight at one level: the connection pool is unbounded (limit=0), so the level's concurrency is the
# number of sockets and tasks; SGLang's own max_running_requests stays far below.
MAX_CONCURRENCY = 4096
DEFAULT_MAX_FAILED_SHARE = 0.01
# Output tokens of a closed-loop warm-up request (capped at output_len), as sglang.bench_serving warms up
# (sglang 0.5.11 python/sglang/bench_serving.py, benchmark(): ``output_len=min(test_request.output_len, 32)``):
# a warm-up has to run every batch size and prompt shape of the level once, not to generate a full answer.
# On the design's real case (1000 output tokens, C=1..64) the full-length warm-ups were 117 s of every sweep.
WARMUP_OUTPUT_LEN = 32


@dataclass(frozen=True)
class BenchConfig:
    """What to measure; defaults match the ``bench`` module's documented defaults."""

    base_url: str
    endpoint: str = "completions"
    model: str | None = None
    concurrency_levels: tuple[int, ...] = DEFAULT_CONCURRENCY_LEVELS
    requests_per_level: int | None = None
    warmup_requests: int | None = None
    warmup_output_len: int = WARMUP_OUTPUT_LEN
    repeats: int = 3
    input_len: int = 1000
    output_len: int = 1000
    request_timeout_s: float = 600.0
    level_timeout_s: float = 3600.0
    steady_state: bool = False
    api_key: str | None = field(default=None, repr=False)
    seed: int = 0
    max_failed_share: float = DEFAULT_MAX_FAILED_SHARE
    # Open-loop workload (workload.py); without ``arrival`` the sweep is the closed-loop one above.
    arrival: Arrival | None = None
    lengths: Lengths = field(default_factory=Lengths)
    shared_prefix: dict | None = None
    multi_turn: dict | None = None
    slo: dict | None = None
    max_client_lag_ms: float = DEFAULT_MAX_CLIENT_LAG_MS

    def __post_init__(self) -> None:
        object.__setattr__(self, "base_url", self.base_url.rstrip("/"))
        object.__setattr__(self, "concurrency_levels", tuple(self.concurrency_levels))
        object.__setattr__(self, "slo", validate_slo(self.slo))
        _validate_config(self)

    @property
    def turns(self) -> int:
        return self.multi_turn["turns"] if self.multi_turn else 1

    def conversations_for_rate(self, rate: float, *, warmup: bool = False) -> int:
        """Conversations (single requests without multi_turn) per timed run or warm-up at ``rate`` requests/s.

        Defaults: a minute of arrivals per run, ten seconds of warm-up, at least 4 requests; request counts are
        rounded up to whole conversations."""
        given, seconds = ((self.warmup_requests, DEFAULT_WARMUP_SECONDS) if warmup
                          else (self.requests_per_level, DEFAULT_RUN_SECONDS))
        requests = given if given is not None else max(4, math.ceil(rate * seconds))
        return math.ceil(requests / self.turns)

    def requests_for(self, concurrency: int) -> int:
        """Timed requests per run: default 2*C (every slot turns over at least twice), at least 4."""
        return self.requests_per_level if self.requests_per_level is not None else max(2 * concurrency, 4)

    def warmup_for(self, concurrency: int) -> int:
        """Warm-up requests per level, run at concurrency C and discarded.

        Default max(C, 4): one full batch at the level's concurrency, so every batch size the timed runs use has
        been captured/compiled before timing starts; over the default sweep that is 120 requests per server
        lifetime, more than a fixed warm-up of max(C, 32) requests per level would give over the first two levels.
        """
        return self.warmup_requests if self.warmup_requests is not None else max(concurrency, 4)

    def warmup_tokens(self) -> int:
        """Output tokens of each closed-loop warm-up request."""
        return min(self.output_len, self.warmup_output_len)

    def plan(self) -> list[dict]:
        if self.arrival is not None:
            return [{"request_rate": rate,
                     "warmup_requests": self.conversations_for_rate(rate, warmup=True) * self.turns,
                     "requests": self.conversations_for_rate(rate) * self.turns, "repeats": self.repeats}
                    for rate in self.arrival.request_rates]
        return [{"concurrency": c, "warmup_requests": self.warmup_for(c), "requests": self.requests_for(c),
                 "repeats": self.repeats} for c in self.concurrency_levels]


def _require_at_least(name: str, value: t.Any, minimum: float, *, strict: bool = False) -> None:
    is_number = not isinstance(value, bool) and isinstance(value, (int, float))
    if not is_number or value < minimum or (strict and value == minimum):
        raise ValueError(f"{name} must be a number {'>' if strict else '>='} {minimum:g}, got {value!r}")


def _validate_config(config: BenchConfig) -> None:
    if not config.base_url.startswith(("http://", "https://")):
        raise ValueError(f"base_url must start with http:// or https://, got {config.base_url!r}")
    if config.endpoint not in ENDPOINT_PATHS:
        raise ValueError(f"endpoint must be one of {', '.join(ENDPOINT_PATHS)}, got {config.endpoint!r}")
    if not config.concurrency_levels:
        raise ValueError("concurrency_levels must list at least one concurrency")
    for concurrency in config.concurrency_levels:
        if isinstance(concurrency, bool) or not isinstance(concurrency, int) or concurrency <= 0:
            raise ValueError(f"concurrency_levels must contain positive integers, got {concurrency!r}")
        if concurrency > MAX_CONCURRENCY:
            raise ValueError(f"concurrency_levels: {concurrency} requests in flight is more than the client opens "
                             f"({MAX_CONCURRENCY} at most, one connection each); lower it")
    if config.requests_per_level is not None:
        _require_at_least("requests_per_level", config.requests_per_level, 1)
    if config.requests_per_level is not None and config.arrival is None:
        too_small = [c for c in config.concurrency_levels if c > config.requests_per_level]
        if too_small:
            raise ValueError(f"requests_per_level={config.requests_per_level} cannot keep {max(too_small)} requests in "
                             "flight; raise it or leave it unset (default max(2*C, 4))")
    if config.warmup_requests is not None:
        _require_at_least("warmup_requests", config.warmup_requests, 0)
    for name in ("repeats", "input_len", "output_len", "warmup_output_len"):
        _require_at_least(name, getattr(config, name), 1)
    _require_at_least("request_timeout_s", config.request_timeout_s, 0, strict=True)
    # Required: a level without a time limit could hold the GPUs (and the stage) for good.
    _require_at_least("level_timeout_s", config.level_timeout_s, 0, strict=True)
    problem = api_key_problem(config.api_key) if config.api_key else None
    if problem:
        raise ValueError(f"api_key: {problem}")
    _require_at_least("max_failed_share", config.max_failed_share, 0)
    if config.max_failed_share > 1:
        raise ValueError(f"max_failed_share must be a share between 0 and 1 (0.01 = 1%), got {config.max_failed_share!r}")
    validate_workload(config.shared_prefix, config.multi_turn)
    _require_at_least("max_client_lag_ms", config.max_client_lag_ms, 0, strict=True)
    if config.arrival is None:
        open_loop_only = [name for name, unset in (("lengths", config.lengths.distribution == "fixed"),
                                                   ("shared_prefix", config.shared_prefix is None),
                                                   ("multi_turn", config.multi_turn is None),
                                                   ("slo", config.slo is None)) if not unset]
        if open_loop_only:
            raise ValueError(f"{', '.join(open_loop_only)} apply to open-loop levels only; set arrival.request_rates "
                             "(closed-loop concurrency levels keep fixed, unique prompts)")
    elif config.steady_state:
        raise ValueError("steady_state needs closed-loop levels (a share of C in flight); an open-loop level has no C. "
                         "Unset steady_state or arrival")
