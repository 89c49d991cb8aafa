# Copyright (c) llmops.sglang contributors
# Apache License 2.0 (see LICENSE)
"""How each SGLang release finds its fused-MoE Triton configs: one table of rules per release, and the
lookup those rules give. Used by the targets (where the server reads), the install (which pairs it refuses)
and the validation of installed files; the emulator's lookup is checked against the real wheels with it.

Private to the llmops.sglang collection. Pure stdlib.

Every rule was read in the real wheels' ``fused_moe_triton_config.py`` (``get_moe_configs``,
``try_get_optimal_moe_config``; PyPI ``sglang==X`` for every X in :data:`CHECKED_RELEASES`) and is checked
again by ``tests/conformance/test_moe_lookup_conformance.py`` against each wheel's own code:

- config module: 0.5.10 ``sglang/srt/layers/moe/fused_moe_triton/``, 0.5.11+ ``.../moe_runner/triton_utils/``;
  ``configs/triton_X_Y_Z/`` next to it, or under ``$SGLANG_MOE_CONFIG_DIR``.
- fallback when the exact ``triton_<installed>`` file is missing: <= 0.5.11 only ``supported_triton_versions =
  ["3.4.0", "3.3.1", "3.2.0", "3.1.0"]`` (so never ``triton_3_5_1`` or newer); from 0.5.12 every other
  ``triton_*`` directory on disk, newest first, sorted by ``tuple(int(x) for x in v.split("."))`` (a directory
  such as ``triton_3_6_0_post1`` makes that sort raise: the server fails at the first lookup that misses);
  ``os.listdir(configs/)`` also raises when ``configs/`` does not exist.
- up/down ``BLOCK_SIZE_M``: <= 0.5.12 ``assert config["BLOCK_SIZE_M"] == down_config["BLOCK_SIZE_M"]`` (the
  server dies at its first forward); from 0.5.13 a warning and the down value is overridden.
- a missing ``_down`` file: <= 0.5.15 the down GEMM runs the up config ("Using MoE kernel config with
  down_moe=False"); from 0.5.16 the tuned up file is reused ("Down MoE config file not found at %s; reusing
  the tuned up-projection config without TMA").
"""
from __future__ import annotations

import os
import re
from collections.abc import Callable
from typing import Any

OLD_CONFIG_MODULE = "sglang/srt/layers/moe/fused_moe_triton"
CONFIG_MODULE = "sglang/srt/layers/moe/moe_runner/triton_utils"
FIXED_FALLBACK = ("3.4.0", "3.3.1", "3.2.0", "3.1.0")

# (first release, changes from then on). Read top to bottom; each later row overrides the keys it names.
RULE_CHANGES: tuple[tuple[tuple[int, int, int], dict[str, Any]], ...] = (
    ((0, 5, 10), {"config_module": OLD_CONFIG_MODULE, "fallback": "fixed", "block_m_mismatch": "assert",
                  "down_missing": "up_config"}),
    ((0, 5, 11), {"config_module": CONFIG_MODULE}),
    ((0, 5, 12), {"fallback": "all_dirs"}),
    ((0, 5, 13), {"block_m_mismatch": "override"}),
    ((0, 5, 16), {"down_missing": "reuse_up"}),
)
# Releases whose wheels were read for the table (and are checked by the conformance tests).
CHECKED_RELEASES = tuple(f"0.5.{patch}" for patch in range(10, 24))  # every release 0.5.10 .. 0.5.23
_VERSION = re.compile(r"^v?(\d+)\.(\d+)\.(\d+)")


def _release_key(version: str) -> tuple[int, int, int]:
    match = _VERSION.match(str(version).strip())
    if not match:
        raise ValueError(f"sglang version {version!r} is not a release version (X.Y.Z)")
    return int(match.group(1)), int(match.group(2)), int(match.group(3))


def moe_rules(version: str) -> dict[str, Any]:
    """The config rules of SGLang ``version``, with ``checked`` (its wheel was read) and a ``note`` when not.

    Raises ValueError for a release older than the oldest one checked: its lookup is not known here.
    """
    key = _release_key(version)
    first = RULE_CHANGES[0][0]
    if key < first:
        raise ValueError(f"sglang {version} is older than {'.'.join(map(str, first))}, the oldest release whose MoE "
                         "config lookup this collection knows; upgrade SGLang")
    rules: dict[str, Any] = {}
    for since, changes in RULE_CHANGES:
        if key >= since:
            rules.update(changes)
    checked = ".".join(map(str, key)) in CHECKED_RELEASES
    newest = max(CHECKED_RELEASES, key=_release_key)
    note = None
    if not checked:
        note = (f"sglang {version} was not checked; its rules are those of the releases around it"
                + (f" (newer than {newest}, the newest checked: re-run the conformance tests for it)"
                   if key > _release_key(newest) else ""))
    return {"version": version, **rules, "checked": checked, "note": note}


