# Copyright (c) llmops.sglang contributors
# Apache License 2.0 (see LICENSE)
"""Whether tuned MoE configs fit a host: the host's GPU, Triton, SGLang and model shape against the
provenance recorded when they were tuned (``moe_tune/<host>/provenance.json``).

Private to the llmops.sglang collection. Stdlib only, no I/O.
"""
from __future__ import annotations

from typing import Any

# Tuned kernel configs are only valid for the GPU model, the Triton that compiled them (the server looks
# them up in configs/triton_X_Y_Z/) and the SGLang whose kernels they parametrise.
VERSION_KEYS = ("triton", "sglang")


def provenance_mismatches(provenance: dict[str, Any], host: dict[str, Any]) -> list[str]:
    """Reasons the configs of ``provenance`` must not be installed on ``host``; empty when they fit.

    ``host`` is ``{gpu, versions: {triton, sglang, ...}, moe_shape}`` as read on the host (gpu_facts'
    ``summary.name``, sglang_env_facts' ``versions`` and ``model.moe_shape``).
    """
    reasons = []
    if host.get("gpu") != provenance.get("gpu"):
        reasons.append(f"GPU {_shown(host.get('gpu'))} differs from the tuned GPU {_shown(provenance.get('gpu'))}")
    tuned_versions, host_versions = provenance.get("versions") or {}, host.get("versions") or {}
    for package in VERSION_KEYS:
        if host_versions.get(package) != tuned_versions.get(package):
            reasons.append(f"{package} {_shown(host_versions.get(package))} differs from the tuned "
                           f"{package} {_shown(tuned_versions.get(package))}")
    shape_keys = sorted(_differing_keys(provenance.get("moe_shape") or {}, host.get("moe_shape") or {}))
    if shape_keys:
        host_shape, tuned_shape = host.get("moe_shape") or {}, provenance.get("moe_shape") or {}
        changes = ", ".join(f"{key} {_shown(host_shape.get(key))} (tuned: {_shown(tuned_shape.get(key))})"
                            for key in shape_keys)
        reasons.append(f"model MoE shape differs: {changes}")
    return reasons


def _differing_keys(left: dict, right: dict) -> set[str]:
    return {key for key in set(left) | set(right) if left.get(key) != right.get(key)}


def _shown(value: Any) -> str:
    return "(unknown)" if value is None else str(value)
