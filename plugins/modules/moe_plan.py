#!/usr/bin/python
# Copyright (c) llmops.sglang contributors
# Apache License 2.0 (see LICENSE)
from __future__ import annotations

DOCUMENTATION = r"""
---
module: moe_plan
short_description: Internal - the MoE stage's plan on one host, recorded as targets.json
version_added: 2.0.0
description:
  - Internal to the collection's stage playbooks (the MoE stage, C(playbooks/moe_tune.yml)), not an interface for
    playbooks of your own; its options may change in any release.
  - Derives the fused-MoE config files to tune from the model, the GPU and Triton and checks them against those the
    server reported missing (P(llmops.sglang.moe_targets#filter), which fails naming both lists when they disagree);
    chooses the targets (what the server misses; with O(force), every derived file); whether the down kernel is
    tuned (a down target, and the engine or a release whose checkout has SGLang's down tuner); and the host's part
    in the tuning cluster of O(tune_hosts) (the first is the head that runs the tuner over every GPU of the
    cluster, the others install its result; a host not listed tunes alone).
  - Records the plan with the chosen targets (C(tuned)) as C(targets.json) in O(dir), as
    P(llmops.sglang.run_record#module) writes a record.
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
    description: An unchanged C(targets.json) is not rewritten and does not count as a change.
    support: full
options:
  dir:
    description: The stage's directory of the host in the run directory (C(tuning_run_stage_dir)).
    type: path
    required: true
  env:
    description: The result of P(llmops.sglang.sglang_env_facts#module) (C(model.config), C(versions), C(tuner.scripts)).
    type: dict
    required: true
  gpus:
    description: The C(summary) of P(llmops.sglang.gpu_facts#module) (C(name), C(spec)).
    type: dict
    required: true
  gpu_spec:
    description: The GPU's spec (C(sglang_gpu_spec)) where it overrides the one of O(gpus).
    type: dict
  server_args:
    description: The adopted server args (C(tp_size), C(ep_size), default V(1)).
    type: dict
    default: {}
  missing:
    description: The config files the server reported missing in the adopted configuration's facts.
    type: list
    elements: str
    default: []
  force:
    description: Tune every derived file when the server misses none (C(tuning_run_moe.force)).
    type: bool
    default: false
  engine:
    description: The tuner (C(tuning_run_moe.engine)); see P(llmops.sglang.moe_tune#module).
    type: str
    choices: [sglang, llmops]
    default: sglang
  tune_hosts:
    description: The hosts that tune as one Ray cluster (C(tuning_run_moe.tune_hosts)), the head first.
    type: list
    elements: str
    default: []
  host:
    description: The host planned for; default the task's C(inventory_hostname).
    type: str
"""

EXAMPLES = r"""
---
- name: Plan the MoE stage and record the targets
  llmops.sglang.moe_plan:
    dir: "{{ tuning_run_stage_dir }}"
    env: "{{ moe_env }}"
    gpus: "{{ moe_gpus.summary }}"
    gpu_spec: "{{ sglang_gpu_spec | default(omit) }}"
    server_args: "{{ tuning_run_adopted.args }}"
    missing: "{{ moe_reference_facts.missing_moe_configs | default([]) }}"
    force: "{{ tuning_run_moe.force }}"
    engine: "{{ tuning_run_moe.engine | default('sglang') }}"
    tune_hosts: "{{ tuning_run_moe.tune_hosts | default([], true) }}"
  register: moe
"""

RETURN = r"""
plan:
  description: The result of P(llmops.sglang.moe_targets#filter) (C(targets), C(derived), C(tuner_args), C(message), ...).
  returned: always
  type: dict
targets:
  description: The config files to tune (each with C(kernel), C(file_name), ...); empty when there is nothing to tune.
  returned: always
  type: list
  elements: dict
spec:
  description: The GPU's spec (C(mem_bandwidth_gbs), C(smem_per_block), ...), O(gpu_spec) or that of O(gpus).
  returned: always
  type: dict
tunes_down:
  description: Whether the down kernel is tuned.
  returned: always
  type: bool
cluster:
  description:
    - The host's part in the tuning cluster. C(hosts) the tune hosts, C(in_cluster) whether the host is one,
      C(head) the host that runs the tuner (the host itself when not in the cluster), C(tunes_here) whether that is
      this host.
  returned: always
  type: dict
path:
  description: The path of C(targets.json).
  returned: always
  type: str
written:
  description: C(targets.json) when its content changed (written unless in check mode).
  returned: always
  type: list
  elements: str
"""
