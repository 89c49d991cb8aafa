#!/usr/bin/python
# Copyright (c) llmops.sglang contributors
# Apache License 2.0 (see LICENSE)
from __future__ import annotations

DOCUMENTATION = r"""
---
module: moe_plan
short_description: Internal - the MoE stage's plan on one host, recorded as targets.json, and its estimate
version_added: 2.0.0
description:
  - Internal to the collection's stage playbooks (the MoE stage, C(playbooks/moe_tune.yml)), not an interface for
    playbooks of your own; its options may change in any release.
  - O(step=targets) derives the fused-MoE config files to tune from the model, the GPU and Triton and checks them
    against those the server reported missing in the adopted configuration's C(facts.json)
    (P(llmops.sglang.moe_targets#filter), which fails naming both lists when they disagree); chooses the targets (what
    the server misses; with C(force), every derived file); whether the down kernel is tuned (a down target, and the
    engine or a release whose checkout has SGLang's down tuner); the host's part in the tuning cluster of
    C(tune_hosts) (the first is the head that runs the tuner over every GPU of the cluster, the others install its
    result; a host not listed tunes alone); and the arguments of the stage's P(llmops.sglang.moe_tune#module) tasks.
    Records the plan with the chosen targets (C(tuned)) as C(targets.json) in O(dir), as
    P(llmops.sglang.run_record#module) writes a record.
  - O(step=cluster) fails naming each host's files when the hosts of the tuning cluster need different files (one
    tuner run serves them all).
  - O(step=estimate) estimates the stage's GPU-minutes before the server stops, as
    P(llmops.sglang.moe_cost_estimate#filter) does, and records it as C(estimate.json) in O(dir).
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
    description: An unchanged record is not rewritten and does not count as a change.
    support: full
options:
  step:
    description: What to plan.
    type: str
    choices: [targets, cluster, estimate]
    default: targets
  dir:
    description: The stage's directory of the host in the run directory (C(tuning_run_stage_dir)); required for
      O(step=targets) and O(step=estimate).
    type: path
  run_dir:
    description:
      - The run directory (C(tuning_run_dir)); required for O(step=targets). The adopted configuration's
        C(facts.json) and C(cost.json) are read there, and the engine's cache lives beside it (C(cache/moe-engine))
        unless C(settings.cache_dir) says otherwise.
    type: path
  adopted:
    description: The configuration adopted so far (C(tuning_run_adopted)); required for O(step=targets).
    type: dict
  settings:
    description:
      - The stage's settings (C(tuning_run_moe)) - C(engine), C(force), C(tune_hosts), C(work_dir), C(timeout),
        C(search_space), C(batch_sizes), C(cache), C(cache_dir), C(seconds_per_config).
    type: dict
    default: {}
  env:
    description: The result of P(llmops.sglang.sglang_env_facts#module) (C(model.config), C(model.moe_shape),
      C(versions), C(tuner.scripts)); required for O(step=targets).
    type: dict
  gpus:
    description: The C(summary) of P(llmops.sglang.gpu_facts#module) (C(name), C(count), C(spec)); required for
      O(step=targets).
    type: dict
  gpu_spec:
    description: The GPU's spec (C(sglang_gpu_spec)) where it overrides the one of O(gpus).
    type: dict
  source_dir:
    description: The SGLang checkout whose tuner runs (C(sglang_source_dir)).
    type: path
  model_path:
    description: The model's path on the host (C(sglang_model_path)); required for O(step=targets).
    type: str
  host:
    description: The host planned for; default the task's C(inventory_hostname).
    type: str
  plan:
    description: This host's plan (O(step=targets)'s result); required for O(step=cluster) and O(step=estimate).
    type: dict
  plans:
    description: The plans of the tuning cluster's hosts in their order (none outside a cluster); required for
      O(step=cluster) and O(step=estimate).
    type: list
    elements: dict
  up:
    description: The result of P(llmops.sglang.moe_tune#module) planning the up kernel's tuning in check mode;
      required for O(step=estimate).
    type: dict
"""

EXAMPLES = r"""
---
- name: Plan the MoE stage and record the targets
  llmops.sglang.moe_plan:
    dir: "{{ tuning_run_stage_dir }}"
    run_dir: "{{ tuning_run_dir }}"
    adopted: "{{ tuning_run_adopted }}"
    settings: "{{ tuning_run_moe }}"
    env: "{{ moe_env }}"
    gpus: "{{ moe_gpus.summary }}"
    source_dir: "{{ sglang_source_dir }}"
    model_path: "{{ sglang_model_path }}"
  register: moe_plan

- name: Require the same targets on every host of the tuning cluster
  llmops.sglang.moe_plan:
    step: cluster
    plan: "{{ moe_plan }}"
    plans: "{{ moe_plan.cluster.hosts | map('extract', hostvars, 'moe_plan') }}"
  when: moe_plan.cluster.in_cluster
"""

RETURN = r"""
plan:
  description: The result of P(llmops.sglang.moe_targets#filter) (C(targets), C(derived), C(tuner_args), C(message), ...).
  returned: O(step=targets)
  type: dict
targets:
  description: The config files to tune (each with C(kernel), C(file_name), ...); empty when there is nothing to tune.
  returned: O(step=targets)
  type: list
  elements: dict
spec:
  description: The GPU's spec (C(mem_bandwidth_gbs), C(smem_per_block), ...), O(gpu_spec) or that of O(gpus).
  returned: O(step=targets)
  type: dict
tunes_down:
  description: Whether the down kernel is tuned.
  returned: O(step=targets)
  type: bool
cluster:
  description:
    - The host's part in the tuning cluster. C(hosts) the tune hosts, C(in_cluster) whether the host is one,
      C(head) the host that runs the tuner (the host itself when not in the cluster), C(tunes_here) whether that is
      this host.
  returned: O(step=targets)
  type: dict
tuner:
  description:
    - The arguments of the stage's P(llmops.sglang.moe_tune#module) tasks - C(up), C(down) (each kernel's tuning) and
      C(benchmark) (the kernel benchmark) - without the C(environment), the down kernel's C(gate_up_config) and the
      C(batch_sizes) the up kernel was tuned at, which only the tasks know. Empty when there is nothing to tune.
  returned: O(step=targets)
  type: dict
configs_dir:
  description: Where the run directory keeps the tuned configs of this host (its C(configs) folder on the controller).
  returned: O(step=targets)
  type: str
head_configs_dir:
  description: The C(configs) folder of the tuning cluster's head, which the other tune hosts install from.
  returned: O(step=targets)
  type: str
gpu_count:
  description: The host's GPUs (the C(count) of O(gpus)).
  returned: O(step=targets)
  type: int
cost_inputs:
  description: What the estimate (O(step=estimate)) takes from the plan (the adopted configuration's facts, args,
    environment and measured cost, the engine, the down kernel, the block shape).
  returned: O(step=targets)
  type: dict
estimate:
  description: The stage's estimate (what P(llmops.sglang.moe_cost_estimate#filter) returns, with C(summary)).
  returned: O(step=estimate)
  type: dict
path:
  description: The path of the record, C(targets.json) or C(estimate.json).
  returned: O(step=targets) and O(step=estimate)
  type: str
written:
  description: The record when its content changed (written unless in check mode).
  returned: O(step=targets) and O(step=estimate)
  type: list
  elements: str
"""
