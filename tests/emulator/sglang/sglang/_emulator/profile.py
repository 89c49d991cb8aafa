# Copyright (c) llmops.sglang contributors
# Apache License 2.0 (see LICENSE)
"""Emulator profile: the emulated GPU node and its performance/capacity model, loaded from YAML.

Time convention: every duration in a profile is what the real GPU would take ("emulated time");
the emulator really sleeps `duration * time_scale`. With time_scale s a client measuring wall
time sees throughputs of real/s (s=0.02 => 50x the real numbers). The schema is documented in
tests/emulator/README.md; unknown keys are rejected with the key's dotted path. A profile may derive
from another (`base: other.yaml`, relative to its own directory): its keys are deep-merged over the base's
(mappings merge key by key, any other value replaces), so a variant states only what differs.
"""
from __future__ import annotations

import dataclasses
import os
import types
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

PROFILE_ENV = "SGLANG_EMULATOR_PROFILE"
DEFAULT_PROFILE_PATH = "/etc/sglang-emulator/profile.yaml"
# Sections other emulator parts own and validate themselves (kept verbatim in Profile.raw).
FREE_FORM_SECTIONS = ("tuner",)
# A profile derived from another names it here (a path relative to the deriving profile's directory).
BASE_KEY = "base"


class ProfileError(ValueError):
    """The profile file is missing, malformed or has unknown/invalid keys."""


@dataclass(frozen=True)
class GpuSpec:
    name: str
    count: int
    compute_capability: str
    memory_mib: int
    driver: str
    power_limit_w: float
    uuid_prefix: str
    smem_per_block: int
    mem_bandwidth_gbs: float
    cuda_version: str = "13.0"
    # Driver/firmware reservation nvidia-smi reports as memory.reserved (never usable).
    reserved_memory_mib: int = 638
    idle_power_w: float = 34.0
    numa_nodes: int = 2
    cpus: int = 64

    @property
    def memory_gib(self) -> float:
        return self.memory_mib / 1024

    @property
    def sm_version(self) -> int:
        major, _, minor = self.compute_capability.partition(".")
        return int(major) * 10 + int(minor or 0)


@dataclass(frozen=True)
class StartupTimes:
    """Emulated seconds spent in each startup phase, and the time scale they run at.

    ``time_scale`` None: the profile's. A start of its own scale lets a test suite restart servers in seconds while
    the served tokens keep the profile's pace (the accounting takes it as ``tuning_run_emulator_time_scale.startup``).
    """

    init_distributed_s: float = 2.0
    load_weights_s: float = 60.0
    draft_load_weights_s: float = 3.0
    memory_pool_s: float = 1.5
    cuda_graph_s: float = 12.0
    piecewise_cuda_graph_s: float = 20.0
    warmup_s: float = 1.0
    shutdown_s: float = 0.5
    time_scale: float | None = None


@dataclass(frozen=True)
class DecodeModel:
    """Decode step time of the non-speculative target model at the profile's reference TP size."""

    step_ms: dict[int, float]
    reference_tp: int = 1
    # Step time scales with (reference_tp / tp) ** tp_exponent for other TP sizes.
    tp_exponent: float = 0.7


@dataclass(frozen=True)
class PrefillModel:
    base_ms: float = 10.0
    per_token_ms: float = 0.05


@dataclass(frozen=True)
class SpeculativeModel:
    # Probability that each draft token is accepted; accept length = 1 + sum(p**i, i=1..num_steps).
    token_acceptance: float = 0.7
    # Per-request spread of the mean accept length (prompts differ in predictability).
    request_cv: float = 0.1
    # Extra step time per draft step, relative to a plain decode step.
    draft_step_overhead: float = 0.18
    # Extra step time per draft token verified beyond num_steps + 1 (token trees with topk > 1).
    verify_token_overhead: float = 0.03


@dataclass(frozen=True)
class CapacityModel:
    weights_gib: float
    draft_weights_gib: float = 0.0
    mem_fraction_static_default: float = 0.85
    init_distributed_gib: float = 0.6
    cuda_graph_gib: float = 0.8
    piecewise_cuda_graph_gib: float = 0.6
    # Activation workspace needed after graphs are captured; less free memory => CUDA OOM at capture.
    activation_reserve_gib: float = 4.0


@dataclass(frozen=True)
class FlagEffects:
    """Multiplicative step-time factors (<1 is faster) and memory costs of server flags."""

    allreduce_fusion_workspace_gib: float = 0.5
    allreduce_fusion_supported_sm: tuple[int, ...] = (90, 100)
    allreduce_fusion_decode_factor: float = 0.95
    fused_moe_sum_all_reduce_decode_factor: float = 0.995
    no_cuda_graph_decode_factor: float = 1.6
    no_piecewise_cuda_graph_prefill_factor: float = 1.08
    torch_compile_decode_factor: float = 0.97


