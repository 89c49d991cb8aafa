# Copyright (c) llmops.sglang contributors
# Apache License 2.0 (see LICENSE)
"""Emulated backend of llmops.sglang's fused-MoE tuning engine (plugins/module_utils/moe_engine.py), emulator only.

The engine imports this module where the host runs the SGLang emulator (``moe_engine.backend`` and ``_MainSide``
try ``sglang._emulator.moe_engine_bench``) and uses :class:`EmulatedRelease` and :class:`EmulatedBench` in place of
its ``Release`` and ``TritonBench``; everything else of the engine (compile and timing process pools, screening,
refining, the joint up/down pick, checks, checkpoints, deadline, crash handling, output) runs unchanged on a
CPU-only host. No GPU work is done.

What is modelled, from a real H100 80GB HBM3 host with SGLang 0.5.23 and Triton 3.6.0 (the engine's GPU benchmark,
benchmarks/moe_engine_gpu.py):
- Compiling: ``tuner.engine_compile_seconds`` (0.6) real seconds on one CPU core per Triton specialisation
  ("variant") of a config. A config's variants over the job's batch sizes are the distinct
  ``(EM % 16 == 0, num_valid_tokens % 16 == 0)`` pairs of its launches (Triton specialises integer arguments
  divisible by 16): ``num_valid_tokens = M * topk`` and ``EM`` = the sorted-ids length of sglang 0.5.23
  moe_align_block_size (``numel = M * topk``; ``numel * BM`` if ``numel < E + 1`` else
  ``numel + (E + 1) * (BM - 1)``; rounded up to a multiple of 4).
- Compile failures: shared memory (``kernels.shared_memory_bytes``, 2-byte operands) above the GPU's
  ``smem_per_block`` -> ``compile:OutOfResources`` (Triton raises it when the binary loads; the compile time is spent
  first); ``BLOCK_SIZE_M=256`` with ``num_warps=4`` -> ``compile:RuntimeError`` (48 such configs of SGLang's
  1920-config space crash Triton 3.6.0's compiler); the profile's ``tuner.compile_error_configs`` (the tuner
  emulator's seeded pick) -> ``compile:RuntimeError``; ``tuner.engine_crash_configs`` configs (a seeded pick among
  those that compile) kill the compiling process (``os._exit(139)``, a Triton segfault), which the engine must
  survive ("compile:crashed").
- Kernel time: ``KernelModel.gemm_time_us`` (the tuner emulator's roofline model with a per-config penalty, one
  GEMM: up or down) plus measurement noise, seeded by the profile's ``seed``: eager launches ~3 % and +3 us of
  launch skew, CUDA-graph replays ~0.5 %. The emulated GPU time (one loading launch, then the launches, replays or
  checks timed) is slept at the tuning time scale (``tuner.time_scale``, else the profile's ``time_scale``), like
  every other emulated tuning cost.
- Checks: the relative error of a launch against the float32 reference is ~1e-3 for every config that launches.
- The device: the profile's GPU (name, compute capability, ``smem_per_block`` as the opt-in shared memory per
  block); SM count and L2 size, which profiles do not carry, from :data:`DEVICE_FACTS` by GPU name. A device index
  beyond the profile's ``gpu.count`` fails as torch does with no visible GPU.
- Forks: with ``tuner.engine_import_initialises_cuda`` the import of this module initialises (emulated) CUDA, and a
  bench in a process forked from the importing one raises torch's "Cannot re-initialize CUDA in forked subprocess".
Not modelled: register pressure beyond a rough estimate (``n_regs``/``n_spills`` in compile records), the Triton
cache's disk use, the start-up of the processes (importing torch and the release takes seconds on a real host).
"""
from __future__ import annotations

import hashlib
import os
import random
import sys
import time
from typing import Any

from sglang._emulator import kernels as kernel_model
from sglang._emulator.kernels import KernelModel, MoeProblem, OutOfResources, TunerSettings, shared_memory_bytes
from sglang._emulator.profile import emulated_version, load_profile

