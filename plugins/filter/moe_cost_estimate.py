# Copyright (c) llmops.sglang contributors
# Apache License 2.0 (see LICENSE)
from __future__ import annotations

DOCUMENTATION = r"""
name: moe_cost_estimate
short_description: GPU-minutes the MoE stage will cost, estimated from the tuner's plan before any server stops
version_added: 1.0.0
description:
  - Up kernel - each tuner invocation of the batch sizes still to tune (the plan's C(chunks)) hands one batch size to
    each of O(workers) GPUs, so it takes ceil(batch sizes / workers) rounds of (configs in the search space x
    O(seconds_per_config)).
  - Down kernel (O(down)) - C(tune_down_moe.py) uses one GPU, so M(llmops.sglang.moe_tune) runs one process per GPU
    of a chunk (min(chunk size, GPUs) at once); each screens its batch sizes over the search space with
    C(BLOCK_SIZE_M) pinned (384 configs for the full space), ceil(batch sizes / processes) rounds in all.
  - Plus one measurement of the tuned configs (restart and sweep), estimated by O(reference_cost), the C(cost.json)
    of a configuration measured earlier in this run.
  - The deployment's GPUs (from O(facts), else O(requested_args), else C(CUDA_VISIBLE_DEVICES) of O(environment))
    are held for all of it. docs/run-directory.md ("MoE estimate") has the sources of the per-config cost.
  - With O(engine=llmops) the engine's own model instead (docs/moe-engine.md, "What it costs") - one run tunes both
    kernels, starting its processes (33.5 s), compiling the Triton variants its stages build on the plan's
    C(compile_workers) (0.90 variants per config and kernel, 0.406 core-seconds each) and timing each (config, batch
    size, kernel) on the plan's GPUs, or on O(engine_gpus) of a Ray cluster (0.86 ms), all measured on an H100
    (benchmarks/results/moe_engine_gpu.json); nothing when the plan's C(cache) is a hit.
author:
  - llmops.sglang contributors (@llmops)
options:
  _input:
    description: The result of M(llmops.sglang.moe_tune) for the up kernel in check mode (its plan).
    type: dict
    required: true
  workers:
    description: GPUs the tuner spreads the batch sizes over (default the plan's C(chunk_size)).
    type: int
  engine_gpus:
    description:
      - For O(engine=llmops), the GPUs the engine times on - on a Ray cluster of tuning hosts (C(RAY_ADDRESS)) every
        GPU of every host, whose nodes each tune a share of the batch sizes; default the plan's C(devices) (one host).
    type: int
  engine:
    description: The plan's engine (M(llmops.sglang.moe_tune) O(engine)); V(llmops) uses the engine's cost model.
    type: str
    choices: [llmops, sglang]
    default: sglang
  down:
    description: Whether the down kernel is tuned too.
    type: bool
    default: false
  block_shape:
    description: The checkpoint's quantisation block shape (the MoE shape's C(block_shape)), null for none.
    type: list
    elements: int
  seconds_per_config:
    description: Real seconds per config and batch size (C(tuning_run_moe.seconds_per_config)); null = 1.4.
    type: float
  reference_cost:
    description: C(cost.json) of a configuration measured in this run (its C(real_s) estimates the measurement).
    type: dict
  facts:
    description: Startup facts of the running configuration.
    type: dict
  requested_args:
    description: Its server args.
    type: dict
  environment:
    description: Its environment.
    type: dict
"""

EXAMPLES = r"""
- name: Estimate before stopping the server
  ansible.builtin.set_fact:
    estimate: "{{ up_plan | llmops.sglang.moe_cost_estimate(down=true, facts=facts, reference_cost=baseline_cost) }}"
"""

RETURN = r"""
_value:
  description:
    - C(gpus), C(workers), C(batch_sizes), C(resumed), C(rounds), C(search_space), C(down_candidates),
      C(down_processes) (down screeners at once), C(down_rounds), C(seconds_per_config), C(parts_s) (C(tuning_up),
      C(tuning_down), C(measurement)), C(real_s), C(gpu_minutes), C(tuning_gpu_minutes) and C(summary) (one line).
    - For O(engine=llmops) C(engine), C(gpus), C(batch_sizes), C(resumed), C(search_space), C(kernels),
      C(compile_workers), C(engine_gpus), C(cache) (the plan's cache status), C(model) (the constants and their source),
      C(parts_s) (C(engine_start), C(engine_compile), C(engine_timing), C(measurement)), C(real_s), C(engine_s),
      C(engine_gpu_minutes)
      (the engine's GPUs x its time, comparable to its run's C(gpu_minutes)), C(gpu_minutes), C(tuning_gpu_minutes) and
      C(summary).
  type: dict
  sample: {gpus: 4, workers: 4, rounds: 5, real_s: 18212.3, gpu_minutes: 1214.2}
"""

from ansible.errors import AnsibleFilterError
from ansible_collections.llmops.sglang.plugins.module_utils.gpu_cost import moe_stage_estimate


def moe_cost_estimate(plan, workers=None, down=False, block_shape=None, seconds_per_config=None,
                      reference_cost=None, facts=None, requested_args=None, environment=None, engine="sglang",
                      engine_gpus=None):
    try:
        return moe_stage_estimate(plan, workers=workers, down=down, block_shape=block_shape,
                                  seconds_per_config=seconds_per_config, reference_cost=reference_cost, facts=facts,
                                  requested_args=requested_args, environment=environment, engine=engine,
                                  engine_gpus=engine_gpus)
    except ValueError as exc:
        raise AnsibleFilterError(f"moe_cost_estimate: {exc}") from exc


class FilterModule:
    def filters(self):
        return {"moe_cost_estimate": moe_cost_estimate}
