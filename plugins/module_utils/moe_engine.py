# Copyright (c) llmops.sglang contributors
# Apache License 2.0 (see LICENSE)
"""llmops.sglang's fused-MoE tuning engine: tunes the installed SGLang release's own ``fused_moe_kernel`` (up and
down GEMMs) on the GPU host, in the SGLang installation's Python.

Installed on the host by llmops.sglang.moe_tune (``engine: llmops``) and run as ``python moe_engine.py JOB.json``.
Standalone: standard library at import; torch, triton and the release's kernels are imported by the processes that
use them (:class:`TritonBench`), so the controller imports the pure parts (plans, halving, picks, checkpoints) for
its own use and tests. Nothing of SGLang is copied: the kernel, its launch path (``invoke_fused_moe_kernel``), the
default config and the config-file name come from the release installed where this runs.

Why it is fast (docs/moe-engine.md):
- every candidate compiles once per Triton specialisation of its launch (not once per batch size and GPU as in
  SGLang's tuner), ahead of time on all CPU cores (``compile_workers`` processes, Triton's ``warmup`` through the
  release's own launch path), into one Triton cache that the timing processes load from;
- compiles are staged (``stage_plan``): every config only for the specialisation class with the most batch sizes
  (one per GROUP_SIZE_M ``family`` first), the other classes only for the leaders at their nearest screened batch
  size: about a third of the compiles of every config for every class;
- timing is screened then refined (successive halving per batch size): one graph replay per (config, M) for all,
  more only for the leaders of each ``BLOCK_SIZE_M`` and overall;
- one timing process per GPU, all at once; a compile or launch failure skips that config, a crashed process is
  replaced; a checkpoint per (kernel, M) lets an interrupted run resume; a deadline ends it cleanly.
Timing regime: CUDA-graph replay of ``launches`` launches, each with its own routing (and weight copy when the
weights would fit in L2), so weights are cold and launch gaps are the graph's, as in a server's decode graphs.
Up and down share one ``moe_align_block_size`` sort in SGLang (the down config is forced to the up config's
BLOCK_SIZE_M): the pair is chosen jointly, the BLOCK_SIZE_M whose best up plus best down is fastest.

Progress: one JSON object per line on stdout (``{"event": ...}``); the result is the JSON file ``job["output"]``,
written atomically only when every (kernel, M) is tuned. Exit codes: 0 done, 2 bad job, 3 deadline, 1 failure.
"""
from __future__ import annotations

import collections
import contextlib
import hashlib
import importlib
import inspect
import json
import math
import os
import statistics
import sys
import time
import traceback

ENGINE_VERSION = 1
CONFIG_KEYS = ("BLOCK_SIZE_M", "BLOCK_SIZE_N", "BLOCK_SIZE_K", "GROUP_SIZE_M", "num_warps", "num_stages")
# Triton's launch defaults, made explicit for SGLang's default configs that leave them out.
TRITON_DEFAULTS = {"num_warps": 4, "num_stages": 3}
KERNELS = ("up", "down")
EXIT_BAD_JOB, EXIT_DEADLINE = 2, 3
DEFAULT_TIMING = {
    "launches": 8,         # launches per captured graph (routings rotate through them)
    "screen_launches": 4,  # eager launches per (config, M) for every candidate
    "refine_share": 0.04,  # share of candidates refined per M ...
    "refine_min": 8,       # ... at least this many, plus the best 2 of every BLOCK_SIZE_M
    "refine_reps": 5,
    "final_top": 3,        # the leaders re-timed interleaved
    "final_reps": 10,
    # Staged compiles (stage_plan): every config for the largest specialisation class, the rest for the leaders.
    "staged": True,
    "lead_share": 0.08,    # leaders per neighbouring batch size: the fastest share ...
    "lead_min": 16,        # ... at least this many ...
    "lead_per_block_m": 4,  # ... plus the best of every BLOCK_SIZE_M
    "climbs": 2,           # rounds of one-parameter steps from each other class's best
}
# The screen's GPU-side wait per queued launch at first (doubled where the launches took longer to queue): the
# Python launch path of invoke_fused_moe_kernel costs tens of microseconds per launch.
HOLD_US_PER_LAUNCH = 150.0
# Where SGLang keeps the kernels: 0.5.22+ moved them under sglang.kernels (sglang 0.5.23
# sglang/kernels/ops/moe/fused_moe_triton_kernels.py); earlier releases have them beside the layer.
KERNEL_MODULES = ("sglang.kernels.ops.moe.fused_moe_triton_kernels",
                  "sglang.srt.layers.moe.fused_moe_triton.fused_moe_triton_kernels")
CONFIG_MODULES = ("sglang.srt.layers.moe.moe_runner.triton_utils.fused_moe_triton_config",
                  "sglang.srt.layers.moe.fused_moe_triton.fused_moe")
ALIGN_MODULES = ("sglang.srt.layers.moe.moe_runner.triton_utils.moe_align_block_size",
                 "sglang.srt.layers.moe.fused_moe_triton.fused_moe")
# How the worker processes start. ``forkserver``: one process imports torch, Triton and the release once
# (``preload_release``) and every worker is forked from it; ``spawn``: every worker imports them itself, all at once
# on the same cores (the fallback where a fork cannot use CUDA).
START_METHODS = ("forkserver", "spawn")
# The emulator's kernels, where the host runs the SGLang emulator (CI, the demo: tests/emulator/README.md).
EMULATED_BENCH = "sglang._emulator.moe_engine_bench"
# This program's module name where it runs as installed (``moe_engine.py``, its folder first on sys.path): the fork
# server imports it by that name (multiprocessing's ``"__main__"`` preload does not reach the server before Python
# 3.12), and with PRELOAD_ENV set that import preloads the release, writing what it imported to the file named there.
PROGRAM = "moe_engine"
PRELOAD_ENV = "LLMOPS_MOE_ENGINE_PRELOAD"


class JobError(ValueError):
    """The job file is unusable (exit 2)."""


# ---------------------------------------------------------------------------------------------
# Pure parts: configs, plans, picks, checkpoints (the controller and the tests import these)
# ---------------------------------------------------------------------------------------------


def full_config(config: dict) -> dict:
    """A config with Triton's defaults made explicit and only the keys a launch takes."""
    merged = {**TRITON_DEFAULTS, **config}
    return {key: int(merged[key]) for key in CONFIG_KEYS}


def config_key(config: dict) -> str:
    """``M16_N32_K64_G1_w4_s3``: one name per config."""
    c = full_config(config)
    return (f"M{c['BLOCK_SIZE_M']}_N{c['BLOCK_SIZE_N']}_K{c['BLOCK_SIZE_K']}_G{c['GROUP_SIZE_M']}"
            f"_w{c['num_warps']}_s{c['num_stages']}")


def candidates(configs: list[dict], defaults: list[dict]) -> dict[str, dict]:
    """The search space plus the release's default configs (often outside it: BLOCK_SIZE_K 32), by key: a tuned
    pick is never slower than what the server runs without a file."""
    out = {}
    for config in list(configs) + list(defaults):
        out.setdefault(config_key(config), full_config(config))
    return out


def refine_set(times: dict[str, float], share: float, minimum: int, per_block_m: int = 2) -> list[str]:
    """Keys worth more runs at one M: the fastest ``share`` (at least ``minimum``) and the best ``per_block_m`` of
    every BLOCK_SIZE_M (the joint up/down choice needs each block size's best)."""
    ranked = sorted((t, key) for key, t in times.items() if t is not None and math.isfinite(t))
    keep = {key for _time, key in ranked[:max(minimum, math.ceil(share * len(ranked)))]}
    per_bm: dict[str, list[str]] = {}
    for _time, key in ranked:
        per_bm.setdefault(key.split("_")[0], []).append(key)
    for keys in per_bm.values():
        keep.update(keys[:per_block_m])
    return sorted(keep, key=lambda key: times[key])


def with_twins(keys: list[str], times: dict[str, float]) -> list[str]:
    """``keys`` and, after them, their ``GROUP_SIZE_M`` twins (same ``family``) among ``times``, the configs screened
    at one batch size: the refinement's graph replays compare twins directly, where a screen's four eager launches
    ranked them wrongly (an H100 run picked the ``GROUP_SIZE_M=1`` twin of the best config at M=4096, 1.6% slower,
    when the best had been screened but not refined)."""
    families = {family(key) for key in keys}
    return keys + [key for key in times if family(key) in families and key not in keys]


def family(key: str) -> str:
    """A config's key without GROUP_SIZE_M. GROUP_SIZE_M only reorders the kernel's blocks (their L2 reuse), so
    configs of one family rank alike wherever the others are slow: the engine screens one per family first and the
    rest of a family only where it leads (``stage_plan``)."""
    parts = key.split("_")
    return "_".join(parts[:3] + parts[4:])


def stage_plan(sizes: list[int], groups: list[list[int]] | None, staged: bool = True, climbs: int = 2) -> list[dict]:
    """The order a kernel's candidates are compiled and screened in, from its specialisation classes (``groups``:
    the batch sizes that share one Triton binary). Compiles cost ~0.6 core-s per (config, class) and timing ~1% of
    that, so only the largest class gets every config: ``base`` (one config per ``family``) then ``twins`` (the rest
    of the families that lead at some of its batch sizes); every other class, nearest first, gets ``leaders``: the
    fastest configs at the nearest batch size already screened (``neighbours``), then up to ``climbs`` rounds of
    ``climb``: the configs one parameter away from the class's best at each of its batch sizes, as long as that
    finds new ones (the ranking at another batch size is a proxy: this corrects where it misleads). Not staged, or
    classes unknown: every config at every batch size of ``sizes`` (``all``)."""
    if not staged or not groups:
        return [{"select": "all", "sizes": sorted(sizes)}]
    remaining = sorted((sorted(group) for group in groups), key=lambda group: (-len(group), group[0]))
    main = remaining.pop(0)
    plan = [{"select": "base", "sizes": main}, {"select": "twins", "sizes": main, "neighbours": main}]
    covered = list(main)

    def distance(m: int, other: int) -> float:
        return abs(math.log(m) - math.log(other))

    while remaining:
        group = min(remaining, key=lambda g: min(distance(m, c) for m in g for c in covered))
        remaining.remove(group)
        nearest = min(covered, key=lambda c: min(distance(m, c) for m in group))
        plan.append({"select": "leaders", "sizes": group, "neighbours": [nearest]})
        plan += [{"select": "climb", "sizes": group}] * climbs
        covered.extend(group)
    return plan


