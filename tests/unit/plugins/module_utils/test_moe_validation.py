# Copyright (c) llmops.sglang contributors
# Apache License 2.0 (see LICENSE)
"""Unit tests for plugins/module_utils/moe_validation.py.

Fixtures live in tests/fixtures/moe_configs/ (see its README for the upstream provenance).
"""
from __future__ import annotations

import pytest

from ansible_collections.llmops.sglang.plugins.module_utils.moe_validation import validate_config
from tests.unit.plugins.module_utils.moe_fixtures import H200_DOWN, H200_UP, RTX_DOWN, RTX_UP, sample


@pytest.mark.parametrize(("name", "kernel"), [(H200_UP, "up"), (H200_DOWN, "down"), (RTX_UP, "up"), (RTX_DOWN, "down")])
def test_upstream_sample_configs_are_valid(name, kernel):
    assert validate_config(sample(name), kernel=kernel) == []


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
