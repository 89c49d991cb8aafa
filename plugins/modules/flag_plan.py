#!/usr/bin/python
# Copyright (c) llmops.sglang contributors
# Apache License 2.0 (see LICENSE)
from __future__ import annotations

DOCUMENTATION = r"""
---
module: flag_plan
short_description: Internal - the flags stage's plan of one candidate, from what the preflight found
version_added: 2.0.0
description:
  - Internal to the collection's stage playbooks (the flags stage, role C(llmops.sglang.tuning_run)'s
    C(flag_trial.yml)), not an interface for playbooks of your own; its options may change in any release.
  - Reads what the preflight of this run found on the host (C(preflight/<host>/flag_findings.json) and the SGLang
    release of its C(environment.json); nothing when the preflight did not run) and decides, as
    P(llmops.sglang.flag_trial_plan#filter) does, whether the candidate is measured.
  - Records it in the candidate's trial folder, as P(llmops.sglang.run_record#module) writes a record - a skipped
    candidate's C(decision.json) (and no records an earlier measurement of it left), a measured candidate's
    C(findings.json) when the preflight found something about its flags (none otherwise).
  - Runs entirely on the controller (action plugin); nothing is sent to the managed host.
author:
  - llmops.sglang contributors (@llmops)
extends_documentation_fragment:
  - llmops.sglang.attributes.CONTROLLER
attributes:
  check_mode:
    description: Plans and returns the same, and writes nothing.
    support: full
  idempotent:
    description: Unchanged records are not rewritten and do not count as a change.
    support: full
options:
  run_dir:
    description: The run directory (C(tuning_run_dir)).
    type: path
    required: true
  stage:
    description: The stage whose trial folder holds the candidate's records (C(tuning_run_stage)).
    type: str
    required: true
  candidate:
    description: The candidate, C({name, args, force}) from C(sglang_candidate_flag_sets).
    type: dict
    required: true
  skip_ineffective:
    description: Skip ineffective candidates (C(tuning_run_skip_ineffective)); false measures them all.
    type: raw
    default: true
  host:
    description: The host planned for; default the task's C(inventory_hostname).
    type: str
"""

EXAMPLES = r"""
---
- name: Ask what the preflight found about the candidate
  llmops.sglang.flag_plan:
    run_dir: "{{ tuning_run_dir }}"
    stage: "{{ tuning_run_stage }}"
    candidate: "{{ tuning_run_trial }}"
    skip_ineffective: "{{ tuning_run_skip_ineffective }}"
  register: tuning_run_trial_plan
"""

RETURN = r"""
skip:
  description: Whether the candidate is not measured.
  returned: always
  type: bool
ineffective:
  description: Whether the preflight found that none of the candidate's flags can take effect here.
  returned: always
  type: bool
forced_by:
  description: What has an ineffective candidate measured anyway (C(force) on it, or C(tuning_run_skip_ineffective)).
  returned: always
  type: str
decision:
  description: A skipped candidate's decision (C(summary) the reason); see P(llmops.sglang.flag_trial_plan#filter).
  returned: when O(candidate) is skipped
  type: dict
findings:
  description: What the preflight found about the candidate's flags.
  returned: always
  type: list
  elements: dict
dir:
  description: The candidate's trial folder in the run directory.
  returned: always
  type: str
written:
  description: Records whose content changed (written unless in check mode).
  returned: always
  type: list
  elements: str
removed:
  description: Records that existed and were removed (unless in check mode).
  returned: always
  type: list
  elements: str
"""
