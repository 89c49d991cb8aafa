# Copyright (c) llmops.sglang contributors
# Apache License 2.0 (see LICENSE)
"""Deterministic synthetic timing model of SGLang's fused-MoE Triton kernel (emulator only).

Shared by the emulated tuner scripts (`benchmark/kernels/fused_moe_triton/` in the stand-in source
checkout). No GPU work is done: a "benchmark" returns a modelled kernel time and sleeps a small,
profile-set wall time per config so tuning runs take realistic-looking (but scaled) time.

Model (the memory-bandwidth roofline of plugins/module_utils/moe_roofline.py, with a penalty per config): each of
the two GEMMs (gate/up, down) takes
`(t0 share + bytes / BW_eff) * (1 + penalty(config))`, where bytes = touched expert weights
`E_act(M) * {2,1} * H * I * b_w` (+ block-quant scales) + activations, E_act(M) = E(1-(1-k/E)^M),
BW_eff = bandwidth_efficiency * GPU bandwidth. The penalty grows (saturating) with a config's
distance from an M-dependent ideal tile shape per GEMM and is calibrated so SGLang's default
config is exactly `default_margin(M)` slower than the best single config for both GEMMs (what the
main tuner finds); a separately tuned down config (tune_down_moe.py) wins a little more. A seeded
jitter (< 1 %) is added per (M, configs).
Configs whose shared memory `(num_stages - 1) * (BM*BK*a_bytes + BK*BN*b_bytes)` exceeds the GPU's
`smem_per_block` raise OutOfResources like Triton does at launch.

Profile section `tuner:` (all keys optional; unknown keys are rejected):
  seconds_per_config     real-GPU seconds to compile and time one config (default 1.4, sglang#29484);
                         the emulator sleeps this times the profile's time_scale
  time_scale             overrides the profile's time_scale for tuning only (a demo can compress hours of
                         tuning further than minutes of serving); null = the profile's
  t0_us                  fixed kernel-chain latency in microseconds (default 12)
  bandwidth_efficiency   fraction of mem_bandwidth_gbs the ideal config reaches (default 0.85)
  default_margin         {M: fraction} how much slower SGLang's default config is than the best single config,
                         interpolated in log2(M), clamped outside (default {1: .03, 16: .12, 512: .12, 4096: .05})
  worst_config_penalty   upper bound of the slowdown of a far-off config (default 1.5 = 2.5x the ideal)
  jitter                 max relative timing jitter, seeded (default 0.004)
  crash_at_batch_size    M at which a tuning worker process dies halfway through the search space
                         (emulated Triton segfault; benchmark-only runs are unaffected); null = never
  compile_error_configs  how many configs of the tuned search space fail to compile with
                         RuntimeError("PassManager::run failed") (default 0)
  engine_compile_seconds real CPU seconds llmops.sglang's MoE engine spends compiling one Triton specialisation
                         of one config on one core (default 0.6, measured on an H100 host with SGLang 0.5.23 and
                         Triton 3.6.0; moe_engine_bench.py)
  engine_crash_configs   how many configs of the engine's search space kill the process compiling them (emulated
                         Triton segfault, exit 139; default 0)
  engine_import_initialises_cuda
                         true: importing the emulated kernels initialises CUDA, so a process forked from one that
                         imported them cannot use CUDA, as torch refuses ("Cannot re-initialize CUDA in forked
                         subprocess"); the engine's fork server must then fall back to spawned workers (default false)
"""
from __future__ import annotations

import hashlib
import math
import os
import sys
import time
from dataclasses import dataclass, field
from typing import Any

from sglang._emulator.profile import Profile, ProfileError

