# Copyright (c) llmops.sglang contributors
# Apache License 2.0 (see LICENSE)
"""A streamed answer decoded into its request's record: Server-Sent-Events split into ``data:`` payloads, each event
of the endpoint (/v1/completions, /v1/chat/completions, /generate) applied to the record: token chunks and their
arrival times, the server-reported token counts, errors and aborts.

Private to the llmops.sglang collection; do not use it from other collections. Pure and stdlib-only.
"""
from __future__ import annotations

import typing as t


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
