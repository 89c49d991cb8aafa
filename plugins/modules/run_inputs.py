#!/usr/bin/python
# Copyright (c) llmops.sglang contributors
# Apache License 2.0 (see LICENSE)
from __future__ import annotations

DOCUMENTATION = r"""
---
module: run_inputs
short_description: Internal - check a tuning run's inputs before a stage deploys anything
version_added: 1.0.0
description:
  - Internal to the collection's stage playbooks (role C(llmops.sglang.tuning_run)), not an interface for
    playbooks of your own; its options may change in any release.
  - Checks the variables a tuning stage works with - the stages to run and to force, the benchmark options, the
    comparison options, the decision policy, the MoE settings, the candidate flag sets and the baseline args - and
    fails with one message per problem, naming the variable and the element, what is expected and what was given
    (for example V(tuning_run_bench.concurrency_levels[0]) must be a positive integer, got 0).
  - Every stage of the tuning pipeline runs it first (role C(tuning_run), C(stage.yml)), so an input that cannot
    work stops the stage before any server is deployed, instead of surfacing later as a candidate's failure.
  - Values are judged the way Ansible module arguments are converted (V("5") is an integer, V("yes") a boolean,
    V("1,4") a list).
  - Runs entirely on the controller (action plugin); nothing is sent to the managed host.
author:
  - llmops.sglang contributors (@llmops)
attributes:
  action:
    description: Runs on the controller.
    support: full
  check_mode:
    description: Checks in check mode too; it changes nothing either way.
    support: full
  diff_mode:
    description: Nothing to diff.
    support: none
options:
  run_id:
    description:
      - The run id (C(-e run_id), C(tuning_run_id)), the run's directory under O(runs_root). 1 to 128 letters, digits,
        C(.), C(_) or C(-), starting with a letter or digit; with O(runs_root), the directory it resolves to (links
        followed) must be right under the resolved runs root.
    type: raw
    version_added: 2.1.0
  runs_root:
    description: Where runs live (C(tuning_run_root)); see O(run_id).
    type: path
    version_added: 2.1.0
  stages:
    description: Stages to run (C(tuning_run_stages), C(-e stages)), a list or a comma-separated string.
    type: raw
  force:
    description: Stages to run again (C(tuning_run_force), C(-e force)), a list, a comma-separated string or a boolean.
    type: raw
  bench:
    description:
      - Options of M(llmops.sglang.bench) (C(tuning_run_bench)). Unknown keys and keys the pipeline sets itself
        (C(base_url), C(host), C(port), C(api_key), C(output_file), C(progress_file)) are errors.
    type: raw
  compare:
    description: Options of P(llmops.sglang.compare_sweeps#filter) (C(tuning_run_compare)).
    type: raw
  sequential:
    description:
      - The candidates' stopping rule (C(tuning_run_sequential)), a mapping of M(llmops.sglang.bench)'s C(sequential)
        keys C(min_repeats) (at least 2), C(max_repeats), C(spending), C(futility_spending), C(beta),
        C(stop_on_regression), C(one_sided_stops); null is not checked (fixed repeats).
    type: raw
  restart_check:
    description:
      - The restart check of adoptions (C(tuning_run_restart_check)), a mapping of C(cv_pct) (above 0, at most 10)
        and C(repeats) (2 to 10); null is not checked (no restart check).
    type: raw
  policy:
    description: Decision policy of P(llmops.sglang.trial_decision#filter) (C(tuning_run_policy)).
    type: raw
  moe:
    description: MoE stage settings (C(tuning_run_moe)).
    type: raw
  flag_sets:
    description:
      - Candidate flag sets (C(sglang_candidate_flag_sets)), a list of C({name, args}) with an optional boolean
        C(force). Names must be unique and usable as a directory name; args a non-empty mapping of server arg names
        whose values hold no control character (a line break would end its setting in the unit file).
    type: raw
  baseline_args:
    description:
      - Baseline server args (C(sglang_baseline_args)), a mapping of server arg names; values without control characters.
    type: raw
  environment:
    description:
      - The service environment of the baseline (C(sglang_environment)), a mapping of variable names
        (C([A-Za-z_][A-Za-z0-9_]*)) to values without control characters.
    type: raw
  skip_ineffective:
    description: Whether flag candidates the preflight found ineffective are skipped (C(tuning_run_skip_ineffective)), a boolean.
    type: raw
  emulator_time_scale:
    description:
      - Time scales of an emulated server (C(tuning_run_emulator_time_scale)), V(null) or C({serving, tuning, startup}) with
        numbers above 0 (C(serving) required).
    type: raw
  inventory_hosts:
    description: Hosts of the inventory; C(tuning_run_moe.tune_hosts) must name some of them.
    type: list
    elements: str
  service_name:
    description:
      - The SGLang service's name as the stages resolve it (C(sglang_service_name), lookup
        P(llmops.sglang.service_name#lookup)); it must be a systemd service name without C(.service) - not empty, not
        C(.) or C(..), no C(/), no control character (letters, digits, C(_), C(.), C(:) and C(-), the first a letter,
        digit or C(_)), the error naming V(sglang_service_name).
    type: raw
    version_added: 2.1.0
  search:
    description:
      - Inputs of the search stage (C(tuning_run_search)), C(knobs), C(budget), C(slo), C(workload), C(rate),
        C(verify), C(seed); each error names the field (for example V(tuning_run_search.budget.max_restarts)).
    type: raw
  variables:
    description:
      - Names of the variables set for the host (C(query('ansible.builtin.varnames', '^(tuning_run|sglang)_'))).
      - A name with the collection's prefix C(tuning_run_) or C(sglang_) that no role or playbook of the collection
        reads is an error naming the closest input the roles declare (for example V(tuning_run_polcy), did you mean
        V(tuning_run_policy)?), as Ansible would otherwise ignore it silently.
    type: list
    elements: str
    default: []
    version_added: 2.1.0
  search_selected:
    description: Whether the search stage is about to run; then O(search) must be set.
    type: raw
    default: false
  llmops_run_id:
    description:
      - The run id given under its old name C(llmops_run_id) (what earlier releases published with C(set_stats) for
        AWX workflow nodes). Set, it gives a deprecation warning; the run id is C(run_id) (role C(tuning_run)'s
        C(tuning_run_id)), and C(llmops_run_id) is no longer read from 3.0.0 on.
    type: str
    version_added: 2.0.0
"""

