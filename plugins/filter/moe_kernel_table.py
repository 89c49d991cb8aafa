# Copyright (c) llmops.sglang contributors
# Apache License 2.0 (see LICENSE)
from __future__ import annotations

DOCUMENTATION = r"""
name: moe_kernel_table
short_description: Fused-MoE kernel time before and after tuning, speedup and % of the bandwidth roofline
version_added: 1.0.0
author: llmops.sglang contributors (@llmops)
description:
  - Joins two tuner benchmark runs (RV(llmops.sglang.moe_tune#module:kernel_times) of O(_input) before tuning
    and O(after) after installing the tuned configs) per batch size.
  - The roofline is the memory-bandwidth lower bound of one fused-MoE layer on one GPU shard (expert weights
    touched at batch M plus activations, at the GPU's bandwidth). Above 100% of the roofline a measurement beat
    DRAM bandwidth, which only L2 reuse across the tuner's repeated calls explains; such rows are flagged as
    measurement artifacts.
options:
  _input:
    description: Kernel times before tuning, by batch size (values are dicts with C(kernel_time_us) or numbers).
    type: dict
    required: true
  after:
    description: Kernel times after installing the tuned configs, same shape.
    type: dict
    required: true
  moe_shape:
    description: The model's MoE shape (P(llmops.sglang.sglang_env_facts#module) C(model.moe_shape)).
    type: dict
    required: true
  tp_size:
    description: Tensor parallel size of the deployment.
    type: int
    required: true
  ep_size:
    description: Expert parallel size of the deployment.
    type: int
    default: 1
  bandwidth_gbs:
    description: GPU memory bandwidth in 1e9 bytes/s (P(llmops.sglang.gpu_facts#module) C(summary.spec)).
    type: float
    required: true
"""

EXAMPLES = r"""
---
- name: Kernel evidence of the MoE tuning
  ansible.builtin.set_fact:
    kernels: >-
      {{ before.kernel_times | llmops.sglang.moe_kernel_table(after.kernel_times, moe_shape=env.model.moe_shape,
         tp_size=4, bandwidth_gbs=gpus.summary.spec.mem_bandwidth_gbs) }}
"""

RETURN = r"""
_value:
  description: The rows and a Markdown table of them.
  type: dict
  contains:
    rows:
      description: Per batch size C(batch_size), C(before_us), C(after_us), C(speedup), C(roofline_us),
        C(pct_of_roofline_after), C(artifact).
      type: list
      elements: dict
    table:
      description: "Markdown: | Batch size | Before (us) | After (us) | Speedup | Roofline (us) | % of roofline |"
      type: str
"""

from ansible.errors import AnsibleFilterError

from ansible_collections.llmops.sglang.plugins.module_utils.moe_roofline import kernel_table

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


def moe_kernel_table(before: dict, after: dict, moe_shape: dict, tp_size: int, ep_size: int = 1,
                     bandwidth_gbs: float | None = None) -> dict:
    if not bandwidth_gbs:
        raise AnsibleFilterError("moe_kernel_table: bandwidth_gbs is unknown for this GPU; set sglang_gpu_spec.mem_bandwidth_gbs")
    try:
        moe_tp = int(tp_size) // int(ep_size)
        rows = kernel_table(
            _times(before), _times(after),
            num_experts=moe_shape["num_experts"] // int(ep_size), topk=moe_shape["topk"],
            hidden_size=moe_shape["hidden_size"], intermediate_per_shard=moe_shape["moe_intermediate_size"] // moe_tp,
            weight_bytes=1 if moe_shape.get("quant_method") == "fp8" else WEIGHT_BYTES.get(moe_shape.get("dtype"), 2),
            bandwidth_gbs=float(bandwidth_gbs))
    except (KeyError, TypeError, ValueError, ZeroDivisionError) as exc:
        raise AnsibleFilterError(f"moe_kernel_table: {exc!r}") from exc
    return {"rows": rows, "table": _markdown(rows)}


class FilterModule:
    def filters(self) -> dict:
        return {"moe_kernel_table": moe_kernel_table}
