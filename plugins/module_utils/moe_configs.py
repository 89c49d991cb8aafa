# Copyright (c) llmops.sglang contributors
# Apache License 2.0 (see LICENSE)
"""Fused-MoE Triton config files: names, targets, validation, search space, roofline.

Private to the llmops.sglang collection; not a public API. Pure functions, stdlib only, so it
imports on any managed host with plain Python 3.11.

The naming and shape rules mirror SGLang: ``get_config_file_name`` and ``get_moe_configs`` in
``fused_moe_triton_config.py`` (commits 02c7c97f / 7386515d) and ``get_model_config`` /
``get_configs_compute_bound`` / ``get_default_batch_sizes`` in
``benchmark/kernels/fused_moe_triton/common_utils.py`` (commit 00f0b462). The roofline follows
the usual memory-bound model of one fused-MoE layer on one GPU shard.
"""
from __future__ import annotations

import ast
import itertools
import posixpath
import re
from typing import Any

# ---------------------------------------------------------------------------------------------
# File names and directories
# ---------------------------------------------------------------------------------------------

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


# ---------------------------------------------------------------------------------------------
# Model shape (from a Hugging Face config.json)
# ---------------------------------------------------------------------------------------------

# The MoE shape is derived from the keys HF configs use, whatever the architecture (SGLang supports more each
# release): experts, per-expert intermediate size and top-k, first key present wins, in the text config of
# multimodal wrappers; DBRX keeps them in ffn_config.
_EXPERT_KEYS = ("n_routed_experts", "num_experts", "num_local_experts", "moe_num_experts")
_INTERMEDIATE_KEYS = ("moe_intermediate_size", "expert_hidden_dim", "intermediate_size", "ffn_hidden_size")
_TOPK_KEYS = ("num_experts_per_tok", "top_k_experts", "experts_per_token", "moe_top_k")
# Architectures whose shared expert SGLang fuses into the routed experts by default (E + 1 in the file name),
# as upstream's tuner has them (benchmark/kernels/fused_moe_triton/common_utils.py get_model_config, commit
# 00f0b462). The server decides at load time (sglang/srt/layers/moe/utils.py get_num_fused_shared_experts,
# 0.5.23) and can turn it off (hardware, parallelism, --disable-shared-experts-fusion): where the server logged
# the missing names, moe_targets settles it from them.
SHARED_EXPERT_FUSION: tuple[str, ...] = (
    "DeepseekV3ForCausalLM", "DeepseekV32ForCausalLM", "Glm4MoeForCausalLM", "Glm4MoeLiteForCausalLM",
    "GlmMoeDsaForCausalLM", "MistralLarge3ForCausalLM", "Llama4ForConditionalGeneration",
    "MiniMaxM3SparseForConditionalGeneration",
)
# What upstream's tuner reads per architecture (same get_model_config): (experts key, intermediate key);
# every architecture it does not list is read with Mixtral's keys.
_TUNER_KEYS: dict[str, tuple[str, str]] = {
    **dict.fromkeys(("Qwen2MoeForCausalLM", "Qwen3MoeForCausalLM", "Qwen3NextForCausalLM",
                     "Qwen3VLMoeForConditionalGeneration", "Qwen3_5MoeForCausalLM", "Qwen3_5MoeForConditionalGeneration",
                     "Qwen4ExpForCausalLM", "Qwen4ExpForConditionalGeneration", "InternS2PreviewForConditionalGeneration",
                     "MellumForCausalLM", "BailingMoEForCausalLM", "BailingMoeForCausalLM", "BailingMoeV2ForCausalLM",
                     "BailingMoeV3ForCausalLM", "Gemma4ForConditionalGeneration", "Lfm2MoeForCausalLM"),
                    ("num_experts", "moe_intermediate_size")),
    **dict.fromkeys(("DeepseekV2ForCausalLM", "DeepseekV3ForCausalLM", "DeepseekV32ForCausalLM", "DeepseekV4ForCausalLM",
                     "DeepseekOCRForCausalLM", "Glm4MoeForCausalLM", "Glm4MoeLiteForCausalLM", "GlmMoeDsaForCausalLM",
                     "KimiVLForConditionalGeneration", "MistralLarge3ForCausalLM", "NemotronHForCausalLM",
                     "UnlimitedOCRForCausalLM"), ("n_routed_experts", "moe_intermediate_size")),
    **dict.fromkeys(("Grok1ForCausalLM", "Grok1ImgGen", "Grok1AForCausalLM"), ("num_local_experts", "moe_intermediate_size")),
    "JambaForCausalLM": ("num_experts", "intermediate_size"),
    "HYV3ForCausalLM": ("num_experts", "expert_hidden_dim"),
    "DbrxForCausalLM": ("moe_num_experts", "ffn_hidden_size"),
}
_TUNER_DEFAULT_KEYS = ("num_local_experts", "intermediate_size")