CONFIG_KEYS = ("BLOCK_SIZE_M", "BLOCK_SIZE_N", "BLOCK_SIZE_K", "GROUP_SIZE_M", "num_warps", "num_stages")
# Triton's launch defaults for configs that leave these out (SGLang's BF16 default config does).
TRITON_DEFAULT_NUM_WARPS = 4
TRITON_DEFAULT_NUM_STAGES = 3
BLOCK_SIZES_M = (16, 32, 64, 128, 256)
# Weight bytes per element of the `dtype=` selector (None = the checkpoint's 16-bit dtype).
WEIGHT_BYTES = {None: 2.0, "float32": 4.0, "fp8_w8a8": 1.0, "int8_w8a8": 1.0, "int8_w8a16": 1.0, "int4_w4a16": 0.5}
# Activation bytes per element: w8a8 kernels quantize activations, the others run 16-bit (or fp32).
ACTIVATION_BYTES = {None: 2, "float32": 4, "fp8_w8a8": 1, "int8_w8a8": 1, "int8_w8a16": 2, "int4_w4a16": 2}
# Share of the fused MoE's weights (and fixed latency) in each GEMM: w13 is [E, 2I, H], w2 is [E, H, I].
GEMM_SHARE = {"up": 2 / 3, "down": 1 / 3}
COMPILE_ERROR = "PassManager::run failed"
INTEGER_KEYS = ("crash_at_batch_size", "compile_error_configs", "engine_crash_configs")
BOOLEAN_KEYS = ("engine_import_initialises_cuda",)


class OutOfResources(Exception):
    """Emulates triton.runtime.errors.OutOfResources (re-exported by triton.runtime.autotuner)."""

    def __init__(self, required: int, limit: int, name: str = "shared memory") -> None:
        self.required, self.limit, self.name = required, limit, name
        super().__init__(
            f"out of resource: {name}, Required: {required}, Hardware limit: {limit}. "
            "Reducing block sizes or `num_stages` may help."
        )


@dataclass(frozen=True)
class TunerSettings:
    seconds_per_config: float = 1.4
    t0_us: float = 12.0
    bandwidth_efficiency: float = 0.85
    default_margin: dict[int, float] = field(
        default_factory=lambda: {1: 0.03, 16: 0.12, 512: 0.12, 4096: 0.05}
    )
    worst_config_penalty: float = 1.5
    jitter: float = 0.004
    crash_at_batch_size: int | None = None
    compile_error_configs: int = 0
    time_scale: float | None = None
    engine_compile_seconds: float = 0.6
    engine_crash_configs: int = 0
    engine_import_initialises_cuda: bool = False

    @classmethod
    def from_profile(cls, profile: Profile) -> TunerSettings:
        section = profile.raw.get("tuner") or {}
        if not isinstance(section, dict):
            raise ProfileError(f"{profile.path}: 'tuner' must be a mapping")
        known = cls.__dataclass_fields__
        for key in section:
            if key not in known:
                raise ProfileError(f"{profile.path}: unknown key 'tuner.{key}' (known: {', '.join(known)})")
        values = dict(section)
        for key, value in values.items():
            if key == "default_margin":
                if not isinstance(value, dict) or not all(_is_number(m) and _is_number(v) for m, v in value.items()):
                    raise ProfileError(f"{profile.path}: 'tuner.default_margin' must map batch sizes to fractions")
                values[key] = {int(m): float(v) for m, v in value.items()}
            elif key == "time_scale" and value is None:
                continue
            elif key in BOOLEAN_KEYS:
                if not isinstance(value, bool):
                    raise ProfileError(f"{profile.path}: 'tuner.{key}' must be true or false, got {value!r}")
            elif key in INTEGER_KEYS:
                if not (_is_integer(value) or (key == "crash_at_batch_size" and value is None)):
                    raise ProfileError(f"{profile.path}: 'tuner.{key}' must be an integer, got {value!r}")
            elif not _is_number(value):
                raise ProfileError(f"{profile.path}: 'tuner.{key}' must be a number, got {value!r}")
        settings = cls(**values)
        settings.check(profile.path)
        return settings

    def check(self, source: str) -> None:
        margins = list(self.default_margin.values())
        if not margins or not all(0 < value < self.worst_config_penalty for value in margins):
            raise ProfileError(f"{source}: 'tuner.default_margin' values must be in (0, worst_config_penalty)")
        if not 0 <= self.jitter < 0.01:
            raise ProfileError(f"{source}: 'tuner.jitter' must be in [0, 0.01)")
        if not 0 < self.bandwidth_efficiency <= 1:
            raise ProfileError(f"{source}: 'tuner.bandwidth_efficiency' must be in (0, 1]")
        if self.time_scale is not None and not self.time_scale > 0:
            raise ProfileError(f"{source}: 'tuner.time_scale' must be > 0 (or null for the profile's)")
        if self.seconds_per_config < 0 or self.compile_error_configs < 0:
            raise ProfileError(f"{source}: 'tuner.seconds_per_config' and 'tuner.compile_error_configs' must be >= 0")
        if self.engine_compile_seconds < 0 or self.engine_crash_configs < 0:
            raise ProfileError(f"{source}: 'tuner.engine_compile_seconds' and 'tuner.engine_crash_configs' must be >= 0")

    def margin_at(self, num_tokens: int) -> float:
        """default_margin interpolated linearly in log2(M), constant beyond the first/last anchor."""
        anchors = sorted(self.default_margin.items())
        x = math.log2(max(num_tokens, 1))
        points = [(math.log2(max(m, 1)), value) for m, value in anchors]
        if x <= points[0][0]:
            return points[0][1]
        for (x0, y0), (x1, y1) in zip(points, points[1:]):
            if x <= x1:
                return y0 + (y1 - y0) * (x - x0) / (x1 - x0)
        return points[-1][1]


