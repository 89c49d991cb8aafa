"""The MoE tuning engine on a real GPU (issue #35): its wall time and GPU-minutes, how close its picks come to the
exhaustive best over the same space, SGLang's own tuning method on the same GPU, and whether the real release's
config lookup loads the files it writes.

Runs on the GPU host (the `device` machine: torch, Triton 3.6.0, no SGLang, no network), with a real SGLang release
unpacked on PYTHONPATH (benchmarks/README.md, "MoE engine on a GPU", says how the wheel and the small packages its
import chain needs travel). Phases, any subset per call (`--phases`), each writing `<out>/<shape>-<phase>.json`:

- engine: `python plugins/module_utils/moe_engine.py JOB` exactly as llmops.sglang.moe_tune runs it: up + down, every
  default batch size, the prefiltered space (configs whose shared memory cannot fit dropped before compiling), all
  CPU cores compiling, this GPU timing.
- exhaustive: every config that compiled, timed at every batch size with the engine's screen (4 launches queued
  behind a GPU-side wait, so the events time kernels, not launches), the 5 fastest per (kernel, M) and the
  engine's picks re-timed interleaved (`--final-reps`); the engine's joint up+down time against the exhaustive joint best (the same BLOCK_SIZE_M rule).
- sglang: SGLang's own tuning method (benchmark_config of benchmark/kernels/fused_moe_triton/
  tuning_fused_moe_triton.py, sglang commit 00e96592: per config, the fused MoE with that config for both GEMMs is
  compiled in the tuning process, captured 10 times in a CUDA graph, replayed 5 times to warm up, then 10 timed
  replays after one 256 MB L2 flush) on `--sample` random configs of the same space at every batch size, from an
  empty Triton cache; its wall time per (config, M) extrapolated to the whole space. Then its pick over the whole
  space (warm cache: timing only) at `--server-ms`.
- server: the server-like regime, independent of the engine's own: a CUDA graph of `--layers` MoE layers (each its
  own weights and routing: up, SiLU-and-mul, down), per layer time at `--server-ms` for the engine's pair, SGLang's
  method's pick (one config for both GEMMs, as its tuner writes it) and the release's default.
- lookup: the engine's files written into an empty SGLANG_MOE_CONFIG_DIR; what the release's own
  try_get_optimal_moe_config returns at every M with and without them.

`--report` (on the controller) merges the phase files into benchmarks/results/moe_engine_gpu.json and prints the
summary line last. A shape is a name (`qwen35-122b-tp4`, `qwen3-30b-tp1`) or `--shape custom --experts E --topk K
--hidden H --intermediate I --tp T`.
"""
from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
MODULE_UTILS = os.path.join(ROOT, "plugins", "module_utils")


def load(name: str):
    """A stdlib-only module_utils file by path (that folder on sys.path would shadow the stdlib's secrets)."""
    import importlib.util
    spec = importlib.util.spec_from_file_location(name, os.path.join(MODULE_UTILS, f"{name}.py"))
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


