#!/usr/bin/env python3
# Copyright (c) llmops.sglang contributors
# Apache License 2.0 (see LICENSE)
"""Client benchmark (issue #6, deliverable 3): our streaming client vs SGLang's bench_serving, one core each.

Run from the repository root with the project venv: ``.venv/bin/python benchmarks/client_throughput.py [--quick]``.
What it measures and why it is measured that way: benchmarks/README.md. In short:

1. installs SGLang's bench_serving into its own venv (.cache/bench-serving-venv, stamp file, idempotent);
2. starts the SGLang emulator on 127.0.0.1 with benchmarks/profiles/zero_cost.yaml, pinned to core 1, with
   ``--log-requests`` (per-request arrival, finish and completion tokens: the server-side ground truth) and
   ``--enable-metrics`` (the scheduler's generated-token counter, which must equal the logged tokens);
3. runs our client (``bench_client.run_sweep``, what the ``bench`` module runs), bench_serving (through
   ``bench_serving.run_bench_serving_sweep``, the module's ``sglang_bench_serving`` engine) and the floor (a bare
   epoll reader: the least CPU per token a Python client can spend, see ``floor_worker``) pinned to core 0 at
   C=64 and C=256 with the same workload, alternating between them, recording each timed run's client CPU seconds;
4. restarts the emulator with benchmarks/profiles/offered_load.yaml (a model-paced 25,000 tok/s at C=256) and runs
   our client against it: the bottleneck check;
5. prints the table, the ratios ours/theirs and PASS/FAIL per target; exit code 0 only if every target passes.

Every process it starts is stopped before it exits (also on Ctrl-C or SIGTERM); it writes only under .cache/.
"""
from __future__ import annotations

import argparse
import contextlib
import dataclasses
import datetime
import gc
import hashlib
import json
import os
import re
import select
import signal
import socket
import statistics
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
BENCHMARKS = ROOT / "benchmarks"
CACHE = ROOT / ".cache"
WORK = CACHE / "client-bench"
VENV = CACHE / "bench-serving-venv"
REQUIREMENTS = BENCHMARKS / "requirements-bench-serving.txt"
PROFILE = BENCHMARKS / "profiles" / "zero_cost.yaml"
OFFERED_LOAD_PROFILE = BENCHMARKS / "profiles" / "offered_load.yaml"
PROBE = BENCHMARKS / "bench_serving_probe.py"
EMULATOR = ROOT / "tests" / "emulator"
MODEL = "tests/emulator/models/Qwen3.5-122B-A10B"  # relative to ROOT: also the served model name
SGLANG_VERSION = "0.5.11"  # what the emulator claims to be
CLIENT_CORE, SERVER_CORE = 0, 1
READ_BYTES = 2**20  # the floor reader's recv size: larger than anything that piles up between two reads
CONCURRENCY_LEVELS = (64, 256)
# The clients measured, by their key in results.json: ours, SGLang's, and the floor (see floor_worker).
ENGINES = {"ours": "ours", "theirs": "bench_serving", "floor": "floor (bare epoll reader)"}
READY = "The server is fired up and ready to roll!"

# Targets (issue #6): CPU per token at most half of bench_serving's; measured throughput within 1 % of the server's;
# at C=256 the client is not the bottleneck: against a server whose model paces it (offered_load.yaml), the client
# keeps the server busy (>= 97 % of C running on average, from the scheduler's own log), sees its throughput within
# 1 % and leaves its core at least 20 % idle.
CPU_RATIO_TARGET = 0.5
ACCURACY_TARGET_PCT = 1.0
CLIENT_CPU_MAX_PCT = 80.0
BOTTLENECK_CONCURRENCY = 256
RUNNING_MIN_SHARE = 0.97

LOG_TIME = r"^\[(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{3})\] "
RECEIVE = re.compile(LOG_TIME + r"Receive: obj=GenerateReqInput\(rid='([^']+)'", re.M)
FINISH = re.compile(LOG_TIME + r"Finish: obj=GenerateReqInput\(rid='([^']+)'\), out=\{'meta_info': \{"
                    r"'prompt_tokens': \d+, 'completion_tokens': (\d+)", re.M)
DECODE = re.compile(r"^\[(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{3}) TP0\] Decode batch\. #running-req: (\d+),", re.M)
GENERATED_COUNTER = re.compile(r"^sglang:generation_tokens_total\{[^}]*\} ([0-9.e+]+)$", re.M)


@dataclass(frozen=True)
class Workload:
    """The same fixed-length workload for both clients: C in flight, N timed requests per run, R runs."""

    input_len: int
    output_len: int
    repeats: int
    requests_per_concurrency: int  # N = this x C, at least min_requests
    min_requests: int = 0

    def requests(self, concurrency: int) -> int:
        return max(self.requests_per_concurrency * concurrency, self.min_requests)


