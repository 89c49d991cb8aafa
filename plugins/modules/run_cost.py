#!/usr/bin/python
# Copyright (c) llmops.sglang contributors
# Apache License 2.0 (see LICENSE)
from __future__ import annotations

DOCUMENTATION = r"""
---
module: run_cost
short_description: Internal - account the GPU-minutes a tuning stage spent, from its records in the run directory
version_added: 1.0.0
description:
  - Internal to the collection's stage playbooks (role C(llmops.sglang.tuning_run)), not an interface for
    playbooks of your own; its options may change in any release.
  - Reads the records of one stage of one host in the run directory (its measurements' C(deploy.json),
    C(facts.json), C(sweep.json); the MoE stage's C(tune_up.json), C(tune_down.json), C(kernel_benchmark.json)) and
    returns the stage's cost; writes C(cost.json) next to each measurement and each skipped flag trial.
  - A stage that measured or tuned holds the deployment's GPUs (tp x pp x dp / nnodes from the facts, or
    C(CUDA_VISIBLE_DEVICES)) for its whole wall time, from O(started_at) to now. The parts say where it went
    (server starts, warm-up, benchmark, tuning, kernel benchmarks, other); docs/run-directory.md ("GPU-minutes")
    describes the fields and formulas.
  - For a server that reports itself as an emulator (its startup log's marker, C(facts.emulator)) O(time_scale) gives
    the real-GPU equivalent; for any other server it is not used.
  - A skipped flag trial costs nothing; its C(cost.json) estimates what it saved (the median cost of the
    configurations this run measured).
author:
  - llmops.sglang contributors (@llmops)
extends_documentation_fragment:
  - llmops.sglang.attributes.CONTROLLER
attributes:
  check_mode:
    description: Computes the cost and writes nothing.
    support: full
options:
  stage_dir:
    description: The stage directory of the host (C(runs/<run_id>/<stage>/<host>)).
    type: path
    required: true
  started_at:
    description: When the stage began (UTC, ISO 8601).
    type: str
    required: true
  time_scale:
    description:
      - C({serving, tuning, startup}) wall seconds an emulated server (its tuner, its starts) spends per real-GPU
        second; C(tuning) and C(startup) default to C(serving). V(null) accounts an emulated run at its wall time only.
    type: raw
"""

EXAMPLES = r"""
---
- name: Account the stage's GPU-minutes
  llmops.sglang.run_cost:
    stage_dir: "{{ tuning_run_stage_dir }}"
    started_at: "{{ tuning_run_stage_started_at }}"
  register: cost
"""

RETURN = r"""
cost:
  description: The stage's cost (C(gpus), C(gpus_from), C(wall_s), C(real_s), C(gpu_minutes), C(wall_gpu_minutes),
    C(parts), C(emulated), C(time_scale); C(seconds_per_config) for the MoE stage).
  returned: always
  type: dict
  sample: {gpus: 4, wall_s: 612.0, real_s: 612.0, gpu_minutes: 40.8, parts: {benchmark: {wall_s: 480.2, real_s: 480.2, gpu_minutes: 32.0}}}
started_at:
  description: O(started_at).
  returned: always
  type: str
line:
  description: The cost in one line.
  returned: always
  type: str
  sample: "baseline: 62.1 GPU-min (4 GPUs x 15.5 min: server start 8.3, warm-up 4.0, benchmark 48.9, other 0.9)"
finished_at:
  description: When the stage ended (now, UTC), for the stage record.
  returned: always
  type: str
written:
  description: The C(cost.json) files that changed.
  returned: always
  type: list
  elements: str
"""
