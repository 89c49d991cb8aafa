# Copyright (c) llmops.sglang contributors
# Apache License 2.0 (see LICENSE)
"""Startup of the emulated TP ranks: the model-runner phases, their log lines, timing and failures.

Every rank runs each phase at the same time (as separate processes would), so a phase sleeps once
and then logs its line once per rank. Elapsed times and memory figures in the lines are what the
emulated run really took (wall clock) and what the memory plan says. Failures raise from
functions named after SGLang's model-runner steps, so the logged traceback reads naturally. The
lines are the emulated release's: graph capture in sglang/_emulator/graph_capture.py, the rest here
(0.5.11 model_runner.py / memory_pool.py; sglang 0.5.23 sglang/srt/model_executor/model_runner.py,
sglang/srt/mem_cache/memory_pool.py, kv_cache_configurator.py and managers/scheduler.py).
"""
from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass

from sglang._emulator.capacity import MemoryPlan, plan_memory
from sglang._emulator.graph_capture import graphs_for
from sglang._emulator.logs import as_rank, progress_line, rank_prefix, write_progress
from sglang._emulator.model_shape import ModelShape, load_model_shape
from sglang._emulator.moe_layout import config_module
from sglang._emulator.perf import PerfModel, build_perf_model
from sglang._emulator.profile import Profile
from sglang.srt.server_args import ServerArgs

logger = logging.getLogger("sglang.srt.model_executor.model_runner")

