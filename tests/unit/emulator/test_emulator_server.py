# Copyright (c) llmops.sglang contributors
# Apache License 2.0 (see LICENSE)
"""The emulated `python -m sglang.launch_server` as a real process on 127.0.0.1: log lines, API, failures.

Regexes come from upstream SGLang: the log prefix of python/sglang/srt/utils/common.py configure_logger, the
startup lines of srt/entrypoints/engine.py and srt/model_executor/model_runner.py, the MoE messages of
fused_moe_triton_config.py get_moe_configs, and the HTTP API of srt/entrypoints/http_server.py (commit 0025436e).
Every server is started on a random free port with a fast profile and stopped by its own pid.
"""
from __future__ import annotations

import ast
import asyncio
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import aiohttp
import pytest
import requests
import yaml

from tests.emulator import EMULATOR, make_importable  # noqa: E402

make_importable()

from sglang._emulator import tokens  # noqa: E402
from sglang._emulator.capacity import plan_memory  # noqa: E402
from sglang._emulator.model_shape import load_model_shape  # noqa: E402
from sglang._emulator.perf import build_perf_model, expected_output_throughput  # noqa: E402
from sglang._emulator.profile import load_profile  # noqa: E402
from sglang.srt.server_args import prepare_server_args  # noqa: E402

QWEN = str(EMULATOR / "models" / "Qwen3.5-122B-A10B")
BASELINE = ["--model-path", QWEN, "--tp", "4", "--speculative-algorithm", "NEXTN"]
READY = "The server is fired up and ready to roll!"
RTX_UP = "E=256,N=256,device_name=NVIDIA_RTX_PRO_6000_Blackwell_Server_Edition.json"
RTX_DOWN = "E=256,N=256,device_name=NVIDIA_RTX_PRO_6000_Blackwell_Server_Edition_down.json"

# The line prefix of python/sglang/srt/utils/common.py configure_logger (scheduler ranks: " DP0 TP0 EP0") as a regex.
PREFIX = re.compile(r"^\[(\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2})(?:\.\d{3})?((?: (?:DP|PP|ATTN_CP|MOE_DP|TP|EP)\d+)*)\] (.*)$")
PREFIX_MS = re.compile(r"^\[\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2}\.\d{3}( TP\d)?\] ")
# The format strings of the startup lines (engine.py, model_runner.py) and of get_moe_configs as regexes.
INIT_DIST = re.compile(r"^Init torch distributed ends\. elapsed=\d+\.\d{2} s, mem usage=\d+\.\d{2} GB$")
LOAD_BEGIN = re.compile(r"^Load weight begin\. avail mem=\d+\.\d{2} GB$")
LOAD_END = re.compile(
    r"^Load weight end\. elapsed=\d+\.\d{2} s, type=(\w+), avail mem=\d+\.\d{2} GB, mem usage=\d+\.\d{2} GB\.$")
KV_CACHE = re.compile(
    r"KV Cache is allocated\.(?: dtype: (\S+),)? #tokens: (\d+), "
    r"(?:K size: ([\d.]+) GB, V size: ([\d.]+) GB|KV size: ([\d.]+) GB)")
POOL_END = re.compile(r"^Memory pool end\. avail mem=\d+\.\d{2} GB$")
GRAPH_BEGIN = re.compile(r"^Capture cuda graph begin\. This can take up to several minutes\. avail mem=\d+\.\d{2} GB$")
GRAPH_END = re.compile(
    r"^Capture cuda graph end\. Time elapsed: \d+\.\d{2} s\. mem usage=\d+\.\d{2} GB\. avail mem=\d+\.\d{2} GB\.$")
PCG_BEGIN = re.compile(r"^Capture piecewise CUDA graph begin\. avail mem=\d+\.\d{2} GB$")
PCG_END = re.compile(
    r"^Capture piecewise CUDA graph end\. Time elapsed: \d+\.\d{2} s\. mem usage=\d+\.\d{2} GB\. "
    r"avail mem=\d+\.\d{2} GB\.$")
SCHEDULER = re.compile(
    r"max_total_num_tokens=(\d+), chunked_prefill_size=(-?\d+|None), max_prefill_tokens=(\d+), "
    r"max_running_requests=(\d+), context_len=(\d+), available_gpu_mem=([\d.]+) GB")
SPEC_WARNING = ("Max running requests is reset to 48 for speculative decoding. You can override this by explicitly "
                "setting --max-running-requests.")
