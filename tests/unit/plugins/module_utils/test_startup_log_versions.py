"""Startup-log formats of SGLang 0.5.10 .. 0.5.23 and logs as users have them (issue #16 items 3, 5, 9).

Lines follow the releases' format strings (file and release named at each); tests/conformance checks
the same parser against text written from the real wheels' own strings.
"""
from __future__ import annotations

import html

import pytest

from ansible_collections.llmops.sglang.plugins.module_utils.server_diff import diff_server_facts
from ansible_collections.llmops.sglang.plugins.module_utils.startup_log import parse_startup_log, strip_prefix

MODEL = "/srv/models/Qwen3.5-122B-A10B"
CFG = "/opt/sglang/venv/lib/python3.11/site-packages/sglang/srt/layers/moe/moe_runner/triton_utils/configs/triton_3_6_0/"
UP = CFG + "E=256,N=256,device_name=NVIDIA_RTX_PRO_6000_Blackwell_Server_Edition.json"
DOWN = CFG + "E=256,N=256,device_name=NVIDIA_RTX_PRO_6000_Blackwell_Server_Edition_down.json"

# 0.5.23 sglang/srt/entrypoints/engine.py: logger.info(f"server_args={_server_args_for_logging(server_args)}")
DICT_ARGS = (
    f"server_args={{'model_path': '{MODEL}', 'tokenizer_path': '{MODEL}', 'tp_size': 4, 'dp_size': 1, "
    "'mem_fraction_static': 0.81, 'max_running_requests': 48, 'chunked_prefill_size': 8192, "
    "'attention_backend': 'triton', 'speculative_algorithm': 'EAGLE', 'speculative_num_steps': 3, "
    "'speculative_eagle_topk': 1, 'speculative_num_draft_tokens': 4, 'cuda_graph_backend_decode': 'full', "
    "'cuda_graph_backend_prefill': 'disabled', 'cuda_graph_max_bs_decode': 48, "
    "'cuda_graph_config': {'decode': {'backend': 'full', 'bs': [1, 2, 4]}, 'prefill': {'backend': 'disabled'}}, "
    "'load_format': <LoadFormat.AUTO: 'auto'>, 'api_key': 'sk-secret', 'json_model_override_args': '{\"a\": [1, 2]}'}}"
)
CALL_ARGS = (  # 0.5.11 engine.py: logger.info(f"{server_args=}") (the dataclass repr)
    f"server_args=ServerArgs(model_path='{MODEL}', tokenizer_path='{MODEL}', tp_size=4, dp_size=1, "
    "mem_fraction_static=0.81, max_running_requests=48, chunked_prefill_size=8192, attention_backend='triton', "
    "speculative_algorithm='EAGLE', speculative_num_steps=3, speculative_eagle_topk=1, speculative_num_draft_tokens=4, "
    "cuda_graph_max_bs=48, disable_piecewise_cuda_graph=True, api_key='sk-secret', "
    "json_model_override_args='{\"a\": [1, 2]}')"
)
COMMON = {"model_path": MODEL, "tp_size": 4, "mem_fraction_static": 0.81, "max_running_requests": 48,
          "attention_backend": "triton", "speculative_algorithm": "EAGLE", "speculative_num_steps": 3,
          "speculative_eagle_topk": 1, "speculative_num_draft_tokens": 4}


