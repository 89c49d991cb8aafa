# Copyright (c) llmops.sglang contributors
# Apache License 2.0 (see LICENSE)
"""Targets: which fused-MoE config files the server looks up, and the tuner arguments that write those names.

Private to the llmops.sglang collection; not a public API. Pure functions, stdlib only, so it imports on any
managed host with plain Python 3.11. :func:`moe_targets` is the logic of the ``moe_targets`` filter.
"""
from __future__ import annotations

import posixpath
from typing import Any

from ansible_collections.llmops.sglang.plugins.module_utils.moe_names import config_file_name, triton_dir_for
from ansible_collections.llmops.sglang.plugins.module_utils.moe_shapes import (
    TUNER_DTYPES, checkpoint_dtype_selector, model_moe_shape, tuner_moe_shape)


def _local_experts(shape: dict, ep_size: int, fuse_shared: bool) -> int:
    if shape["num_experts"] % ep_size:
        raise ValueError(f"num_experts={shape['num_experts']} is not divisible by ep_size={ep_size}")
    return shape["num_experts"] // ep_size + (1 if fuse_shared else 0)


def _shard_intermediate(intermediate: int, tp_size: int, ep_size: int) -> int:
    """Per-rank MoE intermediate size (the file-name N), as ``calculate_shard_intermediate_size // 2``."""
    if tp_size < 1 or ep_size < 1 or tp_size % ep_size:
        raise ValueError(f"tp_size={tp_size} must be a positive multiple of ep_size={ep_size}")
    moe_tp = tp_size // ep_size
    if intermediate % moe_tp:
        raise ValueError(
            f"moe intermediate size {intermediate} is not divisible by tp_size // ep_size = {moe_tp} "
            f"(tp_size={tp_size}, ep_size={ep_size})"
        )
    return intermediate // moe_tp


def moe_config_targets(
    model_config: dict,
    tp_size: int,
    ep_size: int,
    device_name: str,
    triton_version: str,
    dtype: str | None = None,
    disable_shared_experts_fusion: bool = False,
    per_channel_quant: bool = False,
) -> list[dict[str, Any]]:
    """The up and down config files the server will look up for this deployment.

    ``device_name`` is the raw GPU name. ``dtype`` overrides the selector derived from the
    checkpoint (e.g. ``fp8_w8a8`` for online ``--quantization fp8``); ``""`` forces none.
    ``per_channel_quant`` mirrors the server's quant method and is not derived.
    """
    shape = model_moe_shape(model_config)
    n = _shard_intermediate(shape["moe_intermediate_size"], tp_size, ep_size)
    experts = _local_experts(shape, ep_size, shape["shared_expert_fusable"] and not disable_shared_experts_fusion)
    selector = checkpoint_dtype_selector(model_config) if dtype is None else (dtype or None)
    triton_dir = triton_dir_for(triton_version)
    return [
        {
            "kernel": kernel,
            "file_name": config_file_name(
                experts, n, device_name, selector, shape["block_shape"], per_channel_quant, down=kernel == "down"
            ),
            "triton_dir": triton_dir,
            "E": experts,
            "N": n,
            "dtype": selector,
            "block_shape": shape["block_shape"],
        }
        for kernel in ("up", "down")
    ]


def tuner_arguments(
    target_dtype: str | None, per_channel_quant: bool, disable_shared_experts_fusion: bool
) -> list[str]:
    """Tuner flags that make it write the name the server looks up.

    The tuner's ``dtype=`` part comes only from ``--dtype`` (``auto`` never yields ``fp8_w8a8``,
    even for FP8 checkpoints), while its block shape always comes from the checkpoint.
    ``float32`` is what ``--dtype auto`` produces for an FP32 checkpoint.
    """
    if target_dtype in (None, "", "float32"):
        tuner_dtype = "auto"
    elif target_dtype in TUNER_DTYPES:
        tuner_dtype = target_dtype
    else:
        raise ValueError(
            f"the tuner cannot produce dtype={target_dtype!r}; its --dtype choices are auto, {', '.join(TUNER_DTYPES)}"
        )
    arguments = ["--dtype", tuner_dtype]
    if per_channel_quant:
        arguments.append("--per-channel-quant")
    if disable_shared_experts_fusion:
        arguments.append("--disable-shared-experts-fusion")
    return arguments


