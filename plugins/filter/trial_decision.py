# Copyright (c) llmops.sglang contributors
# Apache License 2.0 (see LICENSE)
from __future__ import annotations

DOCUMENTATION = r"""
name: trial_decision
short_description: Adopt or revert a tuning candidate, with the reasons
version_added: 1.0.0
author: llmops.sglang contributors (@llmops)
description:
  - Applies the decision policy to a candidate's sweep comparison and its side effects.
  - A candidate is adopted only when the overall comparison is V(improved) and no level regressed.
  - Capacity the server lost by itself (max_running_requests, max_total_num_tokens, KV tokens) is always
    listed in the reasons, even when throughput did not change; with O(policy.max_capacity_loss_pct) set a
    larger loss also prevents adoption.
  - A O(failure) (the candidate did not start or could not be measured) always reverts.
options:
  _input:
    description: The comparison of the candidate against the currently adopted configuration
      (P(llmops.sglang.compare_sweeps#filter)). Ignored when O(failure) is set.
    type: dict
    required: true
  side_effects:
    description: The side-effect diff of the candidate (P(llmops.sglang.server_args_diff#filter)).
    type: dict
  policy:
    description: Decision policy.
    type: dict
    suboptions:
      require_verdict:
        description: Overall verdict a candidate needs.
        type: str
        default: improved
      max_capacity_loss_pct:
        description: Largest capacity loss in percent a candidate may cause; V(null) reports losses without limiting.
        type: float
      allow_low_confidence:
        description:
          - Adopt an improvement that P(llmops.sglang.compare_sweeps#filter) marks low confidence (fewer than five runs
            per side). Off by default, because three runs cannot reach significance in a rank test and a single
            run cannot separate a gain from noise.
        type: bool
        default: false
  failure:
    description: Why the candidate could not be measured.
    type: str
seealso:
  - plugin: llmops.sglang.compare_sweeps
    plugin_type: filter
  - plugin: llmops.sglang.server_args_diff
    plugin_type: filter
"""

EXAMPLES = r"""
---
- name: Decide on the trial
  ansible.builtin.set_fact:
    decision: "{{ comparison | llmops.sglang.trial_decision(side_effects=diff, policy={'max_capacity_loss_pct': 10}) }}"

- name: Say it
  ansible.builtin.debug:
    msg: "{{ decision.summary }}"  # revert: within noise (-1.0% .. +0.3% across levels); capacity dropped 46% ...
"""

RETURN = r"""
_value:
  description: The decision.
  type: dict
  contains:
    adopt:
      description: Whether the candidate is adopted.
      type: bool
    action:
      description: V(adopt) or V(revert).
      type: str
    reasons:
      description:
        - Throughput verdict first, then capacity losses (concurrent requests first) and args the server set
          differently from the request and from the reference deploy.
      type: list
      elements: str
    summary:
      description: One line, the action, a colon and the reasons joined by semicolons.
      type: str
    policy:
      description: The policy applied (defaults filled in).
      type: dict
"""

from ansible.errors import AnsibleFilterError

from ansible_collections.llmops.sglang.plugins.module_utils.decisions import decide_trial


def trial_decision(comparison: dict, side_effects: dict | None = None, policy: dict | None = None,
                   failure: str | None = None) -> dict:
    try:
        return decide_trial(comparison, side_effects, policy, failure)
    except (ValueError, KeyError, TypeError) as exc:
        raise AnsibleFilterError(f"trial_decision: {exc}") from exc


class FilterModule:
    def filters(self) -> dict:
        return {"trial_decision": trial_decision}
