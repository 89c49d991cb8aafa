# Copyright (c) llmops.sglang contributors
# Apache License 2.0 (see LICENSE)
"""Fused-MoE Triton tuner of the SGLang emulator: upstream's CLI, Ray layout, messages and output file.

Emulates `benchmark/kernels/fused_moe_triton/tuning_fused_moe_triton.py` (commit 00e96592): one
Ray actor per GPU, one task per batch size, configs that raise OutOfResources or RuntimeError are
skipped, the best config per batch size is written into the current directory at the very end.
Kernel times come from the synthetic model in `sglang._emulator.kernels`; no GPU work is done.
Emulator extra: one `[worker node=... gpu=...] batch_size=...` line per batch size, telling which
Ray node and GPU ran it (for the emulator's own tests; upstream prints nothing like it, so the collection takes
placements from Ray's GCS instead: moe_tuning.ray_workers).
"""
from __future__ import annotations

import argparse
import json
import os
import socket
import time
from datetime import datetime
from typing import Any

# The emulator never reports usage statistics anywhere (Ray's default would try to).
os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")

import ray
from common_utils import (
    filter_by_block_shape,
    get_config_dtype_str,
    get_config_filename,
    get_configs_compute_bound,
    get_default_batch_sizes,
    get_model_config,
    save_configs,
    sort_config,
)

from sglang._emulator.kernels import KernelModel, MoeProblem, OutOfResources, default_config_for
from sglang._emulator.profile import load_profile
from sglang.srt.layers.moe.moe_runner.triton_utils.fused_moe_triton_config import get_moe_configs

DTYPE_CHOICES = ["auto", "fp8_w8a8", "int8_w8a16", "int8_w8a8", "int4_w4a16"]


def benchmark_config(kernels: KernelModel, config: dict[str, Any], problem: MoeProblem, num_tokens: int) -> float:
    """Kernel time in us of the fused MoE with `config` for both GEMMs (SGLang's override_config)."""
    return kernels.benchmark(problem, num_tokens, config)


@ray.remote(num_gpus=1)
class BenchmarkWorker:
    def __init__(self, seed: int) -> None:
        self.seed = seed
        # Ray isolates each worker to one visible GPU via CUDA_VISIBLE_DEVICES.
        self.device_id = int(ray.get_gpu_ids()[0])
        self.kernels = KernelModel(load_profile(), seed)

    def placement(self) -> dict[str, Any]:
        return {
            "node_ip": ray.util.get_node_ip_address(),
            "node_id": ray.get_runtime_context().get_node_id(),
            "hostname": socket.gethostname(),
            "gpu_id": self.device_id,
        }

    def benchmark(self, num_tokens: int, problem: MoeProblem, per_channel_quant: bool) -> dict[str, Any]:
        block_n, block_k = problem.block_shape or (0, 0)
        op_config = get_moe_configs(
            problem.num_experts, problem.intermediate_size, problem.dtype, block_n, block_k, per_channel_quant
        )
        if op_config is None:
            config = default_config_for(problem, num_tokens)
        else:
            config = op_config[min(op_config.keys(), key=lambda x: abs(x - num_tokens))]
        kernel_time = benchmark_config(self.kernels, config, problem, num_tokens)
        return {"config": config, "kernel_time": kernel_time, **self.placement()}

    def tune(self, num_tokens: int, problem: MoeProblem, search_space: list[dict[str, int]]) -> dict[str, Any]:
        self.kernels.start_tuning(search_space)
        best_config = None
        best_time = float("inf")
        for config in search_space:
            try:
                kernel_time = benchmark_config(self.kernels, config, problem, num_tokens)
            except (OutOfResources, RuntimeError):
                # Some configurations may be invalid and fail to compile.
                continue
            if kernel_time < best_time:
                best_time = kernel_time
                best_config = config
        now = datetime.now()
        print(f"{now.ctime()}] Completed tuning for batch_size={num_tokens}")
        assert best_config is not None
        return {"config": best_config, "kernel_time": best_time, **self.placement()}


def load_search_space(path: str) -> list[dict[str, Any]]:
    with open(path, encoding="utf-8") as f:
        configs = json.load(f)
    if not isinstance(configs, list) or not all(isinstance(config, dict) for config in configs):
        raise ValueError("--search-space-file must contain a JSON list of configs")
    return [sort_config(config) for config in configs]


