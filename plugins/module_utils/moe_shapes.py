# Copyright (c) llmops.sglang contributors
# Apache License 2.0 (see LICENSE)
"""The MoE shape and dtype selector of a Hugging Face ``config.json``, as the server and as the tuner read them.

Private to the llmops.sglang collection; not a public API. Pure functions, stdlib only, so it imports on any
managed host with plain Python 3.11. The rules mirror SGLang's ``get_model_config`` in
``benchmark/kernels/fused_moe_triton/common_utils.py`` (commit 00f0b462) and ``get_config_dtype_str``.
"""
from __future__ import annotations

from typing import Any


# The MoE shape is derived from the keys HF configs use, whatever the architecture (SGLang supports more each
# release): experts, per-expert intermediate size and top-k, first key present wins, in the text config of
# multimodal wrappers; DBRX keeps them in ffn_config.
_EXPERT_KEYS = ("n_routed_experts", "num_experts", "num_local_experts", "moe_num_experts")
_INTERMEDIATE_KEYS = ("moe_intermediate_size", "expert_hidden_dim", "intermediate_size", "ffn_hidden_size")
_TOPK_KEYS = ("num_experts_per_tok", "top_k_experts", "experts_per_token", "moe_top_k")
# Architectures whose shared expert SGLang fuses into the routed experts by default (E + 1 in the file name),
# as upstream's tuner has them (benchmark/kernels/fused_moe_triton/common_utils.py get_model_config, commit
# 00f0b462). The server decides at load time (sglang/srt/layers/moe/utils.py get_num_fused_shared_experts,
# 0.5.23) and can turn it off (hardware, parallelism, --disable-shared-experts-fusion): where the server logged
# the missing names, moe_targets settles it from them.
SHARED_EXPERT_FUSION: tuple[str, ...] = (
    "DeepseekV3ForCausalLM", "DeepseekV32ForCausalLM", "Glm4MoeForCausalLM", "Glm4MoeLiteForCausalLM",
    "GlmMoeDsaForCausalLM", "MistralLarge3ForCausalLM", "Llama4ForConditionalGeneration",
    "MiniMaxM3SparseForConditionalGeneration",
)
# What upstream's tuner reads per architecture (same get_model_config): (experts key, intermediate key);
# every architecture it does not list is read with Mixtral's keys.
_TUNER_KEYS: dict[str, tuple[str, str]] = {
    **dict.fromkeys(("Qwen2MoeForCausalLM", "Qwen3MoeForCausalLM", "Qwen3NextForCausalLM",
                     "Qwen3VLMoeForConditionalGeneration", "Qwen3_5MoeForCausalLM", "Qwen3_5MoeForConditionalGeneration",
                     "Qwen4ExpForCausalLM", "Qwen4ExpForConditionalGeneration", "InternS2PreviewForConditionalGeneration",
                     "MellumForCausalLM", "BailingMoEForCausalLM", "BailingMoeForCausalLM", "BailingMoeV2ForCausalLM",
                     "BailingMoeV3ForCausalLM", "Gemma4ForConditionalGeneration", "Lfm2MoeForCausalLM"),
                    ("num_experts", "moe_intermediate_size")),
    **dict.fromkeys(("DeepseekV2ForCausalLM", "DeepseekV3ForCausalLM", "DeepseekV32ForCausalLM", "DeepseekV4ForCausalLM",
                     "DeepseekOCRForCausalLM", "Glm4MoeForCausalLM", "Glm4MoeLiteForCausalLM", "GlmMoeDsaForCausalLM",
                     "KimiVLForConditionalGeneration", "MistralLarge3ForCausalLM", "NemotronHForCausalLM",
                     "UnlimitedOCRForCausalLM"), ("n_routed_experts", "moe_intermediate_size")),
    **dict.fromkeys(("Grok1ForCausalLM", "Grok1ImgGen", "Grok1AForCausalLM"), ("num_local_experts", "moe_intermediate_size")),
    "JambaForCausalLM": ("num_experts", "intermediate_size"),
    "HYV3ForCausalLM": ("num_experts", "expert_hidden_dim"),
    "DbrxForCausalLM": ("moe_num_experts", "ffn_hidden_size"),
}
_TUNER_DEFAULT_KEYS = ("num_local_experts", "intermediate_size")


def _architecture(model_config: dict) -> str:
    architectures = model_config.get("architectures") or []
    if not architectures:
        raise ValueError("config.json has no architectures; it is not a Hugging Face model config")
    return architectures[0]


def _first(config: dict, keys: tuple[str, ...]) -> tuple[str | None, Any]:
    for key in keys:
        if config.get(key) is not None:
            return key, config[key]
    return None, None


def _moe_section(text: dict) -> dict:
    # DBRX nests its MoE keys in ffn_config (moe_num_experts, moe_top_k, ffn_hidden_size).
    return {**text, **(text.get("ffn_config") or {})}


def _text_config(model_config: dict) -> dict:
    # Multimodal wrappers (Qwen3-VL-MoE, Qwen3.5-MoE) keep the language model in text_config.
    return model_config.get("text_config") or model_config


def _quantization_config(model_config: dict) -> dict:
    return model_config.get("quantization_config") or _text_config(model_config).get("quantization_config") or {}


def _first_config_group(quant: dict) -> dict:
    groups = quant.get("config_groups") or {}
    return next(iter(groups.values()), {})


