# Copyright (c) llmops.sglang contributors
# Apache License 2.0 (see LICENSE)
from __future__ import annotations

DOCUMENTATION = r"""
name: upgrade_promotion
author: llmops.sglang contributors (@llmops)
version_added: 2.2.0
short_description: What the upgrade's promotion does with a host - left out and why, or switched with the canary's retuned configs
description:
  - The rollout's inputs for one host of C(playbooks/upgrade.yml)'s promotion (docs/upgrade.md), after its canary A/B.
  - Left out (C(mismatches) names why) in check mode, without a measured canary, with O(promote) false, for the
    canary itself (its A/B switched it), and where the host's prediction is not ready - unless all it lacks are the
    files the canary retuned and the host has the canary's GPU and needs exactly those files retuned.
  - C(moe_configs) - the canary's retuned config files such a host gets, installed into the new release's directory
    before its switch.
options:
  _input:
    description: The host (C(inventory_hostname)).
    type: str
    required: true
  canary:
    description: The canary host.
    type: str
    required: true
  prediction:
    description: The host's prediction after its carry (M(llmops.sglang.sglang_upgrade_check)'s result); null when none was made.
    type: dict
  retune_names:
    description: The config files the host's prediction says need retuning.
    type: list
    elements: str
    default: []
  canary_retuned:
    description: The canary's M(llmops.sglang.moe_configs) install of its retuned configs; null or skipped when it retuned nothing.
    type: dict
  gpu:
    description: The host's GPU name.
    type: str
  canary_gpu:
    description: The canary's GPU name.
    type: str
  measured:
    description: Whether the canary was A/B-tested (C(upgrade_canary_ab) and not check mode).
    type: bool
    default: true
  promote:
    description: C(upgrade_promote).
    type: bool
    default: true
  check_mode:
    description: Whether the play runs in check mode.
    type: bool
    default: false
"""

EXAMPLES = r"""
- name: Hand the promotion to the rollout's batches
  ansible.builtin.set_fact:
    rollout_mismatches: "{{ promotion.mismatches }}"
  vars:
    promotion: "{{ inventory_hostname | llmops.sglang.upgrade_promotion(canary=upgrade_canary_host, prediction=upgrade_ready) }}"
"""

RETURN = r"""
_value:
  description: C(mismatches) (why the host is left out; empty when it is switched) and C(moe_configs) (the canary's
    retuned config file names it gets).
  type: dict
"""

from collections.abc import Mapping
from typing import Any

from ansible.errors import AnsibleFilterError

from ansible_collections.llmops.sglang.plugins.module_utils.upgrade_verdict import made_prediction, promotion


def upgrade_promotion(host: Any, canary: str = "", prediction: Any = None, retune_names: Any = None,
                      canary_retuned: Any = None, gpu: Any = None, canary_gpu: Any = None, measured: bool = True,
                      promote: bool = True, check_mode: bool = False) -> dict:
    for name, value in (("prediction", prediction), ("canary_retuned", canary_retuned)):
        if value is not None and not isinstance(value, Mapping):
            raise AnsibleFilterError(f"upgrade_promotion: {name} must be a dict or null, got {type(value).__name__}")
    return promotion(str(host), canary=str(canary), prediction=made_prediction(prediction),
                     retune_names=list(retune_names or []), canary_retuned=dict(canary_retuned or {}),
                     gpu=gpu, canary_gpu=canary_gpu, measured=bool(measured), promote=bool(promote),
                     check_mode=bool(check_mode))


class FilterModule:
    def filters(self) -> dict[str, Any]:
        return {"upgrade_promotion": upgrade_promotion}
