# Copyright (c) llmops.sglang contributors
# Apache License 2.0 (see LICENSE)
"""CUDA-graph settings of the emulated release, resolved as the release resolves them.

Up to 0.5.13 a start has decode graphs (``cuda_graph_max_bs``, ``cuda_graph_bs``) and piecewise prefill graphs
(``disable_piecewise_cuda_graph`` ...), decided in ServerArgs.__post_init__ (sglang/srt/server_args.py).
From 0.5.14 one ``cuda_graph_config`` holds a PhaseConfig per phase (decode, prefill), resolved from the
per-phase flags (``--cuda-graph-backend-{decode,prefill}``, ``--cuda-graph-max-bs-{decode,prefill}``, ...),
the memory tier and auto-disable rules; the model runner captures what it says. This module is the 0.5.14+
resolution as sglang 0.5.23 has it: sglang/srt/model_executor/cuda_graph_config.py (PhaseConfig, defaults),
sglang/srt/arg_groups/cuda_graph_hook.py (precedence, compatibility rules, batch sizes) and
sglang/srt/arg_groups/memory_hook.py (``handle_gpu_memory_settings``: max_bs by GPU memory).
"""
from __future__ import annotations

import copy
import json
import logging
from typing import Any

logger = logging.getLogger("sglang.srt.arg_groups.cuda_graph_hook")

PHASES = ("decode", "prefill")
BACKENDS = ("full", "breakable", "disabled")
# PhaseConfig's fields in declaration order, with their defaults (cuda_graph_config.py): what the dump lists.
PHASE_FIELDS = {"backend": "disabled", "max_bs": None, "bs": None, "tc_compiler": "eager", "max_context_size": None,
                "full_prefill_max_req": None, "full_prefill_prefix_chunk_tokens": None, "max_seq_len": None}
# --cuda-graph-config JSON keys a phase accepts (ALLOWED_KEYS_PER_PHASE).
ALLOWED_KEYS = {"decode": ("backend", "max_bs", "bs"),
                "prefill": ("backend", "max_bs", "bs", "max_context_size", "full_prefill_max_req",
                            "full_prefill_prefix_chunk_tokens", "max_seq_len")}
# a2a backends breakable prefill graphs are validated with (disable_breakable_cudagraph_if_incompatible).
BREAKABLE_A2A_BACKENDS = ("none", "deepep", "megamoe", "flashinfer")
# handle_gpu_memory_settings: (GPU memory limit GiB, chunked_prefill_size, decode max_bs tp<4, decode max_bs tp>=4);
# the last tier holds every larger GPU.
MEMORY_TIERS = ((20, 2048, 8, 8), (35, 4096, 48, 160), (60, 4096, 32, 160), (90, 8192, 256, 512),
                (160, 8192, 256, 512), (None, 16384, 512, 512))


def default_config() -> dict[str, dict[str, Any]]:
    """CudaGraphConfig(): decode captured in full, prefill breakable (CUDA's default_prefill_backend)."""
    return {"decode": {**PHASE_FIELDS, "backend": "full"}, "prefill": {**PHASE_FIELDS, "backend": "breakable"}}


def memory_tier(gpu_memory_mib: int) -> tuple[int, int, int]:
    """(chunked_prefill_size, decode max_bs tp<4, decode max_bs tp>=4) of the GPU's memory tier."""
    for limit_gib, chunked, small_tp, large_tp in MEMORY_TIERS:
        if limit_gib is None or gpu_memory_mib < limit_gib * 1024:
            return chunked, small_tp, large_tp
    raise AssertionError("the last tier has no limit")


