# Copyright (c) llmops.sglang contributors
# Apache License 2.0 (see LICENSE)
"""Concurrency-sweep load generator for SGLang's streaming HTTP API (the ``bench`` module's native engine).

With ``arrival`` the levels are request rates instead (open loop: run_open_loop sends on workload.py's seeded
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
"""
from __future__ import annotations

import asyncio
import bisect
import datetime
import gc
import json
import math
import random
import secrets
import statistics
import sys
import time
import typing as t
import urllib.error
import urllib.request
from dataclasses import dataclass, field

from ansible_collections.llmops.sglang.plugins.module_utils.secrets import api_key_problem
from ansible_collections.llmops.sglang.plugins.module_utils.sweep_stats import summarize_level
from ansible_collections.llmops.sglang.plugins.module_utils.workload import (
    DEFAULT_MAX_CLIENT_LAG_MS,
    DEFAULT_RUN_SECONDS,
    DEFAULT_WARMUP_SECONDS,
    Arrival,
    Lengths,
    group_of,
    lag_check,
    rate_level_summary,
    request_latencies,
    sample_lengths,
    send_offsets,
    slo_report,
    turn_prompt,
    validate_slo,
    validate_workload,
)

try:
    import aiohttp
except ImportError as exc:
    aiohttp = None
    AIOHTTP_IMPORT_ERROR: ImportError | None = exc
else:
    AIOHTTP_IMPORT_ERROR = None

SCHEMA_VERSION = 1
ENDPOINT_PATHS = {"completions": "/v1/completions", "chat": "/v1/chat/completions", "generate": "/generate"}
DEFAULT_CONCURRENCY_LEVELS = (1, 4, 16, 32, 64)
# Requests in flight at one level: the connection pool is unbounded (limit=0), so the level's concurrency is the
# number of sockets and tasks; SGLang's own max_running_requests stays far below.
MAX_CONCURRENCY = 4096
QUANTILES = (50, 90, 99)
# aiohttp's 64 KB default read buffer collapses long streams; SGLang's own benchmark raises it to 10 MB
# (sglang 0.5.11 python/sglang/bench_serving.py, BENCH_AIOHTTP_READ_BUFSIZE_BYTES).
READ_BUFSIZE = 10 * 2**20
# Token ids present in every modern vocabulary (>= 32k entries) and clear of the special tokens at the low end.
PROMPT_TOKEN_IDS = range(1000, 30000)
# Tokens are counted for steady_agg_tok_s only while at least this share of C requests is in flight (sglang#30918).
STEADY_STATE_RATIO = 0.9
METADATA_TIMEOUT_S = 30.0
MAX_ERROR_SAMPLES = 3
# Common English words: one BPE token each (with the leading space) in the usual tokenizers, so word count tracks
# token count closely and the calibration request only has to correct the chat template's overhead.
PROMPT_WORDS = (
    "time year people way day man thing woman life child world school state family student group country problem "
    "hand part place case week company system program question work government number night point home water room "
    "mother area money story fact month lot right study book eye job word business issue side kind head house "
    "service friend father power hour game line end member law car city community name president team minute idea "
    "kid body information back parent face others level office door health person art war history party result "
    "change morning reason research girl guy moment air teacher force education"
).split()


# Why a sweep stopped (``error_kind`` of the sweep, docs/bench-schema.md): ``auth`` (401), ``unreachable`` (no
# connection), ``requests_failed`` (every request of a batch, or more than max_failed_share of a level, failed),
# ``time_limit`` (level_timeout_s), ``server`` (an answer the benchmark cannot use: metadata errors, calibration),
# ``client`` (the benchmark client itself could not run, e.g. bench_serving exited non-zero).
ERROR_KINDS = ("auth", "unreachable", "requests_failed", "time_limit", "server", "client")
DEFAULT_MAX_FAILED_SHARE = 0.01
# Output tokens of a closed-loop warm-up request (capped at output_len), as sglang.bench_serving warms up
# (sglang 0.5.11 python/sglang/bench_serving.py, benchmark(): ``output_len=min(test_request.output_len, 32)``):
# a warm-up has to run every batch size and prompt shape of the level once, not to generate a full answer.
# On the design's real case (1000 output tokens, C=1..64) the full-length warm-ups were 117 s of every sweep.
WARMUP_OUTPUT_LEN = 32
# A stopping rule: after each timed run of a level, None to measure another (up to ``repeats``), or a record of why
# the level is done; ``ends_sweep`` in it leaves the remaining levels unmeasured (sweep_stats.sequential_stop_rule).
StopRule = t.Callable[[int, t.List[dict]], t.Optional[dict]]


