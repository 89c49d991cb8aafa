# Copyright (c) llmops.sglang contributors
# Apache License 2.0 (see LICENSE)
"""Device helpers with SGLang's names; the emulated GPU comes from the emulator profile."""
from __future__ import annotations

from sglang._emulator.profile import load_profile


def get_device_name(device_id: int = 0) -> str:
    """What torch.cuda.get_device_name(device_id) returns on the emulated node."""
    gpu = load_profile().gpu
    if not 0 <= device_id < gpu.count:
        raise RuntimeError(f"CUDA error: invalid device ordinal (device {device_id}, {gpu.count} GPUs)")
    return gpu.name


def get_device_capability(device_id: int = 0) -> tuple[int, int]:
    """What torch.cuda.get_device_capability(device_id) returns on the emulated node."""
    get_device_name(device_id)
    major, _, minor = load_profile().gpu.compute_capability.partition(".")
    return int(major), int(minor or 0)
