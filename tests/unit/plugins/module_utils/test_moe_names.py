# Copyright (c) llmops.sglang contributors
# Apache License 2.0 (see LICENSE)
"""Unit tests for plugins/module_utils/moe_names.py.

Fixtures live in tests/fixtures/moe_configs/ (see its README for the upstream provenance).
"""
from __future__ import annotations

import pytest

from ansible_collections.llmops.sglang.plugins.module_utils.moe_names import (
    config_file_name, device_name_for, parse_config_file_name, triton_dir_for)
from tests.unit.plugins.module_utils.moe_fixtures import H200_DOWN, H200_UP, RTX_PRO, upstream_names


def test_fixture_has_at_least_30_upstream_names():
    assert len(upstream_names()) >= 30


@pytest.mark.parametrize("name", upstream_names())
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
