# Copyright (c) llmops.sglang contributors
# Apache License 2.0 (see LICENSE)
"""CUDA-graph capture of the emulated ranks, as the emulated release's model runner does it and logs it.

``PiecewiseGraphs`` (up to 0.5.13, 0.5.11's model_runner.py): decode graphs (``Capture cuda graph begin`` /
``bs [...]`` / bars / end), then piecewise prefill graphs or the one line that says they are off.
``PhaseGraphs`` (0.5.14+, sglang 0.5.23 sglang/srt/model_executor/model_runner_components/cuda_graph_setup.py
``capture_cuda_graphs``): the target's prefill graph first (``Capture target prefill CUDA graph begin/end`` or
``Disable prefill CUDA graph because cuda_graph_config resolved ...``), then its decode graph (``target verify``
with speculative decoding), then the draft worker's (speculative/eagle_worker_v2.py: draft prefill, draft decode
and draft extend graphs). The first forward of a rank (MoE config lookup) happens in the first graph captured.
"""
from __future__ import annotations

import time
from typing import TYPE_CHECKING

from sglang._emulator.cuda_graphs import capture_batch_sizes

if TYPE_CHECKING:
    from sglang._emulator.engine import Engine

CUDA_GRAPH_CAPTURE_FAILED_MSG = (
    "Possible solutions:\n"
    "1. set --mem-fraction-static to a smaller value (e.g., 0.8 or 0.7)\n"
    "2. set --cuda-graph-max-bs to a smaller value (e.g., 16)\n"
    "3. disable torch compile by not using --enable-torch-compile\n"
    "4. disable CUDA graph by --disable-cuda-graph. (Not recommended. Huge performance loss)\n"
    "Open an issue on GitHub https://github.com/sgl-project/sglang/issues/new/choose \n"
)
# sglang 0.5.23 sglang/srt/model_executor/runner_backend_utils/__init__.py CUDA_GRAPH_CAPTURE_FAILED_MSG.
PHASE_CUDA_GRAPH_CAPTURE_FAILED_MSG = (
    "Possible solutions:\n"
    "1. set --mem-fraction-static to a smaller value (e.g., 0.8 or 0.7)\n"
    "2. set --cuda-graph-max-bs-decode to a smaller value (e.g., 16)\n"
    "3. disable decode CUDA graph by --cuda-graph-backend-decode=disabled. (Not recommended. Huge performance loss)\n"
    "Open an issue on GitHub https://github.com/sgl-project/sglang/issues/new/choose \n"
)
DEFAULT_CAPTURE_BS = [1, 2, 4, 8, 12, *range(16, 257, 8), *range(272, 513, 16)]
PREFILL_OFF = ("Disable prefill CUDA graph because cuda_graph_config resolved prefill.backend='disabled' "
               "(e.g. via --cuda-graph-backend-prefill=disabled or auto-disable rules).")


class OutOfMemoryError(RuntimeError):
    """Stands for torch.OutOfMemoryError, so tracebacks name it as PyTorch does."""

    __module__ = "torch"


def graphs_for(engine: Engine) -> PiecewiseGraphs | PhaseGraphs:
    return PhaseGraphs(engine) if engine.args.phase_graphs else PiecewiseGraphs(engine)


class _Graphs:
    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self.args, self.plan = engine.args, engine.plan

    async def capture_batches(self, capture_bs: list[int], before: float, failed_text: str) -> float:
        """The decode runner's capture loop: a bar over the batch sizes, largest first, while memory goes to
        the graphs; too little memory left is a CUDA OOM inside `Capture cuda graph failed`. Returns the
        capture time."""
        used, started = self.plan.cuda_graph_gib, time.monotonic()
        try:
            self.check_memory()
            await self.engine.progress_bars(
                [f"Capturing batches (bs={bs} avail_mem={before - used * i / len(capture_bs):.2f} GB)"
                 for i, bs in enumerate(reversed(capture_bs))],
                self.engine.profile.startup.cuda_graph_s,
            )
        except RuntimeError as e:
            raise Exception(f"Capture cuda graph failed: {e}\n{failed_text}") from e
        return time.monotonic() - started

    def check_memory(self) -> None:
        """Too little memory left for graphs plus activations: CUDA OOM while capturing."""
        plan = self.plan
        if plan.graph_capture_oom:
            free = max(plan.avail_after_graphs_gib, 0.0)
            raise OutOfMemoryError(
                f"CUDA out of memory. Tried to allocate {plan.activation_reserve_gib:.2f} GiB. GPU 0 has a total "
                f"capacity of {plan.total_gib:.2f} GiB of which {free:.2f} GiB is free. Including non-PyTorch "
                f"memory, this process has {plan.total_gib - free:.2f} GiB memory in use."
            )