def tuner_options(tuner_args: list[str]) -> dict[str, Any]:
    """What the main tuner's selector flags in ``tuner_args`` mean (defaults where absent)."""
    options: dict[str, Any] = {"dtype": "auto", "per_channel_quant": False, "disable_shared_experts_fusion": False}
    tokens = iter(tuner_args)
    for token in tokens:
        if token == "--dtype":
            options["dtype"] = next(tokens, "")
        elif token.startswith("--dtype="):
            options["dtype"] = token.partition("=")[2]
        elif token == "--per-channel-quant":
            options["per_channel_quant"] = True
        elif token == "--disable-shared-experts-fusion":
            options["disable_shared_experts_fusion"] = True
    if options["dtype"] not in ("auto", *TUNER_DTYPES):
        raise ValueError(f"invalid tuner --dtype {options['dtype']!r}; choices: auto, {', '.join(TUNER_DTYPES)}")
    return options


def expected_tuner_output_name(
    model_config: dict, tp_size: int, ep_size: int, device_name: str, tuner_args: list[str]
) -> str:
    """File name ``tuning_fused_moe_triton.py --tune`` writes for these arguments (up kernel only).

    Follows the tuner's rules, not the server's: ``get_config_dtype_str`` over the ``--dtype``
    flag (``auto`` -> no dtype part unless the checkpoint is FP32), block shape from the checkpoint.
    """
    options = tuner_options(tuner_args)
    shape, experts, n = _tuner_shape(model_config, tp_size, ep_size, options)
    if options["dtype"] != "auto":
        dtype = options["dtype"]
    else:
        dtype = "float32" if shape["dtype"] == "float32" else None
    return config_file_name(experts, n, device_name, dtype, shape["block_shape"], options["per_channel_quant"])


def down_tuner_arguments(tuner_args: list[str]) -> list[str]:
    """The main tuner's flags translated for ``tune_down_moe.py``.

    ``--dtype`` is always passed because the down tuner defaults to ``fp8_w8a8`` where the main
    tuner defaults to ``auto``; it has no ``--per-channel-quant`` (and never writes that selector).
    """
    options = tuner_options(tuner_args)
    arguments = ["--dtype", options["dtype"]]
    if options["disable_shared_experts_fusion"]:
        arguments.append("--disable-shared-experts-fusion")
    return arguments


def expected_down_tuner_output_name(
    model_config: dict, tp_size: int, ep_size: int, device_name: str, tuner_args: list[str]
) -> str:
    """File name ``tune_down_moe.py`` writes when run with :func:`down_tuner_arguments` of ``tuner_args``.

    Its selector is ``None`` for ``--dtype auto`` (even for an FP32 checkpoint) and it never adds
    ``per_channel_quant=True``, so a per-channel target cannot be produced by it.
    """
    options = tuner_options(tuner_args)
    shape, experts, n = _tuner_shape(model_config, tp_size, ep_size, options)
    dtype = None if options["dtype"] == "auto" else options["dtype"]
    return config_file_name(experts, n, device_name, dtype, shape["block_shape"], down=True)


# Checkpoint dtypes whose 16-bit kernels llmops.sglang's engine tunes (moe_engine.py's job.shape.dtype).
_ENGINE_DTYPES = {"bfloat16": "bf16", "float16": "fp16"}


def engine_shape(model_config: dict, tp_size: int, ep_size: int, tuner_args: list[str]) -> dict[str, Any]:
    """The MoE shape the engine tunes (``moe_engine.py`` job.shape: E, N, hidden, topk, dtype) for the same
    selector arguments as the tuner; with fused shared experts the extra expert is one more of top-k, as in
    SGLang's tuner. ValueError for what only ``engine: sglang`` tunes (quantised kernels)."""
    options = tuner_options(tuner_args)
    shape, experts, n = _tuner_shape(model_config, tp_size, ep_size, options)
    dtype = _ENGINE_DTYPES.get(shape["dtype"])
    if options["dtype"] != "auto" or shape["block_shape"] or dtype is None:
        what = options["dtype"] if options["dtype"] != "auto" else f"{shape['dtype']} {shape['block_shape'] or ''}"
        raise ValueError(f"engine: llmops tunes the 16-bit (bf16/fp16) kernels; this target is {what.strip()}: "
                         "set engine: sglang to tune it with SGLang's tuner")
    fused = experts != shape["num_experts"] // ep_size
    return {"E": experts, "N": n, "hidden": shape["hidden_size"], "topk": shape["topk"] + int(fused), "dtype": dtype}


