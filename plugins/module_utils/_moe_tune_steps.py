# Copyright (c) llmops.sglang contributors
# Apache License 2.0 (see LICENSE)
"""The steps of the moe_tune module (plan, chunk, benchmark, finish), private to it: the module holds its docs,
argument_spec and a main() that calls :func:`run_step` once.

Private to the llmops.sglang collection. Stdlib only besides the collection's own module_utils (Ansiballz ships
it to the managed host with the module). ``module`` is the module's AnsibleModule: its params, ``run_command``,
``get_bin_path``, ``check_mode`` and ``tmpdir`` are all a step uses of it.
"""
from __future__ import annotations

import json
import os
import shutil
import time

from ansible_collections.llmops.sglang.plugins.module_utils._moe_engine_steps import (
    ENGINE_CLI, engine_work_dir, install_cached, run_engine)
from ansible_collections.llmops.sglang.plugins.module_utils.atomic_write import write_atomically
from ansible_collections.llmops.sglang.plugins.module_utils.moe_engine import ENGINE_VERSION
from ansible_collections.llmops.sglang.plugins.module_utils.moe_engine_key import cache_key, probe_host
from ansible_collections.llmops.sglang.plugins.module_utils.command_runner import CommandRunner
from ansible_collections.llmops.sglang.plugins.module_utils.gpu import parse_query_gpu, query_gpu_argv
from ansible_collections.llmops.sglang.plugins.module_utils.moe_batch_sizes import resolve_batch_sizes
from ansible_collections.llmops.sglang.plugins.module_utils.moe_install import read_bytes
from ansible_collections.llmops.sglang.plugins.module_utils.moe_search_space import (
    PRUNINGS, compute_bound_search_space, operand_bytes, read_search_space_file, search_space_plan)
from ansible_collections.llmops.sglang.plugins.module_utils.moe_shapes import model_moe_shape
from ansible_collections.llmops.sglang.plugins.module_utils.moe_targets import (
    engine_shape, expected_down_tuner_output_name, expected_tuner_output_name, tuner_options)
from ansible_collections.llmops.sglang.plugins.module_utils.moe_tuner_output import (
    parse_tuner_benchmark_output, parse_tuner_tune_output)
from ansible_collections.llmops.sglang.plugins.module_utils.moe_tuning import (
    DOWN_TUNER, MAIN_TUNER, TuneError, TunerInvocation, chunks, final_output, fingerprint, invocation_dir, log_tail,
    merge_into_checkpoint, ray_cluster_gpus, ray_workers, read_checkpoint, read_tuner_cli, run_tuner, run_tuners,
    sha256_of, size_runs, step_request, tuner_command, tuner_environment, tuner_gpu, visible_devices)
from ansible_collections.llmops.sglang.plugins.module_utils.moe_validation import validate_config
from ansible_collections.llmops.sglang.plugins.module_utils.server_guard import Work
from ansible_collections.llmops.sglang.plugins.module_utils.sglang_env import probe_sglang, tuner_facts


def _read_json_file(path: str, option: str) -> tuple[bytes, object]:
    try:
        with open(path, "rb") as handle:
            data = handle.read()
        return data, json.loads(data)
    except (OSError, ValueError) as exc:
        raise ValueError(f"{option}: cannot read {path} as JSON: {exc}") from None


def _host_gpus(module) -> list[dict]:
    nvidia_smi = module.get_bin_path("nvidia-smi")
    if nvidia_smi is None:
        raise ValueError("nvidia-smi was not found on the host; the tuner needs the GPUs and their name")
    rc, out, err = CommandRunner(module)(query_gpu_argv(nvidia_smi))
    gpus = parse_query_gpu(out) if rc == 0 else []
    if not gpus:
        raise ValueError(f"nvidia-smi lists no GPUs (rc={rc}): {(err or out).strip()[-300:]}")
    return gpus


def _check_checkout(module, installed: str) -> str:
    """The tuner directory, after checking the checkout's version and scripts."""
    params = module.params
    tuner = tuner_facts(params["source_dir"], installed, CommandRunner(module))
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


