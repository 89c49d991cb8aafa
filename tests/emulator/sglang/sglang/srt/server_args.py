# Copyright (c) llmops.sglang contributors
# Apache License 2.0 (see LICENSE)
"""ServerArgs of the SGLang emulator: real field names/defaults, argparse CLI and post-init adjustments.

One field model serves every release the emulator plays (the profile's ``sglang_version``): the dataclass
holds the fields of each (0.5.11's ``cuda_graph_max_bs`` / ``disable_piecewise_cuda_graph`` and 0.5.14+'s
``cuda_graph_config`` / ``cuda_graph_max_bs_decode`` / ``flashinfer_allreduce_fusion_backend`` ...); a start
sets and dumps only the emulated release's own (its field list ships in its CLI table, see ``cli_table``)
and resolves them with that release's rules. The CLI is the release's option table: its options store into
the fields they name, the rest are accepted and ignored; `--config file.yaml` supplies flags whose keys carry
no `--` (command-line flags override it). __post_init__ applies the adjustments the emulator models
(upstream python/sglang/srt/server_args.py __post_init__): auto defaults from the emulated GPU, the
speculative-decoding reset of max_running_requests
to 48, FlashInfer all-reduce fusion rules and the prefill-graph auto-disable rules (0.5.11: piecewise CUDA
graph; 0.5.14+: the prefill phase of cuda_graph_config, sglang/_emulator/cuda_graphs.py). One adjustment is an
emulator scenario rather than a confirmed upstream rule: on GPUs outside the fusion kernels' SM list, enabling
the fusion disables the prefill CUDA graph (the real-case observation the collection must detect).
"""
from __future__ import annotations

import argparse
import copy
import dataclasses
import functools
import json
import logging
import random
import types
import typing
from dataclasses import dataclass
from pathlib import Path

from sglang._emulator.cuda_graphs import PhaseGraphResolver, memory_tier
from sglang._emulator.model_shape import ALLREDUCE_FUSION_ARCHS, load_model_shape
from sglang._emulator.profile import emulated_release, emulated_version, load_profile

logger = logging.getLogger(__name__)

SPEC_DEFAULT_STEPS, SPEC_DEFAULT_TOPK, SPEC_DEFAULT_DRAFT_TOKENS = 3, 1, 4
SPEC_MAX_RUNNING_REQUESTS = 48
# First releases of what the emulator models per release (each checked in the wheels, .cache/conformance).
PHASE_GRAPHS_SINCE = (0, 5, 14)  # cuda_graph_config per phase and the fusion backend field (sglang_names RENAMES)
DICT_DUMP_SINCE = (0, 5, 19)  # entrypoints/engine.py logs server_args={...} (resolved_dict) instead of the repr
# sglang 0.5.23 sglang/srt/arg_groups/speculative_hook.py _handle_eagle_family: archs whose NEXTN draft layer
# ships in the target checkpoint (speculative_draft_model_path defaults to model_path); and the auto-chosen
# (steps, topk, draft tokens) of _auto_choose_speculative_params that differ from (3, 1, 4).
MTP_IN_CHECKPOINT_ARCHS = frozenset({
    "DeepseekV32ForCausalLM", "DeepseekV3ForCausalLM", "DeepseekV4ForCausalLM", "Glm4MoeForCausalLM",
    "Glm4MoeLiteForCausalLM", "GlmMoeDsaForCausalLM", "BailingMoeForCausalLM", "BailingMoeV2ForCausalLM",
    "BailingMoeV2_5ForCausalLM", "MistralLarge3ForCausalLM", "PixtralForConditionalGeneration", "HYV3ForCausalLM",
    "HYV4ForCausalLM", "Qwen4ExpForConditionalGeneration",
})
SPEC_AUTO_PARAMS = {"LlamaForCausalLM": (5, 4, 8), "Grok1ForCausalLM": (5, 4, 8), "Grok1VForCausalLM": (5, 4, 8)}
# sglang 0.5.23 sglang/srt/arg_groups/overrides.py _FLASHINFER_ALLREDUCE_FUSION_ARCHS (auto-enable on SM90/SM100).
FLASHINFER_ALLREDUCE_FUSION_ARCHS = frozenset({
    "DeepseekV3ForCausalLM", "DeepseekV32ForCausalLM", "DeepseekV4ForCausalLM", "GptOssForCausalLM",
    "GlmMoeDsaForCausalLM", "Glm4MoeForCausalLM", "Glm4MoeLiteForCausalLM", "MistralLarge3ForCausalLM",
    "Qwen3MoeForCausalLM", "Qwen3VLMoeForConditionalGeneration", "Qwen3NextForCausalLM",
    "Qwen4ExpForConditionalGeneration", "KimiK25ForConditionalGeneration", "Qwen3_5MoeForConditionalGeneration",
    "InternS2PreviewForConditionalGeneration", "Qwen3_5ForConditionalGeneration", "NemotronHForCausalLM",
    "NemotronHPuzzleForCausalLM", "NemotronH_Omni_Reasoning_V3",
})
# (first release, field, declared default) where the dataclass's default is not the release's: file_storage_path
# None from 0.5.22 (sglang 0.5.23 sglang/srt/arg_groups/fields/serving.py); lora_backend is "csgmv" in every
# wheel (fields/lora.py), the emulator keeps its historical "triton" for 0.5.11 only (the demo's dump unchanged).
RELEASE_DEFAULTS = (((0, 5, 22), "file_storage_path", None), (PHASE_GRAPHS_SINCE, "lora_backend", "csgmv"))


