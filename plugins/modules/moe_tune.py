#!/usr/bin/python
# Copyright (c) llmops.sglang contributors
# Apache License 2.0 (see LICENSE)
from __future__ import annotations

DOCUMENTATION = r"""
---
module: moe_tune
short_description: Tune SGLang's fused-MoE Triton kernels (llmops' engine or SGLang's tuner) as a resumable, bounded job
version_added: 1.0.0
description:
  - O(engine=llmops) runs the collection's tuning engine (C(moe_engine.py), installed in O(work_dir)) with the SGLang
    venv's python. It tunes the installed release's own C(fused_moe_kernel) through its own launch path (nothing of
    SGLang is copied). Every candidate is compiled once per Triton specialisation on all CPU cores, screened on every
    GPU of the host at every batch size, the leaders re-timed in CUDA graphs, the winner checked against a float32
    reference. One run tunes the up and the down kernel together (SGLang makes the down config use the up config's
    C(BLOCK_SIZE_M)) and checkpoints every batch size; the task for either kernel takes its file from that run
    (the second task resumes it). No source checkout is needed. bf16/fp16 kernels only.
  - With O(engine=llmops) and C(RAY_ADDRESS) in O(environment) (a Ray cluster of tuning hosts, the MoE stage's
    C(tuning_run_moe.tune_hosts)) the engine shards the batch sizes over the cluster's GPU nodes - contiguous shares
    of the sorted batch sizes balanced by each node's GPUs, one Ray task pinned to each node with all of its GPUs,
    running the engine there in C(<work_dir>/engine/<file>/shards/<node address>) (its checkpoint, so a rerun resumes
    per node) - and merges their results into one; RV(placements) says where each shard ran. Every node needs the
    SGLang installation at the O(python) path the Ray node runs. A failed shard fails the task naming its node.
  - O(engine=sglang) runs SGLang's tuner from the host's SGLang source checkout with the SGLang venv's python. V(up) uses
    C(tuning_fused_moe_triton.py --tune) (Ray, one worker per GPU), V(down) uses C(tune_down_moe.py) with the up
    kernel's tuned config.
  - The tuner is driven by what its own C(--help) offers (read once per plan, RV(tuner_cli)). Tuning runs in chunks
    of batch sizes (C(--batch-sizes b1 .. bk), one tuner invocation each, so Ray keeps every GPU of a chunk busy);
    a tuner of an older SGLang that only has C(--batch-size) runs once per batch size (RV(notes) says so).
    C(tune_down_moe.py) uses one GPU and screens its batch sizes one after another, so a V(down) chunk runs as one
    process per GPU (the entries of C(CUDA_VISIBLE_DEVICES) in O(environment), else the host's GPUs), each with its
    share of the chunk's batch sizes and C(CUDA_VISIBLE_DEVICES) set to its one device, all at once. After
    each chunk the tuned entries are merged into a checkpoint in O(work_dir); a rerun skips the batch sizes already
    checkpointed for the same inputs (RV(resumed)).
  - A tuner that crashes or runs past O(timeout) (its whole process group is ended) fails the task naming the batch
    sizes done and the log tail; the checkpoint keeps what was done, also the work of the down chunk's processes
    that succeeded when another failed (RV(failed_runs) names the failed ones and their devices). The output file is
    written, atomically, only when every batch size is tuned and the result validates, so partial output is never
    presented as a result.
  - Before anything runs the module checks that the source checkout has the installed SGLang's version and that the
    tuner will write O(expected_file_name).
  - V(benchmark) runs the main tuner without C(--tune) and returns the kernel time per batch size with the config
    the installation finds now (or SGLang's default config).
  - The action plugin of the same name calls the module once per chunk and prints a progress line after each
    (host, kernel, batch sizes done / total, elapsed, ETA); the history is returned as RV(progress).
  - The SGLang server should be stopped while tuning; the tuner needs the GPUs.
author:
  - llmops.sglang contributors (@llmops)
attributes:
  check_mode:
    description: Reports the plan (batch sizes, chunks, search space, what the checkpoint already holds) and runs nothing.
    support: full
  diff_mode:
    description: Nothing to diff.
    support: none
  idempotent:
    description: A rerun after a finished run tunes nothing and changes nothing.
    support: full
options:
  python:
    description: Python interpreter of the SGLang installation (a venv's C(bin/python)); it must have C(ray).
    type: path
    default: /opt/sglang/venv/bin/python
  engine:
    description:
      - V(llmops) the collection's engine (see the description; docs/moe-engine.md); V(sglang) SGLang's own tuner
        scripts from O(source_dir).
      - O(mode=benchmark) always runs SGLang's tuner script.
    type: str
    choices: [llmops, sglang]
    default: sglang
  compile_workers:
    description:
      - Processes compiling candidates for O(engine=llmops); default the host's CPU cores less one per tuning GPU.
    type: int
  cache:
    description:
      - For O(engine=llmops), ask the controller's cache (O(cache_dir)) before the engine starts; a hit is installed
        into the checkpoint and the output file without starting the engine. After a miss the engine's result is
        stored there, one entry per kernel of the run (the down task of the same target then hits).
      - The key is what makes a config valid and the question it answers - GPU name and compute capability, Triton
        version, sha256 of the installed kernel source, the engine's version, E, N, hidden size, top-k, dtype,
        quantisation and block shape, the kernel (up or down), the batch sizes and the search space
        (docs/moe-engine.md, "Cache"); the host's parts are read by nvidia-smi and a small probe run with O(python).
      - O(force=true) skips the lookup, tunes again and replaces the entry. Ignored for O(engine=sglang).
    type: bool
    default: true
  cache_dir:
    description:
      - Directory of the cache on the controller (content-addressed entries C(<sha[:2]>/<sha>.json), written
        atomically; an unreadable or foreign entry is a miss with a warning). Keep it outside the collection, which a
        reinstall replaces.
      - Default C(~/.cache/llmops-sglang/moe-engine) of the controller's user; the MoE stage passes
        C(<tuning_run_root>/cache/moe-engine) (C(tuning_run_moe.cache_dir)).
    type: path
  source_dir:
    description:
      - SGLang source checkout holding C(benchmark/kernels/fused_moe_triton/), at the installed SGLang's version.
      - Required for O(engine=sglang) and O(mode=benchmark).
    type: path
  model_path:
    description: Local model directory (its C(config.json) gives the MoE shape), passed to the tuner as C(--model).
    type: path
    required: true
  tp_size:
    description: Tensor-parallel size of the deployment (C(--tp-size)).
    type: int
    required: true
  ep_size:
    description: Expert-parallel size of the deployment (C(--ep-size)).
    type: int
    default: 1
  tuner_args:
    description:
      - Selector flags of the main tuner (C(--dtype), C(--per-channel-quant), C(--disable-shared-experts-fusion)),
        as returned by the P(llmops.sglang.moe_targets#filter) filter in C(tuner_args).
      - For V(down) they are translated for C(tune_down_moe.py) (C(--dtype) always passed, no C(--per-channel-quant)).
    type: list
    elements: str
    default: []
  kernel:
    description: V(up) tunes the fused MoE (the file without C(_down)); V(down) screens the down GEMM's configs.
    type: str
    choices: [up, down]
    default: up
  gate_up_config:
    description:
      - Path on the host of the tuned up JSON; required for O(kernel=down) with O(engine=sglang) (C(--gate-up-config)).
      - Not used by O(engine=llmops), which tunes both kernels together.
    type: path
  mode:
    description: V(tune) produces a config file; V(benchmark) measures the kernel time per batch size (O(kernel=up) only).
    type: str
    choices: [tune, benchmark]
    default: tune
  batch_sizes:
    description:
      - Token counts M to tune or benchmark, as a list of integers, or V(auto) to derive them from
        O(max_running_requests), O(speculative_num_draft_tokens) and O(chunked_prefill_size) (the reasoning is
        returned in RV(batch_sizes_reason)).
      - Default SGLang's 18 batch sizes (1 .. 4096).
    type: raw
  max_running_requests:
    description: The server's effective max_running_requests (for O(batch_sizes=auto)).
    type: int
  speculative_num_draft_tokens:
    description: Tokens verified per decode step with speculative decoding (for O(batch_sizes=auto)).
    type: int
  chunked_prefill_size:
    description: The server's chunked prefill size (for O(batch_sizes=auto)).
    type: int
  search_space:
    description:
      - V(full) is the tuner's own space (1920 configs, fewer with block quantisation).
      - V(prefiltered) drops configs whose shared memory (Triton's C((num_stages - 1) x tile)) exceeds O(smem_per_block)
        before any compile - they could not launch - and passes the rest as C(--search-space-file); RV(search_space)
        reports how many were dropped.
      - V(pruned) keeps a third of the space on H200 - SGLang's conservative C(num_stages x tile) smem estimate within
        O(smem_per_block), and C(GROUP_SIZE_M) 1 or 16 only. Measured on an H200 (two MoE shapes, batch sizes 1 to
        4096) its best config was at most 0.2% slower than the full space's, with 624 of 1920 compiles.
      - A tuner without C(--search-space-file) (SGLang releases before it arrived) tunes its own full space; then
        RV(search_space) has C(applied=false) and a C(reason), and RV(notes) says the prefilter cannot apply.
      - Any other value is the path of a C(--search-space-file) on the host.
      - O(kernel=down) supports V(full) only (C(tune_down_moe.py) has no search-space file).
    type: str
    default: full
  smem_per_block:
    description:
      - Shared memory per block of the GPU in bytes (101376 on SM120/SM89); required for O(search_space=prefiltered)
        and O(search_space=pruned).
    type: int
  work_dir:
    description: Host directory for checkpoints, chunk logs, the search-space file and the output file.
    type: path
    default: /var/lib/llmops-sglang/moe-tune
  expected_file_name:
    description:
      - File name the server looks up (a target's C(file_name)); the task fails before tuning when the tuner would
        write another name.
    type: str
  chunk_size:
    description:
      - Batch sizes per tuner invocation. Default the number of GPUs the tuner sees, the Ray cluster's GPUs when
        O(environment) sets C(RAY_ADDRESS), else the C(CUDA_VISIBLE_DEVICES) entries, else the host's GPUs.
    type: int
  environment:
    description:
      - Environment of the tuner, e.g. C(CUDA_VISIBLE_DEVICES), C(RAY_ADDRESS) (join an existing Ray cluster; the
        engine then shards its batch sizes over the cluster's GPU nodes), C(SGLANG_MOE_CONFIG_DIR).
    type: dict
    default: {}
  timeout:
    description: Seconds the whole task may take; a tuner still running then is ended and the task fails.
    type: int
    default: 43200
  force:
    description: Ignore (and discard) the checkpoint and tune every batch size again.
    type: bool
    default: false
notes:
  - Configs that fail to compile or run out of shared memory are skipped by the tuner itself.
  - The action plugin passes each step after the plan to the module as a file in the task's remote tmp dir, so the
    module runs as a task only, and not with C(become_user) of an unprivileged user other than the connection's.
  - Run the up kernel first; the down kernel needs its output as O(gate_up_config).
seealso:
  - module: llmops.sglang.moe_configs
  - plugin: llmops.sglang.moe_targets
    plugin_type: filter
"""

