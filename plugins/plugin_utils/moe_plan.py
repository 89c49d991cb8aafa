# Copyright (c) llmops.sglang contributors
# Apache License 2.0 (see LICENSE)
"""The MoE stage's plan on one host (docs/run-directory.md, "moe_tune"): the config files to tune, from the model,
the GPU and Triton cross-checked with what the server reported missing (the ``moe_targets`` filter), which of them it
tunes (with force every derived one), the GPU's spec, whether it tunes the down kernel, and its part in the tuning
cluster of ``tuning_run_moe.tune_hosts``; the arguments of its tuner tasks; the cluster's check that its hosts need the
same files; the stage's estimate. Pure: the action ``moe_plan`` reads the run directory and records what these
return."""
from __future__ import annotations

import typing as t

from ansible_collections.llmops.sglang.plugins.module_utils.gpu_cost import moe_stage_estimate
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


def _given(**values: t.Any) -> dict[str, t.Any]:
    """The ``values`` that are set: the tuner's own default stands for the others."""
    return {name: value for name, value in values.items() if value is not None}


def tuner_arguments(*, settings: dict, targets: list[dict], tuner_args: list, spec: dict | None, server_args: dict,
                    facts: dict, source_dir: str | None, model_path: str, cache_root: str) -> dict[str, dict]:
    """The arguments of the stage's llmops.sglang.moe_tune tasks by kernel (``up``, ``down``) and for the kernel
    ``benchmark``, without what only the tasks know (the environment, the tuned up configs, the batch sizes the up
    kernel was tuned at). ``settings``: tuning_run_moe; ``facts``: the adopted configuration's, whose capacity bounds
    the batch sizes; ``cache_root``: where the engine's cache lives unless ``settings.cache_dir`` says. Nothing to
    tune runs no tuner task and needs no settings: empty."""
    if not targets:
        return {}
    missing = [name for name in ("work_dir", "timeout", "search_space") if settings.get(name) is None]
    if missing:
        raise ValueError(f"tuning_run_moe lacks {', '.join(missing)}; set it (the role's defaults have each)")
    ups = [target["file_name"] for target in targets if target["kernel"] == "up"]
    if not ups:
        raise ValueError(f"the targets {[target['file_name'] for target in targets]} hold no up kernel's config, which "
                         "the down kernel is tuned with; remove the up config too, or set tuning_run_moe.force")
    engine = settings.get("engine") or "sglang"
    common = _given(engine=engine, cache=settings.get("cache", True), source_dir=source_dir, model_path=model_path,
                    cache_dir=settings.get("cache_dir") or f"{cache_root}/cache/moe-engine",
                    tp_size=server_args.get("tp_size", 1), ep_size=server_args.get("ep_size", 1),
                    tuner_args=tuner_args, work_dir=settings["work_dir"], timeout=settings["timeout"])
    smem_per_block = (spec or {}).get("smem_per_block") or None
    up = _given(kernel="up", expected_file_name=ups[0], batch_sizes=settings.get("batch_sizes") or None,
                max_running_requests=facts.get("max_running_requests"), chunked_prefill_size=facts.get("chunked_prefill_size"),
                speculative_num_draft_tokens=server_args.get("speculative_num_draft_tokens"),
                search_space=settings["search_space"], smem_per_block=smem_per_block)
    # The engine tunes down with up in one run over the up task's space (its checkpoint and cache key hold the space);
    # SGLang's down screener has its own.
    down = _given(kernel="down", search_space=settings["search_space"], smem_per_block=smem_per_block) if engine == "llmops" else {"kernel": "down"}
    return {"up": {**common, **up}, "down": {**common, **down}, "benchmark": {**common, "mode": "benchmark"}}


def same_targets(plans: dict[str, dict]) -> None:
    """One tuner run serves every host of the tuning cluster, so they must need the same files (``plans``: each
    host's plan by name); ValueError naming each host's otherwise."""
    files = {host: ", ".join(target["file_name"] for target in plan["targets"]) for host, plan in plans.items()}
    if len(set(files.values())) > 1:
        raise ValueError("tuning_run_moe.tune_hosts need the same MoE config files but have "
                         f"{'; '.join(f'{host} -> {names}' for host, names in files.items())}; tune these hosts separately")


def cost_inputs(*, settings: dict, env: dict, adopted: dict, facts: dict, reference_cost: dict | None,
                tunes_down: bool) -> dict[str, t.Any]:
    """What the stage's estimate (:func:`stage_estimate`) takes from the plan: the kernels and the engine, the
    checkpoint's block shape, and the adopted configuration: its GPUs (``facts``, args, environment) and what its
    measurement cost (``reference_cost``, its cost.json; the tuned configs' measurement costs about as much)."""
    return {"down": tunes_down, "engine": settings.get("engine") or "sglang",
            "block_shape": (env["model"].get("moe_shape") or {}).get("block_shape"),
            "seconds_per_config": settings.get("seconds_per_config"), "reference_cost": reference_cost,
            "facts": facts, "requested_args": adopted.get("args") or {}, "environment": adopted.get("environment") or {}}


def stage_estimate(up_plan: dict, plan: dict, cluster_plans: list[dict]) -> dict[str, t.Any]:
    """The stage's GPU-minutes, estimated before the server stops from the up kernel's tuning plan (moe_tune in check
    mode), this host's ``plan`` and the plans of the tuning cluster's hosts (none outside a cluster): SGLang's tuner
    spreads each chunk of batch sizes over the chunk's GPUs on every tuning host, the engine over every GPU of every
    tuning host (docs/moe-engine.md, "The fleet")."""
    cluster = plan["cluster"]
    workers = up_plan["chunk_size"] * (len(cluster["hosts"]) or 1)
    engine_gpus = sum(int(host_plan["gpu_count"]) for host_plan in cluster_plans) if cluster["in_cluster"] else None
    return moe_stage_estimate(up_plan, workers=workers, engine_gpus=engine_gpus, **plan["cost_inputs"])


def host_plan(*, env: dict, gpus: dict, gpu_spec: dict | None, adopted: dict, facts: dict, reference_cost: dict | None,
              settings: dict, host: str, source_dir: str | None, model_path: str, cache_root: str) -> dict[str, t.Any]:
    """:func:`stage_plan` of the adopted configuration (``adopted``; ``facts`` and ``reference_cost`` what its
    measurement recorded) under the stage's ``settings`` (tuning_run_moe), with the arguments of the tuner tasks
    (``tuner``), what the estimate takes from it (``cost_inputs``) and the host's GPU count."""
    server_args = adopted.get("args") or {}
    plan = stage_plan(env=env, gpus=gpus, server_args=server_args, missing=facts.get("missing_moe_configs") or [],
                      force=bool(settings.get("force")), engine=settings.get("engine") or "sglang", host=host,
                      tune_hosts=settings.get("tune_hosts") or [], gpu_spec=gpu_spec)
    tuner = tuner_arguments(settings=settings, targets=plan["targets"], tuner_args=plan["plan"]["tuner_args"],
                            spec=plan["spec"], server_args=server_args, facts=facts, source_dir=source_dir,
                            model_path=model_path, cache_root=cache_root)
    return {**plan, "tuner": tuner, "gpu_count": gpus.get("count"),
            "cost_inputs": cost_inputs(settings=settings, env=env, adopted=adopted, facts=facts,
                                       reference_cost=reference_cost, tunes_down=plan["tunes_down"])}