@dataclass(repr=False)
class ServerArgs:
    # Model and tokenizer
    model_path: str
    tokenizer_path: str | None = None
    tokenizer_mode: str = "auto"
    tokenizer_worker_num: int = 1
    skip_tokenizer_init: bool = False
    load_format: str = "auto"
    model_loader_extra_config: str = "{}"
    trust_remote_code: bool = False
    context_length: int | None = None
    is_embedding: bool = False
    enable_multimodal: bool | None = None
    revision: str | None = None
    model_impl: str = "auto"

    # HTTP server
    host: str = "127.0.0.1"
    port: int = 30000
    skip_server_warmup: bool = False
    warmups: str | None = None
    nccl_port: int | None = None

    # Quantization and data type
    dtype: str = "auto"
    quantization: str | None = None
    quantization_param_path: str | None = None
    kv_cache_dtype: str = "auto"
    enable_fp32_lm_head: bool = False

    # Memory and scheduling
    mem_fraction_static: float | None = None
    max_running_requests: int | None = None
    max_queued_requests: int | None = None
    max_total_tokens: int | None = None
    chunked_prefill_size: int | None = None
    max_prefill_tokens: int = 16384
    schedule_policy: str = "fcfs"
    enable_priority_scheduling: bool = False
    schedule_conservativeness: float = 1.0
    page_size: int | None = None
    mamba_full_memory_ratio: float = 0.9
    radix_eviction_policy: str = "lru"

    # Runtime options
    device: str | None = None
    tp_size: int = 1
    pp_size: int = 1
    pp_max_micro_batch_size: int | None = None
    stream_interval: int = 1
    random_seed: int | None = None
    constrained_json_whitespace_pattern: str | None = None
    watchdog_timeout: float = 300
    dist_timeout: int | None = None
    download_dir: str | None = None
    base_gpu_id: int = 0
    gpu_id_step: int = 1
    sleep_on_idle: bool = False

    # Logging
    log_level: str = "info"
    log_level_http: str | None = None
    log_requests: bool = False
    log_requests_level: int = 2
    crash_dump_folder: str | None = None
    show_time_cost: bool = False
    enable_metrics: bool = False
    enable_metrics_for_all_schedulers: bool = False
    bucket_time_to_first_token: list[float] | None = None
    bucket_inter_token_latency: list[float] | None = None
    bucket_e2e_request_latency: list[float] | None = None
    decode_log_interval: int = 40
    enable_request_time_stats_logging: bool = False
    kv_events_config: str | None = None
    enable_trace: bool = False
    otlp_traces_endpoint: str = "localhost:4317"

    # API related
    api_key: str | None = None
    admin_api_key: str | None = None
    served_model_name: str | None = None
    weight_version: str = "default"
    chat_template: str | None = None
    completion_template: str | None = None
    file_storage_path: str = "sglang_storage"
    enable_cache_report: bool = False
    reasoning_parser: str | None = None
    tool_call_parser: str | None = None
    sampling_defaults: str = "model"
    incremental_streaming_output: bool = False

    # Data parallelism
    dp_size: int = 1
    load_balance_method: str = "round_robin"

    # Multi-node distributed serving
    dist_init_addr: str | None = None
    nnodes: int = 1
    node_rank: int = 0

    # Model override args
    json_model_override_args: str = "{}"
    preferred_sampling_params: str | None = None

    # LoRA
    enable_lora: bool | None = None
    max_lora_rank: int | None = None
    lora_paths: list[str] | None = None
    max_loras_per_batch: int = 8
    lora_backend: str = "triton"

    # Kernel backends
    attention_backend: str | None = None
    decode_attention_backend: str | None = None
    prefill_attention_backend: str | None = None
    sampling_backend: str | None = None
    grammar_backend: str | None = None
    mm_attention_backend: str | None = None

    # Speculative decoding
    speculative_algorithm: str | None = None
    speculative_draft_model_path: str | None = None
    speculative_draft_model_revision: str | None = None
    speculative_num_steps: int | None = None
    speculative_eagle_topk: int | None = None
    speculative_num_draft_tokens: int | None = None
    speculative_accept_threshold_single: float = 1.0
    speculative_accept_threshold_acc: float = 1.0
    speculative_token_map: str | None = None
    speculative_attention_mode: str = "prefill"

    # Expert parallelism
    ep_size: int = 1
    moe_a2a_backend: str = "none"
    moe_runner_backend: str = "auto"
    enable_flashinfer_allreduce_fusion: bool = False
    enforce_disable_flashinfer_allreduce_fusion: bool = False
    flashinfer_allreduce_fusion_backend: str | None = None  # 0.5.14+: the fusion is on when a backend is set
    enable_fused_moe_sum_all_reduce: bool = False
    deepep_mode: str = "auto"
    ep_num_redundant_experts: int = 0
    init_expert_location: str = "trivial"
    enable_eplb: bool = False
    eplb_algorithm: str = "auto"
    expert_distribution_recorder_mode: str | None = None
    moe_dense_tp_size: int | None = None

    # Hierarchical cache
    enable_hierarchical_cache: bool = False
    hicache_ratio: float = 2.0
    hicache_size: int = 0
    hicache_write_policy: str = "write_through"

    # Offloading
    cpu_offload_gb: int = 0

    # Optimization/debug options
    disable_radix_cache: bool = False
    cuda_graph_max_bs: int | None = None
    cuda_graph_bs: list[int] | None = None
    disable_cuda_graph: bool = False
    disable_cuda_graph_padding: bool = False
    # 0.5.14+ (sglang 0.5.23 sglang/srt/arg_groups/fields/exec_.py ExecGraph): the resolved per-phase config
    # and the per-phase flags it is resolved from (which keep what was requested).
    cuda_graph_config: dict | str | None = None
    cuda_graph_backend_decode: str | None = None
    cuda_graph_backend_prefill: str | None = None
    cuda_graph_max_bs_decode: int | None = None
    cuda_graph_max_bs_prefill: int | None = None
    cuda_graph_bs_decode: list[int] | None = None
    cuda_graph_bs_prefill: list[int] | None = None
    disable_prefill_cuda_graph: bool = False
    disable_decode_cuda_graph: bool = False
    enable_profile_cuda_graph: bool = False
    enable_nccl_nvls: bool = False
    enable_symm_mem: bool = False
    disable_custom_all_reduce: bool = False
    enable_mscclpp: bool = False
    disable_overlap_schedule: bool = False
    enable_mixed_chunk: bool = False
    enable_dp_attention: bool = False
    enable_dp_lm_head: bool = False
    enable_two_batch_overlap: bool = False
    enable_torch_compile: bool = False
    torch_compile_max_bs: int = 32
    disable_piecewise_cuda_graph: bool = False
    enforce_piecewise_cuda_graph: bool = False
    piecewise_cuda_graph_max_tokens: int | None = None
    piecewise_cuda_graph_tokens: list[int] | None = None
    piecewise_cuda_graph_compiler: str = "eager"
    torchao_config: str = ""
    enable_nan_detection: bool = False
    enable_p2p_check: bool = False
    triton_attention_reduce_in_fp32: bool = False
    triton_attention_num_kv_splits: int = 8
    num_continuous_decode_steps: int = 1
    delete_ckpt_after_loading: bool = False
    enable_memory_saver: bool = False
    allow_auto_truncate: bool = False
    enable_custom_logit_processor: bool = False
    disable_shared_experts_fusion: bool = False
    disable_chunked_prefix_cache: bool = False
    enable_return_hidden_states: bool = False
    scheduler_recv_interval: int = 1
    enable_deterministic_inference: bool = False

    # PD disaggregation
    disaggregation_mode: str = "null"
    disaggregation_transfer_backend: str = "mooncake"
    disaggregation_bootstrap_port: int = 8998

    def __post_init__(self) -> None:
        shape = load_model_shape(self.model_path)
        profile = load_profile()
        gpu = profile.gpu
        self._release = emulated_release(profile)
        self._piecewise_disable_reason: str | None = None
        self.tokenizer_path = self.tokenizer_path or self.model_path
        self.served_model_name = self.served_model_name or self.model_path
        self.device = self.device or "cuda"
        self.random_seed = random.randint(0, 1 << 30) if self.random_seed is None else self.random_seed
        self._validate_parallelism(gpu.count)
        if self.phase_graphs:
            self._resolve_phase_graph_release(shape, profile)
        else:
            self._resolve_piecewise_release(shape, profile)
        self.sampling_backend = self.sampling_backend or "flashinfer"
        self.grammar_backend = self.grammar_backend or "xgrammar"
        self.page_size = self.page_size or 1

    def _resolve_piecewise_release(self, shape, profile) -> None:
        """Releases up to 0.5.13: ServerArgs.__post_init__ of 0.5.11 (sglang/srt/server_args.py)."""
        gpu = profile.gpu
        self._handle_gpu_memory_settings(gpu.memory_mib, profile.capacity.mem_fraction_static_default)
        self._handle_model_specific_adjustments(shape.architecture, gpu.sm_version, gpu.name)
        self._handle_context_length(shape.context_len)
        self._handle_speculative_decoding()
        self._handle_piecewise_cuda_graph(gpu.sm_version not in profile.flag_effects.allreduce_fusion_supported_sm,
                                          gpu.sm_version)
        self.attention_backend = self.attention_backend or ("fa3" if gpu.sm_version == 90 else "flashinfer")
        self.piecewise_cuda_graph_max_tokens = self.piecewise_cuda_graph_max_tokens or self.chunked_prefill_size

    def _resolve_phase_graph_release(self, shape, profile) -> None:
        """0.5.14+: the resolution pipeline of sglang 0.5.23 (sglang/srt/arg_groups/pipeline.py), the steps the
        emulator models in its order: deprecated args, CUDA-graph config, GPU memory settings, model-specific
        adjustments (fusion), attention backend, speculative decoding."""
        gpu = profile.gpu
        self._handle_deprecated_fusion_flag()
        self._handle_allreduce_fusion(shape.architecture, gpu.sm_version)
        self._handle_chunked_prefill(gpu.memory_mib, profile.capacity.mem_fraction_static_default)
        # The emulated scenario rides on the breakable-graph compatibility rules; it needs the final fusion state,
        # so the emulator resolves the fusion first (its log line then precedes the graph warnings).
        fusion_unsupported = gpu.sm_version not in profile.flag_effects.allreduce_fusion_supported_sm
        emulated = [(self.allreduce_fusion and fusion_unsupported, f"FlashInfer allreduce fusion on sm{gpu.sm_version}")]
        self.cuda_graph_config = PhaseGraphResolver(self).resolve(gpu.memory_mib, shape.is_mla, emulated)
        self._handle_context_length(shape.context_len)
        self._handle_attention_backend(gpu.sm_version)
        self._handle_speculative_decoding_phase_graphs(shape.architecture)

    def _validate_parallelism(self, gpu_count: int) -> None:
        if self.tp_size % self.ep_size:
            raise ValueError(f"tp_size ({self.tp_size}) must be divisible by ep_size ({self.ep_size})")
        needed = self.tp_size * self.pp_size * (1 if self.enable_dp_attention else self.dp_size)
        if needed > gpu_count * self.nnodes:
            raise RuntimeError(
                f"CUDA error: invalid device ordinal (tp_size * pp_size * dp_size = {needed} GPUs requested, "
                f"{gpu_count} visible)"
            )

    def _handle_gpu_memory_settings(self, gpu_memory_mib: int, default_mem_fraction: float) -> None:
        if self.mem_fraction_static is None:
            self.mem_fraction_static = default_mem_fraction
        if self.chunked_prefill_size is None:
            self.chunked_prefill_size = _by_gpu_memory(gpu_memory_mib, (2048, 4096, 8192, 8192, 16384))
        if self.cuda_graph_max_bs is None:
            small_tp, large_tp = (8, 16, 80, 256, 512), (24, 48, 160, 512, 512)
            self.cuda_graph_max_bs = _by_gpu_memory(gpu_memory_mib, small_tp if self.tp_size < 4 else large_tp)

    def _handle_model_specific_adjustments(self, architecture: str, sm_version: int, gpu_name: str) -> None:
        # SGLang's gate: SM90/SM100, but not the H20 (flashinfer#2204).
        fusion_gpu = sm_version in (90, 100) and "H20" not in gpu_name.replace("H200", "")
        if (
            not self.enable_flashinfer_allreduce_fusion
            and architecture in ALLREDUCE_FUSION_ARCHS
            and fusion_gpu
            and not self.enable_dp_attention
            and self.nnodes == 1
            and self.moe_a2a_backend == "none"
            and self.tp_size > 1
        ):
            self.enable_flashinfer_allreduce_fusion = True
        if self.enforce_disable_flashinfer_allreduce_fusion:
            self.enable_flashinfer_allreduce_fusion = False

    def _handle_context_length(self, model_context_len: int) -> None:
        if self.context_length is not None and self.context_length > model_context_len:
            raise ValueError(
                f"User-specified context_length ({self.context_length}) is greater than the derived context_length "
                f"({model_context_len}). This may lead to incorrect model outputs or CUDA errors. To allow overriding "
                "this maximum, set the env var SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN=1"
            )

    def _handle_speculative_decoding(self) -> None:
        if self.speculative_algorithm is None:
            return
        if self.speculative_algorithm == "NEXTN":
            self.speculative_algorithm = "EAGLE"
            self.speculative_draft_model_path = self.speculative_draft_model_path or self.model_path
        if self.speculative_algorithm in ("EAGLE", "EAGLE3", "STANDALONE"):
            if self.max_running_requests is None:
                self.max_running_requests = SPEC_MAX_RUNNING_REQUESTS
                logger.warning(
                    "Max running requests is reset to 48 for speculative decoding. You can override this by "
                    "explicitly setting --max-running-requests."
                )
            # 0.5.11 runs eagle without mixed chunks (0.5.23 keeps them: SpeculativeAlgorithm.supports_mixed_chunk).
            if self.enable_mixed_chunk:
                self.enable_mixed_chunk = False
                logger.warning("Mixed chunked prefill is disabled because of using eagle speculative decoding.")
            if self.speculative_num_steps is None:
                self.speculative_num_steps = SPEC_DEFAULT_STEPS
                self.speculative_eagle_topk = self.speculative_eagle_topk or SPEC_DEFAULT_TOPK
                self.speculative_num_draft_tokens = self.speculative_num_draft_tokens or SPEC_DEFAULT_DRAFT_TOKENS
            self.speculative_eagle_topk = self.speculative_eagle_topk or 1
            self.speculative_num_draft_tokens = self.speculative_num_draft_tokens or self.speculative_num_steps + 1

    def _handle_deprecated_fusion_flag(self) -> None:
        """serving_hook.py handle_deprecated_args: the switch becomes the auto backend and reads False after."""
        if self.enable_flashinfer_allreduce_fusion and self.flashinfer_allreduce_fusion_backend is None:
            logger.warning("--enable-flashinfer-allreduce-fusion is deprecated. "
                           "Please use --flashinfer-allreduce-fusion-backend=auto instead.")
            self.flashinfer_allreduce_fusion_backend = "auto"
        self.enable_flashinfer_allreduce_fusion = False

    def _handle_allreduce_fusion(self, architecture: str, sm_version: int) -> None:
        """overrides.py _flashinfer_allreduce_fusion_auto_enable and _enforce_disable_allreduce_fusion."""
        if (
            self.flashinfer_allreduce_fusion_backend is None
            and architecture in FLASHINFER_ALLREDUCE_FUSION_ARCHS
            and sm_version in (90, 100)
            and self.tp_size > 1
            and not self.enable_dp_attention
            and (self.nnodes == 1 or sm_version == 100)
            and self.moe_a2a_backend == "none"
        ):
            logger.info("Auto-enabling FlashInfer AllReduce Fusion (%s) for %s", "auto", architecture)
            self.flashinfer_allreduce_fusion_backend = "auto"
        if self.enforce_disable_flashinfer_allreduce_fusion:
            logger.info("FlashInfer allreduce fusion is forcibly disabled "
                        "via --enforce-disable-flashinfer-allreduce-fusion.")
            self.flashinfer_allreduce_fusion_backend = None

    def _handle_chunked_prefill(self, gpu_memory_mib: int, default_mem_fraction: float) -> None:
        """memory_hook.py handle_gpu_memory_settings: chunked_prefill_size by the memory tier (the decode graph's
        max_bs of the same tier is cuda_graph_config's); mem_fraction_static is the profile's."""
        if self.mem_fraction_static is None:
            self.mem_fraction_static = default_mem_fraction
        if self.chunked_prefill_size is None:
            self.chunked_prefill_size = memory_tier(gpu_memory_mib)[0]

    def _handle_attention_backend(self, sm_version: int) -> None:
        """overrides.py _attention_backend_default with model_override_base.py get_default_attn_backend (MHA):
        fa3 on Hopper, trtllm_mha on SM100, else flashinfer."""
        if self.attention_backend is None:
            self.attention_backend = {90: "fa3", 100: "trtllm_mha"}.get(sm_version, "flashinfer")
            logger.info(f"Attention backend not specified. Use {self.attention_backend} backend by default.")

    def _handle_speculative_decoding_phase_graphs(self, architecture: str) -> None:
        """speculative_hook.py: NEXTN is EAGLE (_resolve_speculative_algorithm_alias), then _handle_eagle_family."""
        if self.speculative_algorithm == "NEXTN":
            self.speculative_algorithm = "EAGLE"
        if self.speculative_algorithm not in ("EAGLE", "EAGLE3", "STANDALONE"):
            return
        if self.max_running_requests is None:
            self.max_running_requests = SPEC_MAX_RUNNING_REQUESTS
            logger.warning("Max running requests is reset to 48 for speculative decoding. You can override this by "
                           "explicitly setting --max-running-requests.")
        if architecture in MTP_IN_CHECKPOINT_ARCHS and self.speculative_draft_model_path is None:
            self.speculative_draft_model_path = self.model_path
            self.speculative_draft_model_revision = self.revision
        if self.speculative_num_steps is None:
            auto = (3, 1, 4) if self.speculative_algorithm == "STANDALONE" else SPEC_AUTO_PARAMS.get(architecture)
            self.speculative_num_steps, self.speculative_eagle_topk, self.speculative_num_draft_tokens = (
                auto or (SPEC_DEFAULT_STEPS, SPEC_DEFAULT_TOPK, SPEC_DEFAULT_DRAFT_TOKENS))
        self.speculative_eagle_topk = self.speculative_eagle_topk or 1
        if self.speculative_eagle_topk == 1 and self.speculative_num_draft_tokens != self.speculative_num_steps + 1:
            logger.warning("speculative_num_draft_tokens is adjusted to speculative_num_steps + 1 when "
                           "speculative_eagle_topk == 1")
            self.speculative_num_draft_tokens = self.speculative_num_steps + 1

    def _handle_piecewise_cuda_graph(self, fusion_unsupported: bool, sm_version: int) -> None:
        if self.enforce_piecewise_cuda_graph:
            self.disable_piecewise_cuda_graph = False
            return
        if self.disable_piecewise_cuda_graph:
            self._piecewise_disable_reason = "--disable-piecewise-cuda-graph is set"
            return
        rules = (
            (self.enable_dp_attention, "DP attention is enabled"),
            (self.pp_size > 1, "pipeline parallelism is enabled"),
            (self.moe_a2a_backend != "none", "MoE A2A backend is enabled"),
            (self.enable_lora is True, "LoRA is enabled"),
            (self.enable_deterministic_inference, "deterministic inference is enabled"),
            (self.enable_torch_compile, "torch compile is enabled"),
            (self.disaggregation_mode != "null", "PD disaggregation is enabled"),
            (self.enable_eplb or self.expert_distribution_recorder_mode is not None,
             "the expert distribution recorder is enabled"),
            (self.enable_flashinfer_allreduce_fusion and fusion_unsupported,
             f"FlashInfer allreduce fusion is enabled on sm{sm_version}"),
        )
        reason = next((text for applies, text in rules if applies), None)
        if reason is not None:
            self.disable_piecewise_cuda_graph = True
            self._piecewise_disable_reason = reason

    @property
    def piecewise_disable_reason(self) -> str | None:
        """Why piecewise CUDA graph is off (None when it is on); what the model runner logs."""
        return self._piecewise_disable_reason

    # --- the emulated release's settings, whatever its names (what capacity, perf and the engine read) ---

    @property
    def release(self) -> tuple[int, ...]:
        """The release this start plays (the profile's sglang_version), e.g. (0, 5, 23)."""
        return self._release

    @property
    def phase_graphs(self) -> bool:
        """The release resolves cuda_graph_config per phase (0.5.14+), not cuda_graph_max_bs + piecewise graphs."""
        return self._release >= PHASE_GRAPHS_SINCE

    @property
    def allreduce_fusion(self) -> bool:
        """FlashInfer all-reduce fusion is on: a fusion backend is set (0.5.14+), else the switch."""
        if self.phase_graphs:
            return self.flashinfer_allreduce_fusion_backend is not None
        return self.enable_flashinfer_allreduce_fusion

    def graph_backend(self, phase: str) -> str:
        """The backend of the decode or prefill graph: full / breakable / disabled (0.5.14+ names; up to 0.5.13
        decode graphs are "full" and piecewise prefill graphs "piecewise")."""
        if self.phase_graphs:
            return self.cuda_graph_config[phase]["backend"]
        if phase == "decode":
            return "disabled" if self.disable_cuda_graph else "full"
        return "disabled" if self.disable_piecewise_cuda_graph else "piecewise"

    @property
    def decode_graph_limit(self) -> int:
        """The largest batch a decode graph is captured for (0 without decode graphs)."""
        if self.graph_backend("decode") == "disabled":
            return 0
        if self.phase_graphs:
            return max(self.cuda_graph_config["decode"]["bs"])
        return max(self.cuda_graph_bs or [self.cuda_graph_max_bs])

    def dump_fields(self) -> list[str]:
        """The fields the release's server_args dump lists, in its order: the ones the emulator models among the
        release's own (cli_table ``fields``); a repr dump (up to 0.5.18) in the emulator's declaration order."""
        release_fields = cli_table()["fields"]
        if self._release < DICT_DUMP_SINCE:
            known = set(release_fields)
            return [f.name for f in dataclasses.fields(self) if f.name in known]
        modelled = {f.name for f in dataclasses.fields(self)}
        return [name for name in release_fields if name in modelled]

    def release_dict(self) -> dict[str, typing.Any]:
        """The release's fields and values (its /server_info and its dict dump)."""
        return {name: copy.deepcopy(getattr(self, name)) for name in self.dump_fields()}

    def __repr__(self) -> str:
        """The dataclass repr of the release's fields (sglang/srt/server_args.py up to 0.5.18)."""
        values = ", ".join(f"{name}={getattr(self, name)!r}" for name in self.dump_fields())
        return f"{type(self).__qualname__}({values})"

    def dump(self) -> str:
        """What the release logs at startup: ``server_args=ServerArgs(...)`` (up to 0.5.18, engine.py
        ``f"{server_args=}"``), ``server_args={...}`` (0.5.19+ resolved_dict(); sglang 0.5.23
        sglang/srt/entrypoints/engine.py ``_server_args_for_logging``)."""
        if self._release < DICT_DUMP_SINCE:
            return f"server_args={self!r}"
        return f"server_args={self.release_dict()}"

    @staticmethod
    def add_cli_args(parser: argparse.ArgumentParser) -> None:
        """The emulated release's own options (cli_table): its option strings, value shapes, choices and help.

        Options whose setting the emulator models store into its field (``--tp-size`` and its alias into
        tp_size); every other option of the release is accepted and ignored, as a real start would take it.
        """
        hints = typing.get_type_hints(ServerArgs)
        fields = {f.name: f for f in dataclasses.fields(ServerArgs)}
        release = emulated_release()
        for option in cli_table()["options"]:
            strings = option["option_strings"]
            names = [string[2:].replace("-", "_") for string in strings if string.startswith("--")]
            field_name = next((name for name in [option["dest"], *names] if name in fields), None)
            default = _release_default(fields.get(field_name), release)
            kwargs = _option_kwargs(option, hints.get(field_name), default)
            if kwargs.get("action") is argparse.BooleanOptionalAction:
                strings = [string for string in strings if not string.startswith("--no-")]
            parser.add_argument(*strings, dest=field_name or option["dest"], **kwargs)

    @classmethod
    def from_cli_args(cls, args: argparse.Namespace) -> ServerArgs:
        return cls(**{f.name: getattr(args, f.name) for f in dataclasses.fields(cls) if hasattr(args, f.name)})


