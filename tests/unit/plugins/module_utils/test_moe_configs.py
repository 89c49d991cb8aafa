# Copyright (c) llmops.sglang contributors
# Apache License 2.0 (see LICENSE)
"""Unit tests for the fused-MoE config concerns of plugins/module_utils: moe_names.py, moe_shapes.py,
moe_targets.py, moe_validation.py, moe_search_space.py, moe_batch_sizes.py, moe_roofline.py, moe_tuner_output.py.

Fixtures live in tests/fixtures/moe_configs/ (see its README for the upstream provenance).
Roofline expectations are the figures of the project's benchmarking reference, section C.
"""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from ansible_collections.llmops.sglang.plugins.module_utils.moe_batch_sizes import DEFAULT_BATCH_SIZES, auto_batch_sizes
from ansible_collections.llmops.sglang.plugins.module_utils.moe_names import (
    config_file_name, device_name_for, parse_config_file_name, triton_dir_for)
from ansible_collections.llmops.sglang.plugins.module_utils.moe_roofline import kernel_table, moe_roofline
from ansible_collections.llmops.sglang.plugins.module_utils.moe_search_space import (
    compute_bound_search_space, prefilter_search_space, smem_bytes)
from ansible_collections.llmops.sglang.plugins.module_utils.moe_shapes import checkpoint_dtype_selector, model_moe_shape
from ansible_collections.llmops.sglang.plugins.module_utils.moe_targets import (
    expected_tuner_output_name, moe_config_targets, reconcile_targets, tuner_arguments)
from ansible_collections.llmops.sglang.plugins.module_utils.moe_tuner_output import (
    parse_down_tuner_output, parse_tuner_benchmark_output, parse_tuner_tune_output)
from ansible_collections.llmops.sglang.plugins.module_utils.moe_validation import validate_config

FIXTURES = Path(__file__).resolve().parents[3] / "fixtures" / "moe_configs"
H200_UP = "E=257,N=256,device_name=NVIDIA_H200,dtype=fp8_w8a8,block_shape=[128, 128].json"
H200_DOWN = "E=257,N=256,device_name=NVIDIA_H200,dtype=fp8_w8a8,block_shape=[128, 128]_down.json"
RTX_UP = "E=256,N=512,device_name=NVIDIA_RTX_PRO_6000_Blackwell_Server_Edition.json"
RTX_DOWN = "E=256,N=512,device_name=NVIDIA_RTX_PRO_6000_Blackwell_Server_Edition_down.json"
RTX_PRO = "NVIDIA RTX PRO 6000 Blackwell Server Edition"
SM120_SMEM = 101376
CONFIG_ROOT = "/opt/sglang/venv/lib/python3.11/site-packages/sglang/srt/layers/moe/moe_runner/triton_utils/configs"


def _upstream_names() -> list[str]:
    lines = (FIXTURES / "upstream_names.txt").read_text().splitlines()
    return [line for line in lines if line and not line.startswith("#")]


def _hf(name: str) -> dict:
    return json.loads((FIXTURES / "hf_configs" / f"{name}.json").read_text())


def _sample(name: str) -> dict:
    return json.loads((FIXTURES / name).read_text())


# --- file names ---------------------------------------------------------------------------------


def test_fixture_has_at_least_30_upstream_names():
    assert len(_upstream_names()) >= 30


@pytest.mark.parametrize("name", _upstream_names())
def test_upstream_name_round_trips(name):
    parsed = parse_config_file_name(name)
    if name.startswith("E="):
        assert parsed is not None
        assert config_file_name(**parsed) == name
    else:
        assert parsed is None


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        (
            H200_DOWN,
            {"E": 257, "N": 256, "device_name": "NVIDIA_H200", "dtype": "fp8_w8a8", "block_shape": [128, 128],
             "per_channel_quant": False, "down": True},
        ),
        (
            "E=384,N=128,device_name=,dtype=int4_w4a16.json",
            {"E": 384, "N": 128, "device_name": "", "dtype": "int4_w4a16", "block_shape": None,
             "per_channel_quant": False, "down": False},
        ),
        (
            "E=160,N=384,device_name=NVIDIA_RTX_PRO_6000_Blackwell_Server_Edition,dtype=fp8_w8a8_down.json",
            {"E": 160, "N": 384, "device_name": "NVIDIA_RTX_PRO_6000_Blackwell_Server_Edition", "dtype": "fp8_w8a8",
             "block_shape": None, "per_channel_quant": False, "down": True},
        ),
        (
            "E=64,N=896,device_name=Intel(R)_Arc(TM)_B580_Graphics_down.json",
            {"E": 64, "N": 896, "device_name": "Intel(R)_Arc(TM)_B580_Graphics", "dtype": None, "block_shape": None,
             "per_channel_quant": False, "down": True},
        ),
        (
            "E=8,N=7168,device_name=NVIDIA_H100_80GB_HBM3,dtype=int8_w8a8,per_channel_quant=True.json",
            {"E": 8, "N": 7168, "device_name": "NVIDIA_H100_80GB_HBM3", "dtype": "int8_w8a8", "block_shape": None,
             "per_channel_quant": True, "down": False},
        ),
    ],
)
def test_parse_config_file_name_fields(name, expected):
    assert parse_config_file_name(name) == expected


