# Copyright (c) llmops.sglang contributors
# Apache License 2.0 (see LICENSE)
from __future__ import annotations

DOCUMENTATION = r"""
name: rollout_batch_outcome
author: llmops.sglang contributors (@llmops)
version_added: 2.2.0
short_description: What a rollout batch decides from every host's record - stop and undo, or soak and go on
description:
  - The end of each batch of C(playbooks/rollout_batches.yml) (docs/reliability.md, "Rollouts"), from the
    C(rollout_record) of every host of the play (P(llmops.sglang.rollout_host_record#filter)).
  - When a host of the batch failed, the rollout stops and every host it changed so far (a revision recorded before
    its change) is put back; a soak follows a batch only when it deployed a host.
options:
  _input:
    description: Every host of the play (in play order) and its record, empty or null for a host the rollout has not
      reached.
    type: dict
    required: true
  batch:
    description: The hosts of this batch (C(ansible_play_batch)).
    type: list
    elements: str
    required: true
  number:
    description: The batch's number (1 is the canary batch).
    type: int
    required: true
"""

EXAMPLES = r"""
- name: Put every host this rollout updated back (a host of this batch failed)
  llmops.sglang.revision:
    name: sglang
    state: restored
    revision: "{{ rollout_records[item].revision }}"
  delegate_to: "{{ item }}"
  loop: "{{ rollout_outcome.updated }}"
  vars:
    rollout_outcome: "{{ rollout_records | llmops.sglang.rollout_batch_outcome(ansible_play_batch, 2) }}"
  run_once: true
  when: rollout_outcome.failed | length > 0
"""

RETURN = r"""
_value:
  description:
    - C(failed) (the batch's hosts that failed), C(updated) (every host changed so far, what the undo puts back),
      C(deployed) (whether the batch deployed a host), C(recorded) (the hosts whose record this batch writes, its own
      and those undone), C(message) (why the rollout stopped; empty when nothing failed) and C(summary) (C(canary),
      C(batch_size), C(stopped_at), C(undone), C(hosts), each host's record or C(status) V(not reached)).
  type: dict
"""

from collections.abc import Mapping
from typing import Any

from ansible.errors import AnsibleFilterError

from ansible_collections.llmops.sglang.plugins.module_utils.rollout_batch import batch_outcome


def rollout_batch_outcome(records: Any, batch: Any = None, number: Any = None) -> dict:
    if not isinstance(records, Mapping) or not all(r is None or isinstance(r, Mapping) for r in records.values()):
        raise AnsibleFilterError("rollout_batch_outcome: the input must map each host to its record or null")
    return batch_outcome({str(host): None if record is None else dict(record) for host, record in records.items()},
                         [str(host) for host in batch or []], int(number))


class FilterModule:
    def filters(self) -> dict[str, Any]:
        return {"rollout_batch_outcome": rollout_batch_outcome}
