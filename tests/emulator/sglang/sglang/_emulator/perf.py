# Copyright (c) llmops.sglang contributors
# Apache License 2.0 (see LICENSE)
"""Performance model: decode step and prefill times in real-GPU seconds for one server configuration.

A decode step serves every running request once (accept_length tokens each with speculative
decoding). Step time = profile table interpolated at the batch size (reference TP) x TP scaling
x speculative overhead (draft steps, extra verify tokens) x flag factors x MoE-config factor;
batches above the CUDA-graph limit run eagerly, x no_cuda_graph_decode_factor (sglang 0.5.23
sglang/srt/model_executor/runner/decode_cuda_graph_runner.py can_run replays a graph only up to the
captured max batch size). The scheduler adds noise; `expected_output_throughput` is the noise-free
steady-state aggregate throughput a closed-loop client sees, used by docs and tests.
"""
from __future__ import annotations

import bisect
from dataclasses import dataclass

from sglang._emulator.model_shape import ModelShape
from sglang._emulator.profile import Profile, emulated_version
from sglang.srt.server_args import ServerArgs


# An emulated throughput regression, not a model of any real release (the real 0.5.17 is not known to be slower): the
# emulated 0.5.17's decode steps take this much longer than the profile's table says, as upgrades that lost throughput
# did (sgl-project/sglang#5396, #28300), so the upgrade guard's canary has a release to reject on the serving release's
# own Triton (docs/upgrade.md, "In the sandbox"). 0.5.24, the release whose Triton loses the configs, serves as well.
RELEASE_DECODE_FACTORS = {"0.5.17": 1.6}


@dataclass(frozen=True)
class PerfModel:
    step_points: tuple[tuple[int, float], ...]
    cuda_graph_max_bs: int
    no_cuda_graph_factor: float
    torch_compile_max_bs: int
    torch_compile_factor: float
    prefill_base_s: float
    prefill_per_token_s: float
    accept_length: float
    max_accept: int

    def decode_step_s(self, batch_size: int) -> float:
        seconds = _interpolate(self.step_points, batch_size)
        if batch_size > self.cuda_graph_max_bs:
            seconds *= self.no_cuda_graph_factor
        if batch_size <= self.torch_compile_max_bs:
            seconds *= self.torch_compile_factor
        return seconds

    def prefill_s(self, tokens: int) -> float:
        return self.prefill_base_s + self.prefill_per_token_s * tokens


def moe_speedup(profile: Profile, up_status: str, down_status: str) -> float:
    """Decode speedup from tuned MoE configs: each of the up/down kernels contributes half."""
    gain = {"used": profile.moe_tuned_speedup - 1, "fallback": profile.moe_fallback_speedup - 1, "missing": 0.0}
    return 1 + (gain[up_status] + gain[down_status]) / 2


def accept_length(profile: Profile, args: ServerArgs) -> float:
    """Mean tokens per decode step: 1 + sum(p**i) over draft steps (p widened by top-k), capped by draft tokens.

    A chain of k draft tokens, each accepted with probability p if the one before was, yields
    1 + p + ... + p**k = (1 - p**(k+1)) / (1 - p) tokens (the bonus token plus the accepted prefix); topk
    branches per step give each position 1 - (1-p)**topk chances (eagle_worker_v2.py, the draft tree).
    """
    if not args.speculative_algorithm:
        return 1.0
    p = 1 - (1 - profile.speculative.token_acceptance) ** (args.speculative_eagle_topk or 1)
    steps = args.speculative_num_steps or 0
    expected = 1 + sum(p ** i for i in range(1, steps + 1))
    return min(expected, float(args.speculative_num_draft_tokens or steps + 1))


def speculative_step_factor(profile: Profile, args: ServerArgs) -> float:
    """Step time of a speculative step relative to a plain decode step.

    sglang 0.5.23 sglang/srt/speculative/eagle_worker_v2.py: each step runs the draft model num_steps times
    (draft_forward), then one target forward verifies num_draft_tokens tokens per request (verify, the token
    tree of topk branches). A chain (topk 1) verifies num_steps + 1 tokens, the verify cost the decode table
    already holds; each draft token beyond that widens the verify forward.
    """
    steps = args.speculative_num_steps or 0
    extra_tokens = max((args.speculative_num_draft_tokens or steps + 1) - steps - 1, 0)
    spec = profile.speculative
    return 1 + spec.draft_step_overhead * steps + spec.verify_token_overhead * extra_tokens


def build_perf_model(
    profile: Profile, args: ServerArgs, shape: ModelShape, moe_up: str = "missing", moe_down: str = "missing"
) -> PerfModel:
    effects = profile.flag_effects
    factor = (profile.decode.reference_tp / args.tp_size) ** profile.decode.tp_exponent
    factor *= RELEASE_DECODE_FACTORS.get(emulated_version(profile), 1.0)
    if args.speculative_algorithm:
        factor *= speculative_step_factor(profile, args)
    if shape.is_moe:
        factor /= moe_speedup(profile, moe_up, moe_down)
    if args.enable_fused_moe_sum_all_reduce and shape.top_k > 2:
        factor *= effects.fused_moe_sum_all_reduce_decode_factor
    if args.allreduce_fusion and profile.gpu.sm_version in effects.allreduce_fusion_supported_sm:
        factor *= effects.allreduce_fusion_decode_factor
    # Prefill runs eagerly without its graph: 0.5.11's piecewise graph, 0.5.14+'s prefill phase graph.
    prefill_eager = args.graph_backend("prefill") == "disabled"
    prefill_factor = effects.no_piecewise_cuda_graph_prefill_factor if prefill_eager else 1.0
    return PerfModel(
        step_points=tuple((bs, ms / 1000 * factor) for bs, ms in sorted(profile.decode.step_ms.items())),
        cuda_graph_max_bs=args.decode_graph_limit,
        no_cuda_graph_factor=effects.no_cuda_graph_decode_factor,
        torch_compile_max_bs=args.torch_compile_max_bs if args.enable_torch_compile else 0,
        torch_compile_factor=effects.torch_compile_decode_factor,
        prefill_base_s=profile.prefill.base_ms / 1000 * prefill_factor,
        prefill_per_token_s=profile.prefill.per_token_ms / 1000 * prefill_factor,
        accept_length=accept_length(profile, args),
        max_accept=(args.speculative_num_steps or 0) + 1,
    )


def expected_output_throughput(
    perf: PerfModel, concurrency: int, input_len: int, output_len: int, max_running_requests: int
) -> float:
    """Steady-state aggregate output tok/s (real-GPU time) of `concurrency` closed-loop clients.

    Each finished request costs one prefill (which yields the first token) plus its share of the
    decode steps: (output_len - 1) / accept_length steps at the running batch size, shared by
    that many requests.
    """
    running = min(concurrency, max_running_requests)
    decode_share = (output_len - 1) / perf.accept_length * perf.decode_step_s(running) / running
    return output_len / (perf.prefill_s(input_len) + decode_share)


def _interpolate(points: tuple[tuple[int, float], ...], batch_size: int) -> float:
    """Piecewise-linear in batch size; linear extrapolation past both ends of the table."""
    if len(points) == 1:
        return points[0][1] * batch_size / points[0][0] if batch_size > points[0][0] else points[0][1]
    sizes = [bs for bs, _ in points]
    index = min(max(bisect.bisect_left(sizes, batch_size), 1), len(points) - 1)
    (x0, y0), (x1, y1) = points[index - 1], points[index]
    return max(y0 + (y1 - y0) * (batch_size - x0) / (x1 - x0), 0.0)
