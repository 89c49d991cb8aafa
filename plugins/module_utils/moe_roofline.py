# Copyright (c) llmops.sglang contributors
# Apache License 2.0 (see LICENSE)
"""Memory-bandwidth roofline of one fused-MoE layer on one GPU shard, and the before/after kernel table.

Private to the llmops.sglang collection; not a public API. Pure functions, stdlib only.
"""
from __future__ import annotations

from typing import Any


def moe_roofline(
    M: int,
    num_experts: int,
    topk: int,
    hidden_size: int,
    intermediate_per_shard: int,
    weight_bytes: float,
    bandwidth_gbs: float,
    act_bytes: float = 2,
) -> dict[str, float]:
    """Memory-bandwidth lower bound of one fused-MoE layer (gate/up + down) on one GPU shard.

    Uniform routing: E_act = E * (1 - (1 - k/E)^M) distinct experts, each reading 3*H*I weights.
    Activations: M*H input + M*k*6I through the gate/up and SiLU intermediates + M*k*H down output
    + M*H combined output = M*(2H + k*(6I + H)) elements. Block-quant scales (~0.02 % of the
    weights) are ignored. ``bandwidth_gbs`` is in 1e9 bytes/s.
    """
    if not 0 < topk <= num_experts:
        raise ValueError(f"topk={topk} must be in 1..num_experts={num_experts}")
    experts_active = num_experts * (1 - (1 - topk / num_experts) ** M)
    weight_bytes_touched = experts_active * 3 * hidden_size * intermediate_per_shard * weight_bytes
    activation_bytes = M * act_bytes * (2 * hidden_size + topk * (6 * intermediate_per_shard + hidden_size))
    bound_us = (weight_bytes_touched + activation_bytes) / (bandwidth_gbs * 1e3)
    return {
        "experts_active": experts_active,
        "weight_bytes_touched": weight_bytes_touched,
        "activation_bytes": activation_bytes,
        "bound_us": bound_us,
    }


def kernel_table(
    before: dict[int, float],
    after: dict[int, float],
    *,
    num_experts: int,
    topk: int,
    hidden_size: int,
    intermediate_per_shard: int,
    weight_bytes: float,
    bandwidth_gbs: float,
    act_bytes: float = 2,
) -> list[dict[str, Any]]:
    """Per batch size: kernel time before/after tuning, speedup and % of the roofline reached.

    ``pct_of_roofline_after`` = bound / measured * 100; above 100 the measurement beat DRAM
    bandwidth, i.e. the tuner's repeated invocations were served from L2 (an artifact).
    """
    rows = []
    for batch_size in sorted(set(before) | set(after)):
        before_us, after_us = before.get(batch_size), after.get(batch_size)
        roofline_us = moe_roofline(
            batch_size, num_experts, topk, hidden_size, intermediate_per_shard, weight_bytes, bandwidth_gbs, act_bytes
        )["bound_us"]
        pct = roofline_us / after_us * 100 if after_us else None
        rows.append(
            {
                "batch_size": batch_size,
                "before_us": before_us,
                "after_us": after_us,
                "speedup": before_us / after_us if before_us and after_us else None,
                "roofline_us": roofline_us,
                "pct_of_roofline_after": pct,
                "artifact": pct is not None and pct > 100,
            }
        )
    return rows