TUNER_URL = "https://github.com/sgl-project/sglang/tree/main/benchmark/kernels/fused_moe_triton"
MOE_DEFAULT_UP = re.compile(
    r"^Using default MoE kernel config\. Performance might be sub-optimal! Config file not found at (\S.*\.json), "
    r"you can create them with " + re.escape(TUNER_URL) + "$")
MOE_DEFAULT_DOWN = re.compile(
    r"^Using MoE kernel config with down_moe=False\. Performance might be sub-optimal! Config file not found at "
    r"(\S.*_down\.json), you can create them with " + re.escape(TUNER_URL) + "$")
MOE_FOUND = re.compile(r"^Using MoE kernel config from (\S.*\.json)\.$")
MOE_FALLBACK = re.compile(
    r"^Config file not found at (\S.*\.json)\. Fallback to triton version ([\d.]+) and use MoE kernel config from "
    r"(\S.*\.json)\. Performance might be sub-optimal!$")
UVICORN_RUNNING = re.compile(
    r"^\[\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2}\] INFO:     Uvicorn running on http://127\.0\.0\.1:(\d+) "
    r"\(Press CTRL\+C to quit\)$")


@dataclass
class Server:
    process: subprocess.Popen
    port: int
    log_path: Path

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def log(self) -> str:
        return self.log_path.read_text(encoding="utf-8", errors="replace")

    def messages(self, rank: str | None = None) -> list[str]:
        """Log messages (prefix stripped) of the main process (rank "") or one rank (e.g. " TP0"); all if None."""
        found = []
        for line in self.log().replace("\r", "\n").splitlines():
            match = PREFIX.match(line)
            if match and (rank is None or match.group(2) == rank):
                found.append(match.group(3))
        return found


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def write_profile(directory: Path, **sections: dict | float | int | None) -> Path:
    """The demo profile made fast (time_scale 0.001, its start too; fixed seed, low noise), with section overrides."""
    profile = yaml.safe_load((EMULATOR / "profiles" / "demo.yaml").read_text())
    profile.update(time_scale=0.001, seed=7, noise_cv=0.01, instance_cv=0.0,
                   startup={**profile["startup"], "time_scale": None})
    for key, value in sections.items():
        if isinstance(value, dict):
            profile[key] = {**profile[key], **value}
        else:
            profile[key] = value
    path = directory / "profile.yaml"
    path.write_text(yaml.safe_dump(profile))
    return path


