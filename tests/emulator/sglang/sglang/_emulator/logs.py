# Copyright (c) llmops.sglang contributors
# Apache License 2.0 (see LICENSE)
"""SGLang's and uvicorn's stderr log formats for the single-process emulator.

Real SGLang runs one scheduler process per TP rank, each tagging its lines (` TP0`, ` DP0 TP0 EP0`).
The emulator runs every rank in one process, so the current rank tag lives in a context variable
that the formatter reads; asyncio tasks inherit it, so the scheduler task logs as TP0.
"""
from __future__ import annotations

import contextlib
import contextvars
import logging
import os
import sys
from collections.abc import Iterator

from aiohttp import web
from aiohttp.abc import AbstractAccessLogger

DATEFMT = "%Y-%m-%d %H:%M:%S"
_rank_prefix: contextvars.ContextVar[str] = contextvars.ContextVar("sglang_rank_prefix", default="")
uvicorn_logger = logging.getLogger("uvicorn.error")
access_logger = logging.getLogger("uvicorn.access")


class _RankPrefixFilter(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        record.rank_prefix = _rank_prefix.get()
        return True


class _UvicornFormatter(logging.Formatter):
    """uvicorn's `[%(asctime)s] %(levelprefix)s %(message)s` (levelprefix = "INFO:" padded to 9 chars)."""

    def format(self, record: logging.LogRecord) -> str:
        record.levelprefix = (record.levelname + ":").ljust(9)
        return super().format(record)


def log_ms_enabled() -> bool:
    return os.environ.get("SGLANG_LOG_MS", "").lower() in ("1", "true", "yes", "on")


def configure_logging(log_level: str, log_level_http: str | None = None) -> None:
    """Install SGLang's line format on stderr (`[time{.ms}{rank}] message`, no level name)."""
    maybe_ms = ".%(msecs)03d" if log_ms_enabled() else ""
    sglang_handler = logging.StreamHandler(sys.stderr)
    sglang_handler.addFilter(_RankPrefixFilter())
    sglang_handler.setFormatter(logging.Formatter(f"[%(asctime)s{maybe_ms}%(rank_prefix)s] %(message)s", DATEFMT))
    _install(logging.getLogger("sglang"), sglang_handler, log_level)
    uvicorn_handler = logging.StreamHandler(sys.stderr)
    uvicorn_handler.setFormatter(_UvicornFormatter("[%(asctime)s] %(levelprefix)s %(message)s", DATEFMT))
    for logger in (uvicorn_logger, access_logger):
        _install(logger, uvicorn_handler, log_level_http or log_level)


def _install(logger: logging.Logger, handler: logging.Handler, level: str) -> None:
    logger.handlers[:] = [handler]
    logger.setLevel(level.upper())
    logger.propagate = False


def rank_prefix(tp_rank: int, tp_size: int, ep_size: int, pp_size: int = 1, dp_rank: int | None = None) -> str:
    """SGLang's scheduler prefix: DP, PP, TP, EP tags, each only when that parallelism is in use."""
    prefix = f" DP{dp_rank}" if dp_rank is not None else ""
    prefix += " PP0" if pp_size > 1 else ""
    prefix += f" TP{tp_rank}" if tp_size > 1 else ""
    if ep_size > 1:
        prefix += f" EP{tp_rank % ep_size}"
    return prefix


@contextlib.contextmanager
def as_rank(prefix: str) -> Iterator[None]:
    """Log as the scheduler process of one rank while the block runs."""
    token = _rank_prefix.set(prefix)
    try:
        yield
    finally:
        _rank_prefix.reset(token)


def set_rank(prefix: str) -> None:
    """Make the current asyncio task log as this rank for the rest of its life."""
    _rank_prefix.set(prefix)


def progress_line(description: str, done: int, total: int, elapsed_s: float) -> str:
    """One tqdm-style progress bar frame: `desc: 100%|██████████| 10/10 [00:05<00:00,  1.93it/s]`."""
    fraction = done / total if total else 1.0
    filled = int(fraction * 10)
    bar = "█" * filled + " " * (10 - filled)
    rate = done / elapsed_s if elapsed_s > 0 else 0.0
    remaining = (total - done) / rate if rate > 0 else 0.0
    rate_text = f"{rate:5.2f}it/s" if done else "?it/s"
    return (
        f"{description}: {fraction * 100:3.0f}%|{bar}| {done}/{total} "
        f"[{_clock(elapsed_s)}<{_clock(remaining) if done else '?'}, {rate_text}]"
    )


def _clock(seconds: float) -> str:
    minutes, secs = divmod(int(seconds), 60)
    return f"{minutes:02d}:{secs:02d}"


def write_progress(text: str, final: bool) -> None:
    """tqdm redraws with carriage returns on stderr and ends the bar with a newline."""
    sys.stderr.write("\r" + text + ("\n" if final else ""))
    sys.stderr.flush()


class UvicornAccessLogger(AbstractAccessLogger):
    """aiohttp access log in uvicorn's format: `127.0.0.1:54321 - "POST /generate HTTP/1.1" 200 OK`."""

    def log(self, request: web.BaseRequest, response: web.StreamResponse, time_taken: float) -> None:
        peer = request.transport.get_extra_info("peername") if request.transport else None
        client = f"{peer[0]}:{peer[1]}" if peer else "-"
        version = f"{request.version.major}.{request.version.minor}"
        access_logger.info(
            f'{client} - "{request.method} {request.path_qs} HTTP/{version}" {response.status} {response.reason}'
        )

    @property
    def enabled(self) -> bool:
        return access_logger.isEnabledFor(logging.INFO)
