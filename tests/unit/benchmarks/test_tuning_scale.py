# Copyright (c) llmops.sglang contributors
# Apache License 2.0 (see LICENSE)
"""benchmarks/tuning_scale.py fails (non-zero) when Ray did not see every host's GPUs, the tuner's work did not
span the hosts or use every GPU, or more hosts were not faster (issue #16 item 11)."""
from __future__ import annotations

from benchmarks.tuning_scale import GPUS_PER_HOST, failures


def row(hosts: int, wall_s: float, **overrides) -> dict:
    gpus = GPUS_PER_HOST * hosts
    return {"hosts": hosts, "ray_gpus": gpus, "gpus_used": gpus, "placement_hosts": hosts, "wall_s": wall_s,
            **overrides}


def test_a_run_that_scales_over_every_host_passes():
    assert failures([row(1, 60.0), row(2, 33.0), row(3, 24.0)]) == []


def test_every_reason_to_fail_is_named():
    problems = failures([row(1, 60.0), row(2, 65.0, ray_gpus=4), row(3, 24.0, placement_hosts=2, gpus_used=8)])
    assert problems == [
        "N=2: Ray saw 4 GPUs, not the 8 of 2 host(s)",
        "N=2: speedup 0.92 is below 50% of the ideal 2.00",
        "N=3: the tuner's runs used 8 GPU workers, not 12",
        "N=3: the tuner's work ran on 2 host(s), not 3",
    ]