class Launcher:
    """Starts emulated servers in a directory and stops each one by its own pid."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.started: list[subprocess.Popen] = []

    def __call__(self, args: list[str], profile: Path | None = None, env: dict[str, str] | None = None,
                 wait_ready: bool = True, timeout: float = 30.0) -> Server:
        port = free_port()
        log_path = self.directory / f"server-{port}.log"
        environment = {
            **os.environ,
            "PYTHONPATH": f"{EMULATOR / 'sglang'}:{EMULATOR / 'triton'}",
            "SGLANG_EMULATOR_PROFILE": str(profile or write_profile(self.directory)),
            "SGLANG_EMULATOR_STATE_DIR": str(self.directory / "state"),
        }
        environment.pop("SGLANG_MOE_CONFIG_DIR", None)
        environment.update(env or {})
        with open(log_path, "wb") as log:
            process = subprocess.Popen(
                [sys.executable, "-m", "sglang.launch_server", *args, "--port", str(port)],
                stdout=log, stderr=subprocess.STDOUT, env=environment, cwd=self.directory,
            )
        self.started.append(process)
        server = Server(process, port, log_path)
        deadline = time.monotonic() + timeout
        while wait_ready and READY not in server.log() and process.poll() is None:
            assert time.monotonic() < deadline, server.log()[-3000:]
            time.sleep(0.02)
        return server

    def stop_all(self) -> None:
        for process in self.started:
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
                try:
                    process.wait(10)
                except subprocess.TimeoutExpired:
                    process.kill()
                    process.wait()


@pytest.fixture
def launch(tmp_path: Path) -> Iterator[Launcher]:
    launcher = Launcher(tmp_path)
    yield launcher
    launcher.stop_all()


@pytest.fixture(scope="module")
def baseline(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """One baseline server (TP4, NEXTN, SGLANG_LOG_MS=1) shared by the read-only tests of this module."""
    launcher = Launcher(tmp_path_factory.mktemp("baseline"))
    server = launcher(BASELINE, env={"SGLANG_LOG_MS": "1"})
    assert server.process.poll() is None, server.log()
    yield server
    launcher.stop_all()


# --- startup log, one test per line kind -------------------------------------------------------------

def test_every_line_has_the_sglang_prefix_with_ms(baseline: Server) -> None:
    lines = [line for line in baseline.log().splitlines() if line.startswith("[")]
    assert len(lines) > 40
    sglang_lines = [line for line in lines if "INFO:     " not in line]
    assert all(PREFIX_MS.match(line) for line in sglang_lines), [l for l in sglang_lines if not PREFIX_MS.match(l)][:3]


def test_emulator_marker_comes_first(baseline: Server) -> None:
    assert baseline.messages("")[0] == (
        "EMULATOR: sglang emulator 0.5.11 (llmops.sglang test double; no GPU work is done)")


def test_server_args_line_is_a_dataclass_repr(baseline: Server) -> None:
    line = next(m for m in baseline.messages("") if m.startswith("server_args="))
    call = ast.parse(line.removeprefix("server_args="), mode="eval").body
    assert isinstance(call, ast.Call) and call.func.id == "ServerArgs" and not call.args
    values = {kw.arg: ast.literal_eval(kw.value) for kw in call.keywords}
    assert values["tp_size"] == 4 and values["speculative_algorithm"] == "EAGLE"
    assert values["max_running_requests"] == 48 and values["disable_piecewise_cuda_graph"] is False
    assert len(values) > 150


def test_speculative_warning_precedes_server_args(baseline: Server) -> None:
    main = baseline.messages("")
    assert main.index(SPEC_WARNING) < next(i for i, m in enumerate(main) if m.startswith("server_args="))


@pytest.mark.parametrize("pattern", [INIT_DIST, LOAD_BEGIN, LOAD_END, POOL_END, GRAPH_BEGIN, GRAPH_END, PCG_BEGIN,
                                     PCG_END], ids=lambda p: p.pattern[1:30])
def test_per_rank_phase_lines(baseline: Server, pattern: re.Pattern) -> None:
    for rank in (" TP0", " TP1", " TP2", " TP3"):
        assert any(pattern.match(m) for m in baseline.messages(rank)), rank


def test_target_and_draft_weights_load_on_every_rank(baseline: Server) -> None:
    types = [LOAD_END.match(m).group(1) for m in baseline.messages(" TP2") if LOAD_END.match(m)]
    assert types == ["Qwen3_5MoeForCausalLM", "Qwen3_5MoeForCausalLMMTP"]


def test_kv_cache_line(baseline: Server) -> None:
    match = next(KV_CACHE.search(m) for m in baseline.messages(" TP0") if KV_CACHE.search(m))
    assert match.group(1) is None and int(match.group(2)) > 100_000  # 0.5.11 memory_pool.py prints no dtype
    assert float(match.group(3)) == float(match.group(4)) > 0


def test_phases_come_in_sglang_order(baseline: Server) -> None:
    tp1 = baseline.messages(" TP1")
    order = [INIT_DIST, LOAD_BEGIN, LOAD_END, KV_CACHE, POOL_END, GRAPH_BEGIN, MOE_DEFAULT_UP, GRAPH_END, PCG_BEGIN,
             PCG_END]
    positions = [next(i for i, m in enumerate(tp1) if p.search(m)) for p in order]
    assert positions == sorted(positions)


def test_progress_bar_is_written_on_stderr(baseline: Server) -> None:
    assert re.search(r"Capturing batches \(bs=48 avail_mem=[\d.]+ GB\): +0%\|", baseline.log())
    assert re.search(r"\| 10/10 \[\d\d:\d\d<\d\d:\d\d, +[\d.]+it/s\]\n", baseline.log())


def test_scheduler_summary_on_rank0_only(baseline: Server) -> None:
    summaries = [(rank, SCHEDULER.match(m)) for rank in (" TP0", " TP1") for m in baseline.messages(rank)
                 if SCHEDULER.match(m)]
    assert [rank for rank, _ in summaries] == [" TP0"]
    match = summaries[0][1]
    assert (match.group(2), match.group(3), match.group(4), match.group(5)) == ("8192", "16384", "48", "262144")


def test_moe_default_messages_for_up_and_down_on_every_rank(baseline: Server) -> None:
    for rank in (" TP0", " TP1", " TP2", " TP3"):
        messages = baseline.messages(rank)
        up = [MOE_DEFAULT_UP.match(m).group(1) for m in messages if MOE_DEFAULT_UP.match(m)]
        down = [MOE_DEFAULT_DOWN.match(m).group(1) for m in messages if MOE_DEFAULT_DOWN.match(m)]
        assert [Path(p).name for p in up] == [RTX_UP] and [Path(p).name for p in down] == [RTX_DOWN]
        assert Path(up[0]).parent.name == "triton_3_6_0"


def test_uvicorn_lines_then_warmup_then_ready(baseline: Server) -> None:
    log = baseline.log()
    running = next(UVICORN_RUNNING.match(line) for line in log.splitlines() if UVICORN_RUNNING.match(line))
    assert int(running.group(1)) == baseline.port
    for text in ("INFO:     Started server process [", "INFO:     Waiting for application startup.",
                 "INFO:     Application startup complete.", '"POST /generate HTTP/1.1" 200 OK'):
        assert text in log
    assert log.index("Uvicorn running on") < log.index('"POST /generate HTTP/1.1" 200 OK') < log.index(READY)
    assert READY in baseline.messages("")


# --- HTTP API ----------------------------------------------------------------------------------------------

def test_server_info_fields(baseline: Server) -> None:
    info = requests.get(f"{baseline.url}/server_info", timeout=5).json()
    assert info["emulator"] is True and info["version"] == "0.5.11"
    assert info["tp_size"] == 4 and info["max_running_requests"] == 48
    assert info["max_total_num_tokens"] > 100_000 and info["max_req_input_len"] == 262143
    state = info["internal_states"][0]
    assert state["effective_max_running_requests_per_dp"] == 48
    assert set(state["memory_usage"]) == {"weight", "kvcache", "token_capacity", "cuda_graph"}
    assert "last_gen_throughput" in state and "avg_spec_accept_length" in state
    assert requests.get(f"{baseline.url}/get_server_info", timeout=5).json()["tp_size"] == 4
    assert ("Endpoint '/get_server_info' is deprecated and will be removed in a future version. "
            "Please use '/server_info' instead.") in baseline.messages("")


def test_model_info_and_models(baseline: Server) -> None:
    info = requests.get(f"{baseline.url}/get_model_info", timeout=5).json()
    assert info["model_path"] == QWEN and info["is_generation"] is True
    models = requests.get(f"{baseline.url}/v1/models", timeout=5).json()
    assert models["data"][0]["id"] == QWEN and models["data"][0]["max_model_len"] == 262144


def test_generate_ignore_eos_gives_exactly_max_new_tokens(baseline: Server) -> None:
    body = {"text": "Explain continuous batching in one paragraph.",
            "sampling_params": {"max_new_tokens": 37, "ignore_eos": True, "temperature": 0}}
    reply = requests.post(f"{baseline.url}/generate", json=body, timeout=10).json()
    meta = reply["meta_info"]
    assert meta["completion_tokens"] == 37 == len(reply["output_ids"])
    assert meta["prompt_tokens"] == 12  # 45 characters at ~4 per token, rounded up
    assert meta["finish_reason"] == {"type": "length", "length": 37} and meta["e2e_latency"] > 0


def test_generate_stream_text_is_cumulative(baseline: Server) -> None:
    body = {"input_ids": list(range(100, 164)), "stream": True,
            "sampling_params": {"max_new_tokens": 20, "ignore_eos": True}}
    events = _sse(requests.post(f"{baseline.url}/generate", json=body, stream=True, timeout=10))
    assert events[-1] == "[DONE]"
    chunks = [json.loads(e) for e in events[:-1]]
    texts = [c["text"] for c in chunks]
    assert len(chunks) > 2 and all(later.startswith(earlier) for earlier, later in zip(texts, texts[1:]))
    assert chunks[-1]["meta_info"]["completion_tokens"] == 20 and chunks[-1]["meta_info"]["prompt_tokens"] == 64
    assert chunks[-1]["meta_info"]["finish_reason"]["type"] == "length" and "e2e_latency" in chunks[-1]["meta_info"]
    assert all(c["meta_info"]["finish_reason"] is None for c in chunks[:-1])


def test_completions_stream_with_usage_chunk(baseline: Server) -> None:
    body = {"model": QWEN, "prompt": "Write a haiku about GPUs.", "max_tokens": 25, "ignore_eos": True,
            "stream": True, "stream_options": {"include_usage": True}}
    events = _sse(requests.post(f"{baseline.url}/v1/completions", json=body, stream=True, timeout=10))
    chunks = [json.loads(e) for e in events[:-1]]
    assert events[-1] == "[DONE]"
    usage_chunk = chunks[-1]
    assert usage_chunk["choices"] == [] and usage_chunk["usage"] == {
        "prompt_tokens": 7, "completion_tokens": 25, "total_tokens": 32}
    assert chunks[-2]["choices"][0]["finish_reason"] == "length"
    text = "".join(c["choices"][0]["text"] for c in chunks[:-1])
    plain = requests.post(f"{baseline.url}/v1/completions", json={**body, "stream": False}, timeout=10).json()
    assert plain["choices"][0]["text"] == text and plain["usage"]["completion_tokens"] == 25


def test_chat_completions_stream_and_plain(baseline: Server) -> None:
    body = {"model": QWEN, "messages": [{"role": "user", "content": "Hello there!"}], "max_tokens": 9,
            "ignore_eos": True, "stream": True, "stream_options": {"include_usage": True}}
    chunks = [json.loads(e) for e in _sse(requests.post(f"{baseline.url}/v1/chat/completions", json=body,
                                                        stream=True, timeout=10))[:-1]]
    assert chunks[0]["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    assert chunks[-1]["choices"] == [] and chunks[-1]["usage"]["completion_tokens"] == 9
    plain = requests.post(f"{baseline.url}/v1/chat/completions", json={**body, "stream": False}, timeout=10).json()
    assert plain["object"] == "chat.completion" and plain["choices"][0]["message"]["role"] == "assistant"
    assert plain["usage"]["completion_tokens"] == 9 and plain["choices"][0]["finish_reason"] == "length"


def test_without_ignore_eos_the_model_stops_by_itself(baseline: Server) -> None:
    body = {"text": "Say something short.", "sampling_params": {"max_new_tokens": 4000}}
    meta = requests.post(f"{baseline.url}/generate", json=body, timeout=10).json()["meta_info"]
    assert meta["finish_reason"]["type"] == "stop" and 24 <= meta["completion_tokens"] < 512


def test_a_shared_prefix_is_served_from_the_radix_cache(baseline: Server) -> None:
    system = list(range(900000, 900512))

    def generate(question: list[int]) -> dict:
        body = {"input_ids": system + question, "sampling_params": {"max_new_tokens": 4, "ignore_eos": True}}
        return requests.post(f"{baseline.url}/generate", json=body, timeout=10).json()["meta_info"]

    assert generate([1, 2, 3])["cached_tokens"] == 0
    assert generate([4, 5, 6])["cached_tokens"] == 512
    hit = "Prefill batch. #new-seq: 1, #new-token: 3, #cached-token: 512, "
    assert any(message.startswith(hit) for message in baseline.messages(" TP0"))


def test_the_next_chat_turn_hits_the_previous_turn_and_its_answer(baseline: Server) -> None:
    first = [{"role": "user", "content": "Radix cache test: tell me about prefix caching, turn one."}]
    body = {"messages": first, "max_tokens": 16, "ignore_eos": True}
    reply = requests.post(f"{baseline.url}/v1/chat/completions", json=body, timeout=10).json()
    answer = reply["choices"][0]["message"]["content"]
    second = [*first, {"role": "assistant", "content": answer}, {"role": "user", "content": "And turn two?"}]
    body = {"text": tokens.render_chat(second), "sampling_params": {"max_new_tokens": 4, "ignore_eos": True}}
    meta = requests.post(f"{baseline.url}/generate", json=body, timeout=10).json()["meta_info"]
    # The rendered history repeats turn one's prompt and answer (the answer's text ends inside a 4-character piece).
    assert meta["cached_tokens"] >= reply["usage"]["prompt_tokens"] + 16 - 2


def test_too_long_input_is_a_400(baseline: Server) -> None:
    reply = requests.post(f"{baseline.url}/generate", json={"input_ids": [1] * 262144}, timeout=30)
    assert reply.status_code == 400 and "context length" in reply.json()["error"]["message"]


def test_flush_cache_when_idle(baseline: Server) -> None:
    reply = requests.post(f"{baseline.url}/flush_cache", timeout=5)
    assert reply.status_code == 200 and reply.text.startswith("Cache flushed.\nPlease check backend logs")
    assert "Cache flushed successfully!" in baseline.messages(" TP0")


def test_health_is_503_while_starting_then_200(launch, tmp_path: Path) -> None:
    server = launch(BASELINE, write_profile(tmp_path, startup={"warmup_s": 1500.0}), wait_ready=False)
    deadline = time.monotonic() + 20
    statuses = []
    while READY not in server.log() and time.monotonic() < deadline:
        try:
            statuses.append(requests.get(f"{server.url}/health", timeout=2).status_code)
        except requests.ConnectionError:
            pass
        time.sleep(0.05)
    assert 503 in statuses
    assert requests.get(f"{server.url}/health", timeout=5).status_code == 200
    assert requests.get(f"{server.url}/health_generate", timeout=5).status_code == 200


def test_api_key_is_enforced(launch) -> None:
    server = launch([*BASELINE, "--api-key", "sk-test-123"])
    denied = requests.get(f"{server.url}/v1/models", timeout=5)
    assert denied.status_code == 401 and denied.json() == {"error": "Unauthorized"}
    wrong = requests.get(f"{server.url}/server_info", headers={"Authorization": "Bearer nope"}, timeout=5)
    assert wrong.status_code == 401
    assert requests.get(f"{server.url}/health", timeout=5).status_code == 200
    allowed = requests.get(f"{server.url}/v1/models", headers={"Authorization": "Bearer sk-test-123"}, timeout=5)
    assert allowed.status_code == 200


# --- capacity and MoE configs -------------------------------------------------------------------------------

def test_allreduce_fusion_costs_capacity_and_disables_piecewise_graphs(launch) -> None:
    server = launch([*BASELINE, "--enable-fused-moe-sum-all-reduce", "--enable-flashinfer-allreduce-fusion"])
    summary = next(SCHEDULER.match(m) for m in server.messages(" TP0") if SCHEDULER.match(m))
    assert summary.group(4) == "26"
    args_line = next(m for m in server.messages("") if m.startswith("server_args="))
    assert "disable_piecewise_cuda_graph=True" in args_line and "enable_flashinfer_allreduce_fusion=True" in args_line
    reason = "Disable piecewise CUDA graph because --disable-piecewise-cuda-graph is set"  # 0.5.11's one text
    assert all(reason in server.messages(rank) for rank in (" TP0", " TP3"))
    assert not any(PCG_BEGIN.match(m) for m in server.messages(" TP0"))
    info = requests.get(f"{server.url}/server_info", timeout=5).json()
    assert info["internal_states"][0]["effective_max_running_requests_per_dp"] == 26


def test_warnings_vanish_with_tuned_configs_in_the_config_dir(launch, tmp_path: Path) -> None:
    sample = EMULATOR / "sglang/sglang/srt/layers/moe/moe_runner/triton_utils/configs/triton_3_5_1"
    tuned = tmp_path / "moe" / "configs" / "triton_3_6_0"
    tuned.mkdir(parents=True)
    shutil.copy(sample / "E=257,N=256,device_name=NVIDIA_H200,dtype=fp8_w8a8,block_shape=[128, 128].json",
                tuned / RTX_UP)
    shutil.copy(sample / "E=257,N=256,device_name=NVIDIA_H200,dtype=fp8_w8a8,block_shape=[128, 128]_down.json",
                tuned / RTX_DOWN)
    server = launch(BASELINE, env={"SGLANG_MOE_CONFIG_DIR": str(tmp_path / "moe")})
    messages = server.messages(" TP3")
    assert [MOE_FOUND.match(m).group(1) for m in messages if MOE_FOUND.match(m)] == [
        str(tuned / RTX_UP), str(tuned / RTX_DOWN)]
    assert "sub-optimal" not in server.log()


def test_fallback_message_when_only_another_triton_dir_has_the_file(launch, tmp_path: Path) -> None:
    older = tmp_path / "moe" / "configs" / "triton_3_4_0"  # 0.5.11's fixed fallback list reaches 3.4.0, not 3.5.1
    older.mkdir(parents=True)
    sample = EMULATOR / "sglang/sglang/srt/layers/moe/moe_runner/triton_utils/configs/triton_3_5_1"
    shutil.copy(sample / "E=257,N=256,device_name=NVIDIA_H200,dtype=fp8_w8a8,block_shape=[128, 128].json",
                older / RTX_UP)
    server = launch(BASELINE, env={"SGLANG_MOE_CONFIG_DIR": str(tmp_path / "moe")})
    fallback = [MOE_FALLBACK.match(m) for m in server.messages(" TP0") if MOE_FALLBACK.match(m)]
    assert len(fallback) == 1 and fallback[0].group(2) == "3.4.0"
    assert fallback[0].group(1) == str(tmp_path / "moe" / "configs" / "triton_3_6_0" / RTX_UP)
    assert any(MOE_DEFAULT_DOWN.match(m) for m in server.messages(" TP0"))


# --- failures and lifecycle ---------------------------------------------------------------------------------

def test_not_enough_memory_fails_after_load_weight_end(launch) -> None:
    server = launch([*BASELINE, "--mem-fraction-static", "0.55"])
    assert server.process.wait(20) == 1
    log = server.log()
    assert "RuntimeError: Not enough memory. Please try to increase --mem-fraction-static." in log
    assert log.index("Load weight end.") < log.index("Scheduler hit an exception: Traceback (most recent call last):")
    assert server.messages("")[-1] == "Received sigquit from a child process. It usually means the child failed."
    assert READY not in log


def test_too_high_mem_fraction_fails_cuda_graph_capture(launch) -> None:
    server = launch([*BASELINE, "--mem-fraction-static", "0.97"])
    assert server.process.wait(20) == 1
    log = server.log()
    assert "torch.OutOfMemoryError: CUDA out of memory." in log and "Exception: Capture cuda graph failed:" in log
    assert "1. set --mem-fraction-static to a smaller value (e.g., 0.8 or 0.7)" in log


def test_port_in_use_is_uvicorns_bind_error(launch, monkeypatch) -> None:
    """uvicorn logs the event loop's OSError as is (`logger.error(exc)`), shuts the lifespan down and exits 1."""
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        port = held.getsockname()[1]
        monkeypatch.setitem(globals(), "free_port", lambda: port)
        server = launch(BASELINE, wait_ready=False)
        assert server.process.wait(20) == 1
    messages = server.messages("")
    bind_error = (f"ERROR:    [Errno 98] error while attempting to bind on address ('127.0.0.1', {port}): "
                  f"address already in use")
    assert messages[-3:] == [bind_error, "INFO:     Waiting for application shutdown.",
                             "INFO:     Application shutdown complete."]
    assert READY not in server.log()