class BenchAborted(Exception):
    """The server cannot serve the sweep any more (auth rejected, unreachable, died or hung): stop and report."""

    def __init__(self, message: str, kind: str = "server", level: dict | None = None) -> None:
        super().__init__(message)
        self.kind = kind
        self.level = level  # the measured level that is no measurement (too many failed requests)


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


def percentiles(values: t.Sequence[float], quantiles: t.Sequence[int] = QUANTILES) -> dict[str, float | None]:
    """Linear-interpolation percentiles (numpy's default) keyed ``p50``...; None for an empty sample."""
    ordered = sorted(values)
    result: dict[str, float | None] = {}
    for quantile in quantiles:
        if not ordered:
            result[f"p{quantile}"] = None
            continue
        position = (len(ordered) - 1) * quantile / 100.0
        low = math.floor(position)
        high = min(low + 1, len(ordered) - 1)
        result[f"p{quantile}"] = ordered[low] + (ordered[high] - ordered[low]) * (position - low)
    return result


class SSEDecoder:
    """Incremental Server-Sent-Events splitter: bytes in, ``data:`` payloads out (other fields ignored)."""

    __slots__ = ("_pending",)

    def __init__(self) -> None:
        self._pending = b""

    def feed(self, chunk: bytes) -> list[bytes]:
        lines = (self._pending + chunk).split(b"\n")
        self._pending = lines.pop()
        return [line[5:].strip() for line in lines if line.startswith(b"data:") and line[5:].strip()]


class RequestRecord:
    """Timing and token facts of one streamed request (perf_counter seconds)."""

    __slots__ = ("start", "end", "chunk_times", "tokens", "prompt_tokens", "error", "done", "expected_tokens", "lag")

    def __init__(self, start: float) -> None:
        self.expected_tokens: int | None = None  # open loop: this request's output length (else the sweep's)
        self.lag: float | None = None  # open loop: seconds between the scheduled and the actual send
        self.start = start
        self.end = start
        self.chunk_times: list[float] = []
        self.tokens: int | None = None
        self.prompt_tokens: int | None = None
        self.error: str | None = None
        self.done = False

    @property
    def ok(self) -> bool:
        return self.error is None and self.output_tokens > 0

    @property
    def output_tokens(self) -> int:
        """Server-reported completion tokens; the token-chunk count when the server sent no usage."""
        return self.tokens if self.tokens is not None else len(self.chunk_times)


def _apply_error(record: RequestRecord, event: dict) -> bool:
    error = event.get("error")
    if error is None:
        return False
    record.error = "server error: " + (error.get("message", str(error)) if isinstance(error, dict) else str(error))
    return True


def _apply_usage(record: RequestRecord, event: dict) -> None:
    usage = event.get("usage")
    if usage:
        record.tokens = usage.get("completion_tokens")
        record.prompt_tokens = usage.get("prompt_tokens")


def apply_completions_event(record: RequestRecord, event: dict, now: float) -> None:
    """/v1/completions chunk: text-bearing chunks are token chunks; the final chunk carries usage."""
    if _apply_error(record, event):
        return
    choices = event.get("choices")
    if choices and choices[0].get("text"):
        record.chunk_times.append(now)
    _apply_usage(record, event)


def apply_chat_event(record: RequestRecord, event: dict, now: float) -> None:
    """/v1/chat/completions chunk: the role-only first delta is not a token; reasoning text is."""
    if _apply_error(record, event):
        return
    choices = event.get("choices")
    if choices:
        delta = choices[0].get("delta") or {}
        if delta.get("content") or delta.get("reasoning_content"):
            record.chunk_times.append(now)
    _apply_usage(record, event)


def apply_generate_event(record: RequestRecord, event: dict, now: float) -> None:
    """/generate chunk: meta_info.completion_tokens is cumulative, so a chunk is a token chunk when it grows."""
    if _apply_error(record, event):
        return
    meta = event.get("meta_info") or {}
    completion = meta.get("completion_tokens")
    if completion is not None and completion > (record.tokens or 0):
        record.chunk_times.append(now)
        record.tokens = completion
    record.prompt_tokens = meta.get("prompt_tokens", record.prompt_tokens)
    finish = meta.get("finish_reason")
    if isinstance(finish, dict) and finish.get("type") == "abort":
        record.error = f"aborted by the server: {finish.get('message', 'no message')}"