moe_engine = load("moe_engine")
DEFAULT_BATCH_SIZES = load("moe_batch_sizes").DEFAULT_BATCH_SIZES
compute_bound_search_space = load("moe_search_space").compute_bound_search_space
PRUNINGS = sys.modules["moe_search_space"].PRUNINGS
ENGINE = os.path.join(MODULE_UTILS, "moe_engine.py")
RESULTS = os.path.join(HERE, "results", "moe_engine_gpu.json")
# Model shapes: E, top-k, hidden, moe_intermediate_size, TP (the config file's N is intermediate / TP).
SHAPES = {
    "qwen35-122b-tp4": {"model": "Qwen3.5-122B-A10B at TP4 (the real case)", "E": 256, "topk": 8, "hidden": 3072,
                        "intermediate": 1024, "tp": 4},
    "qwen3-30b-tp1": {"model": "Qwen3-30B-A3B at TP1", "E": 128, "topk": 8, "hidden": 2048, "intermediate": 768,
                      "tp": 1},
}
MODEL_DIR = os.path.join(ROOT, "tests", "emulator", "models", "Qwen3.5-122B-A10B")
# The device calls behind benchmarks/results/moe_engine_gpu.json, per shape (benchmarks/README.md says how to run them).
RUN_COMMANDS = {  # one device call per command, in order, on the same card type
    "qwen35-122b-tp4": ["python3 benchmarks/moe_engine_gpu.py --shape qwen35-122b-tp4 --workers 15 --deadline 300 "
                        "--budget 480 --final-reps 4 --phases=engine,lookup,exhaustive  # 2026-12-07",
                        "python3 benchmarks/moe_engine_gpu.py --shape qwen35-122b-tp4 --workers 15 --budget 420 "
                        "--final-reps 4 --sample 8 --server-ms 1,16 --phases=sglang,server  # 2026-12-06"],
    "qwen3-30b-tp1": ["python3 benchmarks/moe_engine_gpu.py --shape qwen3-30b-tp1 --workers 15 --deadline 300 "
                      "--budget 545 --final-reps 6 --sample 8 --server-ms 1,16 "
                      "--phases=engine,exhaustive,lookup,sglang,server"],
}


def engine_shape(spec: dict) -> dict:
    return {"E": spec["E"], "N": spec["intermediate"] // spec["tp"], "hidden": spec["hidden"], "topk": spec["topk"],
            "dtype": "bf16"}


SUBSET = {"size": 0, "seed": 0, "space": "pruned"}  # --space, --configs (a seeded random subset: smoke runs)


def search_space(smem_limit: int) -> list[dict]:
    """SGLang's compute-bound space, pruned as moe_tune's search_space option does (``pruned``: SGLang's
    conservative shared-memory bound and GROUP_SIZE_M 1 or 16; ``prefiltered``: Triton's own bound only)."""
    space = PRUNINGS[SUBSET["space"]](compute_bound_search_space(), smem_limit, 2, 2)[0]
    if SUBSET["size"]:
        space = random.Random(SUBSET["seed"]).sample(space, SUBSET["size"])
    return space


def smem_limit() -> int:
    import torch
    return int(torch.cuda.get_device_properties(0).shared_memory_per_block_optin)


def write(out: str, name: str, data: dict) -> None:
    os.makedirs(out, exist_ok=True)
    moe_engine.write_json_atomically(os.path.join(out, name), data)


# ------------------------------------------------------------------------------------------------ engine


def run_engine(args, name: str, shape: dict, sizes: list[int]) -> dict:
    work = os.path.join(args.work, name)
    job = {"shape": shape, "kernels": ["up", "down"], "batch_sizes": sizes, "configs": search_space(smem_limit()),
           "gpus": list(range(args.gpus)), "compile_workers": args.workers, "work_dir": work,
           "output": os.path.join(work, "result.json"),
           "model_path": MODEL_DIR, "deadline_s": args.deadline, "start_method": args.start_method}
    os.makedirs(work, exist_ok=True)
    job_path = os.path.join(work, "job.json")
    moe_engine.write_json_atomically(job_path, job)
    program = os.path.join(work, "moe_engine.py")  # alone in its folder, as moe_tune installs it on a host
    shutil.copyfile(ENGINE, program)
    start = time.time()
    proc = subprocess.run([sys.executable, program, job_path], capture_output=True, text=True, check=False)
    wall = time.time() - start
    events = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    if proc.returncode != 0:
        raise RuntimeError(f"engine exited {proc.returncode}: {events[-1:]} {proc.stderr[-3000:]}")
    with open(job["output"], encoding="utf-8") as handle:
        result = json.load(handle)
    result["benchmark_wall_s"] = round(wall, 1)
    result["space"] = len(job["configs"])
    return result


# ------------------------------------------------------------------------------------------------ exhaustive


