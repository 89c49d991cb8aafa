# Copyright (c) llmops.sglang contributors
# Apache License 2.0 (see LICENSE)
"""Fused-MoE Triton config lookup, as in SGLang's `moe_runner/triton_utils/fused_moe_triton_config.py`.

Same file names, directory layout (`configs/triton_X_Y_Z/`), SGLANG_MOE_CONFIG_DIR override,
newest-first fallback over the other Triton dirs, `_down` variant and log texts as the newer
upstream version (sglang-facts §2). The server and the emulated tuner both use this module, so
they always agree on where configs live.
"""
from __future__ import annotations

import functools
import json
import logging
import os
from dataclasses import dataclass

import triton

from sglang.srt.server_args import get_global_server_args_or_none
from sglang.srt.utils import get_device_name

logger = logging.getLogger(__name__)

CONFIG_DIR_ENV = "SGLANG_MOE_CONFIG_DIR"
TUNER_URL = "https://github.com/sgl-project/sglang/tree/main/benchmark/kernels/fused_moe_triton"


@dataclass(frozen=True)
class ConfigLocation:
    """Where a lookup found its config: status is "used" (exact Triton version), "fallback" or "missing"."""

    status: str
    exact_path: str
    found_path: str | None = None
    found_triton_version: str | None = None


def get_config_dir() -> str:
    """Base dir holding `configs/triton_*`: $SGLANG_MOE_CONFIG_DIR, else this module's directory."""
    return os.environ.get(CONFIG_DIR_ENV) or os.path.dirname(os.path.realpath(__file__))


def triton_version_dir(version: str) -> str:
    return "triton_" + version.replace(".", "_")


def get_config_file_name(
    E: int,
    N: int,
    dtype: str | None,
    block_shape: list[int] | None = None,
    per_channel_quant: bool = False,
    down_moe: bool = False,
) -> str:
    device_name = get_device_name().replace(" ", "_")
    dtype_selector = "" if not dtype else f",dtype={dtype}"
    block_shape_selector = "" if not block_shape or not all(block_shape) else f",block_shape={block_shape}"
    per_channel_quant_selector = ",per_channel_quant=True" if per_channel_quant else ""
    down_moe_selector = "_down" if down_moe else ""
    return (
        f"E={E},N={N},device_name={device_name}{dtype_selector}{block_shape_selector}"
        f"{per_channel_quant_selector}{down_moe_selector}.json"
    )


def locate_moe_config(
    E: int,
    N: int,
    dtype: str | None,
    block_n: int = 0,
    block_k: int = 0,
    per_channel_quant: bool = False,
    down_moe: bool = False,
) -> ConfigLocation:
    """Find the config file SGLang would load (no logging); raises like SGLang if `configs/` is absent on a miss."""
    json_file_name = get_config_file_name(E, N, dtype, [block_n, block_k], per_channel_quant, down_moe=down_moe)
    configs_root = os.path.join(get_config_dir(), "configs")
    exact_dir = triton_version_dir(triton.__version__)
    exact_path = os.path.join(configs_root, exact_dir, json_file_name)
    if os.path.exists(exact_path):
        return ConfigLocation("used", exact_path, exact_path, triton.__version__)
    other_dirs = [name for name in os.listdir(configs_root) if name.startswith("triton_") and name != exact_dir]
    for version_dir in sorted(other_dirs, key=_version_key, reverse=True):
        candidate = os.path.join(configs_root, version_dir, json_file_name)
        if os.path.exists(candidate):
            return ConfigLocation("fallback", exact_path, candidate, version_dir.removeprefix("triton_").replace("_", "."))
    return ConfigLocation("missing", exact_path)


@functools.lru_cache
def get_moe_configs(
    E: int,
    N: int,
    dtype: str | None,
    block_n: int = 0,
    block_k: int = 0,
    per_channel_quant: bool = False,
    down_moe: bool = False,
) -> dict[int, dict] | None:
    """Load the tuned config for this shape ({batch size: kernel config}) or None for SGLang's default config."""
    server_args = get_global_server_args_or_none()
    if server_args is not None and server_args.enable_deterministic_inference:
        logger.warning("Deterministic inference is enabled, using default MoE kernel config.")
        return None
    location = locate_moe_config(E, N, dtype, block_n, block_k, per_channel_quant, down_moe)
    if location.status == "used":
        logger.info(f"Using MoE kernel config from {location.found_path}.")
    elif location.status == "fallback":
        logger.warning(
            f"Config file not found at {location.exact_path}. Fallback to triton version "
            f"{location.found_triton_version} and use MoE kernel config from {location.found_path}. "
            "Performance might be sub-optimal!"
        )
    elif down_moe:
        logger.warning(
            "Using MoE kernel config with down_moe=False. Performance might be sub-optimal! "
            "Config file not found at %s, you can create them with " + TUNER_URL,
            location.exact_path,
        )
        return None
    else:
        logger.warning(
            "Using default MoE kernel config. Performance might be sub-optimal! "
            "Config file not found at %s, you can create them with " + TUNER_URL,
            location.exact_path,
        )
        return None
    with open(location.found_path, encoding="utf-8") as f:
        return {int(key): value for key, value in json.load(f).items()}


def _version_key(version_dir: str) -> tuple[int, ...]:
    parts = version_dir.removeprefix("triton_").split("_")
    return tuple(int(part) if part.isdigit() else -1 for part in parts)