def _tuner_file_name(params: dict, model_config: dict, device_name: str) -> str:
    name_for = expected_down_tuner_output_name if params["kernel"] == "down" else expected_tuner_output_name
    file_name = name_for(model_config, params["tp_size"], params["ep_size"], device_name, params["tuner_args"])
    if params["expected_file_name"] and params["expected_file_name"] != file_name:
        raise ValueError(
            f"expected_file_name: the {params['kernel']} tuner would write {file_name}, not "
            f"{params['expected_file_name']}; fix tuner_args (use the moe_targets filter's tuner_args) so it writes "
            "the name the server looks up"
        )
    return file_name


def _search_space(params: dict, shape: dict, cli: dict) -> tuple[dict, bytes | None, str | None]:
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


def _tuner_devices(environment: dict, gpus: list[dict]) -> list[str]:
    """The GPUs a tuner may use: the task environment's CUDA_VISIBLE_DEVICES entries, else every GPU of the host."""
    return visible_devices(environment) or [str(gpu["index"]) for gpu in gpus]


def _default_chunk_size(params: dict, devices: list[str]) -> int:
    environment = params["environment"]
    if environment.get("RAY_ADDRESS"):
        return ray_cluster_gpus(params["python"], tuner_environment(dict(os.environ), environment))
    return len(devices)


def _plan_step(module) -> dict:
    params = module.params
    probe = probe_sglang(CommandRunner(module), params["python"])
    # The engine needs no checkout; benchmark mode times the installed configs with SGLang's own script.
    uses_tuner = params["engine"] == "sglang" or params["mode"] == "benchmark"
    tuner_dir = _check_checkout(module, probe["versions"]["sglang"]) if uses_tuner else None
    _check_kernel_options(params)
    config_bytes, model_config = _read_json_file(os.path.join(params["model_path"], "config.json"), "model_path")
    gpus = _host_gpus(module)
    device_name = tuner_gpu(gpus, params["environment"])["name"]
    file_name = _tuner_file_name(params, model_config, device_name)
    sizes = resolve_batch_sizes(params["batch_sizes"], params["max_running_requests"],
                                params["speculative_num_draft_tokens"], params["chunked_prefill_size"])
    cli = read_tuner_cli(CommandRunner(module).bound(environ=tuner_environment({}, params["environment"])),
                         params["python"], tuner_dir,
                         DOWN_TUNER if params["kernel"] == "down" else MAIN_TUNER) if uses_tuner else ENGINE_CLI
    plan = {"mode": params["mode"], "kernel": params["kernel"], "engine": params["engine"], "file_name": file_name,
            "tuner_dir": tuner_dir, "batch_sizes": sizes["batch_sizes"], "batch_sizes_reason": sizes["reason"],
            "timeout": params["timeout"], "tuner_cli": cli, "notes": []}
    if cli["batch_sizes_per_run"] == "default":
        raise ValueError(f"{cli['script']} of this SGLang takes no batch sizes (no --batch-sizes, no --batch-size)")
    if params["mode"] == "tune":
        # Read once here: the chunk steps deal the down screener's batch sizes over these devices.
        plan["devices"] = _tuner_devices(params["environment"], gpus)
        # The engine tunes every batch size in one run (_engine_plan), also on a Ray cluster: no Ray probe for it.
        plan["chunk_size"] = params["chunk_size"] or (
            len(plan["devices"]) if params["engine"] == "llmops" else _default_chunk_size(params, plan["devices"]))
        if cli["batch_sizes_per_run"] == "one":
            plan["chunk_size"] = 1
            plan["notes"].append(f"{cli['script']} of this SGLang takes one --batch-size per run (no --batch-sizes): "
                                 f"{len(sizes['batch_sizes'])} runs of one batch size each, one GPU busy per run")
        if params["engine"] == "llmops":
            plan.update(_engine_plan(params, model_config, device_name, plan["devices"], len(sizes["batch_sizes"])))
        plan.update(_tune_plan(module, plan, config_bytes, model_config, probe["versions"]["sglang"]))
        if params["engine"] == "llmops":
            plan["engine_cache"] = _engine_cache(module, plan, tuner_gpu(gpus, params["environment"]), model_config)
    return {"changed": False, "plan": plan}


