# Copyright (c) llmops.sglang contributors
# Apache License 2.0 (see LICENSE)
from __future__ import annotations

DOCUMENTATION = r"""
name: upgrade_retune_plan
author: llmops.sglang contributors (@llmops)
version_added: 2.2.0
short_description: Whether a host of the upgrade retunes its MoE configs on the new release before its switch, and which
description:
  - The retune step of C(playbooks/upgrade.yml) (docs/upgrade.md, "Retune on the canary"), from the host's prediction.
  - C(retune) is true on the canary only, when it is measured (O(measured)), O(retune) is on, the prediction lists
    config files under retune and names no refused server argument and no lookup error (a retune cannot fix those),
    and what it would carry is carried (O(carry), or nothing to carry).
  - C(names) are the files the prediction lists under retune, on every host (the promotion compares them with the
    canary's); C(down) whether the down kernel is among them; C(expected) the file name the tuner must write for each
    kernel (C(up), C(down)).
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
    description: The host's prediction (M(llmops.sglang.sglang_upgrade_check)'s result); null or skipped when none was made.
    type: dict
  retune:
    description: C(upgrade_retune).
    type: bool
    default: true
  measured:
    description: Whether the canary is A/B-tested (C(upgrade_canary_ab) and not check mode).
    type: bool
    default: true
  carry:
    description: C(upgrade_carry).
    type: bool
    default: true
  check_mode:
    description: Whether the play runs in check mode.
    type: bool
    default: false
"""

EXAMPLES = r"""
- name: Decide whether this host retunes before its switch, and which files
  ansible.builtin.set_fact:
    upgrade_retune_plan: >-
      {{ inventory_hostname | llmops.sglang.upgrade_retune_plan(canary=upgrade_canary_host, prediction=upgrade_prediction,
         retune=upgrade_retune, measured=upgrade_canary_ab, carry=upgrade_carry, check_mode=ansible_check_mode) }}

- name: Retune on the canary
  ansible.builtin.import_role:
    name: llmops.sglang.upgrade
    tasks_from: retune.yml
  when: upgrade_retune_plan.retune
"""

RETURN = r"""
_value:
  description: C(retune) (this host retunes now), C(names) (the files to retune), C(down) (the down kernel is among
    them) and C(expected) (the file name per kernel, C(up) and C(down)).
  type: dict
"""

from collections.abc import Mapping
from typing import Any

from ansible.errors import AnsibleFilterError
from ansible.module_utils.parsing.convert_bool import boolean

from ansible_collections.llmops.sglang.plugins.module_utils.upgrade_verdict import made_prediction, retune_plan


def upgrade_retune_plan(host: Any, canary: str = "", prediction: Any = None, retune: Any = True, measured: Any = True,
                        carry: Any = True, check_mode: Any = False) -> dict:
    if prediction is not None and not isinstance(prediction, Mapping):
        raise AnsibleFilterError(f"upgrade_retune_plan: prediction must be a dict or null, got {type(prediction).__name__}")
    return retune_plan(str(host), canary=str(canary), prediction=made_prediction(prediction),
                       retune=boolean(retune), measured=boolean(measured), carry=boolean(carry),
                       check_mode=boolean(check_mode))


class FilterModule:
    def filters(self) -> dict[str, Any]:
        return {"upgrade_retune_plan": upgrade_retune_plan}
