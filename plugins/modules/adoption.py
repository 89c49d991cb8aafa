#!/usr/bin/python
# Copyright (c) llmops.sglang contributors
# Apache License 2.0 (see LICENSE)
from __future__ import annotations

DOCUMENTATION = r"""
---
module: adoption
short_description: Internal - the configuration a tuning stage starts from, the verdict on a measurement, what is adopted after it
version_added: 2.0.0
description:
  - Internal to the collection's stage playbooks (role C(llmops.sglang.tuning_run)), not an interface for
    playbooks of your own; its options may change in any release.
  - The one adoption policy of every stage of a tuning run (docs/run-directory.md, "Adopted configuration").
  - O(step=load) finds the configuration adopted so far on the host, the C(adopted.json) of the most recent stage
    before O(stage) that recorded one (the stage registry's C(adopted_from)); fails naming the fix when the stage
    compares against one and none is recorded.
  - O(step=decide) compares a measurement with the adopted configuration's sweep (P(llmops.sglang.compare_sweeps#filter)),
    diffs what the server set differently from the adopted configuration's facts
    (P(llmops.sglang.server_args_diff#filter)), applies the decision policy (P(llmops.sglang.trial_decision#filter)),
    records C(comparison.json), C(side_effects.json) and C(decision.json) next to the measurement and returns the
    configuration adopted after it. A failed measurement, or tuned MoE configs the server still reports missing,
    is reverted. In check mode nothing was measured, so nothing is decided or recorded.
  - With O(restart_check), an adoption that the noise between two server starts could explain is not made yet;
    RV(restart_check_levels) names the improved levels to measure again on a fresh start of the candidate, and a
    second O(step=decide) with that measurement as O(restarted) decides (docs/run-directory.md, "Restart check";
    C(restart_check.json) records it).
  - O(step=adopt) returns the record of a measured configuration adopted without a comparison (the baseline, or the
    search's re-verified winner, whose verdict the search made).
  - O(step=record) records O(adopted) as what O(stage) adopted on the host, the C(adopted.json) that O(step=load) of
    a later stage reads; without O(adopted) it removes the one an earlier attempt of the stage recorded. The
    tuning_run role's finish.yml records it before the stage's C(stage.json).
author:
  - llmops.sglang contributors (@llmops)
extends_documentation_fragment:
  - llmops.sglang.attributes.CONTROLLER
attributes:
  check_mode:
    description: O(step=decide) decides and records nothing, O(step=record) records nothing; the other steps only read.
    support: full
options:
  step:
    description: What to do.
    type: str
    required: true
    choices: [load, decide, adopt, record]
  run_dir:
    description: The run directory on the controller (C(runs/<run_id>)).
    type: path
    required: true
  stage:
    description: The stage asking (a name of the stage registry); the stage an adopted record names.
    type: str
    required: true
  host:
    description:
      - The host whose records are read (O(step=load)) or written (O(step=record)); default the task's
        C(inventory_hostname).
    type: str
  measured:
    description:
      - The measurement (what the tuning_run role's measure.yml keeps as C(tuning_run_measured)); O(step=decide)
        reads C(dir), C(failure), C(facts), C(sweep), C(requested_args), C(environment); O(step=adopt) reads C(dir),
        C(requested_args) and C(environment).
      - Required for O(step=decide) and O(step=adopt).
    type: dict
  adopted:
    description:
      - The configuration adopted so far (RV(adopted) of O(step=load)); required for O(step=decide). With
        O(step=adopt), the tuned MoE configs it runs with carry over.
      - With O(step=load), what an earlier play of the same run adopted, used when the run directory records none
        (check mode records nothing).
      - With O(step=record), what the stage adopted (V(null) when it adopted nothing).
    type: dict
  compare:
    description: Options of P(llmops.sglang.compare_sweeps#filter) (C(tuning_run_compare)).
    type: dict
    default: {}
  policy:
    description: The decision policy of P(llmops.sglang.trial_decision#filter) (C(tuning_run_policy)).
    type: dict
    default: {}
  moe_configs:
    description:
      - The tuned MoE config file names installed for this measurement (the MoE stage); the server must no longer
        report them missing, and an adopted record runs with them. Default those of O(adopted).
    type: list
    elements: str
  restart_check:
    description:
      - The restart check's options (C(tuning_run_restart_check)), V(null) for none. C(cv_pct) is the spread of one
        configuration's throughput between server starts (in %, default V(0.6)), C(repeats) the runs per level on the
        fresh start (default V(3)).
      - A mapping or null, so the type is raw; bad keys or values fail the task naming them.
    type: raw
  restarted:
    description:
      - The restart check's measurement, the candidate restarted as it was and measured at RV(restart_check_levels)
        of the first O(step=decide) (the same keys as O(measured)). With it the step decides whether the adoption
        stands; a failed one reverts.
    type: dict
"""