CLI_TABLES = Path(__file__).resolve().parents[1] / "_emulator" / "cli"
_TYPES = {"int": int, "float": float, "str": str}


@functools.lru_cache(maxsize=None)
def _load_cli_table(version: str) -> dict:
    path = CLI_TABLES / f"sglang-{version}.json"
    if not path.exists():
        known = ", ".join(sorted(p.stem.removeprefix("sglang-") for p in CLI_TABLES.glob("sglang-*.json")))
        raise RuntimeError(f"the emulator has no CLI of SGLang {version} (profile sglang_version); it has: {known}")
    table = json.loads(path.read_text(encoding="utf-8"))
    if "base" not in table:
        return table
    # A release no wheel exists of yet (a future one): its base release's table less the options it removes.
    base = _load_cli_table(table["base"])
    removed = set(table.get("removed_options", ()))
    return {"source": table["source"], "prog": base["prog"],
            "options": [option for option in base["options"] if not removed & set(option["option_strings"])],
            "fields": [name for name in base["fields"] if name not in table.get("removed_fields", ())]}


def cli_table() -> dict:
    """The option table of the emulated release, taken from its real wheel (tests/conformance/release_cli.py
    ``emulator_table``; tests/conformance/test_emulator_conformance.py keeps the copies equal)."""
    return _load_cli_table(emulated_version())


