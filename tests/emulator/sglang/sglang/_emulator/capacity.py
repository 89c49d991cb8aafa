# Copyright (c) llmops.sglang contributors
# Apache License 2.0 (see LICENSE)
"""GPU memory plan of one rank: weights, KV/mamba pools, graphs, and the resulting capacity.

Mirrors SGLang's profiling: the static pool is what is left after weights once
`total * (1 - mem_fraction_static)` is kept free (rest = avail - total * (1 - msf)); a pool <= 0 is
"Not enough memory". Hybrid linear-attention models split the pool between mamba states and
KV cache by --mamba-full-memory-ratio; max_running_requests is the configured (or estimated)
value capped by token_capacity // 2 and, for hybrid models, by the mamba cache size.

The mamba cache is sized in requests (calibrated to the real case, README "Fidelity notes"); releases count it
in state slots, ``mamba_ratio`` per request (sglang 0.5.23 sglang/srt/mem_cache/kv_cache_configurator.py
``_calculate_mamba_ratio``), which 0.5.17+ name in their cap warning.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

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
    requested_running_requests: int | None = None  # per worker, when --max-running-requests (or its reset) set it
    capped_by_mamba: bool = False
    mamba_ratio: int = 1  # state slots per request

    @property
    def mamba_state_slots(self) -> int | None:
        """max_mamba_cache_size as 0.5.17+ report it: the cache's requests times the slots each holds."""
        return None if self.max_mamba_cache_size is None else self.max_mamba_cache_size * self.mamba_ratio

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
    workspace = profile.flag_effects.allreduce_fusion_workspace_gib if args.allreduce_fusion else 0.0
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
        cuda_graph_gib=0.0 if args.graph_backend("decode") == "disabled" else capacity.cuda_graph_gib,
        piecewise_cuda_graph_gib=0.0 if args.graph_backend("prefill") == "disabled" else capacity.piecewise_cuda_graph_gib,
        activation_reserve_gib=capacity.activation_reserve_gib,
        context_len=context_len,
        mamba_ratio=_mamba_ratio(args, shape),
        **_resolve_max_num_reqs(args, tokens, context_len, mamba_entries),
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


def _resolve_max_num_reqs(args: ServerArgs, token_capacity: int, context_len: int,
                          mamba_entries: int | None) -> dict[str, Any]:
    """max_running_requests and how it was capped (model_runner_kv_cache_mixin.py 0.5.11, sglang 0.5.23
    sglang/srt/mem_cache/kv_cache_configurator.py ``resolve_max_num_reqs``: 0.5.14+ split a requested value over
    the attention-DP workers, 0.5.23 keeps at least 1)."""
    estimated = min(max(int(token_capacity / context_len * 512), 2048), 4096)
    configured = args.max_running_requests
    requested = None
    if configured is not None:
        requested = configured // _attention_dp(args) if args.phase_graphs else configured // args.dp_size
        requested = max(1, requested) if args.release >= (0, 5, 23) else requested
    value = min(requested if requested is not None else estimated, token_capacity // 2)
    capped_by_mamba = mamba_entries is not None and mamba_entries < value
    if mamba_entries is not None:
        value = min(value, mamba_entries)
    return {"max_running_requests": max(value, 0), "requested_running_requests": requested,
            "capped_by_mamba": capped_by_mamba}


def _attention_dp(args: ServerArgs) -> int:
    return args.dp_size if args.enable_dp_attention else 1


# sglang 0.5.23 sglang/srt/arg_groups/overrides.py _MAMBA_EXTRA_BUFFER_ARCHS (the hybrid archs the emulator's
# models may name): with the overlap scheduler they keep a ping-pong buffer of 2 extra slots per request.
MAMBA_EXTRA_BUFFER_ARCHS = frozenset({
    "Qwen3_5ForConditionalGeneration", "Qwen3_5MoeForConditionalGeneration", "Qwen3_5MoeForCausalLM",
    "Qwen3_5ForCausalLM", "Qwen3NextForCausalLM", "KimiLinearForCausalLM", "NemotronHForCausalLM",
    "FalconH1ForCausalLM", "GraniteMoeHybridForCausalLM",
})


def _mamba_ratio(args: ServerArgs, shape: ModelShape) -> int:
    """State slots per request: 1 without radix cache, else 3, plus the extra buffer's 2 with the overlap
    scheduler on archs that support it (``_calculate_mamba_ratio``, ``_mamba_radix_cache_resolution``)."""
    if args.disable_radix_cache:
        return 1
    extra_buffer = shape.architecture in MAMBA_EXTRA_BUFFER_ARCHS and not args.disable_overlap_schedule
    return 3 + (2 if extra_buffer else 0)
