# Copyright (c) llmops.sglang contributors
# Apache License 2.0 (see LICENSE)
"""Unit tests for plugins/module_utils/moe_search_space.py.

Fixtures live in tests/fixtures/moe_configs/ (see its README for the upstream provenance).
"""
from __future__ import annotations

import pytest

from ansible_collections.llmops.sglang.plugins.module_utils.moe_search_space import (
    compute_bound_search_space, prefilter_search_space, smem_bytes)
from tests.unit.plugins.module_utils.moe_fixtures import SM120_SMEM


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
