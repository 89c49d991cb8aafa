# Copyright (c) llmops.sglang contributors
# Apache License 2.0 (see LICENSE)
"""ServerArgs of the SGLang emulator: real field names/defaults, argparse CLI and post-init adjustments.

The CLI is generated from the dataclass: every field is `--field-name` (plus SGLang's aliases),
booleans are store_true flags, and `--config file.yaml` supplies flags whose keys carry no `--`
(command-line flags override it). __post_init__ applies the adjustments the emulator models
(sglang-facts §4): auto defaults from the emulated GPU, the speculative-decoding reset of
max_running_requests to 48, FlashInfer all-reduce fusion rules and the piecewise-CUDA-graph
auto-disable rules. One adjustment is an emulator scenario rather than a confirmed upstream rule:
on GPUs outside the fusion kernels' SM list, enabling the fusion disables piecewise CUDA graph
(the real-case observation the collection must detect).
"""
from __future__ import annotations

import argparse
import dataclasses
import logging
import random
import types
import typing
from dataclasses import dataclass

from sglang._emulator.model_shape import ALLREDUCE_FUSION_ARCHS, load_model_shape
from sglang._emulator.profile import load_profile

logger = logging.getLogger(__name__)

SPECULATIVE_ALGORITHMS = ["EAGLE", "EAGLE3", "NEXTN", "STANDALONE", "NGRAM"]
ATTENTION_BACKENDS = [
    "triton", "torch_native", "flex_attention", "dsa", "cutlass_mla", "fa3", "fa4", "flashinfer", "flashmla",
    "trtllm_mla", "trtllm_mha", "dual_chunk_flash_attn", "aiter", "wave", "intel_amx", "ascend",
]
MOE_RUNNER_BACKENDS = [
    "auto", "deep_gemm", "triton", "triton_kernel", "flashinfer_trtllm", "flashinfer_cutlass", "flashinfer_mxfp4",
    "flashinfer_cutedsl", "cutlass",
]
KV_CACHE_DTYPES = ["auto", "fp8_e5m2", "fp8_e4m3", "bf16", "bfloat16", "fp4_e2m1"]
DTYPES = ["auto", "half", "float16", "bfloat16", "float", "float32"]
QUANTIZATIONS = [
    "awq", "fp8", "gptq", "marlin", "gptq_marlin", "awq_marlin", "bitsandbytes", "gguf", "modelopt", "modelopt_fp8",
    "modelopt_fp4", "petit_nvfp4", "w8a8_int8", "w8a8_fp8", "moe_wna16", "qoq", "w4afp8", "mxfp4", "compressed-tensors",
]
SPEC_DEFAULT_STEPS, SPEC_DEFAULT_TOPK, SPEC_DEFAULT_DRAFT_TOKENS = 3, 1, 4
SPEC_MAX_RUNNING_REQUESTS = 48