@pytest.mark.parametrize(
    "name",
    [
        "E=257,N=256,device_name=NVIDIA_H200.json.bak",
        "E=abc,N=256,device_name=NVIDIA_H200.json",
        "configs/triton_3_5_1/" + H200_UP,
        "tuning_result_2026-03-09 21:31:15.txt",
    ],
)
def test_parse_config_file_name_rejects_non_config_names(name):
    assert parse_config_file_name(name) is None


def test_config_file_name_replaces_spaces_and_renders_block_shape_like_python():
    name = config_file_name(257, 256, "NVIDIA H200", "fp8_w8a8", [128, 128], down=True)
    assert name == H200_DOWN


def test_config_file_name_omits_group_wise_block_shape_and_empty_device():
    assert config_file_name(384, 128, "", "int4_w4a16", [0, 32]) == "E=384,N=128,device_name=,dtype=int4_w4a16.json"


def test_config_file_name_per_channel_quant_precedes_down_suffix():
    name = config_file_name(8, 7168, "NVIDIA H100 80GB HBM3", "fp8_w8a8", None, per_channel_quant=True, down=True)
    assert name == "E=8,N=7168,device_name=NVIDIA_H100_80GB_HBM3,dtype=fp8_w8a8,per_channel_quant=True_down.json"


def test_device_name_for_only_replaces_spaces():
    assert device_name_for(RTX_PRO) == "NVIDIA_RTX_PRO_6000_Blackwell_Server_Edition"
    assert device_name_for("NVIDIA A800-SXM4-80GB") == "NVIDIA_A800-SXM4-80GB"
    assert device_name_for("Intel(R) Arc(TM) B580 Graphics") == "Intel(R)_Arc(TM)_B580_Graphics"


@pytest.mark.parametrize(
    ("version", "directory"),
    [
        ("3.6.0", "triton_3_6_0"),
        ("3.5.1", "triton_3_5_1"),
        ("3.6.0+git1a2b3c4d", "triton_3_6_0+git1a2b3c4d"),
        ("3.6.0.post1", "triton_3_6_0_post1"),
    ],
)
def test_triton_dir_for_is_verbatim_dot_replacement(version, directory):
    assert triton_dir_for(version) == directory


def test_triton_dir_for_rejects_empty_version():
    with pytest.raises(ValueError, match="empty"):
        triton_dir_for(" ")


# --- model shape --------------------------------------------------------------------------------