def _release_default(field: dataclasses.Field | None, release: tuple[int, ...]) -> typing.Any:
    """The field's default in the emulated release (RELEASE_DEFAULTS over the dataclass's)."""
    if field is None or field.default is dataclasses.MISSING:
        return None
    changed = [value for since, name, value in RELEASE_DEFAULTS if name == field.name and release >= since]
    return changed[-1] if changed else field.default


def _print_deprecated_warning(message: str) -> None:
    """print_deprecated_warning (0.5.11 server_args.py, sglang 0.5.23 sglang/srt/arg_groups/argparse_actions.py):
    bold yellow. Printed while the command line is parsed, before logging is set up (message only)."""
    logger.warning(f"\033[1;33m{message}\033[0m")


class _DeprecatedIgnored(argparse.Action):
    """SGLang's ``DeprecatedAction``: a retired switch that only warns (0.5.10 - 0.5.17 server_args.py)."""

    def __init__(self, option_strings, dest, nargs=0, **kwargs):
        super().__init__(option_strings, dest, nargs=nargs, **kwargs)

    def __call__(self, parser, namespace, values, option_string=None):
        _print_deprecated_warning(
            f"The command line argument '{option_string}' is deprecated and will be removed in future versions.")


class _DeprecatedStoreTrue(argparse.Action):
    """SGLang's ``DeprecatedStoreTrueAction``: still stores True and names the replacement (0.5.23: --disable-cuda-graph,
    --enable-dp-attention; 0.5.11: --stream-output)."""

    def __init__(self, option_strings, dest, new_flag=None, nargs=0, default=False, **kwargs):
        self.new_flag = new_flag
        super().__init__(option_strings, dest, nargs=nargs, default=default, **kwargs)

    def __call__(self, parser, namespace, values, option_string=None):
        replacement = f" Use '{self.new_flag}' instead." if self.new_flag else ""
        _print_deprecated_warning(f"'{option_string}' is deprecated and will be removed in a future release.{replacement}")
        setattr(namespace, self.dest, True)