@dataclass
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
    stream_output: bool = False
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
    collect_tokens_histogram: bool = False
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
    flashinfer_allreduce_fusion_backend: str = "auto"
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
        self._piecewise_disable_reason: str | None = None
        self.tokenizer_path = self.tokenizer_path or self.model_path
        self.served_model_name = self.served_model_name or self.model_path
        self.device = self.device or "cuda"
        self.random_seed = random.randint(0, 1 << 30) if self.random_seed is None else self.random_seed
        self._validate_parallelism(gpu.count)
        self._handle_gpu_memory_settings(gpu.memory_mib, profile.capacity.mem_fraction_static_default)
        self._handle_model_specific_adjustments(shape.architecture, gpu.sm_version, gpu.name)
        self._handle_context_length(shape.context_len)
        self._handle_speculative_decoding()
        self._handle_piecewise_cuda_graph(gpu.sm_version not in profile.flag_effects.allreduce_fusion_supported_sm,
                                          gpu.sm_version)
        self.attention_backend = self.attention_backend or ("fa3" if gpu.sm_version == 90 else "flashinfer")
        self.sampling_backend = self.sampling_backend or "flashinfer"
        self.grammar_backend = self.grammar_backend or "xgrammar"
        self.page_size = self.page_size or 1
        self.piecewise_cuda_graph_max_tokens = self.piecewise_cuda_graph_max_tokens or self.chunked_prefill_size

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
            if self.speculative_num_steps is None:
                self.speculative_num_steps = SPEC_DEFAULT_STEPS
                self.speculative_eagle_topk = self.speculative_eagle_topk or SPEC_DEFAULT_TOPK
                self.speculative_num_draft_tokens = self.speculative_num_draft_tokens or SPEC_DEFAULT_DRAFT_TOKENS
            self.speculative_eagle_topk = self.speculative_eagle_topk or 1
            self.speculative_num_draft_tokens = self.speculative_num_draft_tokens or self.speculative_num_steps + 1

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

    @staticmethod
    def add_cli_args(parser: argparse.ArgumentParser) -> None:
        hints = typing.get_type_hints(ServerArgs)
        for f in dataclasses.fields(ServerArgs):
            names = [f"--{f.name.replace('_', '-')}", *CLI_ALIASES.get(f.name, ())]
            kwargs = _argparse_kwargs(hints[f.name], f.default, f.name)
            parser.add_argument(*names, dest=f.name, help=CLI_HELP.get(f.name), **kwargs)
        parser.add_argument(
            "--config", help="Read CLI options from a YAML config file (keys without '--'); CLI arguments override it."
        )

    @classmethod
    def from_cli_args(cls, args: argparse.Namespace) -> ServerArgs:
        return cls(**{f.name: getattr(args, f.name) for f in dataclasses.fields(cls)})