def _architecture(model_config: dict) -> str:
    architectures = model_config.get("architectures") or []
    if not architectures:
        raise ValueError("config.json has no architectures; it is not a Hugging Face model config")
    return architectures[0]


def _first(config: dict, keys: tuple[str, ...]) -> tuple[str | None, Any]:
    for key in keys:
        if config.get(key) is not None:
            return key, config[key]
    return None, None


def _moe_section(text: dict) -> dict:
    # DBRX nests its MoE keys in ffn_config (moe_num_experts, moe_top_k, ffn_hidden_size).
    return {**text, **(text.get("ffn_config") or {})}


def _text_config(model_config: dict) -> dict:
    # Multimodal wrappers (Qwen3-VL-MoE, Qwen3.5-MoE) keep the language model in text_config.
    return model_config.get("text_config") or model_config


def _quantization_config(model_config: dict) -> dict:
    return model_config.get("quantization_config") or _text_config(model_config).get("quantization_config") or {}


def _first_config_group(quant: dict) -> dict:
    groups = quant.get("config_groups") or {}
    return next(iter(groups.values()), {})


def _checkpoint_block_shape(quant: dict) -> list[int] | None:
    """Block shape as SGLang's tuner reads it: compressed-tensors group size wins over
    ``weight_block_size``. Compressed-tensors *block* strategies (``block_structure``) are not
    read by the tuner either; the server-log cross-check catches that case."""
    if quant.get("config_groups"):
        group_size = (_first_config_group(quant).get("weights") or {}).get("group_size")
        return [0, group_size] if isinstance(group_size, int) else None
    block = quant.get("weight_block_size")
    return list(block) if block else None


def _torch_dtype(model_config: dict) -> str:
    # transformers >= 4.56 writes "dtype" instead of "torch_dtype"; SGLang's tuner defaults to bf16.
    for config in (_text_config(model_config), model_config):
        value = config.get("torch_dtype") or config.get("dtype")
        if value:
            return str(value)
    return "bfloat16"


def model_moe_shape(model_config: dict) -> dict[str, Any]:
    """MoE shape of a parsed HF ``config.json`` (global, before any TP/EP sharding), for any architecture.

    Raises ValueError naming the keys looked for when the config has no MoE layers SGLang's Triton kernel runs.
    """
    architecture = _architecture(model_config)
    text = _moe_section(_text_config(model_config))
    experts_key, experts = _first(text, _EXPERT_KEYS)
    intermediate_key, intermediate = _first(text, _INTERMEDIATE_KEYS)
    topk = _first(text, _TOPK_KEYS)[1]
    if not experts or intermediate is None or topk is None or "hidden_size" not in text:
        raise ValueError(
            f"{architecture}: config.json has no MoE shape: need experts ({'/'.join(_EXPERT_KEYS)}), the expert "
            f"intermediate size ({'/'.join(_INTERMEDIATE_KEYS)}), top-k ({'/'.join(_TOPK_KEYS)}) and hidden_size "
            "(in text_config for multimodal models); a dense model has no fused-MoE configs")
    quant = _quantization_config(model_config)
    return {
        "architecture": architecture,
        "num_experts": experts,
        "experts_key": experts_key,
        "shared_expert_fusable": architecture in SHARED_EXPERT_FUSION,
        "topk": topk,
        "hidden_size": text["hidden_size"],
        "moe_intermediate_size": intermediate,
        "intermediate_key": intermediate_key,
        "dtype": _torch_dtype(model_config),
        "block_shape": _checkpoint_block_shape(quant),
        "quant_method": quant.get("quant_method"),
    }


