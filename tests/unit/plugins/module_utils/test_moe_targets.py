# Copyright (c) llmops.sglang contributors
# Apache License 2.0 (see LICENSE)
"""Unit tests for plugins/module_utils/moe_targets.py (the moe_targets filter's logic among them).

Fixtures live in tests/fixtures/moe_configs/ (see its README for the upstream provenance).
"""
from __future__ import annotations

import json

import pytest

from ansible_collections.llmops.sglang.plugins.module_utils.moe_targets import (
    down_tuner_arguments, expected_down_tuner_output_name, expected_tuner_output_name, moe_config_targets,
    moe_targets, reconcile_targets, tuner_arguments)
from tests.unit.plugins.module_utils.moe_fixtures import (
    CONFIG_ROOT, FIXTURES, H200_DOWN, H200_UP, RTX_PRO, hf, upstream_names)

QWEN_TP4_UP = "E=256,N=256,device_name=NVIDIA_RTX_PRO_6000_Blackwell_Server_Edition.json"
QWEN_TP4_DOWN = "E=256,N=256,device_name=NVIDIA_RTX_PRO_6000_Blackwell_Server_Edition_down.json"


def _logged(names: list[str], triton_dir: str = "triton_3_6_0") -> list[str]:
    return [f"{CONFIG_ROOT}/{triton_dir}/{name}" for name in names]


# --- targets ---------------------------------------------------------------------------------


def test_targets_deepseek_v3_tp8_fp8_block_on_h200():
    targets = moe_config_targets(hf("deepseek_v3_fp8"), 8, 1, "NVIDIA H200", "3.5.1")
    assert targets == [
        {"kernel": "up", "file_name": H200_UP, "triton_dir": "triton_3_5_1", "E": 257, "N": 256,
         "dtype": "fp8_w8a8", "block_shape": [128, 128]},
        {"kernel": "down", "file_name": H200_DOWN, "triton_dir": "triton_3_5_1", "E": 257, "N": 256,
         "dtype": "fp8_w8a8", "block_shape": [128, 128]},
    ]


def test_targets_qwen3_5_style_tp4_bf16_on_rtx_pro_triton_3_6_0():
    up, down = moe_config_targets(hf("qwen3_5_moe_style_bf16"), 4, 1, RTX_PRO, "3.6.0")
    assert up["file_name"] == "E=256,N=256,device_name=NVIDIA_RTX_PRO_6000_Blackwell_Server_Edition.json"
    assert down["file_name"] == "E=256,N=256,device_name=NVIDIA_RTX_PRO_6000_Blackwell_Server_Edition_down.json"
    assert up["triton_dir"] == "triton_3_6_0"
    assert up["dtype"] is None


def test_targets_mixtral_tp2_h100():
    up, _ = moe_config_targets(hf("mixtral_8x7b_instruct"), 2, 1, "NVIDIA H100 80GB HBM3", "3.3.1")
    assert up["file_name"] == "E=8,N=7168,device_name=NVIDIA_H100_80GB_HBM3.json"


def test_targets_disable_shared_experts_fusion_keeps_routed_experts_only():
    up, down = moe_config_targets(hf("deepseek_v3_fp8"), 8, 1, "NVIDIA H200", "3.5.1", disable_shared_experts_fusion=True)
    assert up["E"] == down["E"] == 256
    assert up["file_name"] == "E=256,N=256,device_name=NVIDIA_H200,dtype=fp8_w8a8,block_shape=[128, 128].json"


def test_targets_expert_parallel_divides_experts_not_intermediate():
    up, _ = moe_config_targets(hf("deepseek_v3_fp8"), 8, 8, "NVIDIA H200", "3.5.1")
    assert (up["E"], up["N"]) == (33, 2048)
    up, _ = moe_config_targets(hf("qwen3_next_80b_a3b_fp8"), 8, 2, "NVIDIA H200", "3.6.0")
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
    names = [target["file_name"] for target in moe_config_targets(hf(model), tp, 1, gpu, "3.6.0", **options)]
    assert upstream_name in names
    assert upstream_name in upstream_names()


def test_targets_dtype_override_for_online_fp8_quantization():
    up, _ = moe_config_targets(hf("mixtral_8x7b_instruct"), 2, 1, "NVIDIA H100 80GB HBM3", "3.5.1", dtype="fp8_w8a8")
    assert up["file_name"] == "E=8,N=7168,device_name=NVIDIA_H100_80GB_HBM3,dtype=fp8_w8a8.json"


def test_targets_empty_dtype_forces_no_selector_for_unmapped_quant():
    awq = {**hf("mixtral_8x7b_instruct"), "quantization_config": {"quant_method": "awq", "bits": 4}}
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
        moe_config_targets(hf(model), tp, ep, "NVIDIA H200", "3.5.1")


