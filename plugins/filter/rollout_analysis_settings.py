# Copyright (c) llmops.sglang contributors
# Apache License 2.0 (see LICENSE)
from __future__ import annotations

DOCUMENTATION = r"""
name: rollout_analysis_settings
author: llmops.sglang contributors (@llmops)
version_added: 2.2.0
short_description: A rollout's analysis settings (its benchmark and limits) with the defaults, checked
description:
  - What C(playbooks/rollout_batches.yml) measures each updated host with, before and after its change
    (docs/reliability.md, "Rollouts"), from the rollout's C(rollout_analysis) input.
  - Null turns the analysis off (the rollout is gated on health only). Otherwise C(bench) (options of
    M(llmops.sglang.bench)) go over the defaults (64 requests at C=8, 512 tokens in, 128 out, one run, every request
    counted) and C(limits) over those of P(llmops.sglang.rollout_analysis#filter).
  - Fails on an unknown key or limit, or a limit that is not a number >= 0, before any host changes.
options:
  _input:
    description: C(rollout_analysis) (C({}) when unset).
    type: dict
    required: true
"""

EXAMPLES = r"""
- name: Measure the previous configuration
  llmops.sglang.bench:
    port: "{{ sglang_port }}"
    concurrency_levels: "{{ rollout_analysis_plan.bench.concurrency_levels }}"
  vars:
    rollout_analysis_plan: "{{ rollout_analysis | default({}) | llmops.sglang.rollout_analysis_settings }}"
  when: rollout_analysis_plan.on
"""

RETURN = r"""
_value:
  description: C(on) (whether hosts are measured), C(bench) (the benchmark's options) and C(limits) (all three limits).
  type: dict
"""

from collections.abc import Mapping
from typing import Any

from ansible.errors import AnsibleFilterError

from ansible_collections.llmops.sglang.plugins.module_utils.rollout_analysis import analysis_settings


def rollout_analysis_settings(analysis: Any) -> dict:
    if analysis is not None and not isinstance(analysis, Mapping):
        raise AnsibleFilterError(f"rollout_analysis must be a dict with bench and limits, or null to turn the analysis "
                                 f"off; got {type(analysis).__name__}")
    try:
        return analysis_settings(None if analysis is None else dict(analysis))
    except ValueError as exc:
        raise AnsibleFilterError(str(exc)) from None


class FilterModule:
    def filters(self) -> dict[str, Any]:
        return {"rollout_analysis_settings": rollout_analysis_settings}