EXAMPLES = r"""
---
- name: Tune the up kernel over the deployment's batch sizes, prefiltered for SM120
  llmops.sglang.moe_tune:
    source_dir: /opt/sglang/src
    model_path: /srv/models/Qwen3.5-122B-A10B
    tp_size: 4
    tuner_args: "{{ moe.tuner_args }}"
    expected_file_name: "{{ (moe.targets | selectattr('kernel', 'equalto', 'up') | first).file_name }}"
    batch_sizes: auto
    max_running_requests: 48
    speculative_num_draft_tokens: 4
    chunked_prefill_size: 8192
    search_space: prefiltered
    smem_per_block: 101376
    environment:
      CUDA_VISIBLE_DEVICES: "0,1,2,3"
  register: tuned_up

- name: Tune the down kernel with the up result
  llmops.sglang.moe_tune:
    source_dir: /opt/sglang/src
    model_path: /srv/models/Qwen3.5-122B-A10B
    tp_size: 4
    kernel: down
    gate_up_config: "{{ tuned_up.output_file }}"
    tuner_args: "{{ moe.tuner_args }}"
    batch_sizes: "{{ tuned_up.batch_sizes }}"

- name: Kernel time per batch size with the installed configs
  llmops.sglang.moe_tune:
    source_dir: /opt/sglang/src
    model_path: /srv/models/Qwen3.5-122B-A10B
    tp_size: 4
    mode: benchmark
    batch_sizes: [1, 8, 64, 512]
  register: kernel_before
"""

