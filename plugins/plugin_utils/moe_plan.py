# Copyright (c) llmops.sglang contributors
# Apache License 2.0 (see LICENSE)
"""The MoE stage's plan on one host (docs/run-directory.md, "moe_tune"): the config files to tune, from the model,
the GPU and Triton cross-checked with what the server reported missing (the ``moe_targets`` filter), which of them it
tunes (with force every derived one), the GPU's spec, whether it tunes the down kernel, and its part in the tuning
cluster of ``tuning_run_moe.tune_hosts``. Pure: the action ``moe_plan`` records what these return."""
from __future__ import annotations

import typing as t

from ansible_collections.llmops.sglang.plugins.module_utils.moe_rules import moe_rules
from ansible_collections.llmops.sglang.plugins.module_utils.moe_targets import moe_targets

# SGLang's tuner of the down kernel; a release whose checkout lacks it runs the down GEMM with the up config.
DOWN_TUNER = "tune_down_moe.py"


def targets_plan(model_config: t.Any, tp_size: t.Any, ep_size: t.Any = 1, device_name: str | None = None,
                 triton_version: str | None = None, missing: list | None = None, dtype: str | None = None,
                 disable_shared_experts_fusion: bool = False, per_channel_quant: bool = False,
                 installed_sglang: str | None = None) -> dict[str, t.Any]:
    """What the ``moe_targets`` filter returns: :func:`moe_targets` with the lookup rules of ``installed_sglang``.
    Raises ValueError naming what is wrong."""
    if not isinstance(model_config, dict):
        raise ValueError(f"the input must be the model's parsed config.json, got {type(model_config).__name__}")
    if not device_name or not triton_version:
        raise ValueError("device_name (the raw GPU name, gpu_facts summary.name) and "
                         "triton_version (sglang_env_facts versions.triton) are required")
    result = moe_targets(model_config, int(tp_size), int(ep_size), device_name, triton_version, list(missing or []),
                         dtype, bool(disable_shared_experts_fusion), bool(per_channel_quant))
    return {**result, "moe_rules": moe_rules(installed_sglang)} if installed_sglang else result


def cluster_role(host: str, tune_hosts: list[str]) -> dict[str, t.Any]:
    """The host's part in the tuning cluster: the tune hosts form one Ray cluster whose head (the first) runs the
    tuner over every GPU of the cluster; the others install the head's result. A host not listed tunes alone."""
    in_cluster = host in tune_hosts
    head = tune_hosts[0] if in_cluster else host
    return {"hosts": list(tune_hosts), "in_cluster": in_cluster, "head": head, "tunes_here": head == host}


def stage_plan(*, env: dict, gpus: dict, server_args: dict, missing: list[str], force: bool, engine: str,
               host: str, tune_hosts: list[str], gpu_spec: dict | None = None) -> dict[str, t.Any]:
    """The stage's plan on ``host`` from its installation (``env``: sglang_env_facts), its GPUs (``gpus``: the
    gpu_facts summary; ``gpu_spec`` overrides their spec), the adopted ``server_args`` and the config files the
    server reported ``missing``. ``record`` is ``targets.json``."""
    plan = targets_plan(env["model"]["config"], server_args.get("tp_size", 1), server_args.get("ep_size", 1),
                        device_name=gpus["name"], triton_version=env["versions"]["triton"], missing=missing,
                        installed_sglang=env["versions"]["sglang"])
    # Nothing missing is a no-op unless forced; forced, every derived file is tuned.
    targets = plan["targets"] if plan["targets"] or not force else plan["derived"]
    # The engine tunes down with up (one run); SGLang's tuner needs its down script.
    tunes_down = (any(target["kernel"] == "down" for target in targets)
                  and (engine == "llmops" or DOWN_TUNER in env["tuner"]["scripts"]))
    return {"plan": plan, "targets": targets, "spec": gpu_spec if gpu_spec is not None else gpus.get("spec"), "tunes_down": tunes_down,
            "cluster": cluster_role(host, tune_hosts), "record": {**plan, "tuned": targets}}