# (SM count, L2 bytes) by device name; torch reports them as multi_processor_count and L2_cache_size.
# RTX PRO 6000 Blackwell: 188 SMs, 128 MB L2 (NVIDIA RTX Blackwell GPU architecture whitepaper); H100 SXM and H200:
# 132 SMs, 50 MB L2 (NVIDIA H100 Tensor Core GPU architecture whitepaper; the H200 is the same GH100 configuration).
DEVICE_FACTS = {
    "NVIDIA RTX PRO 6000 Blackwell Server Edition": (188, 128 << 20),
    "NVIDIA RTX PRO 6000 Blackwell Workstation Edition": (188, 128 << 20),
    "NVIDIA H100 80GB HBM3": (132, 50 << 20),
    "NVIDIA H200": (132, 50 << 20),
}
OPERAND_BYTES = 2  # bf16 and fp16: the dtypes the engine tunes
SCREEN_NOISE_CV = 0.03
GRAPH_NOISE_CV = 0.005
CHECK_ERROR = 1e-3
# A real crash comes after seconds of compiling; the floor lets the worker's "start" message leave its queue's
# feeder thread first, as it has long left it on a real host (the engine learns which task died from it).
CRASH_FLOOR_S = 0.05
BM256_W4_ERROR = ("PassManager::run failed (emulated: BLOCK_SIZE_M=256 with num_warps=4 crashes Triton 3.6.0's "
                  "compiler)")


def _cuda_owner() -> int | None:
    """This process, where the profile says importing the kernels initialises CUDA (a fork inherits the value)."""
    try:
        settings = TunerSettings.from_profile(load_profile())
    except Exception:  # noqa: BLE001 - no profile here: the bench says so when it starts
        return None
    return os.getpid() if settings.engine_import_initialises_cuda else None


# The process whose import initialised (emulated) CUDA, or None: torch refuses CUDA in a process forked from it.
CUDA_OWNER = _cuda_owner()


def _engine():
    """The moe_engine module that called us (``__main__`` in the engine's process, ``__mp_main__`` in its spawned
    workers, an imported module elsewhere): its ``full_config`` and ``JobError`` are the engine's own."""
    def is_engine(module) -> bool:
        return all(hasattr(module, name) for name in ("full_config", "config_key", "JobError", "TritonBench"))

    frame = sys._getframe(1)
    while frame is not None:
        module = sys.modules.get(frame.f_globals.get("__name__", ""))
        if module is not None and is_engine(module):
            return module
        frame = frame.f_back
    for name, module in list(sys.modules.items()):
        if name.rsplit(".", 1)[-1] in ("moe_engine", "__main__", "__mp_main__") and is_engine(module):
            return module
    raise ImportError("sglang._emulator.moe_engine_bench serves llmops.sglang's moe_engine; it is not loaded")


def kernel_source_file() -> str:
    """The emulated release's kernel source (its hash is part of the facts, as the real kernel file's is): what
    llmops.sglang's cache-key probe (plugins/module_utils/moe_engine_key.py) hashes on an emulator host."""
    return kernel_model.__file__


def moe_problem(shape: dict) -> MoeProblem:
    """The engine's job shape as the kernel model's problem (the config-file N is the per-shard intermediate size)."""
    return MoeProblem(num_experts=shape["E"], topk=shape["topk"], hidden_size=shape["hidden"],
                      intermediate_size=shape["N"], dtype=None)


def padded_tokens(m: int, topk: int, experts: int, block_m: int) -> int:
    """EM: the sorted-ids length of sglang 0.5.23 moe_align_block_size (max_num_tokens_padded, rounded to 4)."""
    numel = m * topk
    padded = numel * block_m if numel < experts + 1 else numel + (experts + 1) * (block_m - 1)
    return (padded + 3) // 4 * 4


def batch_size_groups(config: dict, sizes: list[int], shape: dict, kernel: str) -> list[list[int]]:
    """The batch sizes that share one Triton specialisation of a config's launch: divisibility by 16 of EM and
    num_valid_tokens, and the constexpr ``GDC_EARLY = A.shape[0] <= 512`` that sglang 0.5.23's
    invoke_fused_moe_kernel passes on GPUs with programmatic dependent launch (A: M rows up, M*topk down)."""
    groups: dict[tuple, list[int]] = {}
    for m in sizes:
        rows = m if kernel == "up" else m * shape["topk"]
        key = (padded_tokens(m, shape["topk"], shape["E"], config["BLOCK_SIZE_M"]) % 16 == 0,
               (m * shape["topk"]) % 16 == 0, rows <= 512)
        groups.setdefault(key, []).append(m)
    return sorted(groups.values())