EXAMPLES = r"""
---
- name: Load the configuration adopted so far
  llmops.sglang.adoption:
    step: load
    run_dir: "{{ tuning_run_dir }}"
    stage: flags
  register: loaded

- name: Decide on a measured candidate
  llmops.sglang.adoption:
    step: decide
    run_dir: "{{ tuning_run_dir }}"
    stage: flags
    measured: "{{ tuning_run_measured }}"
    adopted: "{{ loaded.adopted }}"
    policy: {max_capacity_loss_pct: 10}
    restart_check: {cv_pct: 0.6, repeats: 3}
  register: verdict

- name: Say it
  ansible.builtin.debug:
    msg: "{{ verdict.lines }}"  # revert: within noise (-1.0% .. +0.3% across levels); capacity dropped 46% ...
"""

RETURN = r"""
adopted:
  description:
    - The configuration adopted after this step (O(step=load) the one so far, V(null) when none is recorded).
  returned: always
  type: dict
  contains:
    stage:
      description: The stage that adopted it.
      type: str
    args:
      description: Its server args.
      type: dict
    environment:
      description: Its server environment.
      type: dict
    moe_configs:
      description: The tuned MoE config file names it runs with.
      type: list
      elements: str
    sweep_file:
      description: Its sweep, relative to the run directory.
      type: str
    facts_file:
      description: Its server facts, relative to the run directory.
      type: str
  sample: {stage: flags, args: {tp_size: 4}, environment: {}, moe_configs: [], sweep_file: flags/gpu1/trials/fusion/sweep.json,
           facts_file: flags/gpu1/trials/fusion/facts.json}
adopt:
  description: Whether the measurement was adopted.
  returned: step=decide
  type: bool
comparison:
  description: The comparison (P(llmops.sglang.compare_sweeps#filter)); V(null) for a failed measurement.
  returned: step=decide
  type: dict
side_effects:
  description: What the server set differently (P(llmops.sglang.server_args_diff#filter)); V(null) when it failed.
  returned: step=decide
  type: dict
decision:
  description: The decision (P(llmops.sglang.trial_decision#filter)).
  returned: step=decide
  type: dict
failure:
  description: Why the measurement is reverted without a comparison, or V(null).
  returned: step=decide
  type: str
restart_check:
  description:
    - The restart check of an adoption (C(needed), C(reason), per improved level the change, its lower bound with the
      restart noise counted, the threshold and the half of it a fresh start has to show, and after the check its
      C(check_pct) and C(passed); C(confirmed)); V(null) when nothing was about to be adopted or no check is set.
  returned: step=decide
  type: dict
restart_check_levels:
  description: The levels to measure again on a fresh start before the adoption is decided; empty when none.
  returned: step=decide
  type: list
  elements: int
restart_check_dir:
  description:
    - Where the restart check's measurement is recorded, inside the candidate's measurement directory. The first
      decision on a measurement removes what an earlier attempt's check left there.
  returned: step=decide
  type: str
lines:
  description: The decision's summary and the comparison's table, a line each.
  returned: step=decide
  type: list
  elements: str
written:
  description: The C(adopted.json) written (none when it held the same already, or in check mode).
  returned: step=record
  type: list
  elements: str
removed:
  description: The C(adopted.json) of an earlier attempt removed because the stage adopted nothing this time.
  returned: step=record
  type: list
  elements: str
"""
