# Copyright (c) llmops.sglang contributors
# Apache License 2.0 (see LICENSE)
"""The benchmark client: pure helpers, then real sweeps against a tiny SGLang-shaped server on 127.0.0.1."""
from __future__ import annotations

import json
import socket

import pytest

from ansible_collections.llmops.sglang.plugins.module_utils._bench_aggregate import aggregate_run, percentiles, steady_window, tokens_in_window
from ansible_collections.llmops.sglang.plugins.module_utils._bench_config import BenchConfig
from ansible_collections.llmops.sglang.plugins.module_utils._bench_session import LevelRunner
from ansible_collections.llmops.sglang.plugins.module_utils._bench_sse import (
    RequestRecord,
    SSEDecoder,
    apply_chat_event,
    apply_completions_event,
    apply_generate_event,
)
from ansible_collections.llmops.sglang.plugins.module_utils._bench_sweep import failed_share_error, format_progress
from ansible_collections.llmops.sglang.plugins.module_utils.bench_client import run_sweep
from ansible_collections.llmops.sglang.plugins.module_utils.workload import Arrival
from tests.unit.plugins.module_utils.fake_sglang_server import running_server, server_stats

TTFT_MS = 40.0
TOKEN_MS = 8.0


def config(base_url: str, **overrides) -> BenchConfig:
    settings = dict(base_url=base_url, concurrency_levels=(4,), repeats=2, input_len=300, output_len=24,
                    request_timeout_s=20.0, level_timeout_s=60.0)
    settings.update(overrides)
    return BenchConfig(**settings)


def closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


# ---- pure helpers -------------------------------------------------------------------------------------------------

def test_percentiles_interpolate_like_numpy() -> None:
    assert percentiles([float(v) for v in range(1, 101)]) == pytest.approx({"p50": 50.5, "p90": 90.1, "p99": 99.01})
    assert percentiles([7.0]) == {"p50": 7.0, "p90": 7.0, "p99": 7.0}
    assert percentiles([]) == {"p50": None, "p90": None, "p99": None}


def test_sse_decoder_reassembles_events_split_across_reads() -> None:
    decoder = SSEDecoder()
    stream = (b'data: {"choices":[{"index":0,"text":" Paris"}]}\n\n: keep-alive comment\n\ndata: {"choi'
              b'ces":[{"index":0,"text":" is"}]}\r\n\r\nevent: ping\ndata: [DONE]\n\n')
    payloads = []
    for start in range(0, len(stream), 7):  # 7-byte reads cut every field somewhere
        payloads += decoder.feed(stream[start:start + 7])
    assert payloads == [b'{"choices":[{"index":0,"text":" Paris"}]}', b'{"choices":[{"index":0,"text":" is"}]}',
                        b"[DONE]"]
    assert decoder.feed(b"data: {\"partial") == []


def test_completions_events_count_text_chunks_and_take_usage_from_the_last_chunk() -> None:
    record = RequestRecord(10.0)
    chunks = [
        {"id": "a1", "object": "text_completion", "model": "m",
         "choices": [{"index": 0, "text": " The", "logprobs": None, "finish_reason": None}], "usage": None},
        {"id": "a1", "object": "text_completion", "model": "m",
         "choices": [{"index": 0, "text": " capital", "logprobs": None, "finish_reason": None}], "usage": None},
        {"id": "a1", "object": "text_completion", "model": "m",
         "choices": [{"index": 0, "text": "", "logprobs": None, "finish_reason": "length"}], "usage": None},
        {"id": "a1", "object": "text_completion", "model": "m", "choices": [],
         "usage": {"prompt_tokens": 1000, "completion_tokens": 2, "total_tokens": 1002}},
    ]
    for offset, chunk in enumerate(chunks):
        apply_completions_event(record, chunk, 10.2 + offset * 0.01)
    assert record.chunk_times == pytest.approx([10.2, 10.21])
    assert (record.tokens, record.prompt_tokens, record.error) == (2, 1000, None)