RETURN = r"""
output_file:
  description: The tuned config file on the host (named like SGLang expects), written only when complete.
  returned: mode=tune, not in check mode
  type: str
  sample: /var/lib/llmops-sglang/moe-tune/E=256,N=256,device_name=NVIDIA_RTX_PRO_6000_Blackwell_Server_Edition.json
file_name:
  description: Name of the file the tuner writes.
  returned: success
  type: str
batch_sizes:
  description: Batch sizes tuned or benchmarked.
  returned: success
  type: list
  elements: int
batch_sizes_reason:
  description: Where the batch sizes come from.
  returned: success
  type: str
  sample: "decode: up to 48 running requests x 4 draft tokens verified per step = 192 tokens; prefill: ..."
search_space:
  description: The search space tried per batch size.
  returned: success
  type: dict
  sample: {mode: prefiltered, total: 1920, kept: 1131, dropped: 789}
chunk_size:
  description: Batch sizes per tuner invocation.
  returned: mode=tune
  type: int
chunks:
  description: The tuner invocations still to run, as lists of batch sizes (the plan).
  returned: check mode, mode=tune
  type: list
  elements: list
resumed:
  description: Batch sizes taken from the checkpoint instead of being tuned again.
  returned: success
  type: int
checkpoint:
  description: The checkpoint file of this target.
  returned: mode=tune
  type: str
checkpoint_discarded:
  description: Why an existing checkpoint was not used (other inputs, O(force)), or null.
  returned: mode=tune
  type: str
progress:
  description: One record per chunk, as displayed while running.
  returned: success
  type: list
  elements: dict
  sample: [{batch_sizes: [1, 2, 4, 8], done: 4, total: 18, elapsed_s: 412.3, eta_s: 1443.1, tuner_seconds: 398.2}]
tuner_cli:
  description: The options the tuner script's C(--help) lists and how it takes batch sizes (V(many) or V(one) per run).
  returned: success
  type: dict
  sample: {script: tuning_fused_moe_triton.py, batch_sizes_per_run: one, search_space_file: false}
notes:
  description: What this SGLang's tuner cannot do as asked (one batch size per run, no search-space file).
  returned: success
  type: list
  elements: str
placements:
  description:
    - Where each tuner run of the up kernel worked, as Ray saw it when O(environment) sets C(RAY_ADDRESS) (a cluster;
      Ray's GCS keeps the run's job and workers), one entry per run with C(batch_sizes), C(cluster_gpus),
      C(cluster_hosts), C(gpus_used) (the run's GPU workers), C(workers_per_host), C(hosts_used) (hosts whose
      workers all had work) and C(workers) (C(ip), C(host), C(node_id), C(actor_id), C(pid)); or C(batch_sizes)
      and C(error) when Ray could not be asked (the run's tuning is kept).
    - For the up kernel empty for a local run (its Ray instance ends with the tuner; all of it ran on this host).
    - For the down kernel one entry per chunk with C(batch_sizes), C(gpus_used) (its processes, one GPU each) and
      C(devices), the C(CUDA_VISIBLE_DEVICES) entry each batch size ran on.
    - For O(engine=llmops) one entry per engine run - on one host C(batch_sizes), C(gpus_used) and C(devices); on a
      Ray cluster C(batch_sizes), C(ray_address), C(cluster_gpus), C(cluster_hosts), C(gpus_used) (the GPUs of the
      nodes that ran a shard), C(hosts_used), C(workers_per_host) (GPUs per node's shard) and C(shards), per node
      C(ip), C(host) (its host name as the shard's task saw it), C(node_id) and C(gpu_ids) (Ray's), C(gpus),
      C(batch_sizes), C(wall_s), C(gpu_minutes), C(resumed_batch_sizes) and C(work_dir) (on that node).
  returned: mode=tune
  type: list
  elements: dict
gpus_used:
  description:
    - The most GPUs one chunk of this task used (RV(placements)), the up tuner's Ray workers or the down screener's
      processes, or the engine's GPUs (every shard's on a Ray cluster); null for SGLang's up tuner without
      C(RAY_ADDRESS).
  returned: mode=tune
  type: int
hosts_used:
  description: Hosts (IP) whose Ray workers, or the engine's shards, tuned batch sizes in this task (RV(placements)).
  returned: mode=tune
  type: list
  elements: str
engine:
  description:
    - The engine's run (O(engine=llmops)) as it concerns this task's kernel; null for O(engine=sglang), when every
      batch size was resumed or when the cache answered (RV(cache)).
    - C(per_batch_size) has per M the pick (C(config), C(kernel_us)), the release's default config and its time in
      the same timing (C(default), C(default_us)) and C(speedup); C(failures) counts the configs that failed by
      reason; C(wall_s), C(gpus) and C(gpu_minutes) what the run cost (on a Ray cluster the driver's wall time, every
      shard's GPUs and the sum of the shards' GPU-minutes); C(release) the versions and the hash of the kernel source
      the configs are valid for.
  returned: mode=tune
  type: dict
cache:
  description:
    - The controller's engine cache for this task (O(engine=llmops); null otherwise). C(status) V(hit) (installed from
      the cache, the engine did not start), V(miss) (the engine ran), V(not needed) (the host's checkpoint held every
      batch size) or V(off) (C(reason) says why - O(cache=false), or a key part the host could not tell); C(key) and its
      C(key_sha256) (C(key_short) its first 12 hex digits), C(dir), C(entry) (the entry's path); for a hit C(source)
      (the engine run that stored it - C(host), C(device), C(release), C(gpu_minutes), C(wall_s), C(stored_at)); after
      a miss C(stored) (entry path per kernel) or C(not_stored) (why not); C(warning) when an entry was unusable;
      C(reason) V(force) when the lookup was skipped.
    - In check mode the lookup is made and reported; nothing is stored.
  returned: mode=tune
  type: dict
  sample: {status: hit, key_short: 3f9a1c2b4d5e, entry: /home/me/.cache/llmops-sglang/moe-engine/3f/3f9a....json}
compile_workers:
  description: Processes compiling candidates (O(engine=llmops)).
  returned: mode=tune, engine=llmops
  type: int
devices:
  description: The GPUs a tuning process may use (the C(CUDA_VISIBLE_DEVICES) entries, else the host's).
  returned: mode=tune
  type: list
  elements: str
duration_s:
  description: Wall time of the task.
  returned: success
  type: float
tuner_seconds:
  description: Sum of the tuner's own C(Tuning took ... seconds) over this run's chunks (null when none printed it).
  returned: mode=tune
  type: float
process_seconds:
  description:
    - Wall time of this run's tuner processes, per chunk from their start to the end of the last (the down screener
      prints no time of its own).
  returned: mode=tune
  type: float
kernel_times:
  description: Per batch size, the config the installation uses and its kernel time in microseconds.
  returned: mode=benchmark
  type: dict
  sample: {"64": {config: {BLOCK_SIZE_M: 16, BLOCK_SIZE_N: 32, BLOCK_SIZE_K: 64, GROUP_SIZE_M: 1}, kernel_time_us: 161.4}}
batch_sizes_done:
  description: Batch sizes in the checkpoint when a tuner invocation failed.
  returned: failure of a tuner invocation
  type: list
  elements: int
log_tail:
  description: Last lines of the failed tuner invocation's output (of each, under a header, when several failed).
  returned: failure of a tuner invocation
  type: str
log_dir:
  description: Directory kept with the failed invocation's full C(tuner.out) and C(tuner.err) (the first of RV(failed_runs)).
  returned: failure of a tuner invocation
  type: str
failed_runs:
  description:
    - The chunk's tuner processes that failed, each with C(batch_sizes), C(device) (its C(CUDA_VISIBLE_DEVICES)
      entry, null for the up tuner) and C(log_dir) (kept); the successful ones were checkpointed and removed.
  returned: failure of a tuner invocation
  type: list
  elements: dict
  sample: [{batch_sizes: [8, 512], device: "1", log_dir: /var/lib/llmops-sglang/moe-tune/runs/down-M8-x1y2z3}]
"""

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.llmops.sglang.plugins.module_utils._moe_tune_steps import run_step
from ansible_collections.llmops.sglang.plugins.module_utils.server_guard import guarded_work