EXAMPLES = r"""
---
- name: Check the run's inputs
  llmops.sglang.run_inputs:
    stages: "{{ tuning_run_stages }}"
    force: "{{ tuning_run_force }}"
    bench: "{{ tuning_run_bench }}"
    compare: "{{ tuning_run_compare }}"
    sequential: "{{ tuning_run_sequential }}"
    restart_check: "{{ tuning_run_restart_check }}"
    policy: "{{ tuning_run_policy }}"
    moe: "{{ tuning_run_moe }}"
    flag_sets: "{{ sglang_candidate_flag_sets | default(omit) }}"
    environment: "{{ sglang_environment | default(omit) }}"
    inventory_hosts: "{{ groups['all'] }}"
    service_name: "{{ lookup('llmops.sglang.service_name') }}"
    variables: "{{ query('ansible.builtin.varnames', '^(tuning_run|sglang)_') }}"
"""

RETURN = r"""
checked:
  description: The inputs that were checked.
  returned: always
  type: list
  elements: str
  sample: [bench, compare, flag_sets, force, moe, policy, stages]
errors:
  description: One message per problem (also joined in the failure message when the task fails).
  returned: always
  type: list
  elements: str
  sample: ["tuning_run_bench.concurrency_levels[0]: must be a positive integer, got 0"]
"""
