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

from ansible_collections.llmops.sglang.plugins.module_utils.moe_roofline import kernel_table_document


def moe_kernel_table(before: dict, after: dict, moe_shape: dict, tp_size: int, ep_size: int = 1,
                     bandwidth_gbs: float | None = None) -> dict:
    try:
        return kernel_table_document(before, after, moe_shape, tp_size, ep_size, bandwidth_gbs)
    except ValueError as exc:
        raise AnsibleFilterError(f"moe_kernel_table: {exc}") from exc


class FilterModule:
    def filters(self) -> dict:
        return {"moe_kernel_table": moe_kernel_table}
