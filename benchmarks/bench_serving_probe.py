# Copyright (c) llmops.sglang contributors
# Apache License 2.0 (see LICENSE)
"""Run SGLang's ``python -m sglang.bench_serving`` unchanged and record the CPU and wall time of its timed phase.

Usage (with the bench_serving venv's python): ``bench_serving_probe.py MARKS_JSON BENCH_SERVING_ARGS...``

bench_serving parses its command line in its ``if __name__ == "__main__":`` block, so ``-m`` would give no place to
hook in. This script imports the module, wraps two of its functions, then runs that block's own code in the
module's namespace: ``get_request`` is called right after the warm-up and the 1 s pause, when the timed requests
start, and ``calculate_metrics`` right after the last timed response (and the /server_info query). Between the two,
``time.process_time()`` is the client's CPU for exactly the requests bench_serving reports on (and /proc/self/schedstat
its time waiting for a core); imports, tokenizer loading, prompt generation, warm-up and the metrics (with their
retokenisation) stay outside. MARKS_JSON gets ``{"wall_s", "cpu_s", "wait_s"}`` of that phase.
"""
from __future__ import annotations

import ast
import json
import sys
import time
from pathlib import Path

import sglang.bench_serving as bench_serving


def scheduler_wait_s() -> float:
    """Seconds this process has waited for a core (run queue), from /proc/self/schedstat."""
    return int(Path("/proc/self/schedstat").read_text().split()[1]) / 1e9


def _mark(marks: dict, name: str, function):
    def wrapped(*args, **kwargs):
        marks[name] = {"wall_s": time.perf_counter(), "cpu_s": time.process_time(), "wait_s": scheduler_wait_s()}
        return function(*args, **kwargs)
    return wrapped


def main_block(path: str) -> ast.Module:
    """The statements under ``if __name__ == "__main__":`` of bench_serving's source."""
    tree = ast.parse(Path(path).read_text(encoding="utf-8"), filename=path)
    for node in tree.body:
        if isinstance(node, ast.If) and ast.unparse(node.test) in ('__name__ == "__main__"', "__name__ == '__main__'"):
            return ast.Module(body=node.body, type_ignores=[])
    raise SystemExit(f"no __main__ block in {path}")


def main() -> None:
    marks_path, bench_args = Path(sys.argv[1]), sys.argv[2:]
    marks: dict = {}
    bench_serving.get_request = _mark(marks, "start", bench_serving.get_request)
    bench_serving.calculate_metrics = _mark(marks, "end", bench_serving.calculate_metrics)
    sys.argv = [bench_serving.__file__, *bench_args]
    exec(compile(main_block(bench_serving.__file__), bench_serving.__file__, "exec"), vars(bench_serving))
    marks_path.write_text(json.dumps({key: marks["end"][key] - marks["start"][key] for key in marks["end"]}))


if __name__ == "__main__":
    main()
