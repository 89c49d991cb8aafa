# Copyright (c) llmops.sglang contributors
# Apache License 2.0 (see LICENSE)
"""Parsers of the fused-MoE tuners' output (``tuning_fused_moe_triton.py`` and ``tune_down_moe.py``).

Private to the llmops.sglang collection; not a public API. Pure functions, stdlib only, so it imports on any
managed host with plain Python 3.11.
"""
from __future__ import annotations

import ast
import re
from typing import Any


_BENCH_BATCH_RE = re.compile(r"Batch size: (\d+), config: (.*)$")
_BENCH_TIME_RE = re.compile(r"Kernel time: ([\d.]+) us")
_TUNE_START_RE = re.compile(r"Start tuning over (\d+) configurations to create (.+?\.json)\.\.\.")
_TUNE_DONE_RE = re.compile(r"\] Completed tuning for batch_size=(\d+)")
_TUNE_WRITE_RE = re.compile(r"Writing best config to (.+?\.json)\.\.\.")
_TUNE_SECONDS_RE = re.compile(r"Tuning took ([\d.]+) seconds")
_DOWN_RESULT_RE = re.compile(r"M=(\d+): best down (\{.*\}) \(([\d.]+)us\)")
_DOWN_WROTE_RE = re.compile(r"^wrote (.+\.json)\s*$", re.MULTILINE)


def _literal(text: str) -> Any:
    # The tuners print Python dict reprs (single quotes, True/False), not JSON.
    return ast.literal_eval(text.strip())


def parse_tuner_benchmark_output(text: str) -> dict[int, dict[str, Any]]:
    """Benchmark mode (no ``--tune``): installed config and kernel time per batch size."""
    results: dict[int, dict[str, Any]] = {}
    current: int | None = None
    for line in text.splitlines():
        if match := _BENCH_BATCH_RE.search(line):
            current = int(match.group(1))
            results[current] = {"config": _literal(match.group(2)), "kernel_us": None}
        elif (match := _BENCH_TIME_RE.search(line)) and current is not None:
            results[current]["kernel_us"] = float(match.group(1))
            current = None
    return results


def parse_tuner_tune_output(text: str) -> dict[str, Any]:
    """Progress of ``--tune``: search-space size, output name, finished batch sizes, duration.

    ``written`` tells whether the tuner reached ``save_configs`` (never install otherwise).
    """
    start = _TUNE_START_RE.search(text)
    written = _TUNE_WRITE_RE.search(text)
    seconds = _TUNE_SECONDS_RE.search(text)
    file_name = written.group(1) if written else (start.group(2) if start else None)
    return {
        "configs_total": int(start.group(1)) if start else None,
        "file_name": file_name,
        "completed_batch_sizes": sorted({int(size) for size in _TUNE_DONE_RE.findall(text)}),
        "seconds": float(seconds.group(1)) if seconds else None,
        "written": written is not None,
    }


def parse_down_tuner_output(text: str) -> dict[str, Any]:
    """``tune_down_moe.py`` output: best down config and time per M, and the written path."""
    results = {
        int(m): {"config": _literal(config), "kernel_us": float(time_us)}
        for m, config, time_us in _DOWN_RESULT_RE.findall(text)
    }
    wrote = _DOWN_WROTE_RE.search(text)
    return {"results": results, "output_path": wrote.group(1) if wrote else None}
