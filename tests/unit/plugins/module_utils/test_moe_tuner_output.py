# Copyright (c) llmops.sglang contributors
# Apache License 2.0 (see LICENSE)
"""Unit tests for plugins/module_utils/moe_tuner_output.py.

Fixtures live in tests/fixtures/moe_configs/ (see its README for the upstream provenance).
"""
from __future__ import annotations

from ansible_collections.llmops.sglang.plugins.module_utils.moe_tuner_output import (
    parse_down_tuner_output, parse_tuner_benchmark_output, parse_tuner_tune_output)
from ansible_collections.llmops.sglang.plugins.module_utils.moe_validation import validate_config
from tests.unit.plugins.module_utils.moe_fixtures import H200_DOWN, H200_UP


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