def _value_type(hint: typing.Any, option: dict) -> typing.Any:
    """The emulator field's scalar type (list[int] -> int), else the release's own type name."""
    base = hint
    if typing.get_origin(hint) is types.UnionType:
        base = next(arg for arg in typing.get_args(hint) if arg is not type(None))
    if typing.get_origin(base) is list:
        base = typing.get_args(base)[0]
    if base in (int, float, str):
        return base
    return _TYPES.get(option.get("type") or "", None)


def _option_kwargs(option: dict, hint: typing.Any, default: typing.Any) -> dict[str, typing.Any]:
    kwargs: dict[str, typing.Any] = {"help": argparse.SUPPRESS if option["hidden"] else option["help"]}
    action, nargs = option["action"], option["nargs"]
    if nargs == 0:
        if action == "BooleanOptionalAction":
            return {**kwargs, "action": argparse.BooleanOptionalAction, "default": default}
        if action == "DeprecatedAction":
            return {**kwargs, "action": _DeprecatedIgnored}
        if action == "DeprecatedStoreTrueAction":
            return {**kwargs, "action": _DeprecatedStoreTrue, "new_flag": option["new_flag"], "default": bool(default)}
        if action in ("_StoreConstAction", "DeprecatedStoreConstAction"):
            const = option["const_value"] if option["const_value"] is not None else option["const"]
            return {**kwargs, "action": "store_const", "const": const, "default": default}
        store = "store_false" if action == "_StoreFalseAction" else "store_true"
        return {**kwargs, "action": store, "default": bool(default) if store == "store_true" else default}
    if option["metavar"] is not None:
        kwargs["metavar"] = tuple(option["metavar"]) if isinstance(option["metavar"], list) else option["metavar"]
    elif option["choices"] is None:
        kwargs["metavar"] = option["dest"].upper()  # argparse's default from the release's dest, not the field
    if nargs is not None:
        kwargs["nargs"] = nargs
    if action == "_AppendAction":
        kwargs["action"] = "append"
    value_type = _value_type(hint, option)
    if value_type is not None:
        kwargs["type"] = value_type
    if option["choices"] is not None:
        kwargs["choices"] = option["choices"]
    if option["required"]:
        kwargs["required"] = True
    else:
        kwargs["default"] = default
    return kwargs