@dataclass(frozen=True)
class Failures:
    crash_after_ready_s: float | None = None
    slow_start_s: float = 0.0
    fail_start: str | None = None


FAIL_START_KINDS = ("cuda_error",)


@dataclass(frozen=True)
class Profile:
    gpu: GpuSpec
    decode: DecodeModel
    capacity: CapacityModel
    time_scale: float = 1.0
    seed: int | None = None
    noise_cv: float = 0.0
    instance_cv: float = 0.0
    moe_tuned_speedup: float = 1.0
    moe_fallback_speedup: float = 1.0
    description: str = ""
    # The SGLang release the emulator plays (its CLI, log formats and lookup rules); None: the package's version.
    sglang_version: str | None = None
    state_dir: str = "/dev/shm/sglang-emulator"
    startup: StartupTimes = field(default_factory=StartupTimes)
    prefill: PrefillModel = field(default_factory=PrefillModel)
    speculative: SpeculativeModel = field(default_factory=SpeculativeModel)
    flag_effects: FlagEffects = field(default_factory=FlagEffects)
    failures: Failures = field(default_factory=Failures)
    raw: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)
    path: str = ""

    def scaled(self, emulated_seconds: float) -> float:
        """Wall seconds the emulator sleeps for `emulated_seconds` of real-GPU time."""
        return emulated_seconds * self.time_scale

    def startup_scaled(self, emulated_seconds: float) -> float:
        """Wall seconds the emulator sleeps for `emulated_seconds` of a startup or shutdown phase."""
        scale = self.time_scale if self.startup.time_scale is None else self.startup.time_scale
        return emulated_seconds * scale


def emulated_version(profile: Profile | None = None) -> str:
    """The release the emulator plays: the release this package was installed as (a venv's `sglang` says what it is,
    as a real install does: an upgrade installs another release beside the one the profile names), else, run from
    its source tree, the profile's `sglang_version`, else the source's version."""
    installed = _installed_release()
    if installed:
        return installed
    if profile is None:
        try:
            profile = load_profile()
        except ProfileError:
            profile = None
    if profile is not None and profile.sglang_version:
        return str(profile.sglang_version)
    from sglang.version import __version__

    return __version__


def _installed_release() -> str | None:
    """The version of the `sglang` distribution this package file belongs to; None when it runs from its source
    tree (PYTHONPATH), whatever other `sglang` is installed."""
    import importlib.metadata

    try:
        distribution = importlib.metadata.distribution("sglang")
    except importlib.metadata.PackageNotFoundError:
        return None
    package_init = Path(__file__).resolve().parents[1] / "__init__.py"
    if Path(distribution.locate_file("sglang/__init__.py")).resolve() != package_init:
        return None
    return distribution.version


def release_tuple(version: str) -> tuple[int, ...]:
    """``"0.5.23"`` -> ``(0, 5, 23)``: releases compare by their numbers."""
    return tuple(int(part) for part in version.split(".")[:3])


def emulated_release(profile: Profile | None = None) -> tuple[int, ...]:
    """The release the emulator plays (emulated_version) as a comparable tuple."""
    return release_tuple(emulated_version(profile))


def load_profile(path: str | os.PathLike[str] | None = None) -> Profile:
    """Load and validate a profile; default path: $SGLANG_EMULATOR_PROFILE, else /etc/sglang-emulator/profile.yaml."""
    profile_path = Path(path or os.environ.get(PROFILE_ENV) or DEFAULT_PROFILE_PATH)
    document = load_document(profile_path)
    typed = {key: value for key, value in document.items() if key not in FREE_FORM_SECTIONS}
    values = _convert_mapping(Profile, typed, "", str(profile_path))
    profile = Profile(**values, raw=document, path=str(profile_path))
    _check_ranges(profile)
    return profile


def load_document(path: str | os.PathLike[str]) -> dict[str, Any]:
    """The profile's YAML mapping with its `base` chain deep-merged in (the effective document, no `base` key)."""
    return _merged_document(Path(path), ())


def _merged_document(path: Path, seen: tuple[Path, ...]) -> dict[str, Any]:
    document = _read_mapping(path)
    base = document.pop(BASE_KEY, None)
    if base is None:
        return document
    if not isinstance(base, str) or not base:
        raise ProfileError(f"{path}: '{BASE_KEY}' must be the path of another profile")
    base_path = (path.parent / base).resolve()
    if base_path in seen or base_path == path.resolve():
        chain = " -> ".join(str(p) for p in (*seen, path.resolve(), base_path))
        raise ProfileError(f"{path}: '{BASE_KEY}' chain loops: {chain}")
    return deep_merge(_merged_document(base_path, (*seen, path.resolve())), document)


