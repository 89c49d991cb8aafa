# Copyright (c) llmops.sglang contributors
# Apache License 2.0 (see LICENSE)
from __future__ import annotations

DOCUMENTATION = r"""
name: rollout_analysis
author: llmops.sglang contributors (@llmops)
version_added: 2.1.0
short_description: Whether a host's new configuration serves as well as its previous one (error rate, p99 TTFT/TPOT)
description:
  - Compares two sweeps of M(llmops.sglang.bench) on the same host with the same workload, the one before a rollout
    changed it and the one after, level by level.
  - The new configuration passes when its share of failed requests is at most O(limits.max_error_rate) and its p99
    TTFT and p99 TPOT are at most O(limits.max_ttft_p99_increase_pct) and O(limits.max_tpot_p99_increase_pct)
    percent above the previous configuration's.
  - Fails when the sweep before the change has no result (there is nothing to compare with).
options:
  _input:
    description: The sweep before the change.
    type: dict
    required: true
  after:
    description: The sweep after the change (a failed bench's sweep counts with its failures and error).
    type: dict
    required: true
  limits:
    description:
      - C(max_error_rate) (default V(0.01)), C(max_ttft_p99_increase_pct) and C(max_tpot_p99_increase_pct) (default
        V(10) each); a null value takes the default.
    type: dict
"""

EXAMPLES = r"""
- name: Judge the new configuration against the previous one
  ansible.builtin.set_fact:
    analysis: "{{ before.sweep | llmops.sglang.rollout_analysis(after.sweep, {'max_error_rate': 0.01}) }}"
"""

RETURN = r"""
_value:
  description:
    - C(passed), C(reasons) (each limit crossed, with its numbers), C(levels) (per level C(error_rate) before and after,
      C(ttft_ms) and C(tpot_ms) with C(before_p99), C(after_p99), C(change_pct)), C(limits) and C(after_error).
  type: dict
"""

from collections.abc import Mapping
from typing import Any

from ansible.errors import AnsibleFilterError

from ansible_collections.llmops.sglang.plugins.module_utils.rollout_analysis import analyse


def rollout_analysis(before: Any, after: Any, limits: Any = None) -> dict:
    for name, value in (("_input", before), ("after", after), ("limits", limits or {})):
        if not isinstance(value, Mapping):
            raise AnsibleFilterError(f"rollout_analysis: {name} must be a dict, got {type(value).__name__}")
    try:
        return analyse(dict(before), dict(after), dict(limits or {}))
    except ValueError as exc:
        raise AnsibleFilterError(f"rollout_analysis: {exc}") from None


class FilterModule:
    def filters(self) -> dict[str, Any]:
        return {"rollout_analysis": rollout_analysis}
