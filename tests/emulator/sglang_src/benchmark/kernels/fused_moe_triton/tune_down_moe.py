# Copyright (c) llmops.sglang contributors
# Apache License 2.0 (see LICENSE)
"""Screen down-GEMM configs with the gate/up config and route block size fixed.

Run after the main tuner, passing its output as --gate-up-config. For every batch size M the
nearest gate/up entry is pinned and its BLOCK_SIZE_M forced onto every search-space entry; the
fastest full fused call wins. This writes `*_down.json` screening candidates, without numerical
checks. Validate numerics and the full pipeline before installing the output.

SGLang emulator version of upstream's `benchmark/kernels/fused_moe_triton/tune_down_moe.py` (commit 4d078986):
same CLI, messages
and output; kernel times come from `sglang._emulator.kernels`. Emulator deviation: `--dtype auto`
is accepted (-> no `dtype=` selector, 16-bit kernels) so BF16 models can be screened; upstream's
default stays `fp8_w8a8`.
"""
from __future__ import annotations

import argparse
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from common_utils import (  # noqa: E402  (needs the sys.path entry above, like upstream)
    filter_by_block_shape,
    get_configs_compute_bound,
    get_default_batch_sizes,
    get_model_config,
    sort_config,
    write_json,
)

from sglang._emulator.kernels import KernelModel, MoeProblem, OutOfResources  # noqa: E402
from sglang._emulator.profile import load_profile  # noqa: E402
from sglang.srt.layers.moe.moe_runner.triton_utils.fused_moe_triton_config import (  # noqa: E402
    get_config_file_name,
)

DTYPE_CHOICES = ["auto", "fp8_w8a8", "int8_w8a8", "int8_w8a16", "int4_w4a16"]


def load_gate_up_config(path: str) -> dict[int, dict]:
    with open(path, encoding="utf-8") as f:
        return {int(key): value for key, value in json.load(f).items()}


def down_candidates(search_space: list[dict], block_size_m: int) -> list[dict]:
    """The search space with BLOCK_SIZE_M forced to the routing block size, duplicates dropped."""
    unique: dict[tuple, dict] = {}
    for config in search_space:
        candidate = sort_config({**config, "BLOCK_SIZE_M": block_size_m})
        unique.setdefault(tuple(candidate.values()), candidate)
    return list(unique.values())


def screen_batch_size(
    kernels: KernelModel, problem: MoeProblem, num_tokens: int, gate_up: dict, search_space: list[dict]
) -> tuple[dict, float]:
    candidates = down_candidates(search_space, gate_up["BLOCK_SIZE_M"])
    kernels.start_tuning(candidates)
    best_config, best_time = None, float("inf")
    for candidate in candidates:
        try:
            kernel_time = kernels.benchmark(problem, num_tokens, gate_up, candidate)
        except (OutOfResources, RuntimeError):
            continue
        if kernel_time < best_time:
            best_config, best_time = candidate, kernel_time
    if best_config is None:
        raise RuntimeError(f"no down config ran at M={num_tokens} with the pinned gate/up config {gate_up}")
    return best_config, best_time


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", type=str, required=True)
    parser.add_argument("--tp-size", type=int, required=True)
    parser.add_argument("--ep-size", type=int, default=1)
    parser.add_argument("--dtype", type=str, choices=DTYPE_CHOICES, default="fp8_w8a8")
    parser.add_argument("--gate-up-config", type=str, required=True)
    parser.add_argument("--batch-sizes", type=int, nargs="*", default=get_default_batch_sizes())
    parser.add_argument("--out-dir", type=str, default=".")
    parser.add_argument("--disable-shared-experts-fusion", action="store_true")
    args = parser.parse_args()

    model_config = get_model_config(args.model, args.tp_size, args.ep_size, args.disable_shared_experts_fusion)
    shard_intermediate_size = model_config["shard_intermediate_size"]
    block_shape = model_config["block_shape"]
    dtype_str = None if args.dtype == "auto" else args.dtype
    problem = MoeProblem(
        num_experts=model_config["num_experts"],
        topk=model_config["topk"],
        hidden_size=model_config["hidden_size"],
        intermediate_size=shard_intermediate_size // 2,
        dtype=dtype_str,
        block_shape=tuple(block_shape) if block_shape else None,
    )
    gate_up_configs = load_gate_up_config(args.gate_up_config)
    search_space = filter_by_block_shape(get_configs_compute_bound(), block_shape)
    kernels = KernelModel(load_profile())

    results: dict[int, dict] = {}
    for M in args.batch_sizes:
        gate_up = gate_up_configs[min(gate_up_configs, key=lambda key: abs(key - M))]
        results[M], best_t = screen_batch_size(kernels, problem, M, gate_up, search_space)
        print(f"M={M}: best down {results[M]} ({best_t:.1f}us)")

    name = get_config_file_name(
        problem.num_experts, shard_intermediate_size // 2, dtype_str, block_shape, down_moe=True
    )
    path = os.path.join(args.out_dir, name)
    write_json(path, {str(M): config for M, config in results.items()}, trailing_newline=False)
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
