# Copyright (c) llmops.sglang contributors
# Apache License 2.0 (see LICENSE)
"""Running SGLang's fused-MoE tuners as a resumable job: chunked tuner invocations, the tuner's CLI,
per-target checkpoints, the final output and progress lines (targets, batch sizes and the search space
have their own files: moe_targets, moe_batch_sizes, moe_search_space).

Private to the llmops.sglang collection. Stdlib only (runs on the managed hosts' python3). Processes
are started only by :func:`run_tuners`, :func:`ray_cluster_gpus` and :func:`ray_workers`, with ``subprocess``:
the tuner runs for hours in its own process group that the guard may end, and the Ray probes need a time limit,
neither of which ``AnsibleModule.run_command`` offers. Their environment is :func:`tuner_environment`, which
forces the locale of every other command (``command_runner.command_environment``). Files are touched only by the
``read_*`` functions and :func:`merge_into_checkpoint`.

A checkpoint (``<work_dir>/checkpoints/<file name>.checkpoint``) is a JSON document
``{"fingerprint", "inputs", "configs"}``: the tuned entries so far, valid only for the same
inputs (tuner arguments, search space, gate/up config, model config, SGLang version).
"""
from __future__ import annotations

import hashlib
import json
import os
import re
import signal
import subprocess
import tempfile
import time
from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import dataclass
from typing import Any

from ansible_collections.llmops.sglang.plugins.module_utils.action_request import read_request, request_file_name
from ansible_collections.llmops.sglang.plugins.module_utils.atomic_write import write_atomically
from ansible_collections.llmops.sglang.plugins.module_utils.command_runner import command_environment
from ansible_collections.llmops.sglang.plugins.module_utils.moe_targets import down_tuner_arguments
from ansible_collections.llmops.sglang.plugins.module_utils.moe_validation import validate_config
from ansible_collections.llmops.sglang.plugins.module_utils.server_args import parse_help_flags

MAIN_TUNER = "tuning_fused_moe_triton.py"
DOWN_TUNER = "tune_down_moe.py"
# Seconds between SIGTERM to the tuner's process group and SIGKILL (Ray shuts its local cluster down on SIGTERM).
TERMINATE_GRACE_S = 10.0
_ANSI_ESCAPE = re.compile(r"\x1b\[[0-9;]*m")
# How a worker process reports its own death: CPython's fatal-signal handler, CUDA/Triton failures.
_CRASH_LINE = re.compile(r"Fatal Python error|CUDA error|out of memory|core dumped")
# Prints the count alone on stdout (ray.init() logs to stderr).
RAY_GPU_PROBE = "import ray; ray.init(); print(int(ray.cluster_resources().get('GPU', 0)))"
# Where a tuner run's Ray workers ran, from Ray's own GCS tables (job of the tuner's driver pid, its
# BenchmarkWorker actors, one GPU each, and the nodes). ray.util.state needs Ray's dashboard, which the clusters
# here (ray_cluster role: --include-dashboard=false) and the tuner's local ray.init() do not run; the GCS keeps
# finished jobs and dead actors, so this works right after the tuner exited. Prints one JSON document.
RAY_WORKERS_PROBE = r"""
import json, sys
import ray
from ray._private.state import state
pid, actor_class = int(sys.argv[1]), sys.argv[2]
ray.init(logging_level="ERROR", log_to_driver=False)
jobs = sorted((job for job in state.job_table() if job.get("DriverPid") == pid), key=lambda job: job["StartTime"])
job = jobs[-1]["JobID"] if jobs else None
nodes = {node["NodeID"]: node for node in ray.nodes()}
workers = [actor for actor in state.actor_table(None).values()
           if actor.get("JobID") == job and actor.get("ActorClassName") == actor_class]
def node_of(node_id):
    node = nodes.get(node_id, {})
    return {"node_id": node_id, "ip": node.get("NodeManagerAddress"), "host": node.get("NodeManagerHostname")}
print(json.dumps({
    "job_id": job,
    "nodes": [{**node_of(node_id), "gpus": int(node["Resources"].get("GPU", 0)), "alive": node["Alive"]}
              for node_id, node in nodes.items()],
    "workers": [{**node_of(actor["Address"]["NodeID"]), "actor_id": actor["ActorID"], "pid": actor["Pid"]}
                for actor in workers]}))
"""


