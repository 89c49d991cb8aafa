# Copyright (c) llmops.sglang contributors
# Apache License 2.0 (see LICENSE)
"""The bench module run the community.general way: real main(), real HTTP to a local server, SystemExit captured."""
from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from ansible.module_utils.testing import patch_module_args

from ansible_collections.llmops.sglang.plugins.modules import bench
from ansible_collections.llmops.sglang.plugins.module_utils.sweep_stats import SWEEP_HEADER
from tests.unit.plugins.module_utils.fake_sglang_server import running_server, server_stats

# What `python -m sglang.bench_serving` leaves behind, reduced to the part the module reads: one appended JSONL
# line per invocation (the keys of python/sglang/bench_serving.py's result line, commit 0033168f). Used as the
# `python` option so the module's subprocess path runs.
FAKE_BENCH_SERVING = '''#!{python}
import json, os, sys
argv = sys.argv[1:]
assert argv[:2] == ["-m", "sglang.bench_serving"], argv
value = lambda flag: argv[argv.index(flag) + 1]
assert os.environ.get("OPENAI_API_KEY") == "sk-right"
prompts, out_len = int(value("--num-prompts")), int(value("--random-output-len"))
record = {{"backend": value("--backend"), "dataset_name": value("--dataset-name"), "request_rate": float("inf"),
          "max_concurrency": int(value("--max-concurrency")), "random_input_len": int(value("--random-input-len")),
          "random_output_len": out_len, "random_range_ratio": 1.0, "duration": 2.0, "completed": prompts,
          "total_input_tokens": prompts * 300, "total_output_tokens": prompts * out_len,
          "total_output_tokens_retokenized": prompts * out_len, "output_throughput": prompts * out_len / 2.0,
          "mean_e2e_latency_ms": 950.0, "median_e2e_latency_ms": 948.0, "p99_e2e_latency_ms": 990.0,
          "median_ttft_ms": 41.0, "p99_ttft_ms": 60.0, "median_tpot_ms": 4.1, "p99_tpot_ms": 4.4,
          "median_itl_ms": 4.0, "p99_itl_ms": 6.2, "concurrency": 3.9, "accept_length": None}}
with open(value("--output-file"), "a") as stream:
    stream.write(json.dumps(record) + "\\n")
print("============ Serving Benchmark Result ============")
'''


def run_module(args: dict, tmp_path: Path, capsys: pytest.CaptureFixture) -> tuple[int, dict]:
    # Module temp files (bench_serving's JSONL) go under tmp_path, never the real ~/.ansible/tmp.
    args = {"_ansible_remote_tmp": str(tmp_path / "remote_tmp"), "_ansible_keep_remote_files": False, **args}
    with patch_module_args(args), pytest.raises(SystemExit) as exit_info:
        bench.main()
    return exit_info.value.code, json.loads(capsys.readouterr().out)


def small_sweep(base_url: str, **overrides) -> dict:
    args = dict(base_url=base_url, concurrency_levels=[2, 4], repeats=2, input_len=300, output_len=16,
                request_timeout_s=20, level_timeout_s=60)
    args.update(overrides)
    return args