@dataclass(frozen=True)
class MoeProblem:
    """One fused-MoE shape as the tuner benchmarks it (per GPU shard)."""

    num_experts: int
    topk: int
    hidden_size: int
    intermediate_size: int  # per-shard N (= shard_intermediate_size // 2)
    dtype: str | None  # the config-name selector: None, "float32", "fp8_w8a8", ...
    block_shape: tuple[int, int] | None = None

    @property
    def weight_bytes(self) -> float:
        return WEIGHT_BYTES[self.dtype]

    @property
    def activation_bytes(self) -> int:
        return ACTIVATION_BYTES[self.dtype]

    def experts_active(self, num_tokens: int) -> float:
        return self.num_experts * (1 - (1 - self.topk / self.num_experts) ** num_tokens)

    def tokens_per_expert(self, num_tokens: int) -> float:
        return num_tokens * self.topk / self.experts_active(num_tokens)

    def gemm_bytes(self, num_tokens: int, gemm: str) -> float:
        """Bytes one GEMM moves: touched expert weights (+ block scales) and its activations."""
        h, i, m, k = self.hidden_size, self.intermediate_size, num_tokens, self.topk
        weights = self.experts_active(num_tokens) * h * i * (2 if gemm == "up" else 1)
        scales = 0.0
        if self.block_shape and all(self.block_shape):
            scales = weights * 4 / (self.block_shape[0] * self.block_shape[1])
        # up: read x, write and re-read the 2I-wide gate/up output; down: I in and out of the
        # activation, the k*H partial outputs and the reduced output (the roofline's activation bytes split by GEMM).
        elements = m * h + 4 * m * k * i if gemm == "up" else 2 * m * k * i + m * k * h + m * h
        return weights * self.weight_bytes + scales + elements * self.activation_bytes


def get_default_config(
    M: int,
    E: int,
    N: int,
    K: int,
    topk: int,
    dtype: str | None,
    is_marlin: bool = False,
    block_shape: list[int] | None = None,
) -> dict[str, int]:
    """SGLang's `get_default_config` (CUDA branch): the config used when no tuned JSON is found."""
    if dtype == "fp8_w8a8":
        if block_shape is None:
            if M <= E:
                return {"BLOCK_SIZE_M": 64, "BLOCK_SIZE_N": 128, "BLOCK_SIZE_K": 128, "GROUP_SIZE_M": 1,
                        "num_warps": 4, "num_stages": 4}
            return {"BLOCK_SIZE_M": 128, "BLOCK_SIZE_N": 256, "BLOCK_SIZE_K": 128, "GROUP_SIZE_M": 32,
                    "num_warps": 8, "num_stages": 4}
        return {"BLOCK_SIZE_M": 64, "BLOCK_SIZE_N": block_shape[0], "BLOCK_SIZE_K": block_shape[1],
                "GROUP_SIZE_M": 32, "num_warps": 4, "num_stages": 3}
    if M <= E or (is_marlin and M <= 32):
        return {"BLOCK_SIZE_M": 16, "BLOCK_SIZE_N": 32, "BLOCK_SIZE_K": 64, "GROUP_SIZE_M": 1}
    return {"BLOCK_SIZE_M": 64, "BLOCK_SIZE_N": 64, "BLOCK_SIZE_K": 32, "GROUP_SIZE_M": 8}


