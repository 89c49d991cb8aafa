#!/usr/bin/python
# Copyright (c) llmops.sglang contributors
# Apache License 2.0 (see LICENSE)
from __future__ import annotations

DOCUMENTATION = r"""
---
module: moe_tune
short_description: Run SGLang's fused-MoE Triton tuner as a resumable, bounded job with progress
version_added: 1.0.0
description:
  - Runs SGLang's tuner from the host's SGLang source checkout with the SGLang venv's python. V(up) uses
    C(tuning_fused_moe_triton.py --tune) (Ray, one worker per GPU), V(down) uses C(tune_down_moe.py) with the up
    kernel's tuned config.
  - The tuner is driven by what its own C(--help) offers (read once per plan, RV(tuner_cli)). Tuning runs in chunks
    of batch sizes (C(--batch-sizes b1 .. bk), one tuner invocation each, so Ray keeps every GPU of a chunk busy);
    a tuner of an older SGLang that only has C(--batch-size) runs once per batch size (RV(notes) says so). After
    each chunk the tuned entries are merged into a checkpoint in O(work_dir); a rerun skips the batch sizes already
    checkpointed for the same inputs (RV(resumed)).
  - A tuner that crashes or runs past O(timeout) (its whole process group is ended) fails the task naming the batch
    sizes done and the log tail; the checkpoint keeps what was done. The output file is written, atomically, only
    when every batch size is tuned and the result validates, so partial output is never presented as a result.
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
  source_dir:
    description: SGLang source checkout holding C(benchmark/kernels/fused_moe_triton/), at the installed SGLang's version.
    type: path
    required: true
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
    description: Path on the host of the tuned up JSON; required for O(kernel=down) (C(--gate-up-config)).
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
      - Environment of the tuner, e.g. C(CUDA_VISIBLE_DEVICES), C(RAY_ADDRESS) (join an existing Ray cluster),
        C(SGLANG_MOE_CONFIG_DIR).
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
    - Empty for a local run (its Ray instance ends with the tuner; all of it ran on this host).
  returned: mode=tune
  type: list
  elements: dict
gpus_used:
  description: The most GPU workers one tuner run of this task had (RV(placements)); null without C(RAY_ADDRESS).
  returned: mode=tune
  type: int
hosts_used:
  description: Hosts (IP) whose Ray workers tuned batch sizes in this task (RV(placements)).
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
  description: Wall time of this run's tuner processes (the down screener prints no time of its own).
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
  description: Last lines of the failed tuner invocation's output.
  returned: failure of a tuner invocation
  type: str
log_dir:
  description: Directory kept with the failed invocation's full C(tuner.out) and C(tuner.err).
  returned: failure of a tuner invocation
  type: str
"""

import json
import os
import shutil
import tempfile
import time

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.llmops.sglang.plugins.module_utils.atomic_write import write_atomically
from ansible_collections.llmops.sglang.plugins.module_utils.gpu import parse_query_gpu, query_gpu_argv
from ansible_collections.llmops.sglang.plugins.module_utils.moe_batch_sizes import resolve_batch_sizes
from ansible_collections.llmops.sglang.plugins.module_utils.moe_install import read_bytes
from ansible_collections.llmops.sglang.plugins.module_utils.moe_search_space import (
    PRUNINGS, compute_bound_search_space, operand_bytes, read_search_space_file, search_space_plan)
from ansible_collections.llmops.sglang.plugins.module_utils.moe_shapes import model_moe_shape
from ansible_collections.llmops.sglang.plugins.module_utils.moe_targets import (
    expected_down_tuner_output_name, expected_tuner_output_name, tuner_options)
from ansible_collections.llmops.sglang.plugins.module_utils.moe_tuner_output import parse_tuner_benchmark_output, parse_tuner_tune_output
from ansible_collections.llmops.sglang.plugins.module_utils.moe_tuning import (
    DOWN_TUNER, MAIN_TUNER, TuneError, chunks, final_output, fingerprint, log_tail, merge_into_checkpoint,
    ray_cluster_gpus, ray_workers, read_checkpoint, read_tuner_cli, run_tuner, sha256_of, size_runs, step_request,
    tuner_command, tuner_device_name, tuner_environment, visible_gpu_count)
