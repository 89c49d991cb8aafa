#!/usr/bin/python
# Copyright (c) llmops.sglang contributors
# Apache License 2.0 (see LICENSE)
from __future__ import annotations

DOCUMENTATION = r"""
---
module: moe_records
short_description: Internal - the MoE stage's evidence records, built from its tasks' results
version_added: 2.0.0
description:
  - Internal to the collection's stage playbooks (the MoE stage, C(playbooks/moe_tune.yml)), not an interface for
    playbooks of your own; its options may change in any release.
  - Builds the stage's records of one host from what its tasks returned and writes them into O(dir) as
    P(llmops.sglang.run_record#module) does (atomically, JSON indented with keys sorted, an unchanged file not
    rewritten). The records are described in docs/run-directory.md, "moe_tune".
  - O(step=cluster) writes C(cluster.json), what the Ray cluster of the tune hosts did (hosts, head, Ray's address,
    nodes and GPUs, the tuner's time and the cluster's wall time since O(cluster.started), the GPUs and hosts Ray saw
    the tuner use, the engine's shards).
  - O(step=evidence) writes C(tune_up.json), C(tune_down.json) (removed when the down kernel was not tuned),
    C(installed.json), C(kernel_before.json), C(kernel_after.json), C(kernel_benchmark.json), C(kernel_table.json)
    (P(llmops.sglang.moe_kernel_table#filter) of the two benchmarks) and C(provenance.json).
  - O(step=failure) writes C(failure.txt), where the stage's tuning, benchmarks or install failed and why, and fails
    the task saying so, that the previous configs are back, and how a rerun resumes from the tuner's checkpoints.
  - Runs entirely on the controller (action plugin); nothing is sent to the managed host.
author:
  - llmops.sglang contributors (@llmops)
extends_documentation_fragment:
  - llmops.sglang.attributes.CONTROLLER
attributes:
  check_mode:
    description: Reports which records would change and writes nothing.
    support: full
  idempotent:
    description: Records whose content is unchanged are not rewritten and do not count as a change.
    support: full
options:
  step:
    description: Which records to write.
    type: str
    required: true
    choices: [cluster, evidence, failure]
  dir:
    description: The stage's directory of the host in the run directory (C(tuning_run_stage_dir)).
    type: path
    required: true
  up:
    description: The result of P(llmops.sglang.moe_tune#module) tuning the up kernel (on a tune host that is not the
      cluster's head, the head's); required for O(step=cluster) and O(step=evidence).
    type: dict
  down:
    description:
      - The result of the task tuning the down kernel; a skipped task's result (no C(output_file)), or none, means the
        down kernel was not tuned.
    type: dict
  before:
    description: The kernel benchmark (P(llmops.sglang.moe_tune#module), C(mode=benchmark)) with the configs installed
      before; required for O(step=evidence).
    type: dict
  after:
    description: The kernel benchmark with the tuned configs; required for O(step=evidence).
    type: dict
  installed:
    description: The result of P(llmops.sglang.moe_configs#module) installing the tuned configs; required for
      O(step=evidence).
    type: dict
  gpus:
    description: The C(summary) of P(llmops.sglang.gpu_facts#module) (C(name), C(count)); required for O(step=evidence).
    type: dict
  env:
    description: The result of P(llmops.sglang.sglang_env_facts#module) (C(versions), C(triton_dir),
      C(model.moe_shape)); required for O(step=evidence).
    type: dict
  plan:
    description:
      - The stage's plan (P(llmops.sglang.moe_plan#module)'s result); required for O(step=evidence). The provenance
        takes the adopted TP and EP sizes, the model, the targets' tuner arguments and the hosts that tuned from it,
        the kernel table the GPU's memory bandwidth (its C(spec)).
      - An unknown bandwidth fails the task naming the setting C(sglang_gpu_spec.mem_bandwidth_gbs).
    type: dict
  failed_task:
    description: The name of the task the stage failed at (C(ansible_failed_task.name)); required for O(step=failure).
    type: str
  failed_result:
    description: Its result (C(ansible_failed_result)); required for O(step=failure).
    type: dict
  work_dir:
    description: The tuner's work directory on the host, whose checkpoints a rerun resumes from
      (C(tuning_run_moe.work_dir)); required for O(step=failure).
    type: path
  cluster:
    description: The Ray cluster of the tune hosts; required for O(step=cluster).
    type: dict
    suboptions:
      head:
        description: The host the tuner ran on.
        type: str
        required: true
      hosts:
        description: The tune hosts.
        type: list
        elements: str
        required: true
      ray_address:
        description: The cluster's address (role C(llmops.sglang.ray_cluster)'s C(ray_cluster_address)).
        type: str
        required: true
      nodes:
        description: The cluster's nodes (C(ray_cluster_nodes)).
        type: raw
        required: true
      gpus:
        description: The cluster's GPUs (C(ray_cluster_gpus)).
        type: raw
        required: true
      started:
        description: When the cluster was up (epoch seconds).
        type: float
        required: true
"""

EXAMPLES = r"""
---
- name: Record the tuning evidence and provenance
  llmops.sglang.moe_records:
    step: evidence
    dir: "{{ tuning_run_stage_dir }}"
    up: "{{ moe_kernels_up }}"
    down: "{{ moe_kernels_down }}"
    before: "{{ moe_kernels_before }}"
    after: "{{ moe_kernels_after }}"
    installed: "{{ moe_kernels_installed }}"
    gpus: "{{ moe_gpus.summary }}"
    env: "{{ moe_env }}"
    plan: "{{ moe_plan }}"
"""

RETURN = r"""
paths:
  description: Paths of the records written or kept (not the removed C(tune_down.json)).
  returned: O(step=cluster) and O(step=evidence)
  type: list
  elements: str
written:
  description: Records whose content changed (written unless in check mode).
  returned: always
  type: list
  elements: str
stage_details:
  description:
    - What C(stage.json) says of the tuning (role C(llmops.sglang.tuning_run)'s C(tuning_run_stage_details)) -
      C(engine_cache), per kernel whether the controller's cache of the engine answered (status, key and its short
      hash; null where the engine did not tune the kernel).
  returned: O(step=evidence)
  type: dict
removed:
  description: Records with no content this time that existed and were removed (unless in check mode).
  returned: O(step=cluster) and O(step=evidence)
  type: list
  elements: str
"""