def _engine_cache(module, plan: dict, gpu: dict, model_config: dict) -> dict:
    """What the controller's cache needs of this task (docs/moe-engine.md, "Cache"): the key of its kernel's result
    (the host's parts read by a probe with the SGLang python) and whether to look it up (not with ``force``); or why
    the cache is not used."""
    params = module.params
    if not params["cache"]:
        return {"enabled": False, "reason": "cache: false"}
    run = CommandRunner(module).bound(environ=tuner_environment({}, params["environment"]))
    options = tuner_options(params["tuner_args"])
    quantisation = {"dtype": options["dtype"], "per_channel_quant": options["per_channel_quant"],
                    "block_shape": model_moe_shape(model_config)["block_shape"]}
    space = {"mode": plan["search_space"]["mode"], "sha256": plan["inputs"]["search_space_sha256"]}
    try:
        key = cache_key(gpu, probe_host(run, params["python"]), plan["engine_shape"], quantisation, plan["kernel"],
                        plan["batch_sizes"], space)
    except ValueError as exc:
        return {"enabled": False, "reason": f"no cache key: {exc}"}
    return {"enabled": True, "key": key, "lookup": not params["force"]}


def _check_kernel_options(params: dict) -> None:
    if params["mode"] == "benchmark" and params["kernel"] == "down":
        raise ValueError("kernel: benchmark mode times the whole fused MoE with the main tuner; use kernel=up")
    if params["engine"] == "llmops":  # the engine tunes both GEMMs in one run: no up config in, any space
        return
    if params["kernel"] == "down" and not params["gate_up_config"]:
        raise ValueError("gate_up_config: required for kernel=down; pass the up kernel's output_file")
    if params["kernel"] == "down" and params["search_space"] != "full":
        raise ValueError("search_space: tune_down_moe.py screens its own candidates (no --search-space-file); "
                         "use full for kernel=down")


def _engine_plan(params: dict, model_config: dict, device_name: str, devices: list[str], size_count: int) -> dict:
    """The engine's shape, work dir and workers: one run tunes every batch size, up and down together (one
    chunk), in the work dir of the target's up file, which both kernels' tasks share."""
    up_name = expected_tuner_output_name(model_config, params["tp_size"], params["ep_size"], device_name,
                                         params["tuner_args"])
    cores = os.cpu_count() or 2
    return {"engine_shape": engine_shape(model_config, params["tp_size"], params["ep_size"], params["tuner_args"]),
            "engine_kernels": "auto", "engine_work_dir": engine_work_dir(params["work_dir"], up_name),
            "compile_workers": params["compile_workers"] or max(1, cores - max(1, len(devices))),
            "chunk_size": size_count}