class TuneError(ValueError):
    """A failed tuner step; ``details`` are returned with the failure (batch sizes done, log tail)."""

    def __init__(self, message: str, **details: Any) -> None:
        super().__init__(message)
        self.details = details


# ---------------------------------------------------------------------------------------------
# Chunks, GPUs and where the Ray workers ran
# ---------------------------------------------------------------------------------------------


def chunks(batch_sizes: list[int], size: int) -> list[list[int]]:
    if size < 1:
        raise ValueError(f"chunk_size: {size} must be >= 1")
    return [batch_sizes[start:start + size] for start in range(0, len(batch_sizes), size)]


def visible_devices(environment: dict) -> list[str] | None:
    """Entries of ``CUDA_VISIBLE_DEVICES`` in the task environment, indices or UUIDs (None when unset)."""
    value = environment.get("CUDA_VISIBLE_DEVICES")
    if value is None:
        return None
    return [device.strip() for device in str(value).split(",") if device.strip()]


def ray_cluster_gpus(python: str, env: dict[str, str], timeout_s: float = 120.0) -> int:
    """GPUs of the Ray cluster ``RAY_ADDRESS`` in ``env`` points at, asked through the SGLang python's ray."""
    try:  # subprocess, not run_command: a time limit; env is tuner_environment's (the forced locale)
        # pylint: disable-next=ansible-bad-function
        probe = subprocess.run([python, "-c", RAY_GPU_PROBE], env=env, capture_output=True, text=True,
                               timeout=timeout_s, check=False)
    except subprocess.TimeoutExpired:
        probe = None
    lines = probe.stdout.split() if probe and probe.returncode == 0 else []
    if not lines or not lines[-1].isdigit() or int(lines[-1]) < 1:
        detail = "no answer" if probe is None else (probe.stderr.strip()[-400:] or f"GPUs: {lines[-1:] or 'none'}")
        raise ValueError(
            f"environment.RAY_ADDRESS: cannot count the GPUs of the Ray cluster at {env.get('RAY_ADDRESS')} ({detail}); "
            "check the cluster or set chunk_size"
        )
    return int(lines[-1])


def ray_workers(python: str, env: dict[str, str], driver_pid: int, batch_sizes: list[int],
                actor_class: str = "BenchmarkWorker", timeout_s: float = 120.0) -> dict[str, Any]:
    """Where one tuner run's work ran, as Ray saw it (cluster at ``RAY_ADDRESS`` in ``env``): the nodes and their
    GPUs, the run's GPU workers (one ``BenchmarkWorker`` actor per GPU) and their hosts.

    The tuner hands batch size i to worker i mod (workers) (upstream's ``_distribute``); which actor is worker i
    Ray does not record, so ``hosts_used`` counts hosts whose workers had work only when every worker had some
    (batch sizes >= workers). Raises ValueError when Ray cannot be asked or knows no job of that driver.
    """
    try:  # subprocess, not run_command: a time limit; env is tuner_environment's (the forced locale)
        # pylint: disable-next=ansible-bad-function
        probe = subprocess.run([python, "-c", RAY_WORKERS_PROBE, str(driver_pid), actor_class], env=env,
                               capture_output=True, text=True, timeout=timeout_s, check=False)
    except subprocess.TimeoutExpired:
        raise ValueError(f"Ray at {env.get('RAY_ADDRESS')} did not answer within {timeout_s:.0f}s") from None
    lines = probe.stdout.strip().splitlines()
    if probe.returncode != 0 or not lines:
        raise ValueError(f"cannot ask Ray at {env.get('RAY_ADDRESS')} where the tuner ran: "
                         f"{_ANSI_ESCAPE.sub('', probe.stderr.strip())[-600:]}")
    seen = json.loads(lines[-1])
    if seen["job_id"] is None:
        raise ValueError(f"Ray at {env.get('RAY_ADDRESS')} has no job of the tuner's driver (pid {driver_pid})")
    workers = seen["workers"]
    busy = workers if len(batch_sizes) >= len(workers) else []
    return {
        "job_id": seen["job_id"],
        "cluster_gpus": sum(node["gpus"] for node in seen["nodes"] if node["alive"]),
        "cluster_hosts": sorted({node["ip"] for node in seen["nodes"] if node["alive"] and node["gpus"]}),
        "gpus_used": len(workers),
        "workers_per_host": {ip: sum(1 for w in workers if w["ip"] == ip) for ip in sorted({w["ip"] for w in workers})},
        "hosts_used": sorted({worker["ip"] for worker in busy}),
        "nodes_used": sorted({worker["node_id"] for worker in busy}),
        "batch_sizes": list(batch_sizes),
        "workers": workers,
    }


