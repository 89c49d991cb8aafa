# Copyright (c) llmops.sglang contributors
# Apache License 2.0 (see LICENSE)
"""Fused-MoE Triton config lookup, as in SGLang's `moe_runner/triton_utils/fused_moe_triton_config.py`.

Same file names, directory layout (`configs/triton_X_Y_Z/`), SGLANG_MOE_CONFIG_DIR override, `_down` variant
and log texts. The lookup rules are the emulated release's (the profile's `sglang_version`, else the package
version), as the real wheels have them (tests/conformance/test_moe_lookup_conformance.py compares them):
up to 0.5.11 the fallback tries only `supported_triton_versions = ["3.4.0", "3.3.1", "3.2.0", "3.1.0"]`,
from 0.5.12 every other `triton_*` dir newest first (the int sort raising on a dir like `triton_3_6_0_post1`,
`os.listdir` on a missing `configs/`); up to 0.5.12 `try_get_optimal_moe_config` asserts an up/down pair's
BLOCK_SIZE_M are equal; from 0.5.16 a missing `_down` file reuses the tuned up file. The server and the emulated tuner both use this module, so they always agree on
where configs live.
"""
from __future__ import annotations

import functools
import json
import logging
import os
from dataclasses import dataclass

import triton

from sglang._emulator.profile import emulated_release
from sglang.srt.server_args import get_global_server_args_or_none
from sglang.srt.utils import get_device_name

logger = logging.getLogger(__name__)

CONFIG_DIR_ENV = "SGLANG_MOE_CONFIG_DIR"
TUNER_URL = "https://github.com/sgl-project/sglang/tree/main/benchmark/kernels/fused_moe_triton"
FIXED_FALLBACK = ("3.4.0", "3.3.1", "3.2.0", "3.1.0")  # <= 0.5.11: supported_triton_versions


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
    if emulated_release() < (0, 5, 12):
        versions = [version for version in FIXED_FALLBACK if version != triton.__version__]
    else:  # raises like the release: FileNotFoundError without configs/, ValueError on a non-numeric dir
        versions = sorted((name.removeprefix("triton_").replace("_", ".") for name in os.listdir(configs_root)
                           if name.startswith("triton_")), key=lambda v: tuple(int(x) for x in v.split(".")),
                          reverse=True)
    for version in versions:
        if version == triton.__version__:
            continue
        candidate = os.path.join(configs_root, triton_version_dir(version), json_file_name)
        if os.path.exists(candidate):
            return ConfigLocation("fallback", exact_path, candidate, version)
    return ConfigLocation("missing", exact_path)


def check_block_size_m(E: int, N: int, dtype: str | None, block_n: int, block_k: int, token_counts: list[int]) -> None:
    """`try_get_optimal_moe_config(..., return_down_config=True)` of releases up to 0.5.12: `assert` that the up
    and down configs picked for each token count have the same BLOCK_SIZE_M (the server dies at its first
    forward); later releases override the down value."""
    if emulated_release() >= (0, 5, 13):
        return
    up = get_moe_configs(E, N, dtype, block_n, block_k, per_channel_quant=False, down_moe=False)
    down = get_moe_configs(E, N, dtype, block_n, block_k, per_channel_quant=False, down_moe=True)
    if not down:
        return
    for m in token_counts:
        config = up[min(up, key=lambda x: abs(x - m))] if up else _default_config(m, E, dtype, [block_n, block_k])
        down_config = down[min(down, key=lambda x: abs(x - m))]
        assert config["BLOCK_SIZE_M"] == down_config["BLOCK_SIZE_M"]


def _default_config(m: int, e: int, dtype: str | None, block_shape: list[int]) -> dict:
    """The BLOCK_SIZE_M of `get_default_config` up to 0.5.12 (not marlin, not deterministic)."""
    if dtype == "fp8_w8a8":
        return {"BLOCK_SIZE_M": 64 if all(block_shape) or m <= e else 128}
    return {"BLOCK_SIZE_M": 16 if m <= e else 64}


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
    elif down_moe and emulated_release() >= (0, 5, 16):
        # 0.5.16+: a missing _down file reuses the tuned up file (its own lookup, lru-cached, logs as usual; the
        # release calls it with keywords as try_get_optimal_moe_config does, so the cache hits and it logs once).
        up = get_moe_configs(E, N, dtype, block_n, block_k, per_channel_quant=per_channel_quant, down_moe=False)
        if up is not None:
            logger.warning(
                "Down MoE config file not found at %s; reusing the tuned up-projection config without TMA. "
                "Performance might be sub-optimal.",
                location.exact_path,
            )
            return up
        logger.warning(
            "Using default MoE kernel config. Performance might be sub-optimal! "
            "Config file not found at %s, you can create them with " + TUNER_URL,
            location.exact_path,
        )
        return None
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
