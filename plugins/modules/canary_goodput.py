#!/usr/bin/python
# Copyright (c) llmops.sglang contributors
# Apache License 2.0 (see LICENSE)
from __future__ import annotations

DOCUMENTATION = r"""
---
module: canary_goodput
short_description: Internal - one step of the upgrade canary's goodput under the run's SLO - the next probe or the answer
version_added: 2.2.0
description:
  - Internal to the collection's stage playbooks (C(playbooks/upgrade.yml), role C(llmops.sglang.upgrade)), not an
    interface for playbooks of your own; its options may change in any release.
  - When the run has an SLO (C(tuning_run_search)), the canary measures each release's goodput under it on the server
    start of its throughput sweep; the playbook runs M(llmops.sglang.bench) for each probe, this action says which
    probe comes next and records what came back in the measurement's directory (O(dir)), namely C(goodput.json)
    (the probes' log, the planned probe, the result) and each probe's sweep under C(probes/).
  - Phase V(old), the serving release - the highest open-loop request rate at which every run meets the SLO, by the
    search stage's rate search with O(search)'s C(workload) and C(rate) options.
  - Phase V(new), the new release - whether every one of C(rate.repeats) runs meets the SLO at the serving release's
    rate less C(max_goodput_loss_pct) of O(policy); one probe. Its result's C(held) is V(null) when nothing could be
    compared (the serving release met the SLO at no rate, or the benchmark client could not drive the rate).
  - The first step of a phase (no O(sweep)) starts it over. Errors in O(search) or O(policy) name the field.
author:
  - llmops.sglang contributors (@llmops)
extends_documentation_fragment:
  - llmops.sglang.attributes.CONTROLLER
attributes:
  check_mode:
    description: Answers as it would and writes nothing.
    support: full
options:
  phase:
    description: Which release is measured.
    type: str
    required: true
    choices: [old, new]
  dir:
    description: The measurement's directory (C(runs/<run_id>/upgrade/<host>/canary/<old|new>)).
    type: path
    required: true
  search:
    description: The run's search inputs (C(tuning_run_search)); their C(slo), C(workload) and C(rate) are used.
    type: dict
    required: true
  policy:
    description: The canary's policy (C(upgrade_canary_policy)); its C(max_goodput_loss_pct) (default V(5)) sets phase V(new)'s rate.
    type: dict
    default: {}
  reference:
    description: Phase V(new) only - phase V(old)'s RV(result).
    type: dict
  sweep:
    description: The M(llmops.sglang.bench) result's C(sweep) of the probe planned by the previous step; none for the first step.
    type: dict
"""

EXAMPLES = r"""
---
- name: Plan the serving release's first probe
  llmops.sglang.canary_goodput:
    phase: old
    dir: "{{ tuning_run_dir }}/upgrade/{{ inventory_hostname }}/canary/old"
    search: "{{ tuning_run_search }}"
  register: goodput_step
"""

RETURN = r"""
done:
  description: The phase is answered (RV(result)); otherwise RV(probe) and RV(bench) say what to measure next.
  returned: always
  type: bool
max_probes:
  description: The most probes of this phase (the playbook's loop length).
  returned: always
  type: int
probe:
  description: The next probe, C(rate_rps), C(repeats), C(phase) (bracket, bisect, confirm; check for phase new).
  returned: when not done
  type: dict
bench:
  description: Options of M(llmops.sglang.bench) for that probe (the workload at one open-loop rate, under the SLO).
  returned: when not done
  type: dict
result:
  description:
    - Phase old - the rate search's result (C(rate_rps), C(estimate_rps), C(goodput_rps), C(bracket), C(reason),
      C(probes), C(cost)) and the C(slo).
    - Phase new - C(rate_rps) (the rate it was held to), C(held), C(runs), C(failed_runs), C(goodput_rps) (median),
      C(worst_margin), C(max_loss_pct), C(reason) (why nothing was compared), C(probes), C(slo).
  returned: when done
  type: dict
written:
  description: The records written.
  returned: always
  type: list
  elements: str
"""