from ansible_collections.llmops.sglang.plugins.module_utils.moe_validation import validate_config
from ansible_collections.llmops.sglang.plugins.module_utils.server_guard import Work, guarded_work
from ansible_collections.llmops.sglang.plugins.module_utils.sglang_env import probe_sglang, tuner_facts


def read_json_file(path: str, option: str) -> tuple[bytes, object]:
    try:
        with open(path, "rb") as handle:
            data = handle.read()
        return data, json.loads(data)
    except (OSError, ValueError) as exc:
        raise ValueError(f"{option}: cannot read {path} as JSON: {exc}") from None


def host_gpus(module: AnsibleModule) -> list[dict]:
    nvidia_smi = module.get_bin_path("nvidia-smi")
    if nvidia_smi is None:
        raise ValueError("nvidia-smi was not found on the host; the tuner needs the GPUs and their name")
    rc, out, err = module.run_command(query_gpu_argv(nvidia_smi), environ_update={"LC_ALL": "C"})
    gpus = parse_query_gpu(out) if rc == 0 else []
    if not gpus:
        raise ValueError(f"nvidia-smi lists no GPUs (rc={rc}): {(err or out).strip()[-300:]}")
    return gpus


def check_checkout(module: AnsibleModule, installed: str) -> str:
    """The tuner directory, after checking the checkout's version and scripts."""
    params = module.params
    tuner = tuner_facts(params["source_dir"], installed, module.run_command)
    if tuner["source_version"] is None:
        raise ValueError(f"source_dir: cannot tell which SGLang {params['source_dir']} is: "
                         f"{tuner['source_version_problem']}; the installed sglang is {installed}, check out its tag "
                         f"(git checkout v{installed})")
    if not tuner["version_matches"]:
        raise ValueError(
            f"source_dir: {params['source_dir']} is SGLang {tuner['source_version']} ({tuner['source_version_origin']}) "
            f"but the installed sglang is {installed}; check out the v{installed} tag"
        )
    script = DOWN_TUNER if params["kernel"] == "down" else MAIN_TUNER
    if script not in tuner["scripts"]:
        raise ValueError(f"source_dir: {tuner['dir']} has no {script}; "
                         f"this SGLang version cannot tune the {params['kernel']} kernel")
    return tuner["dir"]


def tuner_file_name(params: dict, model_config: dict, device_name: str) -> str:
    name_for = expected_down_tuner_output_name if params["kernel"] == "down" else expected_tuner_output_name
    file_name = name_for(model_config, params["tp_size"], params["ep_size"], device_name, params["tuner_args"])
    if params["expected_file_name"] and params["expected_file_name"] != file_name:
        raise ValueError(
            f"expected_file_name: the {params['kernel']} tuner would write {file_name}, not "
            f"{params['expected_file_name']}; fix tuner_args (use the moe_targets filter's tuner_args) so it writes "
            "the name the server looks up"
        )
    return file_name


def search_space(params: dict, shape: dict, cli: dict) -> tuple[dict, bytes | None, str | None]:
    """(summary, content to write for prefiltered, --search-space-file path). A tuner without
    ``--search-space-file`` tunes its own full space: the summary says the requested space cannot apply."""
    mode = params["search_space"]
    if mode != "full" and not cli["search_space_file"]:
        total = len(compute_bound_search_space(shape["block_shape"]))
        return {"mode": "full", "requested": mode, "applied": False, "total": total, "kept": total, "dropped": 0,
                "reason": f"{cli['script']} of this SGLang has no --search-space-file: the {mode} search space "
                          f"cannot apply, it tunes its own full space ({total} configs)"}, None, None
    if mode in ("full", *PRUNINGS):
        operands = operand_bytes(tuner_options(params["tuner_args"])["dtype"], shape["dtype"])
        plan = search_space_plan(mode, shape["block_shape"], params["smem_per_block"], operands)
        configs = plan.pop("configs")
        if configs is None:
            return plan, None, None
        content = (json.dumps(configs, indent=1) + "\n").encode()
        path = os.path.join(params["work_dir"], "search-space", f"{sha256_of(content)[:16]}.json")
        return plan, content, path
    configs = read_search_space_file(mode)
    return {"mode": "file", "path": mode, "total": len(configs), "kept": len(configs), "dropped": 0}, None, mode