def test_model_moe_shape_deepseek_v3_fp8_block():
    assert model_moe_shape(_hf("deepseek_v3_fp8")) == {
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
    shape = model_moe_shape(_hf("qwen3_5_moe_style_bf16"))
    assert shape["architecture"] == "Qwen3_5MoeForConditionalGeneration"
    assert (shape["num_experts"], shape["topk"], shape["hidden_size"], shape["moe_intermediate_size"]) == (256, 8, 3072, 1024)
    assert shape["shared_expert_fusable"] is False
    assert (shape["dtype"], shape["block_shape"], shape["quant_method"]) == ("bfloat16", None, None)


def test_model_moe_shape_mixtral_and_gpt_oss_use_local_experts_and_intermediate_size():
    mixtral = model_moe_shape(_hf("mixtral_8x7b_instruct"))
    assert (mixtral["num_experts"], mixtral["topk"], mixtral["moe_intermediate_size"]) == (8, 2, 14336)
    gpt_oss = model_moe_shape(_hf("gpt_oss_120b"))
    assert (gpt_oss["num_experts"], gpt_oss["topk"], gpt_oss["moe_intermediate_size"]) == (128, 4, 2880)
    assert gpt_oss["quant_method"] == "mxfp4"


def test_model_moe_shape_compressed_tensors_group_size_gives_zero_block():
    shape = model_moe_shape(_hf("kimi_k2_thinking_int4"))
    assert shape["block_shape"] == [0, 32]
    assert shape["quant_method"] == "compressed-tensors"


def test_model_moe_shape_glm4_moe_is_fusable():
    shape = model_moe_shape(_hf("glm_4_5_air_fp8"))
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
    config = _hf(fixture)
    shape = model_moe_shape(config)
    up = moe_config_targets(config, tp, 1, "NVIDIA H200", "3.6.0")[0]
    assert (up["E"], up["N"], shape["experts_key"], shape["intermediate_key"], shape["shared_expert_fusable"]) == expected


def test_the_tuner_reads_unlisted_architectures_with_mixtrals_keys():
    # PhiMoE has Mixtral's keys: the tuner writes the name the server looks up.
    phi = _hf("phi_3_5_moe_instruct")
    assert expected_tuner_output_name(phi, 2, 1, "NVIDIA H200", ["--dtype", "auto"]) == (
        moe_config_targets(phi, 2, 1, "NVIDIA H200", "3.6.0")[0]["file_name"])
    # OLMoE keeps its experts in num_experts: SGLang serves it, but its tuner cannot read it.
    with pytest.raises(ValueError, match="SGLang's tuner reads OlmoeForCausalLM with Mixtral's .* keys "
                                         "num_local_experts/intermediate_size, which this config.json lacks"):
        expected_tuner_output_name(_hf("olmoe_1b_7b_0924"), 1, 1, "NVIDIA H200", ["--dtype", "auto"])


def test_model_moe_shape_missing_key_names_it():
    config = _hf("mixtral_8x7b_instruct")
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
    assert checkpoint_dtype_selector(_hf(model)) == selector


def test_checkpoint_dtype_selector_float32_and_unknown_quant():
    fp32 = {**_hf("mixtral_8x7b_instruct"), "torch_dtype": "float32"}
    assert checkpoint_dtype_selector(fp32) == "float32"
    awq = {**_hf("mixtral_8x7b_instruct"), "quantization_config": {"quant_method": "awq", "bits": 4}}
    with pytest.raises(ValueError, match="quant_method='awq'"):
        checkpoint_dtype_selector(awq)


# --- targets ------------------------------------------------------------------------------------


def test_targets_deepseek_v3_tp8_fp8_block_on_h200():
    targets = moe_config_targets(_hf("deepseek_v3_fp8"), 8, 1, "NVIDIA H200", "3.5.1")
    assert targets == [
        {"kernel": "up", "file_name": H200_UP, "triton_dir": "triton_3_5_1", "E": 257, "N": 256,
         "dtype": "fp8_w8a8", "block_shape": [128, 128]},
        {"kernel": "down", "file_name": H200_DOWN, "triton_dir": "triton_3_5_1", "E": 257, "N": 256,
         "dtype": "fp8_w8a8", "block_shape": [128, 128]},
    ]


def test_targets_qwen3_5_style_tp4_bf16_on_rtx_pro_triton_3_6_0():
    up, down = moe_config_targets(_hf("qwen3_5_moe_style_bf16"), 4, 1, RTX_PRO, "3.6.0")
    assert up["file_name"] == "E=256,N=256,device_name=NVIDIA_RTX_PRO_6000_Blackwell_Server_Edition.json"
    assert down["file_name"] == "E=256,N=256,device_name=NVIDIA_RTX_PRO_6000_Blackwell_Server_Edition_down.json"
    assert up["triton_dir"] == "triton_3_6_0"
    assert up["dtype"] is None


def test_targets_mixtral_tp2_h100():
    up, _ = moe_config_targets(_hf("mixtral_8x7b_instruct"), 2, 1, "NVIDIA H100 80GB HBM3", "3.3.1")
    assert up["file_name"] == "E=8,N=7168,device_name=NVIDIA_H100_80GB_HBM3.json"


def test_targets_disable_shared_experts_fusion_keeps_routed_experts_only():
    up, down = moe_config_targets(_hf("deepseek_v3_fp8"), 8, 1, "NVIDIA H200", "3.5.1", disable_shared_experts_fusion=True)
    assert up["E"] == down["E"] == 256
    assert up["file_name"] == "E=256,N=256,device_name=NVIDIA_H200,dtype=fp8_w8a8,block_shape=[128, 128].json"


def test_targets_expert_parallel_divides_experts_not_intermediate():
    up, _ = moe_config_targets(_hf("deepseek_v3_fp8"), 8, 8, "NVIDIA H200", "3.5.1")
    assert (up["E"], up["N"]) == (33, 2048)
    up, _ = moe_config_targets(_hf("qwen3_next_80b_a3b_fp8"), 8, 2, "NVIDIA H200", "3.6.0")
    assert (up["E"], up["N"]) == (256, 128)
    assert up["file_name"] == "E=256,N=128,device_name=NVIDIA_H200,dtype=fp8_w8a8,block_shape=[128, 128].json"


@pytest.mark.parametrize(
    ("model", "tp", "gpu", "options", "upstream_name"),
    [
        ("glm_4_5_air_fp8", 4, "NVIDIA RTX PRO 6000 Blackwell Max-Q Workstation Edition", {},
         "E=129,N=352,device_name=NVIDIA_RTX_PRO_6000_Blackwell_Max-Q_Workstation_Edition,dtype=fp8_w8a8.json"),
        ("kimi_k2_thinking_int4", 16, "", {"disable_shared_experts_fusion": True},
         "E=384,N=128,device_name=,dtype=int4_w4a16.json"),
        ("qwen3_next_80b_a3b_fp8", 4, "NVIDIA H200", {},
         "E=512,N=128,device_name=NVIDIA_H200,dtype=fp8_w8a8,block_shape=[128, 128]_down.json"),
    ],
)
def test_targets_reproduce_upstream_names(model, tp, gpu, options, upstream_name):
    names = [target["file_name"] for target in moe_config_targets(_hf(model), tp, 1, gpu, "3.6.0", **options)]
    assert upstream_name in names
    assert upstream_name in _upstream_names()


def test_targets_dtype_override_for_online_fp8_quantization():
    up, _ = moe_config_targets(_hf("mixtral_8x7b_instruct"), 2, 1, "NVIDIA H100 80GB HBM3", "3.5.1", dtype="fp8_w8a8")
    assert up["file_name"] == "E=8,N=7168,device_name=NVIDIA_H100_80GB_HBM3,dtype=fp8_w8a8.json"


def test_targets_empty_dtype_forces_no_selector_for_unmapped_quant():
    awq = {**_hf("mixtral_8x7b_instruct"), "quantization_config": {"quant_method": "awq", "bits": 4}}
    up, _ = moe_config_targets(awq, 2, 1, "NVIDIA H100 80GB HBM3", "3.5.1", dtype="")
    assert up["file_name"] == "E=8,N=7168,device_name=NVIDIA_H100_80GB_HBM3.json"


@pytest.mark.parametrize(
    ("model", "tp", "ep", "message"),
    [
        ("deepseek_v3_fp8", 8, 3, "tp_size=8 must be a positive multiple of ep_size=3"),
        ("mixtral_8x7b_instruct", 3, 1, r"not divisible by tp_size // ep_size = 3 \(tp_size=3, ep_size=1\)"),
        ("mixtral_8x7b_instruct", 6, 3, "num_experts=8 is not divisible by ep_size=3"),
    ],
)
def test_targets_reject_impossible_parallelism(model, tp, ep, message):
    with pytest.raises(ValueError, match=message):
        moe_config_targets(_hf(model), tp, ep, "NVIDIA H200", "3.5.1")


# --- tuner arguments and the dtype trap -----------------------------------------------------------


def test_tuner_arguments_choose_dtype_and_flags():
    assert tuner_arguments(None, False, False) == ["--dtype", "auto"]
    assert tuner_arguments("fp8_w8a8", True, True) == [
        "--dtype", "fp8_w8a8", "--per-channel-quant", "--disable-shared-experts-fusion"
    ]
    assert tuner_arguments("float32", False, False) == ["--dtype", "auto"]
    with pytest.raises(ValueError, match="w4a8"):
        tuner_arguments("w4a8", False, False)


def test_fp8_checkpoint_needs_explicit_tuner_dtype():
    model = _hf("deepseek_v3_fp8")
    up = moe_config_targets(model, 8, 1, "NVIDIA H200", "3.5.1")[0]
    naive = expected_tuner_output_name(model, 8, 1, "NVIDIA H200", ["--dtype", "auto"])
    assert naive == "E=257,N=256,device_name=NVIDIA_H200,block_shape=[128, 128].json"
    assert naive != up["file_name"]
    arguments = tuner_arguments(up["dtype"], False, False)
    assert arguments == ["--dtype", "fp8_w8a8"]
    assert expected_tuner_output_name(model, 8, 1, "NVIDIA H200", arguments) == up["file_name"]


def test_expected_tuner_output_name_follows_fusion_flag_and_equals_form():
    model = _hf("deepseek_v3_fp8")
    arguments = ["--tp-size", "8", "--dtype=fp8_w8a8", "--disable-shared-experts-fusion"]
    assert expected_tuner_output_name(model, 8, 1, "NVIDIA H200", arguments) == (
        "E=256,N=256,device_name=NVIDIA_H200,dtype=fp8_w8a8,block_shape=[128, 128].json"
    )


def test_expected_tuner_output_name_bf16_matches_server_target():
    model = _hf("qwen3_5_moe_style_bf16")
    up = moe_config_targets(model, 4, 1, RTX_PRO, "3.6.0")[0]
    arguments = tuner_arguments(up["dtype"], False, False)
    assert expected_tuner_output_name(model, 4, 1, RTX_PRO, arguments) == up["file_name"]


def test_expected_tuner_output_name_rejects_invalid_dtype_choice():
    with pytest.raises(ValueError, match="invalid tuner --dtype 'bf16'"):
        expected_tuner_output_name(_hf("mixtral_8x7b_instruct"), 2, 1, "NVIDIA H100 80GB HBM3", ["--dtype", "bf16"])


# --- reconcile with the server log ----------------------------------------------------------------


def test_reconcile_agrees_and_attaches_install_dir():
    derived = moe_config_targets(_hf("qwen3_5_moe_style_bf16"), 4, 1, RTX_PRO, "3.6.0")
    logged = [f"{CONFIG_ROOT}/triton_3_6_0/{derived[0]['file_name']}", f"{CONFIG_ROOT}/triton_3_6_0/{derived[1]['file_name']}"]
    # Every TP rank logs the same warning: four ranks, duplicated paths.
    result = reconcile_targets(derived, logged * 4)
    assert result["agree"] is True
    assert result["only_in_log"] == [] and result["only_derived"] == []
    assert [target["path"] for target in result["targets"]] == logged
    assert result["targets"][0]["install_dir"] == f"{CONFIG_ROOT}/triton_3_6_0"
    assert result["targets"][1]["kernel"] == "down"
    assert "agree on 2" in result["message"]


def test_reconcile_disagrees_when_server_disabled_shared_expert_fusion():
    derived = moe_config_targets(_hf("deepseek_v3_fp8"), 8, 1, "NVIDIA H200", "3.5.1")
    logged = [
        f"{CONFIG_ROOT}/triton_3_5_1/E=256,N=256,device_name=NVIDIA_H200,dtype=fp8_w8a8,block_shape=[128, 128].json",
        f"{CONFIG_ROOT}/triton_3_5_1/{H200_DOWN}",
    ]
    result = reconcile_targets(derived, logged)
    assert result["agree"] is False
    assert result["only_in_log"] == [logged[0]]
    assert result["only_derived"] == [f"triton_3_5_1/{H200_UP}"]
    assert [target["kernel"] for target in result["targets"]] == ["down"]
    assert logged[0] in result["message"] and f"triton_3_5_1/{H200_UP}" in result["message"]


def test_reconcile_detects_triton_version_mismatch():
    derived = moe_config_targets(_hf("mixtral_8x7b_instruct"), 2, 1, "NVIDIA H100 80GB HBM3", "3.6.0")
    logged = [f"{CONFIG_ROOT}/triton_3_5_1/{target['file_name']}" for target in derived]
    result = reconcile_targets(derived, logged)
    assert result["agree"] is False
    assert result["targets"] == []
    assert len(result["only_in_log"]) == 2 and len(result["only_derived"]) == 2


# --- validation ---------------------------------------------------------------------------------


@pytest.mark.parametrize(("name", "kernel"), [(H200_UP, "up"), (H200_DOWN, "down"), (RTX_UP, "up"), (RTX_DOWN, "down")])
def test_upstream_sample_configs_are_valid(name, kernel):
    assert validate_config(_sample(name), kernel=kernel) == []


def test_validate_config_reports_bad_entries():
    data = {
        "1": {"BLOCK_SIZE_M": "16", "BLOCK_SIZE_N": 64, "BLOCK_SIZE_K": 64, "GROUP_SIZE_M": 1, "num_warps": 4, "num_stages": 4},
        "16": {"BLOCK_SIZE_M": 16, "BLOCK_SIZE_N": 64, "BLOCK_SIZE_K": 64, "num_warps": 4, "num_stages": 4},
        "abc": {"BLOCK_SIZE_M": 16, "BLOCK_SIZE_N": 64, "BLOCK_SIZE_K": 64, "GROUP_SIZE_M": 1, "num_warps": 4, "num_stages": 4},
        "64": {"BLOCK_SIZE_M": 48, "BLOCK_SIZE_N": 512, "BLOCK_SIZE_K": 64, "GROUP_SIZE_M": 0, "num_warps": 3,
               "num_stages": 9, "USE_TMA": "yes", "split_k": 2},
        "128": {"BLOCK_SIZE_M": True, "BLOCK_SIZE_N": 64, "BLOCK_SIZE_K": 64, "GROUP_SIZE_M": 16, "num_warps": 4, "num_stages": 3},
    }
    assert validate_config(data, kernel="down") == [
        "down config, batch size 1: BLOCK_SIZE_M='16' is not an integer",
        "down config, batch size 16: missing GROUP_SIZE_M",
        "down config: key 'abc' is not a positive integer batch size",
        "down config, batch size 64: unknown key 'split_k'",
        "down config, batch size 64: BLOCK_SIZE_M=48 is not a power of two in 16..256",
        "down config, batch size 64: BLOCK_SIZE_N=512 is not a power of two in 16..256",
        "down config, batch size 64: GROUP_SIZE_M=0 is outside 1..64",
        "down config, batch size 64: num_warps=3 is not one of (1, 2, 4, 8, 16)",
        "down config, batch size 64: num_stages=9 is outside 1..8",
        "down config, batch size 64: USE_TMA='yes' is not a boolean",
        "down config, batch size 128: BLOCK_SIZE_M=True is not an integer",
    ]


def test_validate_config_accepts_rocm_fields():
    entry = {"BLOCK_SIZE_M": 32, "BLOCK_SIZE_N": 16, "BLOCK_SIZE_K": 256, "GROUP_SIZE_M": 4, "num_warps": 1,
             "num_stages": 2, "waves_per_eu": 0, "kpack": 2}
    assert validate_config({"4096": entry}, kernel="up") == []


@pytest.mark.parametrize(
    ("data", "error"),
    [
        ([{"BLOCK_SIZE_M": 16}], "up config is list, not a JSON object of batch sizes"),
        ({}, "up config has no batch-size entries"),
        ({"0": {}}, "up config: key '0' is not a positive integer batch size"),
        ({"08": {}}, "up config: key '08' is not a positive integer batch size"),
        ({"8": [16, 64]}, "up config, batch size 8: entry is list, not an object"),
    ],
)
def test_validate_config_rejects_malformed_documents(data, error):
    assert validate_config(data, kernel="up") == [error]


def test_validate_config_rejects_unknown_kernel():
    with pytest.raises(ValueError, match="'gate'"):
        validate_config({}, kernel="gate")


# --- search space and smem ----------------------------------------------------------------------


def test_search_space_sizes_and_sglang_order():
    space = compute_bound_search_space()
    assert len(space) == 1920
    assert space[0] == {"BLOCK_SIZE_M": 16, "BLOCK_SIZE_N": 32, "BLOCK_SIZE_K": 64, "GROUP_SIZE_M": 1, "num_warps": 4, "num_stages": 2}
    assert space[-1] == {"BLOCK_SIZE_M": 256, "BLOCK_SIZE_N": 256, "BLOCK_SIZE_K": 256, "GROUP_SIZE_M": 64, "num_warps": 8, "num_stages": 5}
    block = compute_bound_search_space([128, 128])
    assert len(block) == 1280
    assert {config["BLOCK_SIZE_K"] for config in block} == {64, 128}


def test_smem_of_the_sm120_crash_config():
    crash = {"BLOCK_SIZE_M": 128, "BLOCK_SIZE_N": 256, "BLOCK_SIZE_K": 128, "GROUP_SIZE_M": 1, "num_warps": 8, "num_stages": 4}
    assert smem_bytes(crash, 1) == 147456 > SM120_SMEM
    assert smem_bytes(crash, 1, formula="sglang") == 196608
    assert smem_bytes({**crash, "num_stages": 2}, 1) == 49152
    assert smem_bytes({**crash, "num_stages": 1}, 1) == 49152
    with pytest.raises(ValueError, match="formula"):
        smem_bytes(crash, 1, formula="cutlass")


def test_smem_with_different_operand_widths():
    config = {"BLOCK_SIZE_M": 64, "BLOCK_SIZE_N": 128, "BLOCK_SIZE_K": 128, "num_stages": 3}
    # bf16 activations against int8 weights: 2 * (64*128*2 + 128*128*1)
    assert smem_bytes(config, 2, 1) == 65536


def test_prefilter_for_sm120():
    space = compute_bound_search_space()
    kept, dropped = prefilter_search_space(space, SM120_SMEM, 2)
    assert (len(kept), dropped) == (976, 944)
    kept_fp8, dropped_fp8 = prefilter_search_space(space, SM120_SMEM, 1)
    assert (len(kept_fp8), dropped_fp8) == (1456, 464)
    largest_bf16 = {"BLOCK_SIZE_M": 128, "BLOCK_SIZE_N": 256, "BLOCK_SIZE_K": 128, "GROUP_SIZE_M": 1, "num_warps": 4, "num_stages": 2}
    assert largest_bf16 in kept and {**largest_bf16, "num_stages": 3} not in kept
    assert all(smem_bytes(config, 2) <= SM120_SMEM for config in kept)


# --- batch sizes --------------------------------------------------------------------------------


def test_default_batch_sizes_match_the_tuner():
    assert len(DEFAULT_BATCH_SIZES) == 18
    assert DEFAULT_BATCH_SIZES[:6] == (1, 2, 4, 8, 16, 24) and DEFAULT_BATCH_SIZES[-1] == 4096


def test_auto_batch_sizes_speculative_decoding_with_chunked_prefill():
    result = auto_batch_sizes(26, 4, 8192)
    assert result["batch_sizes"] == [1, 2, 4, 8, 16, 24, 32, 48, 64, 96, 104, 128, 256, 512, 1024, 1536, 2048, 3072, 4096, 8192]
    assert "26 running requests x 4 draft tokens" in result["reasoning"]
    assert "= 104 tokens" in result["reasoning"]
    assert "chunked_prefill_size=8192" in result["reasoning"]


def test_auto_batch_sizes_plain_decode_small_chunk():
    result = auto_batch_sizes(48, None, 2048)
    assert result["batch_sizes"] == [1, 2, 4, 8, 16, 24, 32, 48, 64, 96, 128, 256, 512, 1024, 1536, 2048]
    assert "48 running requests x 1 token per step" in result["reasoning"]


def test_auto_batch_sizes_without_chunked_prefill():
    result = auto_batch_sizes(40, None, -1)
    assert result["batch_sizes"] == [1, 2, 4, 8, 16, 24, 32, 40]
    assert "no prefill sizes" in result["reasoning"]


def test_auto_batch_sizes_rejects_nonsense():
    with pytest.raises(ValueError, match="max_running_requests=0"):
        auto_batch_sizes(0, None, 8192)
    with pytest.raises(ValueError, match="speculative_num_draft_tokens=0"):
        auto_batch_sizes(8, 0, 8192)


# --- roofline -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("M", "shape", "bandwidth", "experts_active", "weight_mb", "bound_us"),
    [
        # Qwen3.5-35B FP8 E256 N512 K2048 on RTX PRO 6000 (1792 GB/s)
        (1, (256, 8, 2048, 512, 1), 1792, 8, 25, 14.1),
        (4, (256, 8, 2048, 512, 1), 1792, 30.5, 96, 53.8),
        (8, (256, 8, 2048, 512, 1), 1792, 57.4, 181, 101),
        (96, (256, 8, 2048, 512, 1), 1792, 244, 767, 433),
        # Mixtral TP2 bf16 on H100 (3350 GB/s)
        (1, (8, 2, 4096, 7168, 2), 3350, 2, 352, 105),
        (16, (8, 2, 4096, 7168, 2), 3350, 7.9, 1395, 417),
        (1024, (8, 2, 4096, 7168, 2), 3350, 8, 1409, 483),
        # Qwen3-30B-A3B bf16 TP1 on H200 (4800 GB/s)
        (8, (128, 8, 2048, 768, 2), 4800, 51.6, 487, 102),
        (4096, (128, 8, 2048, 768, 2), 4800, 128, 1208, 350),
        # Qwen3-235B FP8 TP8 on H200
        (32, (128, 8, 4096, 192, 1), 4800, 111.8, 264, 55.6),
    ],
)
def test_moe_roofline_matches_reference_table(M, shape, bandwidth, experts_active, weight_mb, bound_us):
    num_experts, topk, hidden, intermediate, weight_bytes = shape
    result = moe_roofline(M, num_experts, topk, hidden, intermediate, weight_bytes, bandwidth)
    assert result["experts_active"] == pytest.approx(experts_active, rel=0.02)
    assert result["weight_bytes_touched"] / 1e6 == pytest.approx(weight_mb, rel=0.02)
    assert result["bound_us"] == pytest.approx(bound_us, rel=0.02)