def test_chat_events_skip_the_role_chunk() -> None:
    record = RequestRecord(0.0)
    apply_chat_event(record, {"choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}}]}, 0.05)
    apply_chat_event(record, {"choices": [{"index": 0, "delta": {"content": "Sure"}}]}, 0.09)
    apply_chat_event(record, {"choices": [{"index": 0, "delta": {}, "finish_reason": "length"}]}, 0.10)
    assert record.chunk_times == [0.09]


def test_generate_events_use_cumulative_completion_tokens_and_report_aborts() -> None:
    record = RequestRecord(0.0)
    apply_generate_event(record, {"text": " a", "meta_info": {"id": "r", "prompt_tokens": 1000,
                                                              "completion_tokens": 1, "finish_reason": None}}, 0.2)
    # A speculative-decoding step delivers three tokens in one chunk.
    spec_step = {"text": " a b c d", "meta_info": {"id": "r", "prompt_tokens": 1000, "completion_tokens": 4,
                                                   "finish_reason": None}}
    apply_generate_event(record, spec_step, 0.3)
    assert (record.chunk_times, record.tokens, record.prompt_tokens) == ([0.2, 0.3], 4, 1000)
    apply_generate_event(record, {"text": " a b c d", "meta_info": {
        "completion_tokens": 4, "finish_reason": {"type": "abort", "message": "KV cache pool is full"}}}, 0.4)
    assert record.error == "aborted by the server: KV cache pool is full"
    error_record = RequestRecord(0.0)
    apply_generate_event(error_record, {"error": {"message": "Input is too long"}}, 0.1)
    assert error_record.error == "server error: Input is too long"


def finished(start: float, chunk_times: list[float], tokens: int | None, end: float) -> RequestRecord:
    record = RequestRecord(start)
    record.chunk_times, record.tokens, record.end, record.done = chunk_times, tokens, end, True
    return record


def test_aggregate_run_computes_rates_latencies_and_token_checks() -> None:
    records = [
        finished(0.0, [0.1, 0.2, 0.3, 0.4], 4, 0.5),
        finished(0.0, [0.2, 0.4, 0.6, 0.8], 4, 1.0),
        finished(0.5, [0.6, 0.7, 0.7, 0.8], 3, 1.0),  # one token short of output_len=4; two chunks in one read
    ]
    failed = RequestRecord(0.5)
    failed.end, failed.error = 0.9, "HTTP 503: Service Unavailable"
    run = aggregate_run(records + [failed], wall_s=1.0, output_len=4, concurrency=2, steady_state=False)
    assert (run["ok"], run["failed"], run["tokens"], run["token_mismatch"]) == (3, 1, 11, 1)
    assert run["error_samples"] == ["HTTP 503: Service Unavailable"]
    assert run["agg_tok_s"] == pytest.approx(11.0)
    assert run["per_req_tok_s"] == pytest.approx((4 / 0.5 + 4 / 1.0 + 3 / 0.5) / 3)
    assert run["ttft_ms"]["p50"] == pytest.approx(100.0)
    assert run["e2e_ms"]["p99"] == pytest.approx(990.0)
    assert run["itl_ms"]["p50"] == pytest.approx(100.0) and run["itl_ms"]["p99"] == pytest.approx(200.0)
    assert run["tpot_ms"]["p50"] == pytest.approx(200.0)  # (0.5 - 0.1) / 2 for the 3-token request
    assert run["achieved_concurrency"] == pytest.approx(2.4)
    assert run["steady_agg_tok_s"] is None


def test_chunks_read_together_are_one_delivery_for_itl() -> None:
    """Speculative decoding: a step's tokens arrive as several chunks in one socket read (same timestamp)."""
    record = finished(0.0, [0.1, 0.2, 0.2, 0.2, 0.3, 0.3], 6, 0.3)
    run = aggregate_run([record], wall_s=0.3, output_len=6, concurrency=1, steady_state=False)
    assert run["itl_ms"] == pytest.approx({"p50": 100.0, "p90": 100.0, "p99": 100.0})
    assert run["tpot_ms"]["p50"] == pytest.approx(40.0)


def test_steady_window_is_the_longest_span_at_target_concurrency() -> None:
    intervals = [(0.0, 4.0), (1.0, 3.0), (2.5, 6.0), (5.0, 9.0), (5.5, 6.5)]
    assert steady_window(intervals, 2) == (1.0, 4.0)
    assert steady_window(intervals, 3) == (2.5, 3.0)
    assert steady_window(intervals, 4) is None
    assert steady_window([(0.0, 1.0), (1.0, 2.0)], 2) is None  # back-to-back is not overlapping
    records = [finished(0.0, [0.5, 1.5, 2.5, 3.5], 8, 4.0)]
    assert tokens_in_window(records, (1.0, 3.0)) == pytest.approx(4.0)


@pytest.mark.parametrize(("overrides", "message"), [
    ({"concurrency_levels": (1, 10000000)}, "concurrency_levels: 10000000 requests in flight is more than the client "
                                            "opens (4096 at most"),
    ({"level_timeout_s": None}, "level_timeout_s must be a number > 0, got None"),
    ({"api_key": "k"}, "api_key: must be at least 8 characters"),
    ({"api_key": " sk-spaced-key "}, "api_key: has whitespace at its start or end, which the server's launcher strips"),
    ({"api_key": "sk-line-key\n"}, "api_key: holds a control character"),
])
def test_config_refuses_unbounded_or_unusable_inputs(overrides, message) -> None:
    """Issue 36 item 12: accepted before; an unbounded connector, a level without a time limit, a key the server would
    never match (the launcher strips it: every request 401) or one too short to mask."""
    with pytest.raises(ValueError) as raised:
        BenchConfig(base_url="http://127.0.0.1:30000", **overrides)
    assert str(raised.value).startswith(message), raised.value
    assert BenchConfig(base_url="http://127.0.0.1:30000", concurrency_levels=(4096,), api_key="sk-8char").api_key


def test_config_rejects_nonpositive_concurrency_and_too_few_requests() -> None:
    with pytest.raises(ValueError, match="concurrency_levels"):
        BenchConfig(base_url="http://127.0.0.1:30000", concurrency_levels=(1, 0, 16))
    with pytest.raises(ValueError, match="concurrency_levels"):
        BenchConfig(base_url="http://127.0.0.1:30000", concurrency_levels=())
    with pytest.raises(ValueError, match="requests_per_level"):
        BenchConfig(base_url="http://127.0.0.1:30000", concurrency_levels=(4, 64), requests_per_level=32)
    with pytest.raises(ValueError, match="endpoint"):
        BenchConfig(base_url="http://127.0.0.1:30000", endpoint="embeddings")
    defaults = BenchConfig(base_url="http://127.0.0.1:30000/")
    assert defaults.base_url == "http://127.0.0.1:30000"
    assert [(p["concurrency"], p["warmup_requests"], p["requests"]) for p in defaults.plan()] == [
        (1, 4, 4), (4, 4, 8), (16, 16, 32), (32, 32, 64), (64, 64, 128)]
    assert "api_key" not in repr(BenchConfig(base_url="http://h:1", api_key="sk-secret"))


def test_two_sweeps_with_the_same_seed_never_send_the_same_prompt() -> None:
    """A rate search's probes are sweeps on one server start: a prompt of an earlier probe would be served from the
    radix cache (a one-token prefill), so each sweep's prompts are its own, warm-ups and shared prefixes included."""
    same = config("http://127.0.0.1:30000", seed=19)
    first, second = LevelRunner(None, same, None), LevelRunner(None, same, None)
    prompts = [[json.loads(body)["prompt"] for body in runner.bodies(50, 8)] + [runner.piece(40)]
               for runner in (first, second)]
    assert all(len(set(map(tuple, sweep))) == 51 for sweep in prompts)
    assert not set(map(tuple, prompts[0])) & set(map(tuple, prompts[1]))
    assert [len(prompt) for prompt in prompts[0]] == [300] * 50 + [40]


def test_format_progress_is_one_greppable_line() -> None:
    line = format_progress({"event": "run_done", "concurrency": 16, "repeat": 2, "agg_tok_s": 1213.456})
    assert line.endswith(" run_done concurrency=16 repeat=2 agg_tok_s=1213.5")
    assert "\n" not in line


# ---- against the streaming server --------------------------------------------------------------------------------

@pytest.mark.parametrize(("output_len", "warmup_output_len", "warmup_tokens"), [(40, 32, 32), (24, 32, 24),
                                                                              (40, 40, 40)])
def test_warm_up_requests_ask_for_warmup_output_len_tokens_and_timed_ones_for_output_len(
        output_len: int, warmup_output_len: int, warmup_tokens: int) -> None:
    with running_server("--ttft-ms", "1", "--token-ms", "1") as (base_url, _process):
        sweep = run_sweep(config(base_url, concurrency_levels=(2,), repeats=1, requests_per_level=4,
                                 output_len=output_len, warmup_output_len=warmup_output_len))
        stats = server_stats(base_url)
    assert sweep["error"] is None and sweep["warmup_output_len"] == warmup_tokens
    assert sweep["levels"][0]["runs"][0]["tokens"] == 4 * output_len
    asked = {int(tokens): count for tokens, count in stats["max_tokens"].items()}
    assert asked == ({warmup_tokens: 4, output_len: 4} if warmup_tokens != output_len else {output_len: 8})


@pytest.mark.parametrize("endpoint", ["completions", "chat", "generate"])
def test_sweep_counts_tokens_and_keeps_exactly_c_in_flight(endpoint: str) -> None:
    with running_server("--ttft-ms", str(TTFT_MS), "--token-ms", str(TOKEN_MS)) as (base_url, _process):
        events: list[dict] = []
        sweep = run_sweep(config(base_url, endpoint=endpoint, requests_per_level=8), on_progress=events.append)
        stats = server_stats(base_url)
    assert sweep["error"] is None
    assert sweep["model"] == "/models/Qwen3.5-122B-A10B" and sweep["endpoint"] == endpoint
    (level,) = sweep["levels"]
    assert (level["concurrency"], level["requests"], level["warmup_requests"]) == (4, 8, 4)
    assert stats["max_in_flight"] == 4
    assert stats["requests"] == 4 + 2 * 8  # warm-up + two runs (the chat calibration is not streamed)
    for run in level["runs"]:
        assert (run["ok"], run["failed"], run["tokens"], run["token_mismatch"]) == (8, 0, 8 * 24, 0)
        assert run["input_tokens"] == pytest.approx(300, rel=0.02)
        assert run["agg_tok_s"] == pytest.approx(run["tokens"] / run["wall_s"])
        # Per request, as the server paces it: at least its TTFT to the first token, at least TOKEN_MS between
        # tokens, the 23 later tokens after the first (each request's e2e >= its TTFT + 23 x TOKEN_MS, so the p50s
        # too). A slow machine only adds to each; what it adds is not asserted.
        assert TTFT_MS <= run["ttft_ms"]["p50"]
        assert TOKEN_MS <= run["itl_ms"]["p50"]
        assert run["e2e_ms"]["p50"] >= run["ttft_ms"]["p50"] + 23 * TOKEN_MS
        assert run["tpot_ms"]["p50"] == pytest.approx((run["e2e_ms"]["p50"] - run["ttft_ms"]["p50"]) / 23, rel=0.2)
        assert run["per_req_tok_s"] == pytest.approx(24 / (run["e2e_ms"]["p50"] / 1000), rel=0.2)
        assert 0.0 < run["achieved_concurrency"] <= 4.0  # never more in flight than C (the server saw 4 at most)
    assert [e["event"] for e in events] == ["level_start", "run_done", "run_done", "level_done", "sweep_done"]
    assert level["summary"]["ok"] == 16


def test_token_mismatch_is_flagged_when_the_server_returns_fewer_tokens() -> None:
    with running_server("--ttft-ms", "5", "--token-ms", "1", "--short-by", "1") as (base_url, _process):
        sweep = run_sweep(config(base_url, repeats=1))
    (run,) = sweep["levels"][0]["runs"]
    assert (run["ok"], run["tokens"], run["token_mismatch"], run["usage_missing"]) == (8, 8 * 23, 8, 0)


def test_steady_state_throughput_excludes_ramp_and_drain() -> None:
    with running_server("--ttft-ms", "5", "--token-ms", str(TOKEN_MS)) as (base_url, _process):
        sweep = run_sweep(config(base_url, concurrency_levels=(8,), repeats=1, output_len=40, steady_state=True))
    (run,) = sweep["levels"][0]["runs"]
    assert run["steady_window_s"] is not None and 0 < run["steady_window_s"] < run["wall_s"]
    # All 8 streams producing at most one token per TOKEN_MS: the steady rate is at most 8 / TOKEN_MS (a slow machine
    # only lowers it), and above the whole run's, whose ramp and drain it leaves out.
    assert run["steady_agg_tok_s"] <= 8 / (TOKEN_MS / 1000) * 1.35
    assert run["steady_agg_tok_s"] >= run["agg_tok_s"] * 0.95


@pytest.mark.parametrize(("api_key", "problem"), [("sk-wrong", "wrong"), (None, "missing")])
def test_wrong_or_missing_api_key_fails_fast(api_key: str | None, problem: str) -> None:
    with running_server("--api-key", "sk-right") as (base_url, _process):
        sweep = run_sweep(config(base_url, api_key=api_key))
        assert server_stats(base_url)["requests"] == 0, "stopped at the first 401, before any generation request"
    assert sweep["levels"] == []
    assert "HTTP 401" in sweep["error"] and f"API key is {problem}" in sweep["error"]


def test_401_on_a_generation_request_stops_the_sweep() -> None:
    """model given, so /v1/models is skipped: the first streamed request meets the 401."""
    with running_server("--api-key", "sk-right") as (base_url, _process):
        sweep = run_sweep(config(base_url, endpoint="generate", model="default", api_key="sk-old-key"))
        assert server_stats(base_url)["requests"] == 0
    assert sweep["levels"] == [] and "API key is wrong" in sweep["error"]


def test_right_api_key_is_accepted() -> None:
    with running_server("--api-key", "sk-right", "--token-ms", "1") as (base_url, _process):
        sweep = run_sweep(config(base_url, api_key="sk-right", repeats=1))
    assert sweep["error"] is None and sweep["levels"][0]["runs"][0]["ok"] == 8


def test_server_killed_mid_level_keeps_completed_levels_and_reports_the_error() -> None:
    with running_server("--ttft-ms", "10", "--token-ms", "5") as (base_url, process):
        def kill_during_second_level(event: dict) -> None:
            if event["event"] == "run_done" and event["concurrency"] == 4 and event["repeat"] == 1:
                process.kill()

        sweep = run_sweep(config(base_url, concurrency_levels=(2, 4), repeats=3, output_len=40),
                          on_progress=kill_during_second_level)
    assert [level["concurrency"] for level in sweep["levels"]] == [2]
    assert len(sweep["levels"][0]["runs"]) == 3
    # Requests on kept-alive connections see the reset, fresh connections are refused: either ends the sweep (at
    # once: the error is the connection's, not a request timeout's).
    assert sweep["error"].startswith("concurrency 4: ")
    assert f"cannot connect to {base_url}" in sweep["error"] or (
        "repeat 2: all 8 requests failed" in sweep["error"] and "Connection reset by peer" in sweep["error"])
    assert sweep["finished_at"] is not None


def test_unreachable_server_gives_a_clear_error() -> None:
    base_url = f"http://127.0.0.1:{closed_port()}"
    sweep = run_sweep(config(base_url))
    assert sweep["levels"] == []
    assert sweep["error"].startswith(f"cannot connect to {base_url} (GET /v1/models)")
    assert "refused" in sweep["error"].lower()


def test_requests_over_the_timeout_fail_and_stop_the_sweep() -> None:
    with running_server("--ttft-ms", "10", "--token-ms", "3000") as (base_url, _process):
        sweep = run_sweep(config(base_url, request_timeout_s=0.5, warmup_requests=0, repeats=1))
        stats = server_stats(base_url)
    assert sweep["levels"] == []
    assert "all 8 requests failed" in sweep["error"] and "request_timeout_s=0.5" in sweep["error"]
    assert (stats["requests"], stats["completed"]) == (8, 0), "each request cut at its timeout, none waited out"


def test_a_level_over_its_time_limit_stops_the_sweep() -> None:
    """Each request needs ~20 s (20 tokens x 1 s), the level may take 1 s: its requests are cut, not waited out."""
    with running_server("--ttft-ms", "10", "--token-ms", "1000") as (base_url, _process):
        sweep = run_sweep(config(base_url, concurrency_levels=(2, 4), level_timeout_s=1.0, output_len=20, repeats=1,
                                 warmup_requests=0))
        stats = server_stats(base_url)
    assert sweep["levels"] == []
    assert sweep["error"] == "concurrency 2 did not finish within level_timeout_s=1"
    assert (stats["requests"], stats["completed"]) == (2, 0), "the level's requests were cut at its limit"


def test_sweep_document_is_json_serialisable_and_versioned() -> None:
    with running_server("--token-ms", "1") as (base_url, _process):
        sweep = run_sweep(config(base_url, repeats=1))
    document = json.loads(json.dumps(sweep))
    assert document["schema_version"] == 1 and document["engine"] == "native"
    assert set(document["client"]) == {"python", "aiohttp"} and document["client"]["aiohttp"]
    assert document["input_len"] == 300 and document["output_len"] == 24
    assert "workload" not in document  # closed-loop sweeps keep their schema exactly


# ---- failed share (issue 15 item 6) -------------------------------------------------------------------------------

def level_with(failed_per_run: list[int], requests: int = 32) -> dict:
    runs = [{"requests": requests, "ok": requests - failed, "failed": failed,
             "error_samples": [f"HTTP 503: overload {index}"] * min(failed, 3)}
            for index, failed in enumerate(failed_per_run)]
    return {"concurrency": 16, "runs": runs}


def test_failed_share_over_the_limit_is_an_error_naming_share_and_samples() -> None:
    # 976 of 1024 failed: the case of the issue, which used to be a throughput number with error null.
    error = failed_share_error(level_with([30] * 32), 0.01)
    assert error.startswith("960 of 1024 timed requests failed (93.8%, more than max_failed_share=0.01)")
    assert "HTTP 503: overload 0" in error
    assert failed_share_error(level_with([0, 0, 0, 1]), 0.01) is None  # 1 of 128 = 0.8%
    assert failed_share_error(level_with([0, 0, 0, 2]), 0.01) is not None  # 2 of 128 = 1.6%
    assert failed_share_error(level_with([0, 0, 0, 0]), 0.0) is None
    assert failed_share_error(level_with([31]), 1.0) is None


def test_config_rejects_a_failed_share_outside_zero_to_one() -> None:
    with pytest.raises(ValueError, match=r"max_failed_share must be a share between 0 and 1"):
        BenchConfig(base_url="http://127.0.0.1:1", max_failed_share=5)
    with pytest.raises(ValueError, match=r"max_failed_share must be a number >= 0"):
        BenchConfig(base_url="http://127.0.0.1:1", max_failed_share=-0.1)


def test_a_sweep_whose_level_fails_a_share_of_requests_stops_with_the_level_kept_aside() -> None:
    """Every 4th request gets HTTP 503: 25% of each level fails, far above the 1% default."""
    with running_server("--token-ms", "1", "--fail-every", "4") as (base_url, _process):
        sweep = run_sweep(config(base_url, concurrency_levels=(2, 4), repeats=2, warmup_requests=0))
    assert sweep["levels"] == []
    assert sweep["error_kind"] == "requests_failed"
    assert sweep["error"].startswith("concurrency 2: 2 of 8 timed requests failed (25.0%, more than "
                                     "max_failed_share=0.01)"), sweep["error"]
    assert "HTTP 503" in sweep["error"]
    assert sweep["failed_level"]["concurrency"] == 2 and sweep["failed_level"]["summary"]["failed"] == 2


def test_a_tolerated_failed_share_keeps_the_level() -> None:
    with running_server("--token-ms", "1", "--fail-every", "4") as (base_url, _process):
        sweep = run_sweep(config(base_url, concurrency_levels=(2,), repeats=2, warmup_requests=0,
                                 max_failed_share=0.5))
    assert sweep["error"] is None and sweep["error_kind"] is None and sweep["failed_level"] is None
    assert sweep["levels"][0]["summary"]["failed"] == 2


@pytest.mark.parametrize(("overrides", "kind"), [({"api_key": "sk-wrong"}, "auth"), ({}, "unreachable")])
def test_a_stopped_sweep_says_what_kind_of_error_stopped_it(overrides: dict, kind: str) -> None:
    if kind == "unreachable":
        sweep = run_sweep(config(f"http://127.0.0.1:{closed_port()}"))
    else:
        with running_server("--api-key", "sk-right") as (base_url, _process):
            sweep = run_sweep(config(base_url, **overrides))
    assert sweep["error_kind"] == kind


def test_a_stop_rule_decides_how_many_runs_each_level_gets() -> None:
    """After every run the rule is asked; its record is kept with the level, ``ends_sweep`` leaves the rest out."""
    def stop_rule(concurrency: int, runs: list[dict]) -> dict | None:
        if concurrency == 2 and len(runs) == 2:
            return {"decision": "no_change", "reason": "decided"}
        if concurrency == 4 and len(runs) == 1:
            return {"decision": "regressed", "reason": "slower", "ends_sweep": True}
        return None

    with running_server("--ttft-ms", "5", "--token-ms", "1") as (base_url, _process):
        sweep = run_sweep(config(base_url, concurrency_levels=(2, 4, 8), repeats=4), stop_rule=stop_rule)
    assert sweep["error"] is None
    assert [(level["concurrency"], len(level["runs"])) for level in sweep["levels"]] == [(2, 2), (4, 1)]
    assert sweep["levels"][0]["sequential"] == {"decision": "no_change", "reason": "decided"}
    assert sweep["not_measured"] == [{"concurrency": 8, "reason": "C=4 regressed after 1 repeat; the sweep stopped"}]


def test_a_level_the_stop_rule_reopens_is_warmed_up_and_measured_on() -> None:
    """C=2 stops after 2 runs; C=4's stop reopens it (a regression there would now decide the adoption): C=2 warms
    up again, gets its third run, and is listed after C=4; C=8 follows."""
    events: list[dict] = []

    def stop_rule(concurrency: int, runs: list[dict]) -> dict | None:
        if concurrency == 2 and len(runs) in (2, 3):
            return {"decision": "not_improved" if len(runs) == 2 else "not_regressed", "reason": "decided"}
        if concurrency == 4 and len(runs) == 1:
            return {"decision": "improved", "reason": "faster", "reopens": [2]}
        return {"decision": "not_regressed", "reason": "decided"} if concurrency == 8 else None

    with running_server("--ttft-ms", "5", "--token-ms", "1") as (base_url, _process):
        sweep = run_sweep(config(base_url, concurrency_levels=(2, 4, 8), repeats=4), events.append, stop_rule)
    assert sweep["error"] is None
    assert [(level["concurrency"], len(level["runs"])) for level in sweep["levels"]] == [(4, 1), (2, 3), (8, 1)]
    assert [run["repeat"] for run in sweep["levels"][1]["runs"]] == [1, 2, 3]
    starts = [event["concurrency"] for event in events if event["event"] == "level_start"]
    assert starts == [2, 4, 2, 8]


# ---- open-loop arrivals, SLOs and goodput (issue 19, deliverable 1) ------------------------------------------------

def open_loop(base_url: str, **overrides) -> BenchConfig:
    settings = dict(arrival=Arrival(request_rates=(20.0,), process="poisson"), requests_per_level=20,
                    warmup_requests=4, repeats=1, output_len=10)
    settings.update(overrides)
    return config(base_url, **settings)


def test_open_loop_sweep_reports_goodput_against_the_slo_end_to_end() -> None:
    """20 req/s Poisson against 40 ms TTFT + 8 ms/token: a 1 s TTFT target is met by all, a 1 ms TPOT by none."""
    with running_server("--ttft-ms", str(TTFT_MS), "--token-ms", str(TOKEN_MS)) as (base_url, _process):
        met = run_sweep(open_loop(base_url, slo={"ttft_ms": {"target": 1000.0, "percentile": 99},
                                                 "e2e_ms": {"target": 5000.0, "percentile": 50}}))
        missed = run_sweep(open_loop(base_url, slo={"ttft_ms": {"target": 1000.0},
                                                    "tpot_ms": {"target": 1.0, "percentile": 50}}))
    assert met["error"] is None and missed["error"] is None
    assert met["workload"]["arrival"] == {"process": "poisson", "request_rates": [20.0], "burstiness": 1.0,
                                          "max_concurrency": None}
    (level,) = met["levels"]
    assert (level["request_rate"], level["requests"], level["warmup_requests"]) == (20.0, 20, 4)
    assert "concurrency" not in level
    (run,) = level["runs"]
    assert (run["ok"], run["good"], run["slo_attainment"], run["slo_holds"]) == (20, 20, 1.0, True)
    assert run["goodput_rps"] == pytest.approx(20 / run["wall_s"])
    # Poisson arrivals: 19 gaps of 50 ms on average, so the run lasts about a second (seeded, so always the same).
    assert 5.0 < run["achieved_rate_rps"] < 60.0
    assert TTFT_MS <= run["slo"]["ttft_ms"]["observed"] < 1000.0 and run["slo"]["ttft_ms"]["attainment"] == 1.0
    assert run["lag_ms"]["p50"] is not None and run["lag_ms"]["max"] >= run["lag_ms"]["p99"] >= 0.0
    assert run["client_limited"] is False and run["token_mismatch"] == 0
    assert level["open_loop"]["goodput_rps"] == pytest.approx(run["goodput_rps"])
    assert level["open_loop"]["slo_holds"] == {"ttft_ms": True, "e2e_ms": True}
    (missed_run,) = missed["levels"][0]["runs"]
    assert (missed_run["good"], missed_run["goodput_rps"], missed_run["slo_holds"]) == (0, 0.0, False)
    assert missed_run["slo"]["tpot_ms"]["attainment"] == 0.0 and missed_run["slo"]["ttft_ms"]["holds"]


def test_open_loop_multi_turn_resends_history_after_a_shared_prefix_under_a_concurrency_cap() -> None:
    """Prompt tokens seen by the server: turn 1 = 50 + 30, turn 2 = 50 + 30 + 10 (output) + 30."""
    with running_server("--ttft-ms", "5", "--token-ms", "2") as (base_url, _process):
        sweep = run_sweep(open_loop(base_url, input_len=30, requests_per_level=12, warmup_requests=0,
                                    arrival=Arrival(request_rates=(50.0,), max_concurrency=2),
                                    shared_prefix={"system_prompt_len": 50, "requests_per_group": 3},
                                    multi_turn={"turns": 2}))
        stats = server_stats(base_url)
    assert sweep["error"] is None
    (level,) = sweep["levels"]
    (run,) = level["runs"]
    assert (level["requests"], run["ok"]) == (12, 12)
    assert run["input_tokens"] == pytest.approx((80 + 120) / 2)
    assert stats["max_in_flight"] <= 2 and stats["requests"] == 12


def test_open_loop_options_are_checked_before_anything_is_sent() -> None:
    with pytest.raises(ValueError, match="slo apply to open-loop levels only; set arrival.request_rates"):
        BenchConfig(base_url="http://127.0.0.1:1", slo={"ttft_ms": {"target": 100}})
    with pytest.raises(ValueError, match="steady_state needs closed-loop levels"):
        BenchConfig(base_url="http://127.0.0.1:1", arrival=Arrival(request_rates=(1.0,)), steady_state=True)
    plan = BenchConfig(base_url="http://127.0.0.1:1", arrival=Arrival(request_rates=(0.5, 8.0)),
                       multi_turn={"turns": 3}).plan()
    # A minute of arrivals per run, ten seconds of warm-up, at least 4, rounded up to whole 3-turn conversations.
    assert plan == [{"request_rate": 0.5, "warmup_requests": 6, "requests": 30, "repeats": 3},
                    {"request_rate": 8.0, "warmup_requests": 81, "requests": 480, "repeats": 3}]
