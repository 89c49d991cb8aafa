# Copyright (c) llmops.sglang contributors
# Apache License 2.0 (see LICENSE)
"""Startup of the emulated TP ranks: the model-runner phases, their log lines, timing and failures.

Every rank runs each phase at the same time (as separate processes would), so a phase sleeps once
and then logs its line once per rank. Elapsed times and memory figures in the lines are what the
emulated run really took (wall clock) and what the memory plan says. Failures raise from
functions named after SGLang's model-runner steps, so the logged traceback reads naturally.
"""
from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass

from sglang._emulator.capacity import MemoryPlan, plan_memory
from sglang._emulator.logs import as_rank, progress_line, rank_prefix, write_progress
from sglang._emulator.model_shape import ModelShape, load_model_shape
from sglang._emulator.perf import PerfModel, build_perf_model
from sglang._emulator.profile import Profile, emulated_version
from sglang.srt.layers.moe.moe_runner.triton_utils.fused_moe_triton_config import (
    check_block_size_m, get_moe_configs, locate_moe_config)
from sglang.srt.server_args import ServerArgs

logger = logging.getLogger("sglang.srt.model_executor.model_runner")

CUDA_GRAPH_CAPTURE_FAILED_MSG = (
    "Possible solutions:\n"
    "1. set --mem-fraction-static to a smaller value (e.g., 0.8 or 0.7)\n"
    "2. set --cuda-graph-max-bs to a smaller value (e.g., 16)\n"
    "3. disable torch compile by not using --enable-torch-compile\n"
    "4. disable CUDA graph by --disable-cuda-graph. (Not recommended. Huge performance loss)\n"
    "Open an issue on GitHub https://github.com/sgl-project/sglang/issues/new/choose \n"
)
CUDA_ERROR_TEXT = (
    "CUDA error: an illegal memory access was encountered\n"
    "CUDA kernel errors might be asynchronously reported at some other API call, so the stacktrace below might be "
    "incorrect.\nFor debugging consider passing CUDA_LAUNCH_BLOCKING=1\n"
    "Compile with `TORCH_USE_CUDA_DSA` to enable device-side assertions.\n"
)
PROGRESS_FRAMES = 10
DEFAULT_CAPTURE_BS = [1, 2, 4, 8, 12, *range(16, 257, 8), *range(272, 513, 16)]


class OutOfMemoryError(RuntimeError):
    """Stands for torch.OutOfMemoryError, so tracebacks name it as PyTorch does."""

    __module__ = "torch"