def main() -> None:
    module = AnsibleModule(
        argument_spec=dict(
            python=dict(type="path", default="/opt/sglang/venv/bin/python"),
            engine=dict(type="str", choices=["llmops", "sglang"], default="sglang"),
            compile_workers=dict(type="int"),
            cache=dict(type="bool", default=True),
            cache_dir=dict(type="path"),
            source_dir=dict(type="path"),
            model_path=dict(type="path", required=True),
            tp_size=dict(type="int", required=True),
            ep_size=dict(type="int", default=1),
            tuner_args=dict(type="list", elements="str", default=[]),
            kernel=dict(type="str", choices=["up", "down"], default="up"),
            gate_up_config=dict(type="path"),
            mode=dict(type="str", choices=["tune", "benchmark"], default="tune"),
            batch_sizes=dict(type="raw"),
            max_running_requests=dict(type="int"),
            speculative_num_draft_tokens=dict(type="int", no_log=False),
            chunked_prefill_size=dict(type="int"),
            search_space=dict(type="str", default="full"),
            smem_per_block=dict(type="int"),
            work_dir=dict(type="path", default="/var/lib/llmops-sglang/moe-tune"),
            expected_file_name=dict(type="str"),
            chunk_size=dict(type="int"),
            environment=dict(type="dict", default={}),
            timeout=dict(type="int", default=43200),
            force=dict(type="bool", default=False),
        ),
        required_if=[("engine", "sglang", ["source_dir"]), ("mode", "benchmark", ["source_dir"])],
        supports_check_mode=True,
    )
    with guarded_work() as work:
        try:
            result = run_step(module, work)
        except (ValueError, OSError) as exc:
            module.fail_json(msg=str(exc), **getattr(exc, "details", {}))
    module.exit_json(**result)


if __name__ == "__main__":
    main()