# Full runs last seconds (C=64) to tens of seconds (C=256), so the few milliseconds by which a client's clock window
# must stick out of the server's (connecting before the first arrival, reading after the last finish) stay < 0.5 %.
FULL = Workload(input_len=128, output_len=512, repeats=3, requests_per_concurrency=4, min_requests=512)
QUICK = Workload(input_len=128, output_len=256, repeats=1, requests_per_concurrency=1)


def say(message: str) -> None:
    print(f"[{datetime.datetime.now():%H:%M:%S}] {message}", flush=True)


def pinned(core: int):
    """preexec_fn: run the child on one core."""
    return lambda: os.sched_setaffinity(0, {core})


def quiet_env() -> dict[str, str]:
    """Environment for the benchmark's children: caches inside .cache/, no hub access, no proxies."""
    env = {key: value for key, value in os.environ.items() if not key.lower().endswith("_proxy")}
    env.update(HF_HOME=str(WORK / "hf"), HF_HUB_OFFLINE="1", XDG_CACHE_HOME=str(WORK / "xdg"),
               TRITON_CACHE_DIR=str(WORK / "triton"), TORCHINDUCTOR_CACHE_DIR=str(WORK / "torchinductor"),
               PYTHONUNBUFFERED="1", PIP_NO_CACHE_DIR="1",
               PIP_DISABLE_PIP_VERSION_CHECK="1")
    return env


# --- 1. bench_serving's venv --------------------------------------------------------------------------------------

def ensure_bench_serving_venv() -> dict:
    """Create .cache/bench-serving-venv once per requirements+version; return what it holds (pip freeze)."""
    digest = hashlib.sha256(REQUIREMENTS.read_bytes() + SGLANG_VERSION.encode()).hexdigest()[:16]
    stamp = VENV / f".installed-{digest}.json"
    if stamp.exists():
        say(f"bench_serving venv is up to date ({VENV.relative_to(ROOT)})")
        return json.loads(stamp.read_text())
    python = VENV / "bin" / "python"
    env = quiet_env()
    steps = [
        ([sys.executable, "-m", "venv", "--clear", str(VENV)], "create the venv"),
        ([str(python), "-m", "pip", "install", "--progress-bar", "off", "-r", str(REQUIREMENTS)],
         f"install what bench_serving imports ({REQUIREMENTS.name}; several GB with torch's CUDA wheels)"),
        ([str(python), "-m", "pip", "install", "--no-deps", f"sglang=={SGLANG_VERSION}"], "install sglang --no-deps"),
    ]
    for argv, what in steps:
        say(f"bench_serving venv: {what} ...")
        started = time.monotonic()
        subprocess.run(argv, check=True, env=env)
        say(f"bench_serving venv: {what}: done in {time.monotonic() - started:.0f} s")
    freeze = subprocess.run([str(python), "-m", "pip", "freeze"], check=True, capture_output=True, text=True,
                            env=env).stdout.split()
    installed = {"python": subprocess.run([str(python), "-c", "import sys; print(sys.version.split()[0])"],
                                          check=True, capture_output=True, text=True).stdout.strip(),
                 "freeze": freeze}
    for old in VENV.glob(".installed-*.json"):
        old.unlink()
    stamp.write_text(json.dumps(installed, indent=1))
    return installed


def write_tokenizer(directory: Path) -> Path:
    """A local tokenizer for bench_serving (the emulator's model dir has none and the hub is out of reach).

    Word-level over the 17,576 three-letter words: a decoded token is 3 letters plus a space, exactly the emulator's
    4 characters per text token, so bench_serving's random-ids prompts of L tokens reach the server as L tokens —
    the length our client sends as token ids.
    """
    letters = "abcdefghijklmnopqrstuvwxyz"
    vocab = {a + b + c: index for index, (a, b, c) in
             enumerate((a, b, c) for a in letters for b in letters for c in letters)}
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "tokenizer.json").write_text(json.dumps({
        "version": "1.0", "truncation": None, "padding": None, "added_tokens": [], "normalizer": None,
        "pre_tokenizer": {"type": "WhitespaceSplit"}, "post_processor": None, "decoder": None,
        "model": {"type": "WordLevel", "vocab": vocab, "unk_token": "zzz"},
    }))
    (directory / "tokenizer_config.json").write_text(json.dumps(
        {"tokenizer_class": "PreTrainedTokenizerFast", "unk_token": "zzz", "model_max_length": 1_000_000}))
    return directory


# --- 2. the emulator and its ground truth -------------------------------------------------------------------------