def test_crash_after_ready_exits_non_zero_with_traceback(launch, tmp_path: Path) -> None:
    server = launch(BASELINE, write_profile(tmp_path, failures={"crash_after_ready_s": 200.0}))
    assert server.process.wait(20) == 1
    log = server.log()
    assert log.index(READY) < log.index("Scheduler hit an exception:")
    assert "RuntimeError: CUDA error: an illegal memory access was encountered" in log


def test_sigterm_shuts_down_cleanly(launch) -> None:
    server = launch(BASELINE)
    server.process.send_signal(signal.SIGTERM)
    assert server.process.wait(10) == 0
    log = server.log()
    for text in ("INFO:     Shutting down", "INFO:     Waiting for application shutdown.",
                 "INFO:     Application shutdown complete.", f"INFO:     Finished server process [{server.process.pid}]"):
        assert text in log


def test_unknown_flag_is_an_argparse_error(launch) -> None:
    server = launch([*BASELINE, "--enable-warp-drive"], wait_ready=False)
    assert server.process.wait(20) == 2
    assert "error: unrecognized arguments: --enable-warp-drive" in server.log()


def test_help_lists_real_flag_spellings(tmp_path: Path) -> None:
    """The emulated release's own option strings (0.5.11 has no `--tp`: argparse takes it as an abbreviation
    of --tp-size, as the real parser does); tests/conformance compares the whole --help with the wheel's."""
    result = subprocess.run([sys.executable, "-m", "sglang.launch_server", "--help"], capture_output=True, text=True,
                            env={**os.environ, "PYTHONPATH": f"{EMULATOR / 'sglang'}:{EMULATOR / 'triton'}"},
                            timeout=30, cwd=tmp_path)
    assert result.returncode == 0
    assert not re.search(r"(^|[ ,])--tp[ ,\n]", result.stdout)
    for flag in ("--model-path", "--tensor-parallel-size", "--tp-size", "--ep-size", "--mem-fraction-static",
                 "--speculative-algorithm", "--enable-flashinfer-allreduce-fusion", "--disable-piecewise-cuda-graph",
                 "--enforce-disable-flashinfer-allreduce-fusion", "--enable-fused-moe-sum-all-reduce", "--config",
                 "--cuda-graph-max-bs", "--admin-api-key", "--decode-log-interval", "--watchdog-timeout"):
        assert re.search(rf"(^|[ ,]){re.escape(flag)}[ ,\n]", result.stdout), flag


