# Copyright (c) llmops.sglang contributors
# Apache License 2.0 (see LICENSE)
"""Unit tests for plugins/module_utils/moe_roofline.py.

Fixtures live in tests/fixtures/moe_configs/ (see its README for the upstream provenance).
Roofline expectations are the figures of the project's benchmarking reference, section C.
"""
from __future__ import annotations

import pytest

from ansible_collections.llmops.sglang.plugins.module_utils.moe_roofline import kernel_table, moe_roofline
from ansible_collections.llmops.sglang.plugins.module_utils.moe_shapes import model_moe_shape
from ansible_collections.llmops.sglang.plugins.module_utils.moe_targets import moe_config_targets
from tests.unit.plugins.module_utils.moe_fixtures import RTX_PRO, hf


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
    model = hf("qwen3_5_35b_a3b_fp8")
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
