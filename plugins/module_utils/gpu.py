# Copyright (c) llmops.sglang contributors
# Apache License 2.0 (see LICENSE)
"""GPU inventory from nvidia-smi.

Private to the llmops.sglang collection.
"""
from __future__ import annotations

import csv
import io

from ansible_collections.llmops.sglang.plugins.module_utils.moe_names import device_name_for

# nvidia-smi query fields and the fact names they become.
QUERY_FIELDS = {
    "index": "index",
    "name": "name",
    "uuid": "uuid",
    "memory.total": "memory_total_mib",
    "compute_cap": "compute_capability",
    "driver_version": "driver_version",
    "power.limit": "power_limit_w",
    "pci.bus_id": "pci_bus_id",
}
_NUMERIC = {"index": int, "memory_total_mib": int, "power_limit_w": float}


def query_gpu_argv(nvidia_smi: str = "nvidia-smi") -> list[str]:
    return [nvidia_smi, f"--query-gpu={','.join(QUERY_FIELDS)}", "--format=csv,noheader,nounits"]


def parse_query_gpu(text: str) -> list[dict]:
    """GPUs from ``nvidia-smi --query-gpu=<QUERY_FIELDS> --format=csv,noheader,nounits``."""
    gpus = []
    for row in csv.reader(io.StringIO(text), skipinitialspace=True):
        if not row:
            continue
        if len(row) != len(QUERY_FIELDS):
            raise ValueError(f"nvidia-smi returned {len(row)} fields, expected {len(QUERY_FIELDS)}: {row!r}")
        gpu = {}
        for field, value in zip(QUERY_FIELDS.values(), row):
            value = value.strip()
            convert = _NUMERIC.get(field)
            gpu[field] = None if value in ("[N/A]", "N/A", "[Not Supported]") else (convert(value) if convert else value)
        gpu["sm"] = "sm" + gpu["compute_capability"].replace(".", "") if gpu["compute_capability"] else None
        gpu["sglang_device_name"] = device_name_for(gpu["name"])
        gpus.append(gpu)
    return gpus


# Datasheet numbers nvidia-smi does not report, for the MoE roofline and the tuner's smem prefilter
# (sources: docs/gpu-specs.md). Unknown GPUs get None; inventories can set sglang_gpu_spec instead.
GPU_SPECS = {
    "NVIDIA RTX PRO 6000 Blackwell Server Edition": {"mem_bandwidth_gbs": 1792, "smem_per_block": 101376},
    "NVIDIA RTX PRO 6000 Blackwell Workstation Edition": {"mem_bandwidth_gbs": 1792, "smem_per_block": 101376},
    "NVIDIA H200": {"mem_bandwidth_gbs": 4800, "smem_per_block": 232448},
    "NVIDIA H100 80GB HBM3": {"mem_bandwidth_gbs": 3350, "smem_per_block": 232448},
    "NVIDIA GeForce RTX 4090": {"mem_bandwidth_gbs": 1008, "smem_per_block": 101376},
}


def gpu_spec(name: str | None) -> dict:
    """Bandwidth (1e9 B/s) and shared memory per block (bytes) of a GPU model, None where unknown."""
    return dict(GPU_SPECS.get(name or "", {"mem_bandwidth_gbs": None, "smem_per_block": None}))


def summarize(gpus: list[dict]) -> dict:
    """Fleet-level view: one model per host is what tuned configs and Ray clusters assume."""
    names = sorted({g["name"] for g in gpus})
    return {
        "count": len(gpus),
        "names": names,
        "homogeneous": len(names) == 1,
        "name": names[0] if len(names) == 1 else None,
        "sglang_device_name": gpus[0]["sglang_device_name"] if len(names) == 1 else None,
        "compute_capability": gpus[0]["compute_capability"] if len(names) == 1 else None,
        "memory_total_mib": min((g["memory_total_mib"] for g in gpus), default=None),
        "spec": gpu_spec(names[0] if len(names) == 1 else None),
    }