EVENT_HANDLERS: dict[str, t.Callable[[RequestRecord, dict, float], None]] = {
    "completions": apply_completions_event, "chat": apply_chat_event, "generate": apply_generate_event,
}


def token_id_prompt(input_len: int, seed: int | str) -> list[int]:
    return random.Random(seed).choices(PROMPT_TOKEN_IDS, k=input_len)


def text_prompt(words: int, seed: int | str) -> str:
    return " ".join(random.Random(seed).choices(PROMPT_WORDS, k=words))


def request_body(endpoint: str, model: str | None, prompt: list[int] | str, output_len: int, *,
                 stream: bool = True) -> dict:
    """JSON body for one fixed-length request (temperature 0, ignore_eos, usage in the stream)."""
    if endpoint == "generate":
        return {"input_ids": prompt, "stream": stream,
                "sampling_params": {"max_new_tokens": output_len, "ignore_eos": True, "temperature": 0.0}}
    body: dict[str, t.Any] = {"model": model, "max_tokens": output_len, "temperature": 0.0, "ignore_eos": True,
                              "stream": stream}
    if stream:
        body["stream_options"] = {"include_usage": True}
    if endpoint == "chat":
        body["messages"] = [{"role": "user", "content": prompt}]
    else:
        body["prompt"] = prompt
    return body


def steady_window(intervals: t.Sequence[tuple[float, float]], threshold: int) -> tuple[float, float] | None:
    """Longest contiguous time span with at least ``threshold`` requests in flight (None if never reached)."""
    # At equal timestamps a finish is processed before a start, so touching requests never count as overlapping.
    events = sorted([(start, 1) for start, _end in intervals] + [(end, -1) for _start, end in intervals])
    best: tuple[float, float] | None = None
    in_flight = 0
    opened: float | None = None
    for moment, delta in events:
        in_flight += delta
        if in_flight >= threshold and opened is None:
            opened = moment
        elif in_flight < threshold and opened is not None:
            if best is None or moment - opened > best[1] - best[0]:
                best = (opened, moment)
            opened = None
    return best


def tokens_in_window(records: t.Sequence[RequestRecord], window: tuple[float, float]) -> float:
    """Output tokens that arrived inside ``window``; a request's tokens are spread evenly over its token chunks."""
    start, end = window
    total = 0.0
    for record in records:
        if not record.chunk_times:
            continue
        inside = bisect.bisect_right(record.chunk_times, end) - bisect.bisect_left(record.chunk_times, start)
        total += record.output_tokens * inside / len(record.chunk_times)
    return total


def _latency_samples(records: t.Sequence[RequestRecord]) -> dict[str, list[float]]:
    samples: dict[str, list[float]] = {"ttft_ms": [], "itl_ms": [], "tpot_ms": [], "e2e_ms": []}
    for record in records:
        e2e = record.end - record.start
        samples["e2e_ms"].append(e2e * 1000.0)
        if not record.chunk_times:
            continue
        ttft = record.chunk_times[0] - record.start
        samples["ttft_ms"].append(ttft * 1000.0)
        times = record.chunk_times
        # Chunks taken from the same socket read share a timestamp: they reached the client as one delivery.
        samples["itl_ms"].extend((later - earlier) * 1000.0 for earlier, later in zip(times, times[1:])
                                 if later > earlier)
        if record.output_tokens > 1:
            samples["tpot_ms"].append((e2e - ttft) * 1000.0 / (record.output_tokens - 1))
    return samples


