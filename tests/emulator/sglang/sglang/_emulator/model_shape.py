# Copyright (c) llmops.sglang contributors
# Apache License 2.0 (see LICENSE)
"""Model shape read from a local model dir's config.json, with SGLang's E/N conventions.

E and N follow the tuner's `get_model_config` (benchmark/kernels/fused_moe_triton/common_utils.py, commit
00f0b462): E = routed experts // ep
(+1 fused shared expert for DeepSeek-V3/GLM-4-MoE-style archs unless shared-experts fusion is
disabled), N = per-rank MoE intermediate = intermediate // (tp // ep). The emulator never
downloads: the model path must be a directory with a config.json.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

# Archs whose shared expert SGLang fuses into the routed experts (E + 1).
SHARED_EXPERT_FUSION_ARCHS = frozenset({
    "DeepseekV3ForCausalLM", "DeepseekV32ForCausalLM", "Glm4MoeForCausalLM", "Glm4MoeLiteForCausalLM",
    "GlmMoeDsaForCausalLM", "MistralLarge3ForCausalLM",
})
# Archs the newer FlashInfer all-reduce fusion auto-enable rule covers (python/sglang/srt/server_args.py
# _handle_model_specific_adjustments, incl. PR #22664).
ALLREDUCE_FUSION_ARCHS = frozenset({
    "DeepseekV3ForCausalLM", "GptOssForCausalLM", "Glm4MoeForCausalLM", "Glm4MoeLiteForCausalLM",
    "Qwen3MoeForCausalLM", "KimiK25ForConditionalGeneration", "Qwen3NextForCausalLM", "Qwen3_5MoeForCausalLM",
})
DTYPE_BYTES = {"bfloat16": 2, "float16": 2, "float32": 4, "fp8_e4m3": 1, "fp8_e5m2": 1}
MIB = 1024 * 1024


class ModelConfigError(ValueError):
    """The model path has no readable config.json (the emulator never downloads models)."""


@dataclass(frozen=True)
class ModelShape:
    path: str
    architecture: str
    model_type: str
    torch_dtype: str
    hidden_size: int
    num_layers: int
    context_len: int
    vocab_size: int
    num_attention_heads: int
    num_kv_heads: int
    head_dim: int
    num_experts: int
    top_k: int
    moe_intermediate_size: int
    full_attention_layers: int
    linear_attention_layers: int
    linear_state_bytes_per_layer_tp1: int
    linear_conv_bytes_per_layer_tp1: int
    mla_kv_dim: int
    quant_method: str | None
    block_shape: tuple[int, ...] | None

    @property
    def is_moe(self) -> bool:
        return self.num_experts > 0

    @property
    def is_hybrid_linear(self) -> bool:
        return self.linear_attention_layers > 0

    @property
    def is_mla(self) -> bool:
        return self.mla_kv_dim > 0

    @property
    def moe_dtype(self) -> str | None:
        """SGLang's get_config_dtype_str: fp8_w8a8 for FP8 checkpoints, None for bf16/fp16."""
        if self.quant_method == "fp8":
            return "fp8_w8a8"
        return "float32" if self.torch_dtype == "float32" else None

    def moe_file_shape(self, tp_size: int, ep_size: int, disable_shared_experts_fusion: bool) -> tuple[int, int]:
        """(E, N) of the MoE config file name for this TP/EP split."""
        if tp_size % ep_size:
            raise ValueError(f"tp_size ({tp_size}) must be a multiple of ep_size ({ep_size})")
        moe_tp = tp_size // ep_size
        if self.moe_intermediate_size % moe_tp:
            raise ValueError(f"moe intermediate size {self.moe_intermediate_size} is not divisible by {moe_tp}")
        experts = self.num_experts // ep_size
        if self.architecture in SHARED_EXPERT_FUSION_ARCHS and not disable_shared_experts_fusion:
            experts += 1
        return experts, self.moe_intermediate_size // moe_tp

    def kv_bytes_per_token(self, tp_size: int, kv_dtype_bytes: int) -> int:
        """KV-cache bytes one token takes on one GPU (full-attention layers only)."""
        if self.is_mla:
            return self.full_attention_layers * self.mla_kv_dim * kv_dtype_bytes
        kv_heads_per_rank = max(1, self.num_kv_heads // tp_size)
        return self.full_attention_layers * 2 * kv_heads_per_rank * self.head_dim * kv_dtype_bytes

    def linear_state_bytes(self, tp_size: int) -> tuple[int, int]:
        """(ssm, conv) state bytes of one request on one GPU for hybrid linear-attention models."""
        return (
            self.linear_attention_layers * self.linear_state_bytes_per_layer_tp1 // tp_size,
            self.linear_attention_layers * self.linear_conv_bytes_per_layer_tp1 // tp_size,
        )


def load_model_shape(model_path: str) -> ModelShape:
    config_path = Path(model_path) / "config.json"
    try:
        config = json.loads(config_path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise ModelConfigError(
            f"Can't load the configuration of '{model_path}': {config_path} is not readable "
            f"({exc.strerror}); the SGLang emulator only serves local model directories"
        ) from exc
    except json.JSONDecodeError as exc:
        raise ModelConfigError(f"{config_path} is not valid JSON: {exc}") from exc
    text = {**config, **config.get("text_config", {})}
    architecture = (config.get("architectures") or ["UnknownForCausalLM"])[0]
    return ModelShape(
        path=model_path,
        architecture=architecture,
        model_type=str(text.get("model_type", "")),
        torch_dtype=str(text.get("torch_dtype") or text.get("dtype") or "bfloat16"),
        hidden_size=int(text["hidden_size"]),
        num_layers=int(text["num_hidden_layers"]),
        context_len=int(text.get("max_position_embeddings", 4096)),
        vocab_size=int(text.get("vocab_size", 32000)),
        num_attention_heads=int(text.get("num_attention_heads", 1)),
        num_kv_heads=int(text.get("num_key_value_heads", text.get("num_attention_heads", 1))),
        head_dim=int(text.get("head_dim") or text["hidden_size"] // text.get("num_attention_heads", 1)),
        num_experts=_routed_experts(text),
        top_k=int(text.get("num_experts_per_tok", 0)),
        moe_intermediate_size=int(text.get("moe_intermediate_size") or text.get("intermediate_size", 0)),
        full_attention_layers=_full_attention_layers(text),
        linear_attention_layers=int(text["num_hidden_layers"]) - _full_attention_layers(text),
        linear_state_bytes_per_layer_tp1=_linear_state_bytes(text),
        linear_conv_bytes_per_layer_tp1=_linear_conv_bytes(text),
        mla_kv_dim=int(text.get("kv_lora_rank", 0)) + int(text.get("qk_rope_head_dim", 0)) if "kv_lora_rank" in text else 0,
        quant_method=(text.get("quantization_config") or {}).get("quant_method"),
        block_shape=_block_shape(text),
    )


def _routed_experts(text: dict[str, Any]) -> int:
    return int(text.get("num_experts") or text.get("n_routed_experts") or text.get("num_local_experts") or 0)


def _full_attention_layers(text: dict[str, Any]) -> int:
    layer_types = text.get("layer_types")
    if layer_types:
        return sum(1 for kind in layer_types if kind == "full_attention")
    return int(text["num_hidden_layers"])


def _linear_state_bytes(text: dict[str, Any]) -> int:
    # Gated DeltaNet recurrent state per layer: value heads x key dim x value dim, kept in fp32.
    return int(text.get("linear_num_value_heads", 0)) * int(text.get("linear_key_head_dim", 0)) * int(
        text.get("linear_value_head_dim", 0)) * 4


def _linear_conv_bytes(text: dict[str, Any]) -> int:
    channels = 2 * int(text.get("linear_num_key_heads", 0)) * int(text.get("linear_key_head_dim", 0)) + int(
        text.get("linear_num_value_heads", 0)) * int(text.get("linear_value_head_dim", 0))
    return channels * max(0, int(text.get("linear_conv_kernel_dim", 1)) - 1) * 2


def _block_shape(text: dict[str, Any]) -> tuple[int, ...] | None:
    block = (text.get("quantization_config") or {}).get("weight_block_size")
    return tuple(int(v) for v in block) if block else None