def tuner_gpu(gpus: list[dict], environment: dict) -> dict:
    """The GPU torch sees as ``cuda:0``: the first ``CUDA_VISIBLE_DEVICES`` entry (index or UUID), else GPU 0."""
    first = str(environment.get("CUDA_VISIBLE_DEVICES", "")).split(",", maxsplit=1)[0].strip()
    return next((gpu for gpu in gpus if first in (str(gpu["index"]), gpu["uuid"])), gpus[0])


# ---------------------------------------------------------------------------------------------
# The tuner's own CLI (its argparse, read from --help)
# ---------------------------------------------------------------------------------------------


def tuner_cli(script: str, help_text: str) -> dict[str, Any]:
    """What a tuner script's argparse offers, from its ``--help``: ``{script, options, batch_sizes_per_run,
    search_space_file}``. ``batch_sizes_per_run`` is ``many`` (``--batch-sizes``), ``one`` (only
    ``--batch-size``: one run per batch size) or ``default`` (neither: the tuner's own list only).

    Upstream's ``tuning_fused_moe_triton.py`` took one ``--batch-size`` and its own search space until
    ``--batch-sizes`` and ``--search-space-file`` arrived in v0.5.16 (sgl-project/sglang
    benchmark/kernels/fused_moe_triton/tuning_fused_moe_triton.py, changed by commit a358abd6; per-tag fixtures in
    tests/fixtures/sglang_tuner_cli/); ``tune_down_moe.py`` (in no tag up to v0.5.18) has ``--batch-sizes``
    (nargs='*') and no search space.
    """
    options = sorted(parse_help_flags(help_text))
    if not {"model", "tp_size"} <= set(options):
        raise ValueError(f"{script} --help lists no --model/--tp-size; it is not SGLang's MoE tuner:\n{help_text[-600:]}")
    per_run = "many" if "batch_sizes" in options else "one" if "batch_size" in options else "default"
    return {"script": script, "options": options, "batch_sizes_per_run": per_run,
            "search_space_file": "search_space_file" in options}


def read_tuner_cli(run: Callable[[list], tuple], python: str, tuner_dir: str, script: str) -> dict[str, Any]:
    """:func:`tuner_cli` of ``python <tuner_dir>/<script> --help`` run through ``run(argv) -> (rc, out, err)``."""
    rc, out, err = run([python, os.path.join(tuner_dir, script), "--help"])
    if rc != 0:
        raise ValueError(f"{script} --help failed (rc={rc}); the tuner cannot start on this host:\n"
                         f"{_ANSI_ESCAPE.sub('', (err or out).strip())[-1500:]}")
    return tuner_cli(script, out)


def size_runs(batch_sizes: list[int], cli: dict) -> list[list[int]]:
    """The tuner invocations that cover ``batch_sizes``: all at once with ``--batch-sizes``, else one each."""
    if cli["batch_sizes_per_run"] == "many":
        return [list(batch_sizes)]
    if cli["batch_sizes_per_run"] == "one":
        return [[size] for size in batch_sizes]
    raise ValueError(f"{cli['script']} has neither --batch-sizes nor --batch-size; it only runs its own batch sizes")


def _checked_flags(cli: dict, tuner_args: list[str]) -> list[str]:
    missing = [arg for arg in tuner_args if arg.startswith("--")
               and arg.split("=", 1)[0][2:].replace("-", "_") not in cli["options"]]
    if missing:
        raise ValueError(f"tuner_args: {cli['script']} of this SGLang has no {', '.join(missing)} "
                         f"(its options: {', '.join('--' + o.replace('_', '-') for o in cli['options'])})")
    return tuner_args


# ---------------------------------------------------------------------------------------------
# Tuner command lines
# ---------------------------------------------------------------------------------------------


