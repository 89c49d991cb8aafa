# Copyright (c) llmops.sglang contributors
# Apache License 2.0 (see LICENSE)
from __future__ import annotations

DOCUMENTATION = r"""
name: flag_trial_plan
short_description: Whether a flag candidate is worth measuring, from what the preflight found
version_added: 1.0.0
description:
  - A candidate whose every flag the preflight found will not take effect on this GPU, model and SGLang
    (P(llmops.sglang.flag_compatibility#filter), recorded in C(flag_findings.json)) cannot help; measuring it costs a
    restart and a sweep. It is skipped, with the findings as the reason, unless C(force) is true on the candidate or
    O(skip_ineffective) is false.
  - A candidate with an effective flag among ineffective ones is measured (the findings are reported with it).
author:
  - llmops.sglang contributors (@llmops)
options:
  _input:
    description: The candidate, C({name, args, force}) from C(sglang_candidate_flag_sets).
    type: dict
    required: true
  findings:
    description: The preflight's findings by candidate name (C(flag_findings.json)); a missing name has none.
    type: dict
    required: true
  skip_ineffective:
    description: Skip ineffective candidates (C(tuning_run_skip_ineffective)); false measures them all.
    type: bool
    default: true
  sglang_version:
    description: The installed SGLang release (its names of renamed flags), as the preflight found it.
    type: str
"""

EXAMPLES = r"""
- name: Plan a trial
  ansible.builtin.set_fact:
    plan: "{{ candidate | llmops.sglang.flag_trial_plan(findings, sglang_version='0.5.11') }}"
"""

RETURN = r"""
_value:
  description:
    - C(skip), C(ineffective), C(findings) (about the candidate's own flags), C(forced_by) (what made an
      ineffective candidate be measured, or null) and, when skipped, C(decision) (C(action) V(skip), C(reasons),
      C(summary)) for C(decision.json), and C(records), the records of the skipped trial for
      M(llmops.sglang.run_record) (its decision; none of a measurement an earlier attempt made).
  type: dict
  sample: {skip: true, ineffective: true, forced_by: null, findings: [{id: allreduce-fusion-arch}]}
"""

from ansible.errors import AnsibleFilterError
from ansible_collections.llmops.sglang.plugins.plugin_utils.flag_plan import candidate_plan


def flag_trial_plan(candidate, findings, skip_ineffective=True, sglang_version=None):
    try:
        return candidate_plan(candidate, findings, skip_ineffective, sglang_version)
    except ValueError as exc:
        raise AnsibleFilterError(f"flag_trial_plan: {exc}") from exc


class FilterModule:
    def filters(self):
        return {"flag_trial_plan": flag_trial_plan}