def aggregate_run(records: t.Sequence[RequestRecord], *, wall_s: float, output_len: int, concurrency: int,
                  steady_state: bool) -> dict:
    """One timed run: throughput over the wall time, per-request rates, latency percentiles, token checks.

    ITL is the gap between successive deliveries of tokens (token-bearing chunks read together count once);
    TPOT = (E2E - TTFT)/(tokens - 1).
    """
    ok = [record for record in records if record.ok]
    failed = [record for record in records if not record.ok]
    tokens = sum(record.output_tokens for record in ok)
    prompt_tokens = [record.prompt_tokens for record in ok if record.prompt_tokens is not None]
    run: dict[str, t.Any] = {
        "requests": len(records), "ok": len(ok), "failed": len(failed),
        "error_samples": [record.error or "no output tokens" for record in failed[:MAX_ERROR_SAMPLES]],
        "tokens": tokens, "wall_s": wall_s,
        "agg_tok_s": tokens / wall_s if wall_s > 0 else 0.0,
        "per_req_tok_s": statistics.fmean(r.output_tokens / (r.end - r.start) for r in ok) if ok else 0.0,
        "input_tokens": statistics.median(prompt_tokens) if prompt_tokens else None,
        "achieved_concurrency": sum(r.end - r.start for r in records) / wall_s if wall_s > 0 else 0.0,
        "token_mismatch": sum(1 for record in ok if record.output_tokens != (
            output_len if record.expected_tokens is None else record.expected_tokens)),
        "usage_missing": sum(1 for record in ok if record.tokens is None),
        "steady_agg_tok_s": None, "steady_window_s": None,
    }
    run.update({name: percentiles(values) for name, values in _latency_samples(ok).items()})
    if steady_state:
        window = steady_window([(r.start, r.end) for r in records], math.ceil(STEADY_STATE_RATIO * concurrency))
        if window and window[1] > window[0]:
            run["steady_window_s"] = window[1] - window[0]
            run["steady_agg_tok_s"] = tokens_in_window(ok, window) / run["steady_window_s"]
    return run


def auth_headers(api_key: str | None) -> dict[str, str]:
    return {"Authorization": f"Bearer {api_key}"} if api_key else {}


def _auth_message(base_url: str, api_key: str | None) -> str:
    problem = "wrong" if api_key else "missing"
    return (f"{base_url} answered HTTP 401 Unauthorized: the API key is {problem} "
            "(set api_key to the value of the server's --api-key)")


def fetch_model_id(base_url: str, api_key: str | None, timeout_s: float) -> str:
    """First model id from GET /v1/models (what bench_serving does when --model is not given)."""
    url = base_url.rstrip("/") + "/v1/models"
    request = urllib.request.Request(url, headers=auth_headers(api_key))
    # An empty ProxyHandler: benchmark traffic must go straight to the server, never through *_proxy settings.
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    try:
        with opener.open(request, timeout=timeout_s) as response:
            document = json.load(response)
    except urllib.error.HTTPError as exc:
        if exc.code == 401:
            raise BenchAborted(_auth_message(base_url, api_key), "auth") from exc
        raise BenchAborted(f"GET {url} failed with HTTP {exc.code}") from exc
    except (urllib.error.URLError, OSError) as exc:
        raise BenchAborted(f"cannot connect to {base_url} (GET /v1/models): {getattr(exc, 'reason', exc)}",
                           "unreachable") from exc
    except ValueError as exc:
        raise BenchAborted(f"GET {url} did not return JSON: {exc}") from exc
    models = document.get("data") if isinstance(document, dict) else None
    if not models or not isinstance(models[0], dict) or "id" not in models[0]:
        raise BenchAborted(f"GET {url} lists no model; set the model option")
    return str(models[0]["id"])


def resolve_model(config: BenchConfig) -> str:
    """The configured model, else the server's first model (also the sweep's early auth/reachability probe)."""
    return config.model or fetch_model_id(config.base_url, config.api_key,
                                          min(config.request_timeout_s, METADATA_TIMEOUT_S))


def client_versions() -> dict[str, str | None]:
    return {"python": sys.version.split()[0], "aiohttp": getattr(aiohttp, "__version__", None)}


def _utc_now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")


def new_sweep(config: BenchConfig, engine: str) -> dict:
    """Empty sweep document (docs/bench-schema.md); levels are appended as they complete."""
    return {
        "schema_version": SCHEMA_VERSION, "started_at": _utc_now(), "finished_at": None, "engine": engine,
        "base_url": config.base_url, "endpoint": config.endpoint, "model": config.model,
        "input_len": config.input_len, "output_len": config.output_len, "repeats": config.repeats,
        "warmup_output_len": config.warmup_tokens(), "max_failed_share": config.max_failed_share, "levels": [],
        "not_measured": [], "failed_level": None,
        "error": None,
        "error_kind": None,
        "client": client_versions(),
        **({"workload": workload_document(config)} if config.arrival is not None else {}),
    }


