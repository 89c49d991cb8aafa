# Copyright (c) llmops.sglang contributors
# Apache License 2.0 (see LICENSE)
from __future__ import annotations

DOCUMENTATION = r"""
name: upgrade_verdict
author: llmops.sglang contributors (@llmops)
version_added: 2.2.0
short_description: The upgrade canary's decision, the new release measured against the serving one on the same host
description:
  - Promote or roll back a new SGLang release from its canary A/B (docs/upgrade.md, "The canary"). The new release
    need not be faster; it must not serve worse.
  - Rolled back when the new release failed on the canary; when a level's throughput regressed
    (P(llmops.sglang.compare_sweeps#filter), judged by the sequential rule the new release was measured with); when the
    startup facts show a capacity drop (max_running_requests, KV tokens) beyond C(max_capacity_loss_pct) of
    O(policy), even when throughput holds; when the new server reports MoE configs missing that the old one did not;
    unless C(latency_limits) is null, when the error rate or p99 TTFT or TPOT crosses the limits of
    P(llmops.sglang.rollout_analysis#filter); and, given O(goodput), when the new release missed the run's SLO in a
    run at the serving release's rate less C(max_goodput_loss_pct).
  - Fails, naming the field, when the serving release's measurement failed or the policy has an unknown key.
options:
  _input:
    description: The serving (old) release's measurement, as the tuning_run role's measure.yml keeps it
      (C(tuning_run_measured) with C(sweep), C(facts), C(requested_args), C(failure)).
    type: dict
    required: true
  new:
    description: The new release's measurement on the same host, the same keys.
    type: dict
    required: true
  prediction:
    description: The new release's prediction (M(llmops.sglang.sglang_upgrade_check)'s result), for versions and configs.
    type: dict
    required: true
  host:
    description: The canary host, named in the report.
    type: str
    required: true
  carried:
    description: The tuned MoE config file names carried to the new release before the switch.
    type: list
    elements: str
    default: []
  retuned:
    description:
      - The M(llmops.sglang.moe_tune) results of the retune on the canary (engine V(llmops)), before the switch; the
        report lists their files under C(retuned) and their GPU-minutes and cache statuses as C(retune_cost).
    type: list
    elements: dict
    default: []
  retune_estimate:
    description:
      - The retune's estimate (P(llmops.sglang.moe_cost_estimate#filter) with O(retuned)'s plan, made before the server
        stopped); the report shows it beside what the retune spent.
    type: dict
  compare:
    description: Options of P(llmops.sglang.compare_sweeps#filter) (C(tuning_run_compare)).
    type: dict
    default: {}
  policy:
    description:
      - C(max_capacity_loss_pct) (default V(10)), C(latency_limits) (the rollout analysis' limits, default its
        defaults; V(null) for no latency limit) and C(max_goodput_loss_pct) (default V(5)). See
        P(llmops.sglang.upgrade_policy#filter).
    type: dict
    default: {}
  goodput:
    description:
      - The goodput under the run's SLO, C({old, new}) - the results of M(llmops.sglang.canary_goodput)'s phases; null
        when the run has no SLO.
    type: dict
"""

EXAMPLES = r"""
- name: Decide on the canary
  ansible.builtin.set_fact:
    verdict: >-
      {{ old_measured | llmops.sglang.upgrade_verdict(new_measured, prediction=prediction, host=inventory_hostname,
         compare=tuning_run_compare, policy={'max_capacity_loss_pct': 10}) }}
"""

RETURN = r"""
_value:
  description:
    - C(promote) (bool), C(summary) (one line), C(reasons) (each limit crossed), C(notes) (what changed within the
      limits), the evidence C(comparison), C(side_effects), C(analysis), C(moe_lost), the C(policy) applied, and
      C(report) (versions old and new, MoE configs kept / fallback / missing / carried / retuned / retune, the retune's C(retune_cost)
      (C(files), C(gpu_minutes), C(cache) per file, C(estimate) with the estimate's C(engine_gpu_minutes),
      C(gpu_minutes), C(gpus) and C(summary); null when nothing was retuned), startup facts diff,
      throughput table, latency rows, C(goodput), decision) with its C(markdown).
    - C(goodput) (null without O(goodput)) - C(slo), C(serving_rate_rps), C(serving_estimate_rps),
      C(serving_goodput_rps), C(check_rate_rps), C(max_loss_pct), C(held) (null when nothing was compared), C(runs),
      C(failed_runs), C(new_goodput_rps) and the C(line) the verdict lists.
  type: dict
"""

from collections.abc import Mapping
from typing import Any

from ansible.errors import AnsibleFilterError

from ansible_collections.llmops.sglang.plugins.module_utils import upgrade_verdict as verdicts


def upgrade_verdict(old: Any, new: Any, prediction: Any = None, host: str = "", carried: Any = None, compare: Any = None,
                    policy: Any = None, retuned: Any = None, retune_estimate: Any = None, goodput: Any = None) -> dict:
    for name, value in (("_input", old), ("new", new), ("prediction", prediction), ("compare", compare or {}),
                        ("policy", policy or {}), ("retune_estimate", retune_estimate or {}), ("goodput", goodput or {})):
        if not isinstance(value, Mapping):
            raise AnsibleFilterError(f"upgrade_verdict: {name} must be a dict, got {type(value).__name__}")
    try:
        verdict = verdicts.judge(dict(old), dict(new), compare=dict(compare or {}), options=dict(policy or {}),
                                 goodput=dict(goodput) if goodput else None)
    except ValueError as exc:
        raise AnsibleFilterError(f"upgrade_verdict: {exc}") from None
    report = verdicts.report(verdict, dict(prediction), host=host, carried=list(carried or []),
                             retuned=verdicts.retune_summary(list(retuned or []),
                                                             dict(retune_estimate) if retune_estimate else None))
    applied = verdict.pop("options")
    return {**verdict, "policy": applied, "report": report}


class FilterModule:
    def filters(self) -> dict[str, Any]:
        return {"upgrade_verdict": upgrade_verdict}