def bench_for(args, name: str, shape: dict, sizes: list[int]):
    os.environ["TRITON_CACHE_DIR"] = os.path.join(args.work, name, "triton-cache")
    job = moe_engine.validate_job({"shape": shape, "batch_sizes": sizes, "configs": [{}], "work_dir": args.work,
                                   "output": "-", "model_path": MODEL_DIR})
    return job, moe_engine.TritonBench(job)


def precompile(args, name: str, shape: dict, sizes: list[int], space: dict[str, dict]) -> dict[str, str]:
    """Every config of ``space`` for every specialisation of ``sizes``, both kernels, on ``--workers`` of the engine's
    own compile workers into the engine's Triton cache (the engine compiled its stages only): the exhaustive phase
    then loads every binary and compiles nothing in its timing process. Status per ``kernel/key``."""
    job = moe_engine.validate_job({"shape": shape, "batch_sizes": sizes, "configs": list(space.values()),
                                   "output": "-", "work_dir": os.path.join(args.work, name), "model_path": MODEL_DIR})
    import multiprocessing
    pool = moe_engine.Pool(multiprocessing.get_context("spawn"), moe_engine.compile_worker, job, [0], args.workers)
    status, pending = {}, 0
    try:
        for kernel in ("up", "down"):
            for key, config in space.items():
                pool.put((kernel, key, config, sizes))
                pending += 1
        while pending:
            for _pool, (kind, _wid, payload) in moe_engine.receive([pool], 5.0):
                if kind == "fatal":
                    raise RuntimeError(payload)
                if kind in ("compiled", "lost"):
                    kernel, key = payload[:2]
                    status[f"{kernel}/{key}"] = payload[2]["status"] if kind == "compiled" else "compile:crashed"
                    pending -= 1
    finally:
        pool.close()
    return status


def run_exhaustive(args, name: str, shape: dict, sizes: list[int], engine: dict) -> dict:
    """Every config of the space at every M with the engine's screen timing (no halving), then the 5 fastest, the
    best of every BLOCK_SIZE_M, the engine's pick and the default re-timed as the engine's final (graphs,
    interleaved, ``final_reps`` rounds): the exhaustive joint best against the engine's pair, same timing."""
    job, bench = bench_for(args, name, shape, sizes)
    space = moe_engine.candidates(search_space(bench.device["smem_per_block_optin"]),
                                  [bench.release.default_config(m, shape, "up") for m in sizes])
    start = time.time()
    compiled = precompile(args, name, shape, sizes, space)  # configs that failed to compile are not retried
    precompile_s = time.time() - start
    start = time.time()
    screen = {k: {m: {} for m in sizes} for k in ("up", "down")}
    for kernel in ("up", "down"):
        for key, config in space.items():
            if compiled.get(f"{kernel}/{key}", "ok") != "ok":
                continue
            try:
                times = bench.screen_times(kernel, config, sizes, 4)
            except Exception:  # noqa: BLE001 - configs that cannot load or launch are not candidates
                continue
            for m in sizes:
                screen[kernel][m][key] = statistics.median(times[m])
    screen_s = time.time() - start
    rows = {}
    for m in sizes:
        picked = engine["per_m"][str(m)]["pick"]
        final = {}
        for kernel in ("up", "down"):
            times = screen[kernel][m]
            keys = sorted(times, key=times.get)[:5]
            keys += [key for key, _ in moe_engine.best_per_block_m(times).values()]
            keys += [picked[kernel], moe_engine.config_key(bench.release.default_config(m, shape, kernel))]
            keys = [key for key in dict.fromkeys(keys) if key in space]
            samples = {key: [] for key in keys}
            for _ in range(args.final_reps):
                for key in keys:
                    samples[key].extend(bench.graph_times(kernel, m, space[key], 1))
            final[kernel] = {key: statistics.median(v) for key, v in samples.items()}
        best = moe_engine.joint_pick(final["up"], final["down"])
        default = moe_engine.config_key(bench.release.default_config(m, shape, "up"))
        ours = final["up"][picked["up"]] + final["down"][picked["down"]]
        best_us = best["up_us"] + best["down_us"]
        rows[str(m)] = {"engine": picked, "engine_us": ours, "best": best, "best_us": best_us,
                        "ratio": ours / best_us, "default_us": final["up"][default] + final["down"][default],
                        "configs_timed": {k: len(screen[k][m]) for k in screen}}
    # Every screen time, so other staging policies can be replayed offline against the same measurements.
    times = {k: {str(m): {key: round(t, 3) for key, t in by_key.items()} for m, by_key in by_m.items()}
             for k, by_m in screen.items()}
    return {"precompile_s": round(precompile_s, 1), "screen_s": round(screen_s, 1), "screen": times,
            "screens_held_again": bench.held_again, "space": len(space), "per_m": rows,
            "worst_ratio": max(row["ratio"] for row in rows.values())}


