# Copyright (c) llmops.sglang contributors
# Apache License 2.0 (see LICENSE)
"""Fused-MoE Triton config file names and the Triton directory they live in.

Private to the llmops.sglang collection; not a public API. Pure functions, stdlib only, so it imports on any
managed host with plain Python 3.11. The rules mirror SGLang's ``get_config_file_name`` and ``get_moe_configs``
in ``fused_moe_triton_config.py`` (commits 02c7c97f / 7386515d).
"""
from __future__ import annotations

import re
from typing import Any


_CONFIG_NAME_RE = re.compile(
    r"^E=(?P<E>\d+),N=(?P<N>\d+),device_name=(?P<device_name>[^,]*?)"
    r"(?:,dtype=(?P<dtype>[^,]+?))?"
    r"(?:,block_shape=\[(?P<block_shape>\d+(?:, \d+)*)\])?"
    r"(?P<per_channel_quant>,per_channel_quant=True)?"
    r"(?P<down>_down)?\.json$"
)


def device_name_for(gpu_name: str) -> str:
    """Device part of a config name: ``torch.cuda.get_device_name(0)`` with spaces -> ``_``."""
    return gpu_name.replace(" ", "_")


def triton_dir_for(version: str) -> str:
    """Config sub-directory SGLang reads for a Triton version.

    SGLang builds it as ``f"triton_{triton.__version__.replace('.', '_')}"`` with nothing else
    normalised, so local or post releases keep their suffix: ``3.6.0+git1a2b`` ->
    ``triton_3_6_0+git1a2b`` and ``3.6.0.post1`` -> ``triton_3_6_0_post1``. Upstream never ships
    such directories, which is why those installs always fall back (and why tuned configs must be
    installed under exactly this name).
    """
    if not version.strip():
        raise ValueError("triton version is empty")
    return "triton_" + version.replace(".", "_")


def config_file_name(
    E: int,
    N: int,
    device_name: str,
    dtype: str | None = None,
    block_shape: list[int] | None = None,
    per_channel_quant: bool = False,
    down: bool = False,
) -> str:
    """SGLang's ``get_config_file_name``; ``device_name`` may be raw (spaces are replaced)."""
    dtype_part = f",dtype={dtype}" if dtype else ""
    # A zero entry ([0, group_size] from group-wise int4/int8) means "no block quantisation".
    block_part = f",block_shape={list(block_shape)}" if block_shape and all(block_shape) else ""
    channel_part = ",per_channel_quant=True" if per_channel_quant else ""
    down_part = "_down" if down else ""
    return (
        f"E={E},N={N},device_name={device_name_for(device_name)}"
        f"{dtype_part}{block_part}{channel_part}{down_part}.json"
    )


def parse_config_file_name(name: str) -> dict[str, Any] | None:
    """Inverse of :func:`config_file_name` for a bare file name; None for non-MoE JSONs."""
    match = _CONFIG_NAME_RE.match(name)
    if match is None:
        return None
    block = match.group("block_shape")
    return {
        "E": int(match.group("E")),
        "N": int(match.group("N")),
        "device_name": match.group("device_name"),
        "dtype": match.group("dtype"),
        "block_shape": [int(part) for part in block.split(", ")] if block else None,
        "per_channel_quant": match.group("per_channel_quant") is not None,
        "down": match.group("down") is not None,
    }