def log_0523(args_line: str = DICT_ARGS) -> str:
    """A 0.5.23 start: the dict dump, per-rank capture lines of cuda_graph_setup.py, the post-capture KV
    line of kv_pool_runtime.py, the 0.5.16+ down-kernel reuse message of fused_moe_triton_config.py."""
    lines = [f"[2026-11-30 10:00:01] {args_line}"]
    for rank in range(4):
        lines += [
            f"[2026-11-30 10:00:05 TP{rank}] Load weight begin. avail mem=94.12 GB",
            f"[2026-11-30 10:01:20 TP{rank}] Load weight end. elapsed=75.02 s, type=Qwen3_5MoeForCausalLM, "
            "avail mem=37.31 GB, mem usage=56.81 GB.",
            f"[2026-11-30 10:01:22 TP{rank}] KV Cache is allocated. dtype: torch.bfloat16, #tokens: 900000, "
            "K size: 5.00 GB, V size: 5.00 GB",
            f"[2026-11-30 10:01:22 TP{rank}] Memory pool end. avail mem=20.10 GB",
            f"[2026-11-30 10:01:23 TP{rank}] Using MoE kernel config from {UP}.",
            f"[2026-11-30 10:01:23 TP{rank}] Down MoE config file not found at {DOWN}; reusing the tuned "
            "up-projection config without TMA. Performance might be sub-optimal.",
            f"[2026-11-30 10:01:37 TP{rank}] Capture target verify CUDA graph end. bs=[1, 2, 4], elapsed=14.02 s, "
            "mem usage=0.80 GB, avail mem=19.30 GB.",
            f"[2026-11-30 10:01:38 TP{rank}] Disable prefill CUDA graph because cuda_graph_config resolved "
            "prefill.backend='disabled' (e.g. via --cuda-graph-backend-prefill=disabled or auto-disable rules).",
            f"[2026-11-30 10:01:39 TP{rank}] Post-capture KV sizing: KV cache allocated. dtype: torch.bfloat16, "
            "#tokens: 884397, KV size: 9.80 GB, avail mem=4.10 GB",
        ]
    lines += [
        "[2026-11-30 10:01:40 TP0] max_total_num_tokens=884397, chunked_prefill_size=8192, max_prefill_tokens=16384, "
        "max_running_requests=48, context_len=262144, available_gpu_mem=4.10 GB",
        "[2026-11-30 10:01:45] The server is fired up and ready to roll!",
    ]
    return "\n".join(lines) + "\n"


def test_dict_dump_of_0_5_20_plus_gives_the_same_facts_as_the_repr():
    new, old = parse_startup_log(log_0523()), parse_startup_log(log_0523(CALL_ARGS))
    for facts in (new, old):
        assert {name: facts[name] for name in COMMON} == COMMON
        assert facts["server_args"]["api_key"] == "<redacted>"
        assert facts["server_args"]["json_model_override_args"] == '{"a": [1, 2]}'
        assert "server_args_truncated" not in facts
    # each release's own names for the CUDA graphs (sglang_names)
    assert new["cuda_graph_backend_prefill"] == "disabled" and new["cuda_graph_max_bs_decode"] == 48
    assert "disable_piecewise_cuda_graph" not in new
    assert old["disable_piecewise_cuda_graph"] is True and old["cuda_graph_max_bs"] == 48
    assert new["server_args"]["cuda_graph_config"] == {"decode": {"backend": "full", "bs": [1, 2, 4]},
                                                        "prefill": {"backend": "disabled"}}
    assert new["server_args"]["load_format"] == "auto"  # an enum member is its value


def test_0_5_23_runtime_lines():
    facts = parse_startup_log(log_0523())
    assert facts["ready"] is True and facts["error"] is None
    assert facts["kv_cache_tokens"] == 884397  # the post-capture resize, not the first allocation
    assert facts["kv_cache_dtype"] == "torch.bfloat16"
    assert facts["max_total_num_tokens"] == 884397
    assert facts["prefill_cuda_graph_disabled_reason"].startswith("cuda_graph_config resolved prefill.backend='disabled'")
    assert facts["timings"]["cuda_graph_capture"] == 14.02 and facts["timings"]["load_weights"] == 75.02
    assert facts["timings"]["total"] == 104.0


def test_down_kernel_reuse_message_of_0_5_17_is_the_down_kernel():
    facts = parse_startup_log(log_0523())
    by_kernel = {entry["kernel"]: entry for entry in facts["moe_configs"]}
    assert by_kernel["up"] == {"kernel": "up", "status": "used", "path": UP, "fallback_path": None}
    assert by_kernel["down"] == {"kernel": "down", "status": "missing", "path": DOWN, "fallback_path": None,
                                 "reuses_up_config": True}
    assert facts["missing_moe_configs"] == [DOWN]
    assert any(warning.startswith("Down MoE config file not found") for warning in facts["warnings"])