def _tuner_shape(model_config: dict, tp_size: int, ep_size: int, options: dict) -> tuple[dict, int, int]:
    """(model shape, E, N) as upstream's tuner computes them for these selector options."""
    shape = tuner_moe_shape(model_config)
    fuse_shared = shape["shared_expert_fusable"] and not options["disable_shared_experts_fusion"]
    n = _shard_intermediate(shape["moe_intermediate_size"], tp_size, ep_size)
    return shape, _local_experts(shape, ep_size, fuse_shared), n


def reconcile_targets(derived: list[dict], reported_missing_paths: list[str]) -> dict[str, Any]:
    """Compare derived targets with the exact-version paths the server logged as missing.

    Paths are matched on ``triton_X/file_name``. ``targets`` holds the derived targets the server
    confirmed, each with the logged ``path`` and its ``install_dir``.
    """
    logged = {}
    for path in reported_missing_paths:
        install_dir, file_name = posixpath.split(path)
        logged.setdefault((posixpath.basename(install_dir), file_name), path)
    derived_keys = [(target["triton_dir"], target["file_name"]) for target in derived]
    targets = [
        {**target, "path": logged[key], "install_dir": posixpath.dirname(logged[key])}
        for target, key in zip(derived, derived_keys)
        if key in logged
    ]
    only_in_log = [path for key, path in logged.items() if key not in derived_keys]
    only_derived = [posixpath.join(*key) for key in derived_keys if key not in logged]
    agree = not only_in_log and not only_derived
    if agree:
        message = f"server log and derived names agree on {len(targets)} missing MoE config(s)"
    else:
        message = (
            "server log and derived MoE config names disagree\n"
            f"  server reported missing: {list(logged.values()) or 'none'}\n"
            f"  derived from model/GPU/triton: {[posixpath.join(*key) for key in derived_keys] or 'none'}\n"
            f"  only in log: {only_in_log or 'none'}\n"
            f"  only derived: {only_derived or 'none'}"
        )
    return {
        "agree": agree,
        "targets": targets,
        "only_in_log": only_in_log,
        "only_derived": only_derived,
        "message": message,
    }


def moe_targets(
    model_config: dict,
    tp_size: int,
    ep_size: int,
    device_name: str,
    triton_version: str,
    missing: list[str],
    dtype: str | None = None,
    disable_shared_experts_fusion: bool = False,
    per_channel_quant: bool = False,
) -> dict[str, Any]:
    """Targets confirmed by both sources, and the tuner arguments that produce the up target's name.

    Raises ValueError when the server reported missing configs the derivation does not explain (or
    the other way round), or when the tuner would write another name than the server looks up.
    """
    derived = moe_config_targets(
        model_config, tp_size, ep_size, device_name, triton_version, dtype, disable_shared_experts_fusion,
        per_channel_quant,
    )
    report = reconcile_targets(derived, missing)
    if (missing and not report["agree"] and not disable_shared_experts_fusion
            and model_moe_shape(model_config)["shared_expert_fusable"]):
        # The server decides at load time whether it fuses the shared expert; the names it logged are the truth.
        unfused = moe_config_targets(model_config, tp_size, ep_size, device_name, triton_version, dtype, True,
                                     per_channel_quant)
        unfused_report = reconcile_targets(unfused, missing)
        if unfused_report["agree"]:
            derived, report, disable_shared_experts_fusion = unfused, unfused_report, True
            report["message"] += (f"; the server did not fuse the shared expert (it looks up E={unfused[0]['E']}), "
                                  "so the tuner runs with --disable-shared-experts-fusion")
    if missing and not report["agree"]:
        raise ValueError(report["message"])
    up_name = next(target["file_name"] for target in derived if target["kernel"] == "up")
    tuner_args = tuner_arguments(derived[0]["dtype"], per_channel_quant, disable_shared_experts_fusion)
    expected = expected_tuner_output_name(model_config, tp_size, ep_size, device_name, tuner_args)
    if expected != up_name:
        raise ValueError(
            f"with {' '.join(tuner_args)} the tuner would write {expected}, but the server looks up {up_name}; "
            "tuning would produce a file the server never reads"
        )
    if not missing:
        report["message"] = (
            "the server reported no missing MoE configs: nothing to tune "
            f"(derived names: {', '.join(target['file_name'] for target in derived)})"
        )
    return {**report, "derived": derived, "tuner_args": tuner_args, "expected_tuner_output": expected}