def deep_merge(base: dict[str, Any], override: dict[str, Any]) -> dict[str, Any]:
    """`override` over `base`: mappings merge key by key (recursively), any other value replaces the base's."""
    merged = dict(base)
    for key, value in override.items():
        if isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = deep_merge(merged[key], value)
        else:
            merged[key] = value
    return merged


def _read_mapping(path: Path) -> dict[str, Any]:
    try:
        import yaml
    except ImportError as exc:  # the emulator venv always has PyYAML; say so if it does not
        raise ProfileError("reading an emulator profile needs PyYAML (pip install pyyaml)") from exc
    try:
        document = yaml.safe_load(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise ProfileError(f"cannot read emulator profile {path}: {exc.strerror}") from exc
    except yaml.YAMLError as exc:
        raise ProfileError(f"emulator profile {path} is not valid YAML: {exc}") from exc
    if not isinstance(document, dict):
        raise ProfileError(f"emulator profile {path} must be a mapping at the top level")
    return document


def _convert_mapping(cls: type, mapping: Any, where: str, source: str) -> dict[str, Any]:
    if not isinstance(mapping, dict):
        raise ProfileError(f"{source}: '{where or 'profile'}' must be a mapping")
    hints = typing.get_type_hints(cls)
    settable = {f.name: f for f in dataclasses.fields(cls) if f.name not in ("raw", "path")}
    for key in mapping:
        if key not in settable:
            raise ProfileError(f"{source}: unknown key '{where}{key}' (known: {', '.join(settable)})")
    missing = [
        name for name, f in settable.items()
        if name not in mapping and f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
    ]
    if missing:
        raise ProfileError(f"{source}: missing required key '{where}{missing[0]}'")
    return {key: _convert(hints[key], value, f"{where}{key}", source) for key, value in mapping.items()}


def _convert(hint: Any, value: Any, where: str, source: str) -> Any:
    if dataclasses.is_dataclass(hint):
        return hint(**_convert_mapping(hint, value, where + ".", source))
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin is types.UnionType:
        if value is None and type(None) in args:
            return None
        (inner,) = [arg for arg in args if arg is not type(None)]
        return _convert(inner, value, where, source)
    if origin is dict:
        if not isinstance(value, dict) or not value:
            raise ProfileError(f"{source}: '{where}' must be a non-empty mapping")
        key_type, value_type = args
        return {
            _convert(key_type, k, f"{where}[{k}]", source): _convert(value_type, v, f"{where}[{k}]", source)
            for k, v in value.items()
        }
    if origin is tuple:
        if not isinstance(value, list):
            raise ProfileError(f"{source}: '{where}' must be a list")
        return tuple(_convert(args[0], item, where, source) for item in value)
    return _convert_scalar(hint, value, where, source)


def _convert_scalar(hint: Any, value: Any, where: str, source: str) -> Any:
    if hint is float and isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    if hint is str and isinstance(value, (str, int, float)) and not isinstance(value, bool):
        # YAML reads 12.0 or 580.95 as numbers; these fields are text in nvidia-smi's output.
        return str(value)
    if isinstance(value, hint) and not (hint is int and isinstance(value, bool)):
        return value
    raise ProfileError(f"{source}: '{where}' must be of type {hint.__name__}, got {value!r}")


def _check_ranges(profile: Profile) -> None:
    source = profile.path
    if profile.time_scale <= 0:
        raise ProfileError(f"{source}: 'time_scale' must be > 0")
    if profile.startup.time_scale is not None and not profile.startup.time_scale > 0:
        raise ProfileError(f"{source}: 'startup.time_scale' must be > 0 (or null for the profile's)")
    if profile.gpu.count < 1:
        raise ProfileError(f"{source}: 'gpu.count' must be >= 1")
    if not 0 < profile.capacity.mem_fraction_static_default < 1:
        raise ProfileError(f"{source}: 'capacity.mem_fraction_static_default' must be in (0, 1)")
    if not 0 <= profile.speculative.token_acceptance < 1:
        raise ProfileError(f"{source}: 'speculative.token_acceptance' must be in [0, 1)")
    if any(bs < 1 or ms < 0 for bs, ms in profile.decode.step_ms.items()):
        raise ProfileError(f"{source}: 'decode.step_ms' needs batch sizes >= 1 and times >= 0")
    if profile.failures.fail_start not in (None, *FAIL_START_KINDS):
        raise ProfileError(
            f"{source}: 'failures.fail_start' must be one of {', '.join(FAIL_START_KINDS)} or null"
        )