def test_config_yaml_supplies_flags_and_cli_overrides(launch, tmp_path: Path) -> None:
    config = tmp_path / "server.yaml"
    config.write_text(yaml.safe_dump({"model-path": QWEN, "tp-size": 4, "speculative-algorithm": "NEXTN",
                                      "max-running-requests": 16, "enable-metrics": True}))
    server = launch(["--config", str(config), "--max-running-requests", "24", "--log-requests"])
    summary = next(SCHEDULER.match(m) for m in server.messages(" TP0") if SCHEDULER.match(m))
    assert summary.group(4) == "24"
    metrics = requests.get(f"{server.url}/metrics", timeout=5).text
    assert re.search(r'^sglang:num_running_reqs\{model_name=".*"\} 0\.0$', metrics, re.M)
    assert re.search(r"^Receive: obj=GenerateReqInput\(rid='\w+', input_len=8, ", "\n".join(server.messages("")), re.M)
    assert any(m.startswith("Finish: obj=GenerateReqInput(") and "'completion_tokens': 8" in m
               for m in server.messages(""))


def test_nvidia_smi_sees_the_running_server(baseline: Server) -> None:
    directory = baseline.log_path.parent
    result = subprocess.run(
        [sys.executable, str(EMULATOR / "bin" / "nvidia-smi"), "--query-gpu=index,memory.used",
         "--format=csv,noheader,nounits"], capture_output=True, text=True, timeout=30,
        env={**os.environ, "PYTHONPATH": str(EMULATOR / "sglang"),
             "SGLANG_EMULATOR_PROFILE": str(directory / "profile.yaml"),
             "SGLANG_EMULATOR_STATE_DIR": str(directory / "state")})
    used = [int(line.split(", ")[1]) for line in result.stdout.splitlines()]
    assert len(used) == 4 and all(mib > 70_000 for mib in used)


