# Copyright (c) llmops.sglang contributors
# Apache License 2.0 (see LICENSE)
"""The cache key of an engine result (``engine: llmops``): what makes a tuned fused-MoE config valid and what question
it answers, read on the GPU host before the engine runs, so the controller's cache (plugin_utils/moe_engine_cache.py)
can answer it without starting the engine.

A config is valid for a GPU (name and compute capability: shared memory, registers, the binary), a Triton version
(the compiler) and a kernel source (the installed release's ``fused_moe_kernel`` file, by hash); it answers one
question: a shape (E, N, hidden, top-k, dtype), its quantisation and block shape, one kernel (up or down), the batch
sizes tuned and the search space searched, by one engine version. The key holds exactly these; its sha256 over the
canonical JSON (sorted keys, no spaces) names the cache entry.

Private to the llmops.sglang collection. Stdlib only besides the collection's own module_utils (it runs on the host).
"""
from __future__ import annotations

import hashlib
import json

from ansible_collections.llmops.sglang.plugins.module_utils.moe_engine import ENGINE_VERSION, KERNEL_MODULES

KEY_SCHEMA = 1
# The parts only the host knows besides the GPU (nvidia-smi gives that): Triton's version and the hash of the kernel
# source the engine imports, computed as the engine does (moe_engine.Release: sha256 of the kernel module's file)
# without importing SGLang (its package __init__ pulls in torch): the first of the engine's KERNEL_MODULES that is
# a file under the installed sglang package. On an emulator host the emulator's kernel model is the kernel source,
# as for the engine (moe_engine._MainSide asks sglang._emulator.moe_engine_bench first).
HOST_PROBE = r"""
import hashlib, importlib.util, json, os, sys
import triton
spec = importlib.util.find_spec("sglang")
root = list(spec.submodule_search_locations)[0] if spec and spec.submodule_search_locations else None
path = None
if root and os.path.isfile(os.path.join(root, "_emulator", "moe_engine_bench.py")):
    from sglang._emulator.moe_engine_bench import kernel_source_file
    path = kernel_source_file()
elif root:
    for name in json.loads(sys.argv[1]):
        candidate = os.path.join(root, *name.split(".")[1:]) + ".py"
        if os.path.isfile(candidate):
            path = candidate
            break
digest = None
if path:
    with open(path, "rb") as handle:
        digest = hashlib.sha256(handle.read()).hexdigest()
print(json.dumps({"triton": triton.__version__, "kernel_source": path, "kernel_source_sha256": digest}))
"""
HOST_PARTS = ("gpu_name", "gpu_capability", "triton", "kernel_source_sha256")


def probe_host(run, python: str) -> dict:
    """Triton's version and the kernel source's hash as ``python`` (the SGLang installation's) sees them; the values
    are None where it cannot tell (the key is then not built: see :func:`cache_key`)."""
    rc, out, err = run([python, "-c", HOST_PROBE, json.dumps(KERNEL_MODULES)])
    if rc != 0:
        return {"triton": None, "kernel_source_sha256": None, "problem": (err or out).strip()[-400:]}
    return json.loads(out)


def cache_key(gpu: dict, probe: dict, shape: dict, quantisation: dict, kernel: str, batch_sizes: list[int],
              search_space: dict) -> dict:
    """The key of one kernel's result; ValueError naming what the host could not tell."""
    host = {"gpu_name": gpu.get("name"), "gpu_capability": gpu.get("compute_capability"),
            "triton": probe.get("triton"), "kernel_source_sha256": probe.get("kernel_source_sha256")}
    unknown = [name for name, value in host.items() if not value]
    if unknown:
        raise ValueError(f"the host does not tell {', '.join(unknown)}" + (
            f" ({probe['problem']})" if probe.get("problem") else ""))
    return {"schema": KEY_SCHEMA, "engine_version": ENGINE_VERSION, **host, "shape": shape,
            "quantisation": quantisation, "kernel": kernel, "batch_sizes": sorted(batch_sizes),
            "search_space": search_space}


def canonical(key: dict) -> bytes:
    return json.dumps(key, sort_keys=True, separators=(",", ":")).encode()


def key_sha256(key: dict) -> str:
    """The content address of ``key``: sha256 of its canonical JSON."""
    return hashlib.sha256(canonical(key)).hexdigest()


def result_host_parts(result: dict) -> dict:
    """The host parts of the key as the engine's result reports the GPU, Triton and kernel source it tuned with."""
    device, release = result.get("device") or {}, result.get("release") or {}
    capability = device.get("capability")
    return {"gpu_name": device.get("name"),
            "gpu_capability": ".".join(str(part) for part in capability) if capability else None,
            "triton": release.get("triton"), "kernel_source_sha256": release.get("kernel_source_sha256")}


def host_mismatch(key: dict, reported: dict) -> list[str]:
    """Where the engine's own report (:func:`result_host_parts`) differs from what the probe read: such a result is
    not cached under the key."""
    return [f"{name}: probe {key[name]!r}, engine {reported[name]!r}" for name in HOST_PARTS
            if key[name] != reported[name]]