def test_roofline_from_checkpoint_shape_and_target():
    model = _hf("qwen3_5_35b_a3b_fp8")
    shape = model_moe_shape(model)
    up = moe_config_targets(model, 1, 1, RTX_PRO, "3.6.0")[0]
    assert up["file_name"] == (
        "E=256,N=512,device_name=NVIDIA_RTX_PRO_6000_Blackwell_Server_Edition,dtype=fp8_w8a8,block_shape=[128, 128].json"
    )
    result = moe_roofline(4, up["E"], shape["topk"], shape["hidden_size"], up["N"], 1, 1792)
    assert result["experts_active"] == pytest.approx(30.53, abs=0.01)
    assert result["bound_us"] == pytest.approx(53.8, rel=0.01)


def test_moe_roofline_rejects_topk_above_experts():
    with pytest.raises(ValueError, match="topk=9"):
        moe_roofline(1, 8, 9, 4096, 7168, 2, 3350)


def test_kernel_table_flags_l2_artifact():
    # vllm#39183: Qwen3.5-35B FP8 on RTX PRO 6000, default vs tuned kernel times.
    before = {1: 26.1, 4: 44.0, 8: 133.9, 96: 548.2}
    after = {1: 24.7, 4: 41.3, 8: 135.0, 96: 541.0, 512: 1210.0}
    rows = kernel_table(before, after, num_experts=256, topk=8, hidden_size=2048, intermediate_per_shard=512,
                        weight_bytes=1, bandwidth_gbs=1792)
    by_m = {row["batch_size"]: row for row in rows}
    assert [row["batch_size"] for row in rows] == [1, 4, 8, 96, 512]
    assert by_m[4]["pct_of_roofline_after"] == pytest.approx(130, rel=0.02)
    assert by_m[4]["artifact"] is True
    assert by_m[1]["pct_of_roofline_after"] == pytest.approx(57, rel=0.02)
    assert by_m[96]["pct_of_roofline_after"] == pytest.approx(80, rel=0.02)
    assert [by_m[m]["artifact"] for m in (1, 8, 96)] == [False, False, False]
    assert by_m[1]["speedup"] == pytest.approx(26.1 / 24.7)
    assert by_m[8]["speedup"] < 1
    assert by_m[512]["before_us"] is None and by_m[512]["speedup"] is None
    assert by_m[512]["roofline_us"] == pytest.approx(moe_roofline(512, 256, 8, 2048, 512, 1, 1792)["bound_us"])