# ------------------------------------------------------------------------------------------------ sglang's method


class FusedMoe:
    """The fused MoE as SGLang's tuner times it: up GEMM, SiLU-and-mul, down GEMM, one routing for both, through the
    release's invoke_fused_moe_kernel (for its tuner, one config for both GEMMs: override_config; sglang 0.5.23
    try_get_optimal_moe_config). ``layers`` > 1: each layer its own weights, as a server's decode graph."""

    def __init__(self, bench, m: int, layers: int = 1) -> None:
        import torch
        self.torch, self.bench, self.m = torch, bench, m
        self.up, self.down = bench.problem("up"), bench.problem("down")
        self.down.routings = self.up.routings  # the down GEMM reads the up GEMM's sort
        self.down._aligned.clear()
        shape = bench.job["shape"]
        self.weights = [(self.up.weights[0], self.down.weights[0])]
        for _ in range(layers - 1):
            self.weights.append((torch.randn_like(self.up.weights[0]) * 0.05,
                                 torch.randn_like(self.down.weights[0]) * 0.05))
        self.mid = torch.empty(m * shape["topk"], shape["N"], device="cuda", dtype=self.up.dtype)

    def run(self, up_config: dict, down_config: dict, layer: int = 0) -> None:
        release, torch = self.bench.release, self.torch
        w1, w2 = self.weights[layer]
        routing = layer % len(self.up.routings[self.m])
        out = release.launch(self.up, self.m, up_config, routing, 0, inputs=(self.up.inputs[self.m], w1))
        n = out.shape[-1] // 2
        torch.mul(torch.nn.functional.silu(out[:, :n]), out[:, n:], out=self.mid)
        release.launch(self.down, self.m, down_config, routing, 0, inputs=(self.mid, w2))