# --- performance ----------------------------------------------------------------------------------------------

# Slow enough (time_scale 0.1) that a decode step is milliseconds of wall time; startup kept short.
SWEEP_PROFILE = {"time_scale": 0.1, "noise_cv": 0.02, "speculative": {"request_cv": 0.0},
                 "startup": {"load_weights_s": 1.0, "cuda_graph_s": 1.0, "piecewise_cuda_graph_s": 1.0}}


def test_short_sweep_matches_the_profile_curve(launch, tmp_path: Path) -> None:
    profile_path = write_profile(tmp_path, **SWEEP_PROFILE)
    server = launch(BASELINE, profile_path)
    input_len, output_len = 256, 200
    os.environ["SGLANG_EMULATOR_PROFILE"] = str(profile_path)
    try:
        profile, shape = load_profile(), load_model_shape(QWEN)
        args = prepare_server_args(BASELINE)
        perf, plan = build_perf_model(profile, args, shape), plan_memory(args, shape, profile)
    finally:
        del os.environ["SGLANG_EMULATOR_PROFILE"]
    for concurrency, rounds in ((1, 4), (16, 2)):
        measured = asyncio.run(_closed_loop(server.url, concurrency, rounds, input_len, output_len))
        expected = expected_output_throughput(perf, concurrency, input_len, output_len,
                                              plan.max_running_requests) / profile.time_scale
        # Noise here is per-step jitter (2 %) averaging out; the allowance covers ramp-up and drain. The time the
        # emulator's loop fell behind its timeline (a loaded machine, not the model) is not the model's: taken off.
        assert measured == pytest.approx(expected, rel=0.12), (concurrency, measured, expected)


