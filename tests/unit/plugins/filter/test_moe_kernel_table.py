# Copyright (c) llmops.sglang contributors
# Apache License 2.0 (see LICENSE)
"""moe_kernel_table: before/after kernel times joined with the bandwidth roofline of the demo model."""
from __future__ import annotations

import pytest
from ansible.errors import AnsibleFilterError

from ansible_collections.llmops.sglang.plugins.filter.moe_kernel_table import moe_kernel_table
from ansible_collections.llmops.sglang.plugins.module_utils.moe_roofline import moe_roofline

# Qwen3.5-122B-A10B (tests/emulator/models) at TP=4 on an RTX PRO 6000 (1792 GB/s).
SHAPE = {"num_experts": 256, "topk": 8, "hidden_size": 3072, "moe_intermediate_size": 1024, "dtype": "bfloat16",
         "quant_method": None}


def test_rows_speedup_and_roofline_per_batch_size():
    before = {"1": {"kernel_time_us": 38.1, "config": {}}, "64": {"kernel_time_us": 812.2, "config": {}}}
    after = {"1": {"kernel_time_us": 37.1, "config": {}}, "64": {"kernel_time_us": 727.7, "config": {}}}
    table = moe_kernel_table(before, after, moe_shape=SHAPE, tp_size=4, bandwidth_gbs=1792)
    rows = {row["batch_size"]: row for row in table["rows"]}
    assert rows[64]["speedup"] == pytest.approx(812.2 / 727.7)
    bound = moe_roofline(64, 256, 8, 3072, 256, 2, 1792)["bound_us"]
    assert rows[64]["roofline_us"] == pytest.approx(bound)
    assert rows[64]["pct_of_roofline_after"] == pytest.approx(bound / 727.7 * 100)
    assert "| 64 | 812.2 | 727.7 | 1.12x |" in table["table"]


def test_faster_than_bandwidth_is_flagged_as_an_artifact():
    table = moe_kernel_table({"64": 100.0}, {"64": 50.0}, moe_shape=SHAPE, tp_size=4, bandwidth_gbs=1792)
    assert table["rows"][0]["artifact"] is True
    assert "(artifact: above the bandwidth bound)" in table["table"]


def test_unknown_bandwidth_names_the_setting():
    with pytest.raises(AnsibleFilterError, match="sglang_gpu_spec.mem_bandwidth_gbs"):
        moe_kernel_table({"1": 1.0}, {"1": 1.0}, moe_shape=SHAPE, tp_size=4, bandwidth_gbs=None)
