#!/usr/bin/env python3
# Copyright (c) llmops.sglang contributors
# Apache License 2.0 (see LICENSE)
"""Open-loop client self-check (issue #19, deliverable 1): does our client keep its send schedule at 1,000 streams?

Run from the repository root with the project venv: ``.venv/bin/python benchmarks/open_loop_lag.py [--quick]``.
Results and how to read them: benchmarks/README.md ("Open-loop client lag").

It starts the tests' small SGLang-shaped SSE server (tests/unit/plugins/module_utils/fake_sglang_server.py; a
fresh one per level, pinned to core 1) whose requests last ``TTFT_MS + (OUTPUT_LEN - 1) * TOKEN_MS`` = 2 s, and runs
``bench_client.run_sweep`` (what the ``bench`` module runs with ``arrival``) pinned to core 0 with Poisson arrivals at
rates whose Little's-law concurrency is 250, 500 and 1,000 streams. Per level it prints the client's send lag
(actual minus scheduled send time), its CPU share, the time it was runnable but waited for its core (another
process on core 0: lag the client did not cause), the server-side peak of requests in flight (GET /stats) and the
client's own ``client_limited`` verdict. Exit code 0 only if the 1,000-stream level is not client-limited.
Every server it starts is stopped before it exits; it writes nothing.
"""
from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "collections"), str(ROOT)]

from ansible_collections.llmops.sglang.plugins.module_utils._bench_config import BenchConfig  # noqa: E402
from ansible_collections.llmops.sglang.plugins.module_utils.bench_client import run_sweep  # noqa: E402
from ansible_collections.llmops.sglang.plugins.module_utils.workload import Arrival  # noqa: E402
from tests.unit.plugins.module_utils.fake_sglang_server import running_server, server_stats  # noqa: E402

TTFT_MS = 100.0
TOKEN_MS = 100.0
OUTPUT_LEN = 20
INPUT_LEN = 128
REQUEST_S = (TTFT_MS + (OUTPUT_LEN - 1) * TOKEN_MS) / 1000.0
STREAMS = (250, 500, 1000)
TARGET_STREAMS = 1000
CLIENT_CORE, SERVER_CORE = 0, 1


def run_queue_wait_s() -> float:
    """Seconds this process was runnable but waiting for its core (/proc/self/schedstat, field 2, ns)."""
    return int(Path("/proc/self/schedstat").read_text().split()[1]) / 1e9


def measure(streams: int, run_s: float) -> dict:
    rate = streams / REQUEST_S  # Little's law: streams in flight = arrival rate x request duration
    with running_server("--ttft-ms", str(TTFT_MS), "--token-ms", str(TOKEN_MS)) as (base_url, process):
        os.sched_setaffinity(process.pid, {SERVER_CORE})
        waited = run_queue_wait_s()
        sweep = run_sweep(BenchConfig(base_url=base_url, input_len=INPUT_LEN, output_len=OUTPUT_LEN, repeats=1,
                                      requests_per_level=round(rate * run_s), warmup_requests=round(rate),
                                      arrival=Arrival(request_rates=(rate,)), request_timeout_s=60.0))
        waited = run_queue_wait_s() - waited
        stats = server_stats(base_url)
    if sweep["error"]:
        raise SystemExit(f"{streams} streams: {sweep['error']}")
    (run,) = sweep["levels"][0]["runs"]
    return {"streams": streams, "rate": rate, "requests": run["requests"], "ok": run["ok"],
            "achieved_rate": run["achieved_rate_rps"], "achieved_concurrency": run["achieved_concurrency"],
            "server_peak": stats["max_in_flight"], "lag": run["lag_ms"], "cpu_pct": run["client_cpu_pct"],
            "ttft_p50": run["ttft_ms"]["p50"], "waited_s": waited, "client_limited": run["client_limited"],
            "reason": run["client_limited_reason"]}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="4 s runs instead of 12 s (smoke run, ~40 s)")
    args = parser.parse_args()
    if len(os.sched_getaffinity(0)) < 2:
        raise SystemExit("needs two cores: the client on core 0, the server on core 1")
    os.sched_setaffinity(0, {CLIENT_CORE})
    print(f"load average before: {os.getloadavg()[0]:.1f}", flush=True)
    print("| Streams (Little) | Rate (req/s) | Requests | Server peak in flight | Achieved concurrency | "
          "Lag p50 / p99 / max (ms) | Client CPU | Client waited for its core (s) | TTFT p50 (ms) | client_limited |")
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|")
    results = []
    for streams in STREAMS:
        result = measure(streams, 4.0 if args.quick else 12.0)
        results.append(result)
        lag = result["lag"]
        print(f"| {streams} | {result['rate']:.0f} | {result['ok']}/{result['requests']} | {result['server_peak']} | "
              f"{result['achieved_concurrency']:.0f} | {lag['p50']:.1f} / {lag['p99']:.1f} / {lag['max']:.1f} | "
              f"{result['cpu_pct']:.0f} % | {result['waited_s']:.2f} | {result['ttft_p50']:.0f} | "
              f"{result['reason'] or 'no'} |", flush=True)
    print(f"load average after: {os.getloadavg()[0]:.1f}")
    target = next(result for result in results if result["streams"] == TARGET_STREAMS)
    verdict = "PASS" if not target["client_limited"] and target["ok"] == target["requests"] else "FAIL"
    print(f"open-loop client at {target['server_peak']} concurrent streams on one core: lag p99 "
          f"{target['lag']['p99']:.1f} ms, CPU {target['cpu_pct']:.0f} %: {verdict}")
    return 0 if verdict == "PASS" else 1


if __name__ == "__main__":
    sys.exit(main())