def test_sweep_writes_output_and_progress_files(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    output_file = tmp_path / "runs" / "baseline" / "bench.json"
    with running_server("--ttft-ms", "20", "--token-ms", "2") as (base_url, _process):
        code, result = run_module(small_sweep(base_url, output_file=str(output_file), steady_state=True),
                                  tmp_path, capsys)
        stats = server_stats(base_url)
    assert code == 0, result
    assert result["changed"] is False and "failed" not in result
    sweep = result["sweep"]
    assert sweep["error"] is None and [level["concurrency"] for level in sweep["levels"]] == [2, 4]
    assert all(run["tokens"] == level["requests"] * 16 for level in sweep["levels"] for run in level["runs"])
    assert stats["max_in_flight"] == 4
    assert result["table"].splitlines()[0] == SWEEP_HEADER
    assert result["table"].splitlines()[3].startswith("| 4 | ") and result["table"].endswith(" | 16/16 |")
    assert json.loads(output_file.read_text()) == sweep
    progress = Path(result["progress_file"]).read_text().splitlines()
    assert result["progress_file"] == str(output_file) + ".progress"
    assert [line.split()[1] for line in progress] == [
        "level_start", "run_done", "run_done", "level_done", "level_start", "run_done", "run_done", "level_done",
        "sweep_done"]
    assert "concurrency=4 repeat=2 repeats=2" in progress[6]


def test_check_mode_sends_nothing_and_returns_the_plan(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    output_file = tmp_path / "bench.json"
    with running_server() as (base_url, _process):
        code, result = run_module(small_sweep(base_url, output_file=str(output_file), _ansible_check_mode=True),
                                  tmp_path, capsys)
        assert server_stats(base_url)["requests"] == 0
    assert code == 0 and result["changed"] is False and "sweep" not in result
    assert result["plan"]["levels"] == [
        {"concurrency": 2, "warmup_requests": 4, "requests": 4, "repeats": 2},
        {"concurrency": 4, "warmup_requests": 4, "requests": 8, "repeats": 2},
    ]
    assert not output_file.exists()


def test_wrong_api_key_fails_with_a_message_and_never_echoes_the_key(tmp_path: Path,
                                                                     capsys: pytest.CaptureFixture) -> None:
    with running_server("--api-key", "sk-right") as (base_url, _process):
        code, result = run_module(small_sweep(base_url, api_key="sk-wrong-9f2c"), tmp_path, capsys)
    assert code == 1 and result["failed"] is True
    assert "HTTP 401" in result["msg"] and "API key is wrong" in result["msg"]
    assert result["sweep"]["levels"] == [] and result["sweep"]["error"] in result["msg"]
    assert "sk-wrong-9f2c" not in json.dumps(result)


def test_host_and_port_build_the_url(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    with running_server("--token-ms", "1") as (base_url, _process):
        port = int(base_url.rsplit(":", 1)[1])
        code, result = run_module(dict(host="127.0.0.1", port=port, concurrency_levels=[2], repeats=1,
                                       output_len=8, endpoint="generate"), tmp_path, capsys)
    assert code == 0, result
    assert result["sweep"]["base_url"] == base_url and result["sweep"]["endpoint"] == "generate"
    assert result["progress_file"] is None and result["output_file"] is None


@pytest.mark.parametrize(("args", "message"), [
    (dict(concurrency_levels=[4, 0]), "concurrency_levels must contain positive integers, got 0"),
    (dict(port=30000), "parameters are mutually exclusive: base_url|port"),
    (dict(requests_per_level=2), "requests_per_level=2 cannot keep 4 requests in flight"),
])
def test_bad_options_fail_before_any_request(args: dict, message: str, tmp_path: Path,
                                              capsys: pytest.CaptureFixture) -> None:
    code, result = run_module(small_sweep("http://127.0.0.1:9", **args), tmp_path, capsys)
    assert code == 1 and message in result["msg"]


def test_bad_options_say_they_are_input_errors(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    code, result = run_module(small_sweep("http://127.0.0.1:9", concurrency_levels=[0]), tmp_path, capsys)
    assert code == 1 and result["error_kind"] == "input"


def test_a_level_with_a_failed_share_over_the_limit_fails_the_module(tmp_path: Path,
                                                                     capsys: pytest.CaptureFixture) -> None:
    """Issue 15 item 6: most requests failing used to give a throughput number and error null."""
    with running_server("--token-ms", "1", "--fail-every", "2") as (base_url, _process):
        code, result = run_module(small_sweep(base_url, warmup_requests=0), tmp_path, capsys)
    assert code == 1 and result["error_kind"] == "requests_failed"
    assert result["msg"].startswith("benchmark stopped early: concurrency 2: 4 of 8 timed requests failed (50.0%, "
                                    "more than max_failed_share=0.01); sample errors: ['HTTP 503"), result["msg"]
    assert result["sweep"]["levels"] == [] and result["sweep"]["failed_level"]["concurrency"] == 2


def test_server_gone_fails_and_keeps_the_partial_sweep_in_the_output_file(tmp_path: Path,
                                                                          capsys: pytest.CaptureFixture) -> None:
    with running_server() as (base_url, _process):
        pass  # started and stopped: the port is now closed
    output_file = tmp_path / "bench.json"
    code, result = run_module(small_sweep(base_url, output_file=str(output_file)), tmp_path, capsys)
    assert code == 1 and result["msg"].startswith(f"benchmark stopped early: cannot connect to {base_url}")
    assert json.loads(output_file.read_text())["error"] == result["sweep"]["error"]
    assert "cannot connect" in Path(result["progress_file"]).read_text()


def test_bench_serving_engine_maps_its_results_into_the_sweep(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    fake_python = tmp_path / "bin" / "python"
    fake_python.parent.mkdir()
    fake_python.write_text(FAKE_BENCH_SERVING.format(python=sys.executable))
    fake_python.chmod(0o755)
    with running_server("--api-key", "sk-right") as (base_url, _process):
        code, result = run_module(small_sweep(base_url, engine="sglang_bench_serving", python=str(fake_python),
                                              api_key="sk-right"), tmp_path, capsys)
    assert code == 0, result
    sweep = result["sweep"]
    assert sweep["engine"] == "sglang_bench_serving" and sweep["model"] == "/models/Qwen3.5-122B-A10B"
    assert [[run["agg_tok_s"] for run in level["runs"]] for level in sweep["levels"]] == [[32.0, 32.0], [64.0, 64.0]]
    assert sweep["levels"][1]["runs"][0]["ttft_ms"] == {"p50": 41.0, "p90": None, "p99": 60.0}


def reference_sweep(agg_tok_s: float, levels: tuple[int, ...] = (2, 4)) -> dict:
    """A reference far from what the fake server does, so every look is decided at once."""
    return {"levels": [{"concurrency": c, "runs": [{"agg_tok_s": agg_tok_s * m} for m in (0.99, 1.0, 1.01)]}
                       for c in levels]}


def test_against_a_much_faster_reference_the_first_level_regresses_and_ends_the_sweep(
        tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    output_file = tmp_path / "candidate.json"
    with running_server("--ttft-ms", "20", "--token-ms", "2") as (base_url, _process):
        code, result = run_module(small_sweep(base_url, reference_sweep=reference_sweep(1e6), output_file=str(output_file),
                                              sequential={"min_repeats": 2, "max_repeats": 6}), tmp_path, capsys)
    assert code == 0, result
    sweep = result["sweep"]
    assert [(level["concurrency"], len(level["runs"])) for level in sweep["levels"]] == [(2, 2)]
    assert sweep["levels"][0]["sequential"]["decision"] == "regressed"
    assert sweep["not_measured"] == [{"concurrency": 4, "reason": "C=2 regressed after 2 repeats; the sweep stopped"}]
    assert sweep["sequential"]["design"]["max_repeats"] == 6 and sweep["repeats"] == 6
    assert sweep["sequential"]["reference_runs"] == {"2": 3, "4": 3}
    assert result["plan"]["sequential"] == sweep["sequential"]["design"]
    assert json.loads(output_file.read_text()) == sweep
    progress = Path(result["progress_file"]).read_text()
    assert "level_stopped concurrency=2 repeats=2 decision=regressed reason=regressed: t = -" in progress


def test_against_a_much_slower_reference_every_level_improves_at_min_repeats(
        tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    with running_server("--ttft-ms", "20", "--token-ms", "2") as (base_url, _process):
        code, result = run_module(small_sweep(base_url, reference_sweep=reference_sweep(1.0)), tmp_path, capsys)
    assert code == 0, result
    levels = result["sweep"]["levels"]
    assert [(level["concurrency"], len(level["runs"]), level["sequential"]["decision"]) for level in levels] == [
        (2, 2, "improved"), (4, 2, "improved")]
    assert result["sweep"]["not_measured"] == []


def test_check_mode_with_a_reference_plans_the_rule_and_sends_nothing(tmp_path: Path,
                                                                    capsys: pytest.CaptureFixture) -> None:
    with running_server() as (base_url, _process):
        code, result = run_module(small_sweep(base_url, reference_sweep=reference_sweep(1.0), _ansible_check_mode=True),
                                  tmp_path, capsys)
        assert server_stats(base_url)["requests"] == 0
    assert code == 0 and "sweep" not in result
    assert result["plan"]["sequential"]["min_repeats"] == 2 and result["plan"]["levels"][0]["repeats"] == 10


@pytest.mark.parametrize(("args", "message"), [
    (dict(reference_sweep=reference_sweep(1.0, levels=(2,))),
     "reference_sweep has no level with concurrency 4 (it has [2])"),
    (dict(reference_sweep={"levels": [{"concurrency": c, "runs": [{"agg_tok_s": 1.0}]} for c in (2, 4)]}),
     "reference_sweep.levels[0] (concurrency 2) has 1 run(s); a sequential verdict needs at least 2"),
    (dict(reference_sweep=reference_sweep(1.0), sequential={"min_repeats": 4, "max_repeats": 3}),
     "sequential.min_repeats must be an integer from 1 to 3, got 4"),
    (dict(reference_sweep=reference_sweep(1.0), sequential={"beta": 0.7}),
     "sequential.beta must be a number above 0 and below 0.5, got 0.7"),
    (dict(reference_sweep=reference_sweep(1.0), sequential={"alpha": 0}), "sequential.alpha must be between 0 and 1"),
    (dict(sequential={"min_repeats": 2}), "missing parameter(s) required by 'sequential': reference_sweep"),
])
def test_a_stopping_rule_that_cannot_work_fails_before_any_request(args: dict, message: str, tmp_path: Path,
                                                                  capsys: pytest.CaptureFixture) -> None:
    code, result = run_module(small_sweep("http://127.0.0.1:9", **args), tmp_path, capsys)
    assert code == 1 and message in result["msg"], result["msg"]
    assert result.get("error_kind", "input") == "input"


# ---- open-loop levels (issue 19, deliverable 1) --------------------------------------------------------------------

def open_loop_args(base_url: str, **overrides) -> dict:
    args = dict(base_url=base_url, arrival={"request_rates": [40.0], "process": "gamma", "burstiness": 0.5},
                requests_per_level=12, warmup_requests=0, repeats=1, output_len=8, request_timeout_s=20,
                level_timeout_s=60)
    args.update(overrides)
    return args


def test_open_loop_module_samples_lengths_from_a_file_and_reports_goodput(tmp_path: Path,
                                                                         capsys: pytest.CaptureFixture) -> None:
    requests = tmp_path / "requests.jsonl"
    requests.write_text('{"input_tokens": 40, "output_tokens": 6}\n{"input_tokens": 40, "output_tokens": 6}\n')
    with running_server("--ttft-ms", "5", "--token-ms", "2") as (base_url, _process):
        code, result = run_module(open_loop_args(base_url, lengths={"distribution": "file", "file": str(requests)},
                                                 slo={"ttft_ms": {"target": 2000}}), tmp_path, capsys)
    assert code == 0, result
    sweep = result["sweep"]
    assert sweep["workload"]["lengths"]["file_requests"] == 2
    assert sweep["workload"]["slo"] == {"ttft_ms": {"target": 2000.0, "percentile": 99.0}}
    (run,) = sweep["levels"][0]["runs"]
    assert (run["ok"], run["tokens"], run["input_tokens"], run["token_mismatch"]) == (12, 12 * 6, 40, 0)
    assert run["good"] == 12 and run["slo_holds"] is True
    header, _rule, row = result["table"].splitlines()
    assert header.startswith("| Rate (req/s) | Achieved (req/s) | Goodput (req/s) | SLO met |")
    cells = row.strip("|").split(" | ")
    assert (cells[0].strip(), cells[3], cells[-1].strip()) == ("40", "100.0%", "12/12")


def test_open_loop_check_mode_plans_rates_and_the_workload(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    code, result = run_module(open_loop_args("http://127.0.0.1:9", requests_per_level=None, _ansible_check_mode=True,
                                             multi_turn={"turns": 2}), tmp_path, capsys)
    assert code == 0 and "sweep" not in result
    assert result["plan"]["levels"] == [{"request_rate": 40.0, "warmup_requests": 0, "requests": 2400, "repeats": 1}]
    assert result["plan"]["workload"]["multi_turn"] == {"turns": 2}


@pytest.mark.parametrize(("overrides", "message"), [
    (dict(engine="sglang_bench_serving"), "arrival (open-loop levels) needs engine=native"),
    (dict(lengths={"distribution": "uniform", "input_min": 5, "input_max": 2, "output_min": 1, "output_max": 1}),
     "lengths.input_min (5) must not exceed lengths.input_max (2)"),
    (dict(slo={"ttft_ms": {"target": 100, "percentile": 0}}), "slo.ttft_ms.percentile must be a number > 0"),
    (dict(arrival=None, requests_per_level=None, slo={"e2e_ms": {"target": 100}}),
     "slo apply to open-loop levels only"),
])
def test_open_loop_options_fail_as_input_errors(overrides: dict, message: str, tmp_path: Path,
                                                capsys: pytest.CaptureFixture) -> None:
    code, result = run_module(open_loop_args("http://127.0.0.1:9", **overrides), tmp_path, capsys)
    assert code == 1 and message in result["msg"] and result["error_kind"] == "input"


def test_a_bad_line_in_the_lengths_file_fails_naming_line_and_field(tmp_path: Path,
                                                                   capsys: pytest.CaptureFixture) -> None:
    requests = tmp_path / "requests.jsonl"
    requests.write_text('{"input_tokens": 40, "output_tokens": 6}\n{"input_tokens": 40, "output_tokens": -1}\n')
    code, result = run_module(open_loop_args("http://127.0.0.1:9", lengths={"distribution": "file",
                                                                           "file": str(requests)}), tmp_path, capsys)
    assert code == 1 and result["error_kind"] == "input"
    assert result["msg"] == f"lengths.file {requests} line 2: output_tokens must be an integer >= 1, got -1"


@pytest.mark.parametrize(("overrides", "message"), [
    (dict(warmup_output_len=0), "warmup_output_len must be a number >= 1, got 0"),
    (dict(engine="sglang_bench_serving", warmup_output_len=64),
     "warmup_output_len: sglang.bench_serving warms up with min(output_len, 32) tokens of its own"),
])
def test_a_wrong_warm_up_length_fails_before_any_request(overrides: dict, message: str, tmp_path: Path,
                                                         capsys: pytest.CaptureFixture) -> None:
    code, result = run_module(small_sweep("http://127.0.0.1:9", **overrides), tmp_path, capsys)
    assert code == 1 and message in result["msg"] and result["error_kind"] == "input"