def default_chunk_size(params: dict, gpus: list[dict]) -> int:
    environment = params["environment"]
    if environment.get("RAY_ADDRESS"):
        return ray_cluster_gpus(params["python"], tuner_environment(dict(os.environ), environment))
    return visible_gpu_count(environment) or len(gpus)


def plan_step(module: AnsibleModule) -> dict:
    params = module.params
    probe = probe_sglang(module.run_command, params["python"])
    tuner_dir = check_checkout(module, probe["versions"]["sglang"])
    if params["mode"] == "benchmark" and params["kernel"] == "down":
        raise ValueError("kernel: benchmark mode times the whole fused MoE with the main tuner; use kernel=up")
    if params["kernel"] == "down" and not params["gate_up_config"]:
        raise ValueError("gate_up_config: required for kernel=down; pass the up kernel's output_file")
    if params["kernel"] == "down" and params["search_space"] != "full":
        raise ValueError("search_space: tune_down_moe.py screens its own candidates (no --search-space-file); "
                         "use full for kernel=down")
    config_bytes, model_config = read_json_file(os.path.join(params["model_path"], "config.json"), "model_path")
    gpus = host_gpus(module)
    file_name = tuner_file_name(params, model_config, tuner_device_name(gpus, params["environment"]))
    sizes = resolve_batch_sizes(params["batch_sizes"], params["max_running_requests"],
                                params["speculative_num_draft_tokens"], params["chunked_prefill_size"])
    cli = read_tuner_cli(lambda argv: module.run_command(argv, environ_update=tuner_environment({}, params["environment"])),
                         params["python"], tuner_dir, DOWN_TUNER if params["kernel"] == "down" else MAIN_TUNER)
    plan = {"mode": params["mode"], "kernel": params["kernel"], "file_name": file_name, "tuner_dir": tuner_dir,
            "batch_sizes": sizes["batch_sizes"], "batch_sizes_reason": sizes["reason"], "timeout": params["timeout"],
            "tuner_cli": cli, "notes": []}
    if cli["batch_sizes_per_run"] == "default":
        raise ValueError(f"{cli['script']} of this SGLang takes no batch sizes (no --batch-sizes, no --batch-size)")
    if params["mode"] == "tune":
        plan["chunk_size"] = params["chunk_size"] or default_chunk_size(params, gpus)
        if cli["batch_sizes_per_run"] == "one":
            plan["chunk_size"] = 1
            plan["notes"].append(f"{cli['script']} of this SGLang takes one --batch-size per run (no --batch-sizes): "
                                 f"{len(sizes['batch_sizes'])} runs of one batch size each, one GPU busy per run")
        plan.update(tune_plan(module, plan, config_bytes, model_config, probe["versions"]["sglang"]))
    return {"changed": False, "plan": plan}