def _tune_plan(module, plan: dict, config_bytes: bytes, model_config: dict, sglang_version: str) -> dict:
    """Search space, checkpoint state and the chunks still to tune; writes the search-space file and
    drops an unusable checkpoint (not in check mode)."""
    params = module.params
    summary, space_content, space_file = _search_space(params, model_moe_shape(model_config), plan["tuner_cli"])
    if summary.get("applied") is False:
        plan["notes"].append(summary["reason"])
    gate_up_sha = None
    if params["kernel"] == "down" and params["engine"] == "sglang":
        gate_up_bytes, gate_up = _read_json_file(params["gate_up_config"], "gate_up_config")
        errors = validate_config(gate_up, kernel="up")
        if errors:
            raise ValueError(f"gate_up_config: {params['gate_up_config']} is not a valid up config: {'; '.join(errors)}")
        gate_up_sha = sha256_of(gate_up_bytes)
    # The engine's keys only where it runs: SGLang-tuner checkpoints of earlier releases of the collection stay valid.
    engine = {"engine": "llmops", "engine_version": ENGINE_VERSION} if params["engine"] == "llmops" else {}
    inputs = {**engine, "file_name": plan["file_name"], "kernel": plan["kernel"], "tuner_args": params["tuner_args"],
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


def _chunk_shares(plan: dict, chunk: list[int]) -> list[tuple[list[int], str | None]]:
    """(batch sizes, device) of each tuner process of a chunk.

    The up tuner spreads its batch sizes over the GPUs itself (Ray, one worker per GPU): one process on the task's
    devices (None: no CUDA_VISIBLE_DEVICES of its own). The down screener uses one GPU and tunes its batch sizes one
    after another (sgl-project/sglang benchmark/kernels/fused_moe_triton/tune_down_moe.py at commit
    4d078986693f893dd66e087b8529f4c7f56511d0: ``torch.set_default_device("cuda")``, a loop over --batch-sizes), so
    the chunk is dealt round-robin to one process per device, each seeing only its own device.
    """
    if plan["kernel"] == "up":
        return [(chunk, None)]
    devices = plan["devices"][:len(chunk)]
    return [(chunk[index::len(devices)], device) for index, device in enumerate(devices)]


def _chunk_invocation(params: dict, plan: dict, sizes: list[int], device: str | None,
                      env: dict[str, str]) -> TunerInvocation:
    run_dir = invocation_dir(params["work_dir"], f"{plan['kernel']}-M{sizes[0]}-")
    argv = tuner_command(params["python"], plan["tuner_dir"], kernel=plan["kernel"], mode="tune",
                         model_path=params["model_path"], tp_size=params["tp_size"], ep_size=params["ep_size"],
                         tuner_args=params["tuner_args"], batch_sizes=sizes, cli=plan["tuner_cli"],
                         search_space_file=plan["search_space_file"], gate_up_config=params["gate_up_config"],
                         out_dir=run_dir)
    return TunerInvocation(argv, run_dir, env if device is None else {**env, "CUDA_VISIBLE_DEVICES": device})


def _chunk_step(module, request: dict, work: Work) -> dict:
    params, plan, chunk = module.params, request["plan"], request["chunk"]
    if plan["engine"] == "llmops":
        return run_engine(module, plan, chunk, request["timeout"], on_start=work.add_process_group)
    env, drivers = tuner_environment(dict(os.environ), params["environment"]), []
    shares = _chunk_shares(plan, chunk)
    invocations = [_chunk_invocation(params, plan, sizes, device, env) for sizes, device in shares]
    runs = run_tuners(invocations, request["timeout"],
                      on_start=lambda pid: (drivers.append(pid), work.add_process_group(pid)))
    # Every process that succeeded is checkpointed, also when another failed: a rerun tunes only the failed ones.
    failures = [_checkpoint_run(plan, sizes, device, invocation.cwd, run)
                for (sizes, device), invocation, run in zip(shares, invocations, runs)]
    failures = [failure for failure in failures if failure is not None]
    if failures:
        raise _chunk_failure(plan, failures)
    configs = read_checkpoint(plan["checkpoint"], plan["fingerprint"])[0]
    return {"changed": True, "done": len([size for size in plan["batch_sizes"] if str(size) in configs]),
            "tuner_seconds": parse_tuner_tune_output(runs[0].stdout)["seconds"] if plan["kernel"] == "up" else None,
            "seconds": round(max(run.seconds for run in runs), 1),
            "placement": _chunk_placement(params["python"], env, plan["kernel"], chunk, shares, drivers)}


def _checkpoint_run(plan: dict, sizes: list[int], device: str | None, run_dir: str, run) -> dict | None:
    """Merge one tuner process's output into the checkpoint and remove its run dir; what went wrong instead."""
    output = os.path.join(run_dir, plan["file_name"])
    if run.timed_out:
        what = f"reached the task timeout after {run.seconds:.0f}s in this invocation and was ended"
    elif run.rc != 0:
        what = f"exited with rc={run.rc}"
    elif not os.path.exists(output):
        written = sorted(name for name in os.listdir(run_dir) if name.endswith(".json"))
        what = f"finished without writing {plan['file_name']} (it wrote {written or 'nothing'})"
    else:
        try:
            merge_into_checkpoint(plan["checkpoint"], plan["fingerprint"], plan["inputs"],
                                  _read_json_file(output, "the tuner's output")[1], plan["kernel"], sizes)
        except ValueError as exc:
            what = str(exc)
        else:
            shutil.rmtree(run_dir)
            return None
    return {"batch_sizes": sizes, "device": device, "what": what, "log_dir": run_dir, "log_tail": log_tail(run)}


def _chunk_placement(python: str, env: dict, kernel: str, chunk: list[int], shares: list, drivers: list[int]):
    """Where the chunk ran: the down screener's device per batch size; the up tuner's Ray workers on a cluster."""
    if kernel == "down":
        return {"batch_sizes": chunk, "gpus_used": len(shares),
                "devices": {str(size): device for sizes, device in shares for size in sizes}}
    # The main tuner runs on Ray; on a cluster (RAY_ADDRESS) Ray keeps the run's job and workers after it ended.
    # A local ray.init() ends with the tuner, so there is nothing to ask then (and everything ran on this host).
    if not env.get("RAY_ADDRESS"):
        return None
    try:
        return ray_workers(python, env, drivers[0], chunk)
    except ValueError as exc:  # the tuning is done and checkpointed; only the evidence of where is missing
        return {"batch_sizes": chunk, "error": str(exc)}


def _chunk_failure(plan: dict, failures: list[dict]) -> TuneError:
    configs = read_checkpoint(plan["checkpoint"], plan["fingerprint"])[0]
    done = [size for size in plan["batch_sizes"] if str(size) in configs]
    what = "; ".join(f"{failure['what']} while tuning batch sizes {failure['batch_sizes']}"
                     + ("" if failure["device"] is None else f" on device {failure['device']}")
                     for failure in failures)
    tail = failures[0]["log_tail"] if len(failures) == 1 else "\n".join(
        f"--- batch sizes {failure['batch_sizes']} on device {failure['device']} ({failure['log_dir']}):\n"
        f"{failure['log_tail']}" for failure in failures)
    kept = f"kept in {plan['checkpoint']}; a rerun resumes from there" if done else "nothing checkpointed"
    return TuneError(
        f"the {plan['kernel']} tuner {what}; batch sizes done: {done} ({len(done)}/{len(plan['batch_sizes'])}, "
        f"{kept}); nothing was written to {plan['output_file']}. Log tail:\n{tail}",
        batch_sizes_done=done, log_tail=tail, log_dir=failures[0]["log_dir"],
        failed_runs=[{key: failure[key] for key in ("batch_sizes", "device", "log_dir")} for failure in failures],
    )


def _finish_step(module, request: dict) -> dict:
    plan = request["plan"]
    configs = read_checkpoint(plan["checkpoint"], plan["fingerprint"])[0]
    content = final_output(configs, plan["batch_sizes"], plan["kernel"])
    changed = read_bytes(plan["output_file"]) != content
    if changed and not module.check_mode:
        write_atomically(plan["output_file"], content)
    return {"changed": changed, "output_file": plan["output_file"]}


def _benchmark_step(module, request: dict, work: Work) -> dict:
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
_TUNER_STEPS = {"chunk": _chunk_step, "benchmark": _benchmark_step}


def run_step(module, work: Work) -> dict:
    """The step the action plugin asked for (its request file in the task's tmp dir), run with ``module``'s params;
    the result to exit with. Raises ValueError / OSError (a TuneError carries ``details``) on failure."""
    request = step_request(module.tmpdir)
    step = request["step"]
    if step == "plan":
        return _plan_step(module)
    if step in _TUNER_STEPS:
        return _TUNER_STEPS[step](module, request, work)
    if step == "cached":  # a hit in the controller's cache: its configs into the checkpoint, no engine
        return install_cached(request["plan"], request["configs"], request["sizes"])
    return _finish_step(module, request)
