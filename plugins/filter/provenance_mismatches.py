# Copyright (c) llmops.sglang contributors
# Apache License 2.0 (see LICENSE)
from __future__ import annotations

DOCUMENTATION = r"""
name: provenance_mismatches
author: llmops.sglang contributors (@llmops)
version_added: 1.0.0
short_description: Why tuned MoE configs do not fit a host (GPU, Triton, SGLang, model shape)
description:
  - Compares the provenance recorded with tuned configs (C(moe_tune/<host>/provenance.json) of a run) with what a
    host has, namely the GPU model, the Triton and SGLang versions and the model's MoE shape.
  - Returns one sentence per mismatch; an empty list means the configs fit the host.
options:
  _input:
    description: The provenance (C(gpu), C(versions), C(moe_shape)).
    type: dict
    required: true
  host:
    description:
      - What the host has, C({gpu, versions, moe_shape}) from M(llmops.sglang.gpu_facts) (C(summary.name)) and
        M(llmops.sglang.sglang_env_facts) (C(versions), C(model.moe_shape)).
    type: dict
    required: true
"""

EXAMPLES = r"""
- name: Check the tuned configs against this host
  ansible.builtin.set_fact:
    mismatches: >-
      {{ provenance | llmops.sglang.provenance_mismatches({'gpu': gpus.summary.name, 'versions': env.versions,
         'moe_shape': env.model.moe_shape}) }}
"""

RETURN = r"""
_value:
  description: The reasons, empty when the configs fit.
  type: list
  elements: str
  sample: ["GPU NVIDIA H100 80GB HBM3 differs from the tuned GPU NVIDIA RTX PRO 6000 Blackwell Server Edition"]
"""

from collections.abc import Mapping
from typing import Any

from ansible.errors import AnsibleFilterError

from ansible_collections.llmops.sglang.plugins.module_utils.provenance import provenance_mismatches as mismatches


def provenance_mismatches(provenance: Any, host: Any) -> list[str]:
    for name, value in (("_input", provenance), ("host", host)):
        if not isinstance(value, Mapping):
            raise AnsibleFilterError(f"provenance_mismatches: {name} must be a dict, got {type(value).__name__}")
    return mismatches(dict(provenance), dict(host))


class FilterModule:
    def filters(self) -> dict[str, Any]:
        return {"provenance_mismatches": provenance_mismatches}