def tune_plan(module: AnsibleModule, plan: dict, config_bytes: bytes, model_config: dict, sglang_version: str) -> dict:
    """Search space, checkpoint state and the chunks still to tune; writes the search-space file and
    drops an unusable checkpoint (not in check mode)."""
    params = module.params
    summary, space_content, space_file = search_space(params, model_moe_shape(model_config), plan["tuner_cli"])
    if summary.get("applied") is False:
        plan["notes"].append(summary["reason"])
    gate_up_sha = None
    if params["kernel"] == "down":
        gate_up_bytes, gate_up = read_json_file(params["gate_up_config"], "gate_up_config")
        errors = validate_config(gate_up, kernel="up")
        if errors:
            raise ValueError(f"gate_up_config: {params['gate_up_config']} is not a valid up config: {'; '.join(errors)}")
        gate_up_sha = sha256_of(gate_up_bytes)
    inputs = {"file_name": plan["file_name"], "kernel": plan["kernel"], "tuner_args": params["tuner_args"],
              "tp_size": params["tp_size"], "ep_size": params["ep_size"], "sglang_version": sglang_version,
              "model_config_sha256": sha256_of(config_bytes), "gate_up_sha256": gate_up_sha,
              "search_space": summary["mode"],
              "search_space_sha256": sha256_of(space_content or read_bytes(space_file) or b"") if space_file else None}
    checkpoint = os.path.join(params["work_dir"], "checkpoints", f"{plan['file_name']}.checkpoint")
    checkpoint_fingerprint = fingerprint(inputs)
    configs, discarded = read_checkpoint(checkpoint, checkpoint_fingerprint)
    if params["force"] and os.path.exists(checkpoint):
        configs, discarded = {}, "force: the checkpoint was discarded"
    todo = [size for size in plan["batch_sizes"] if str(size) not in configs]
    output_file = os.path.join(params["work_dir"], plan["file_name"])
    output_current = not todo and read_bytes(output_file) == final_output(configs, plan["batch_sizes"], plan["kernel"])
    if not module.check_mode:
        if space_content is not None and read_bytes(space_file) != space_content:
            os.makedirs(os.path.dirname(space_file), exist_ok=True)
            write_atomically(space_file, space_content)
        if discarded and os.path.exists(checkpoint):
            os.remove(checkpoint)
    return {"search_space": summary, "search_space_file": space_file, "inputs": inputs,
            "fingerprint": checkpoint_fingerprint, "checkpoint": checkpoint, "checkpoint_discarded": discarded,
            "resumed": len(plan["batch_sizes"]) - len(todo), "chunks": chunks(todo, plan["chunk_size"]),
            "output_file": output_file, "output_current": output_current}


def invocation_dir(work_dir: str, prefix: str) -> str:
    parent = os.path.join(work_dir, "runs")
    os.makedirs(parent, exist_ok=True)
    return tempfile.mkdtemp(prefix=prefix, dir=parent)


def chunk_step(module: AnsibleModule, request: dict, work: Work) -> dict:
    params, plan, chunk = module.params, request["plan"], request["chunk"]
    run_dir = invocation_dir(params["work_dir"], f"{plan['kernel']}-M{chunk[0]}-")
    argv = tuner_command(params["python"], plan["tuner_dir"], kernel=plan["kernel"], mode="tune",
                         model_path=params["model_path"], tp_size=params["tp_size"], ep_size=params["ep_size"],
                         tuner_args=params["tuner_args"], batch_sizes=chunk, cli=plan["tuner_cli"],
                         search_space_file=plan["search_space_file"], gate_up_config=params["gate_up_config"],
                         out_dir=run_dir)
    env, drivers = tuner_environment(dict(os.environ), params["environment"]), []
    run = run_tuner(argv, run_dir, env, request["timeout"],
                    on_start=lambda pid: (drivers.append(pid), work.add_process_group(pid)))
    output = os.path.join(run_dir, plan["file_name"])
    if run.timed_out or run.rc != 0 or not os.path.exists(output):
        raise chunk_failure(plan, chunk, run, run_dir)
    chunk_configs = read_json_file(output, "the tuner's output")[1]
    configs = merge_into_checkpoint(plan["checkpoint"], plan["fingerprint"], plan["inputs"], chunk_configs,
                                    plan["kernel"], chunk)
    shutil.rmtree(run_dir)
    # The main tuner runs on Ray; on a cluster (RAY_ADDRESS) Ray keeps the run's job and workers after it ended.
    # A local ray.init() ends with the tuner, so there is nothing to ask then (and everything ran on this host).
    placement = None
    if plan["kernel"] == "up" and env.get("RAY_ADDRESS"):
        try:
            placement = ray_workers(params["python"], env, drivers[0], chunk)
        except ValueError as exc:  # the tuning is done and checkpointed; only the evidence of where is missing
            placement = {"batch_sizes": chunk, "error": str(exc)}
    return {"changed": True, "done": len([size for size in plan["batch_sizes"] if str(size) in configs]),
            "tuner_seconds": parse_tuner_tune_output(run.stdout)["seconds"] if plan["kernel"] == "up" else None,
            "seconds": round(run.seconds, 1), "placement": placement}