def test_default_config_message_naming_a_down_file_is_the_down_kernel():
    # 0.5.16+ fused_moe_triton_config.py logs the default-config text for down_moe=True too
    text = ("Using default MoE kernel config. Performance might be sub-optimal! Config file not found at {}, you can "
            "create them with https://github.com/sgl-project/sglang/tree/main/benchmark/kernels/fused_moe_triton")
    facts = parse_startup_log(f"[2026-11-30 10:01:23 TP0] {text.format(UP)}\n[2026-11-30 10:01:23 TP0] {text.format(DOWN)}\n")
    assert [(e["kernel"], e["status"]) for e in facts["moe_configs"]] == [("up", "missing"), ("down", "missing")]


def test_old_release_capture_lines():
    """0.5.11 model_runner.py: `Capture cuda graph end. Time elapsed: ...`, piecewise capture / disable lines;
    0.5.14: `Capture target decode cuda graph end. elapsed=...`, `Capture target prefill CUDA graph end.`"""
    old = parse_startup_log(
        "[2026-05-01 10:00:00 TP0] Capture cuda graph end. Time elapsed: 12.50 s. mem usage=0.80 GB. avail mem=9.00 GB.\n"
        "[2026-05-01 10:00:30 TP0] Capture piecewise CUDA graph end. Time elapsed: 20.25 s. mem usage=0.60 GB. "
        "avail mem=8.40 GB.\n")
    assert old["timings"] == {"cuda_graph_capture": 12.5, "piecewise_cuda_graph_capture": 20.25}
    new = parse_startup_log(
        "[2026-07-01 10:00:00 TP0] Capture target decode cuda graph end. elapsed=11.00 s, mem usage=0.80 GB, "
        "avail mem=9.00 GB.\n"
        "[2026-07-01 10:00:20 TP0] Capture target prefill CUDA graph end. elapsed=19.00 s, mem usage=0.60 GB, "
        "avail mem=8.40 GB.\n"
        "[2026-07-01 10:00:21 TP0] Capture draft decode cuda graph end. elapsed=2.00 s, mem usage=0.10 GB, "
        "avail mem=8.30 GB.\n")
    assert new["timings"] == {"cuda_graph_capture": 11.0, "prefill_cuda_graph_capture": 19.0,
                              "draft_cuda_graph_capture": 2.0}


@pytest.mark.parametrize(("line", "backend"), [
    ("Attention backend not specified. Use flashinfer backend by default.", "flashinfer"),  # 0.5.10+ server_args.py
    ("Attention backend not set. Use triton backend by default.", "triton"),  # older
    ("Attention backend not specified. Falling back to 'fa3' for deterministic inference. You can explicitly set "
     "--attention-backend to one of ['fa3', 'triton'].", "fa3"),
])
def test_attention_backend_default_lines(line, backend):
    assert parse_startup_log(f"[2026-11-30 10:00:01] {line}\n")["attention_backend"] == backend


# --- logs as users have them -------------------------------------------------------------------------------

def _wrapped(prefix: str) -> str:
    return "".join(prefix + line + "\n" for line in log_0523().splitlines())


@pytest.mark.parametrize("prefix", [
    "sglang-1  | ",  # docker compose
    "llm-server-7f9c | ",  # container name column
    "Nov 30 10:00:01 gpu1 sglang[4242]: ",  # journalctl --output=short
    "Nov 30 10:00:01.123456 gpu1 python3[4242]: ",  # --output=short-precise
    "2026-11-30T10:00:01+0000 gpu1 sglang[4242]: ",  # --output=short-iso
    "2026-11-30T10:00:01.123456789Z ",  # docker logs -t
    "sglang-1  | 2026-11-30T10:00:01.123456789Z ",  # docker compose logs -t
    "[rank0]: ",  # torchrun
])
def test_transport_prefixes(prefix):
    facts = parse_startup_log(_wrapped(prefix))
    assert {name: facts[name] for name in COMMON} == COMMON
    assert facts["ready"] and facts["kv_cache_tokens"] == 884397 and len(facts["moe_configs"]) == 2


def test_time_only_prefixes_with_ranks():
    text = log_0523().replace("[2026-11-30 ", "[")
    facts = parse_startup_log(text)
    assert {name: facts[name] for name in COMMON} == COMMON
    assert facts["timings"]["total"] == 104.0 and facts["timings"]["load_weights"] == 75.02
    assert strip_prefix("[10:00:01.250 TP2] Load weight begin.")[1:] == ({"TP": 2}, "Load weight begin.")