def tuner_command(
    python: str,
    tuner_dir: str,
    *,
    kernel: str,
    mode: str,
    model_path: str,
    tp_size: int,
    ep_size: int,
    tuner_args: list[str],
    batch_sizes: list[int],
    cli: dict,
    search_space_file: str | None = None,
    gate_up_config: str | None = None,
    out_dir: str | None = None,
) -> list[str]:
    """argv of one tuner invocation, in the options ``cli`` (:func:`tuner_cli`) says the script has. Scripts run
    by absolute path: Python puts their directory on ``sys.path``, so ``from common_utils import ...`` works with
    any CWD (the main tuner writes into it)."""
    common = ["--model", model_path, "--tp-size", str(tp_size)]
    if "ep_size" in cli["options"]:
        common += ["--ep-size", str(ep_size)]
    elif ep_size != 1:
        raise ValueError(f"ep_size: {cli['script']} of this SGLang has no --ep-size; it cannot tune ep_size={ep_size}")
    if cli["batch_sizes_per_run"] == "many":
        sizes = ["--batch-sizes", *map(str, batch_sizes)]
    elif len(batch_sizes) == 1 and cli["batch_sizes_per_run"] == "one":
        sizes = ["--batch-size", str(batch_sizes[0])]
    else:
        raise ValueError(f"{cli['script']} takes {cli['batch_sizes_per_run']} batch size(s) per run, not {batch_sizes}")
    if kernel == "down":
        argv = [python, os.path.join(tuner_dir, DOWN_TUNER), *common, *_checked_flags(cli, down_tuner_arguments(tuner_args)),
                "--gate-up-config", gate_up_config, *sizes]
        return argv + (["--out-dir", out_dir] if "out_dir" in cli["options"] else [])
    argv = [python, os.path.join(tuner_dir, MAIN_TUNER), *common, *_checked_flags(cli, tuner_args), *sizes]
    if mode == "tune":
        argv.append("--tune")
        if search_space_file:
            if not cli["search_space_file"]:
                raise ValueError(f"{cli['script']} of this SGLang has no --search-space-file")
            argv += ["--search-space-file", search_space_file]
    return argv


# ---------------------------------------------------------------------------------------------
# Checkpoints and the final output
# ---------------------------------------------------------------------------------------------


def sha256_of(data: bytes | str) -> str:
    return hashlib.sha256(data.encode() if isinstance(data, str) else data).hexdigest()


def fingerprint(inputs: dict) -> str:
    return sha256_of(json.dumps(inputs, sort_keys=True))


def read_checkpoint(path: str, expected_fingerprint: str) -> tuple[dict[str, dict], str | None]:
    """Entries tuned so far for these inputs, and why an existing checkpoint was not usable (or None)."""
    try:
        with open(path, encoding="utf-8") as handle:
            document = json.load(handle)
    except FileNotFoundError:
        return {}, None
    except (OSError, ValueError) as exc:
        return {}, f"{path} is unreadable ({exc}); starting over"
    if not isinstance(document, dict) or document.get("fingerprint") != expected_fingerprint:
        return {}, (f"{path} was made with other inputs (tuner arguments, search space, gate/up config, model or "
                    "SGLang); starting over")
    return document.get("configs") or {}, None


def merge_into_checkpoint(
    path: str, checkpoint_fingerprint: str, inputs: dict, chunk_configs: Any, kernel: str, batch_sizes: list[int]
) -> dict[str, dict]:
    """Add one chunk's tuner output to the checkpoint (atomically) after checking it holds exactly
    ``batch_sizes`` with valid entries; returns every entry tuned so far."""
    errors = validate_config(chunk_configs, kernel=kernel)
    if not errors and sorted(chunk_configs, key=int) != [str(size) for size in batch_sizes]:
        errors = [f"the tuner wrote batch sizes {sorted(chunk_configs, key=int)} instead of {batch_sizes}"]
    if errors:
        raise ValueError(f"the tuner's output for batch sizes {batch_sizes} is invalid: " + "; ".join(errors))
    configs = read_checkpoint(path, checkpoint_fingerprint)[0]
    configs.update(chunk_configs)
    document = {"fingerprint": checkpoint_fingerprint, "inputs": inputs, "configs": configs}
    os.makedirs(os.path.dirname(path), exist_ok=True)
    write_atomically(path, (json.dumps(document, indent=2) + "\n").encode())
    return configs


