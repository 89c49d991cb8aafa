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


# Bytes per expert weight element by the checkpoint dtype the kernel reads.
WEIGHT_BYTES = {"bfloat16": 2, "float16": 2, "float32": 4}


def _times(kernel_times: dict) -> dict[int, float]:
    return {int(batch): float(value["kernel_time_us"] if isinstance(value, dict) else value)
            for batch, value in kernel_times.items()}


def _format(value: float | None, pattern: str) -> str:
    return "-" if value is None else pattern.format(value)


def _markdown(rows: list[dict]) -> str:
    lines = ["| Batch size | Before (us) | After (us) | Speedup | Roofline (us) | % of roofline |", "|---:|---:|---:|---:|---:|---:|"]
    for row in rows:
        pct = _format(row["pct_of_roofline_after"], "{:.0f}%") + (" (artifact: above the bandwidth bound)" if row["artifact"] else "")
        lines.append(f"| {row['batch_size']} | {_format(row['before_us'], '{:.1f}')} | {_format(row['after_us'], '{:.1f}')} | "
                     f"{_format(row['speedup'], '{:.2f}x')} | {row['roofline_us']:.1f} | {pct} |")
    return "\n".join(lines)


def kernel_table_document(before: dict, after: dict, moe_shape: dict, tp_size: Any, ep_size: Any = 1,
                          bandwidth_gbs: Any = None) -> dict[str, Any]:
    """The stage's ``kernel_table.json``: :func:`kernel_table` of the moe_tune benchmarks' ``kernel_times`` (batch
    size -> us, or -> a dict with ``kernel_time_us``) for the model's ``moe_shape`` on one TP/EP shard, with its
    Markdown. Raises ValueError naming what is missing or malformed."""
    if not bandwidth_gbs:
        raise ValueError("bandwidth_gbs is unknown for this GPU; set sglang_gpu_spec.mem_bandwidth_gbs")
    try:
        moe_tp = int(tp_size) // int(ep_size)
        rows = kernel_table(
            _times(before), _times(after),
            num_experts=moe_shape["num_experts"] // int(ep_size), topk=moe_shape["topk"],
            hidden_size=moe_shape["hidden_size"], intermediate_per_shard=moe_shape["moe_intermediate_size"] // moe_tp,
            weight_bytes=1 if moe_shape.get("quant_method") == "fp8" else WEIGHT_BYTES.get(moe_shape.get("dtype"), 2),
            bandwidth_gbs=float(bandwidth_gbs))
    except (KeyError, TypeError, ValueError, ZeroDivisionError) as exc:
        raise ValueError(repr(exc)) from exc
    return {"rows": rows, "table": _markdown(rows)}