CLI_ALIASES: dict[str, tuple[str, ...]] = {
    "model_path": ("--model",),
    "tp_size": ("--tensor-parallel-size", "--tp"),
    "ep_size": ("--expert-parallel-size", "--ep"),
    "dp_size": ("--data-parallel-size",),
    "pp_size": ("--pipeline-parallel-size",),
}
CLI_CHOICES: dict[str, list[str]] = {
    "speculative_algorithm": SPECULATIVE_ALGORITHMS,
    "attention_backend": ATTENTION_BACKENDS,
    "decode_attention_backend": ATTENTION_BACKENDS,
    "prefill_attention_backend": ATTENTION_BACKENDS,
    "moe_runner_backend": MOE_RUNNER_BACKENDS,
    "kv_cache_dtype": KV_CACHE_DTYPES,
    "dtype": DTYPES,
    "quantization": QUANTIZATIONS,
    "moe_a2a_backend": ["none", "deepep", "mooncake", "ascend_fuseep"],
    "flashinfer_allreduce_fusion_backend": ["auto", "trtllm", "mnnvl"],
    "piecewise_cuda_graph_compiler": ["eager", "inductor"],
    "schedule_policy": ["lpm", "random", "fcfs", "dfs-weight", "lof", "priority"],
    "disaggregation_mode": ["null", "prefill", "decode"],
}
CLI_HELP: dict[str, str] = {
    "model_path": "The path of the model weights. This can be a local folder or a Hugging Face repo ID.",
    "tp_size": "The tensor parallelism size.",
    "ep_size": "The expert parallelism size.",
    "dp_size": "The data parallelism size.",
    "pp_size": "The pipeline parallelism size.",
    "mem_fraction_static": "The fraction of the memory used for static allocation (model weights and KV cache "
    "memory pool). Use a smaller value if you see out-of-memory errors.",
    "max_running_requests": "The maximum number of running requests.",
    "max_total_tokens": "The maximum number of tokens in the memory pool. If not specified, it will be automatically "
    "calculated based on the memory usage fraction.",
    "chunked_prefill_size": "The maximum number of tokens in a chunk for the chunked prefill. Setting this to -1 "
    "means disabling chunked prefill.",
    "max_prefill_tokens": "The maximum number of tokens in a prefill batch. The real bound will be the maximum of "
    "this value and the model's maximum context length.",
    "context_length": "The model's maximum context length. Defaults to None (will use the value from the model's "
    "config.json instead).",
    "cuda_graph_max_bs": "Set the maximum batch size for cuda graph. It will extend the cuda graph capture batch "
    "size to this value.",
    "cuda_graph_bs": "Set the list of batch sizes for cuda graph.",
    "disable_cuda_graph": "Disable cuda graph.",
    "disable_piecewise_cuda_graph": "Disable piecewise cuda graph for extend/prefill.",
    "enforce_piecewise_cuda_graph": "Enforce piecewise cuda graph, skipping all auto-disable conditions. For testing.",
    "speculative_algorithm": "Speculative algorithm.",
    "speculative_draft_model_path": "The path of the draft model weights.",
    "speculative_num_steps": "The number of steps sampled from draft model in Speculative Decoding.",
    "speculative_eagle_topk": "The number of tokens sampled from the draft model in eagle2 each step.",
    "speculative_num_draft_tokens": "The number of tokens sampled from the draft model in Speculative Decoding.",
    "attention_backend": "Choose the kernels for attention layers.",
    "moe_runner_backend": "Choose the runner backend for MoE.",
    "enable_flashinfer_allreduce_fusion": "Enable FlashInfer allreduce fusion with Residual RMSNorm.",
    "enforce_disable_flashinfer_allreduce_fusion": "Disable FlashInfer allreduce fusion even where it would be "
    "enabled automatically.",
    "enable_fused_moe_sum_all_reduce": "Enable fused moe triton and sum all reduce.",
    "disable_shared_experts_fusion": "Disable shared experts fusion optimization for deepseek v3/r1.",
    "enable_torch_compile": "Optimize the model with torch.compile. Experimental feature.",
    "torch_compile_max_bs": "Set the maximum batch size when using torch compile.",
    "host": "The host of the HTTP server.",
    "port": "The port of the HTTP server.",
    "skip_server_warmup": "If set, skip warmup.",
    "served_model_name": "Override the model name returned by the v1/models endpoint in OpenAI API server.",
    "api_key": "Set API key of the server. It is also used in the OpenAI API compatible server.",
    "admin_api_key": "Set admin API key for administrative/control endpoints (e.g., cache flush).",
    "log_level": "The logging level of all loggers.",
    "log_level_http": "The logging level of HTTP server. If not set, reuse --log-level by default.",
    "log_requests": "Log metadata, inputs, outputs of all requests.",
    "enable_metrics": "Enable log prometheus metrics.",
    "decode_log_interval": "The log interval of decode batch.",
    "watchdog_timeout": "Set watchdog timeout in seconds. If a forward batch takes longer than this, the server will "
    "crash to prevent hanging.",
    "trust_remote_code": "Whether or not to allow for custom models defined on the Hub in their own modeling files.",
    "kv_cache_dtype": "Data type for kv cache storage. \"auto\" will use model data type.",
    "dtype": "Data type for model weights and activations.",
    "quantization": "The quantization method.",
    "random_seed": "The random seed.",
    "enable_deterministic_inference": "Enable deterministic inference mode with batch invariant ops.",
    "enable_dp_attention": "Enabling data parallelism for attention and tensor parallelism for FFN.",
    "mamba_full_memory_ratio": "The ratio of mamba state memory to full kv cache memory.",
}


def _argparse_kwargs(hint: typing.Any, default: typing.Any, name: str) -> dict[str, typing.Any]:
    if hint is bool:
        return {"action": "store_true"}
    kwargs: dict[str, typing.Any] = {"default": None if default is dataclasses.MISSING else default}
    if default is dataclasses.MISSING:
        kwargs["required"] = True
    if name in CLI_CHOICES:
        kwargs["choices"] = CLI_CHOICES[name]
    base = hint
    if typing.get_origin(hint) is types.UnionType:
        base = next(arg for arg in typing.get_args(hint) if arg is not type(None))
    if base is bool:
        return {"action": "store_true", "default": kwargs["default"]}
    if typing.get_origin(base) is list:
        kwargs.update(nargs="+", type=typing.get_args(base)[0])
    else:
        kwargs["type"] = base
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
    parser = argparse.ArgumentParser(prog="python -m sglang.launch_server")
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