class PiecewiseGraphs(_Graphs):
    """0.5.11's model runner: init_cuda_graphs, then init_piecewise_cuda_graphs."""

    async def capture(self) -> None:
        if not self.args.disable_cuda_graph:
            await self.capture_cuda_graphs()
        await self.init_piecewise_cuda_graphs()

    def capture_batch_sizes(self) -> list[int]:
        limit = min(self.args.cuda_graph_max_bs, self.plan.max_running_requests)
        sizes = self.args.cuda_graph_bs or DEFAULT_CAPTURE_BS
        return [bs for bs in sizes if bs <= limit] or [1]

    async def capture_cuda_graphs(self) -> None:
        engine = self.engine
        before = self.plan.avail_after_pool_gib
        engine.log_ranks(f"Capture cuda graph begin. This can take up to several minutes. avail mem={before:.2f} GB")
        capture_bs = self.capture_batch_sizes()
        engine.log_ranks(f"Capture cuda graph bs {capture_bs}")
        engine.first_forward()
        elapsed = await self.capture_batches(capture_bs, before, CUDA_GRAPH_CAPTURE_FAILED_MSG)
        after = before - self.plan.cuda_graph_gib
        engine.log_ranks(
            f"Capture cuda graph end. Time elapsed: {elapsed:.2f} s. "
            f"mem usage={self.plan.cuda_graph_gib:.2f} GB. avail mem={after:.2f} GB."
        )

    async def init_piecewise_cuda_graphs(self) -> None:
        engine = self.engine
        if self.args.disable_piecewise_cuda_graph:
            # 0.5.10/0.5.11 model_runner.py init_piecewise_cuda_graphs: ServerArgs decided (silently, whatever the
            # rule: args.piecewise_disable_reason), the runner prints this one line for every cause.
            engine.log_ranks("Disable piecewise CUDA graph because --disable-piecewise-cuda-graph is set")
            return
        before = self.plan.avail_after_pool_gib - self.plan.cuda_graph_gib
        engine.log_ranks(f"Capture piecewise CUDA graph begin. avail mem={before:.2f} GB")
        tokens = _piecewise_tokens(self.args.piecewise_cuda_graph_tokens, self.args.piecewise_cuda_graph_max_tokens)
        engine.log_ranks(f"Capture cuda graph num tokens {tokens}")
        engine.first_forward()
        started = time.monotonic()
        half = engine.profile.startup.piecewise_cuda_graph_s / 2
        await engine.progress_bars([f"Compiling num tokens (num_tokens={n})" for n in reversed(tokens)], half)
        used = self.plan.piecewise_cuda_graph_gib
        await engine.progress_bars(
            [f"Capturing num tokens (num_tokens={n} avail_mem={before - used * i / len(tokens):.2f} GB)"
             for i, n in enumerate(reversed(tokens))],
            half,
        )
        engine.log_ranks(
            f"Capture piecewise CUDA graph end. Time elapsed: {time.monotonic() - started:.2f} s. "
            f"mem usage={used:.2f} GB. avail mem={before - used:.2f} GB."
        )