def default_config_for(problem: MoeProblem, num_tokens: int) -> dict[str, int]:
    """The default config SGLang would run for this problem (the tuner's benchmark-mode fallback)."""
    return get_default_config(
        num_tokens, problem.num_experts, problem.intermediate_size * 2, problem.hidden_size, problem.topk,
        problem.dtype, False, list(problem.block_shape) if problem.block_shape else None,
    )


def shared_memory_bytes(config: dict[str, Any], a_bytes: float, b_bytes: float) -> int:
    """Triton's pipelined smem need: (num_stages - 1) stages of A and B tiles (sglang#28038)."""
    stages = config.get("num_stages", TRITON_DEFAULT_NUM_STAGES)
    bm, bn, bk = config["BLOCK_SIZE_M"], config["BLOCK_SIZE_N"], config["BLOCK_SIZE_K"]
    return int((stages - 1) * (bm * bk * a_bytes + bk * bn * b_bytes))


def config_key(config: dict[str, Any]) -> tuple[int, ...]:
    """Hashable identity of a config, with Triton's defaults filled in."""
    filled = {"num_warps": TRITON_DEFAULT_NUM_WARPS, "num_stages": TRITON_DEFAULT_NUM_STAGES, **config}
    return tuple(int(filled[key]) for key in CONFIG_KEYS)