class EmulatedRelease:
    """The emulated release's default configs, config-file names and versions (the engine's ``Release`` part the
    engine's own process asks)."""

    def __init__(self, job: dict) -> None:
        self.engine = _engine()
        self.job = job
        self.profile = load_profile()
        from sglang._emulator.moe_layout import config_module
        self.config = config_module()

    def facts(self) -> dict:
        import triton
        with open(kernel_source_file(), "rb") as handle:
            source_sha = hashlib.sha256(handle.read()).hexdigest()
        return {"sglang": emulated_version(self.profile), "triton": triton.__version__, "torch": None,
                "kernel_module": kernel_model.__name__, "kernel_source_sha256": source_sha, "align": "emulated"}

    def default_config(self, m: int, shape: dict, kernel: str) -> dict:
        # As the real call: get_default_config(M, E, N, K, topk, dtype, is_marlin, block_shape), N the config-file N.
        return self.engine.full_config(kernel_model.get_default_config(
            m, shape["E"], shape["N"], shape["hidden"], shape["topk"], None, False, None))

    def file_name(self, shape: dict, kernel: str) -> str:
        import inspect
        params = inspect.signature(self.config.get_config_file_name).parameters
        kwargs = {"down_moe": True} if kernel == "down" and "down_moe" in params else {}
        if kernel == "down" and not kwargs:
            raise self.engine.JobError("job.kernels: this SGLang release reads no separate down config file")
        return self.config.get_config_file_name(shape["E"], shape["N"], None, None, **kwargs)


