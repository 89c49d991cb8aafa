# Copyright (c) llmops.sglang contributors
# Apache License 2.0 (see LICENSE)
"""Batch sizes (token counts M) worth tuning the fused-MoE kernels for, and the ``batch_sizes`` option.

Private to the llmops.sglang collection; not a public API. Pure functions, stdlib only, so it imports on any
managed host with plain Python 3.11. The defaults are SGLang's ``get_default_batch_sizes`` in
``benchmark/kernels/fused_moe_triton/common_utils.py`` (commit 00f0b462).
"""
from __future__ import annotations

from typing import Any


DEFAULT_BATCH_SIZES: tuple[int, ...] = (1, 2, 4, 8, 16, 24, 32, 48, 64, 96, 128, 256, 512, 1024, 1536, 2048, 3072, 4096)


def auto_batch_sizes(
    max_running_requests: int, speculative_num_draft_tokens: int | None, chunked_prefill_size: int | None
) -> dict[str, Any]:
    """Token counts (M) this deployment actually feeds the MoE kernels, with the reasoning."""
    if max_running_requests < 1:
        raise ValueError(f"max_running_requests={max_running_requests} must be >= 1")
    if speculative_num_draft_tokens is not None and speculative_num_draft_tokens < 1:
        raise ValueError(f"speculative_num_draft_tokens={speculative_num_draft_tokens} must be >= 1")
    tokens_per_request = speculative_num_draft_tokens or 1
    max_decode = max_running_requests * tokens_per_request
    decode = [size for size in DEFAULT_BATCH_SIZES if size <= max_decode] + [max_decode]
    if speculative_num_draft_tokens:
        reasoning = (
            f"decode: up to {max_running_requests} running requests x {speculative_num_draft_tokens} draft "
            f"tokens verified per step = {max_decode} tokens"
        )
    else:
        reasoning = f"decode: up to {max_running_requests} running requests x 1 token per step = {max_decode} tokens"
    prefill: list[int] = []
    if chunked_prefill_size and chunked_prefill_size > 0:
        prefill = [size for size in DEFAULT_BATCH_SIZES if max_decode < size < chunked_prefill_size]
        prefill.append(chunked_prefill_size)
        reasoning += f"; prefill: chunks of up to chunked_prefill_size={chunked_prefill_size} tokens"
    else:
        reasoning += "; prefill: chunked prefill disabled or unknown, no prefill sizes added"
    return {"batch_sizes": sorted(set(decode + prefill)), "reasoning": reasoning}


def resolve_batch_sizes(
    batch_sizes: Any,
    max_running_requests: int | None = None,
    speculative_num_draft_tokens: int | None = None,
    chunked_prefill_size: int | None = None,
) -> dict[str, Any]:
    """``batch_sizes`` option -> ``{batch_sizes, reason}``: None = SGLang's defaults, "auto", or a list."""
    if batch_sizes is None:
        return {"batch_sizes": list(DEFAULT_BATCH_SIZES), "reason": "SGLang's default batch sizes (get_default_batch_sizes)"}
    if batch_sizes == "auto":
        if max_running_requests is None:
            raise ValueError(
                "max_running_requests: required with batch_sizes=auto; pass the server's effective value "
                "(server_facts: facts.max_running_requests)"
            )
        auto = auto_batch_sizes(max_running_requests, speculative_num_draft_tokens, chunked_prefill_size)
        return {"batch_sizes": auto["batch_sizes"], "reason": auto["reasoning"]}
    try:
        sizes = sorted({int(size) for size in batch_sizes}) if not isinstance(batch_sizes, str) else []
    except (TypeError, ValueError):
        sizes = []
    if not sizes or sizes[0] < 1:
        raise ValueError(f"batch_sizes: {batch_sizes!r} must be a non-empty list of positive integers or 'auto'")
    return {"batch_sizes": sizes, "reason": "given explicitly"}