def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def schedstat_s(pid: int | str) -> tuple[float, float]:
    """(seconds on a core, seconds runnable but waiting for one) of a process, from /proc/PID/schedstat."""
    on_cpu, waiting = Path(f"/proc/{pid}/schedstat").read_text().split()[:2]
    return int(on_cpu) / 1e9, int(waiting) / 1e9


class SchedSampler(threading.Thread):
    """Samples the server's schedstat every 0.1 s, to read how busy it was over any server-side window.

    Other work on this machine can take the server's core away, so "busy" counts run-queue waiting too: the share of
    the window in which the server had work to do (its demand for its core), not only the share it got.
    """

    def __init__(self, pid: int) -> None:
        super().__init__(daemon=True)
        self.pid = pid
        self.samples: list[tuple[float, float, float]] = []
        self.stopped = threading.Event()

    def run(self) -> None:
        while not self.stopped.wait(0.1):
            try:
                self.samples.append((time.time(), *schedstat_s(self.pid)))
            except OSError:
                return

    def demand_pct(self, start: float, end: float) -> float | None:
        inside = [sample for sample in self.samples if start <= sample[0] <= end]
        if len(inside) < 2:
            return None
        (t0, cpu0, wait0), (t1, cpu1, wait1) = inside[0], inside[-1]
        return (cpu1 - cpu0 + wait1 - wait0) / (t1 - t0) * 100.0


@dataclass
class Emulator:
    """The emulated SGLang server process, its log (request records) and its CPU samples."""

    process: subprocess.Popen
    port: int
    log_path: Path
    sampler: SchedSampler
    max_running_requests: int = 0

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def log_size(self) -> int:
        return self.log_path.stat().st_size

    def log_since(self, offset: int) -> str:
        with open(self.log_path, "rb") as log:
            log.seek(offset)
            return log.read().decode("utf-8", "replace")

    def mean_running(self, start: float, end: float) -> float | None:
        """Mean #running-req of the scheduler's decode log lines (one per 40 steps) between start and end."""
        running = [int(count) for stamp, count in DECODE.findall(self.log_since(0))
                   if start <= _log_seconds(stamp) <= end]
        return statistics.fmean(running) if running else None

    def generated_tokens(self) -> int:
        """The scheduler's own count of generated tokens (/metrics, sglang:generation_tokens_total)."""
        with urllib.request.build_opener(urllib.request.ProxyHandler({})).open(self.url + "/metrics", timeout=10) as r:
            return int(float(GENERATED_COUNTER.search(r.read().decode()).group(1)))


@contextlib.contextmanager
def running_emulator(profile: Path, max_concurrency: int) -> Iterator[Emulator]:
    """The emulator with ``profile`` on the server core for the duration of the block; stopped however it ends."""
    emulator = start_emulator(profile, max_concurrency)
    try:
        yield emulator
    finally:
        emulator.sampler.stopped.set()
        stop(emulator.process)


def start_emulator(profile: Path, max_concurrency: int) -> Emulator:
    port = free_port()
    log_path = WORK / f"server-{profile.stem}.log"
    env = quiet_env()
    env.update(PYTHONPATH=f"{EMULATOR / 'sglang'}:{EMULATOR / 'triton'}", SGLANG_EMULATOR_PROFILE=str(profile),
               SGLANG_EMULATOR_STATE_DIR=str(WORK / "state"), SGLANG_LOG_MS="1")
    env.pop("SGLANG_MOE_CONFIG_DIR", None)
    argv = [sys.executable, "-m", "sglang.launch_server", "--model-path", MODEL, "--tp", "4", "--host", "127.0.0.1",
            "--port", str(port), "--max-running-requests", str(2 * max_concurrency), "--enable-metrics",
            "--log-requests"]
    with open(log_path, "wb") as log:
        process = subprocess.Popen(argv, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT,
                                   preexec_fn=pinned(SERVER_CORE))
    emulator = Emulator(process, port, log_path, SchedSampler(process.pid))
    deadline = time.monotonic() + 60
    while READY not in log_path.read_text(errors="replace"):
        if process.poll() is not None or time.monotonic() > deadline:
            stop(process)
            raise SystemExit(f"the emulator did not start; see {log_path}")
        time.sleep(0.05)
    running = re.search(r"max_running_requests=(\d+)", log_path.read_text(errors="replace"))
    emulator.max_running_requests = int(running.group(1))
    if emulator.max_running_requests < max_concurrency:
        stop(process)
        raise SystemExit(f"the emulator runs at most {emulator.max_running_requests} requests, "
                         f"below C={max_concurrency}")
    emulator.sampler.start()
    say(f"emulator ({profile.name}) pid {process.pid} on core {SERVER_CORE}, {emulator.url}, max_running_requests="
        f"{emulator.max_running_requests}, log {log_path.relative_to(ROOT)}")
    return emulator