# --- tuner arguments and the dtype trap ------------------------------------------------------


def test_tuner_arguments_choose_dtype_and_flags():
    assert tuner_arguments(None, False, False) == ["--dtype", "auto"]
    assert tuner_arguments("fp8_w8a8", True, True) == [
        "--dtype", "fp8_w8a8", "--per-channel-quant", "--disable-shared-experts-fusion"
    ]
    assert tuner_arguments("float32", False, False) == ["--dtype", "auto"]
    with pytest.raises(ValueError, match="w4a8"):
        tuner_arguments("w4a8", False, False)


def test_fp8_checkpoint_needs_explicit_tuner_dtype():
    model = hf("deepseek_v3_fp8")
    up = moe_config_targets(model, 8, 1, "NVIDIA H200", "3.5.1")[0]
    naive = expected_tuner_output_name(model, 8, 1, "NVIDIA H200", ["--dtype", "auto"])
    assert naive == "E=257,N=256,device_name=NVIDIA_H200,block_shape=[128, 128].json"
    assert naive != up["file_name"]
    arguments = tuner_arguments(up["dtype"], False, False)
    assert arguments == ["--dtype", "fp8_w8a8"]
    assert expected_tuner_output_name(model, 8, 1, "NVIDIA H200", arguments) == up["file_name"]


def test_expected_tuner_output_name_follows_fusion_flag_and_equals_form():
    model = hf("deepseek_v3_fp8")
    arguments = ["--tp-size", "8", "--dtype=fp8_w8a8", "--disable-shared-experts-fusion"]
    assert expected_tuner_output_name(model, 8, 1, "NVIDIA H200", arguments) == (
        "E=256,N=256,device_name=NVIDIA_H200,dtype=fp8_w8a8,block_shape=[128, 128].json"
    )


def test_expected_tuner_output_name_bf16_matches_server_target():
    model = hf("qwen3_5_moe_style_bf16")
    up = moe_config_targets(model, 4, 1, RTX_PRO, "3.6.0")[0]
    arguments = tuner_arguments(up["dtype"], False, False)
    assert expected_tuner_output_name(model, 4, 1, RTX_PRO, arguments) == up["file_name"]


def test_expected_tuner_output_name_rejects_invalid_dtype_choice():
    with pytest.raises(ValueError, match="invalid tuner --dtype 'bf16'"):
        expected_tuner_output_name(hf("mixtral_8x7b_instruct"), 2, 1, "NVIDIA H100 80GB HBM3", ["--dtype", "bf16"])


# --- reconcile with the server log -----------------------------------------------------------


def test_reconcile_agrees_and_attaches_install_dir():
    derived = moe_config_targets(hf("qwen3_5_moe_style_bf16"), 4, 1, RTX_PRO, "3.6.0")
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
    derived = moe_config_targets(hf("deepseek_v3_fp8"), 8, 1, "NVIDIA H200", "3.5.1")
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
    derived = moe_config_targets(hf("mixtral_8x7b_instruct"), 2, 1, "NVIDIA H100 80GB HBM3", "3.6.0")
    logged = [f"{CONFIG_ROOT}/triton_3_5_1/{target['file_name']}" for target in derived]
    result = reconcile_targets(derived, logged)
    assert result["agree"] is False
    assert result["targets"] == []
    assert len(result["only_in_log"]) == 2 and len(result["only_derived"]) == 2


# --- the moe_targets filter's logic and the down tuner's names ---------------------------------


def test_targets_agree_with_the_log_of_every_rank():
    result = moe_targets(hf("qwen3_5_moe_style_bf16"), 4, 1, RTX_PRO, "3.6.0", _logged([QWEN_TP4_UP, QWEN_TP4_DOWN]) * 4)
    assert result["agree"] is True
    assert [(t["kernel"], t["file_name"], t["install_dir"]) for t in result["targets"]] == [
        ("up", QWEN_TP4_UP, f"{CONFIG_ROOT}/triton_3_6_0"), ("down", QWEN_TP4_DOWN, f"{CONFIG_ROOT}/triton_3_6_0")]
    assert result["tuner_args"] == ["--dtype", "auto"]
    assert result["expected_tuner_output"] == QWEN_TP4_UP
    assert [t["file_name"] for t in result["derived"]] == [QWEN_TP4_UP, QWEN_TP4_DOWN]


def test_targets_disagreement_fails_with_both_lists():
    # The server ran with --disable-shared-experts-fusion, the derivation assumed fusion (E=257).
    logged = _logged(["E=256,N=256,device_name=NVIDIA_H200,dtype=fp8_w8a8,block_shape=[128, 128].json"], "triton_3_5_1")
    with pytest.raises(ValueError) as raised:
        moe_targets(hf("deepseek_v3_fp8"), 8, 1, "NVIDIA H200", "3.5.1", logged)
    message = str(raised.value)
    assert "disagree" in message and logged[0] in message
    assert "triton_3_5_1/E=257,N=256,device_name=NVIDIA_H200,dtype=fp8_w8a8,block_shape=[128, 128].json" in message


