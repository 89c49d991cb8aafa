# Copyright (c) llmops.sglang contributors
# Apache License 2.0 (see LICENSE)
"""Unit tests for plugins/module_utils/moe_shapes.py.

Fixtures live in tests/fixtures/moe_configs/ (see its README for the upstream provenance).
"""
from __future__ import annotations

import pytest

from ansible_collections.llmops.sglang.plugins.module_utils.moe_shapes import checkpoint_dtype_selector, model_moe_shape
from ansible_collections.llmops.sglang.plugins.module_utils.moe_targets import (
    expected_tuner_output_name, moe_config_targets)
from tests.unit.plugins.module_utils.moe_fixtures import hf


def test_model_moe_shape_deepseek_v3_fp8_block():
    assert model_moe_shape(hf("deepseek_v3_fp8")) == {
        "architecture": "DeepseekV3ForCausalLM",
        "num_experts": 256,
        "experts_key": "n_routed_experts",
        "shared_expert_fusable": True,
        "topk": 8,
        "hidden_size": 7168,
        "moe_intermediate_size": 2048,
        "intermediate_key": "moe_intermediate_size",
        "dtype": "bfloat16",
        "block_shape": [128, 128],
        "quant_method": "fp8",
    }


def test_model_moe_shape_reads_text_config_of_multimodal_wrapper():
    shape = model_moe_shape(hf("qwen3_5_moe_style_bf16"))
    assert shape["architecture"] == "Qwen3_5MoeForConditionalGeneration"
    assert (shape["num_experts"], shape["topk"], shape["hidden_size"], shape["moe_intermediate_size"]) == (256, 8, 3072, 1024)
    assert shape["shared_expert_fusable"] is False
    assert (shape["dtype"], shape["block_shape"], shape["quant_method"]) == ("bfloat16", None, None)


def test_model_moe_shape_mixtral_and_gpt_oss_use_local_experts_and_intermediate_size():
    mixtral = model_moe_shape(hf("mixtral_8x7b_instruct"))
    assert (mixtral["num_experts"], mixtral["topk"], mixtral["moe_intermediate_size"]) == (8, 2, 14336)
    gpt_oss = model_moe_shape(hf("gpt_oss_120b"))
    assert (gpt_oss["num_experts"], gpt_oss["topk"], gpt_oss["moe_intermediate_size"]) == (128, 4, 2880)
    assert gpt_oss["quant_method"] == "mxfp4"


def test_model_moe_shape_compressed_tensors_group_size_gives_zero_block():
    shape = model_moe_shape(hf("kimi_k2_thinking_int4"))
    assert shape["block_shape"] == [0, 32]
    assert shape["quant_method"] == "compressed-tensors"


def test_model_moe_shape_glm4_moe_is_fusable():
    shape = model_moe_shape(hf("glm_4_5_air_fp8"))
    assert (shape["num_experts"], shape["shared_expert_fusable"], shape["block_shape"]) == (128, True, None)


def test_a_dense_model_has_no_moe_shape_and_says_which_keys_were_looked_for():
    llama = {"architectures": ["LlamaForCausalLM"], "hidden_size": 4096, "intermediate_size": 14336}
    with pytest.raises(ValueError, match=r"^LlamaForCausalLM: config.json has no MoE shape: need experts "
                                         r"\(n_routed_experts/num_experts/num_local_experts/moe_num_experts\)"):
        model_moe_shape(llama)


@pytest.mark.parametrize(("fixture", "tp", "expected"), [
    # real HF configs (tests/fixtures/moe_configs/README.md): E, N at that TP, the keys read
    ("qwen3_30b_a3b", 1, (128, 768, "num_experts", "moe_intermediate_size", False)),
    ("qwen3_next_80b_a3b_fp8", 4, (512, 128, "num_experts", "moe_intermediate_size", False)),
    ("qwen3_5_35b_a3b_fp8", 1, (256, 512, "num_experts", "moe_intermediate_size", False)),
    ("deepseek_v3_fp8", 8, (257, 256, "n_routed_experts", "moe_intermediate_size", True)),
    ("mixtral_8x7b_instruct", 2, (8, 7168, "num_local_experts", "intermediate_size", False)),
    ("gpt_oss_120b", 4, (128, 720, "num_local_experts", "intermediate_size", False)),
    ("glm_4_5_air_fp8", 4, (129, 352, "n_routed_experts", "moe_intermediate_size", True)),
    ("llama4_scout_17b_16e_instruct", 8, (17, 1024, "num_local_experts", "intermediate_size", True)),
    ("phi_3_5_moe_instruct", 2, (16, 3200, "num_local_experts", "intermediate_size", False)),
    ("olmoe_1b_7b_0924", 1, (64, 1024, "num_experts", "intermediate_size", False)),
])
def test_the_shape_of_real_models_comes_from_their_keys(fixture, tp, expected):
    config = hf(fixture)
    shape = model_moe_shape(config)
    up = moe_config_targets(config, tp, 1, "NVIDIA H200", "3.6.0")[0]
    assert (up["E"], up["N"], shape["experts_key"], shape["intermediate_key"], shape["shared_expert_fusable"]) == expected


def test_the_tuner_reads_unlisted_architectures_with_mixtrals_keys():
    # PhiMoE has Mixtral's keys: the tuner writes the name the server looks up.
    phi = hf("phi_3_5_moe_instruct")
    assert expected_tuner_output_name(phi, 2, 1, "NVIDIA H200", ["--dtype", "auto"]) == (
        moe_config_targets(phi, 2, 1, "NVIDIA H200", "3.6.0")[0]["file_name"])
    # OLMoE keeps its experts in num_experts: SGLang serves it, but its tuner cannot read it.
    with pytest.raises(ValueError, match="SGLang's tuner reads OlmoeForCausalLM with Mixtral's .* keys "
                                         "num_local_experts/intermediate_size, which this config.json lacks"):
        expected_tuner_output_name(hf("olmoe_1b_7b_0924"), 1, 1, "NVIDIA H200", ["--dtype", "auto"])


def test_model_moe_shape_missing_key_names_it():
    config = hf("mixtral_8x7b_instruct")
    del config["num_local_experts"]
    with pytest.raises(ValueError, match="num_local_experts"):
        model_moe_shape(config)


@pytest.mark.parametrize(
    ("model", "selector"),
    [
        ("deepseek_v3_fp8", "fp8_w8a8"),
        ("qwen3_5_moe_style_bf16", None),
        ("mixtral_8x7b_instruct", None),
        ("kimi_k2_thinking_int4", "int4_w4a16"),
        ("gpt_oss_120b", None),
    ],
)
def test_checkpoint_dtype_selector(model, selector):
    assert checkpoint_dtype_selector(hf(model)) == selector


def test_checkpoint_dtype_selector_float32_and_unknown_quant():
    fp32 = {**hf("mixtral_8x7b_instruct"), "torch_dtype": "float32"}
    assert checkpoint_dtype_selector(fp32) == "float32"
    awq = {**hf("mixtral_8x7b_instruct"), "quantization_config": {"quant_method": "awq", "bits": 4}}
    with pytest.raises(ValueError, match="quant_method='awq'"):
        checkpoint_dtype_selector(awq)