async def _closed_loop(url: str, concurrency: int, rounds: int, input_len: int, output_len: int) -> float:
    # Each prompt differs from its first token on, so the radix cache has nothing to serve (as the bench client's).
    prompts = iter(range(10**6, 2 * 10**6))

    def body() -> dict:
        return {"prompt": [next(prompts), *range(1000, 999 + input_len)], "max_tokens": output_len,
                "ignore_eos": True, "stream": True, "stream_options": {"include_usage": True}}

    async with aiohttp.ClientSession(url) as session:
        async def behind_s() -> float:
            async with session.get("/server_info") as response:
                return (await response.json())["emulator_behind_s"]

        async def client() -> int:
            tokens = 0
            for _ in range(rounds):
                async with session.post("/v1/completions", json=body()) as response:
                    async for line in response.content:
                        if line.startswith(b"data: {") and b'"choices": []' in line:
                            tokens += json.loads(line[6:])["usage"]["completion_tokens"]
            return tokens

        behind_before, started = await behind_s(), time.monotonic()
        produced = await asyncio.gather(*(client() for _ in range(concurrency)))
        elapsed = time.monotonic() - started - (await behind_s() - behind_before)
    assert sum(produced) == concurrency * rounds * output_len
    return sum(produced) / elapsed


def _sse(response: requests.Response) -> list[str]:
    return [line.removeprefix("data: ") for line in response.iter_lines(decode_unicode=True) if line.startswith("data: ")]
