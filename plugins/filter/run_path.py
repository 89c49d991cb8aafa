# Copyright (c) llmops.sglang contributors
# Apache License 2.0 (see LICENSE)
from __future__ import annotations

DOCUMENTATION = r"""
name: run_path
short_description: A place in a tuning run directory, as the run directory's layout declares it
version_added: 2.1.0
author: llmops.sglang contributors (@llmops)
description:
  - The one way the collection's playbooks and roles name a folder or record of a run directory
    (docs/run-directory.md, "Layout"); the layout is declared once, in C(plugins/plugin_utils/run_dir.py).
  - Fails naming the known stages or records when O(stage) or O(record) is not one of them, and when O(host) or
    O(measurement) is not a plain folder name.
options:
  _input:
    description: The run directory (C(tuning_run_dir)).
    type: path
    required: true
  stage:
    description: A stage of the stage registry (or C(upgrade)); omitted, the place is the run's own.
    type: str
  host:
    description:
      - The host whose folder of O(stage) is meant; a list of hosts gives the list of their paths.
    type: raw
  measurement:
    description:
      - A measured candidate of O(stage) on O(host), in the folder where the stage registry says the stage keeps its
        candidates (C(measurements)), that is a flag trial's name or a re-verified search candidate's.
    type: str
  record:
    description:
      - A record there by the name the layout knows it by, e.g. V(run), V(stage), V(adopted), V(sweep), V(facts),
        V(provenance), V(configs); omitted, the folder itself.
    type: str
  adopted:
    description:
      - An adopted configuration (C(tuning_run_adopted)) instead of O(stage) and O(host); the place is the folder of
        the measurement it was adopted from (where its C(sweep_file) lies), with O(record) a record of it.
    type: dict
"""

EXAMPLES = r"""
- name: Skip hosts that finished this stage in this run
  ansible.builtin.meta: end_host
  when: (tuning_run_dir | llmops.sglang.run_path(stage=tuning_run_stage, host=inventory_hostname, record='stage')) is file

- name: Read the baseline's sweep
  ansible.builtin.set_fact:
    baseline_sweep: >-
      {{ lookup('ansible.builtin.file', tuning_run_dir | llmops.sglang.run_path(stage='baseline', host=inventory_hostname,
         record='sweep')) | from_json }}

- name: Read the facts of the measurement the adopted configuration was adopted from
  ansible.builtin.set_fact:
    adopted_facts: "{{ lookup('ansible.builtin.file', tuning_run_dir | llmops.sglang.run_path(adopted=tuning_run_adopted, record='facts')) | from_json }}"

- name: Where a flag trial is measured
  ansible.builtin.set_fact:
    trial_dir: "{{ tuning_run_dir | llmops.sglang.run_path(stage='flags', host=inventory_hostname, measurement='fusion') }}"
"""

RETURN = r"""
_value:
  description:
    - The path, e.g. C(runs/r1/flags/gpu1/trials/fusion) or C(runs/r1/baseline/gpu1/sweep.json); a list of paths, one
      per host, when O(host) is a list.
  type: raw
"""

from ansible.errors import AnsibleFilterError

from ansible_collections.llmops.sglang.plugins.plugin_utils import adoption, run_dir


def run_path(directory: str, stage: str | None = None, host: str | list | None = None, measurement: str | None = None,
             record: str | None = None, adopted: dict | None = None) -> str | list[str]:
    try:
        if adopted is not None:
            if stage is not None or host is not None or measurement is not None or record is None:
                raise ValueError("adopted names the measurement: give it a record, and no stage, host or measurement")
            return str(adoption.evidence_path(directory, adopted, record))
        if isinstance(host, list):
            return [str(run_dir.path(directory, stage, name, measurement=measurement, record=record)) for name in host]
        return str(run_dir.path(directory, stage, host, measurement=measurement, record=record))
    except (ValueError, KeyError) as exc:
        raise AnsibleFilterError(f"run_path: {exc}") from exc


class FilterModule:
    def filters(self) -> dict:
        return {"run_path": run_path}
