# Copyright (c) llmops.sglang contributors
# Apache License 2.0 (see LICENSE)
"""GPU memory plan of one rank: weights, KV/mamba pools, graphs, and the resulting capacity.

Mirrors SGLang's profiling: the static pool is what is left after weights once
`total * (1 - mem_fraction_static)` is kept free (rest = avail - total * (1 - msf)); a pool <= 0 is
"Not enough memory". Hybrid linear-attention models split the pool between mamba states and
KV cache by --mamba-full-memory-ratio; max_running_requests is the configured (or estimated)
value capped by token_capacity // 2 and, for hybrid models, by the mamba cache size.
"""
from __future__ import annotations

from dataclasses import dataclass

from sglang._emulator.model_shape import DTYPE_BYTES, ModelShape
from sglang._emulator.profile import Profile
from sglang.srt.server_args import ServerArgs

GIB = 1 << 30


@dataclass(frozen=True)
class MemoryPlan:
    total_gib: float
    init_usage_gib: float
    weights_gib: float
    draft_weights_gib: float
    workspace_gib: float
    pool_gib: float
    kv_dtype: str
    kv_bytes_per_token: int
    max_total_num_tokens: int
    max_mamba_cache_size: int | None
    conv_state_gib: float
    ssm_state_gib: float
    cuda_graph_gib: float
    piecewise_cuda_graph_gib: float
    activation_reserve_gib: float
    max_running_requests: int
    context_len: int

    @property
    def avail_after_init_gib(self) -> float:
        return self.total_gib - self.init_usage_gib

    @property
    def avail_after_weights_gib(self) -> float:
        return self.avail_after_init_gib - self.weights_gib

    @property
    def avail_after_draft_gib(self) -> float:
        return self.avail_after_weights_gib - self.draft_weights_gib

    @property
    def avail_after_pool_gib(self) -> float:
        return self.avail_after_draft_gib - self.workspace_gib - self.pool_gib

    @property
    def avail_after_graphs_gib(self) -> float:
        return self.avail_after_pool_gib - self.cuda_graph_gib - self.piecewise_cuda_graph_gib

    @property
    def kv_cache_gib(self) -> float:
        return self.max_total_num_tokens * self.kv_bytes_per_token / GIB

    @property
    def not_enough_memory(self) -> bool:
        return self.max_total_num_tokens <= 0

    @property
    def graph_capture_oom(self) -> bool:
        """Too little memory left outside the static pool for graphs plus activations."""
        return self.avail_after_graphs_gib < self.activation_reserve_gib

    @property
    def max_req_input_len(self) -> int:
        return min(self.context_len - 1, self.max_total_num_tokens - 1)


def plan_memory(args: ServerArgs, shape: ModelShape, profile: Profile) -> MemoryPlan:
    capacity, gpu = profile.capacity, profile.gpu
    ranks = args.tp_size * args.pp_size
    total = gpu.memory_gib
    weights = capacity.weights_gib / ranks
    draft = capacity.draft_weights_gib / ranks if args.speculative_algorithm else 0.0
    workspace = profile.flag_effects.allreduce_fusion_workspace_gib if args.enable_flashinfer_allreduce_fusion else 0.0
    avail = total - capacity.init_distributed_gib - weights - draft - workspace
    pool = avail - total * (1 - args.mem_fraction_static)
    kv_dtype = _kv_dtype(args.kv_cache_dtype, shape.torch_dtype)
    kv_bytes = shape.kv_bytes_per_token(args.tp_size, DTYPE_BYTES[kv_dtype])
    mamba_gib, mamba_entries, conv_gib, ssm_gib = _mamba_pool(args, shape, pool)
    tokens = int((pool - mamba_gib) * GIB // kv_bytes) if pool > 0 else 0
    if args.max_total_tokens is not None:
        tokens = min(tokens, args.max_total_tokens)
    tokens -= tokens % args.page_size
    context_len = args.context_length or shape.context_len
    return MemoryPlan(
        total_gib=total,
        init_usage_gib=capacity.init_distributed_gib,
        weights_gib=weights,
        draft_weights_gib=draft,
        workspace_gib=workspace,
        pool_gib=max(pool, 0.0),
        kv_dtype=kv_dtype,
        kv_bytes_per_token=kv_bytes,
        max_total_num_tokens=tokens,
        max_mamba_cache_size=mamba_entries,
        conv_state_gib=conv_gib,
        ssm_state_gib=ssm_gib,
        cuda_graph_gib=0.0 if args.disable_cuda_graph else capacity.cuda_graph_gib,
        piecewise_cuda_graph_gib=0.0 if args.disable_piecewise_cuda_graph else capacity.piecewise_cuda_graph_gib,
        activation_reserve_gib=capacity.activation_reserve_gib,
        max_running_requests=_resolve_max_num_reqs(args, tokens, context_len, mamba_entries),
        context_len=context_len,
    )


def _kv_dtype(kv_cache_dtype: str, model_dtype: str) -> str:
    if kv_cache_dtype in ("auto", "bf16"):
        return "bfloat16" if kv_cache_dtype == "bf16" else model_dtype
    return kv_cache_dtype


def _mamba_pool(args: ServerArgs, shape: ModelShape, pool_gib: float) -> tuple[float, int | None, float, float]:
    """(pool GiB, entries, conv GiB, ssm GiB) of the mamba state cache; zeros/None for non-hybrid models."""
    if not shape.is_hybrid_linear or pool_gib <= 0:
        return 0.0, None, 0.0, 0.0
    ssm_bytes, conv_bytes = shape.linear_state_bytes(args.tp_size)
    # Speculative verification keeps an intermediate state per draft token next to each request's state.
    states_per_entry = 1 + (args.speculative_num_draft_tokens or 0)
    entry_bytes = (ssm_bytes + conv_bytes) * states_per_entry
    mamba_gib = pool_gib * args.mamba_full_memory_ratio / (1 + args.mamba_full_memory_ratio)
    entries = int(mamba_gib * GIB // entry_bytes)
    return mamba_gib, entries, entries * conv_bytes * states_per_entry / GIB, entries * ssm_bytes * states_per_entry / GIB


def _resolve_max_num_reqs(args: ServerArgs, token_capacity: int, context_len: int, mamba_entries: int | None) -> int:
    estimated = min(max(int(token_capacity / context_len * 512), 2048), 4096)
    configured = args.max_running_requests
    value = configured // args.dp_size if configured is not None else estimated
    value = min(value, token_capacity // 2)
    if mamba_entries is not None:
        value = min(value, mamba_entries)
    return max(value, 0)