def _checkpoint_block_shape(quant: dict) -> list[int] | None:
    """Block shape as SGLang's tuner reads it: compressed-tensors group size wins over
    ``weight_block_size``. Compressed-tensors *block* strategies (``block_structure``) are not
    read by the tuner either; the server-log cross-check catches that case."""
    if quant.get("config_groups"):
        group_size = (_first_config_group(quant).get("weights") or {}).get("group_size")
        return [0, group_size] if isinstance(group_size, int) else None
    block = quant.get("weight_block_size")
    return list(block) if block else None


def _torch_dtype(model_config: dict) -> str:
    # transformers >= 4.56 writes "dtype" instead of "torch_dtype"; SGLang's tuner defaults to bf16.
    for config in (_text_config(model_config), model_config):
        value = config.get("torch_dtype") or config.get("dtype")
        if value:
            return str(value)
    return "bfloat16"


def model_moe_shape(model_config: dict) -> dict[str, Any]:
    """MoE shape of a parsed HF ``config.json`` (global, before any TP/EP sharding), for any architecture.

    Raises ValueError naming the keys looked for when the config has no MoE layers SGLang's Triton kernel runs.
    """
    architecture = _architecture(model_config)
    text = _moe_section(_text_config(model_config))
    experts_key, experts = _first(text, _EXPERT_KEYS)
    intermediate_key, intermediate = _first(text, _INTERMEDIATE_KEYS)
    topk = _first(text, _TOPK_KEYS)[1]
    if not experts or intermediate is None or topk is None or "hidden_size" not in text:
        raise ValueError(
            f"{architecture}: config.json has no MoE shape: need experts ({'/'.join(_EXPERT_KEYS)}), the expert "
            f"intermediate size ({'/'.join(_INTERMEDIATE_KEYS)}), top-k ({'/'.join(_TOPK_KEYS)}) and hidden_size "
            "(in text_config for multimodal models); a dense model has no fused-MoE configs")
    quant = _quantization_config(model_config)
    return {
        "architecture": architecture,
        "num_experts": experts,
        "experts_key": experts_key,
        "shared_expert_fusable": architecture in SHARED_EXPERT_FUSION,
        "topk": topk,
        "hidden_size": text["hidden_size"],
        "moe_intermediate_size": intermediate,
        "intermediate_key": intermediate_key,
        "dtype": _torch_dtype(model_config),
        "block_shape": _checkpoint_block_shape(quant),
        "quant_method": quant.get("quant_method"),
    }


def tuner_moe_shape(model_config: dict) -> dict[str, Any]:
    """:func:`model_moe_shape` with the experts and intermediate size upstream's tuner reads: by its own table of
    architectures (:data:`_TUNER_KEYS`), Mixtral's keys for any other."""
    shape = model_moe_shape(model_config)
    architecture = shape["architecture"]
    experts_key, intermediate_key = _TUNER_KEYS.get(architecture, _TUNER_DEFAULT_KEYS)
    text = _moe_section(_text_config(model_config))
    if text.get(experts_key) is None or text.get(intermediate_key) is None:
        listed = "its" if architecture in _TUNER_KEYS else "Mixtral's (it does not list this architecture)"
        raise ValueError(f"SGLang's tuner reads {architecture} with {listed} keys {experts_key}/{intermediate_key}, "
                         "which this config.json lacks: the tuner cannot tune this model as it is")
    return {**shape, "num_experts": text[experts_key], "moe_intermediate_size": text[intermediate_key]}


_SELECTOR_BY_QUANT_METHOD: dict[str, str | None] = {
    "fp8": "fp8_w8a8",
    "w8a8_fp8": "fp8_w8a8",
    "w8a8_int8": "int8_w8a8",
    "mxfp4": None,  # only the dequantised-BF16 Triton path reads configs (see GptOssForCausalLM)
}
# The tuner's --dtype choices besides auto (tuning_fused_moe_triton.py's argparse).
TUNER_DTYPES = ("fp8_w8a8", "int8_w8a16", "int8_w8a8", "int4_w4a16")


def _compressed_tensors_selector(quant: dict) -> str:
    group = _first_config_group(quant)
    weights = group.get("weights") or {}
    has_activations = bool(group.get("input_activations"))
    scheme = (weights.get("type"), weights.get("num_bits"), has_activations)
    selectors = {
        ("float", 8, True): "fp8_w8a8",
        ("int", 8, True): "int8_w8a8",
        ("int", 8, False): "int8_w8a16",
        ("int", 4, False): "int4_w4a16",
    }
    if scheme not in selectors:
        raise ValueError(
            f"compressed-tensors scheme weights={weights.get('type')}{weights.get('num_bits')} "
            f"activations={'yes' if has_activations else 'no'} has no Triton MoE config dtype; pass dtype explicitly"
        )
    return selectors[scheme]


def checkpoint_dtype_selector(model_config: dict) -> str | None:
    """The ``dtype=`` part SGLang's ``get_config_dtype_str`` yields for this checkpoint."""
    quant = _quantization_config(model_config)
    method = quant.get("quant_method")
    if method is None:
        return "float32" if _torch_dtype(model_config) == "float32" else None
    if method == "compressed-tensors":
        return _compressed_tensors_selector(quant)
    if method not in _SELECTOR_BY_QUANT_METHOD:
        raise ValueError(
            f"cannot tell which MoE config dtype SGLang uses for quant_method={method!r}; pass dtype "
            f"explicitly (one of {', '.join(TUNER_DTYPES)}, 'float32', or '' for none)"
        )
    return _SELECTOR_BY_QUANT_METHOD[method]