def stage_keys(stage: dict, candidates: dict[str, dict], screen: dict[str, dict[int, float]], timing: dict) -> list[str]:
    """The candidates a stage compiles and screens (see ``stage_plan``); ``screen``: key -> {M: time} so far.
    Leaders come from the ``neighbours``' screen times; where none was screened (a resumed run), every candidate."""
    select = stage["select"]
    if select == "all":
        return list(candidates)
    if select == "climb":
        best = {min((by_m[m], key) for key, by_m in screen.items() if m in by_m)[1]
                for m in stage["sizes"] if any(m in by_m for by_m in screen.values())}
        return [key for key in candidates if any(_one_apart(candidates[key], candidates[b]) for b in best)]
    if select == "base":
        first: dict[str, str] = {}
        for key in candidates:  # the smallest GROUP_SIZE_M of each family
            if family(key) not in first or _group_size(key) < _group_size(first[family(key)]):
                first[family(key)] = key
        return list(first.values())
    lead: set[str] = set()
    for m in stage["neighbours"]:
        times = {key: by_m[m] for key, by_m in screen.items() if m in by_m}
        lead.update(refine_set(times, timing["lead_share"], timing["lead_min"], timing["lead_per_block_m"]))
    if not lead and select == "leaders":
        return list(candidates)
    if select == "twins":
        families = {family(key) for key in lead}
        return [key for key in candidates if family(key) in families]
    return [key for key in candidates if key in lead]


def _one_apart(config: dict, other: dict) -> bool:
    return sum(config[name] != other[name] for name in CONFIG_KEYS) == 1


def _group_size(key: str) -> int:
    return int(key.split("_")[3][1:])


def median(samples: list[float]) -> float:
    return statistics.median(samples) if samples else math.inf


def batch_size_groups(binary_of: dict[int, object]) -> list[list[int]]:
    """The batch sizes that share one compiled binary, from M -> binary identity: Triton's specialisations of the
    launch over M (ordered by their smallest M)."""
    groups: dict[object, list[int]] = {}
    for m in sorted(binary_of):
        groups.setdefault(binary_of[m], []).append(m)
    return sorted(groups.values())


def best_per_block_m(times: dict[str, float]) -> dict[int, tuple[str, float]]:
    """The fastest key per BLOCK_SIZE_M."""
    best: dict[int, tuple[str, float]] = {}
    for key, t in times.items():
        block_m = int(key.split("_")[0][1:])
        if math.isfinite(t) and (block_m not in best or t < best[block_m][1]):
            best[block_m] = (key, t)
    return best


def joint_pick(up: dict[str, float], down: dict[str, float] | None) -> dict:
    """The up (and down) keys at one M. With a down kernel, both share the up config's BLOCK_SIZE_M (one align
    sort; sglang 0.5.23 fused_moe_triton_config.try_get_optimal_moe_config overrides a mismatching down), so the
    BLOCK_SIZE_M with the fastest best-up + best-down wins."""
    up_best = best_per_block_m(up)
    if not up_best:
        raise ValueError("no up config ran")
    if down is None:
        key, t = min(up_best.values(), key=lambda pair: pair[1])
        return {"up": key, "up_us": t}
    down_best = best_per_block_m(down)
    shared = sorted(set(up_best) & set(down_best))
    if not shared:
        raise ValueError("no BLOCK_SIZE_M ran for both the up and the down kernel")
    block_m = min(shared, key=lambda bm: up_best[bm][1] + down_best[bm][1])
    return {"up": up_best[block_m][0], "up_us": up_best[block_m][1],
            "down": down_best[block_m][0], "down_us": down_best[block_m][1]}


def fingerprint(job: dict) -> str:
    """What makes a checkpoint reusable: everything that decides the result, not where it runs or for how long."""
    keep = {key: job.get(key) for key in ("shape", "kernels", "configs", "timing", "release_hint")}
    keep["engine"] = ENGINE_VERSION
    return hashlib.sha256(json.dumps(keep, sort_keys=True).encode()).hexdigest()[:32]


def read_checkpoint(path: str, expected: str) -> dict:
    """Finished (kernel, M) results and known compile failures of an earlier run of the same job."""
    data = read_json(path)
    if not data or data.get("fingerprint") != expected:
        return {"fingerprint": expected, "done": {}, "compile": {}}
    return data


def read_json(path: str) -> dict | None:
    """A JSON file's content, None where it is missing or unreadable (this program's own copy of the collection's
    helper: it runs alone on the GPU host and imports nothing of the collection)."""
    try:
        with open(path, encoding="utf-8") as handle:
            return json.load(handle)
    except (OSError, ValueError):
        return None


def write_text_atomically(path: str, text: str) -> None:
    """``path`` holds either its old content or all of ``text``, never a part (a checkpoint read after a kill)."""
    tmp = f"{path}.tmp.{os.getpid()}"
    with open(tmp, "w", encoding="utf-8") as handle:
        handle.write(text)
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(tmp, path)


def write_json_atomically(path: str, data: dict) -> None:
    write_text_atomically(path, json.dumps(data, indent=1, sort_keys=True))


def sglang_file(picks: dict[int, str], configs: dict[str, dict]) -> dict[str, dict]:
    """The JSON SGLang reads: batch size -> config, in batch-size order (as the tuner's save_configs)."""
    return {str(m): configs[picks[m]] for m in sorted(picks)}


def validate_job(job: dict) -> dict:
    """The job with defaults filled in; JobError naming the field otherwise."""
    for field in ("shape", "batch_sizes", "configs", "work_dir", "output"):
        if field not in job:
            raise JobError(f"job.{field}: missing")
    shape = job["shape"]
    for field in ("E", "N", "hidden", "topk"):
        if not isinstance(shape.get(field), int) or shape[field] < 1:
            raise JobError(f"job.shape.{field}: must be a positive integer, got {shape.get(field)!r}")
    if shape.get("dtype", "bf16") not in ("bf16", "fp16"):
        raise JobError(f"job.shape.dtype: the engine tunes bf16 and fp16 kernels; {shape['dtype']!r} is tuned by "
                       "engine: sglang")
    kernels = job.get("kernels", "auto")
    if kernels != "auto" and (not kernels or set(kernels) - set(KERNELS) or kernels[0] != "up"):
        raise JobError(f"job.kernels: must be 'auto', ['up'] or ['up', 'down'], got {kernels!r}")
    sizes = job["batch_sizes"]
    if not sizes or not all(isinstance(m, int) and m > 0 for m in sizes):
        raise JobError(f"job.batch_sizes: must be positive integers, got {sizes!r}")
    if not job["configs"]:
        raise JobError("job.configs: the search space is empty")
    timing = {**DEFAULT_TIMING, **job.get("timing", {})}
    start_method = job.get("start_method", "forkserver")
    if start_method not in START_METHODS:
        raise JobError(f"job.start_method: one of {', '.join(START_METHODS)}, got {start_method!r}")
    return {**job, "kernels": kernels, "start_method": start_method, "batch_sizes": sorted(set(sizes)),
            "timing": timing, "gpus": job.get("gpus") or [0],
            "compile_workers": max(1, int(job.get("compile_workers") or 1)),
            "deadline_s": float(job.get("deadline_s") or 24 * 3600)}


def emit(event: str, **fields) -> None:
    """One progress line for the module (stdout is the engine's channel to it)."""
    sys.stdout.write(json.dumps({"event": event, "t": round(time.time(), 3), **fields}) + "\n")
    sys.stdout.flush()


# ---------------------------------------------------------------------------------------------
# The release's kernels on a GPU: compile, time, check
# ---------------------------------------------------------------------------------------------


def _import_first(names):
    errors = []
    for name in names:
        try:
            return importlib.import_module(name)
        except ImportError as exc:
            errors.append(f"{name}: {exc}")
    raise ImportError("; ".join(errors))


class _CudaTouched(BaseException):
    """Raised in the fork server where an import would initialise CUDA (a BaseException: a release's ``except
    Exception`` around a device query must not swallow it and keep a fallback value in the preloaded module)."""


def preload_release(report_path: str) -> dict:
    """In the fork server, before its first fork: import what every worker imports (torch, Triton, the release's
    kernel, config and align modules, or the emulator's), so each worker forked from it starts with them imported.
    A forked process cannot use a CUDA its parent initialised, so CUDA must stay uninitialised here: torch's CUDA
    initialisation is refused from before the first import of anything of SGLang (its package init runs then), and
    an import that would initialise CUDA is stopped there (what it needed is imported by each worker itself). What
    happened goes to ``report_path`` (JSON) for the engine, which spawns its workers instead where CUDA was
    initialised anyway or the server's forks cannot start a worker."""
    start = time.perf_counter()
    record = {"stopped_at": None, "error": None, "cuda_initialised": False}
    # torch.cuda.is_available() through NVML, not the CUDA runtime: cudaGetDeviceCount initialises the driver without
    # torch counting it as initialised, and a process forked after it cannot use CUDA (an H100 run: 0.5.23's platform
    # detection asked, and every fork probe failed). Torch reads it at each call; the forked workers keep it.
    os.environ["PYTORCH_NVML_BASED_CUDA_CHECK"] = "1"
    try:
        import torch
    except ImportError:  # a sandbox host: the emulator's kernels need no torch
        torch = None
    saved = {name: getattr(torch.cuda, name) for name in ("_lazy_init", *NVML_ANSWERS)} if torch else {}
    if torch:
        torch.cuda._lazy_init = _refuse_cuda
        for name, answer in _nvml_answers(torch).items():
            setattr(torch.cuda, name, answer)
    try:
        try:
            importlib.import_module(EMULATED_BENCH)
        except ImportError:
            import triton  # noqa: F401
            for names in (KERNEL_MODULES, CONFIG_MODULES, ALIGN_MODULES):
                _import_first(names)
    except _CudaTouched:
        here = os.path.abspath(__file__)  # the innermost frames of the release: not torch's, not ours
        record["stopped_at"] = [f"{frame.filename}:{frame.lineno}" for frame in traceback.extract_tb(sys.exc_info()[2])
                                if os.path.abspath(frame.filename) != here
                                and f"{os.sep}torch{os.sep}" not in frame.filename][-3:]
    except Exception as exc:  # noqa: BLE001 - each worker imports it again and reports what fails
        record["error"] = f"{type(exc).__name__}: {str(exc)[:300]}"
    finally:
        for name, value in saved.items():
            setattr(torch.cuda, name, value)
        if torch:
            record["cuda_initialised"] = bool(torch.cuda.is_initialized())
    record.update(seconds=round(time.perf_counter() - start, 2), modules=len(sys.modules), pid=os.getpid())
    write_json_atomically(report_path, record)
    return record


def _refuse_cuda(*_args, **_kwargs) -> None:
    raise _CudaTouched()


# torch.cuda's device queries a release asks at import, answered in the fork server from NVML (which does not
# initialise CUDA) with what CUDA would answer: 0.5.23 reads the device name to pick its platform
# (sglang/srt/platforms/__init__.py, _is_sail_available) and the capability for its DeepGEMM and kernel choices.
NVML_ANSWERS = ("get_device_name", "get_device_capability")