def sglang_benchmark_config(moe: FusedMoe, config: dict, num_iters: int = 10) -> float:
    """benchmark_config's timing: graph of 10 runs, 5 warm-up replays, one L2 flush, ``num_iters`` timed replays;
    microseconds per fused MoE (tuning_fused_moe_triton.py, sglang commit 00e96592)."""
    torch = moe.torch
    moe.run(config, config)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(10):
            moe.run(config, config)
    torch.cuda.synchronize()
    for _ in range(5):
        graph.replay()
    torch.cuda.synchronize()
    flush = torch.empty(int(256e6 // 4), dtype=torch.int, device="cuda")
    flush.zero_()
    return sum(moe_engine.replay_times(torch, graph, num_iters)) / (num_iters * 10)


def run_sglang(args, name: str, shape: dict, sizes: list[int]) -> dict:
    """SGLang's method's wall time on a sample (fresh Triton cache, so every config compiles in the tuning process
    as on a fresh host), extrapolated; then its picks over the whole space at the server Ms."""
    fresh = tempfile.mkdtemp(prefix="sglang-method-cache-")
    os.environ["TRITON_CACHE_DIR"] = fresh
    job = moe_engine.validate_job({"shape": shape, "batch_sizes": sizes, "configs": [{}], "work_dir": args.work,
                                   "output": "-", "model_path": MODEL_DIR})
    bench = moe_engine.TritonBench(job)
    space = search_space(bench.device["smem_per_block_optin"])
    sample = random.Random(args.seed).sample(space, args.sample)
    per_m = {}
    moes = {m: FusedMoe(bench, m) for m in sorted(set(args.sglang_ms) | set(args.server_ms))}
    for m in args.sglang_ms:  # one tuning worker doing its batch sizes in turn, as on a one-GPU host
        start = time.time()
        for config in sample:
            try:
                sglang_benchmark_config(moes[m], config)
            except Exception:  # noqa: BLE001 - the tuner skips OutOfResources/RuntimeError configs
                pass
        per_m[str(m)] = (time.time() - start) / len(sample)
    # Measured at every batch size: the sample's cost scaled to the space. Else the first batch size compiles every
    # config and later ones reuse the process's kernels where the specialisation matches: every other batch size is
    # charged the mean of the later measured ones.
    first, *later = [per_m[str(m)] for m in args.sglang_ms]
    if sorted(args.sglang_ms) == sorted(sizes):
        tuner_s = len(space) * sum(per_m.values())
    else:
        tuner_s = len(space) * (first + (len(sizes) - 1) * statistics.mean(later or [first]))
    os.environ["TRITON_CACHE_DIR"] = os.path.join(args.work, name, "triton-cache")
    picks = {}
    for m in args.server_ms:
        start, times = time.time(), {}
        for config in space:
            try:
                times[moe_engine.config_key(config)] = sglang_benchmark_config(moes[m], config)
            except Exception:  # noqa: BLE001
                continue
        best = min(times, key=times.get)
        picks[str(m)] = {"pick": best, "us": times[best], "configs": len(times), "timing_s": time.time() - start}
    return {"sample": args.sample, "space": len(space), "seconds_per_config": per_m, "batch_sizes": len(sizes),
            "tuner_wall_s_extrapolated": round(tuner_s, 1), "picks": picks}


def run_server(args, name: str, shape: dict, sizes: list[int], engine: dict, sglang: dict) -> dict:
    """Per-layer time of a CUDA graph of ``layers`` MoE layers (own weights and routing each)."""
    job, bench = bench_for(args, name, shape, sizes)
    torch = bench.torch
    space = {moe_engine.config_key(c): moe_engine.full_config(c) for c in search_space(smem_limit())}
    rows = {}
    for m in args.server_ms:
        moe = FusedMoe(bench, m, layers=args.layers)
        pick = engine["per_m"][str(m)]["pick"]
        sg = sglang["picks"][str(m)]["pick"]
        default_up = bench.release.default_config(m, shape, "up")
        pairs = {"engine": (space.get(pick["up"]) or default_up, space.get(pick["down"]) or default_up),
                 "sglang_method": (space[sg], space[sg]), "default": (default_up, default_up)}
        samples = {label: [] for label in pairs}
        graphs = {}
        for label, (up, down) in pairs.items():
            for layer in range(args.layers):
                moe.run(up, down, layer)
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph):
                for layer in range(args.layers):
                    moe.run(up, down, layer)
            graphs[label] = graph
        for _ in range(args.final_reps):
            for label, graph in graphs.items():
                begin, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                begin.record()
                graph.replay()
                end.record()
                torch.cuda.synchronize()
                samples[label].append(begin.elapsed_time(end) * 1000 / args.layers)
        rows[str(m)] = {label: statistics.median(v) for label, v in samples.items()}
        rows[str(m)]["pairs"] = {label: [moe_engine.config_key(p[0]), moe_engine.config_key(p[1])]
                                 for label, p in pairs.items()}
    return rows


# ------------------------------------------------------------------------------------------------ lookup


def run_lookup(args, name: str, shape: dict, sizes: list[int], engine: dict) -> dict:
    """The engine's files as the release reads them, through its own try_get_optimal_moe_config."""
    job, bench = bench_for(args, name, shape, sizes)
    config = bench.release.config
    import triton
    root = tempfile.mkdtemp(prefix="moe-config-dir-")
    version_dir = os.path.join(root, "configs", "triton_" + triton.__version__.replace(".", "_"))
    os.makedirs(version_dir)
    os.environ["SGLANG_MOE_CONFIG_DIR"] = root
    w1 = (shape["E"], 2 * shape["N"], shape["hidden"])
    w2 = (shape["E"], shape["hidden"], shape["N"])

    def lookup() -> dict:
        config.get_moe_configs.cache_clear()
        out = {}
        for m in sizes:
            up, (down, _) = config.try_get_optimal_moe_config(w1, w2, shape["topk"], None, m,
                                                              return_down_config=True)
            out[str(m)] = {"up": moe_engine.config_key(up), "down": down and moe_engine.config_key(down)}
        return out

    without = lookup()
    for kernel, file in engine["files"].items():
        moe_engine.write_json_atomically(os.path.join(version_dir, file["name"]), file["configs"])
    with_files = lookup()
    expected = {str(m): engine["per_m"][str(m)]["pick"] for m in sizes}
    loads = all(with_files[m]["up"] == expected[m]["up"] and with_files[m]["down"] == expected[m]["down"]
                for m in with_files)
    return {"files": {k: f["name"] for k, f in engine["files"].items()}, "config_dir": version_dir,
            "without_files": without, "with_files": with_files, "loads_ours": loads}


# ------------------------------------------------------------------------------------------------ report


def summary(device: str, name: str, phases: dict) -> str:
    engine, exhaustive, sglang = phases["engine"], phases.get("exhaustive"), phases.get("sglang")
    shape = engine["shape"]
    worst = f"{max(0.0, exhaustive['worst_ratio'] - 1) * 100:.1f}%" if exhaustive else "n/a"
    ratio = f"{sglang['tuner_wall_s_extrapolated'] / engine['wall_s']:.0f}x" if sglang else "n/a"
    loads = phases.get("lookup", {}).get("loads_ours")
    return (f"moe engine on {device}: E={shape['E']} N={shape['N']} bf16 up+down, {len(engine['batch_sizes'])} "
            f"batch sizes in {engine['gpu_minutes']:.1f} GPU-min; worst batch size within {worst} of exhaustive; "
            f"{ratio} less wall time than SGLang's tuner; SGLang's lookup loads ours: "
            f"{'yes' if loads else 'no' if loads is False else 'n/a'}")


def report(args) -> int:
    shapes = {}
    for file in sorted(os.listdir(args.report)):
        if file.endswith(".json") and "-" in file:
            name, phase = file[:-5].rsplit("-", 1)
            with open(os.path.join(args.report, file), encoding="utf-8") as handle:
                shapes.setdefault(name, {})[phase] = json.load(handle)
    if not shapes:
        print(f"no phase files in {args.report}", file=sys.stderr)
        return 1
    lines = {name: summary(p["engine"]["device"]["name"], name, p) for name, p in shapes.items() if "engine" in p}
    first = "qwen35-122b-tp4" if "qwen35-122b-tp4" in lines else sorted(lines)[0]
    for phases in shapes.values():  # the exhaustive screen times stay in the phase files (offline replays), not here
        phases.get("exhaustive", {}).pop("screen", None)
    data = {"date": time.strftime("%Y-%m-%d"), "commands": {name: RUN_COMMANDS.get(name) for name in shapes},
            "shapes": shapes, "summaries": lines, "summary": lines[first]}
    os.makedirs(os.path.dirname(RESULTS), exist_ok=True)
    moe_engine.write_json_atomically(RESULTS, data)
    for name, line in lines.items():
        if name != first:
            print(line)
    print(lines[first])
    return 0


# Staging policies replayed against an exhaustive phase's screen times (--replay): the engine's default first.
REPLAY_POLICIES = {
    "default": {},
    "fewer leaders": {"lead_share": 0.04, "lead_min": 8, "lead_per_block_m": 2},
    "no climb": {"climbs": 0},
    "fewer leaders, no climb": {"lead_share": 0.04, "lead_min": 8, "lead_per_block_m": 2, "climbs": 0},
}


def replay_stages(screen: dict[int, dict[str, float]], groups: list[list[int]], timing: dict) -> tuple[int, float]:
    """What the engine's staging (stage_plan, stage_keys) compiles with ``timing`` when every screen time is the
    exhaustive phase's: (compiles, worst gap at any M between the best it screened and the best of all)."""
    keys = set().union(*screen.values())
    configs = {key: moe_engine.full_config(dict(zip(moe_engine.CONFIG_KEYS, (int(part[1:]) for part in key.split("_")))))
               for key in keys}
    seen: dict[str, dict[int, float]] = {}
    compiles = 0
    for stage in moe_engine.stage_plan(sorted(screen), groups, True, timing["climbs"]):
        chosen = [key for key in moe_engine.stage_keys(stage, configs, seen, timing)
                  if not all(m in seen.get(key, {}) for m in stage["sizes"])]
        compiles += len(chosen)
        for key in chosen:
            seen[key] = {**seen.get(key, {}), **{m: screen[m][key] for m in stage["sizes"] if key in screen[m]}}
    worst = max(min(t[m] for t in seen.values() if m in t) / min(screen[m].values()) - 1 for m in screen)
    return compiles, worst


def replay(directory: str) -> int:
    """Each shape's exhaustive screen (phase files of --phases=engine,exhaustive) through REPLAY_POLICIES."""
    for file in sorted(os.listdir(directory)):
        if not file.endswith("-exhaustive.json"):
            continue
        name = file[:-len("-exhaustive.json")]
        with open(os.path.join(directory, file), encoding="utf-8") as handle:
            exhaustive = json.load(handle)
        with open(os.path.join(directory, f"{name}-engine.json"), encoding="utf-8") as handle:
            groups = json.load(handle)["stats"]["batch_size_groups"]
        if "screen" not in exhaustive:
            continue
        for policy, changes in REPLAY_POLICIES.items():
            timing = {**moe_engine.DEFAULT_TIMING, **changes}
            rows = []
            for kernel, by_m in exhaustive["screen"].items():
                compiles, worst = replay_stages({int(m): t for m, t in by_m.items()}, groups[kernel], timing)
                rows.append(f"{kernel} {compiles} compiles, worst {worst * 100:.2f}%")
            print(f"[{name}] {policy}: " + "; ".join(rows))
    return 0


def without_phases(argv: list[str]) -> list[str]:
    out, skip = [], False
    for arg in argv:
        if skip or arg.startswith("--phases="):
            skip = False
            continue
        skip = arg == "--phases"
        if not skip:
            out.append(arg)
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--shape", default="qwen35-122b-tp4", choices=[*SHAPES, "custom"])
    for flag in ("experts", "topk", "hidden", "intermediate", "tp"):
        parser.add_argument(f"--{flag}", type=int)
    parser.add_argument("--phases", default="engine,exhaustive,lookup")
    parser.add_argument("--batch-sizes", type=lambda v: [int(x) for x in v.split(",")],
                        default=list(DEFAULT_BATCH_SIZES))
    parser.add_argument("--gpus", type=int, default=1, help="GPUs of this host the engine times on (0 .. N-1)")
    parser.add_argument("--workers", type=int, default=max(1, (os.cpu_count() or 2) - 1))
    parser.add_argument("--deadline", type=float, default=900)
    parser.add_argument("--start-method", choices=moe_engine.START_METHODS, default="forkserver",
                        help="how the engine's workers start (its job's start_method)")
    parser.add_argument("--final-reps", type=int, default=20)
    parser.add_argument("--sample", type=int, default=32)
    parser.add_argument("--sglang-ms", type=lambda v: [int(x) for x in v.split(",")], default=list(DEFAULT_BATCH_SIZES))
    parser.add_argument("--server-ms", type=lambda v: [int(x) for x in v.split(",")], default=[1, 16])
    parser.add_argument("--layers", type=int, default=8)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--budget", type=float, default=3600, help="seconds for all phases (the call's limit)")
    parser.add_argument("--configs", type=int, default=0, help="a random subset of this many configs (0: all)")
    parser.add_argument("--space", choices=["pruned", "prefiltered"], default="pruned")
    parser.add_argument("--work", default=os.path.join(ROOT, ".cache", "moe-engine-gpu-work"))
    parser.add_argument("--out", default=os.environ.get("OUT", os.path.join(ROOT, ".cache", "moe-engine-gpu")))
    parser.add_argument("--report", help="merge the phase files of this directory into " + RESULTS)
    parser.add_argument("--replay", help="replay staging policies on this directory's exhaustive screen times")
    args = parser.parse_args()
    if args.report:
        return report(args)
    if args.replay:
        return replay(args.replay)
    SUBSET.update(size=args.configs, seed=args.seed, space=args.space)
    if args.shape == "custom":
        spec = {"model": "custom", "E": args.experts, "topk": args.topk, "hidden": args.hidden,
                "intermediate": args.intermediate, "tp": args.tp or 1}
        if None in spec.values():
            parser.error("--shape custom needs --experts --topk --hidden --intermediate (and --tp)")
    else:
        spec = SHAPES[args.shape]
    name, shape = args.shape, engine_shape(spec)
    phases = args.phases.split(",")
    if len(phases) > 1:  # each phase in a fresh process: Triton's in-memory kernel cache must not carry over
        deadline = time.time() + args.budget
        for phase in phases:
            try:
                code = subprocess.call([sys.executable, os.path.abspath(__file__), *without_phases(sys.argv[1:]),
                                        f"--phases={phase}"], timeout=max(1.0, deadline - time.time()))
            except subprocess.TimeoutExpired:
                print(f"[{args.shape}] {phase}: stopped at the --budget of {args.budget:.0f} s", flush=True)
                return 1
            if code:
                return code
        return 0
    loaded = {}
    for phase in ("engine", "sglang"):  # earlier calls' phases: kept in the work dir (the out dir is per call)
        path = os.path.join(args.work, f"{name}-{phase}.json")
        if os.path.exists(path):
            with open(path, encoding="utf-8") as handle:
                loaded[phase] = json.load(handle)
    runners = {
        "engine": lambda: run_engine(args, name, shape, args.batch_sizes),
        "exhaustive": lambda: run_exhaustive(args, name, shape, args.batch_sizes, loaded["engine"]),
        "sglang": lambda: run_sglang(args, name, shape, args.batch_sizes),
        "server": lambda: run_server(args, name, shape, args.batch_sizes, loaded["engine"], loaded["sglang"]),
        "lookup": lambda: run_lookup(args, name, shape, args.batch_sizes, loaded["engine"]),
    }
    for phase in phases:
        start = time.time()
        result = runners[phase]()
        result["phase_wall_s"] = round(time.time() - start, 1)
        result["spec"] = spec
        loaded[phase] = result
        write(args.out, f"{name}-{phase}.json", result)
        write(args.work, f"{name}-{phase}.json", result)
        print(f"[{name}] {phase}: {time.time() - start:.0f} s", flush=True)
    if "engine" in loaded:
        print(summary(loaded["engine"]["device"]["name"], name, loaded))
    return 0


if __name__ == "__main__":
    sys.exit(main())