def final_output(configs: dict[str, dict], batch_sizes: list[int], kernel: str) -> bytes:
    """The output file content, only when every batch size is tuned and the result validates;
    formatted like the tuner's own ``json.dump(indent=4)`` plus newline."""
    missing = [size for size in batch_sizes if str(size) not in configs]
    if missing:
        raise ValueError(f"batch sizes {missing} are not tuned yet; no output file is written from a partial result")
    output = {str(size): configs[str(size)] for size in batch_sizes}
    errors = validate_config(output, kernel=kernel)
    if errors:
        raise ValueError("the checkpointed configs are invalid, no output file is written: " + "; ".join(errors))
    return (json.dumps(output, indent=4) + "\n").encode()


# ---------------------------------------------------------------------------------------------
# Running a tuner
# ---------------------------------------------------------------------------------------------


@dataclass
class TunerRun:
    rc: int | None  # None when it was killed at the timeout
    timed_out: bool
    seconds: float
    stdout: str
    stderr: str


@dataclass
class TunerInvocation:
    argv: list[str]
    cwd: str  # gets the invocation's tuner.out and tuner.err
    env: dict[str, str]


def invocation_dir(work_dir: str, prefix: str) -> str:
    """A fresh directory under ``<work_dir>/runs`` for one tuner or engine invocation (its output and logs)."""
    parent = os.path.join(work_dir, "runs")
    os.makedirs(parent, exist_ok=True)
    return tempfile.mkdtemp(prefix=prefix, dir=parent)


def run_tuner(argv: list[str], cwd: str, env: dict[str, str], timeout_s: float,
              on_start: Callable[[int], None] | None = None) -> TunerRun:
    """Run one tuner invocation in its own process group (:func:`run_tuners` of one)."""
    return run_tuners([TunerInvocation(argv, cwd, env)], timeout_s, on_start)[0]


def run_tuners(invocations: list[TunerInvocation], timeout_s: float,
               on_start: Callable[[int], None] | None = None) -> list[TunerRun]:
    """Run tuner invocations at once, each in its own process group; output goes to its ``cwd``/tuner.{out,err}.
    One deadline for all: ``timeout_s`` from the start.

    At the timeout every group still running (driver, Ray's raylet/GCS/workers) gets SIGTERM, then SIGKILL
    after a grace period; stragglers of a finished run are ended the same way. ``on_start`` gets each group's id
    (the host's guard ends it when the controller went away). ``seconds`` of a run is from the common start to its
    end.
    """
    started = time.monotonic()
    with ExitStack() as files:
        processes = []
        try:
            for invocation in invocations:
                out = files.enter_context(open(os.path.join(invocation.cwd, "tuner.out"), "wb"))
                err = files.enter_context(open(os.path.join(invocation.cwd, "tuner.err"), "wb"))
                # A raw Popen, not run_command: the tuner runs for hours in its own process group, which the host's
                # guard (on_start) and the timeout end as a whole. ``env`` comes from tuner_environment (the forced
                # locale).
                # pylint: disable-next=ansible-bad-function
                processes.append(subprocess.Popen(invocation.argv, cwd=invocation.cwd, env=invocation.env,
                                                  stdin=subprocess.DEVNULL, stdout=out, stderr=err,
                                                  start_new_session=True))
                if on_start is not None:
                    on_start(processes[-1].pid)
            ended = _wait_until_ended(processes, started + max(timeout_s, 0.0))
        finally:
            _end_process_groups(processes)
    finished = time.monotonic()
    return [_collected_run(invocation.cwd, process.returncode if index in ended else None,
                           ended.get(index, finished) - started)
            for index, (invocation, process) in enumerate(zip(invocations, processes))]


def _wait_until_ended(processes: list[subprocess.Popen], deadline: float) -> dict[int, float]:
    """When each process (by index) ended, polling until all did or the deadline passed; the rest are missing."""
    ended: dict[int, float] = {}
    while True:
        for index, process in enumerate(processes):
            if index not in ended and process.poll() is not None:
                ended[index] = time.monotonic()
        if len(ended) == len(processes) or time.monotonic() >= deadline:
            return ended
        time.sleep(0.05)


def _collected_run(cwd: str, rc: int | None, seconds: float) -> TunerRun:
    """The run's result with its output; ``rc`` None means it was ended at the timeout."""
    with open(os.path.join(cwd, "tuner.out"), encoding="utf-8", errors="replace") as out, \
            open(os.path.join(cwd, "tuner.err"), encoding="utf-8", errors="replace") as err:
        return TunerRun(rc, rc is None, seconds, out.read(), err.read())