def stop(process: subprocess.Popen, timeout_s: float = 10.0) -> None:
    """SIGTERM the process we started (by its pid), SIGKILL if it does not exit within ``timeout_s``."""
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout_s)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def _log_seconds(stamp: str) -> float:
    return datetime.datetime.strptime(stamp, "%Y-%m-%d %H:%M:%S.%f").timestamp()


def server_requests(log_text: str) -> list[dict]:
    """Finished requests from the server's request log, in arrival order: arrival, finish (s), completion tokens."""
    arrivals = {rid: _log_seconds(stamp) for stamp, rid in RECEIVE.findall(log_text)}
    finished = [{"rid": rid, "arrival": arrivals[rid], "finish": _log_seconds(stamp), "tokens": int(tokens)}
                for stamp, rid, tokens in FINISH.findall(log_text) if rid in arrivals]
    return sorted(finished, key=lambda request: request["arrival"])


def ground_truth(requests: list[dict]) -> dict:
    """Server-side throughput of one timed run: its tokens over first arrival .. last finish, as the server saw it."""
    start, end = min(r["arrival"] for r in requests), max(r["finish"] for r in requests)
    tokens = sum(r["tokens"] for r in requests)
    return {"requests": len(requests), "tokens": tokens, "start": start, "end": end, "window_s": end - start,
            "tok_s": tokens / (end - start)}


def check_log_complete(emulator: Emulator, requests: list[dict], counter_before: int) -> dict:
    """The request log must account for every token the scheduler generated meanwhile (else it is no ground truth)."""
    counted = emulator.generated_tokens() - counter_before
    logged = sum(r["tokens"] for r in requests)
    if counted != logged:
        raise SystemExit(f"server log lists {logged} generated tokens, /metrics counted {counted}: no ground truth")
    return {"metrics_generated_tokens": counted, "logged_tokens": logged}


# --- 3. the two clients -------------------------------------------------------------------------------------------

def bench_config(url: str, concurrency: int, workload: Workload, *, warmup: int, repeats: int,
                 requests: int | None = None):
    """The BenchConfig both engines get (imported lazily: the worker's sys.path reaches the collection)."""
    from ansible_collections.llmops.sglang.plugins.module_utils._bench_config import BenchConfig
    return BenchConfig(base_url=url, endpoint="completions", model=MODEL, concurrency_levels=(concurrency,),
                       requests_per_level=requests or workload.requests(concurrency), warmup_requests=warmup,
                       repeats=repeats,
                       input_len=workload.input_len, output_len=workload.output_len, request_timeout_s=300.0,
                       level_timeout_s=1800.0)


def cpu_mark() -> dict:
    """This process's CPU seconds, seconds waiting for its core and the wall clock, to difference over a run."""
    return {"cpu_s": time.process_time(), "wait_s": schedstat_s("self")[1], "at": time.time()}


def ours_worker(params: dict) -> None:
    """Child process on the client core: a warm-up sweep (C requests), then one timed run with CPU marks.

    The timed sweep has no warm-up of its own, so its ``level_start`` event opens the run and ``run_done`` closes it:
    process_time() and /proc/self/schedstat between the two are this client's CPU and core waiting for that run.
    """
    from ansible_collections.llmops.sglang.plugins.module_utils._bench_session import client_versions
    from ansible_collections.llmops.sglang.plugins.module_utils.bench_client import run_sweep
    workload = Workload(**params["workload"])
    concurrency = params["concurrency"]
    warmup = run_sweep(bench_config(params["url"], concurrency, workload, warmup=0, repeats=1, requests=concurrency))
    if warmup["error"]:
        raise SystemExit(f"warm-up failed: {warmup['error']}")
    gc.collect()  # so the sweep's own collection before its timed run finds nothing left to do
    marks: list[dict] = []

    def on_progress(event: dict) -> None:
        if event["event"] in ("level_start", "run_done"):
            marks.append(cpu_mark())

    sweep = run_sweep(bench_config(params["url"], concurrency, workload, warmup=0, repeats=1), on_progress)
    if sweep["error"]:
        raise SystemExit(f"sweep failed: {sweep['error']}")
    run, (start, end) = sweep["levels"][0]["runs"][0], marks
    print(json.dumps({"tokens": run["tokens"], "wall_s": run["wall_s"], "agg_tok_s": run["agg_tok_s"],
                      "failed": run["failed"], "cpu_s": end["cpu_s"] - start["cpu_s"],
                      "wait_s": end["wait_s"] - start["wait_s"], "self_reported_cpu_pct": run["client_cpu_pct"],
                      "client_start": start["at"], "client_end": end["at"], "client": client_versions()}))


