from __future__ import annotations

import pytest

from ansible_collections.llmops.sglang.plugins.module_utils.gpu import parse_query_gpu, query_gpu_argv, summarize

# As printed by `nvidia-smi --query-gpu=index,name,uuid,memory.total,compute_cap,driver_version,power.limit,pci.bus_id
# --format=csv,noheader,nounits` on a 4 x RTX PRO 6000 host.
OUTPUT = """0, NVIDIA RTX PRO 6000 Blackwell Server Edition, GPU-1c1e0c43-7a7e-4b43-8f1c-2d0f8c9a0001, 97887, 12.0, 580.95.05, 600.00, 00000000:01:00.0
1, NVIDIA RTX PRO 6000 Blackwell Server Edition, GPU-1c1e0c43-7a7e-4b43-8f1c-2d0f8c9a0002, 97887, 12.0, 580.95.05, 600.00, 00000000:41:00.0
"""


def test_rows_become_typed_facts_with_sglang_device_name():
    gpus = parse_query_gpu(OUTPUT)
    assert gpus[1] == {"index": 1, "name": "NVIDIA RTX PRO 6000 Blackwell Server Edition",
                       "uuid": "GPU-1c1e0c43-7a7e-4b43-8f1c-2d0f8c9a0002", "memory_total_mib": 97887,
                       "compute_capability": "12.0", "driver_version": "580.95.05", "power_limit_w": 600.0,
                       "pci_bus_id": "00000000:41:00.0", "sm": "sm120",
                       "sglang_device_name": "NVIDIA_RTX_PRO_6000_Blackwell_Server_Edition"}


def test_summary_flags_mixed_models():
    mixed = parse_query_gpu(OUTPUT + "2, NVIDIA H200, GPU-x, 143771, 9.0, 580.95.05, [N/A], 00000000:81:00.0\n")
    assert mixed[2]["power_limit_w"] is None
    summary = summarize(mixed)
    assert summary["homogeneous"] is False and summary["name"] is None and summary["count"] == 3
    assert summarize(parse_query_gpu(OUTPUT))["sglang_device_name"] == "NVIDIA_RTX_PRO_6000_Blackwell_Server_Edition"


def test_wrong_field_count_is_a_clear_error():
    with pytest.raises(ValueError, match="returned 2 fields, expected 8"):
        parse_query_gpu("0, NVIDIA H200\n")


def test_query_argv_matches_the_parser():
    assert query_gpu_argv()[1] == "--query-gpu=index,name,uuid,memory.total,compute_cap,driver_version,power.limit,pci.bus_id"


def test_summary_carries_the_datasheet_spec_of_known_models_only():
    assert summarize(parse_query_gpu(OUTPUT))["spec"] == {"mem_bandwidth_gbs": 1792, "smem_per_block": 101376}
    unknown = [{**parse_query_gpu(OUTPUT)[0], "name": "NVIDIA Future GPU"}]
    assert summarize(unknown)["spec"] == {"mem_bandwidth_gbs": None, "smem_per_block": None}