def _end_process_groups(processes: list[subprocess.Popen]) -> None:
    """SIGTERM to every group, up to the grace period for their leaders to exit, then SIGKILL to what is left."""
    remaining = list(processes)
    for sig, grace in ((signal.SIGTERM, TERMINATE_GRACE_S), (signal.SIGKILL, 5.0)):
        remaining = [process for process in remaining if _signal_group(process, sig)]
        deadline = time.monotonic() + grace
        while any(process.poll() is None for process in remaining) and time.monotonic() < deadline:
            time.sleep(0.1)
    for process in processes:
        process.wait()


def _signal_group(process: subprocess.Popen, sig: int) -> bool:
    """Whether anything of the process's group was left to get ``sig``."""
    try:
        os.killpg(process.pid, sig)
    except ProcessLookupError:
        return False
    return True


def tuner_environment(base: dict[str, str], environment: dict) -> dict[str, str]:
    """The task's environment over the module's, the forced locale of every command over both (its messages are
    parsed: log_tail, crash lines); unbuffered output so logs are complete up to a crash, and Ray's log
    de-duplication off so every worker line reaches the log."""
    env = command_environment(environment, base=base)
    env.setdefault("PYTHONUNBUFFERED", "1")
    env.setdefault("RAY_DEDUP_LOGS", "0")
    return env


def log_tail(run: TunerRun, lines: int = 25) -> str:
    """The last lines of stdout then stderr (where tracebacks go), without Ray's colour codes.

    A worker's crash report ("Fatal Python error: Segmentation fault") can reach the driver's output before the
    driver's own long RayActorError traceback, so crash lines from before the tail are kept in front of it."""
    output = run.stdout.splitlines() + run.stderr.splitlines()
    crashes = [line for line in output[:-lines] if _CRASH_LINE.search(line)]
    return _ANSI_ESCAPE.sub("", "\n".join(crashes + output[-lines:]))


# ---------------------------------------------------------------------------------------------
# The action plugin's step protocol
# ---------------------------------------------------------------------------------------------


# The moe_tune action plugin drives its module step by step: plan, then one call per chunk, then finish (or one
# benchmark call). The plan call has no request; each later one has {"step", "plan", "chunk", "timeout"} as its
# request file (module_utils/action_request.py), so the protocol is no module option.
MODULE = "llmops.sglang.moe_tune"
STEP_REQUEST_KEYS = {"chunk": ("plan", "chunk", "timeout"), "finish": ("plan",), "benchmark": ("plan", "timeout"),
                     "cached": ("plan", "configs", "sizes")}


def step_request(tmpdir: str) -> dict[str, Any]:
    """The action plugin's request in ``tmpdir``; none means the plan step."""
    request = read_request(tmpdir, MODULE)
    if request is None:
        return {"step": "plan"}
    keys = STEP_REQUEST_KEYS.get(request.get("step"))
    if keys is None or any(key not in request for key in keys):
        raise ValueError(f"{request_file_name(MODULE)}: a step request is one of {sorted(STEP_REQUEST_KEYS)} with "
                         f"its {STEP_REQUEST_KEYS}, got {sorted(request)} (step {request.get('step')!r})")
    return request


# ---------------------------------------------------------------------------------------------
# Progress
# ---------------------------------------------------------------------------------------------


def progress_entry(chunk: list[int], done: int, total: int, elapsed_s: float, tuned_in_run: int) -> dict[str, Any]:
    """One progress record; ETA extrapolates this run's seconds per batch size (resumed ones cost nothing)."""
    remaining = total - done
    eta = elapsed_s / tuned_in_run * remaining if tuned_in_run else None
    return {"batch_sizes": chunk, "done": done, "total": total, "elapsed_s": round(elapsed_s, 1),
            "eta_s": None if eta is None else round(eta, 1)}


def progress_line(host: str, kernel: str, file_name: str, entry: dict) -> str:
    eta = "-" if entry["eta_s"] is None else _clock(entry["eta_s"])
    return (f"moe_tune [{host}] {kernel} {file_name}: {entry['done']}/{entry['total']} batch sizes "
            f"(just tuned {entry['batch_sizes']}), elapsed {_clock(entry['elapsed_s'])}, ETA {eta}")


def _clock(seconds: float) -> str:
    minutes, secs = divmod(int(round(seconds)), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours:d}:{minutes:02d}:{secs:02d}"