def test_targets_fp8_checkpoint_gets_an_explicit_tuner_dtype():
    derived = moe_config_targets(hf("deepseek_v3_fp8"), 8, 1, "NVIDIA H200", "3.5.1")
    result = moe_targets(hf("deepseek_v3_fp8"), 8, 1, "NVIDIA H200", "3.5.1",
                         _logged([t["file_name"] for t in derived], "triton_3_5_1"))
    assert result["tuner_args"] == ["--dtype", "fp8_w8a8"]
    assert result["expected_tuner_output"] == derived[0]["file_name"]


def test_targets_tuner_cannot_write_the_looked_up_name():
    # A float32 selector for a BF16 checkpoint: the tuner's --dtype auto yields no selector at all.
    with pytest.raises(ValueError) as raised:
        moe_targets(hf("qwen3_5_moe_style_bf16"), 4, 1, RTX_PRO, "3.6.0", [], dtype="float32")
    message = str(raised.value)
    assert f"would write {QWEN_TP4_UP}" in message
    assert "looks up E=256,N=256,device_name=NVIDIA_RTX_PRO_6000_Blackwell_Server_Edition,dtype=float32.json" in message


def test_targets_nothing_missing_is_a_no_op():
    result = moe_targets(hf("qwen3_5_moe_style_bf16"), 4, 1, RTX_PRO, "3.6.0", [])
    assert result["targets"] == []
    assert result["message"].startswith("the server reported no missing MoE configs: nothing to tune")
    assert QWEN_TP4_UP in result["message"]


def test_down_tuner_arguments_always_pass_dtype_and_drop_per_channel():
    assert down_tuner_arguments([]) == ["--dtype", "auto"]
    assert down_tuner_arguments(["--dtype", "fp8_w8a8", "--per-channel-quant", "--disable-shared-experts-fusion"]) == [
        "--dtype", "fp8_w8a8", "--disable-shared-experts-fusion"]


def test_expected_down_name_matches_the_servers_down_target():
    for model, tp, gpu, args in (("qwen3_5_moe_style_bf16", 4, RTX_PRO, ["--dtype", "auto"]),
                                 ("deepseek_v3_fp8", 8, "NVIDIA H200", ["--dtype", "fp8_w8a8"])):
        down = moe_config_targets(hf(model), tp, 1, gpu, "3.6.0")[1]["file_name"]
        assert expected_down_tuner_output_name(hf(model), tp, 1, gpu, args) == down


def test_expected_down_name_never_carries_per_channel_quant():
    target = moe_config_targets(hf("deepseek_v3_fp8"), 8, 1, "NVIDIA H200", "3.6.0", per_channel_quant=True)[1]
    name = expected_down_tuner_output_name(hf("deepseek_v3_fp8"), 8, 1, "NVIDIA H200", ["--dtype", "fp8_w8a8", "--per-channel-quant"])
    assert "per_channel_quant" in target["file_name"] and "per_channel_quant" not in name


def test_the_servers_missing_names_settle_shared_expert_fusion():
    """DeepSeek-V3 fuses its shared expert by default (E=257 at EP1); a server that did not (hardware, parallelism)
    logs E=256 names: those are the truth, and the tuner is told --disable-shared-experts-fusion."""
    config = json.loads((FIXTURES / "hf_configs" / "deepseek_v3_fp8.json").read_text())
    root = "/opt/sglang/venv/lib/python3.11/site-packages/sglang/srt/layers/moe/moe_runner/triton_utils/configs/triton_3_6_0"
    names = ["E=256,N=256,device_name=NVIDIA_H200,dtype=fp8_w8a8,block_shape=[128, 128].json",
             "E=256,N=256,device_name=NVIDIA_H200,dtype=fp8_w8a8,block_shape=[128, 128]_down.json"]
    result = moe_targets(config, 8, 1, "NVIDIA H200", "3.6.0", [f"{root}/{name}" for name in names], dtype="fp8_w8a8")
    assert result["agree"] and [t["file_name"] for t in result["targets"]] == names
    assert "--disable-shared-experts-fusion" in result["tuner_args"] and result["expected_tuner_output"] == names[0]
    assert "the server did not fuse the shared expert (it looks up E=256)" in result["message"]
    fused = moe_targets(config, 8, 1, "NVIDIA H200", "3.6.0", [f"{root}/{name.replace('E=256', 'E=257')}" for name in names],
                        dtype="fp8_w8a8")
    assert "--disable-shared-experts-fusion" not in fused["tuner_args"]