# --- tuner output parsers -----------------------------------------------------------------------

BENCHMARK_OUTPUT = """\
2026-03-10 09:02:11,514	INFO worker.py:1918 -- Started a local Ray instance. View the dashboard at 127.0.0.1:8265
Batch size: 1, config: {'BLOCK_SIZE_M': 16, 'BLOCK_SIZE_N': 64, 'BLOCK_SIZE_K': 64, 'GROUP_SIZE_M': 32, 'num_warps': 4, 'num_stages': 4}
Kernel time: 57.31 us
Batch size: 2, config: {'BLOCK_SIZE_M': 16, 'BLOCK_SIZE_N': 64, 'BLOCK_SIZE_K': 64, 'GROUP_SIZE_M': 32, 'num_warps': 4, 'num_stages': 4}
Kernel time: 88.02 us
Batch size: 4096, config: {'BLOCK_SIZE_M': 128, 'BLOCK_SIZE_N': 128, 'BLOCK_SIZE_K': 64, 'GROUP_SIZE_M': 16, 'num_warps': 8, 'num_stages': 3, 'USE_TMA': False}
Kernel time: 2381.70 us
"""

TUNE_OUTPUT = """\
2026-03-10 09:14:40,022	INFO worker.py:1918 -- Started a local Ray instance. View the dashboard at 127.0.0.1:8265
Start tuning over 1280 configurations to create E=257,N=256,device_name=NVIDIA_H200,dtype=fp8_w8a8,block_shape=[128, 128].json...
(BenchmarkWorker pid=48213) Tue Mar 10 10:41:07 2026] Completed tuning for batch_size=1
(BenchmarkWorker pid=48214) Tue Mar 10 10:43:55 2026] Completed tuning for batch_size=2
(BenchmarkWorker pid=48213) Tue Mar 10 12:05:19 2026] Completed tuning for batch_size=16
(BenchmarkWorker pid=48215) Tue Mar 10 12:07:02 2026] Completed tuning for batch_size=4
Writing best config to E=257,N=256,device_name=NVIDIA_H200,dtype=fp8_w8a8,block_shape=[128, 128].json...
Tuning took 10582.43 seconds
"""