def floor_worker(params: dict) -> None:
    """Child process on the client core: the least work a client can do per token, as the floor for any client.

    Stdlib sockets and one epoll loop, no HTTP library, no SSE or JSON parsing: it sends our client's requests on C
    keep-alive connections (C warm-up requests, then the timed N) and per read only takes the time and counts the
    SSE events read (bytes.count, C code). A client that times every token must at least wake up, read and take the
    time once per event the server sends on its own, so no Python client that does so can spend much less per token.
    """
    from ansible_collections.llmops.sglang.plugins.module_utils._bench_requests import request_body, token_id_prompt
    workload = Workload(**params["workload"])
    concurrency, host, port = params["concurrency"], "127.0.0.1", int(params["url"].rsplit(":", 1)[1])

    def raw_request(seed: int) -> bytes:
        body = json.dumps(request_body("completions", MODEL, token_id_prompt(workload.input_len, seed),
                                       workload.output_len)).encode()
        head = (f"POST /v1/completions HTTP/1.1\r\nHost: {host}:{port}\r\nContent-Type: application/json\r\n"
                f"Content-Length: {len(body)}\r\n\r\n")
        return head.encode() + body

    connections = [socket.create_connection((host, port)) for _slot in range(concurrency)]
    poller = select.epoll()
    for connection in connections:
        poller.register(connection.fileno(), select.EPOLLIN)
    by_fd = {connection.fileno(): connection for connection in connections}

    def run(requests: int, first_seed: int) -> tuple[int, list[float]]:
        """Keep C requests in flight until ``requests`` are done; return the SSE events read and the read times."""
        bodies = iter(raw_request(first_seed + index) for index in range(requests))
        tails, events, read_times = {}, 0, []
        for connection in connections[:requests]:
            connection.sendall(next(bodies))
            tails[connection.fileno()] = b""
        while tails:
            for fd, _mask in poller.poll():
                data = by_fd[fd].recv(READ_BYTES)
                read_times.append(time.perf_counter())
                if not data:
                    raise SystemExit("the server closed a connection mid-response")
                events += data.count(b"data:")
                tail = (tails[fd] + data)[-5:]
                if tail != b"0\r\n\r\n":  # the end of a chunked response body
                    tails[fd] = tail
                elif (body := next(bodies, None)) is not None:
                    by_fd[fd].sendall(body)
                    tails[fd] = b""
                else:
                    del tails[fd]
        return events, read_times

    run(concurrency, 0)
    start = cpu_mark()
    wall_start = time.perf_counter()
    events, read_times = run(workload.requests(concurrency), concurrency)
    wall_s = time.perf_counter() - wall_start
    end = cpu_mark()
    for connection in connections:
        connection.close()
    tokens = workload.requests(concurrency) * workload.output_len  # ignore_eos: the server log checks it
    print(json.dumps({"tokens": tokens, "wall_s": wall_s, "agg_tok_s": tokens / wall_s, "failed": 0,
                      "cpu_s": end["cpu_s"] - start["cpu_s"], "wait_s": end["wait_s"] - start["wait_s"],
                      "events_per_read": events / len(read_times), "client_start": start["at"],
                      "client_end": end["at"]}))


def run_worker(kind: str, emulator: Emulator, concurrency: int, workload: Workload) -> tuple[dict, list[dict]]:
    """One timed run of a client worker (``ours`` or ``floor``) in a fresh child process on the client core;
    returns it and the server's records of its timed requests."""
    offset, counter = emulator.log_size(), emulator.generated_tokens()
    params = {"url": emulator.url, "concurrency": concurrency, "workload": workload.__dict__}
    done = subprocess.run([sys.executable, __file__, "--worker", kind, json.dumps(params)], cwd=ROOT,
                          env=quiet_env(), capture_output=True, text=True, preexec_fn=pinned(CLIENT_CORE), check=False)
    if done.returncode != 0:
        raise SystemExit(f"the {kind} client failed (rc={done.returncode}): {done.stderr[-2000:]}")
    requests = server_requests(emulator.log_since(offset))
    check_log_complete(emulator, requests, counter)
    return json.loads(done.stdout.strip().splitlines()[-1]), requests[concurrency:]  # warm-up requests come first