class PhaseGraphResolver:
    """Resolves ``cuda_graph_config`` for one ServerArgs (``resolve``), keeping which settings were explicit."""

    def __init__(self, args: Any) -> None:
        self.args = args
        self.config = default_config()
        self.locked: set[tuple[str, str]] = set()

    def resolve(self, gpu_memory_mib: int, is_mla: bool, emulated_rules: list[tuple[bool, str]]) -> dict:
        """parse_cuda_graph_config, apply_cuda_graph_compatibility, apply_cuda_graph_disaggregation_roles and
        the batch-size part of handle_gpu_memory_settings, in the release's order."""
        self._parse()
        self._apply_compatibility(emulated_rules)
        self._apply_disaggregation_roles()
        self._materialize_decode(gpu_memory_mib)
        self._materialize_prefill(is_mla)
        return self.config

    def _set(self, phase: str, key: str, value: Any) -> None:
        self.config[phase][key] = value
        self.locked.add((phase, key))

    def _parse(self) -> None:
        """Precedence, lowest first: --disable-cuda-graph, --disable-{prefill,decode}-cuda-graph, the per-phase
        flags, then --cuda-graph-config JSON."""
        args = self.args
        if args.disable_cuda_graph:
            for phase in PHASES:
                self._set(phase, "backend", "disabled")
        if args.disable_prefill_cuda_graph:
            self._set("prefill", "backend", "disabled")
        if args.disable_decode_cuda_graph:
            self._set("decode", "backend", "disabled")
        flags = (("decode", "backend", args.cuda_graph_backend_decode),
                 ("prefill", "backend", args.cuda_graph_backend_prefill),
                 ("decode", "max_bs", args.cuda_graph_max_bs_decode),
                 ("prefill", "max_bs", args.cuda_graph_max_bs_prefill),
                 ("decode", "bs", args.cuda_graph_bs_decode),
                 ("prefill", "bs", args.cuda_graph_bs_prefill))
        for phase, key, value in flags:
            if value is not None:
                self._set(phase, key, value)
        for phase, settings in _explicit_config(args.cuda_graph_config).items():
            for key, value in settings.items():
                self._set(phase, key, value)

    def _apply_compatibility(self, emulated_rules: list[tuple[bool, str]]) -> None:
        """Auto-disable the prefill graph for configurations it does not support, unless its backend is explicit."""
        if ("prefill", "backend") in self.locked:
            return
        args, backend = self.args, self.config["prefill"]["backend"]
        if args.pp_size > 1 and backend == "breakable":
            logger.info("Disabling breakable prefill CUDA graph by default for pipeline "
                        "parallelism. Set --cuda-graph-backend-prefill=breakable to opt in.")
            self.config["prefill"]["backend"] = "disabled"
            return
        if backend != "breakable":
            return  # full prefill graphs have no rule (disable_full_prefill_cudagraph_if_incompatible)
        rules = [(args.enable_two_batch_overlap, "two-batch overlap"),
                 (args.moe_a2a_backend not in BREAKABLE_A2A_BACKENDS, "unvalidated a2a backend"),
                 *emulated_rules]
        name = next((name for applies, name in rules if applies), None)
        if name is not None:
            logger.warning("Breakable CUDA graph is incompatible with %s; disabling prefill CUDA graph.", name)
            self.config["prefill"]["backend"] = "disabled"

    def _apply_disaggregation_roles(self) -> None:
        """A PD prefill server never decodes, a PD decode server never prefills (unless the backend is explicit)."""
        idle = {"prefill": "decode", "decode": "prefill"}.get(self.args.disaggregation_mode)
        if idle is not None and (idle, "backend") not in self.locked:
            self.config[idle]["backend"] = "disabled"

    def _materialize_decode(self, gpu_memory_mib: int) -> None:
        args, decode = self.args, self.config["decode"]
        max_bs_is_default = decode["max_bs"] is None
        if max_bs_is_default:
            _, small_tp, large_tp = memory_tier(gpu_memory_mib)
            decode["max_bs"] = small_tp if args.tp_size < 4 else large_tp
        if max_bs_is_default and args.max_running_requests is not None:
            decode["max_bs"] = min(decode["max_bs"], args.max_running_requests)
        if decode["bs"] is None:
            decode["bs"] = decode_batch_sizes(decode["max_bs"], args.speculative_algorithm is not None,
                                              args.disable_cuda_graph_padding)
        else:
            decode["max_bs"] = max(decode["bs"])

    def _materialize_prefill(self, is_mla: bool) -> None:
        args, prefill = self.args, self.config["prefill"]
        if prefill["max_bs"] is None:
            # The chunked prefill size; MLA capture is capped at 8192 tokens, max_total_tokens caps both.
            prefill["max_bs"] = min(8192, args.chunked_prefill_size) if is_mla else args.chunked_prefill_size
            if args.max_total_tokens is not None:
                prefill["max_bs"] = min(prefill["max_bs"], args.max_total_tokens)
        if prefill["bs"] is None:
            prefill["bs"] = prefill_batch_sizes(prefill["max_bs"])


def _explicit_config(raw: Any) -> dict[str, dict[str, Any]]:
    """--cuda-graph-config as parse_cuda_graph_config_arg reads it: a JSON object of phase -> settings."""
    if raw is None:
        return {}
    value = json.loads(raw) if isinstance(raw, str) else copy.deepcopy(raw)
    if not isinstance(value, dict):
        raise ValueError("--cuda-graph-config must be a JSON object of phase -> settings")
    for phase, settings in value.items():
        if phase not in PHASES or not isinstance(settings, dict):
            raise ValueError(f"--cuda-graph-config: unknown phase {phase!r} (allowed: {', '.join(PHASES)})")
        unknown = sorted(set(settings) - set(ALLOWED_KEYS[phase]))
        if unknown:
            raise ValueError(f"--cuda-graph-config[{phase}]: unknown keys {unknown}")
        if settings.get("backend", "full") not in BACKENDS:
            raise ValueError(f"--cuda-graph-config[{phase}].backend={settings['backend']!r} not allowed; "
                             f"allowed: {BACKENDS}")
    return value


def decode_batch_sizes(max_bs: int, speculative: bool, no_padding: bool) -> list[int]:
    """generate_decode_cuda_graph_batch_sizes: finer steps for speculative decoding; max_bs always included."""
    if no_padding:
        sizes = list(range(1, max_bs + 1))
    elif not speculative:
        sizes = [1, 2, 4, 8, 12, *range(16, 257, 8), *range(272, 512, 16), *range(512, max_bs + 1, 32)]
    else:
        sizes = [*range(1, 9), *range(10, 33, 2), *range(40, 65, 4), *range(72, 257, 8), *range(272, max_bs + 1, 16)]
    sizes = [bs for bs in sizes if bs <= max_bs]
    return sizes if max_bs in sizes else [*sizes, max_bs]


def prefill_batch_sizes(max_bs: int) -> list[int]:
    """generate_prefill_cuda_graph_batch_sizes: the token counts prefill graphs are captured for."""
    sizes = [*range(4, 33, 4), *range(48, 257, 16), *range(288, 513, 32), *range(576, 1025, 64),
             *range(1280, 4097, 256), *range(4608, max_bs + 1, 512)]
    return [size for size in sizes if size <= max_bs]


def capture_batch_sizes(configured: list[int], max_running_requests: int) -> list[int]:
    """get_batch_sizes_to_capture (base_cuda_graph_runner.py): the configured sizes up to the request pool,
    which is added when every configured size is larger."""
    sizes = list(configured)
    if max(sizes) > max_running_requests:
        sizes.append(max_running_requests)
    return sorted({bs for bs in sizes if bs <= max_running_requests})