class KernelModel:
    """Times fused-MoE calls on the emulated GPU of one profile; one instance per tuner worker."""

    def __init__(self, profile: Profile, seed: int = 0) -> None:
        self.profile = profile
        self.settings = TunerSettings.from_profile(profile)
        self.seed = seed
        self._broken: frozenset[tuple[int, ...]] = frozenset()
        self._crash_after = 0  # configs benchmarked at crash_at_batch_size before the worker dies; 0 = not tuning
        self._crashed_m_benchmarks = 0
        self._sleep_debt = 0.0
        self._calibration: dict[tuple[MoeProblem, int], dict[str, tuple[dict[str, int], float]]] = {}

    def start_tuning(self, search_space: list[dict[str, Any]]) -> frozenset[tuple[int, ...]]:
        """Arm the tuning faults for this search space; returns the keys of the configs that will not compile.

        The `compile_error_configs` broken configs are a seeded pick from this space (a miscompiling
        Triton/driver pair breaks the same configs at every M); the injected crash hits halfway
        through the space at crash_at_batch_size.
        """
        ranked = sorted(search_space, key=lambda config: self._unit_hash("compile", config_key(config)))
        self._broken = frozenset(config_key(config) for config in ranked[: self.settings.compile_error_configs])
        self._crash_after = max(1, len(search_space) // 2)
        self._crashed_m_benchmarks = 0
        return self._broken

    def benchmark(
        self,
        problem: MoeProblem,
        num_tokens: int,
        config: dict[str, Any],
        down_config: dict[str, Any] | None = None,
    ) -> float:
        """Kernel time in microseconds of one fused MoE call; spends the emulated compile+timing wall time.

        `config` drives both GEMMs unless `down_config` is given (as with SGLang's override_config).
        Raises OutOfResources, or RuntimeError for an injected compile failure, like Triton.
        """
        self._spend(self.settings.seconds_per_config)
        if self._crash_after and num_tokens == self.settings.crash_at_batch_size:
            self._crashed_m_benchmarks += 1
            if self._crashed_m_benchmarks >= self._crash_after:
                self._die()
        down = config if down_config is None else down_config
        for gemm_config in (config, down):
            self._check_launch(problem, gemm_config)
        return self.kernel_time_us(problem, num_tokens, config, down)

    def kernel_time_us(
        self, problem: MoeProblem, num_tokens: int, up_config: dict[str, Any], down_config: dict[str, Any]
    ) -> float:
        """Modelled time (no launch checks, no wall cost) of the fused MoE with these two GEMM configs."""
        total = self.gemm_time_us(problem, num_tokens, "up", up_config)
        total += self.gemm_time_us(problem, num_tokens, "down", down_config)
        key = (num_tokens, config_key(up_config), config_key(down_config))
        return total * (1 + self.settings.jitter * (2 * self._unit_hash("jitter", key) - 1))

    def gemm_time_us(self, problem: MoeProblem, num_tokens: int, gemm: str, config: dict[str, Any]) -> float:
        """Modelled time of one GEMM (``up`` or ``down``) running ``config``: its ideal time x (1 + penalty)."""
        return self.ideal_gemm_time_us(problem, num_tokens, gemm) * (1 + self.penalty(problem, num_tokens, gemm, config))

    def spend(self, real_seconds: float) -> None:
        """Sleep ``real_seconds`` of real-GPU (or real-CPU) time at the tuning time scale."""
        self._spend(real_seconds)

    def ideal_time_us(self, problem: MoeProblem, num_tokens: int) -> float:
        """The fastest time any config reaches (the model's roofline-anchored optimum, no jitter)."""
        return sum(self.ideal_gemm_time_us(problem, num_tokens, gemm) for gemm in GEMM_SHARE)

    def ideal_gemm_time_us(self, problem: MoeProblem, num_tokens: int, gemm: str) -> float:
        bandwidth = self.profile.gpu.mem_bandwidth_gbs * 1e9 * self.settings.bandwidth_efficiency
        return self.settings.t0_us * GEMM_SHARE[gemm] + problem.gemm_bytes(num_tokens, gemm) / bandwidth * 1e6

    def penalty(self, problem: MoeProblem, num_tokens: int, gemm: str, config: dict[str, Any]) -> float:
        """Relative slowdown of one GEMM running `config` instead of its ideal tile shape."""
        ideal, scale = self._calibrate(problem, num_tokens)[gemm]
        return _saturating_penalty(_distance(config, ideal), scale, self.settings.worst_config_penalty)

    def _calibrate(self, problem: MoeProblem, num_tokens: int) -> dict[str, tuple[dict[str, int], float]]:
        """Per GEMM: (ideal config, distance scale), so that the default config is exactly margin_at(M)
        slower than the best single config (the up GEMM's ideal, which the main tuner finds).

        The down scale gives the default the margin on the down GEMM alone; the up scale also absorbs
        what the up-ideal config loses on the down GEMM, which a separate down config wins back.
        Cached: a tuning worker asks once per config.
        """
        key = (problem, num_tokens)
        if key not in self._calibration:
            worst, margin = self.settings.worst_config_penalty, self.settings.margin_at(num_tokens)
            default = default_config_for(problem, num_tokens)
            ideal = {gemm: self.ideal_config(problem, num_tokens, gemm) for gemm in GEMM_SHARE}
            down_scale = _scale_for(_distance(default, ideal["down"]), margin, worst)
            down_loss = _saturating_penalty(_distance(ideal["up"], ideal["down"]), down_scale, worst)
            base = {gemm: self.ideal_gemm_time_us(problem, num_tokens, gemm) for gemm in GEMM_SHARE}
            up_target = min(margin + (1 + margin) * base["down"] * down_loss / base["up"], 0.99 * worst)
            self._calibration[key] = {
                "up": (ideal["up"], _scale_for(_distance(default, ideal["up"]), up_target, worst)),
                "down": (ideal["down"], down_scale),
            }
        return self._calibration[key]

    def ideal_config(self, problem: MoeProblem, num_tokens: int, gemm: str) -> dict[str, int]:
        """The tile shape this emulated GPU runs fastest for one GEMM at M tokens (always in the search space)."""
        per_expert = problem.tokens_per_expert(num_tokens)
        block_m = next((bm for bm in BLOCK_SIZES_M if bm >= per_expert), BLOCK_SIZES_M[-1])
        narrow_weights = problem.weight_bytes <= 1
        if gemm == "up":  # K = hidden (long): wide K tiles; N = 2I
            block_n = 64 if per_expert <= 16 else 128
            block_k = 256 if narrow_weights else 128
        else:  # K = I (short), N = hidden (wide)
            block_n = 128 if per_expert <= 16 else 64
            block_k = 128 if narrow_weights or problem.intermediate_size > 256 else 64
        if problem.block_shape and problem.block_shape[1]:
            while problem.block_shape[1] % block_k and block_k > 64:
                block_k //= 2
        config = {
            "BLOCK_SIZE_M": block_m,
            "BLOCK_SIZE_N": block_n,
            "BLOCK_SIZE_K": block_k,
            "GROUP_SIZE_M": 1 if per_expert <= 16 else 16 if per_expert <= 64 else 32,
            "num_warps": 4 if block_m * block_n <= 64 * 128 else 8,
            "num_stages": 4 if per_expert <= 16 else 3,
        }
        return self._fit_shared_memory(problem, config)

    def _fit_shared_memory(self, problem: MoeProblem, config: dict[str, int]) -> dict[str, int]:
        # Shrink in the order a kernel author would: pipeline depth, then K, N and M tiles.
        limit = self.profile.gpu.smem_per_block
        shrink_order = (("num_stages", 2), ("BLOCK_SIZE_K", 64), ("BLOCK_SIZE_N", 32), ("BLOCK_SIZE_M", 16))
        for key, floor in shrink_order:
            while config[key] > floor and self._smem(problem, config) > limit:
                config[key] = config[key] - 1 if key == "num_stages" else config[key] // 2
        return config

    def _smem(self, problem: MoeProblem, config: dict[str, Any]) -> int:
        return shared_memory_bytes(config, problem.activation_bytes, problem.weight_bytes)

    def _check_launch(self, problem: MoeProblem, config: dict[str, Any]) -> None:
        if config_key(config) in self._broken:
            raise RuntimeError(COMPILE_ERROR)
        required = self._smem(problem, config)
        if required > self.profile.gpu.smem_per_block:
            raise OutOfResources(required, self.profile.gpu.smem_per_block)

    def _unit_hash(self, purpose: str, key: Any) -> float:
        digest = hashlib.blake2b(repr((purpose, self.profile.seed, self.seed, key)).encode(), digest_size=8)
        return int.from_bytes(digest.digest(), "big") / 2**64

    def _spend(self, real_seconds: float) -> None:
        # Sleep in >= 20 ms slices: thousands of sub-millisecond sleeps would cost more CPU than they save.
        scale = self.profile.time_scale if self.settings.time_scale is None else self.settings.time_scale
        self._sleep_debt += real_seconds * scale
        if self._sleep_debt >= 0.02:
            time.sleep(self._sleep_debt)
            self._sleep_debt = 0.0

    def _die(self) -> None:
        # A Triton/driver crash takes the whole worker process down; no Python exception escapes.
        sys.stderr.write("Fatal Python error: Segmentation fault (emulated: tuner.crash_at_batch_size)\n")
        sys.stderr.flush()
        os._exit(139)


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _is_integer(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _scale_for(distance: float, penalty: float, worst: float) -> float:
    """Distance scale at which a config `distance` away from the ideal gets exactly `penalty`."""
    # A reference config that is the ideal itself (distance 0) cannot carry a margin; treat it as
    # one small step away instead of dividing by zero.
    return -max(distance, 0.1) / math.log(1 - penalty / worst)


def _saturating_penalty(distance: float, scale: float, worst: float) -> float:
    return worst * (1 - math.exp(-distance / scale))


def _distance(config: dict[str, Any], ideal: dict[str, int]) -> float:
    """Weighted log-distance between tile shapes; 0 only for the ideal config itself."""
    candidate = dict(zip(CONFIG_KEYS, config_key(config)))
    log_terms = {"BLOCK_SIZE_M": 1.0, "BLOCK_SIZE_N": 0.5, "BLOCK_SIZE_K": 0.5, "num_warps": 0.4}
    distance = sum(weight * abs(math.log2(candidate[key] / ideal[key])) for key, weight in log_terms.items())
    distance += 0.1 * abs(math.log2(candidate["GROUP_SIZE_M"]) - math.log2(ideal["GROUP_SIZE_M"]))
    return distance + 0.3 * abs(candidate["num_stages"] - ideal["num_stages"])