class ProbeRunner:
    """``run_command`` for run_bench_serving_sweep: bench_serving through the probe, on the client core.

    Keeps the probe's marks of the timed phase and the server's records of the timed requests (the last N: the
    invocation's warm-up requests arrive first).
    """

    def __init__(self, emulator: Emulator, tokenizer: Path, requests: int) -> None:
        self.emulator, self.tokenizer, self.requests = emulator, tokenizer, requests
        self.marks: dict = {}
        self.server_requests: list[dict] = []

    def __call__(self, argv: list[str], env: dict[str, str], timeout_s: float | None) -> tuple[int, str, str]:
        python, module_flag, module, *args = argv
        if (module_flag, module) != ("-m", "sglang.bench_serving"):
            raise ValueError(f"unexpected bench_serving command line: {argv}")
        marks_file = WORK / "bench_serving" / "marks.json"
        marks_file.unlink(missing_ok=True)
        offset, counter = self.emulator.log_size(), self.emulator.generated_tokens()
        probe_argv = [python, str(PROBE), str(marks_file), *args, "--tokenizer", str(self.tokenizer)]
        done = subprocess.run(probe_argv, cwd=WORK / "bench_serving", env={**quiet_env(), **env}, capture_output=True,
                              text=True, timeout=timeout_s, preexec_fn=pinned(CLIENT_CORE), check=False)
        if done.returncode == 0:
            self.marks = json.loads(marks_file.read_text())
            requests = server_requests(self.emulator.log_since(offset))
            check_log_complete(self.emulator, requests, counter)
            self.server_requests = requests[-self.requests:]
        return done.returncode, done.stdout, done.stderr


def run_theirs(emulator: Emulator, concurrency: int, workload: Workload, tokenizer: Path,
               seed: int) -> tuple[dict, list[dict]]:
    """One bench_serving run through the bench module's own engine code (its argv and JSONL mapping)."""
    from ansible_collections.llmops.sglang.plugins.module_utils.bench_serving import run_bench_serving_sweep
    (WORK / "bench_serving").mkdir(parents=True, exist_ok=True)
    runner = ProbeRunner(emulator, tokenizer, workload.requests(concurrency))
    config = dataclasses.replace(bench_config(emulator.url, concurrency, workload, warmup=concurrency, repeats=1),
                                 seed=seed)
    sweep = run_bench_serving_sweep(config, python=str(VENV / "bin" / "python"), workdir=WORK / "bench_serving",
                                    run_command=runner)
    if sweep["error"]:
        raise SystemExit(f"bench_serving failed: {sweep['error']}")
    run = sweep["levels"][0]["runs"][0]
    return ({"tokens": run["tokens"], "wall_s": run["wall_s"], "agg_tok_s": run["agg_tok_s"], "failed": run["failed"],
             "cpu_s": runner.marks["cpu_s"], "wait_s": runner.marks["wait_s"],
             "probe_wall_s": runner.marks["wall_s"]}, runner.server_requests)


# --- 4. results, table, targets -----------------------------------------------------------------------------------

def measured_run(run: dict, server_run: list[dict], emulator: Emulator) -> dict:
    truth = ground_truth(server_run)
    return {**run, "server": truth,
            "cpu_s_per_1k_tok": run["cpu_s"] / run["tokens"] * 1000.0,
            "client_cpu_pct": run["cpu_s"] / run["wall_s"] * 100.0,
            "client_demand_pct": (run["cpu_s"] + run["wait_s"]) / run["wall_s"] * 100.0,
            "server_demand_pct": emulator.sampler.demand_pct(truth["start"], truth["end"]),
            "server_running": emulator.mean_running(truth["start"], truth["end"]),
            "accuracy_pct": (run["agg_tok_s"] / truth["tok_s"] - 1.0) * 100.0,
            # How far our client's run sticks out of the server's window at each end (bench_serving has no marks).
            "lead_s": truth["start"] - run["client_start"] if "client_start" in run else None,
            "lag_s": run["client_end"] - truth["end"] if "client_end" in run else None}


def level_summary(runs: list[dict]) -> dict:
    """Medians over the runs of one engine at one concurrency, plus the worst accuracy and the CPU range."""
    def median(key: str) -> float | None:
        values = [run[key] for run in runs if run[key] is not None]
        return statistics.median(values) if values else None
    summary = {key: median(key) for key in ("agg_tok_s", "cpu_s_per_1k_tok", "accuracy_pct", "client_cpu_pct",
                                            "client_demand_pct", "server_demand_pct", "server_running")}
    summary["min_server_running"] = min((run["server_running"] for run in runs if run["server_running"] is not None),
                                        default=None)
    summary["server_tok_s"] = statistics.median(run["server"]["tok_s"] for run in runs)
    summary["worst_accuracy_pct"] = max((run["accuracy_pct"] for run in runs), key=abs)
    summary["cpu_s_per_1k_tok_range"] = [min(r["cpu_s_per_1k_tok"] for r in runs),
                                         max(r["cpu_s_per_1k_tok"] for r in runs)]
    return summary