class PhaseGraphs(_Graphs):
    """0.5.14+: capture_cuda_graphs of the target (prefill, then decode), then the draft worker's graphs."""

    async def capture(self) -> None:
        await self.capture_prefill("target", self.plan.avail_after_pool_gib)
        await self.capture_decode()
        if self.args.speculative_algorithm in ("EAGLE", "EAGLE3"):
            self.capture_draft()

    def capture_batch_sizes(self) -> list[int]:
        """get_batch_sizes_to_capture: cuda_graph_config[decode].bs within the request pool."""
        return capture_batch_sizes(self.args.cuda_graph_config["decode"]["bs"], self.plan.max_running_requests)

    async def capture_prefill(self, role: str, before: float) -> None:
        """capture_prefill_graph: the target's prefill graph (the draft's is captured later, without time)."""
        engine, prefill = self.engine, self.args.cuda_graph_config["prefill"]
        if prefill["backend"] == "disabled":
            engine.log_ranks(PREFILL_OFF)  # the runner reads the resolved config, whatever rule disabled it
            return
        tokens = sorted(prefill["bs"])
        engine.log_ranks(f"Capture {role} prefill CUDA graph begin. backend={prefill['backend']}, "
                         f"num_tokens={tokens}, avail mem={before:.2f} GB")
        engine.first_forward()
        started = time.monotonic()
        used = self.plan.piecewise_cuda_graph_gib if role == "target" else 0.0
        seconds = engine.profile.startup.piecewise_cuda_graph_s if role == "target" else 0.0
        await engine.progress_bars(
            [f"Capturing prefill shape (num_tokens={n} avail_mem={before - used * i / len(tokens):.2f} GB)"
             for i, n in enumerate(reversed(tokens))], seconds)
        engine.log_ranks(f"Capture {role} prefill CUDA graph end. elapsed={time.monotonic() - started:.2f} s, "
                         f"mem usage={used:.2f} GB, avail mem={before - used:.2f} GB.")

    async def capture_decode(self) -> None:
        """capture_decode_graph of the target: `target verify` with speculative decoding, else `target decode`."""
        engine, args = self.engine, self.args
        if args.graph_backend("decode") == "disabled":
            return
        before = self.plan.avail_after_pool_gib - self.plan.piecewise_cuda_graph_gib
        name, per_req = ("target verify", args.speculative_num_draft_tokens) if args.speculative_algorithm else (
            "target decode", 1)
        engine.log_ranks(f"Capture {name} CUDA graph begin. backend={args.graph_backend('decode')}, "
                         f"num_tokens_per_req={per_req}, avail mem={before:.2f} GB")
        capture_bs = self.capture_batch_sizes()
        engine.first_forward()
        elapsed = await self.capture_batches(capture_bs, before, PHASE_CUDA_GRAPH_CAPTURE_FAILED_MSG)
        used = self.plan.cuda_graph_gib
        engine.log_ranks(f"Capture {name} CUDA graph end. bs={capture_bs}, elapsed={elapsed:.2f} s, "
                         f"mem usage={used:.2f} GB, avail mem={before - used:.2f} GB.")

    def capture_draft(self) -> None:
        """eagle_worker_v2.py init_cuda_graphs: the draft runner's prefill graph (breakable only; when prefill
        graphs are off its runner says so too), then draft decode (num_steps > 1) and draft extend graphs, logged
        by rank 0. The profile's graph time and memory are the target's: the draft's take none."""
        engine, args, after = self.engine, self.args, self.plan.avail_after_graphs_gib
        backend = args.graph_backend("prefill")
        if backend == "disabled":
            engine.log_ranks(PREFILL_OFF)
        elif backend == "breakable":
            engine.log_ranks(f"Capture draft prefill CUDA graph begin. backend={backend}, "
                             f"num_tokens={sorted(args.cuda_graph_config['prefill']['bs'])}, avail mem={after:.2f} GB")
            engine.log_ranks(f"Capture draft prefill CUDA graph end. elapsed=0.00 s, mem usage=0.00 GB, "
                             f"avail mem={after:.2f} GB.")
        if args.graph_backend("decode") == "disabled":
            return
        capture_bs, decode = self.capture_batch_sizes(), args.graph_backend("decode")
        graphs = [("decode", args.speculative_eagle_topk)] if args.speculative_num_steps > 1 else []
        for name, per_req in [*graphs, ("extend", args.speculative_num_draft_tokens)]:
            engine.log_rank0(f"Capture draft {name} CUDA graph begin. backend={decode}, num_tokens_per_req={per_req}, "
                             f"bs={capture_bs}, avail mem={after:.2f} GB")
            engine.log_rank0(f"Capture draft {name} CUDA graph end. elapsed=0.00 s, mem usage=0.00 GB, "
                             f"avail mem={after:.2f} GB.")


def _piecewise_tokens(explicit: list[int] | None, max_tokens: int) -> list[int]:
    if explicit:
        return sorted(explicit)
    candidates = [*range(4, 33, 4), *range(48, 257, 16), *range(288, 513, 32), *range(640, 1025, 128),
                  *range(1280, 4097, 256), *range(4608, 8193, 512), *range(9216, 16385, 1024)]
    return [n for n in candidates if n <= max_tokens] or [max_tokens]