DOWN_OUTPUT = """\
M=1: best down {'BLOCK_SIZE_M': 16, 'BLOCK_SIZE_N': 128, 'BLOCK_SIZE_K': 128, 'GROUP_SIZE_M': 16, 'num_warps': 4, 'num_stages': 2, 'USE_TMA': True} (21.4us)
M=256: best down {'BLOCK_SIZE_M': 64, 'BLOCK_SIZE_N': 128, 'BLOCK_SIZE_K': 128, 'GROUP_SIZE_M': 1, 'num_warps': 4, 'num_stages': 3} (164.9us)
wrote ./E=257,N=256,device_name=NVIDIA_H200,dtype=fp8_w8a8,block_shape=[128, 128]_down.json
"""


def test_parse_tuner_benchmark_output():
    results = parse_tuner_benchmark_output(BENCHMARK_OUTPUT)
    assert sorted(results) == [1, 2, 4096]
    assert results[1]["kernel_us"] == 57.31
    assert results[1]["config"]["GROUP_SIZE_M"] == 32
    assert results[4096] == {
        "config": {"BLOCK_SIZE_M": 128, "BLOCK_SIZE_N": 128, "BLOCK_SIZE_K": 64, "GROUP_SIZE_M": 16, "num_warps": 8,
                   "num_stages": 3, "USE_TMA": False},
        "kernel_us": 2381.70,
    }