def _by_gpu_memory(gpu_memory_mib: int, values: tuple[int, int, int, int, int]) -> int:
    """Pick a default by GPU memory tier (<35 GB, <60 GB, <90 GB, <160 GB, larger), like SGLang does."""
    tiers_gib = (35, 60, 90, 160)
    for limit, value in zip(tiers_gib, values):
        if gpu_memory_mib < limit * 1024:
            return value
    return values[-1]


def parse_cli_args(argv: list[str]) -> argparse.Namespace:
    """Parse the command line after merging an optional --config YAML (argparse exits 2 on bad flags)."""
    parser = argparse.ArgumentParser(prog=cli_table()["prog"])
    ServerArgs.add_cli_args(parser)
    return parser.parse_args(_merge_config_file(argv, parser))


def prepare_server_args(argv: list[str]) -> ServerArgs:
    return ServerArgs.from_cli_args(parse_cli_args(argv))


def _merge_config_file(argv: list[str], parser: argparse.ArgumentParser) -> list[str]:
    pre = argparse.ArgumentParser(add_help=False)
    pre.add_argument("--config")
    known, _ = pre.parse_known_args(argv)
    if known.config is None:
        return argv
    import yaml

    try:
        with open(known.config, encoding="utf-8") as f:
            options = yaml.safe_load(f) or {}
    except (OSError, yaml.YAMLError) as exc:
        parser.error(f"cannot read --config {known.config}: {exc}")
    if not isinstance(options, dict):
        parser.error(f"--config {known.config} must contain a mapping of option names to values")
    return [*_config_to_argv(options), *argv]


def _config_to_argv(options: dict[str, typing.Any]) -> list[str]:
    args: list[str] = []
    for key, value in options.items():
        flag = "--" + str(key).replace("_", "-")
        if value is True:
            args.append(flag)
        elif value is False or value is None:
            continue
        elif isinstance(value, list):
            args += [flag, *(str(item) for item in value)]
        else:
            args += [flag, str(value)]
    return args


_global_server_args: ServerArgs | None = None


def set_global_server_args_for_scheduler(server_args: ServerArgs) -> None:
    global _global_server_args
    _global_server_args = server_args


def get_global_server_args() -> ServerArgs:
    if _global_server_args is None:
        raise ValueError("Global server args is not set yet!")
    return _global_server_args


def get_global_server_args_or_none() -> ServerArgs | None:
    return _global_server_args