def config_module_dir(site_packages: str, rules: dict) -> str:
    return os.path.join(site_packages, *rules["config_module"].split("/"))


def fallback_order(rules: dict, installed_triton: str, triton_dirs: list[str]) -> list[str]:
    """``triton_*`` directories the release tries after the exact one, in its order.

    Raises ValueError with the server's own failure when the release would crash sorting ``triton_dirs``.
    """
    if rules["fallback"] == "fixed":
        return [f"triton_{version.replace('.', '_')}" for version in FIXED_FALLBACK if version != installed_triton]
    versions = [name.removeprefix("triton_").replace("_", ".") for name in triton_dirs if name.startswith("triton_")]
    try:
        ordered = sorted(versions, key=lambda v: tuple(int(x) for x in v.split(".")), reverse=True)
    except ValueError as exc:
        bad = [name for name in triton_dirs if name.startswith("triton_") and not
               all(part.isdigit() for part in name.removeprefix("triton_").split("_"))]
        raise ValueError(f"sglang {rules['version']} cannot sort the config directories {bad} ({exc}): the server "
                         "fails at the first MoE config lookup that misses its exact file") from None
    return [f"triton_{version.replace('.', '_')}" for version in ordered if version != installed_triton]


def lookup(configs_root: str, installed_triton: str, file_name: str, rules: dict,
           exists: Callable[[str], bool] = os.path.isfile,
           listdir: Callable[[str], list[str]] = os.listdir) -> dict[str, Any]:
    """Which file the release loads for ``file_name``: ``{status, exact_path, path, triton_version, error}``.

    ``status``: ``used`` (exact Triton dir), ``fallback`` (another dir), ``missing`` (SGLang's default config,
    or for ``_down`` files what ``down_missing`` says) or ``error`` (the server raises during the lookup).
    """
    exact = os.path.join(configs_root, f"triton_{installed_triton.replace('.', '_')}", file_name)
    result: dict[str, Any] = {"status": "missing", "exact_path": exact, "path": None, "triton_version": None,
                              "error": None}
    if exists(exact):
        return {**result, "status": "used", "path": exact, "triton_version": installed_triton}
    try:
        dirs = listdir(configs_root) if rules["fallback"] == "all_dirs" else []
        order = fallback_order(rules, installed_triton, dirs)
    except FileNotFoundError:
        return {**result, "status": "error",
                "error": f"{configs_root} does not exist: sglang {rules['version']} lists it on a miss and fails"}
    except ValueError as exc:
        return {**result, "status": "error", "error": str(exc)}
    for triton_dir in order:
        candidate = os.path.join(configs_root, triton_dir, file_name)
        if exists(candidate):
            return {**result, "status": "fallback", "path": candidate,
                    "triton_version": triton_dir.removeprefix("triton_").replace("_", ".")}
    return result


def block_m_pairs(up: dict[str, dict] | None, down: dict[str, dict], default_block_m: Callable[[int], int]) -> list[tuple]:
    """``(M, up BLOCK_SIZE_M, down BLOCK_SIZE_M)`` for every token count M where the configs the server picks
    (the nearest key of each file, SGLang's ``min(keys, key=abs(k - M))``) disagree; ``up`` None means the up
    kernel runs SGLang's default config (``default_block_m(M)``). M runs over 1 .. the largest key + 1: past
    it the picks no longer change."""
    up_keys = sorted(int(key) for key in up) if up else []
    down_keys = sorted(int(key) for key in down)
    top = max(up_keys + down_keys) + 1
    mismatches, previous = [], None
    for m in range(1, top + 1):
        down_key = min(down_keys, key=lambda k, m=m: abs(k - m))
        down_m = down[str(down_key)]["BLOCK_SIZE_M"]
        up_m = up[str(min(up_keys, key=lambda k, m=m: abs(k - m)))]["BLOCK_SIZE_M"] if up else default_block_m(m)
        if up_m != down_m and (up_m, down_m) != previous:
            mismatches.append((m, up_m, down_m))
        previous = (up_m, down_m) if up_m != down_m else None
    return mismatches


def default_block_m(m: int, experts: int, dtype: str | None, block_shape: list[int] | None) -> int:
    """``BLOCK_SIZE_M`` of ``get_default_config`` in the releases that assert (0.5.10 .. 0.5.12; not marlin,
    not deterministic inference)."""
    if dtype == "fp8_w8a8":
        if block_shape:
            return 64
        return 64 if m <= experts else 128
    return 16 if m <= experts else 64