CUDA_ERROR_TEXT = (
    "CUDA error: an illegal memory access was encountered\n"
    "CUDA kernel errors might be asynchronously reported at some other API call, so the stacktrace below might be "
    "incorrect.\nFor debugging consider passing CUDA_LAUNCH_BLOCKING=1\n"
    "Compile with `TORCH_USE_CUDA_DSA` to enable device-side assertions.\n"
)
PROGRESS_FRAMES = 10
# Last release whose model runner logs "Init torch distributed begin./ends." (0.5.21+ init_torch_distributed
# only measures memory: sglang 0.5.23 sglang/srt/model_executor/model_runner.py).
INIT_DISTRIBUTED_LOGGED_UNTIL = (0, 5, 21)
# First release whose resolve_max_num_reqs warns when the mamba state cache or the KV cache caps a limit
# (sglang 0.5.23 sglang/srt/mem_cache/kv_cache_configurator.py; first in the 0.5.17 wheel).
CAP_WARNINGS_SINCE = (0, 5, 17)
# sglang 0.5.23 sglang/srt/configs/model_config.py: the draft (MTP) architecture of Qwen3.5 targets.
QWEN3_5_ARCHS = ("Qwen3_5ForConditionalGeneration", "Qwen3_5MoeForConditionalGeneration", "Qwen3_5ForCausalLM",
                 "Qwen3_5MoeForCausalLM")


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
        await graphs_for(self).capture()
        self.log_rank0(
            f"max_total_num_tokens={self.plan.max_total_num_tokens}, "
            f"chunked_prefill_size={self.args.chunked_prefill_size}, max_prefill_tokens={self.args.max_prefill_tokens}, "
            f"max_running_requests={self.plan.max_running_requests}, context_len={self.plan.context_len}, "
            f"available_gpu_mem={self.plan.avail_after_graphs_gib:.2f} GB"
        )

    async def init_torch_distributed(self) -> None:
        logged = self.args.release < INIT_DISTRIBUTED_LOGGED_UNTIL
        if logged:
            self.log_ranks("Init torch distributed begin.")
        elapsed = await self._phase(self.profile.startup.init_distributed_s)
        if logged:
            self.log_ranks(f"Init torch distributed ends. elapsed={elapsed:.2f} s, "
                           f"mem usage={self.plan.init_usage_gib:.2f} GB")

    async def load_model(self) -> None:
        await self._load_weights(self.shape.architecture, self.profile.startup.load_weights_s,
                                 self.plan.avail_after_init_gib, self.plan.weights_gib)
        if self.args.speculative_algorithm:
            await self._load_weights(self._draft_architecture(), self.profile.startup.draft_load_weights_s,
                                     self.plan.avail_after_weights_gib, self.plan.draft_weights_gib)

    async def _load_weights(self, architecture: str, seconds: float, avail_before: float, usage: float) -> None:
        self.log_ranks(f"Load weight begin. avail mem={avail_before:.2f} GB")
        elapsed = await self._phase(seconds)
        quant = f"quant={self.shape.quant_method}, " if self.shape.quant_method else ""
        self.log_ranks(
            f"Load weight end. elapsed={elapsed:.2f} s, type={architecture}, {quant}"
            f"avail mem={avail_before - usage:.2f} GB, mem usage={usage:.2f} GB."
        )

    def _draft_architecture(self) -> str:
        architecture = self.shape.architecture
        if architecture.startswith("Deepseek"):
            return architecture + "NextN"
        if self.args.phase_graphs and architecture in QWEN3_5_ARCHS:
            return "Qwen3_5ForCausalLMMTP"
        return architecture + "MTP"

    async def init_memory_pool(self) -> None:
        await self._phase(self.profile.startup.memory_pool_s)
        if self.plan.not_enough_memory:
            raise RuntimeError("Not enough memory. Please try to increase --mem-fraction-static.")
        if self.args.release >= CAP_WARNINGS_SINCE:
            self._log_running_request_caps()
        if self.plan.max_mamba_cache_size is not None:
            self.log_ranks(
                f"Mamba Cache is allocated. max_mamba_cache_size: {self._mamba_cache_size()}, "
                f"conv_state size: {self.plan.conv_state_gib:.2f}GB, ssm_state size: {self.plan.ssm_state_gib:.2f}GB "
            )
        dtype = f"torch.{self.plan.kv_dtype.replace('fp8_e4m3', 'float8_e4m3fn').replace('fp8_e5m2', 'float8_e5m2')}"
        sizes = (f"KV size: {self.plan.kv_cache_gib:.2f} GB" if self.shape.is_mla
                 else f"K size: {self.plan.kv_cache_gib / 2:.2f} GB, V size: {self.plan.kv_cache_gib / 2:.2f} GB")
        # memory_pool.py: "dtype: ..." only from 0.5.14 (0.5.10/0.5.11: "KV Cache is allocated. #tokens: N, ...")
        dtype_part = f"dtype: {dtype}, " if self.args.release >= (0, 5, 14) else ""
        self.log_ranks(f"KV Cache is allocated. {dtype_part}#tokens: {self.plan.max_total_num_tokens}, {sizes}")
        self.log_ranks(f"Memory pool end. avail mem={self.plan.avail_after_pool_gib:.2f} GB")

    def _mamba_cache_size(self) -> int:
        """0.5.17+ report the cache in state slots (their cap warning names the slots per request); the
        emulator's 0.5.11 reports requests, as it always has."""
        if self.args.release >= CAP_WARNINGS_SINCE:
            return self.plan.mamba_state_slots
        return self.plan.max_mamba_cache_size

    def _log_running_request_caps(self) -> None:
        """resolve_max_num_reqs: why max_running_requests is lower than asked (each rank resolves it)."""
        plan = self.plan
        if plan.capped_by_mamba:
            self.log_ranks(
                f"max_running_requests is capped to {plan.max_running_requests} by the mamba state cache "
                f"(max_mamba_cache_size={plan.mamba_state_slots}, {plan.mamba_ratio} state slots per request). "
                "To raise it: increase --mamba-full-memory-ratio or --max-mamba-cache-size, or halve the state size "
                "with --mamba-ssm-dtype bfloat16.", level=logging.WARNING)
        elif plan.requested_running_requests is not None and plan.max_running_requests < plan.requested_running_requests:
            self.log_ranks(
                f"max_running_requests was reduced from the requested {plan.requested_running_requests} to "
                f"{plan.max_running_requests} (per dp worker) due to the available KV cache capacity.",
                level=logging.WARNING)

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
        moe_config = config_module()  # the installed release's, where it has it
        for prefix in self.ranks:
            with as_rank(prefix):
                moe_config.get_moe_configs.cache_clear()  # each real rank is its own process with its own lru_cache
                # try_get_optimal_moe_config's calls: keywords, up first (one lru_cache entry per kernel)
                moe_config.get_moe_configs(*lookup, per_channel_quant=False, down_moe=False)
                moe_config.get_moe_configs(*lookup, per_channel_quant=False, down_moe=True)
        if not self.args.enable_deterministic_inference:
            # releases <= 0.5.12 assert here
            moe_config.check_block_size_m(*lookup, graphs_for(self).capture_batch_sizes())
            self.moe_up = moe_config.locate_moe_config(*lookup, down_moe=False).status
            self.moe_down = moe_config.locate_moe_config(*lookup, down_moe=True).status

    async def _phase(self, emulated_seconds: float) -> float:
        started = time.monotonic()
        await asyncio.sleep(self.profile.startup_scaled(emulated_seconds))
        return time.monotonic() - started

    async def progress_bars(self, descriptions: list[str], emulated_seconds: float) -> None:
        """A tqdm bar on rank 0's stderr that advances through `descriptions` over the phase time."""
        total = len(descriptions)
        frames = sorted({round(total * k / PROGRESS_FRAMES) for k in range(1, PROGRESS_FRAMES + 1)})
        started, shown = time.monotonic(), 0
        write_progress(progress_line(descriptions[0], 0, total, 0.0), final=False)
        for done in frames:
            await asyncio.sleep(self.profile.startup_scaled(emulated_seconds) * (done - shown) / total)
            shown = done
            write_progress(progress_line(descriptions[done - 1], done, total, time.monotonic() - started),
                           final=done == total)

    def log_ranks(self, message: str, level: int = logging.INFO) -> None:
        for prefix in self.ranks:
            with as_rank(prefix):
                logger.log(level, message)

    def log_rank0(self, message: str) -> None:
        with as_rank(self.scheduler_prefix):
            logging.getLogger("sglang.srt.managers.scheduler").info(message)


def create_engine(args: ServerArgs, profile: Profile) -> Engine:
    shape = load_model_shape(args.model_path)
    ranks = [rank_prefix(tp, args.tp_size, args.ep_size, args.pp_size) for tp in range(args.tp_size)]
    return Engine(args, profile, shape, plan_memory(args, shape, profile), ranks)