def test_parse_tuner_benchmark_output_keeps_batch_without_time():
    truncated = BENCHMARK_OUTPUT.rsplit("Kernel time", 1)[0]
    assert parse_tuner_benchmark_output(truncated)[4096]["kernel_us"] is None


def test_parse_tuner_tune_output_finished_run():
    assert parse_tuner_tune_output(TUNE_OUTPUT) == {
        "configs_total": 1280,
        "file_name": H200_UP,
        "completed_batch_sizes": [1, 2, 4, 16],
        "seconds": 10582.43,
        "written": True,
    }


def test_parse_tuner_tune_output_interrupted_run_is_not_written():
    partial = TUNE_OUTPUT.split("Writing best config")[0]
    result = parse_tuner_tune_output(partial)
    assert result["written"] is False and result["seconds"] is None
    assert result["file_name"] == H200_UP
    assert result["completed_batch_sizes"] == [1, 2, 4, 16]


def test_parse_down_tuner_output():
    result = parse_down_tuner_output(DOWN_OUTPUT)
    assert result["output_path"] == f"./{H200_DOWN}"
    assert sorted(result["results"]) == [1, 256]
    assert result["results"][1]["kernel_us"] == 21.4
    assert result["results"][1]["config"]["USE_TMA"] is True
    assert result["results"][256]["config"]["BLOCK_SIZE_M"] == 64
    assert validate_config({str(m): r["config"] for m, r in result["results"].items()}, kernel="down") == []