class EmulatedBench:
    """Compiles and times configs on one emulated GPU with the contracts of the engine's ``TritonBench``."""

    def __init__(self, job: dict, warmup_only: bool = False) -> None:
        if CUDA_OWNER not in (None, os.getpid()):  # torch/cuda/__init__.py _lazy_init's message
            raise RuntimeError("Cannot re-initialize CUDA in forked subprocess. To use CUDA with multiprocessing, you "
                               "must use the 'spawn' start method")
        self.engine = _engine()
        self.job, self.warmup_only = job, warmup_only
        self.profile = load_profile()
        gpu = self.profile.gpu
        visible = os.environ.get("CUDA_VISIBLE_DEVICES", "0").split(",")[0].strip()
        if not visible.isdigit() or int(visible) >= gpu.count:
            raise RuntimeError("No CUDA GPUs are available")
        self.model = KernelModel(self.profile, seed=0)
        self.settings = self.model.settings
        self.problem = moe_problem(job["shape"])
        major, _, minor = gpu.compute_capability.partition(".")
        sm_count, l2_bytes = DEVICE_FACTS.get(gpu.name, (0, 0))
        self.device = {"name": gpu.name, "capability": [int(major), int(minor or 0)], "sm_count": sm_count,
                       "l2_bytes": l2_bytes, "smem_per_block_optin": gpu.smem_per_block}
        space = [self.engine.full_config(config) for config in job["configs"]]
        broken = self.model.start_tuning(space)  # the tuner emulator's seeded compile_error_configs
        self._broken = {self.engine.config_key(c) for c in space if kernel_model.config_key(c) in broken}
        self._crash = self._crash_pick(space)
        seed = self.profile.seed
        self._rng = random.Random(f"{seed}/{visible}") if seed is not None else random.Random()
        self.held_again = 0  # the real bench's count of screens re-timed behind a longer GPU wait: never here

    # ------------------------------------------------------------------------------------------ faults

    def _failure(self, config: dict) -> Exception | None:
        """What compiling (and loading) ``config`` raises on this GPU, if anything."""
        key = self.engine.config_key(config)
        if config["BLOCK_SIZE_M"] == 256 and config["num_warps"] == 4:
            return RuntimeError(BM256_W4_ERROR)
        if key in self._broken:
            return RuntimeError(kernel_model.COMPILE_ERROR)
        required = shared_memory_bytes(config, OPERAND_BYTES, OPERAND_BYTES)
        if required > self.profile.gpu.smem_per_block:
            return OutOfResources(required, self.profile.gpu.smem_per_block)
        return None

    def _crash_pick(self, space: list[dict]) -> set[str]:
        """``engine_crash_configs`` configs of the space that would compile, a seeded pick (every process the same)."""
        count = self.settings.engine_crash_configs
        if not count:
            return set()
        healthy = sorted({self.engine.config_key(c): c for c in space if self._failure(c) is None})
        ranked = sorted(healthy, key=lambda key: self.model._unit_hash("engine-crash", key))
        return set(ranked[:count])

    # ------------------------------------------------------------------------------------------ compile

    def compile(self, kernel: str, config: dict, sizes: list[int] | None = None) -> dict:
        """The engine's compile record for the batch sizes ``sizes`` (default: the job's): status, seconds,
        variants, shared memory, registers, spills."""
        start = time.perf_counter()
        config = self.engine.full_config(config)
        groups = batch_size_groups(config, sizes or self.job["batch_sizes"], self.job["shape"], kernel)
        count = len(groups)
        key = self.engine.config_key(config)
        if key in self._crash:
            self.model.spend(count * self.settings.engine_compile_seconds / 2)
            time.sleep(CRASH_FLOOR_S)
            sys.stderr.write(f"Fatal Python error: Segmentation fault (emulated: tuner.engine_crash_configs, {key})\n")
            sys.stderr.flush()
            os._exit(139)
        failure = self._failure(config)
        # A RuntimeError ends the compile of the first variant; OutOfResources comes when the compiled binary loads.
        self.model.spend((1 if isinstance(failure, RuntimeError) else count) * self.settings.engine_compile_seconds)
        if failure is not None:
            record = {"status": f"compile:{type(failure).__name__}", "error": str(failure)[:300]}
        else:
            regs, spills = self._registers(config)
            record = {"status": "ok", "variants": count, "groups": groups, "n_regs": regs, "n_spills": spills,
                      "shared": shared_memory_bytes(config, OPERAND_BYTES, OPERAND_BYTES)}
        record["seconds"] = round(time.perf_counter() - start, 3)
        return record

    @staticmethod
    def _registers(config: dict) -> tuple[int, int]:
        """A rough register estimate: the fp32 accumulator tile per thread plus addressing; 255 is the cap."""
        need = 40 + config["BLOCK_SIZE_M"] * config["BLOCK_SIZE_N"] // (32 * config["num_warps"])
        return min(need, 255), max(0, need - 255) * 4

    # ------------------------------------------------------------------------------------------ timing

    def _time_us(self, kernel: str, m: int, config: dict) -> float:
        """Modelled time of one launch, or the launch's failure for a config that cannot load."""
        config = self.engine.full_config(config)
        failure = self._failure(config)
        if failure is not None:
            raise failure
        return self.model.gemm_time_us(self.problem, m, kernel, config)

    def _gpu(self, microseconds: float) -> None:
        self.model.spend(microseconds * 1e-6)

    def screen_times(self, kernel: str, config: dict, sizes: list[int], launches: int) -> dict[int, list[float]]:
        """Microseconds of ``launches`` queued eager launches at every M (one loading launch each first)."""
        times = {}
        for m in sizes:
            t = self._time_us(kernel, m, config)
            times[m] = [max(0.5 * t, t * (1 + self._rng.gauss(0, SCREEN_NOISE_CV))) for _ in range(launches)]
            self._gpu(t + sum(times[m]))
        return times

    def graph_times(self, kernel: str, m: int, config: dict, reps: int) -> list[float]:
        """Microseconds per launch of ``reps`` graph replays (one eager launch, capture, one warm-up replay first)."""
        t = self._time_us(kernel, m, config)
        launches = self.job["timing"]["launches"]
        samples = [max(0.5 * t, t * (1 + self._rng.gauss(0, GRAPH_NOISE_CV))) for _ in range(reps)]
        self._gpu(t + launches * t + launches * sum(samples))
        return samples

    def check(self, kernel: str, m: int, config: dict) -> float:
        """Relative error of one launch against the float32 reference (~1e-3: bf16 operands, fp32 accumulation)."""
        t = self._time_us(kernel, m, config)
        self._gpu(t)
        key = self.engine.config_key(config)
        return CHECK_ERROR * (0.8 + 0.4 * self.model._unit_hash("check", (kernel, m, key)))