def _nvml_answers(torch) -> dict:
    """The NVML_ANSWERS as functions of a torch device index (CUDA_VISIBLE_DEVICES applied, as torch does); none
    without nvidia-ml-py or a driver, and a query NVML cannot answer stops the import like a CUDA initialisation."""
    try:
        import pynvml

        pynvml.nvmlInit()
    except Exception:  # noqa: BLE001 - no NVML: the queries initialise CUDA, and the guard stops the import there
        return {}

    def handle(device):
        try:
            device = torch.device(device) if isinstance(device, str) else device
            index = (device if isinstance(device, int) else getattr(device, "index", None)) or 0
            return pynvml.nvmlDeviceGetHandleByIndex(torch.cuda._get_nvml_device_index(index))
        except Exception as exc:  # noqa: BLE001 - answered by CUDA or not at all
            raise _CudaTouched() from exc

    def get_device_name(device=None) -> str:
        name = pynvml.nvmlDeviceGetName(handle(device))
        return name.decode() if isinstance(name, bytes) else name

    def get_device_capability(device=None) -> tuple[int, int]:
        return tuple(pynvml.nvmlDeviceGetCudaComputeCapability(handle(device)))

    return {"get_device_name": get_device_name, "get_device_capability": get_device_capability}


class Release:
    """The installed SGLang's kernel, launch path, default config and file names (imported, never copied)."""

    def __init__(self, job: dict) -> None:
        import torch
        import triton

        self.torch, self.triton = torch, triton
        self._publish_server_args(job)
        self.kernels = _import_first(KERNEL_MODULES)
        self.config = _import_first(CONFIG_MODULES)
        self.invoke = self.kernels.invoke_fused_moe_kernel
        self.kernel = self.kernels.fused_moe_kernel
        self.invoke_params = inspect.signature(self.invoke).parameters
        self.align, self.align_source = self._align()
        with open(self.kernels.__file__, "rb") as handle:  # what makes a tuned config valid, with GPU and Triton
            self.kernel_source_sha256 = hashlib.sha256(handle.read()).hexdigest()

    @staticmethod
    def _publish_server_args(job: dict) -> None:
        """SGLang's config lookup reads the runtime context a server publishes; publish one as the tuner does
        (sglang benchmark/kernels/fused_moe_triton/tuning_fused_moe_triton.py BenchmarkWorker.__init__)."""
        try:
            from sglang.srt.server_args import ServerArgs, set_global_server_args_for_scheduler
        except ImportError:
            return
        model = job.get("model_path")
        if model:
            set_global_server_args_for_scheduler(ServerArgs(model_path=model, tp_size=1))

    def _align(self):
        """The release's moe_align_block_size where its CUDA op is installed (sgl_kernel), else a torch sort with
        the same buffer sizes (the sort's output is the kernel's input, not part of the timed kernel)."""
        try:
            module = _import_first(ALIGN_MODULES)
            align = module.moe_align_block_size
            probe = self.torch.randint(0, 4, (2, 2), dtype=self.torch.int32, device="cuda")
            align(probe, 16, 4)
            return align, "sglang"
        except Exception:  # noqa: BLE001 - any failure of the native op means: use the stand-in
            return torch_align_block_size, "torch"

    def default_config(self, m: int, shape: dict, kernel: str) -> dict:
        e, n, hidden, topk = shape["E"], shape["N"], shape["hidden"], shape["topk"]
        # get_default_config(M, E, N, K, topk, dtype, is_marlin, block_shape): N is w2's last dim (the config-file N)
        # and K w1's last (hidden) in fused_experts' call (sglang 0.5.23 try_get_optimal_moe_config).
        return full_config(self.config.get_default_config(m, e, n, hidden, topk, None, False, None))

    def file_name(self, shape: dict, kernel: str) -> str:
        params = inspect.signature(self.config.get_config_file_name).parameters
        kwargs = {"down_moe": True} if kernel == "down" and "down_moe" in params else {}
        if kernel == "down" and not kwargs:
            raise JobError("job.kernels: this SGLang release reads no separate down config file")
        return self.config.get_config_file_name(shape["E"], shape["N"], None, None, **kwargs)

    def launch(self, problem, m: int, config: dict, routing: int, weights: int, out=None, inputs=None):
        """One launch through the release's invoke_fused_moe_kernel, with the arguments fused_experts passes;
        ``out`` and ``inputs`` replace the problem's output and (A, B) tensors."""
        args = problem.launch_args(m, config, routing, weights, self.align)
        if out is not None:
            args["C"] = out
        if inputs is not None:
            args["A"], args["B"] = inputs
        values = {**args, "config": dict(config), "compute_type": problem.compute_type,
                  "use_fp8_w8a8": False, "use_int8_w8a8": False, "use_int8_w8a16": False,
                  "use_int4_w4a16": False, "per_channel_quant": False, "block_shape": None,
                  "bias": None, "A_scale": None, "B_scale": None, "B_zp": None}
        missing = [name for name, p in self.invoke_params.items()
                   if p.default is p.empty and name not in values]
        if missing:
            raise JobError(f"this SGLang release's invoke_fused_moe_kernel wants {missing}; engine: sglang tunes it")
        self.invoke(**{name: value for name, value in values.items() if name in self.invoke_params})
        return args["C"]


def replay_times(torch, graph, reps: int, hold_cycles: int = 0) -> list[float]:
    """Microseconds of each of ``reps`` replays of ``graph``, each between two CUDA events; the graph is freed.
    ``hold_cycles``: the replays queue behind a GPU-side wait of that many clock cycles, so no replay's time holds
    the GPU's wait for its own submission (SGLang's tuner times without one: 0)."""
    events = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _rep in range(reps)]
    if hold_cycles:
        torch.cuda._sleep(hold_cycles)
    for begin, end in events:
        begin.record()
        graph.replay()
        end.record()
    torch.cuda.synchronize()
    graph.reset()
    return [begin.elapsed_time(end) * 1000.0 for begin, end in events]