def test_python_logging_wrappers():
    """A launcher that set up logging itself: basicConfig's `LEVEL:name:` and `asctime - name - LEVEL - `."""
    body = [line.split("] ", 1)[1] for line in log_0523().splitlines()]
    basic = "".join(f"INFO:sglang.srt.entrypoints.engine:{line}\n" for line in body)
    basic += "WARNING:sglang.srt.server_args:Max running requests is reset to 48 for speculative decoding.\n"
    facts = parse_startup_log(basic)
    assert {name: facts[name] for name in COMMON} == COMMON and facts["ready"]
    assert "Max running requests is reset to 48 for speculative decoding." in facts["warnings"]
    dated = "".join(f"2026-11-30 10:00:{index % 60:02d},123 - sglang.srt.x - INFO - {line}\n"
                    for index, line in enumerate(body))
    facts = parse_startup_log(dated)
    assert {name: facts[name] for name in COMMON} == COMMON and facts["kv_cache_tokens"] == 884397


def test_html_escaped_log():
    """Copied out of a web UI: quotes and brackets as entities."""
    escaped = html.escape(log_0523(), quote=True)
    assert "&#x27;" in escaped or "&#39;" in escaped
    facts = parse_startup_log(escaped)
    assert {name: facts[name] for name in COMMON} == COMMON and facts["server_args"]["load_format"] == "auto"


@pytest.mark.parametrize("width", [120, 997, 4096])
def test_dump_split_over_lines(width):
    """journald splits lines longer than LineMax (each piece gets its own prefix); terminals wrap."""
    args = DICT_ARGS
    pieces = [args[i:i + width] for i in range(0, len(args), width)]
    split = "".join(f"Nov 30 10:00:01 gpu1 sglang[4242]: {piece}\n"
                    for piece in ["[2026-11-30 10:00:01] " + pieces[0], *pieces[1:]])
    text = split + "".join(line + "\n" for line in log_0523().splitlines()[1:])
    facts = parse_startup_log(text)
    assert {name: facts[name] for name in COMMON} == COMMON
    assert "server_args_truncated" not in facts and facts["error"] is None


def test_older_releases_split_argument_dump():
    """A repr printed one field per line (the dump continues on unprefixed lines until it closes)."""
    fields = CALL_ARGS[len("server_args=ServerArgs("):-1].split(", ")
    text = ("[2026-05-01 10:00:01] server_args=ServerArgs(\n" + "".join(f"    {field},\n" for field in fields)
            + ")\n[2026-05-01 10:00:02 TP0] Load weight begin. avail mem=94.12 GB\n")
    facts = parse_startup_log(text)
    assert {name: facts[name] for name in COMMON} == COMMON and "server_args_truncated" not in facts


def test_cut_dump_stays_truncated():
    text = "[2026-11-30 10:00:01] " + DICT_ARGS[:300] + "\n[2026-11-30 10:00:05 TP0] Load weight begin. avail mem=1 GB\n"
    facts = parse_startup_log(text)
    assert facts["server_args_truncated"] is True and facts["model_path"] == MODEL


# --- side-effect diff on both dump formats -------------------------------------------------------------------

@pytest.mark.parametrize(("baseline_args", "candidate_args", "changed"), [
    (CALL_ARGS.replace("disable_piecewise_cuda_graph=True", "disable_piecewise_cuda_graph=False"), CALL_ARGS,
     "disable_piecewise_cuda_graph"),
    (DICT_ARGS.replace("'cuda_graph_backend_prefill': 'disabled'", "'cuda_graph_backend_prefill': 'tc_piecewise'"),
     DICT_ARGS, "cuda_graph_backend_prefill"),
])
def test_server_made_changes_are_reported_in_both_formats(baseline_args, candidate_args, changed):
    baseline, candidate = parse_startup_log(log_0523(baseline_args)), parse_startup_log(log_0523(candidate_args))
    requested = {"tp_size": 4, "speculative_algorithm": "EAGLE", "enable_flashinfer_allreduce_fusion": True}
    diff = diff_server_facts(baseline, candidate, {"tp_size": 4, "speculative_algorithm": "EAGLE"}, requested)
    assert [entry["arg"] for entry in diff["auto_adjusted"]] == [changed]
    assert diff["summary_lines"][0].startswith(f"{changed} set by the server (not requested): ")


