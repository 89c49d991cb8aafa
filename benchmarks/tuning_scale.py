"""Tuning wall time on 1, 2 and 3 emulated hosts (issue #9): the same up-kernel tuning over a Ray cluster of N hosts.

Boots 3 sandbox hosts with the SGLang emulator (demo profile: 4 emulated GPUs per host, tuner time x 0.001) once,
then for N = 1, 2, 3 starts the ray_cluster role over the first N hosts, runs llmops.sglang.moe_tune once on the head
over the same 24 batch sizes (force, a fresh work_dir), records the tuning task's wall time (ansible-runner's event
duration) and the GPUs Ray saw, and stops the cluster. Prints N | GPUs | wall s | speedup vs N=1 | ideal, where ideal
is the ratio of tuner invocations: the module runs one chunk of (Ray GPUs) batch sizes per invocation, so
ceil(24/4) / ceil(24/(4N)). The fleet is torn down at the end, also on errors, Ctrl-C and SIGTERM.

It exits non-zero, naming why, when Ray did not see every host's GPUs (4N), when the tuner's runs did not span
the N hosts or use every GPU (Ray's own record of the runs: moe_tune's placements, from the cluster's GCS), or
when N hosts were not faster than one (speedup below MIN_SPEEDUP_SHARE of the ideal).

Run from the checkout's root: .venv/bin/python -m benchmarks.tuning_scale
"""
from __future__ import annotations

import math
import os
import signal
import sys
import time

from tests.integration.ansible import REPO_ROOT, PlaybookRunner
from tests.sandbox.emulator_payload import build_emulator
from tests.sandbox.fleet import Fleet, FleetConfig, unsupported_reason

PLAYBOOK = REPO_ROOT / "benchmarks" / "playbooks" / "tuning_scale.yml"
TUNE_TASK = "Tune the up kernel"
HOST_COUNTS = (1, 2, 3)
GPUS_PER_HOST = 4  # the demo profile's emulated GPUs
# 24 sizes: 6 tuner invocations on one host's 4 GPUs, 3 on 8 GPUs, 2 on 12, so the ideal speedups are whole numbers.
BATCH_SIZES = [1, 2, 4, 8, 12, 16, 24, 32, 48, 64, 96, 128, 160, 192, 256, 320, 384, 512, 640, 768, 1024, 1536,
               2048, 4096]
WORK_DIR = "/var/lib/llmops-sglang/tuning-scale"
# The least share of the ideal speedup N hosts must reach (the emulated tuner's fixed costs per run keep it below 1).
MIN_SPEEDUP_SHARE = 0.5


def ideal_speedup(hosts: int) -> float:
    return math.ceil(len(BATCH_SIZES) / GPUS_PER_HOST) / math.ceil(len(BATCH_SIZES) / (GPUS_PER_HOST * hosts))


def measure(runner: PlaybookRunner, names: list[str]) -> dict:
    """One tuning over the cluster of ``names``: the tuning task's wall time and what Ray and the tuner saw."""
    extravars = {"ray_cluster_hosts": names, "scale_batch_sizes": BATCH_SIZES,
                 "scale_work_dir": f"{WORK_DIR}/n{len(names)}-{time.time_ns()}"}
    result = runner.run(PLAYBOOK, extravars, limit=",".join(names))
    if result.status != "successful":
        raise RuntimeError(f"tuning on {names} failed ({result.status}):\n{result.stdout[-4000:]}")
    tuned = result.task_results(TUNE_TASK)[names[0]]
    if sorted(tuned["batch_sizes"]) != sorted(BATCH_SIZES) or tuned["resumed"]:
        raise RuntimeError(f"tuning on {names} did not tune all {len(BATCH_SIZES)} batch sizes afresh: {tuned}")
    return {"hosts": len(names), "ray_gpus": result.artifacts()["ray_gpus"],
            "wall_s": result.task_durations(TUNE_TASK)[names[0]], "chunks": len(tuned["progress"]),
            "tuner_s": tuned["tuner_seconds"], "gpus_used": tuned["gpus_used"],
            "placement_hosts": len(tuned["hosts_used"])}


def failures(rows: list[dict]) -> list[str]:
    """Why the measurement does not show what it claims (empty: it does)."""
    problems, base = [], rows[0]["wall_s"]
    for row in rows:
        n, gpus = row["hosts"], GPUS_PER_HOST * row["hosts"]
        if row["ray_gpus"] != gpus:
            problems.append(f"N={n}: Ray saw {row['ray_gpus']} GPUs, not the {gpus} of {n} host(s)")
        if row["gpus_used"] != gpus:
            problems.append(f"N={n}: the tuner's runs used {row['gpus_used']} GPU workers, not {gpus}")
        if row["placement_hosts"] != n:
            problems.append(f"N={n}: the tuner's work ran on {row['placement_hosts']} host(s), not {n}")
        speedup = base / row["wall_s"]
        if n > 1 and speedup < MIN_SPEEDUP_SHARE * ideal_speedup(n):
            problems.append(f"N={n}: speedup {speedup:.2f} is below {MIN_SPEEDUP_SHARE:.0%} of the ideal "
                            f"{ideal_speedup(n):.2f}")
    return problems


def print_table(rows: list[dict]) -> None:
    base = rows[0]["wall_s"]
    # "tuner s" is the sum of the tuner's own "Tuning took" (actor start-up included); the rest of the wall time is
    # the module's steps: one tuner process per chunk (imports, ray.init against the cluster), SSH, plan and finish.
    print("N | GPUs | wall s | speedup vs N=1 | ideal | chunks | tuner s | other s | hosts that tuned")
    for row in rows:
        print(f"{row['hosts']} | {row['ray_gpus']} | {row['wall_s']:.1f} | {base / row['wall_s']:.2f} | "
              f"{ideal_speedup(row['hosts']):.2f} | {row['chunks']} | {row['tuner_s']:.1f} | "
              f"{row['wall_s'] - row['tuner_s']:.1f} | {row['placement_hosts']}")
    print("load average (1, 5, 15 min) at the end: " + ", ".join(f"{load:.2f}" for load in os.getloadavg()))


def main() -> int:
    reason = unsupported_reason()
    if reason:
        print(f"sandbox hosts unavailable: {reason}", file=sys.stderr)
        return 1
    # SIGTERM unwinds like Ctrl-C, so the finally below tears the fleet down.
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))
    fleet = Fleet(FleetConfig())
    problems: list[str] = []
    try:
        hosts = fleet.up(max(HOST_COUNTS), emulator=build_emulator())
        runner = PlaybookRunner(inventory=fleet.inventory_file)
        names = [host.name for host in hosts]
        rows = []
        for count in HOST_COUNTS:
            rows.append(measure(runner, names[:count]))
            print(f"N={count}: {rows[-1]}", flush=True)
        print_table(rows)
        problems = failures(rows)
        for problem in problems:
            print(f"FAILED: {problem}", file=sys.stderr)
    finally:
        fleet.down()
        left = fleet.leftovers()
        if left:
            print("the sandbox fleet left traces:\n  " + "\n  ".join(left), file=sys.stderr)
    return 1 if left or problems else 0


if __name__ == "__main__":
    sys.exit(main())
