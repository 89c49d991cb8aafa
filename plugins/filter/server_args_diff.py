# Copyright (c) llmops.sglang contributors
# Apache License 2.0 (see LICENSE)
from __future__ import annotations

DOCUMENTATION = r"""
name: server_args_diff
author: llmops.sglang contributors
version_added: 1.0.0
short_description: What changed between two SGLang starts (server-made changes, capacity, warnings, MoE configs)
description:
  - Compares the startup facts of a candidate start with those of the baseline start, both from
    P(llmops.sglang.parse_startup_log#filter).
  - Names the args the server set by itself (not requested, yet different from the baseline) or set
    differently from the request, capacity changes (C(max_running_requests), C(max_total_num_tokens),
    C(kv_cache_tokens)), warnings that appeared or vanished and MoE kernel configs whose status changed.
  - Argument order follows the data flow of a trial (the candidate is piped in, the baseline is the reference).
options:
  _input:
    description: Startup facts of the candidate start.
    type: dict
    required: true
  baseline_facts:
    description: Startup facts of the baseline start.
    type: dict
    required: true
  candidate_requested:
    description: Server args the candidate start requested, by ServerArgs field name (C(--flag-spelling) also accepted).
    type: dict
    default: {}
  baseline_requested:
    description: Server args the baseline start requested.
    type: dict
    default: {}
"""

EXAMPLES = r"""
- name: Diff the trial against the baseline
  ansible.builtin.set_fact:
    trial_diff: >-
      {{ candidate_facts | llmops.sglang.server_args_diff(baseline_facts,
         {'speculative_algorithm': 'EAGLE', 'enable_flashinfer_allreduce_fusion': true},
         {'speculative_algorithm': 'EAGLE'}) }}

- name: Show it
  ansible.builtin.debug:
    msg: "{{ trial_diff.summary_lines }}"
"""

RETURN = r"""
_value:
  description: The differences.
  type: dict
  contains:
    auto_adjusted:
      description: Entries C(arg), C(requested) (null when not requested), C(effective), C(baseline).
      type: list
      elements: dict
    capacity:
      description: Changed metrics, entries C(metric), C(baseline), C(candidate), C(change_pct) (null when the baseline is 0).
      type: list
      elements: dict
    warnings_appeared:
      description: Candidate warnings the baseline did not print (measured values inside are ignored).
      type: list
      elements: str
    warnings_vanished:
      description: Baseline warnings the candidate no longer prints.
      type: list
      elements: str
    moe_configs_changed:
      description: Entries C(kernel), C(file), C(baseline), C(candidate) (the moe_configs entries, null when not reported).
      type: list
      elements: dict
    summary_lines:
      description: The same, as sentences.
      type: list
      elements: str
  sample:
    summary_lines:
      - "disable_piecewise_cuda_graph set by the server (not requested): False -> True"
      - "max_running_requests 48 -> 26 (-46%)"
"""

from collections.abc import Mapping
from typing import Any

from ansible.errors import AnsibleFilterError

from ansible_collections.llmops.sglang.plugins.module_utils.server_diff import diff_server_facts


def server_args_diff(
    candidate_facts: Any,
    baseline_facts: Any,
    candidate_requested: Any = None,
    baseline_requested: Any = None,
) -> dict[str, Any]:
    """Filter: diff_server_facts with the candidate piped in."""
    arguments = (
        ("_input", candidate_facts, False),
        ("baseline_facts", baseline_facts, False),
        ("candidate_requested", candidate_requested, True),
        ("baseline_requested", baseline_requested, True),
    )
    for name, value, optional in arguments:
        if not isinstance(value, Mapping) and not (optional and value is None):
            raise AnsibleFilterError(f"server_args_diff: {name} must be a dict, got {type(value).__name__}")
    return diff_server_facts(baseline_facts, candidate_facts, baseline_requested, candidate_requested)


class FilterModule:
    def filters(self) -> dict[str, Any]:
        return {"server_args_diff": server_args_diff}
