# Copyright (c) llmops.sglang contributors
# Apache License 2.0 (see LICENSE)
"""The fused-MoE tuner's search space: SGLang's compute-bound configs, the shared-memory prefilter, the pruned
space, and the ``search_space`` option's plan.

Private to the llmops.sglang collection; not a public API. Stdlib only, so it imports on any managed host with
plain Python 3.11; only :func:`read_search_space_file` touches a file. The space mirrors SGLang's
``get_configs_compute_bound`` in ``benchmark/kernels/fused_moe_triton/common_utils.py`` (commit 00f0b462).
"""
from __future__ import annotations

import itertools
import json
from typing import Any


def compute_bound_search_space(block_shape: list[int] | None = None) -> list[dict[str, int]]:
    """``get_configs_compute_bound()`` for CUDA (1920 configs), in SGLang's order.

    With a block-quantised checkpoint the tuner keeps ``block_k % BLOCK_SIZE_K == 0`` (1280 for
    [128, 128]); a group-wise ``[0, 32]`` shape leaves nothing, exactly as in the tuner.
    """
    configs = [
        {
            "BLOCK_SIZE_M": block_m,
            "BLOCK_SIZE_N": block_n,
            "BLOCK_SIZE_K": block_k,
            "GROUP_SIZE_M": group_m,
            "num_warps": warps,
            "num_stages": stages,
        }
        for stages, block_m, block_k, block_n, warps, group_m in itertools.product(
            (2, 3, 4, 5), (16, 32, 64, 128, 256), (64, 128, 256), (32, 64, 128, 256), (4, 8), (1, 16, 32, 64)
        )
    ]
    if block_shape:
        block_k = block_shape[1]
        configs = [config for config in configs if block_k % config["BLOCK_SIZE_K"] == 0]
    return configs


def down_candidate_count(block_shape: list[int] | None = None) -> int:
    """Configs ``tune_down_moe.py`` screens per batch size: the search space with BLOCK_SIZE_M pinned to the up
    config's, duplicates dropped (384 for the full space)."""
    keys = ("BLOCK_SIZE_N", "BLOCK_SIZE_K", "GROUP_SIZE_M", "num_warps", "num_stages")
    return len({tuple(config[key] for key in keys) for config in compute_bound_search_space(block_shape)})


def smem_bytes(config: dict, a_bytes: float, b_bytes: float | None = None, formula: str = "triton") -> float:
    """Shared memory of the pipelined A/B tiles.

    ``triton``: ``(num_stages - 1) * tile`` matches Triton's OutOfResources figure byte-for-byte
    (sglang#28038); one stage still stages one tile, hence the floor of 1. ``sglang``:
    ``num_stages * tile`` as in ``search_space.py`` (conservative).
    """
    b_bytes = a_bytes if b_bytes is None else b_bytes
    tile = config["BLOCK_SIZE_K"] * (config["BLOCK_SIZE_M"] * a_bytes + config["BLOCK_SIZE_N"] * b_bytes)
    if formula == "triton":
        return max(config["num_stages"] - 1, 1) * tile
    if formula == "sglang":
        return config["num_stages"] * tile
    raise ValueError(f"formula must be 'triton' or 'sglang', not {formula!r}")


def prefilter_search_space(
    configs: list[dict], smem_limit: int, a_bytes: float, b_bytes: float | None = None, formula: str = "triton"
) -> tuple[list[dict], int]:
    """Drop configs whose smem estimate (:func:`smem_bytes` ``formula``) exceeds the per-block limit; (kept, dropped
    count).

    A prefilter only: epilogues add smem and other compile failures still happen.
    """
    kept = [config for config in configs if smem_bytes(config, a_bytes, b_bytes, formula) <= smem_limit]
    return kept, len(configs) - len(kept)


# GROUP_SIZE_M values the pruned space keeps: with them the best config of the full space was found at all 12 measured
# points or lost at most 0.2% (H200, docs/run-directory.md "MoE search spaces").
PRUNED_GROUP_SIZES_M = (1, 16)


def pruned_search_space(
    configs: list[dict], smem_limit: int, a_bytes: float, b_bytes: float | None = None
) -> tuple[list[dict], int]:
    """SGLang's conservative smem prefilter (``num_stages x tile``, search_space.py) plus GROUP_SIZE_M in
    :data:`PRUNED_GROUP_SIZES_M`; (kept, dropped count). 624 of 1920 compiles for 16-bit weights on H200."""
    kept = [config for config in prefilter_search_space(configs, smem_limit, a_bytes, b_bytes, "sglang")[0]
            if config["GROUP_SIZE_M"] in PRUNED_GROUP_SIZES_M]
    return kept, len(configs) - len(kept)


# Operand bytes (activations, weights) staged in shared memory per tuner --dtype; "auto" runs the checkpoint's width.
_OPERAND_BYTES = {"fp8_w8a8": (1, 1), "int8_w8a8": (1, 1), "int8_w8a16": (2, 1), "int4_w4a16": (2, 0.5)}


def operand_bytes(tuner_dtype: str, checkpoint_dtype: str) -> tuple[float, float]:
    """(activation, weight) bytes per element the kernel stages through shared memory."""
    if tuner_dtype in _OPERAND_BYTES:
        return _OPERAND_BYTES[tuner_dtype]
    width = 4 if checkpoint_dtype == "float32" else 2
    return width, width


# search_space modes that prune the tuner's space before any compile (docs/run-directory.md, "MoE search spaces").
PRUNINGS = {"prefiltered": prefilter_search_space, "pruned": pruned_search_space}


def search_space_plan(
    mode: str, block_shape: list[int] | None, smem_per_block: int | None, operands: tuple[float, float]
) -> dict[str, Any]:
    """``full``, ``prefiltered`` or ``pruned`` search space: counts, and the configs to write (None = the tuner's
    own)."""
    space = compute_bound_search_space(block_shape)
    if mode == "full":
        return {"mode": "full", "total": len(space), "kept": len(space), "dropped": 0, "configs": None}
    if not smem_per_block:
        raise ValueError(
            f"smem_per_block: required with search_space={mode}; pass the GPU's shared memory per block "
            "in bytes (101376 on SM120/SM89, 232448 on SM90/SM100)"
        )
    kept, dropped = PRUNINGS[mode](space, smem_per_block, *operands)
    return {"mode": mode, "total": len(space), "kept": len(kept), "dropped": dropped, "configs": kept}


def read_search_space_file(path: str) -> list[dict]:
    """A user's ``--search-space-file``: a JSON list of config objects."""
    try:
        with open(path, encoding="utf-8") as handle:
            configs = json.load(handle)
    except (OSError, ValueError) as exc:
        raise ValueError(f"search_space: cannot read {path} as JSON: {exc}") from None
    if not isinstance(configs, list) or not configs or not all(isinstance(config, dict) for config in configs):
        raise ValueError(f"search_space: {path} must hold a non-empty JSON list of Triton config objects")
    return configs
