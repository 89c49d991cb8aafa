# Copyright (c) llmops.sglang contributors
# Apache License 2.0 (see LICENSE)
"""Shared helpers of the fused-MoE tuner scripts (emulated SGLang source checkout).

Same names and behaviour as upstream `benchmark/kernels/fused_moe_triton/common_utils.py`
(commit 00f0b462), except that models are read from a local `<model>/config.json` only
(no Hugging Face download) and dtypes are strings instead of torch dtypes.
"""
from __future__ import annotations

import json
import os
import tempfile
from typing import Any

from sglang._emulator.model_shape import SHARED_EXPERT_FUSION_ARCHS
from sglang.srt.layers.moe.moe_runner.triton_utils.fused_moe_triton_config import get_config_file_name

QWEN_MOE_ARCHS = frozenset({
    "Qwen2MoeForCausalLM", "Qwen3MoeForCausalLM", "Qwen3NextForCausalLM", "Qwen3VLMoeForConditionalGeneration",
    "Qwen3_5MoeForCausalLM", "Qwen3_5MoeForConditionalGeneration",
})
# Archs that keep routed experts in `n_routed_experts` (DeepSeek-V2/V3 layout, GLM-4-MoE, ...).
ROUTED_EXPERT_ARCHS = frozenset({"DeepseekV2ForCausalLM", "DeepseekV3ForCausalLM"}) | SHARED_EXPERT_FUSION_ARCHS
SORTED_CONFIG_KEYS = ("BLOCK_SIZE_M", "BLOCK_SIZE_N", "BLOCK_SIZE_K", "GROUP_SIZE_M", "num_warps", "num_stages")


def calculate_shard_intermediate_size(intermediate_size: int, tp_size: int, ep_size: int = 1) -> int:
    """Per-rank width of the fused gate+up projection (2 x the per-rank MoE intermediate size)."""
    assert tp_size % ep_size == 0, f"tp_size ({tp_size}) must be divisible by ep_size ({ep_size})"
    moe_tp_size = tp_size // ep_size
    assert intermediate_size % moe_tp_size == 0, (
        f"intermediate_size ({intermediate_size}) must be divisible by tp_size // ep_size ({moe_tp_size})"
    )
    return 2 * intermediate_size // moe_tp_size


def get_model_config(
    model_name: str,
    tp_size: int,
    ep_size: int = 1,
    disable_shared_experts_fusion: bool = False,
    topk_ids_dir: str | None = None,
) -> dict[str, Any]:
    """MoE shape of a model as the tuner sees it (E after EP incl. a fused shared expert, top-k, ...)."""
    config = _read_model_config(model_name)
    architecture = (config.get("architectures") or [""])[0]
    block_shape = _block_shape(config.get("quantization_config") or {})
    text = config.get("text_config") or config
    if architecture in QWEN_MOE_ARCHS:
        num_experts = _field(text, "num_experts", architecture) // ep_size
        topk = _field(text, "num_experts_per_tok", architecture)
        intermediate_size = _field(text, "moe_intermediate_size", architecture)
    elif architecture in ROUTED_EXPERT_ARCHS:
        fuse_shared = architecture in SHARED_EXPERT_FUSION_ARCHS and not disable_shared_experts_fusion
        num_experts = _field(text, "n_routed_experts", architecture) // ep_size + (1 if fuse_shared else 0)
        topk = _field(text, "num_experts_per_tok", architecture) + (1 if fuse_shared and topk_ids_dir else 0)
        intermediate_size = _field(text, "moe_intermediate_size", architecture)
    else:  # Mixtral layout (also gpt-oss)
        num_experts = _field(text, "num_local_experts", architecture) // ep_size
        topk = _field(text, "num_experts_per_tok", architecture)
        intermediate_size = _field(text, "intermediate_size", architecture)
    return {
        "num_experts": num_experts,
        "topk": topk,
        "hidden_size": _field(text, "hidden_size", architecture),
        "shard_intermediate_size": calculate_shard_intermediate_size(intermediate_size, tp_size, ep_size),
        "dtype": text.get("torch_dtype") or text.get("dtype") or "bfloat16",
        "block_shape": block_shape,
        "architecture": architecture,
        "num_layers": text.get("num_hidden_layers"),
        "dense_layers": text.get("first_k_dense_replace", 0),
    }


