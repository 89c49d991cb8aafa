# Copyright (c) llmops.sglang contributors
# Apache License 2.0 (see LICENSE)
from __future__ import annotations

DOCUMENTATION = r"""
name: rollout_host_record
author: llmops.sglang contributors (@llmops)
version_added: 2.2.0
short_description: The record of a rollout host its batch deployed, failed when its analysis did not pass
description:
  - The C(rollout_record) of a host of C(playbooks/rollout_batches.yml) once it is deployed and judged
    (docs/reliability.md, "Rollouts"); P(llmops.sglang.rollout_batch_outcome#filter) reads the records of every host.
  - C(status) is V(failed), with the analysis' reasons as C(reason), when the analysis did not pass, else V(deployed).
options:
  _input:
    description: The host's analysis (P(llmops.sglang.rollout_analysis#filter)); null when it was not judged (analysis
      off, or the deploy changed nothing).
    type: dict
    required: true
  batch:
    description: The batch's number (1 is the canary batch).
    type: int
    required: true
  revision:
    description: The revision recorded before the host's change (M(llmops.sglang.revision)).
    type: str
    required: true
  changed:
    description: Whether the deploy changed the host.
    type: bool
    required: true
  args:
    description: The server arguments deployed.
    type: dict
    required: true
  moe_configs:
    description: The MoE config files installed.
    type: list
    elements: str
    default: []
  invocation_id:
    description: The systemd invocation of the server deployed.
    type: str
"""

EXAMPLES = r"""
- name: Remember the deploy
  ansible.builtin.set_fact:
    rollout_record: >-
      {{ rollout_verdict | llmops.sglang.rollout_host_record(batch=1, revision=rollout_revision.revision,
         changed=rollout_changed, args=rollout_args, moe_configs=[], invocation_id=none) }}
"""

RETURN = r"""
_value:
  description: C(status), C(batch), C(revision), C(changed), C(args), C(moe_configs), C(invocation_id), C(analysis)
    and C(reason) (null unless failed).
  type: dict
"""

from collections.abc import Mapping
from typing import Any

from ansible.errors import AnsibleFilterError
from ansible.module_utils.parsing.convert_bool import boolean

from ansible_collections.llmops.sglang.plugins.module_utils.rollout_batch import host_record


def rollout_host_record(verdict: Any, batch: Any = None, revision: Any = None, changed: Any = False, args: Any = None,
                        moe_configs: Any = None, invocation_id: Any = None) -> dict:
    if verdict is not None and not isinstance(verdict, Mapping):
        raise AnsibleFilterError(f"rollout_host_record: the analysis must be a dict or null, got {type(verdict).__name__}")
    return host_record(None if verdict is None else dict(verdict), batch=int(batch), revision=revision,
                       changed=boolean(changed), args=dict(args or {}), moe_configs=list(moe_configs or []),
                       invocation_id=invocation_id)


class FilterModule:
    def filters(self) -> dict[str, Any]:
        return {"rollout_host_record": rollout_host_record}