def targets(levels: dict, offered: dict) -> list[tuple[str, bool, str]]:
    """(name, passed, evidence) per target, from the per-level summaries and the offered-load runs."""
    checks = []
    for concurrency, engines in levels.items():
        ours, theirs, floor = engines["ours"], engines["theirs"], engines["floor"]
        ratio = ours["cpu_s_per_1k_tok"] / theirs["cpu_s_per_1k_tok"]
        checks.append((f"C={concurrency}: CPU per token <= {CPU_RATIO_TARGET:g}x bench_serving's",
                       ratio <= CPU_RATIO_TARGET,
                       f"ours/theirs = {ratio:.2f} (medians); the floor, a bare epoll reader that only times each "
                       f"read, is at {floor['cpu_s_per_1k_tok'] / theirs['cpu_s_per_1k_tok']:.2f}x theirs"))
        checks.append((f"C={concurrency}: throughput within {ACCURACY_TARGET_PCT:g}% of the server's",
                       abs(ours["worst_accuracy_pct"]) <= ACCURACY_TARGET_PCT,
                       f"worst run {ours['worst_accuracy_pct']:+.2f}%, median {ours['accuracy_pct']:+.2f}%"))
    concurrency = BOTTLENECK_CONCURRENCY
    running, client_cpu = offered["min_server_running"] or 0.0, offered["client_cpu_pct"]
    checks.append((f"C={concurrency}: the client is not the bottleneck (offered {offered['offered_tok_s']:.0f} tok/s)",
                   running >= RUNNING_MIN_SHARE * concurrency and client_cpu < CLIENT_CPU_MAX_PCT
                   and abs(offered["worst_accuracy_pct"]) <= ACCURACY_TARGET_PCT,
                   f"the server always had {running:.0f} of {concurrency} requests running (worst run, >= "
                   f"{RUNNING_MIN_SHARE:.0%}), the client saw its {offered['server_tok_s']:.0f} tok/s within "
                   f"{offered['worst_accuracy_pct']:+.2f}% (worst run) using {client_cpu:.0f}% of its core "
                   f"(< {CLIENT_CPU_MAX_PCT:g}%)"))
    return checks


def offered_tok_s(concurrency: int) -> float:
    """What offered_load.yaml gives C running requests: C tokens per decode step (its step table is flat)."""
    profile = yaml.safe_load(OFFERED_LOAD_PROFILE.read_text())
    return concurrency / (max(profile["decode"]["step_ms"].values()) / 1000.0 * profile["time_scale"])


def measure_offered_load(workload: Workload) -> tuple[dict, list[dict]]:
    """Our client at C=256 against a server paced by its model, not by its CPU: does it see what is offered?"""
    concurrency, runs = BOTTLENECK_CONCURRENCY, []
    with running_emulator(OFFERED_LOAD_PROFILE, concurrency) as emulator:
        for repeat in range(1, workload.repeats + 1):
            say(f"offered load, C={concurrency} run {repeat}/{workload.repeats}: ours "
                f"({workload.requests(concurrency)} requests) ...")
            run, server_run = run_worker("ours", emulator, concurrency, workload)
            run.pop("client")
            runs.append(measured_run(run, server_run, emulator))
            last = runs[-1]
            say(f"    {last['agg_tok_s']:.0f} tok/s (server {last['server']['tok_s']:.0f}, "
                f"{last['server_running'] or 0:.0f} running), client core used {last['client_cpu_pct']:.0f}%, "
                f"accuracy {last['accuracy_pct']:+.2f}%")
    return {**level_summary(runs), "offered_tok_s": offered_tok_s(concurrency)}, runs


def _percent(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.0f}%"


def table(levels: dict) -> str:
    lines = ["| C | Client | Agg tok/s | Server tok/s | CPU s / 1k tok | Client core: used / wanted "
             "| Server core wanted | Server running (of C) | Accuracy (median, worst) |", "|" + "---|" * 9]
    for concurrency, engines in levels.items():
        for name, label in ENGINES.items():
            s = engines[name]
            running = "n/a" if s["server_running"] is None else f"{s['server_running']:.0f}"
            lines.append(f"| {concurrency} | {label} | {s['agg_tok_s']:.0f} | {s['server_tok_s']:.0f} | "
                         f"{s['cpu_s_per_1k_tok']:.4f} | {s['client_cpu_pct']:.0f}% / {s['client_demand_pct']:.0f}% | "
                         f"{_percent(s['server_demand_pct'])} | {running} | "
                         f"{s['accuracy_pct']:+.2f}%, {s['worst_accuracy_pct']:+.2f}% |")
        theirs = engines["theirs"]
        for name in ("ours", "floor"):
            mine = engines[name]
            lines.append(f"| {concurrency} | **{name}/theirs** | {mine['agg_tok_s'] / theirs['agg_tok_s']:.2f} | | "
                         f"**{mine['cpu_s_per_1k_tok'] / theirs['cpu_s_per_1k_tok']:.2f}** | | | | |")
    return "\n".join(lines)