@dataclass
class Engine:
    args: ServerArgs
    profile: Profile
    shape: ModelShape
    plan: MemoryPlan
    ranks: list[str]
    moe_up: str = "missing"
    moe_down: str = "missing"
    forward_done: bool = False

    @property
    def perf(self) -> PerfModel:
        return build_perf_model(self.profile, self.args, self.shape, self.moe_up, self.moe_down)

    @property
    def scheduler_prefix(self) -> str:
        return self.ranks[0]

    @property
    def gpu_indices(self) -> list[int]:
        return [self.args.base_gpu_id + rank * self.args.gpu_id_step for rank in range(len(self.ranks))]

    async def start(self) -> None:
        await self.init_torch_distributed()
        await self.load_model()
        await self.init_memory_pool()
        if not self.args.disable_cuda_graph:
            await self.capture_cuda_graphs()
        await self.init_piecewise_cuda_graphs()
        self._log_rank0(
            f"max_total_num_tokens={self.plan.max_total_num_tokens}, "
            f"chunked_prefill_size={self.args.chunked_prefill_size}, max_prefill_tokens={self.args.max_prefill_tokens}, "
            f"max_running_requests={self.plan.max_running_requests}, context_len={self.plan.context_len}, "
            f"available_gpu_mem={self.plan.avail_after_graphs_gib:.2f} GB"
        )

    async def init_torch_distributed(self) -> None:
        self._log_ranks("Init torch distributed begin.")
        elapsed = await self._phase(self.profile.startup.init_distributed_s)
        self._log_ranks(f"Init torch distributed ends. elapsed={elapsed:.2f} s, mem usage={self.plan.init_usage_gib:.2f} GB")

    async def load_model(self) -> None:
        await self._load_weights(self.shape.architecture, self.profile.startup.load_weights_s,
                                 self.plan.avail_after_init_gib, self.plan.weights_gib)
        if self.args.speculative_algorithm:
            await self._load_weights(_draft_architecture(self.shape.architecture),
                                     self.profile.startup.draft_load_weights_s, self.plan.avail_after_weights_gib,
                                     self.plan.draft_weights_gib)

    async def _load_weights(self, architecture: str, seconds: float, avail_before: float, usage: float) -> None:
        self._log_ranks(f"Load weight begin. avail mem={avail_before:.2f} GB")
        elapsed = await self._phase(seconds)
        quant = f"quant={self.shape.quant_method}, " if self.shape.quant_method else ""
        self._log_ranks(
            f"Load weight end. elapsed={elapsed:.2f} s, type={architecture}, {quant}"
            f"avail mem={avail_before - usage:.2f} GB, mem usage={usage:.2f} GB."
        )

    async def init_memory_pool(self) -> None:
        await self._phase(self.profile.startup.memory_pool_s)
        if self.plan.not_enough_memory:
            raise RuntimeError("Not enough memory. Please try to increase --mem-fraction-static.")
        if self.plan.max_mamba_cache_size is not None:
            self._log_ranks(
                f"Mamba Cache is allocated. max_mamba_cache_size: {self.plan.max_mamba_cache_size}, "
                f"conv_state size: {self.plan.conv_state_gib:.2f}GB, ssm_state size: {self.plan.ssm_state_gib:.2f}GB "
            )
        dtype = f"torch.{self.plan.kv_dtype.replace('fp8_e4m3', 'float8_e4m3fn').replace('fp8_e5m2', 'float8_e5m2')}"
        sizes = (f"KV size: {self.plan.kv_cache_gib:.2f} GB" if self.shape.is_mla
                 else f"K size: {self.plan.kv_cache_gib / 2:.2f} GB, V size: {self.plan.kv_cache_gib / 2:.2f} GB")
        # memory_pool.py: "dtype: ..." only from 0.5.14 (0.5.10/0.5.11: "KV Cache is allocated. #tokens: N, ...")
        dtype_part = f"dtype: {dtype}, " if _release(self.profile) >= (0, 5, 14) else ""
        self._log_ranks(f"KV Cache is allocated. {dtype_part}#tokens: {self.plan.max_total_num_tokens}, {sizes}")
        self._log_ranks(f"Memory pool end. avail mem={self.plan.avail_after_pool_gib:.2f} GB")

    async def capture_cuda_graphs(self) -> None:
        before = self.plan.avail_after_pool_gib
        self._log_ranks(f"Capture cuda graph begin. This can take up to several minutes. avail mem={before:.2f} GB")
        capture_bs = self._capture_batch_sizes()
        self._log_ranks(f"Capture cuda graph bs {capture_bs}")
        self.first_forward()
        started = time.monotonic()
        try:
            self._check_capture_memory()
            await self._progress_bars(
                [f"Capturing batches (bs={bs} avail_mem={before - self.plan.cuda_graph_gib * i / len(capture_bs):.2f} GB)"
                 for i, bs in enumerate(reversed(capture_bs))],
                self.profile.startup.cuda_graph_s,
            )
        except RuntimeError as e:
            raise Exception(f"Capture cuda graph failed: {e}\n{CUDA_GRAPH_CAPTURE_FAILED_MSG}") from e
        after = before - self.plan.cuda_graph_gib
        self._log_ranks(
            f"Capture cuda graph end. Time elapsed: {time.monotonic() - started:.2f} s. "
            f"mem usage={self.plan.cuda_graph_gib:.2f} GB. avail mem={after:.2f} GB."
        )

    async def init_piecewise_cuda_graphs(self) -> None:
        if self.args.disable_piecewise_cuda_graph:
            # 0.5.10/0.5.11 model_runner.py init_piecewise_cuda_graphs: ServerArgs decided (silently, whatever the
            # rule: args.piecewise_disable_reason), the runner prints this one line for every cause.
            self._log_ranks("Disable piecewise CUDA graph because --disable-piecewise-cuda-graph is set")
            return
        before = self.plan.avail_after_pool_gib - self.plan.cuda_graph_gib
        self._log_ranks(f"Capture piecewise CUDA graph begin. avail mem={before:.2f} GB")
        tokens = _piecewise_tokens(self.args.piecewise_cuda_graph_tokens, self.args.piecewise_cuda_graph_max_tokens)
        self._log_ranks(f"Capture cuda graph num tokens {tokens}")
        self.first_forward()
        started = time.monotonic()
        half = self.profile.startup.piecewise_cuda_graph_s / 2
        await self._progress_bars([f"Compiling num tokens (num_tokens={n})" for n in reversed(tokens)], half)
        used = self.plan.piecewise_cuda_graph_gib
        await self._progress_bars(
            [f"Capturing num tokens (num_tokens={n} avail_mem={before - used * i / len(tokens):.2f} GB)"
             for i, n in enumerate(reversed(tokens))],
            half,
        )
        self._log_ranks(
            f"Capture piecewise CUDA graph end. Time elapsed: {time.monotonic() - started:.2f} s. "
            f"mem usage={used:.2f} GB. avail mem={before - used:.2f} GB."
        )

    def first_forward(self) -> None:
        """The first forward pass of each rank: looks up MoE kernel configs (logged per rank) once."""
        if self.forward_done:
            return
        self.forward_done = True
        if self.profile.failures.fail_start == "cuda_error":
            raise RuntimeError(CUDA_ERROR_TEXT)
        if not self.shape.is_moe:
            return
        experts, intermediate = self.shape.moe_file_shape(
            self.args.tp_size, self.args.ep_size, self.args.disable_shared_experts_fusion)
        block_n, block_k = self.shape.block_shape or (0, 0)
        lookup = (experts, intermediate, self.shape.moe_dtype, block_n, block_k)
        for prefix in self.ranks:
            with as_rank(prefix):
                get_moe_configs.cache_clear()  # each real rank is its own process with its own lru_cache
                get_moe_configs(*lookup, down_moe=False)
                get_moe_configs(*lookup, down_moe=True)
        if not self.args.enable_deterministic_inference:
            check_block_size_m(*lookup, self._capture_batch_sizes())  # releases <= 0.5.12 assert here
            self.moe_up = locate_moe_config(*lookup, down_moe=False).status
            self.moe_down = locate_moe_config(*lookup, down_moe=True).status

    def _check_capture_memory(self) -> None:
        if self.plan.graph_capture_oom:
            free = max(self.plan.avail_after_graphs_gib, 0.0)
            raise OutOfMemoryError(
                f"CUDA out of memory. Tried to allocate {self.plan.activation_reserve_gib:.2f} GiB. GPU 0 has a total "
                f"capacity of {self.plan.total_gib:.2f} GiB of which {free:.2f} GiB is free. Including non-PyTorch "
                f"memory, this process has {self.plan.total_gib - free:.2f} GiB memory in use."
            )

    def _capture_batch_sizes(self) -> list[int]:
        limit = min(self.args.cuda_graph_max_bs, self.plan.max_running_requests)
        sizes = self.args.cuda_graph_bs or DEFAULT_CAPTURE_BS
        return [bs for bs in sizes if bs <= limit] or [1]

    async def _phase(self, emulated_seconds: float) -> float:
        started = time.monotonic()
        await asyncio.sleep(self.profile.scaled(emulated_seconds))
        return time.monotonic() - started

    async def _progress_bars(self, descriptions: list[str], emulated_seconds: float) -> None:
        """A tqdm bar on rank 0's stderr that advances through `descriptions` over the phase time."""
        total = len(descriptions)
        frames = sorted({round(total * k / PROGRESS_FRAMES) for k in range(1, PROGRESS_FRAMES + 1)})
        started, shown = time.monotonic(), 0
        write_progress(progress_line(descriptions[0], 0, total, 0.0), final=False)
        for done in frames:
            await asyncio.sleep(self.profile.scaled(emulated_seconds) * (done - shown) / total)
            shown = done
            write_progress(progress_line(descriptions[done - 1], done, total, time.monotonic() - started),
                           final=done == total)

    def _log_ranks(self, message: str) -> None:
        for prefix in self.ranks:
            with as_rank(prefix):
                logger.info(message)

    def _log_rank0(self, message: str) -> None:
        with as_rank(self.scheduler_prefix):
            logging.getLogger("sglang.srt.managers.scheduler").info(message)


def _release(profile: Profile) -> tuple[int, ...]:
    return tuple(int(part) for part in emulated_version(profile).split(".")[:3])


def create_engine(args: ServerArgs, profile: Profile) -> Engine:
    shape = load_model_shape(args.model_path)
    ranks = [rank_prefix(tp, args.tp_size, args.ep_size, args.pp_size) for tp in range(args.tp_size)]
    return Engine(args, profile, shape, plan_memory(args, shape, profile), ranks)


def _draft_architecture(architecture: str) -> str:
    if architecture.startswith("Deepseek"):
        return architecture + "NextN"
    return architecture + "MTP"


def _piecewise_tokens(explicit: list[int] | None, max_tokens: int) -> list[int]:
    if explicit:
        return sorted(explicit)
    candidates = [*range(4, 33, 4), *range(48, 257, 16), *range(288, 513, 32), *range(640, 1025, 128),
                  *range(1280, 4097, 256), *range(4608, 8193, 512), *range(9216, 16385, 1024)]
    return [n for n in candidates if n <= max_tokens] or [max_tokens]