def test_request_in_old_names_is_compared_in_the_release_names():
    """`disable_piecewise_cuda_graph: true` on 0.5.14+ is cuda_graph_backend_prefill=disabled: not a server change."""
    baseline = parse_startup_log(log_0523(DICT_ARGS.replace("'disabled'}", "'tc_piecewise'}").replace(
        "'cuda_graph_backend_prefill': 'disabled'", "'cuda_graph_backend_prefill': 'tc_piecewise'")))
    candidate = parse_startup_log(log_0523())
    diff = diff_server_facts(baseline, candidate, {}, {"disable_piecewise_cuda_graph": True})
    assert diff["auto_adjusted"] == []
    wrong = diff_server_facts(baseline, candidate, {}, {"enforce_piecewise_cuda_graph": True})
    assert wrong["summary_lines"][0] == "cuda_graph_backend_prefill requested 'tc_piecewise' but the server used 'disabled'"


# --- failures as an operator reads them -----------------------------------------------------------------------

def _traceback(*lines: str) -> str:
    return "[2026-11-30 10:00:09 TP0] Scheduler hit an exception: Traceback (most recent call last):\n" + "".join(
        f"{line}\n" for line in lines) + "[2026-11-30 10:00:10] Received sigquit from a child process. It usually means the child failed.\n"


@pytest.mark.parametrize(("lines", "kind"), [
    (('  File "/x/sglang/srt/model_executor/model_runner.py", line 300, in init_torch_distributed',
      "RuntimeError: CUDA error: invalid device ordinal"), "gpu_unavailable"),
    (("RuntimeError: No CUDA GPUs are available",), "gpu_unavailable"),
    # a build without this GPU's architecture: not the GPU being unavailable
    (("RuntimeError: CUDA error: no kernel image is available for execution on the device",), "arch_unsupported"),
    (('  File "/x/sglang/srt/layers/moe/moe_runner/triton_utils/fused_moe_triton_config.py", line 264, in try_get_optimal_moe_config',
      '    down_config is None or config["BLOCK_SIZE_M"] == down_config["BLOCK_SIZE_M"]', "AssertionError"), "moe_config_error"),
    (("OSError: /srv/models/x does not appear to have a file named config.json. Checkout "
      "'https://huggingface.co//srv/models/x/tree/None' for available files.",), "model_error"),
    (("ValueError: Model architectures ['FooForCausalLM'] are not supported for now. Supported architectures: ...",),
     "model_error"),
    (("torch.distributed.DistBackendError: NCCL error in: ../torch/csrc/distributed/c10d/NCCLUtils.hpp:317, "
      "unhandled system error (run with NCCL_DEBUG=INFO for details), NCCL version 2.27.3",), "nccl_error"),
    (("ImportError: /x/sgl_kernel/common_ops.abi3.so: undefined symbol: _ZN3c104cuda9SetDeviceEi",), "install_error"),
    (("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB.",), "oom"),
    (("RuntimeError: CUDA error: an illegal memory access was encountered",), "cuda_error"),
    (("ValueError: --tp-size 3 must divide the number of attention heads",), "config_error"),
    (("KeyError: 'rope_theta'",), "unknown_traceback"),  # no cause named: the generic kind, not the sigquit's
])
def test_error_kind_is_the_cause_to_fix(lines, kind):
    error = parse_startup_log(_traceback(*lines))["error"]
    assert error["kind"] == kind, error
    assert error["suggestion"] or kind in ("cuda_error", "config_error", "unknown_traceback")


@pytest.mark.parametrize("width", [80, 100, 131])
def test_lines_wrapped_at_a_terminal_width(width):
    """A log copied from a terminal or a viewer that wraps at its width: the long MoE and scheduler lines go on
    over unprefixed lines; the dump too. The facts are those of the unwrapped log."""
    wrapped = "".join(
        "".join(line[i:i + width] + "\n" for i in range(0, len(line), width)) for line in log_0523().splitlines())
    expected, facts = parse_startup_log(log_0523()), parse_startup_log(wrapped)
    for name in (*COMMON, "max_total_num_tokens", "kv_cache_tokens", "moe_configs", "missing_moe_configs", "ready"):
        assert facts[name] == expected[name], name
    assert "server_args_truncated" not in facts and facts["error"] is None