def measure(emulator: Emulator, workload: Workload, tokenizer: Path) -> tuple[dict, dict]:
    """Runs alternate between the clients (ABC CBA ...), so drifting load from elsewhere hits all of them alike."""
    levels, raw = {}, {}
    for concurrency in CONCURRENCY_LEVELS:
        runs: dict[str, list[dict]] = {name: [] for name in ENGINES}
        versions = None
        for repeat in range(1, workload.repeats + 1):
            for name in (list(ENGINES) if repeat % 2 else list(ENGINES)[::-1]):
                say(f"C={concurrency} run {repeat}/{workload.repeats}: {ENGINES[name]} "
                    f"({workload.requests(concurrency)} requests) ...")
                if name == "theirs":
                    run, server_run = run_theirs(emulator, concurrency, workload, tokenizer, seed=repeat)
                else:
                    run, server_run = run_worker(name, emulator, concurrency, workload)
                    versions = run.pop("client", versions)
                runs[name].append(measured_run(run, server_run, emulator))
                last = runs[name][-1]
                say(f"    {last['agg_tok_s']:.0f} tok/s (server {last['server']['tok_s']:.0f}), "
                    f"{last['cpu_s_per_1k_tok']:.4f} CPU s/1k tok, client core used {last['client_cpu_pct']:.0f}%, "
                    f"accuracy {last['accuracy_pct']:+.2f}%")
        levels[concurrency] = {name: level_summary(engine_runs) for name, engine_runs in runs.items()}
        raw[concurrency] = {**runs, "our_client_versions": versions}
    return levels, raw


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="smoke run: one short run per engine and level")
    parser.add_argument("--worker", nargs=2, help=argparse.SUPPRESS)  # KIND PARAMS: run_worker's child
    options = parser.parse_args()
    sys.path.insert(0, str(ROOT / "collections"))  # scripts/setup.sh links the checkout there as llmops.sglang
    if options.worker:
        kind, params = options.worker
        {"ours": ours_worker, "floor": floor_worker}[kind](json.loads(params))
        return 0
    # SIGTERM unwinds like Ctrl-C, so the finally blocks below stop the emulator.
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))
    workload = QUICK if options.quick else FULL
    WORK.mkdir(parents=True, exist_ok=True)
    installed = ensure_bench_serving_venv()
    tokenizer = write_tokenizer(WORK / "tokenizer")
    os.sched_setaffinity(0, {SERVER_CORE})  # this process only waits and samples: keep it off the client's core
    load_before = os.getloadavg()
    with running_emulator(PROFILE, max(CONCURRENCY_LEVELS)) as emulator:
        levels, raw = measure(emulator, workload, tokenizer)
    offered, offered_runs = measure_offered_load(workload)
    checks = targets(levels, offered)
    print("\n" + table(levels) + "\n")
    print(f"Offered load (offered_load.yaml), C={BOTTLENECK_CONCURRENCY}, ours: offered {offered['offered_tok_s']:.0f} "
          f"tok/s, server {offered['server_tok_s']:.0f} (its core wanted {_percent(offered['server_demand_pct'])}, "
          f"{offered['server_running'] or 0:.0f} requests running), client {offered['agg_tok_s']:.0f} tok/s, "
          f"client core used {offered['client_cpu_pct']:.0f}% / wanted {offered['client_demand_pct']:.0f}%, "
          f"{offered['cpu_s_per_1k_tok']:.4f} CPU s/1k tok; load average {os.getloadavg()[0]:.1f}\n")
    for name, passed, evidence in checks:
        print(f"{'PASS' if passed else 'FAIL'}  {name}: {evidence}")
    result_path = WORK / ("results-quick.json" if options.quick else "results.json")
    result_path.write_text(json.dumps({
        "date": datetime.datetime.now().isoformat(timespec="seconds"), "quick": options.quick,
        "workload": workload.__dict__, "cores": os.cpu_count(), "bench_serving_venv": installed,
        "load_average_before": load_before, "load_average_after": os.getloadavg(),
        "levels": levels, "runs": raw, "offered_load": {"summary": offered, "runs": offered_runs},
        "targets": [{"name": n, "passed": p, "evidence": e} for n, p, e in checks],
    }, indent=1, default=str))
    say(f"details: {result_path.relative_to(ROOT)}")
    return 0 if all(passed for _name, passed, _evidence in checks) else 1


if __name__ == "__main__":
    try:
        sys.exit(main())
    except KeyboardInterrupt:
        print("interrupted: every process this benchmark started has been stopped", file=sys.stderr)
        sys.exit(130)
