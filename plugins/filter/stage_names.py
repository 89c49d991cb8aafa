# Copyright (c) llmops.sglang contributors
# Apache License 2.0 (see LICENSE)
from __future__ import annotations

DOCUMENTATION = r"""
name: stage_names
short_description: The names of the stages that have a property, in run order
version_added: 1.0.0
author: llmops.sglang contributors (@llmops)
description:
  - The stages of the stage registry (C(plugins/module_utils/stages.py)) for which a boolean property is true, in
    the order a run goes through them.
  - Fails naming the properties when the input or O(without) is not one of them.
options:
  _input:
    description: The property.
    type: str
    required: true
    choices: [routine, records, adopts, reads_adopted, guarded, stops_servers, selected_by_default, workflow, forceable]
  without:
    description:
      - A property the stages must not have, as in V(without=selected_by_default) for the routine's stages that run
        only when selected.
    type: str
    choices: [routine, records, adopts, reads_adopted, guarded, stops_servers, selected_by_default, workflow, forceable]
"""

EXAMPLES = r"""
- name: Force every stage that can be forced
  ansible.builtin.set_fact:
    tuning_run_forced: "{{ 'forceable' | llmops.sglang.stage_names }}"

- name: List the routine's stages that run only when selected (or when their inputs are set)
  ansible.builtin.debug:
    msg: "{{ 'routine' | llmops.sglang.stage_names(without='selected_by_default') }}"
"""

RETURN = r"""
_value:
  description: Stage names, in run order.
  type: list
  elements: str
"""

from ansible.errors import AnsibleFilterError

from ansible_collections.llmops.sglang.plugins.module_utils import stages


def stage_names(prop: str, without: str | None = None) -> list:
    for name in (prop, without):
        if name is not None and name not in stages.PROPERTIES:
            raise AnsibleFilterError(f"stage_names: {name!r} is not a stage property; properties are "
                                     f"{', '.join(stages.PROPERTIES)}")
    return [stage.name for stage in stages.STAGES if getattr(stage, prop) and not (without and getattr(stage, without))]


class FilterModule:
    def filters(self) -> dict:
        return {"stage_names": stage_names}