def get_config_dtype_str(
    dtype: str,
    use_int8_w8a16: bool = False,
    use_int4_w4a16: bool = False,
    use_fp8_w8a8: bool = False,
    use_int8_w8a8: bool = False,
) -> str | None:
    """The `dtype=` selector of config file names; None for 16-bit kernels."""
    if use_fp8_w8a8:
        return "fp8_w8a8"
    if use_int8_w8a8:
        return "int8_w8a8"
    if use_int4_w4a16:
        return "int4_w4a16"
    if use_int8_w8a16:
        return "int8_w8a16"
    return "float32" if dtype == "float32" else None


def get_config_filename(
    num_experts: int,
    shard_intermediate_size: int,
    dtype_str: str | None,
    per_channel_quant: bool,
    block_shape: list[int] | None,
) -> str:
    # The naming convention uses w2.shape[2], the intermediate size after silu_and_mul.
    return get_config_file_name(num_experts, shard_intermediate_size // 2, dtype_str, block_shape, per_channel_quant)


def get_default_batch_sizes() -> list[int]:
    return [1, 2, 4, 8, 16, 24, 32, 48, 64, 96, 128, 256, 512, 1024, 1536, 2048, 3072, 4096]


def get_configs_compute_bound() -> list[dict[str, int]]:
    """The CUDA search space: 4 stages x 5 BM x 3 BK x 4 BN x 2 warps x 4 group sizes = 1920 configs."""
    return [
        {"BLOCK_SIZE_M": block_m, "BLOCK_SIZE_N": block_n, "BLOCK_SIZE_K": block_k,
         "GROUP_SIZE_M": group_size, "num_warps": num_warps, "num_stages": num_stages}
        for num_stages in (2, 3, 4, 5)
        for block_m in (16, 32, 64, 128, 256)
        for block_k in (64, 128, 256)
        for block_n in (32, 64, 128, 256)
        for num_warps in (4, 8)
        for group_size in (1, 16, 32, 64)
    ]


def filter_by_block_shape(search_space: list[dict[str, Any]], block_shape: list[int] | None) -> list[dict[str, Any]]:
    """Block-quantized weights need BLOCK_SIZE_K to divide the quantization block's K."""
    if block_shape is None:
        return search_space
    block_k = block_shape[1]
    return [config for config in search_space if block_k % config["BLOCK_SIZE_K"] == 0]


def sort_config(config: dict[str, Any]) -> dict[str, Any]:
    return {
        **{key: config[key] for key in SORTED_CONFIG_KEYS},
        **({"waves_per_eu": config["waves_per_eu"]} if "waves_per_eu" in config else {}),
        **({"USE_TMA": config["USE_TMA"]} if "USE_TMA" in config else {}),
    }


def save_configs(configs: dict[int, dict[str, Any]], filename: str) -> None:
    print(f"Writing best config to {filename}...")
    write_json(filename, configs, trailing_newline=True)


def write_json(path: str, data: Any, trailing_newline: bool) -> None:
    """json.dump(indent=4) like the upstream scripts, but via rename so a killed run never leaves half a file."""
    directory = os.path.dirname(os.path.abspath(path))
    with tempfile.NamedTemporaryFile("w", dir=directory, prefix=".tmp-", suffix=".json", delete=False) as f:
        json.dump(data, f, indent=4)
        if trailing_newline:
            f.write("\n")
    os.replace(f.name, path)


def _read_model_config(model_name: str) -> dict[str, Any]:
    path = os.path.join(model_name, "config.json")
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except OSError as exc:
        raise OSError(
            f"Can't load the configuration of '{model_name}': {path} is not readable ({exc.strerror}). "
            "The SGLang emulator's tuner only reads local model directories."
        ) from exc


def _field(config: dict[str, Any], key: str, architecture: str) -> int:
    if key not in config:
        raise AttributeError(f"'{architecture or 'PretrainedConfig'}' config has no attribute '{key}'")
    return int(config[key])


def _block_shape(quantization_config: dict[str, Any]) -> list[int] | None:
    if "weight_block_size" in quantization_config:
        block_shape = [int(v) for v in quantization_config["weight_block_size"]]
        assert len(block_shape) == 2
        return block_shape
    for group in (quantization_config.get("config_groups") or {}).values():
        group_size = (group.get("weights") or {}).get("group_size")
        if group_size:
            return [0, int(group_size)]
    return None