def workload_document(config: BenchConfig) -> dict:
    """The open-loop workload a sweep ran (``sweep.workload``, docs/bench-schema.md)."""
    return {"arrival": config.arrival.as_dict(), "lengths": config.lengths.as_dict(),
            "shared_prefix": config.shared_prefix, "multi_turn": config.multi_turn, "slo": config.slo,
            "max_client_lag_ms": config.max_client_lag_ms, "seed": config.seed}


def make_level(concurrency: int, requests: int, warmup_requests: int, runs: list[dict],
               stopped: dict | None = None) -> dict:
    level = {"concurrency": concurrency, "requests": requests, "warmup_requests": warmup_requests, "runs": runs,
             "summary": summarize_level(runs)}
    if stopped is not None:
        level["sequential"] = stopped
    return level


def stop_after_run(stop_rule: StopRule | None, concurrency: int, runs: list[dict],
                   progress: t.Callable[[dict], None]) -> dict | None:
    """Ask the stopping rule after a run; announce a stop in the progress file (operators see why it stopped)."""
    stopped = stop_rule(concurrency, runs) if stop_rule else None
    if stopped is not None:
        progress({"event": "level_stopped", "concurrency": concurrency, "repeats": len(runs),
                  "decision": stopped.get("decision"), "reason": stopped.get("reason")})
    return stopped


def ends_sweep(sweep: dict, level: dict, remaining: t.Sequence[int]) -> bool:
    """Whether the level's stop ends the sweep; then the remaining levels are listed as not measured, with why."""
    stopped = level.get("sequential") or {}
    if not stopped.get("ends_sweep"):
        return False
    runs = len(level["runs"])
    reason = (f"C={level['concurrency']} {stopped.get('decision')} after {runs} repeat{'s' if runs != 1 else ''}; "
              "the sweep stopped")
    sweep["not_measured"] = [{"concurrency": concurrency, "reason": reason} for concurrency in remaining]
    return True


def sweep_order(sweep: dict, concurrency_levels: t.Sequence[int]) -> t.Iterator[tuple[int, list[dict]]]:
    """The levels to measure, each with the runs it has so far; the caller appends each level to ``sweep["levels"]``
    before asking for the next. A stop that ends the sweep ends it (``ends_sweep``); a stop that reopens earlier
    levels (``reopens``: they stopped not improved, and a regression there now decides the adoption) takes them out
    of the sweep to be measured on next, so ``levels`` lists every level in the order its verdict was settled."""
    pending: list[tuple[int, list[dict]]] = [(concurrency, []) for concurrency in concurrency_levels]
    while pending:
        concurrency, runs = pending.pop(0)
        yield concurrency, runs
        level = sweep["levels"][-1]
        if ends_sweep(sweep, level, [waiting for waiting, _runs in pending]):
            return
        reopens = (level.get("sequential") or {}).get("reopens") or ()
        reopened = [earlier for earlier in sweep["levels"] if earlier["concurrency"] in reopens]
        for earlier in reversed(reopened):
            sweep["levels"].remove(earlier)
            pending.insert(0, (earlier["concurrency"], earlier["runs"]))


def failed_share_error(level: dict, max_failed_share: float) -> str | None:
    """Why a completed level is no measurement: more than ``max_failed_share`` of its timed requests failed.

    Throughput over the requests that happened to succeed says nothing about the configuration, so such a level
    is an error naming the share and sample errors, never a number."""
    runs = level["runs"]
    requested = sum(run["requests"] for run in runs)
    failed = sum(run["failed"] for run in runs)
    if not requested or failed / requested <= max_failed_share:
        return None
    samples: list[str] = []
    for run in runs:
        samples += [sample for sample in run["error_samples"] if sample not in samples]
    return (f"{failed} of {requested} timed requests failed ({failed / requested:.1%}, more than "
            f"max_failed_share={max_failed_share:g}); sample errors: {samples[:MAX_ERROR_SAMPLES]}")


def check_level(level: dict, config: BenchConfig) -> dict:
    """The level, or BenchAborted(kind requests_failed) when too many of its requests failed."""
    error = failed_share_error(level, config.max_failed_share)
    if error:
        raise BenchAborted(error, "requests_failed", level)
    return level


def finish_sweep(sweep: dict, error: str | None, on_progress: t.Callable[[dict], None] | None,
                 kind: str | None = None) -> dict:
    sweep["error"] = error
    sweep["error_kind"] = (kind or "server") if error else None
    sweep["finished_at"] = _utc_now()
    if on_progress:
        on_progress({"event": "error", "message": error} if error else
                    {"event": "sweep_done", "levels": len(sweep["levels"])})
    return sweep


