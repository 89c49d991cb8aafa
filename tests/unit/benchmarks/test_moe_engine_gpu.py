# Copyright (c) llmops.sglang contributors
# Apache License 2.0 (see LICENSE)
"""benchmarks/moe_engine_gpu.py's controller-side parts: the staging replay and the report's merge."""
from __future__ import annotations

import importlib.util
import itertools
import json
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]
SPEC = importlib.util.spec_from_file_location("moe_engine_gpu", REPO / "benchmarks" / "moe_engine_gpu.py")
bench = importlib.util.module_from_spec(SPEC)
SPEC.loader.exec_module(bench)
KEYS = [f"M{bm}_N{bn}_K64_G{g}_w4_s{st}" for bm, bn, g, st in itertools.product((16, 64), (32, 64, 128), (1, 16),
                                                                                 (2, 3, 4))]


def screen_with_best(best: dict[int, str]) -> dict[int, dict[str, float]]:
    """Every key at every M: 100 us plus its rank in KEYS, 50 us for the M's best."""
    return {m: {key: 50.0 if key == best[m] else 100.0 + i for i, key in enumerate(KEYS)} for m in best}


def test_replay_stages_compiles_less_than_every_class_and_finds_each_best():
    # M=1 alone, M=2..8 the large class: its best is found by the base and twins stages; M=1's best is among M=2's
    # default leaders, and one parameter (num_stages) from M=2's best, which the climb reaches with fewer leaders.
    best = {1: "M16_N64_K64_G1_w4_s4", 2: "M16_N64_K64_G1_w4_s3", 4: "M64_N32_K64_G1_w4_s2",
            8: "M64_N32_K64_G1_w4_s2"}
    compiles, worst = bench.replay_stages(screen_with_best(best), [[1], [2, 4, 8]], dict(bench.moe_engine.DEFAULT_TIMING))
    assert worst == 0.0
    assert compiles < 2 * len(KEYS)
    few = {**bench.moe_engine.DEFAULT_TIMING, "lead_min": 1, "lead_per_block_m": 1, "lead_share": 0}
    assert bench.replay_stages(screen_with_best(best), [[1], [2, 4, 8]], few)[1] == 0.0
    _compiles, missed = bench.replay_stages(screen_with_best(best), [[1], [2, 4, 8]], {**few, "climbs": 0})
    assert missed > 0  # M=1's best is not among M=2's leaders


def test_report_keeps_the_exhaustive_screen_out_of_the_results(tmp_path, monkeypatch, capsys):
    phases = {"engine": {"device": {"name": "GPU"}, "shape": {"E": 8, "N": 16}, "batch_sizes": [1], "gpu_minutes": 0.5,
                         "wall_s": 30.0},
              "exhaustive": {"worst_ratio": 1.002, "screen": {"up": {"1": {"k": 1.0}}}}}
    for phase, data in phases.items():
        (tmp_path / f"custom-{phase}.json").write_text(json.dumps(data))
    results = tmp_path / "results.json"
    monkeypatch.setattr(bench, "RESULTS", str(results))
    assert bench.report(type("Args", (), {"report": str(tmp_path)})) == 0
    data = json.loads(results.read_text())
    assert "screen" not in data["shapes"]["custom"]["exhaustive"]
    assert capsys.readouterr().out.strip().endswith("worst batch size within 0.2% of exhaustive; n/a less wall time "
                                                    "than SGLang's tuner; SGLang's lookup loads ours: n/a")