def visible_gpu_count(profile_gpu_count: int) -> int:
    """What Ray auto-detects: the CUDA_VISIBLE_DEVICES entries if set, else every GPU of the node."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is None:
        return profile_gpu_count
    return len([device for device in visible.split(",") if device.strip()])


def init_ray() -> None:
    if os.environ.get("RAY_ADDRESS"):
        ray.init()  # attach to the running cluster, exactly as upstream
        return
    gpus = visible_gpu_count(load_profile().gpu.count)
    # A real GPU host has a CPU per GPU at least; without the hint Ray would count this machine's
    # cores and leave actors pending. Loopback keeps the one-node cluster's traffic on this host.
    ray.init(
        num_gpus=gpus,
        num_cpus=max(os.cpu_count() or 1, gpus),
        include_dashboard=False,
        _node_ip_address="127.0.0.1",
    )


def placement_line(result: dict[str, Any], batch_size: int) -> str:
    return (
        f"[worker node={result['node_ip']} host={result['hostname']} node_id={result['node_id']} "
        f"gpu={result['gpu_id']}] batch_size={batch_size} kernel_time={result['kernel_time']:.2f}us"
    )


def main(args: argparse.Namespace) -> None:
    print(args)
    model_config = get_model_config(args.model, args.tp_size, args.ep_size, args.disable_shared_experts_fusion)
    shard_intermediate_size = model_config["shard_intermediate_size"]
    block_shape = model_config["block_shape"]
    dtype_str = get_config_dtype_str(
        model_config["dtype"],
        use_int8_w8a16=args.dtype == "int8_w8a16",
        use_int4_w4a16=args.dtype == "int4_w4a16",
        use_fp8_w8a8=args.dtype == "fp8_w8a8",
        use_int8_w8a8=args.dtype == "int8_w8a8",
    )
    problem = MoeProblem(
        num_experts=model_config["num_experts"],
        topk=model_config["topk"],
        hidden_size=model_config["hidden_size"],
        intermediate_size=shard_intermediate_size // 2,
        dtype=dtype_str,
        block_shape=tuple(block_shape) if block_shape else None,
    )
    if args.batch_sizes:
        batch_sizes = args.batch_sizes
    elif args.batch_size is None:
        batch_sizes = get_default_batch_sizes()
    else:
        batch_sizes = [args.batch_size]
    search_space = load_search_space(args.search_space_file) if args.search_space_file else get_configs_compute_bound()

    init_ray()
    num_gpus = int(ray.available_resources()["GPU"])
    workers = [BenchmarkWorker.remote(args.seed) for _ in range(num_gpus)]

    def _distribute(method: str, inputs: list[Any]) -> list[Any]:
        outputs = []
        worker_idx = 0
        for input_args in inputs:
            worker = workers[worker_idx]
            worker_method = getattr(worker, method)
            output = worker_method.remote(*input_args)
            outputs.append(output)
            worker_idx = (worker_idx + 1) % num_gpus
        return ray.get(outputs)

    if args.tune:
        search_space = filter_by_block_shape(search_space, block_shape)
        filename = get_config_filename(
            problem.num_experts, shard_intermediate_size, dtype_str, args.per_channel_quant, block_shape
        )
        print(f"Start tuning over {len(search_space)} configurations to create {filename}...")
        start = time.perf_counter()
        results = _distribute("tune", [(batch_size, problem, search_space) for batch_size in batch_sizes])
        for batch_size, result in zip(batch_sizes, results):
            print(placement_line(result, batch_size))
        best_configs = {M: sort_config(result["config"]) for M, result in zip(batch_sizes, results)}
        save_configs(best_configs, filename)
        end = time.perf_counter()
        print(f"Tuning took {end - start:.2f} seconds")
    else:
        outputs = _distribute(
            "benchmark", [(batch_size, problem, args.per_channel_quant) for batch_size in batch_sizes]
        )
        for batch_size, result in zip(batch_sizes, outputs):
            print(placement_line(result, batch_size))
            print(f"Batch size: {batch_size}, config: {result['config']}")
            print(f"Kernel time: {result['kernel_time']:.2f} us")


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", type=str, default="mistralai/Mixtral-8x7B-Instruct-v0.1")
    parser.add_argument("--tp-size", "--tp", type=int, default=2)
    parser.add_argument("--ep-size", "--ep", type=int, default=1)
    parser.add_argument("--dtype", type=str, choices=DTYPE_CHOICES, default="auto")
    parser.add_argument("--per-channel-quant", action="store_true")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--batch-size", type=int, required=False)
    parser.add_argument(
        "--batch-sizes",
        type=int,
        nargs="+",
        required=False,
        help="Tune or benchmark an explicit set of token counts in parallel.",
    )
    parser.add_argument("--tune", action="store_true")
    parser.add_argument(
        "--search-space-file",
        type=str,
        default=None,
        help="JSON file containing an explicit list of Triton configs to evaluate with --tune.",
    )
    parser.add_argument("--disable-shared-experts-fusion", action="store_true")
    main(parser.parse_args())