def torch_align_block_size(topk_ids, block_size: int, num_experts: int):
    """moe_align_block_size's outputs in torch: token slots sorted by expert, each expert padded to block_size;
    the padded length follows sglang 0.5.23 moe_align_block_size.py (max_num_tokens_padded, rounded to 4)."""
    import torch

    numel = topk_ids.numel()
    padded = numel * block_size if numel < num_experts + 1 else numel + (num_experts + 1) * (block_size - 1)
    padded = (padded + 3) // 4 * 4
    flat = topk_ids.flatten().long()
    counts = torch.bincount(flat, minlength=num_experts)
    blocks = (counts + block_size - 1) // block_size
    order = torch.argsort(flat, stable=True)
    sorted_ids = torch.full((padded,), numel, dtype=torch.int32, device=topk_ids.device)
    expert_ids = torch.full(((padded + block_size - 1) // block_size,), -1, dtype=torch.int32,
                            device=topk_ids.device)
    starts = torch.cumsum(blocks, 0) - blocks
    token_starts = torch.cumsum(counts, 0) - counts
    slot_of_sorted = (starts * block_size).repeat_interleave(counts) + (
        torch.arange(numel, device=topk_ids.device) - token_starts.repeat_interleave(counts))
    sorted_ids[slot_of_sorted] = order.to(torch.int32)
    experts = torch.arange(num_experts, device=topk_ids.device, dtype=torch.int32)
    expert_ids[:int(blocks.sum())] = experts.repeat_interleave(blocks)
    total = torch.tensor([int(blocks.sum()) * block_size], dtype=torch.int32, device=topk_ids.device)
    return sorted_ids, expert_ids, total


class Problem:
    """The tensors of one kernel (up: hidden x w13 -> [M*topk, 2N]; down: [M*topk, N] x w2 -> [M, topk, hidden])
    at every batch size, with ``launches`` routings per M and enough weight copies to keep weights out of L2."""

    def __init__(self, torch, shape: dict, kernel: str, sizes: list[int], launches: int, l2_bytes: int,
                 seed: int = 0, data: bool = True) -> None:
        self.torch, self.kernel, self.topk, self.e = torch, kernel, shape["topk"], shape["E"]
        self.dtype = torch.bfloat16 if shape.get("dtype", "bf16") == "bf16" else torch.float16
        import triton.language as tl
        self.compute_type = tl.bfloat16 if self.dtype == torch.bfloat16 else tl.float16
        gen = torch.Generator(device="cuda").manual_seed(seed)
        n, hidden = shape["N"], shape["hidden"]
        rows, cols = (2 * n, hidden) if kernel == "up" else (hidden, n)
        weight_bytes = self.e * rows * cols * 2
        copies = max(1, min(launches, math.ceil(2 * l2_bytes / weight_bytes)))
        # Compiling needs the tensors' shapes and alignment only: no data (and one weight copy) for it.
        copies = copies if data else 1
        self.weights = [self._tensor((self.e, rows, cols), gen, data, 0.05) for _copy in range(copies)]
        self.in_cols, self.out_cols = cols, rows
        self.inputs, self.routings, self.outputs, self._aligned = {}, {}, {}, {}
        for m in sizes:
            in_rows = m if kernel == "up" else m * self.topk
            self.inputs[m] = self._tensor((in_rows, cols), gen, data, 1.0)
            self.routings[m] = [self._route(m, gen) for _launch in range(launches)]
            out_shape = (m * self.topk, rows) if kernel == "up" else (m, self.topk, rows)
            self.outputs[m] = torch.empty(out_shape, device="cuda", dtype=self.dtype)

    def _tensor(self, shape: tuple, gen, data: bool, scale: float):
        torch = self.torch
        if not data:
            return torch.empty(shape, device="cuda", dtype=self.dtype)
        return (torch.randn(shape, generator=gen, device="cuda", dtype=torch.float32) * scale).to(self.dtype)

    def _route(self, m: int, gen):
        """top-k distinct experts per token from random gating (SGLang's tuner: randn gating, softmax top-k)."""
        torch = self.torch
        logits = torch.randn(m, self.e, generator=gen, device="cuda")
        weights, ids = torch.topk(torch.softmax(logits, dim=-1), self.topk, dim=-1)
        return weights / weights.sum(-1, keepdim=True), ids.to(torch.int32)

    def launch_args(self, m: int, config: dict, routing: int, weights: int, align) -> dict:
        topk_weights, topk_ids = self.routings[m][routing]
        key = (m, config["BLOCK_SIZE_M"], routing)
        if key not in self._aligned:
            self._aligned[key] = align(topk_ids, config["BLOCK_SIZE_M"], self.e)[:3]
        sorted_ids, expert_ids, total = self._aligned[key]
        return {"A": self.inputs[m], "B": self.weights[weights % len(self.weights)], "C": self.outputs[m],
                "topk_weights": topk_weights, "topk_ids": topk_ids, "sorted_token_ids": sorted_ids,
                "expert_ids": expert_ids, "num_tokens_post_padded": total,
                "mul_routed_weight": self.kernel == "down", "top_k": self.topk if self.kernel == "up" else 1}

    def reference(self, m: int, routing: int = 0):
        """What the kernel must write, in float32, expert by expert."""
        torch = self.torch
        topk_weights, topk_ids = self.routings[m][routing]
        a, w = self.inputs[m].float(), self.weights[0].float()
        flat = topk_ids.flatten().long()
        out = torch.zeros(m * self.topk, self.out_cols, device="cuda")
        for expert in flat.unique().tolist():
            slots = (flat == expert).nonzero().flatten()
            rows = slots // self.topk if self.kernel == "up" else slots
            out[slots] = a[rows] @ w[expert].T
        if self.kernel == "down":
            out *= topk_weights.flatten()[:, None]
        return out


class TritonBench:
    """Compiles and times configs of the release's kernel on one GPU (the engine's real backend)."""

    def __init__(self, job: dict, warmup_only: bool = False) -> None:
        import torch

        self.job, self.torch = job, torch
        self.release = Release(job)
        props = torch.cuda.get_device_properties(0)
        self.device = {"name": torch.cuda.get_device_name(0), "capability": list(torch.cuda.get_device_capability(0)),
                       "sm_count": props.multi_processor_count, "l2_bytes": int(getattr(props, "L2_cache_size", 0)),
                       "smem_per_block_optin": int(getattr(props, "shared_memory_per_block_optin", 0))}
        self.problems: dict[str, Problem] = {}
        self.warmup_only = warmup_only
        self._compiled: list = []
        self.held_again = 0  # screens re-timed because the GPU's wait ended too early
        if warmup_only:
            self._patch_warmup()
        else:
            self._hold_cycles_per_launch = self._hold_cycles()

    def problem(self, kernel: str) -> Problem:
        if kernel not in self.problems:
            timing = self.job["timing"]
            self.problems[kernel] = Problem(self.torch, self.job["shape"], kernel, self.job["batch_sizes"],
                                            timing["launches"], self.device["l2_bytes"] or 50 << 20,
                                            data=not self.warmup_only)
        return self.problems[kernel]

    def _patch_warmup(self) -> None:
        """Launches through the release's launch path compile without running: Triton's ``warmup=True``."""
        kernel = self.release.kernel
        run = kernel.run

        def compile_only(*args, grid, warmup, **kwargs):
            compiled = run(*args, grid=grid, warmup=True, **kwargs)
            self._compiled.append(compiled)
            return compiled

        kernel.run = compile_only

    def compile(self, kernel: str, config: dict, sizes: list[int] | None = None) -> dict:
        """Compile ``config`` for every Triton specialisation the batch sizes ``sizes`` (default: the job's) need;
        load it (shared memory and registers are checked at load). A record: status, seconds, variants, the batch
        sizes of each variant (``groups``), registers, spills, shared memory."""
        start = time.perf_counter()
        record = {"status": "ok"}
        problem = self.problem(kernel)
        self._compiled.clear()
        try:
            binary_of = {}
            for m in sizes or self.job["batch_sizes"]:
                self.release.launch(problem, m, config, 0, 0)
                binary_of[m] = id(self._compiled[-1])  # warmup returns the binary, new or already built
            variants = {id(c): c for c in self._compiled}.values()
            for compiled in variants:
                compiled._init_handles()
            first = next(iter(variants))
            record.update(variants=len(variants), groups=batch_size_groups(binary_of),
                          shared=int(first.metadata.shared), n_regs=int(first.n_regs), n_spills=int(first.n_spills))
        except Exception as exc:  # noqa: BLE001 - every compile/load failure skips the config
            record = {"status": f"compile:{type(exc).__name__}", "error": str(exc)[:300]}
        record["seconds"] = round(time.perf_counter() - start, 3)
        return record

    def graph_times(self, kernel: str, m: int, config: dict, reps: int) -> list[float]:
        """Microseconds per launch: ``reps`` replays of a CUDA graph of ``launches`` launches (routing i, weight
        copy i), after one eager launch (loads the binary) and one warm-up replay; the replays queue behind a
        GPU-side wait as the screen's launches do."""
        torch, problem = self.torch, self.problem(kernel)
        launches = self.job["timing"]["launches"]
        self.release.launch(problem, m, config, 0, 0)
        for routing in range(launches):  # align outside the capture
            problem.launch_args(m, config, routing, routing, self.release.align)
        graph = torch.cuda.CUDAGraph()
        stream = torch.cuda.Stream()
        torch.cuda.synchronize()
        with torch.cuda.stream(stream), torch.cuda.graph(graph, stream=stream):
            for routing in range(launches):
                self.release.launch(problem, m, config, routing, routing)
        graph.replay()
        return [t / launches for t in replay_times(torch, graph, reps, int(self._hold_cycles_per_launch * reps))]

    def screen_times(self, kernel: str, config: dict, sizes: list[int], launches: int) -> dict[int, list[float]]:
        """Microseconds of ``launches`` eager launches (routing i each, each between two CUDA events) at every M
        of ``sizes``, after one launch per M that loads the binary. The timed launches queue behind a GPU-side
        wait that outlasts their submission, so the GPU runs them back to back and the events time the kernel,
        not the Python launch path: unqueued, a kernel of 10-60 us at M <= 16 is timed with its own launch's
        jitter and configs are ranked by noise (benchmarks/README.md, "MoE engine on a GPU"). A wait that ended
        before the last launch was queued is doubled and the batch timed again."""
        torch, problem = self.torch, self.problem(kernel)
        for m in sizes:  # load the binary and sort every routing outside the timed stretch
            self.release.launch(problem, m, config, 0, 0)
            for routing in range(launches):
                problem.launch_args(m, config, routing, routing, self.release.align)
        torch.cuda.synchronize()
        for _attempt in range(4):
            events = {m: [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
                          for _launch in range(launches)] for m in sizes}
            waited = torch.cuda.Event()
            torch.cuda._sleep(int(self._hold_cycles_per_launch * launches * len(sizes)))
            waited.record()
            for m in sizes:
                for routing, (begin, end) in enumerate(events[m]):
                    begin.record()
                    self.release.launch(problem, m, config, routing, routing)
                    end.record()
            starved = waited.query()  # the GPU finished waiting while launches were still being queued
            torch.cuda.synchronize()
            if not starved:
                break
            self._hold_cycles_per_launch *= 2
            self.held_again += 1
        return {m: [begin.elapsed_time(end) * 1000.0 for begin, end in events[m]] for m in sizes}

    def _hold_cycles(self) -> float:
        """GPU clock cycles that last ``HOLD_US_PER_LAUNCH`` microseconds (torch.cuda._sleep counts cycles)."""
        torch = self.torch
        begin, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        cycles = 10_000_000
        begin.record()
        torch.cuda._sleep(cycles)
        end.record()
        torch.cuda.synchronize()
        return cycles / (begin.elapsed_time(end) * 1000.0) * HOLD_US_PER_LAUNCH

    def check(self, kernel: str, m: int, config: dict) -> float:
        """Relative error of one launch against the float32 reference; NaN-poisoned output, so a row the kernel
        did not write fails too."""
        torch, problem = self.torch, self.problem(kernel)
        out = torch.full_like(problem.outputs[m], float("nan"))
        self.release.launch(problem, m, config, 0, 0, out=out)
        torch.cuda.synchronize()
        ref = problem.reference(m)
        got = out.float().reshape(ref.shape)
        error = (got - ref).norm() / ref.norm()
        return float(error) if torch.isfinite(error) else math.inf


def backend(job: dict, warmup_only: bool = False):
    """The real kernels, or the emulator's where the host runs the SGLang emulator (it says so: sglang._emulator,
    CI and the demo, where no GPU exists; tests/emulator/README.md)."""
    try:
        emulated = importlib.import_module(EMULATED_BENCH)
    except ImportError:
        return TritonBench(job, warmup_only)
    return emulated.EmulatedBench(job, warmup_only)


# ---------------------------------------------------------------------------------------------
# Worker processes: compile on CPU cores, time on GPUs
# ---------------------------------------------------------------------------------------------


def _worker_environment(job: dict, gpu) -> None:
    os.environ["TRITON_CACHE_DIR"] = os.path.join(job["work_dir"], "triton-cache")
    os.environ["CUDA_VISIBLE_DEVICES"] = str(gpu)


def compile_worker(job: dict, gpu, tasks, results, wid: int) -> None:
    """Compile loop of one CPU worker (niced: the timing processes keep their cores)."""
    _worker_environment(job, gpu)
    preloaded = any(name in sys.modules for name in (*KERNEL_MODULES, EMULATED_BENCH))  # forked from the fork server
    try:
        os.nice(10)
        bench = backend(job, warmup_only=True)
    except Exception as exc:  # noqa: BLE001 - reported, the engine stops
        results.send(("fatal", wid, f"compile worker could not start: {exc!r}\n{traceback.format_exc()[-1500:]}"))
        return
    results.send(("ready", wid, {"preloaded": preloaded}))
    while True:
        task = tasks.get()
        if task is None:
            return
        kernel, key, config, sizes = task
        results.send(("start", wid, (kernel, key)))
        results.send(("compiled", wid, (kernel, key, {**bench.compile(kernel, config, sizes), "sizes": sizes})))


def timing_worker(job: dict, gpu, tasks, results, wid: int) -> None:
    """Timing loop of one GPU: screen / refine / check tasks, one at a time."""
    _worker_environment(job, gpu)
    try:
        bench = backend(job)
    except Exception as exc:  # noqa: BLE001
        results.send(("fatal", wid, f"timing worker on GPU {gpu} could not start: {exc!r}\n"
                                    f"{traceback.format_exc()[-1500:]}"))
        return
    results.send(("ready", wid, bench.device))
    while True:
        task = tasks.get()
        if task is None:
            return
        kind, payload = task
        results.send(("start", wid, (kind, payload.get("id"))))
        try:
            results.send((kind, wid, _run_timing(bench, kind, payload)))
        except Exception as exc:  # noqa: BLE001 - a config that fails to launch is skipped, not fatal
            results.send((kind, wid, {**payload, "error": f"{type(exc).__name__}: {str(exc)[:300]}"}))
            if "CUDA" in str(exc) or "illegal" in str(exc):  # the context is gone: let the engine replace us
                return


def _run_timing(bench, kind: str, payload: dict) -> dict:
    kernel = payload["kernel"]
    if kind == "screen":
        held_again = bench.held_again
        try:
            samples = bench.screen_times(kernel, payload["config"], payload["sizes"], payload["launches"])
        except Exception as exc:  # noqa: BLE001
            return {**payload, "error": f"{type(exc).__name__}: {str(exc)[:300]}"}
        return {**payload, "times": {m: median(times) for m, times in samples.items()},
                "held_again": bench.held_again - held_again}
    if kind == "refine":
        m, reps, samples = payload["m"], payload["reps"], {key: [] for key in payload["configs"]}
        for _round in range(payload["rounds"]):  # interleaved: clock drift hits every candidate alike
            for key, config in payload["configs"].items():
                samples[key].extend(bench.graph_times(kernel, m, config, reps))
        return {**payload, "samples": samples}
    if kind == "check":
        return {**payload, "rel_error": bench.check(kernel, payload["m"], payload["config"])}
    raise ValueError(kind)


class Pool:
    """Worker processes (forked from the fork server, or spawned) fed from one task queue, each answering through
    its own pipe. A worker's pipe reaching its end means the worker is gone: it is replaced, and the task it had said
    it started is reported lost (its "start" went through the pipe before the work began, so a crash cannot hide it)."""

    def __init__(self, ctx, target, job: dict, gpus: list, count: int) -> None:
        self.ctx = ctx
        self.target, self.job, self.gpus = target, job, gpus
        self.tasks = self.ctx.Queue()
        self.workers, self.current, self.closing = {}, {}, False
        for wid in range(count):
            self._start(wid)

    def _start(self, wid: int) -> None:
        reader, writer = self.ctx.Pipe(duplex=False)
        gpu = self.gpus[wid % len(self.gpus)]
        proc = self.ctx.Process(target=self.target, args=(self.job, gpu, self.tasks, writer, wid), daemon=True)
        proc.start()
        writer.close()  # the worker holds the only writer: its exit ends the pipe
        self.workers[wid] = (proc, reader)

    def put(self, task) -> None:
        self.tasks.put(task)

    def readers(self) -> dict:
        return {reader: wid for wid, (_proc, reader) in self.workers.items()}

    def receive(self, reader, wid: int) -> list:
        """The messages waiting in one worker's pipe; ("lost", wid, task) when the worker is gone mid-task."""
        messages = []
        try:
            while reader.poll():
                messages.append(reader.recv())
        except (EOFError, OSError):
            reader.close()
            self.workers[wid][0].join(timeout=5)
            lost = self.current.pop(wid, None)
            if not self.closing:
                self._start(wid)
            if lost is not None:
                messages.append(("lost", wid, lost))
        for kind, _wid, payload in messages:
            if kind == "start":
                self.current[wid] = payload
            elif kind not in ("ready", "fatal", "lost"):
                self.current.pop(wid, None)
        return messages

    def close(self, abort: bool = False) -> None:
        """Stop the workers: at once when aborting (a deadline, a failure: queued work is dropped), else after the
        queued work, waiting at most 10 s for all of them together."""
        self.closing = True
        procs = [proc for proc, _reader in self.workers.values()]
        if not abort:
            for _proc in procs:
                self.tasks.put(None)
        deadline = time.time() + (0 if abort else 10)
        for proc in procs:
            proc.join(timeout=max(0.0, deadline - time.time()))
        for proc in procs:
            if proc.is_alive():
                proc.kill()
                proc.join(timeout=5)
        self.tasks.cancel_join_thread()


def start_pools(job: dict) -> tuple:
    """The timing pool (a worker per GPU) and the compile pool, started the job's way (``start_method``), and how
    they started. Forked from a fork server that imported the release once (``preload_release``) unless a process
    forked from it cannot start a compile worker (the release's import initialised CUDA there, say): then spawned,
    and the record says why."""
    import multiprocessing

    record = {"method": job["start_method"]}
    if job["start_method"] == "forkserver":
        ctx = multiprocessing.get_context("forkserver")
        report = os.path.join(job["work_dir"], "forkserver-preload.json")
        for stale in (report, fork_probe_error_path(job)):  # a resumed run's
            with contextlib.suppress(FileNotFoundError):
                os.remove(stale)
        if __name__ == "__main__":  # this program, alone in its folder: the server imports it by name to preload
            ctx.set_forkserver_preload([PROGRAM])
        with _environment({PRELOAD_ENV: report, "PYTHONPATH": os.pathsep.join(
                filter(None, (os.path.dirname(os.path.abspath(__file__)), os.environ.get("PYTHONPATH"))))}):
            probe = ctx.Process(target=fork_probe, args=(job,), daemon=True)
            probe.start()  # returns once the fork server has preloaded and forked
        record["preload"] = read_json(report)
        if (record["preload"] or {}).get("cuda_initialised"):
            probe.kill()
            probe.join(timeout=5)
            record.update(method="spawn", fallback="the fork server's imports initialised CUDA; workers spawned")
        else:
            pools = _pools(ctx, job)
            probe.join()
            if probe.exitcode == 0:
                return (*pools, record)
            for pool in pools:
                pool.close(abort=True)
            record.update(method="spawn", fallback=f"a process forked from the fork server could not start a "
                                                   f"compile worker (exit code {probe.exitcode}); workers spawned",
                          probe_error=(read_json(fork_probe_error_path(job)) or {}).get("error"))
    return (*_pools(multiprocessing.get_context("spawn"), job), record)


@contextlib.contextmanager
def _environment(values: dict):
    """``values`` in os.environ while the block runs: the fork server, started in it, keeps them (Python 3.11's
    forkserver ignores the sys.path it is given, hence PYTHONPATH); processes spawned later do not see them."""
    saved = {name: os.environ.get(name) for name in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def _pools(ctx, job: dict) -> tuple:
    return (Pool(ctx, timing_worker, job, job["gpus"], len(job["gpus"])),
            Pool(ctx, compile_worker, job, job["gpus"][:1], job["compile_workers"]))


def fork_probe(job: dict) -> None:
    """Starts what a compile worker starts, in a process forked from the fork server: exit code 0 if it can."""
    _worker_environment(job, job["gpus"][0])
    try:
        backend(job, warmup_only=True)
    except Exception as exc:  # noqa: BLE001 - the exit code is the answer; the reason goes to the start record
        write_json_atomically(fork_probe_error_path(job), {"error": f"{type(exc).__name__}: {str(exc)[:300]}"})
        os._exit(1)


def fork_probe_error_path(job: dict) -> str:
    return os.path.join(job["work_dir"], "fork-probe-error.json")


class _Thread:
    """``target(*args)`` in a thread; ``result()`` waits for it and returns its value or raises its exception."""

    def __init__(self, target, *args) -> None:
        import threading

        self.value, self.error = None, None
        self.thread = threading.Thread(target=self._run, args=(target, args), daemon=True)
        self.thread.start()

    def _run(self, target, args) -> None:
        try:
            self.value = target(*args)
        except BaseException as exc:  # noqa: BLE001 - handed to result()
            self.error = exc

    def result(self):
        self.thread.join()
        if self.error is not None:
            raise self.error
        return self.value

    def settled(self):
        """Its value once it ends, None if it failed (for clean-up after another failure)."""
        self.thread.join()
        return self.value


def receive(pools: list, timeout: float) -> list:
    """(pool, message) for every message of any worker of ``pools`` within ``timeout`` seconds (none: [])."""
    from multiprocessing.connection import wait

    owners = {reader: (pool, wid) for pool in pools for reader, wid in pool.readers().items()}
    out = []
    for reader in wait(list(owners), timeout):
        pool, wid = owners[reader]
        out.extend((pool, message) for message in pool.receive(reader, wid))
    return out


# ---------------------------------------------------------------------------------------------
# The engine
# ---------------------------------------------------------------------------------------------


class Engine:
    """Compile in stages (CPU pool), screen each compiled config at its stage's batch sizes as soon as it is ready
    (GPU pool), refine the leaders per M, check the winners, write SGLang's files."""

    def __init__(self, job: dict) -> None:
        self.job = job
        self.start = time.time()
        self.deadline = self.start + job["deadline_s"]
        self.shape, self.sizes = job["shape"], job["batch_sizes"]
        self.timing = job["timing"]
        self.checkpoint_path = os.path.join(job["work_dir"], "engine-checkpoint.json")
        self.checkpoint = read_checkpoint(self.checkpoint_path, fingerprint(job))
        self.screen: dict[str, dict[str, dict[int, float]]] = {k: {} for k in KERNELS}
        self.final: dict[str, dict[int, dict[str, float]]] = {k: {} for k in KERNELS}
        self.refined: dict[str, dict[int, dict[str, float]]] = {k: {} for k in KERNELS}
        self.failed: dict[str, dict[str, str]] = {k: {} for k in KERNELS}
        self.resumed = 0
        self.device, self.ready, self.pending_checks = None, {}, {}
        self.stats = {"compiles": 0, "compile_seconds": 0.0, "variants": 0, "measurements": 0, "lost": 0,
                      "screens_held_again": 0, "timed_while_compiling": 0, "batch_size_groups": {}, "stages": {},
                      "timeline": {}}

    def run(self) -> dict:
        os.makedirs(self.job["work_dir"], exist_ok=True)
        # The workers start (a fork server imports torch and the release once: seconds) while this process asks
        # the release for its defaults and file names.
        starter = _Thread(start_pools, self.job)
        try:
            main_bench = _MainSide(self.job)
            self._mark("main_side")
            self.timers, self.compilers, start = starter.result()
            self.stats["start"] = {**start, "compile_workers_started": 0, "preloaded_compile_workers": 0}
            self._mark("workers_started")
            self.job = {**self.job, "kernels": main_bench.kernels(self.job["kernels"])}
            defaults = {k: main_bench.defaults(k) for k in self.job["kernels"]}
            self.candidates = {k: candidates(self.job["configs"], defaults[k]) for k in self.job["kernels"]}
            self.defaults = {k: {m: config_key(config) for m, config in zip(self.sizes, defaults[k])}
                             for k in self.job["kernels"]}
            todo = self._todo_sizes()
            self.resumed = len(self.sizes) - len(todo)
            if todo:  # compiles start as soon as compile workers are up: screens queue until a GPU's worker is
                self._tune(todo)
            while self.device is None:
                for _message in self._messages([self.timers]):
                    pass
            result = self._result(main_bench)
        except BaseException:
            self._save_checkpoint()  # compile results and finished batch sizes survive a deadline or a failure
            for pool in (starter.settled() or ())[:2]:
                pool.close(abort=True)
            raise
        self.compilers.close()
        self.timers.close()
        return result

    def _todo_sizes(self) -> list[int]:
        done = self.checkpoint["done"]
        return [m for m in self.sizes if str(m) not in done]

    def _messages(self, pools: list, timeout: float = 1.0):
        """Messages of ``pools`` as they come, until the deadline; a worker that could not start ends the run."""
        self._check_deadline()
        for pool, (kind, _wid, payload) in receive(pools, timeout):
            if kind == "fatal":
                raise RuntimeError(payload)
            if kind == "ready":
                self._worker_ready(pool, payload)
            yield pool, kind, payload

    def _worker_ready(self, pool: Pool, facts) -> None:
        """A worker is up; the first timing worker's device facts are the run's (its GPU, as torch reports it)."""
        self.ready[id(pool)] = self.ready.get(id(pool), 0) + 1
        if pool is self.timers and self.device is None:
            self.device = facts
            emit("ready", device=facts["name"], gpus=len(self.job["gpus"]))
            self._mark("timers_ready")
        elif pool is self.compilers:
            self.stats["start"]["compile_workers_started"] = self.ready[id(pool)]
            self.stats["start"]["preloaded_compile_workers"] += bool(facts and facts.get("preloaded"))
            if self.ready[id(pool)] == self.job["compile_workers"]:
                self._mark("compilers_ready")

    def _check_deadline(self) -> None:
        if time.time() > self.deadline:
            raise TimeoutError(f"deadline of {self.job['deadline_s']:g}s reached")

    def _tune(self, todo: list[int]) -> None:
        """Each kernel's candidates, stage by stage (``stage_plan``): a probe (the release's default config at every
        batch size) shows the kernel's specialisation classes; each stage's compiles are screened as they finish,
        and a kernel's next stage starts when its last screen is in (the two kernels' stages overlap). A batch size
        no later stage of either kernel screens at is refined while the compiles go on: refines, finals and checks
        wait in a backlog for a GPU with no screen queued, so they fill the GPU's idle time and never hold a stage
        up. Each checked batch size is checkpointed."""
        known = self.checkpoint.setdefault("compile", {})
        self.todo, self.compiling, self.screening, self.timing_out = todo, 0, 0, 0
        self.stages = {kernel: {"plan": None, "index": -1, "pending": 0} for kernel in self.job["kernels"]}
        self.settled = {kernel: set() for kernel in self.job["kernels"]}
        self.backlog: collections.deque = collections.deque()
        self.unchecked = set(todo)
        for kernel in self.job["kernels"]:
            self.failed[kernel].update({key: known[f"{kernel}/{key}"] for key in self.candidates[kernel]
                                        if known.get(f"{kernel}/{key}", "ok") != "ok"})  # an earlier run's, not retried
            probe = next((key for key in self.defaults[kernel].values() if known.get(f"{kernel}/{key}", "ok") == "ok"),
                         None)
            if self.timing["staged"] and probe:
                self.stages[kernel]["probe"] = probe
                self._put_compile(kernel, probe, self.sizes)
            else:
                self.stages[kernel]["plan"] = stage_plan(self.sizes, None, staged=False)
                self._next_stage(kernel)
        emit("compile", workers=self.job["compile_workers"], staged=self.timing["staged"])
        while self.unchecked:
            for pool, kind, payload in self._messages([self.compilers, self.timers]):
                if kind == "compiled":
                    self._compiled(payload)
                elif kind == "screen":
                    self._screened(payload)
                elif kind in ("refine", "check"):
                    self._timed(kind, payload)
                elif kind == "lost":
                    self._lost(pool, payload)
            self._release_timing()
        self._mark("checked")

    def _lost(self, pool, payload) -> None:
        """A worker died on a task: a config it compiled or screened is skipped, never retried; a refine or check
        (configs that ran before) ends the run."""
        self.stats["lost"] += 1
        if pool is self.compilers:
            kernel, key = payload
            self.failed[kernel][key] = self.checkpoint["compile"][f"{kernel}/{key}"] = "compile:crashed"
            self._compile_done()
        elif payload[0] == "screen":
            kernel, key = payload[1].split("/")
            self.failed[kernel][key] = "launch:crashed"
            self.screening -= 1
        else:
            raise RuntimeError(f"a timing process died during {payload[0]} {payload[1]}")
        self._task_done(kernel)

    def _put_compile(self, kernel: str, key: str, sizes: list[int]) -> None:
        self.compilers.put((kernel, key, self.candidates[kernel][key], sizes))
        self.stages[kernel]["pending"] += 1
        self.compiling += 1

    def _compile_done(self) -> None:
        self.compiling -= 1
        if self.stats["compiles"] % 100 == 0 or not self.compiling:
            emit("compile", done=self.stats["compiles"], pending=self.compiling)

    def _task_done(self, kernel: str) -> None:
        """One compile or screen of ``kernel`` finished; the last of a stage starts the next."""
        state = self.stages[kernel]
        state["pending"] -= 1
        if not state["pending"]:
            if state["plan"] is None:  # the probe failed or crashed: every config at every batch size
                state["plan"] = stage_plan(self.sizes, None, staged=False)
            self._next_stage(kernel)

    def _next_stage(self, kernel: str) -> None:
        """Queue the compiles of ``kernel``'s next stage that has any (none left: the kernel is screened)."""
        state, known = self.stages[kernel], self.checkpoint["compile"]
        while not state["pending"] and state["index"] + 1 < len(state["plan"]):
            state["index"] += 1
            stage = state["plan"][state["index"]]
            sizes = [m for m in stage["sizes"] if m in self.todo]
            keys = stage_keys(stage, self.candidates[kernel], self.screen[kernel], self.timing)
            keys += [self.defaults[kernel][m] for m in sizes]  # a pick is never slower than the release's default
            screened = self.screen[kernel]
            keys = [key for key in dict.fromkeys(keys) if key not in self.failed[kernel]
                    and known.get(f"{kernel}/{key}", "ok") == "ok"
                    and not all(m in screened.get(key, {}) for m in sizes)]
            for key in keys if sizes else []:
                self._put_compile(kernel, key, sizes)
            self.stats["stages"].setdefault(kernel, []).append(
                {**stage, "sizes": sizes, "configs": len(keys) if sizes else 0, "t": self._elapsed()})
        later = {m for stage in state["plan"][state["index"]:] for m in stage["sizes"]} if state["pending"] else set()
        self._settle(kernel, [m for m in self.todo if m not in later])
        if not any(other["pending"] or other["plan"] is None for other in self.stages.values()):
            self._mark("screened")
            self._save_checkpoint()

    def _settle(self, kernel: str, sizes: list[int]) -> None:
        """``kernel`` screens nothing more at ``sizes``: where both kernels are settled, the batch size is refined."""
        new = [m for m in sizes if m not in self.settled[kernel]]
        self.settled[kernel].update(new)
        for m in new:
            if all(m in settled for settled in self.settled.values()):
                for each in self.job["kernels"]:
                    times = {key: by_m[m] for key, by_m in self.screen[each].items() if m in by_m}
                    keys = with_twins(refine_set(times, self.timing["refine_share"], self.timing["refine_min"]), times)
                    if self.defaults[each][m] in times:
                        keys.append(self.defaults[each][m])
                    self.backlog.append(self._refine_task(each, m, keys, rounds=1, final=False))

    def _compiled(self, payload) -> None:
        kernel, key, record = payload
        self.checkpoint["compile"][f"{kernel}/{key}"] = record["status"]
        self.stats["compiles"] += 1
        self.stats["compile_seconds"] += record.get("seconds", 0.0)
        if self.stats["compiles"] == 1:
            self._mark("first_compile")
        self._compile_done()
        state = self.stages[kernel]
        if record["status"] != "ok":
            self.failed[kernel][key] = record["status"]
        else:
            self.stats["variants"] += record.get("variants", 1)
            if record["sizes"] == self.sizes:
                self.stats["batch_size_groups"].setdefault(kernel, record.get("groups"))
            if state["plan"] is None and key == state.get("probe"):
                state["plan"] = stage_plan(self.sizes, record.get("groups"), self.timing["staged"],
                                           self.timing["climbs"])
            sizes = [m for m in record["sizes"] if m in self.todo]
            self.timers.put(("screen", {"id": f"{kernel}/{key}", "kernel": kernel, "key": key,
                                        "config": self.candidates[kernel][key], "sizes": sizes,
                                        "launches": self.timing["screen_launches"]}))
            state["pending"] += 1
            self.screening += 1
        self._task_done(kernel)

    def _screened(self, payload: dict) -> None:
        self.screening -= 1
        kernel, key = payload["kernel"], payload["key"]
        if "error" in payload:
            self.failed[kernel][key] = "launch:" + payload["error"][:80]
        else:
            self.stats["measurements"] += len(payload["times"])
            self.stats["screens_held_again"] += payload.get("held_again", 0)
            self.screen[kernel].setdefault(key, {}).update({int(m): t for m, t in payload["times"].items()})
        self._task_done(kernel)

    def _elapsed(self) -> float:
        return round(time.time() - self.start, 1)

    def _mark(self, event: str) -> None:
        """A point of the run's timeline (seconds since the start), in the result: where the wall time went."""
        self.stats["timeline"][event] = self._elapsed()

    def _release_timing(self) -> None:
        """Backlog tasks to the GPUs while none has a screen queued, one per GPU at a time."""
        while self.backlog and not self.screening and self.timing_out < len(self.job["gpus"]):
            self.timers.put(self.backlog.popleft())
            self.timing_out += 1
            self.stats["timed_while_compiling"] += bool(self.compiling)

    def _refine_task(self, kernel: str, m: int, keys: list[str], rounds: int, final: bool) -> tuple:
        configs = {key: self.candidates[kernel][key] for key in dict.fromkeys(keys)}
        return ("refine", {"id": f"{kernel}/{m}/{'final' if final else 'refine'}", "kernel": kernel, "m": m,
                           "configs": configs, "reps": self.timing["refine_reps"], "rounds": rounds, "final": final})

    def _timed(self, kind: str, payload: dict) -> None:
        """A refine, final or check result. Per (kernel, M): the screen's leaders get ``refine_reps`` replays; the
        fastest ``final_top``, the best of every BLOCK_SIZE_M and the default then run ``final_reps`` interleaved,
        and those samples alone decide; the pick is checked against the reference."""
        self.timing_out -= 1
        if "error" in payload:
            raise RuntimeError(f"{kind} {payload['id']} failed: {payload['error']}")
        if kind == "check":
            self._checked(payload)
        elif payload["final"]:
            self._finalised(payload)
        else:
            self.stats["measurements"] += len(payload["samples"]) * payload["rounds"]
            medians = {key: median(times) for key, times in payload["samples"].items()}
            kernel, m = payload["kernel"], payload["m"]
            finalists = sorted(medians, key=medians.get)[:self.timing["final_top"]]
            finalists += [key for key, _time in best_per_block_m(medians).values()]
            # twins too: in an H100 run the GROUP_SIZE_M=1 twin of M=3072's best (3.5% slower in every other timing)
            # was a finalist and the best was not; the interleaved final replays decide between twins
            finalists = with_twins(list(dict.fromkeys(finalists)), medians)
            self.refined[kernel][m] = medians
            if self.defaults[kernel][m] in medians:
                finalists.append(self.defaults[kernel][m])
            rounds = max(1, self.timing["final_reps"] // self.timing["refine_reps"])
            self.backlog.appendleft(self._refine_task(kernel, m, finalists, rounds=rounds, final=True))

    def _finalised(self, payload: dict) -> None:
        """A final: once every kernel has its final at this M, the joint pick, and its checks."""
        kernel, m = payload["kernel"], payload["m"]
        self.stats["measurements"] += len(payload["samples"]) * payload["rounds"]
        self.final[kernel][m] = {key: median(times) for key, times in payload["samples"].items()}
        kernels = self.job["kernels"]
        if not all(m in self.final[k] for k in kernels):
            return
        if all(size in self.final[k] for k in kernels for size in self.todo):
            self._mark("refined")
        times = {k: self.final[k][m] for k in kernels}
        pick = joint_pick(times["up"], times.get("down"))
        self.pending_checks[m] = {
            "pick": pick, "timed": {k: sum(m in by_m for by_m in self.screen[k].values()) for k in kernels},
            "default": {k: self.defaults[k][m] for k in kernels},
            "default_us": {k: times[k].get(self.defaults[k][m]) for k in kernels}, "rel_error": {},
            "final_us": times,  # every finalist's time: why the pick won (a miss is diagnosed from it)
            "refine_us": {k: self.refined[k].get(m) for k in kernels}}  # and why the others were not finalists
        for each in kernels:
            key = pick[each]
            self.backlog.appendleft(("check", {"id": f"{each}/{m}/check", "kernel": each, "m": m, "key": key,
                                               "config": self.candidates[each][key]}))

    def _checked(self, payload: dict) -> None:
        error, limit, m = payload["rel_error"], 2e-2, payload["m"]
        if not error <= limit:
            raise RuntimeError(f"{payload['kernel']} M={m}: the pick {payload['key']} computes a wrong "
                               f"result (relative error {error:.2e} > {limit:.0e} against the float32 reference)")
        entry = self.pending_checks[m]
        entry["rel_error"][payload["kernel"]] = error
        if len(entry["rel_error"]) == len(self.job["kernels"]):
            self.checkpoint["done"][str(m)] = self.pending_checks.pop(m)
            self.unchecked.discard(m)
            self._save_checkpoint()

    def _save_checkpoint(self) -> None:
        write_json_atomically(self.checkpoint_path, self.checkpoint)

    def _result(self, main_bench) -> dict:
        done = self.checkpoint["done"]
        kernels = self.job["kernels"]
        files = {}
        for kernel in kernels:
            picks = {m: done[str(m)]["pick"][kernel] for m in self.sizes}
            files[kernel] = {"name": main_bench.file_name(kernel), "configs": sglang_file(picks, self.candidates[kernel])}
        wall = time.time() - self.start
        per_m = {str(m): done[str(m)] for m in self.sizes}
        failures: dict[str, int] = {}
        for kernel in kernels:
            for status in self.failed[kernel].values():
                reason = f"{kernel} {status.split(' ')[0][:60]}"
                failures[reason] = failures.get(reason, 0) + 1
        return {"engine_version": ENGINE_VERSION, "device": self.device, "release": main_bench.facts,
                "shape": self.shape, "kernels": kernels, "batch_sizes": self.sizes, "files": files,
                "per_m": per_m, "candidates": {k: len(self.candidates[k]) for k in kernels},
                "failures": failures, "stats": self.stats, "wall_s": round(wall, 1), "gpus": len(self.job["gpus"]),
                "gpu_minutes": round(wall * len(self.job["gpus"]) / 60, 2), "resumed_batch_sizes": self.resumed}


class _MainSide:
    """What the engine's own process asks the release: default configs, file names, versions."""

    def __init__(self, job: dict) -> None:
        self.job = job
        try:
            from sglang._emulator.moe_engine_bench import EmulatedRelease as release_class
        except ImportError:
            release_class = None
        if release_class is not None:
            self.release = release_class(job)
            self.facts = self.release.facts()
            return
        os.environ.setdefault("CUDA_VISIBLE_DEVICES", str(job["gpus"][0]))
        self.release = Release(job)
        import sglang
        self.facts = {"sglang": getattr(sglang, "__version__", "?"), "triton": self.release.triton.__version__,
                      "torch": self.release.torch.__version__, "kernel_module": self.release.kernels.__name__,
                      "kernel_source_sha256": self.release.kernel_source_sha256, "align": self.release.align_source}

    def kernels(self, requested) -> list[str]:
        """``auto``: up, and down where this release reads a separate down file (it shares up's BLOCK_SIZE_M).
        Named kernels are checked here, before any compile: a down kernel the release never reads is refused."""
        if requested != "auto":
            for kernel in requested:
                self.file_name(kernel)
            return list(requested)
        try:
            self.file_name("down")
        except JobError:
            return ["up"]
        return ["up", "down"]

    def defaults(self, kernel: str) -> list[dict]:
        return [self.release.default_config(m, self.job["shape"], kernel) for m in self.job["batch_sizes"]]

    def file_name(self, kernel: str) -> str:
        return self.release.file_name(self.job["shape"], kernel)


# ---------------------------------------------------------------------------------------------
# The fleet: the batch sizes sharded over the GPU nodes of a Ray cluster
# ---------------------------------------------------------------------------------------------

# Seconds a shard's engine keeps of the run's deadline, to write its checkpoint and answer before the driver's ends.
SHARD_DEADLINE_MARGIN_S = 20.0
# Seconds the driver waits for the other shards to end once one failed or the deadline came (they are cancelled).
SHARD_CANCEL_WAIT_S = 30.0


def ray_address(job: dict) -> str | None:
    """The Ray cluster the job runs on: its ``ray_address``, else ``RAY_ADDRESS`` of the environment (as moe_tune
    passes it to SGLang's tuner). A job that says ``ray_address: null`` (a shard's) runs here."""
    return job["ray_address"] if "ray_address" in job else (os.environ.get("RAY_ADDRESS") or None)


def fleet_nodes(ray_nodes: list[dict]) -> list[dict]:
    """The cluster's live nodes with GPUs, as ``ray.nodes()`` lists them, in a stable order (by address, then id),
    so a rerun on the same cluster deals the same batch sizes to the same node and each resumes its checkpoint."""
    nodes = [{"node_id": node["NodeID"], "ip": node["NodeManagerAddress"], "host": node.get("NodeManagerHostname"),
              "gpus": int(node["Resources"].get("GPU", 0)), "cpus": int(node["Resources"].get("CPU", 1))}
             for node in ray_nodes if node.get("Alive") and int(node.get("Resources", {}).get("GPU", 0)) > 0]
    nodes.sort(key=lambda node: (node["ip"], node["node_id"]))
    for node in nodes:  # the shard's name (its work dir): the address, numbered where nodes share one
        same = [other for other in nodes if other["ip"] == node["ip"]]
        node["name"] = node["ip"] if len(same) == 1 else f"{node['ip']}-{same.index(node) + 1}"
    return nodes


def partition_batch_sizes(sizes: list[int], gpus: list[int], cost=None) -> list[list[int]]:
    """The sorted batch sizes split into ``len(gpus)`` contiguous parts (some empty where nodes outnumber them), part
    i for the node with ``gpus[i]`` GPUs, minimising the largest cost per GPU of a part (``cost``: M -> relative
    cost, default 1 each). Contiguous, because Triton's specialisation classes are contiguous ranges of M
    (docs/moe-engine.md, "Why it is fast"): a node whose batch sizes span fewer classes compiles fewer binaries,
    and the joint up/down pick is per M, so any partition of the batch sizes merges exactly."""
    ordered = sorted(set(sizes))
    if not gpus or min(gpus) < 1:
        raise ValueError(f"every node needs at least one GPU, got {gpus}")
    weight = [float(cost(m)) if cost else 1.0 for m in ordered]
    prefix = [0.0]
    for value in weight:
        prefix.append(prefix[-1] + value)
    n, k = len(ordered), len(gpus)
    # best[j][i]: the smallest largest cost per GPU dealing the first i batch sizes to the first j nodes.
    best = [[math.inf] * (n + 1) for _node in range(k + 1)]
    cut = [[0] * (n + 1) for _node in range(k + 1)]
    best[0][0] = 0.0
    for j in range(1, k + 1):
        for i in range(n + 1):
            for p in range(i + 1):
                value = max(best[j - 1][p], (prefix[i] - prefix[p]) / gpus[j - 1])
                if value < best[j][i] - 1e-12:
                    best[j][i], cut[j][i] = value, p
    parts, i = [], n
    for j in range(k, 0, -1):
        parts.append(ordered[cut[j][i]:i])
        i = cut[j][i]
    return parts[::-1]


def shard_job(job: dict, node: dict, sizes: list[int], deadline_s: float) -> dict:
    """One node's job: its batch sizes, its own work dir (checkpoint, Triton cache, result) under the job's on that
    node, keyed by the node's address so a rerun resumes there, compile workers from the node's CPUs (less one per
    GPU, as on one host), no Ray (it runs where it is); its GPUs are the ones Ray assigns the shard's task."""
    work = os.path.join(job["work_dir"], "shards", node["name"])
    return {**job, "batch_sizes": sizes, "work_dir": work, "output": os.path.join(work, "result.json"),
            "ray_address": None, "gpus": None, "compile_workers": max(1, node["cpus"] - node["gpus"]),
            "deadline_s": max(1.0, deadline_s)}


def merge_results(shards: list[dict], wall_s: float, cluster: dict) -> dict:
    """One result of the engine's format from the shards' (``{"node": ..., "result": ...}`` each, disjoint batch
    sizes): files of every kernel with every batch size in order, ``per_m`` of all, ``gpus`` the shards' total,
    ``gpu_minutes`` their sum, ``wall_s`` the driver's, each node's ``stats`` kept under its address; ``fleet`` says
    where each shard ran. A shard that tuned on another GPU, Triton or kernel source than the first cannot be merged
    into one file: ValueError naming its node."""
    first = shards[0]["result"]
    same = ("engine_version", "shape", "kernels")
    for shard in shards[1:]:
        result, node = shard["result"], shard["node"]
        differs = [name for name in same if result[name] != first[name]]
        differs += [f"device.{name}" for name in ("name", "capability") if result["device"][name] != first["device"][name]]
        differs += [f"release.{name}" for name in ("sglang", "triton", "kernel_source_sha256")
                    if result["release"].get(name) != first["release"].get(name)]
        differs += [f"files.{kernel}.name" for kernel in first["kernels"]
                    if result["files"][kernel]["name"] != first["files"][kernel]["name"]]
        if differs:
            raise ValueError(f"the shard on {node['ip']} ({node.get('host')}) tuned with other {', '.join(differs)} "
                             f"than the shard on {shards[0]['node']['ip']}: one file cannot hold both; tune these "
                             "hosts separately")
    sizes = sorted(m for shard in shards for m in shard["result"]["batch_sizes"])
    if len(sizes) != len(set(sizes)):
        raise ValueError(f"the shards' batch sizes overlap: {sizes}")
    per_m = {str(m): entry for shard in shards for m, entry in shard["result"]["per_m"].items()}
    files = {kernel: {"name": first["files"][kernel]["name"],
                      "configs": {str(m): config for shard in shards
                                  for m, config in shard["result"]["files"][kernel]["configs"].items()}}
             for kernel in first["kernels"]}
    for file in files.values():
        file["configs"] = {str(m): file["configs"][str(m)] for m in sizes}
    # Every node compiles the same space on the same GPU model: a config that fails fails on each, counted once.
    failures: dict[str, int] = {}
    for shard in shards:
        for reason, count in shard["result"]["failures"].items():
            failures[reason] = max(failures.get(reason, 0), count)
    placed = [{**shard["node"], "batch_sizes": shard["result"]["batch_sizes"], "wall_s": shard["result"]["wall_s"],
               "gpu_minutes": shard["result"]["gpu_minutes"], "resumed_batch_sizes": shard["result"]["resumed_batch_sizes"]}
              for shard in shards]
    return {**{name: first[name] for name in ("engine_version", "device", "release", "shape", "kernels")},
            "batch_sizes": sizes, "files": files, "per_m": {str(m): per_m[str(m)] for m in sizes},
            "candidates": {kernel: max(shard["result"]["candidates"][kernel] for shard in shards)
                           for kernel in first["kernels"]},
            "failures": failures, "stats": {"shards": {shard["node"]["name"]: shard["result"]["stats"] for shard in shards}},
            "wall_s": round(wall_s, 1), "gpus": sum(shard["result"]["gpus"] for shard in shards),
            "gpu_minutes": round(sum(shard["result"]["gpu_minutes"] for shard in shards), 2),
            "resumed_batch_sizes": sum(shard["result"]["resumed_batch_sizes"] for shard in shards),
            "fleet": {**cluster, "shards": placed}}


def run_fleet(job: dict, address: str) -> dict:
    """The driver: the batch sizes dealt to the cluster's GPU nodes (``partition_batch_sizes`` by their GPUs), one Ray
    task per node pinned to it with all of its GPUs, running this program on its shard (``shard_task``); their
    results merged (``merge_results``). A failed shard fails the run naming its node (its finished batch sizes stay
    in its checkpoint there); the deadline holds for the whole run."""
    import ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    start = time.time()
    deadline = start + job["deadline_s"]
    ray.init(address=address, logging_level="ERROR", log_to_driver=False)
    try:
        nodes = fleet_nodes(ray.nodes())
        if not nodes:
            raise JobError(f"job.ray_address: the Ray cluster at {address} has no live node with GPUs")
        parts = partition_batch_sizes(job["batch_sizes"], [node["gpus"] for node in nodes])
        cluster = {"address": address, "gpus": sum(node["gpus"] for node in nodes),
                   "nodes": [{key: node[key] for key in ("ip", "host", "gpus")} for node in nodes]}
        emit("fleet", address=address, gpus=cluster["gpus"],
             shards=[{"name": node["name"], "gpus": node["gpus"], "batch_sizes": sizes} for node, sizes in zip(nodes, parts)])
        with open(os.path.abspath(__file__), encoding="utf-8") as handle:
            source = handle.read()
        task = ray.remote(shard_task)
        pending = {}
        for node, sizes in zip(nodes, parts):
            if sizes:
                strategy = NodeAffinitySchedulingStrategy(node_id=node["node_id"], soft=False)
                shard = shard_job(job, node, sizes, deadline - time.time() - SHARD_DEADLINE_MARGIN_S)
                ref = task.options(num_gpus=node["gpus"], num_cpus=1, scheduling_strategy=strategy,
                                   max_retries=0).remote(source, shard)
                pending[ref] = node
        return merge_results(_gather(ray, pending, deadline), time.time() - start, cluster)
    finally:
        ray.shutdown()


def _gather(ray, pending: dict, deadline: float) -> list[dict]:
    """Every shard's ``{"node", "result"}``, in the nodes' order; the first failure or the deadline cancels the rest
    and raises, naming the node."""
    done, order = [], [node["node_id"] for node in pending.values()]
    try:
        while pending:
            if time.time() > deadline:
                waiting = ", ".join(node["ip"] for node in pending.values())
                raise TimeoutError(f"deadline reached with the shards on {waiting} still tuning (each keeps its "
                                   "finished batch sizes in its checkpoint)")
            ready, _rest = ray.wait(list(pending), num_returns=1, timeout=min(5.0, max(0.1, deadline - time.time())))
            for ref in ready:
                node = pending.pop(ref)
                try:
                    answer = ray.get(ref)
                except Exception as exc:  # noqa: BLE001 - the task or its node died: named with the node
                    raise RuntimeError(f"the shard on {node['ip']} ({node['host']}) failed in Ray: "
                                       f"{type(exc).__name__}: {str(exc)[-600:]}") from None
                # Where the shard ran, as its task saw it: Ray's node and GPU ids, the node's host name, the devices.
                node = {**node, "ran_on": answer["placement"]}
                _shard_outcome(node, answer)
                emit("shard", ip=node["ip"], host=node["host"], batch_sizes=answer["result"]["batch_sizes"],
                     wall_s=answer["result"]["wall_s"])
                done.append({"node": node, "result": answer["result"]})
    except BaseException:
        for ref in pending:
            ray.cancel(ref)
        if pending:
            ray.wait(list(pending), num_returns=len(pending), timeout=SHARD_CANCEL_WAIT_S)
        raise
    return sorted(done, key=lambda shard: order.index(shard["node"]["node_id"]))


def _shard_outcome(node: dict, answer: dict) -> None:
    """Raise what a shard's engine ended with, naming its node (exit 3: its deadline; 2: a bad job)."""
    if answer["rc"] == 0 and answer["result"] is not None:
        return
    where = f"the shard on {node['ip']} ({node['host']}, batch sizes {answer['batch_sizes']})"
    said = answer["last_event"] or {}
    detail = said.get("error") or f"exit code {answer['rc']}"
    message = (f"{where}: {detail}; its finished batch sizes stay in {answer['work_dir']} on that node and a rerun "
               f"resumes there. Log tail:\n{answer['log_tail']}")
    if answer["rc"] == EXIT_DEADLINE:
        raise TimeoutError(message)
    if answer["rc"] == EXIT_BAD_JOB:
        raise JobError(message)
    raise RuntimeError(message)


def shard_task(source: str, job: dict) -> dict:
    """A Ray task on one node: this program (``source``, shipped with the task) run on the shard's job as its own
    process group with the GPUs Ray assigned the task (``CUDA_VISIBLE_DEVICES`` Ray set), the node's python (the
    one that runs the Ray node, the SGLang installation's); the shard's result and where it ran. A cancelled task
    ends the engine's process group (its checkpoint already holds every finished batch size)."""
    import signal
    import socket
    import subprocess

    import ray

    gpus = [entry.strip() for entry in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if entry.strip()]
    job = {**job, "gpus": gpus or [str(gpu) for gpu in ray.get_gpu_ids()]}
    os.makedirs(job["work_dir"], exist_ok=True)
    program, job_path = os.path.join(job["work_dir"], f"{PROGRAM}.py"), os.path.join(job["work_dir"], "job.json")
    write_text_atomically(program, source)
    write_json_atomically(job_path, job)
    env = {name: value for name, value in os.environ.items() if name != "RAY_ADDRESS"}
    log = os.path.join(job["work_dir"], "engine.log")
    with open(log, "w", encoding="utf-8") as out:
        # A raw Popen (this runs in a Ray worker, no AnsibleModule): its own process group, so a cancel ends all of it.
        # pylint: disable-next=ansible-bad-function
        proc = subprocess.Popen([sys.executable, program, job_path], stdout=out, stderr=subprocess.STDOUT, env=env,
                                start_new_session=True, cwd=job["work_dir"])
        try:
            rc = proc.wait()
        except BaseException:  # cancelled (KeyboardInterrupt) or the worker is ending: the engine goes with it
            for sig, wait in ((signal.SIGTERM, 10), (signal.SIGKILL, 5)):
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, sig)
                with contextlib.suppress(subprocess.TimeoutExpired):
                    proc.wait(timeout=wait)
                    break
            raise
    with open(log, encoding="utf-8", errors="replace") as handle:
        lines = handle.read().splitlines()
    events = [json.loads(line) for line in lines if line.startswith('{"event"')]
    context = ray.get_runtime_context()
    return {"rc": rc, "result": read_json(job["output"]) if rc == 0 else None, "batch_sizes": job["batch_sizes"],
            "work_dir": job["work_dir"], "last_event": events[-1] if events else None,
            "log_tail": "\n".join(lines[-30:]),
            "placement": {"node_id": context.get_node_id(), "ip": ray.util.get_node_ip_address(),
                          "hostname": socket.gethostname(), "gpu_ids": [str(gpu) for gpu in ray.get_gpu_ids()],
                          "devices": job["gpus"], "work_dir": job["work_dir"]}}


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        sys.stderr.write("usage: moe_engine.py JOB.json\n")
        return EXIT_BAD_JOB
    try:
        with open(argv[1], encoding="utf-8") as handle:
            job = validate_job(json.load(handle))
    except (OSError, ValueError) as exc:
        emit("failed", error=str(exc))
        return EXIT_BAD_JOB
    address = ray_address(job)
    try:
        result = run_fleet(job, address) if address else Engine(job).run()
    except TimeoutError as exc:
        emit("deadline", error=str(exc))
        return EXIT_DEADLINE
    except JobError as exc:
        emit("failed", error=str(exc))
        return EXIT_BAD_JOB
    except Exception as exc:  # noqa: BLE001 - the module reports it with the log tail
        emit("failed", error=f"{type(exc).__name__}: {exc}", trace=traceback.format_exc()[-3000:])
        return 1
    write_json_atomically(job["output"], result)
    emit("done", output=job["output"], wall_s=result["wall_s"], gpu_minutes=result["gpu_minutes"])
    return 0


if __name__ == PROGRAM and os.environ.get(PRELOAD_ENV):  # the fork server's import of this program (start_pools)
    preload_release(os.environ[PRELOAD_ENV])

if __name__ == "__main__":
    raise SystemExit(main(sys.argv))
