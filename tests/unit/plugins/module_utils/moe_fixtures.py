# Copyright (c) llmops.sglang contributors
# Apache License 2.0 (see LICENSE)
"""Fixtures of the fused-MoE config tests (tests/fixtures/moe_configs/, see its README for the upstream
provenance): upstream file names, real checkpoints' config.json, sample configs, and the names they give."""
from __future__ import annotations

import json
from pathlib import Path

FIXTURES = Path(__file__).resolve().parents[3] / "fixtures" / "moe_configs"
H200_UP = "E=257,N=256,device_name=NVIDIA_H200,dtype=fp8_w8a8,block_shape=[128, 128].json"
H200_DOWN = "E=257,N=256,device_name=NVIDIA_H200,dtype=fp8_w8a8,block_shape=[128, 128]_down.json"
RTX_UP = "E=256,N=512,device_name=NVIDIA_RTX_PRO_6000_Blackwell_Server_Edition.json"
RTX_DOWN = "E=256,N=512,device_name=NVIDIA_RTX_PRO_6000_Blackwell_Server_Edition_down.json"
RTX_PRO = "NVIDIA RTX PRO 6000 Blackwell Server Edition"
SM120_SMEM = 101376
CONFIG_ROOT = "/opt/sglang/venv/lib/python3.11/site-packages/sglang/srt/layers/moe/moe_runner/triton_utils/configs"


def upstream_names() -> list[str]:
    lines = (FIXTURES / "upstream_names.txt").read_text().splitlines()
    return [line for line in lines if line and not line.startswith("#")]


def hf(name: str) -> dict:
    return json.loads((FIXTURES / "hf_configs" / f"{name}.json").read_text())


def sample(name: str) -> dict:
    return json.loads((FIXTURES / name).read_text())
