# Copyright (c) llmops.sglang contributors
# Apache License 2.0 (see LICENSE)
"""benchmarks/goodput_search.py: issue #40's second space (4 knobs, >= 200 candidates) and what its --simulate
needs beside the full space's: the fourth knob reaches the emulator's scheduler the simulation drives, the worker
processes keep the order, the ground truth is cached by what computes it, and the space is chosen on the command
line."""
from __future__ import annotations

import dataclasses
import json

import pytest

from benchmarks import goodput_search
from benchmarks.goodput_search import FULL, QUICK, SPACES, WIDE, ground_truth, main, map_jobs, server_model, truth_key


def test_the_wide_space_is_the_full_grid_times_chunked_prefill_size():
    assert list(WIDE.knobs) == [*FULL.knobs, "chunked_prefill_size"]
    assert len(WIDE.grid()) == 240 and len(FULL.grid()) == 60
    assert {name: value for name, value in vars(WIDE).items() if name not in ("name", "knobs")} == \
        {name: value for name, value in vars(FULL).items() if name not in ("name", "knobs")}
    assert SPACES == {"full": FULL, "wide": WIDE}


def test_chunked_prefill_size_reaches_the_scheduler_the_simulation_drives():
    point = WIDE.grid()[0]
    assert point["chunked_prefill_size"] == 128
    assert server_model(point).limits.chunked_prefill_size == 128
    assert server_model(FULL.grid()[0]).limits.chunked_prefill_size == 8192  # the demo GPU's default


def test_worker_processes_give_the_results_in_order():
    assert map_jobs(2, pow, [2, 3, 4, 5], [3, 2, 2, 1]) == map_jobs(1, pow, [2, 3, 4, 5], [3, 2, 2, 1]) == [8, 9, 16, 5]


def test_quick_is_a_size_of_the_full_space_only():
    with pytest.raises(SystemExit) as refused:
        main(["--quick", "--space", "wide", "--simulate", "1"])
    assert refused.value.code == 2


def test_the_ground_truth_is_cached_by_the_setup_and_the_code_that_computes_it(tmp_path, monkeypatch):
    source = tmp_path / "model" / "scheduler.py"
    source.parent.mkdir()
    source.write_text("step = 1\n")
    monkeypatch.setattr(goodput_search, "TRUTH_SOURCES", (source.parent,))
    monkeypatch.setattr(goodput_search, "CACHE", tmp_path / "cache")
    key = truth_key(QUICK)
    assert truth_key(dataclasses.replace(QUICK, seed=20)) != key
    rows = [{"params": point, "capacity_rps": 1.0, "gpu_minutes": 2.0, "starts": True} for point in QUICK.grid()]
    (tmp_path / "cache").mkdir()
    (tmp_path / "cache" / f"truth-quick-{key}.json").write_text(json.dumps(rows))
    assert ground_truth(QUICK) == rows  # read back, not computed (the model gives no such rows)
    source.write_text("step = 2\n")
    assert truth_key(QUICK) != key
