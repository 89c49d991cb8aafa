# Copyright (c) llmops.sglang contributors
# Apache License 2.0 (see LICENSE)
"""Unit tests for plugins/module_utils/moe_search_space.py.

Fixtures live in tests/fixtures/moe_configs/ (see its README for the upstream provenance).
"""
from __future__ import annotations

import json

import pytest

from ansible_collections.llmops.sglang.plugins.module_utils.moe_search_space import (
    compute_bound_search_space, operand_bytes, prefilter_search_space, read_search_space_file, search_space_plan, smem_bytes)
from tests.unit.plugins.module_utils.moe_fixtures import SM120_SMEM

ENTRY = {"BLOCK_SIZE_M": 16, "BLOCK_SIZE_N": 64, "BLOCK_SIZE_K": 128, "GROUP_SIZE_M": 1, "num_warps": 4, "num_stages": 4}


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


def test_operand_bytes_per_tuner_dtype():
    assert operand_bytes("auto", "bfloat16") == (2, 2)
    assert operand_bytes("auto", "float32") == (4, 4)
    assert operand_bytes("fp8_w8a8", "bfloat16") == (1, 1)
    assert operand_bytes("int4_w4a16", "bfloat16") == (2, 0.5)


def test_search_space_full_and_prefiltered_for_sm120_bf16():
    full = search_space_plan("full", None, None, (2, 2))
    assert full == {"mode": "full", "total": 1920, "kept": 1920, "dropped": 0, "configs": None}
    pre = search_space_plan("prefiltered", None, 101376, (2, 2))
    assert pre["total"] == 1920 and pre["kept"] + pre["dropped"] == 1920 and 0 < pre["dropped"] < 1920
    assert len(pre["configs"]) == pre["kept"]
    worst = max((c["num_stages"] - 1) * c["BLOCK_SIZE_K"] * (c["BLOCK_SIZE_M"] + c["BLOCK_SIZE_N"]) * 2 for c in pre["configs"])
    assert worst <= 101376
    block = search_space_plan("prefiltered", [128, 128], 101376, (1, 1))
    assert block["total"] == 1280


def test_prefiltered_needs_the_smem_limit():
    with pytest.raises(ValueError, match="^smem_per_block: required with search_space=prefiltered"):
        search_space_plan("prefiltered", None, None, (2, 2))


def test_search_space_file_must_be_a_list_of_configs(tmp_path):
    good, bad = tmp_path / "good.json", tmp_path / "bad.json"
    good.write_text(json.dumps([ENTRY]))
    bad.write_text(json.dumps({"configs": [ENTRY]}))
    assert read_search_space_file(str(good)) == [ENTRY]
    with pytest.raises(ValueError, match="non-empty JSON list"):
        read_search_space_file(str(bad))
    with pytest.raises(ValueError, match="cannot read"):
        read_search_space_file(str(tmp_path / "absent.json"))