def format_progress(event: dict) -> str:
    """One human-readable progress line (for a file that operators tail)."""
    fields = " ".join(f"{key}={value:.1f}" if isinstance(value, float) else f"{key}={value}"
                      for key, value in event.items() if key != "event")
    return f"{_utc_now()} {event.get('event', 'progress')} {fields}".rstrip()


class _LevelRunner:
    """Drives one ClientSession through the sweep; every prompt is unique across warm-ups, runs and levels, and
    across sweeps: a server's radix cache keeps the prompts of earlier sweeps (a rate search's earlier probes, an
    earlier stage's sweep on the same start), and a repeated prompt would be served from it with a prefill of one
    token - a TTFT and a capacity no new request gets. The prompts draw from the seed and a salt of the sweep's own
    (the arrivals and lengths stay the seed's: the same for every configuration)."""

    def __init__(self, session: t.Any, config: BenchConfig, model: str | None,
                 stop_rule: StopRule | None = None) -> None:
        self.session = session
        self.config = config
        self.model = model
        self.words: int | None = None  # chat only: prompt length in words, set by calibrate_words()
        self.url = config.base_url + ENDPOINT_PATHS[config.endpoint]
        self.handler = EVENT_HANDLERS[config.endpoint]
        self.prompt_counter = 0
        self.prompt_salt = secrets.randbits(64)
        self.stop_rule = stop_rule

    def bodies(self, count: int, output_len: int) -> list[bytes]:
        config = self.config
        bodies = []
        for _request in range(count):
            seed = self.next_seed()
            prompt = text_prompt(self.words, seed) if self.words else token_id_prompt(config.input_len, seed)
            bodies.append(json.dumps(request_body(config.endpoint, self.model, prompt, output_len)).encode())
        return bodies

    def next_seed(self) -> str:
        self.prompt_counter += 1
        return f"{self.config.seed}:{self.prompt_salt}:{self.prompt_counter}"

    def piece(self, tokens: int) -> list[int] | str:
        """A fresh prompt piece of about ``tokens`` tokens: token ids, or calibrated words for chat."""
        if self.words:
            return text_prompt(max(1, round(tokens * self.words / self.config.input_len)), self.next_seed())
        return token_id_prompt(tokens, self.next_seed())

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

    async def send(self, body: bytes) -> RequestRecord:
        record = RequestRecord(time.perf_counter())
        try:
            async with self.session.post(self.url, data=body) as response:
                if response.status == 401:
                    raise BenchAborted(_auth_message(self.config.base_url, self.config.api_key), "auth")
                if response.status != 200:
                    record.error = f"HTTP {response.status}: {(await response.text())[:200]}"
                else:
                    await self._read_stream(response, record)
        except aiohttp.ClientConnectorError as exc:
            raise BenchAborted(f"cannot connect to {self.config.base_url}: {exc}", "unreachable") from exc
        except TimeoutError:
            record.error = f"no complete response within request_timeout_s={self.config.request_timeout_s:g}"
        except (aiohttp.ClientError, ValueError) as exc:
            record.error = f"{type(exc).__name__}: {exc}"
        record.end = time.perf_counter()
        return record

    async def _read_stream(self, response: t.Any, record: RequestRecord) -> None:
        decoder = SSEDecoder()
        handler = self.handler
        loads = json.loads
        async for chunk in response.content.iter_any():
            now = time.perf_counter()
            for payload in decoder.feed(chunk):
                if payload == b"[DONE]":
                    record.done = True
                else:
                    handler(record, loads(payload), now)
        if not record.done and record.error is None:
            record.error = "stream ended without data: [DONE]"

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

    async def calibrate_words(self) -> int:
        """Chat prompts are text: size the word count from one request's server-side prompt token count."""
        config = self.config
        body = request_body("chat", self.model, text_prompt(config.input_len, config.seed), 1, stream=False)
        try:
            async with self.session.post(self.url, json=body) as response:
                if response.status == 401:
                    raise BenchAborted(_auth_message(config.base_url, config.api_key), "auth")
                document = await response.json(content_type=None)
        except aiohttp.ClientConnectorError as exc:
            raise BenchAborted(f"cannot connect to {config.base_url}: {exc}", "unreachable") from exc
        except (aiohttp.ClientError, TimeoutError, ValueError) as exc:
            raise BenchAborted(f"chat prompt calibration request failed: {exc}") from exc
        measured = (document.get("usage") or {}).get("prompt_tokens") if isinstance(document, dict) else None
        if not measured:
            raise BenchAborted("chat prompt calibration: the server reported no usage.prompt_tokens "
                               f"({document!r:.200})")
        return max(1, round(config.input_len * config.input_len / measured))


