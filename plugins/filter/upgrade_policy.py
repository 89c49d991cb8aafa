# Copyright (c) llmops.sglang contributors
# Apache License 2.0 (see LICENSE)
from __future__ import annotations

DOCUMENTATION = r"""
name: upgrade_policy
author: llmops.sglang contributors (@llmops)
version_added: 2.2.0
short_description: The upgrade canary's policy checked and merged over its defaults, before anything changes
description:
  - C(max_capacity_loss_pct), default V(10) - a drop of max_running_requests or KV tokens beyond this percentage rolls
    the upgrade back even when throughput holds.
  - C(latency_limits), default the rollout analysis' defaults (V(0.01) error rate, p99 TTFT and TPOT V(10) percent
    up) - see P(llmops.sglang.rollout_analysis#filter); V(null) judges no latency.
  - C(max_goodput_loss_pct), default V(5) - when the run has an SLO, the new release must meet it in every run at the
    serving release's highest rate that met it, less this percentage (below 100).
  - Fails naming C(upgrade_canary_policy.<key>) and what it takes.
options:
  _input:
    description: The policy (C(upgrade_canary_policy)); null or empty takes the defaults.
    type: dict
    required: true
"""

EXAMPLES = r"""
- name: Check the canary's policy
  ansible.builtin.set_fact:
    policy: "{{ upgrade_canary_policy | llmops.sglang.upgrade_policy }}"
"""

RETURN = r"""
_value:
  description: The policy with every key, as P(llmops.sglang.upgrade_verdict#filter) applies it.
  type: dict
"""

from collections.abc import Mapping
from typing import Any

from ansible.errors import AnsibleFilterError

from ansible_collections.llmops.sglang.plugins.module_utils.upgrade_verdict import validated_options


def upgrade_policy(policy: Any) -> dict:
    if policy is not None and not isinstance(policy, Mapping):
        raise AnsibleFilterError(f"upgrade_canary_policy: a dict, got {type(policy).__name__}")
    try:
        return validated_options(dict(policy or {}))
    except ValueError as exc:
        raise AnsibleFilterError(str(exc)) from None


class FilterModule:
    def filters(self) -> dict[str, Any]:
        return {"upgrade_policy": upgrade_policy}
