# Copyright (c) llmops.sglang contributors
# Apache License 2.0 (see LICENSE)
from __future__ import annotations

DOCUMENTATION = r"""
name: stage
short_description: A stage of the tuning run as the stage registry declares it
version_added: 1.0.0
author: llmops.sglang contributors (@llmops)
description:
  - Looks a stage up in the stage registry (C(plugins/module_utils/stages.py)), the one place the stages are declared,
    so the tuning_run role's tasks decide from it whether a stage is guarded, which adopted configuration it starts
    from and whether it needs one.
  - Fails naming the known stages when the name is not one of them.
options:
  _input:
    description: The stage name (C(tuning_run_stage)).
    type: str
    required: true
"""

EXAMPLES = r"""
- name: Guard the service while the stage changes it
  llmops.sglang.server_guard:
    name: "{{ lookup('llmops.sglang.service_name') }}"
  when: (tuning_run_stage | llmops.sglang.stage).guarded
"""

RETURN = r"""
_value:
  description: The stage.
  type: dict
  contains:
    name:
      description: The stage name.
      type: str
    title:
      description: Its import name in C(playbooks/tune.yml).
      type: str
    playbook:
      description: Its playbook, relative to the collection root.
      type: str
    routine:
      description: Whether C(playbooks/tune.yml) runs it and C(-e stages) can select it.
      type: bool
    records:
      description: Whether it ends with C(<run>/<stage>/<host>/stage.json) (with its GPU-minutes).
      type: bool
    forceable:
      description: Whether C(-e force) can make a resumed run repeat it.
      type: bool
    adopts:
      description: Whether it records C(adopted.json).
      type: bool
    reads_adopted:
      description: Whether it needs a configuration adopted by an earlier stage.
      type: bool
    guarded:
      description: Whether the host's guard is armed while it runs.
      type: bool
    stops_servers:
      description: Whether it stops the servers for its whole length.
      type: bool
    selected_by_default:
      description: Whether a run without C(-e stages) runs it (the search stage runs only when selected).
      type: bool
    measurements:
      description:
        - The folder below C(<run>/<stage>/<host>/) holding one folder per measured candidate (C(trials) of the flags
          stage, C(verify) of the search stage, C(canary) of the upgrade); V(null) when the host folder holds its one
          measurement, if any.
      type: str
    workflow:
      description: Whether it is a node of the AWX workflow (a tuning run's approved path); the upgrade is a job of its own.
      type: bool
    adopted_from:
      description: The stages whose C(adopted.json) it starts from, the most recent first.
      type: list
      elements: str
    awx_job_template:
      description: Its AWX job template name.
      type: str
    awx_survey:
      description: Its AWX survey, relative to C(extensions/awx/).
      type: str
"""

from ansible.errors import AnsibleFilterError

from ansible_collections.llmops.sglang.plugins.module_utils import stages


def stage(name: str) -> dict:
    try:
        return stages.as_dict(stages.get(name))
    except ValueError as exc:
        raise AnsibleFilterError(f"stage: {exc}") from exc


class FilterModule:
    def filters(self) -> dict:
        return {"stage": stage}