async def _timed_runs(runner: _LevelRunner, concurrency: int, progress: t.Callable[[dict], None],
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


async def _run_level(runner: _LevelRunner, concurrency: int, progress: t.Callable[[dict], None],
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


def open_loop_run(records: t.Sequence[RequestRecord], wall_s: float, cpu_s: float, rate: float,
                  config: BenchConfig) -> dict:
    """One timed open-loop run: the closed-loop run fields plus arrival rate, client lag and SLO goodput."""
    run = aggregate_run(records, wall_s=wall_s, output_len=config.output_len, concurrency=1, steady_state=False)
    run["client_cpu_pct"] = cpu_s / wall_s * 100.0 if wall_s > 0 else None
    run["request_rate"] = rate
    run["achieved_rate_rps"] = len(records) / wall_s if wall_s > 0 else 0.0
    run.update(lag_check([record.lag * 1000.0 for record in records if record.lag is not None],
                         config.max_client_lag_ms, run["client_cpu_pct"]))
    if config.slo:
        ok = [record for record in records if record.ok]
        latencies = [request_latencies(r.start, r.end, r.chunk_times, r.output_tokens) if r.ok else None
                     for r in records]
        run.update(slo_report(latencies, wall_s, config.slo, _latency_samples(ok)["itl_ms"]))
    return run


async def _run_rate_level(runner: _LevelRunner, rate: float, progress: t.Callable[[dict], None]) -> dict:
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


async def _sweep_rates(runner: _LevelRunner, sweep: dict,
                       progress: t.Callable[[dict], None]) -> tuple[str | None, str | None]:
    """Append completed open-loop levels to ``sweep``; return the error that stopped the sweep and its kind."""
    for rate in runner.config.arrival.request_rates:
        stopped = await _append_level(sweep, runner.config, f"request rate {rate:g}/s",
                                      _run_rate_level(runner, rate, progress))
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
    connector = aiohttp.TCPConnector(limit=0)  # concurrency is bounded by the worker count, not the pool
    timeout = aiohttp.ClientTimeout(total=config.request_timeout_s)
    headers = {"Content-Type": "application/json", **auth_headers(config.api_key)}
    async with aiohttp.ClientSession(connector=connector, timeout=timeout, headers=headers,
                                     read_bufsize=READ_BUFSIZE) as session:
        runner = _LevelRunner(session, config, sweep["model"], stop_rule)
        try:
            if config.endpoint == "chat":
                runner.words = await runner.calibrate_words()
        except BenchAborted as exc:
            return str(exc), exc.kind
        if config.arrival is not None:
            return await _sweep_rates(runner, sweep, progress)
        for concurrency, earlier in sweep_order(sweep, config.concurrency_levels):
            stopped = await _append_level(sweep, config, f"concurrency {concurrency}",
                                          _run_level(runner, concurrency, progress, earlier))
            if stopped:
                return stopped
    return None, None


def run_sweep(config: BenchConfig, on_progress: t.Callable[[dict], None] | None = None,
              stop_rule: StopRule | None = None) -> dict:
    """Run the whole sweep and return the sweep document; ``on_progress`` gets one dict per level/run event.

    With ``stop_rule`` a level's repeats end when the rule says so (``config.repeats`` is then the cap)."""
    if aiohttp is None:
        raise RuntimeError(f"the native bench engine needs aiohttp in the Python running it ({AIOHTTP_IMPORT_ERROR}); "
                           "run the task with ansible_python_interpreter set to the SGLang venv's python")
    sweep = new_sweep(config, "native")
    progress = on_progress or (lambda event: None)
    try:
        sweep["model"] = resolve_model(config)
    except BenchAborted as exc:
        return finish_sweep(sweep, str(exc), on_progress, exc.kind)
    error, kind = asyncio.run(_sweep_levels(config, sweep, progress, stop_rule))
    return finish_sweep(sweep, error, on_progress, kind)