# ---------------------------------------------------------------------------------------------
# Targets: which files the server looks up, and what the tuner will write
# ---------------------------------------------------------------------------------------------

_SELECTOR_BY_QUANT_METHOD: dict[str, str | None] = {
    "fp8": "fp8_w8a8",
    "w8a8_fp8": "fp8_w8a8",
    "w8a8_int8": "int8_w8a8",
    "mxfp4": None,  # only the dequantised-BF16 Triton path reads configs (see GptOssForCausalLM)
}
_TUNER_DTYPES = ("fp8_w8a8", "int8_w8a16", "int8_w8a8", "int4_w4a16")


def _compressed_tensors_selector(quant: dict) -> str:
    group = _first_config_group(quant)
    weights = group.get("weights") or {}
    has_activations = bool(group.get("input_activations"))
    scheme = (weights.get("type"), weights.get("num_bits"), has_activations)
    selectors = {
        ("float", 8, True): "fp8_w8a8",
        ("int", 8, True): "int8_w8a8",
        ("int", 8, False): "int8_w8a16",
        ("int", 4, False): "int4_w4a16",
    }
    if scheme not in selectors:
        raise ValueError(
            f"compressed-tensors scheme weights={weights.get('type')}{weights.get('num_bits')} "
            f"activations={'yes' if has_activations else 'no'} has no Triton MoE config dtype; pass dtype explicitly"
        )
    return selectors[scheme]


