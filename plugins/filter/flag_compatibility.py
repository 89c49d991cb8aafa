# Copyright (c) llmops.sglang contributors
# Apache License 2.0 (see LICENSE)
from __future__ import annotations

DOCUMENTATION = r"""
name: flag_compatibility
short_description: Requested SGLang flags that cannot take effect on this GPU, model and version
version_added: 1.0.0
description:
  - Evaluates the collection's flag rules (role C(llmops.sglang.sglang_preflight), C(files/flag_rules.yml); its entry
    point C(rules) sets them as the fact C(sglang_preflight_flag_rules)) against the requested server args and facts;
    each finding says why the flag will not take effect and cites its source.
author:
  - llmops.sglang contributors (@llmops)
options:
  _input:
    description: Requested server args (ServerArgs field names).
    type: dict
    required: true
  rules:
    description: The C(rules) list of a flag rules file.
    type: list
    elements: dict
    required: true
  context:
    description:
      - Facts the rules use, C(sm), C(gpu_name), C(nnodes), C(topk), C(moe_dtype), C(sglang_version).
      - C(help_text), the host's C(python -m sglang.launch_server --help), when known; the names and values the
        installed release takes are then read from it, and from C(sglang_version) only without it.
    type: dict
    required: true
"""

EXAMPLES = r"""
- name: Flags that will not work here
  ansible.builtin.debug:
    msg: >-
      {{ candidate_args | llmops.sglang.flag_compatibility(sglang_preflight_flag_rules,
           {'sm': 'sm120', 'topk': 8, 'sglang_version': '0.5.11'}) }}
"""

RETURN = r"""
_value:
  description: One finding per rule the request violates.
  type: list
  elements: dict
  sample:
    - id: allreduce-fusion-arch
      flag: enable_flashinfer_allreduce_fusion
      message: enable_flashinfer_allreduce_fusion will not take effect because FlashInfer all-reduce fusion only runs on SM90/SM100 GPUs
      source: sglang server_args.py
"""

from ansible.errors import AnsibleFilterError
from ansible_collections.llmops.sglang.plugins.module_utils.flag_rules import evaluate_flag_rules


def flag_compatibility(server_args, rules, context):
    if not isinstance(server_args, dict):
        raise AnsibleFilterError(f"flag_compatibility: the input must be the server args mapping, got {type(server_args).__name__}")
    try:
        return evaluate_flag_rules(rules, server_args, context)
    except (KeyError, ValueError) as exc:
        raise AnsibleFilterError(f"flag_compatibility: invalid rule or context: {exc}") from exc


class FilterModule:
    def filters(self):
        return {"flag_compatibility": flag_compatibility}