def chunk_failure(plan: dict, chunk: list, run, run_dir: str) -> TuneError:
    configs = read_checkpoint(plan["checkpoint"], plan["fingerprint"])[0]
    done = [size for size in plan["batch_sizes"] if str(size) in configs]
    if run.timed_out:
        what = f"reached the task timeout after {run.seconds:.0f}s in this invocation and was ended"
    elif run.rc != 0:
        what = f"exited with rc={run.rc}"
    else:
        written = sorted(name for name in os.listdir(run_dir) if name.endswith(".json"))
        what = f"finished without writing {plan['file_name']} (it wrote {written or 'nothing'})"
    tail = log_tail(run)
    kept = f"kept in {plan['checkpoint']}; a rerun resumes from there" if done else "nothing checkpointed"
    return TuneError(
        f"the {plan['kernel']} tuner {what} while tuning batch sizes {chunk}; batch sizes done: {done} "
        f"({len(done)}/{len(plan['batch_sizes'])}, {kept}); nothing was written to {plan['output_file']}. "
        f"Log tail:\n{tail}",
        batch_sizes_done=done, log_tail=tail, log_dir=run_dir,
    )


def finish_step(module: AnsibleModule, request: dict) -> dict:
    plan = request["plan"]
    configs = read_checkpoint(plan["checkpoint"], plan["fingerprint"])[0]
    content = final_output(configs, plan["batch_sizes"], plan["kernel"])
    changed = read_bytes(plan["output_file"]) != content
    if changed and not module.check_mode:
        write_atomically(plan["output_file"], content)
    return {"changed": changed, "output_file": plan["output_file"]}


def benchmark_step(module: AnsibleModule, request: dict, work: Work) -> dict:
    """Kernel times with the installed configs: one tuner run, or one per batch size where the tuner takes one."""
    params, plan = module.params, request["plan"]
    run_dir = invocation_dir(params["work_dir"], "benchmark-")
    deadline = time.monotonic() + request["timeout"]
    results, seconds = {}, 0.0
    for sizes in size_runs(plan["batch_sizes"], plan["tuner_cli"]):
        argv = tuner_command(params["python"], plan["tuner_dir"], kernel="up", mode="benchmark",
                             model_path=params["model_path"], tp_size=params["tp_size"], ep_size=params["ep_size"],
                             tuner_args=params["tuner_args"], batch_sizes=sizes, cli=plan["tuner_cli"])
        run = run_tuner(argv, run_dir, tuner_environment(dict(os.environ), params["environment"]),
                        deadline - time.monotonic(), on_start=work.add_process_group)
        seconds += run.seconds
        results.update(parse_tuner_benchmark_output(run.stdout))
        missing = [size for size in sizes if results.get(size, {}).get("kernel_us") is None]
        if run.timed_out or run.rc != 0 or missing:
            tail = log_tail(run)
            raise TuneError(f"the tuner benchmark {'timed out' if run.timed_out else f'exited with rc={run.rc}'} "
                            f"without a kernel time for batch sizes {missing}. Log tail:\n{tail}", log_tail=tail,
                            log_dir=run_dir)
    shutil.rmtree(run_dir)
    return {"changed": False, "seconds": round(seconds, 1),
            "kernel_times": {size: {"config": results[size]["config"], "kernel_time_us": results[size]["kernel_us"]}
                             for size in plan["batch_sizes"]}}


# Steps that start the tuner: they register its process group with the host's guard.
TUNER_STEPS = {"chunk": chunk_step, "benchmark": benchmark_step}


def main() -> None:
    module = AnsibleModule(
        argument_spec=dict(
            python=dict(type="path", default="/opt/sglang/venv/bin/python"),
            source_dir=dict(type="path", required=True),
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
        supports_check_mode=True,
    )
    with guarded_work() as work:
        try:
            request = step_request(module.tmpdir)
            step = request["step"]
            if step == "plan":
                result = plan_step(module)
            elif step in TUNER_STEPS:
                result = TUNER_STEPS[step](module, request, work)
            else:
                result = finish_step(module, request)
        except (ValueError, OSError) as exc:
            module.fail_json(msg=str(exc), **getattr(exc, "details", {}))
    module.exit_json(**result)


if __name__ == "__main__":
    main()