def checkpoint_dtype_selector(model_config: dict) -> str | None:
    """The ``dtype=`` part SGLang's ``get_config_dtype_str`` yields for this checkpoint."""
    quant = _quantization_config(model_config)
    method = quant.get("quant_method")
    if method is None:
        return "float32" if _torch_dtype(model_config) == "float32" else None
    if method == "compressed-tensors":
        return _compressed_tensors_selector(quant)
    if method not in _SELECTOR_BY_QUANT_METHOD:
        raise ValueError(
            f"cannot tell which MoE config dtype SGLang uses for quant_method={method!r}; pass dtype "
            f"explicitly (one of {', '.join(_TUNER_DTYPES)}, 'float32', or '' for none)"
        )
    return _SELECTOR_BY_QUANT_METHOD[method]


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
    elif target_dtype in _TUNER_DTYPES:
        tuner_dtype = target_dtype
    else:
        raise ValueError(
            f"the tuner cannot produce dtype={target_dtype!r}; its --dtype choices are auto, {', '.join(_TUNER_DTYPES)}"
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
    if options["dtype"] not in ("auto", *_TUNER_DTYPES):
        raise ValueError(f"invalid tuner --dtype {options['dtype']!r}; choices: auto, {', '.join(_TUNER_DTYPES)}")
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


def _tuner_shape(model_config: dict, tp_size: int, ep_size: int, options: dict) -> tuple[dict, int, int]:
    """(model shape, E, N) as upstream's tuner computes them for these selector options: by its own table of
    architectures (:data:`_TUNER_KEYS`), Mixtral's keys for any other."""
    shape = model_moe_shape(model_config)
    architecture = shape["architecture"]
    experts_key, intermediate_key = _TUNER_KEYS.get(architecture, _TUNER_DEFAULT_KEYS)
    text = _moe_section(_text_config(model_config))
    if text.get(experts_key) is None or text.get(intermediate_key) is None:
        listed = "its" if architecture in _TUNER_KEYS else "Mixtral's (it does not list this architecture)"
        raise ValueError(f"SGLang's tuner reads {architecture} with {listed} keys {experts_key}/{intermediate_key}, "
                         "which this config.json lacks: the tuner cannot tune this model as it is")
    shape = {**shape, "num_experts": text[experts_key], "moe_intermediate_size": text[intermediate_key]}
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


# ---------------------------------------------------------------------------------------------
# Validation of config JSON content
# ---------------------------------------------------------------------------------------------

_POWER_OF_TWO_RANGES = {"BLOCK_SIZE_M": (16, 256), "BLOCK_SIZE_N": (16, 256), "BLOCK_SIZE_K": (16, 256)}
_INT_RANGES = {"GROUP_SIZE_M": (1, 64), "num_stages": (1, 8), "waves_per_eu": (0, 8)}
_INT_CHOICES = {"num_warps": (1, 2, 4, 8, 16), "kpack": (1, 2)}
_REQUIRED_FIELDS = ("BLOCK_SIZE_M", "BLOCK_SIZE_N", "BLOCK_SIZE_K", "GROUP_SIZE_M", "num_warps", "num_stages")
_OPTIONAL_FIELDS = ("USE_TMA", "waves_per_eu", "kpack")


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _field_error(field: str, value: object) -> str | None:
    if field == "USE_TMA":
        return None if isinstance(value, bool) else f"USE_TMA={value!r} is not a boolean"
    if not _is_int(value):
        return f"{field}={value!r} is not an integer"
    if field in _POWER_OF_TWO_RANGES:
        low, high = _POWER_OF_TWO_RANGES[field]
        if not (low <= value <= high and value & (value - 1) == 0):
            return f"{field}={value} is not a power of two in {low}..{high}"
    elif field in _INT_RANGES:
        low, high = _INT_RANGES[field]
        if not low <= value <= high:
            return f"{field}={value} is outside {low}..{high}"
    elif value not in _INT_CHOICES[field]:
        return f"{field}={value} is not one of {_INT_CHOICES[field]}"
    return None


def _entry_errors(entry: object) -> list[str]:
    if not isinstance(entry, dict):
        return [f"entry is {type(entry).__name__}, not an object"]
    errors = [f"missing {field}" for field in _REQUIRED_FIELDS if field not in entry]
    errors += [f"unknown key {key!r}" for key in entry if key not in _REQUIRED_FIELDS + _OPTIONAL_FIELDS]
    for field in _REQUIRED_FIELDS + _OPTIONAL_FIELDS:
        if field in entry and (error := _field_error(field, entry[field])):
            errors.append(error)
    return errors


def _is_batch_size_key(key: object) -> bool:
    return isinstance(key, str) and key.isdigit() and key == str(int(key)) and int(key) > 0


def validate_config(data: object, *, kernel: str) -> list[str]:
    """Errors in a parsed config JSON for the ``up`` or ``down`` kernel; empty means valid."""
    if kernel not in ("up", "down"):
        raise ValueError(f"kernel must be 'up' or 'down', not {kernel!r}")
    if not isinstance(data, dict):
        return [f"{kernel} config is {type(data).__name__}, not a JSON object of batch sizes"]
    if not data:
        return [f"{kernel} config has no batch-size entries"]
    errors = []
    for key, entry in data.items():
        if not _is_batch_size_key(key):
            errors.append(f"{kernel} config: key {key!r} is not a positive integer batch size")
            continue
        errors += [f"{kernel} config, batch size {key}: {error}" for error in _entry_errors(entry)]
    return errors


# ---------------------------------------------------------------------------------------------
# Search space and shared-memory prefilter
# ---------------------------------------------------------------------------------------------


def compute_bound_search_space(block_shape: list[int] | None = None) -> list[dict[str, int]]:
    """``get_configs_compute_bound()`` for CUDA (1920 configs), in SGLang's order.

    With a block-quantised checkpoint the tuner keeps ``block_k % BLOCK_SIZE_K == 0`` (1280 for
    [128, 128]); a group-wise ``[0, 32]`` shape leaves nothing, exactly as in the tuner.
    """
    configs = [
        {
            "BLOCK_SIZE_M": block_m,
            "BLOCK_SIZE_N": block_n,
            "BLOCK_SIZE_K": block_k,
            "GROUP_SIZE_M": group_m,
            "num_warps": warps,
            "num_stages": stages,
        }
        for stages, block_m, block_k, block_n, warps, group_m in itertools.product(
            (2, 3, 4, 5), (16, 32, 64, 128, 256), (64, 128, 256), (32, 64, 128, 256), (4, 8), (1, 16, 32, 64)
        )
    ]
    if block_shape:
        block_k = block_shape[1]
        configs = [config for config in configs if block_k % config["BLOCK_SIZE_K"] == 0]
    return configs


def down_candidate_count(block_shape: list[int] | None = None) -> int:
    """Configs ``tune_down_moe.py`` screens per batch size: the search space with BLOCK_SIZE_M pinned to the up
    config's, duplicates dropped (384 for the full space)."""
    keys = ("BLOCK_SIZE_N", "BLOCK_SIZE_K", "GROUP_SIZE_M", "num_warps", "num_stages")
    return len({tuple(config[key] for key in keys) for config in compute_bound_search_space(block_shape)})


def smem_bytes(config: dict, a_bytes: float, b_bytes: float | None = None, formula: str = "triton") -> float:
    """Shared memory of the pipelined A/B tiles.

    ``triton``: ``(num_stages - 1) * tile`` matches Triton's OutOfResources figure byte-for-byte
    (sglang#28038); one stage still stages one tile, hence the floor of 1. ``sglang``:
    ``num_stages * tile`` as in ``search_space.py`` (conservative).
    """
    b_bytes = a_bytes if b_bytes is None else b_bytes
    tile = config["BLOCK_SIZE_K"] * (config["BLOCK_SIZE_M"] * a_bytes + config["BLOCK_SIZE_N"] * b_bytes)
    if formula == "triton":
        return max(config["num_stages"] - 1, 1) * tile
    if formula == "sglang":
        return config["num_stages"] * tile
    raise ValueError(f"formula must be 'triton' or 'sglang', not {formula!r}")


def prefilter_search_space(
    configs: list[dict], smem_limit: int, a_bytes: float, b_bytes: float | None = None, formula: str = "triton"
) -> tuple[list[dict], int]:
    """Drop configs whose smem estimate (:func:`smem_bytes` ``formula``) exceeds the per-block limit; (kept, dropped
    count).

    A prefilter only: epilogues add smem and other compile failures still happen.
    """
    kept = [config for config in configs if smem_bytes(config, a_bytes, b_bytes, formula) <= smem_limit]
    return kept, len(configs) - len(kept)


# GROUP_SIZE_M values the pruned space keeps: with them the best config of the full space was found at all 12 measured
# points or lost at most 0.2% (H200, docs/run-directory.md "MoE search spaces").
PRUNED_GROUP_SIZES_M = (1, 16)


def pruned_search_space(
    configs: list[dict], smem_limit: int, a_bytes: float, b_bytes: float | None = None
) -> tuple[list[dict], int]:
    """SGLang's conservative smem prefilter (``num_stages x tile``, search_space.py) plus GROUP_SIZE_M in
    :data:`PRUNED_GROUP_SIZES_M`; (kept, dropped count). 624 of 1920 compiles for 16-bit weights on H200."""
    kept = [config for config in prefilter_search_space(configs, smem_limit, a_bytes, b_bytes, "sglang")[0]
            if config["GROUP_SIZE_M"] in PRUNED_GROUP_SIZES_M]
    return kept, len(configs) - len(kept)


# ---------------------------------------------------------------------------------------------
# Batch sizes worth tuning
# ---------------------------------------------------------------------------------------------

DEFAULT_BATCH_SIZES: tuple[int, ...] = (1, 2, 4, 8, 16, 24, 32, 48, 64, 96, 128, 256, 512, 1024, 1536, 2048, 3072, 4096)


def auto_batch_sizes(
    max_running_requests: int, speculative_num_draft_tokens: int | None, chunked_prefill_size: int | None
) -> dict[str, Any]:
    """Token counts (M) this deployment actually feeds the MoE kernels, with the reasoning."""
    if max_running_requests < 1:
        raise ValueError(f"max_running_requests={max_running_requests} must be >= 1")
    if speculative_num_draft_tokens is not None and speculative_num_draft_tokens < 1:
        raise ValueError(f"speculative_num_draft_tokens={speculative_num_draft_tokens} must be >= 1")
    tokens_per_request = speculative_num_draft_tokens or 1
    max_decode = max_running_requests * tokens_per_request
    decode = [size for size in DEFAULT_BATCH_SIZES if size <= max_decode] + [max_decode]
    if speculative_num_draft_tokens:
        reasoning = (
            f"decode: up to {max_running_requests} running requests x {speculative_num_draft_tokens} draft "
            f"tokens verified per step = {max_decode} tokens"
        )
    else:
        reasoning = f"decode: up to {max_running_requests} running requests x 1 token per step = {max_decode} tokens"
    prefill: list[int] = []
    if chunked_prefill_size and chunked_prefill_size > 0:
        prefill = [size for size in DEFAULT_BATCH_SIZES if max_decode < size < chunked_prefill_size]
        prefill.append(chunked_prefill_size)
        reasoning += f"; prefill: chunks of up to chunked_prefill_size={chunked_prefill_size} tokens"
    else:
        reasoning += "; prefill: chunked prefill disabled or unknown, no prefill sizes added"
    return {"batch_sizes": sorted(set(decode + prefill)), "reasoning": reasoning}


# ---------------------------------------------------------------------------------------------
# Roofline
# ---------------------------------------------------------------------------------------------


def moe_roofline(
    M: int,
    num_experts: int,
    topk: int,
    hidden_size: int,
    intermediate_per_shard: int,
    weight_bytes: float,
    bandwidth_gbs: float,
    act_bytes: float = 2,
) -> dict[str, float]:
    """Memory-bandwidth lower bound of one fused-MoE layer (gate/up + down) on one GPU shard.

    Uniform routing: E_act = E * (1 - (1 - k/E)^M) distinct experts, each reading 3*H*I weights.
    Activations: M*H input + M*k*6I through the gate/up and SiLU intermediates + M*k*H down output
    + M*H combined output = M*(2H + k*(6I + H)) elements. Block-quant scales (~0.02 % of the
    weights) are ignored. ``bandwidth_gbs`` is in 1e9 bytes/s.
    """
    if not 0 < topk <= num_experts:
        raise ValueError(f"topk={topk} must be in 1..num_experts={num_experts}")
    experts_active = num_experts * (1 - (1 - topk / num_experts) ** M)
    weight_bytes_touched = experts_active * 3 * hidden_size * intermediate_per_shard * weight_bytes
    activation_bytes = M * act_bytes * (2 * hidden_size + topk * (6 * intermediate_per_shard + hidden_size))
    bound_us = (weight_bytes_touched + activation_bytes) / (bandwidth_gbs * 1e3)
    return {
        "experts_active": experts_active,
        "weight_bytes_touched": weight_bytes_touched,
        "activation_bytes": activation_bytes,
        "bound_us": bound_us,
    }


def kernel_table(
    before: dict[int, float],
    after: dict[int, float],
    *,
    num_experts: int,
    topk: int,
    hidden_size: int,
    intermediate_per_shard: int,
    weight_bytes: float,
    bandwidth_gbs: float,
    act_bytes: float = 2,
) -> list[dict[str, Any]]:
    """Per batch size: kernel time before/after tuning, speedup and % of the roofline reached.

    ``pct_of_roofline_after`` = bound / measured * 100; above 100 the measurement beat DRAM
    bandwidth, i.e. the tuner's repeated invocations were served from L2 (an artifact).
    """
    rows = []
    for batch_size in sorted(set(before) | set(after)):
        before_us, after_us = before.get(batch_size), after.get(batch_size)
        roofline_us = moe_roofline(
            batch_size, num_experts, topk, hidden_size, intermediate_per_shard, weight_bytes, bandwidth_gbs, act_bytes
        )["bound_us"]
        pct = roofline_us / after_us * 100 if after_us else None
        rows.append(
            {
                "batch_size": batch_size,
                "before_us": before_us,
                "after_us": after_us,
                "speedup": before_us / after_us if before_us and after_us else None,
                "roofline_us": roofline_us,
                "pct_of_roofline_after": pct,
                "artifact": pct is not None and pct > 100,
            }
        )
    return rows


# ---------------------------------------------------------------------------------------------
# Tuner output parsers
# ---------------------------------------------------------------------------------------------

_BENCH_BATCH_RE = re.compile(r"Batch size: (\d+), config: (.*)$")
_BENCH_TIME_RE = re.compile(r"Kernel time: ([\d.]+) us")
_TUNE_START_RE = re.compile(r"Start tuning over (\d+) configurations to create (.+?\.json)\.\.\.")
_TUNE_DONE_RE = re.compile(r"\] Completed tuning for batch_size=(\d+)")
_TUNE_WRITE_RE = re.compile(r"Writing best config to (.+?\.json)\.\.\.")
_TUNE_SECONDS_RE = re.compile(r"Tuning took ([\d.]+) seconds")
_DOWN_RESULT_RE = re.compile(r"M=(\d+): best down (\{.*\}) \(([\d.]+)us\)")
_DOWN_WROTE_RE = re.compile(r"^wrote (.+\.json)\s*$", re.MULTILINE)


def _literal(text: str) -> Any:
    # The tuners print Python dict reprs (single quotes, True/False), not JSON.
    return ast.literal_eval(text.strip())


def parse_tuner_benchmark_output(text: str) -> dict[int, dict[str, Any]]:
    """Benchmark mode (no ``--tune``): installed config and kernel time per batch size."""
    results: dict[int, dict[str, Any]] = {}
    current: int | None = None
    for line in text.splitlines():
        if match := _BENCH_BATCH_RE.search(line):
            current = int(match.group(1))
            results[current] = {"config": _literal(match.group(2)), "kernel_us": None}
        elif (match := _BENCH_TIME_RE.search(line)) and current is not None:
            results[current]["kernel_us"] = float(match.group(1))
            current = None
    return results


def parse_tuner_tune_output(text: str) -> dict[str, Any]:
    """Progress of ``--tune``: search-space size, output name, finished batch sizes, duration.

    ``written`` tells whether the tuner reached ``save_configs`` (never install otherwise).
    """
    start = _TUNE_START_RE.search(text)
    written = _TUNE_WRITE_RE.search(text)
    seconds = _TUNE_SECONDS_RE.search(text)
    file_name = written.group(1) if written else (start.group(2) if start else None)
    return {
        "configs_total": int(start.group(1)) if start else None,
        "file_name": file_name,
        "completed_batch_sizes": sorted({int(size) for size in _TUNE_DONE_RE.findall(text)}),
        "seconds": float(seconds.group(1)) if seconds else None,
        "written": written is not None,
    }


def parse_down_tuner_output(text: str) -> dict[str, Any]:
    """``tune_down_moe.py`` output: best down config and time per M, and the written path."""
    results = {
        int(m): {"config": _literal(config), "kernel_us": float(time_us)}
        for m, config, time_us in _DOWN_RESULT_RE.findall(text)
    }
    wrote = _DOWN_WROTE_RE.search(text)
    return {"results": results, "output_path": wrote.group(1) if wrote else None}
