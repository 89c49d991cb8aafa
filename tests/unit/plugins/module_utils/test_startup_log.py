# Copyright (c) llmops.sglang contributors
# Apache License 2.0 (see LICENSE)
"""Tests for the SGLang startup-log parser on the logs under tests/fixtures/logs (see its README)."""
from __future__ import annotations

import datetime
import json
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ansible_collections.llmops.sglang.plugins.module_utils.startup_log import (
    parse_server_args,
    parse_startup_log,
    strip_prefix,
)

LOGS = Path(__file__).resolve().parents[3] / "fixtures" / "logs"
FIXTURE_NAMES = sorted(path.name for path in LOGS.glob("*.log"))
NEW_CONFIGS = "/opt/sglang/venv/lib/python3.12/site-packages/sglang/srt/layers/moe/moe_runner/triton_utils/configs/"
RTX_UP = NEW_CONFIGS + "triton_3_6_0/E=256,N=256,device_name=NVIDIA_RTX_PRO_6000_Blackwell_Server_Edition.json"
RTX_DOWN = NEW_CONFIGS + "triton_3_6_0/E=256,N=256,device_name=NVIDIA_RTX_PRO_6000_Blackwell_Server_Edition_down.json"
H100_DIR = "/sgl-workspace/sglang/python/sglang/srt/layers/moe/moe_runner/triton_utils/configs/triton_3_5_1/"
SPEC_RESET = ("Max running requests is reset to 48 for speculative decoding. You can override this by explicitly "
              "setting --max-running-requests.")
ERROR_KINDS = {"port_in_use", "oom", "gpu_unavailable", "moe_config_error", "model_error", "install_error", "nccl_error",
               "cuda_error", "warmup_failed", "config_error", "runtime_error", "unknown_traceback"}


def read_log(name: str) -> str:
    return (LOGS / name).read_text(encoding="utf-8")


def facts_of(name: str) -> dict:
    return parse_startup_log(read_log(name))


# --- strip_prefix --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("line", "timestamp", "ranks", "message"),
    [
        ("[2026-03-09 21:31:15 TP0] Load weight begin. avail mem=93.90 GB",
         datetime.datetime(2026, 3, 9, 21, 31, 15), {"TP": 0}, "Load weight begin. avail mem=93.90 GB"),
        ("[2026-03-09 21:31:15.042 TP3] Capture cuda graph end. Time elapsed: 9.87 s.",
         datetime.datetime(2026, 3, 9, 21, 31, 15, 42000), {"TP": 3}, "Capture cuda graph end. Time elapsed: 9.87 s."),
        ("[2025-11-04 05:27:13 DP0 TP0 EP0] KV Cache is allocated. #tokens: 1260352, KV size: 82.52 GB",
         datetime.datetime(2025, 11, 4, 5, 27, 13), {"DP": 0, "TP": 0, "EP": 0},
         "KV Cache is allocated. #tokens: 1260352, KV size: 82.52 GB"),
        ("[2026-05-01 10:00:00 PP1 TP0] Init torch distributed begin.",
         datetime.datetime(2026, 5, 1, 10, 0, 0), {"PP": 1, "TP": 0}, "Init torch distributed begin."),
        ("[2026-05-01 10:00:00 DP1 ATTN_CP0 MOE_DP1 TP5 EP5] Memory pool end. avail mem=10.31 GB",
         datetime.datetime(2026, 5, 1, 10, 0, 0), {"DP": 1, "ATTN_CP": 0, "MOE_DP": 1, "TP": 5, "EP": 5},
         "Memory pool end. avail mem=10.31 GB"),
        ("[2026-04-27 02:36:29] INFO:     Uvicorn running on http://127.0.0.1:30000 (Press CTRL+C to quit)",
         datetime.datetime(2026, 4, 27, 2, 36, 29), None,
         "INFO:     Uvicorn running on http://127.0.0.1:30000 (Press CTRL+C to quit)"),
        ("Mar 09 21:31:15 gpu-node-01 sglang[48390]: [2026-03-09 21:31:15 TP0] Init torch distributed begin.",
         datetime.datetime(2026, 3, 9, 21, 31, 15), {"TP": 0}, "Init torch distributed begin."),
        ("Mar 09 21:31:15 gpu-node-01 python3[51007]:   File \"/opt/x.py\", line 3, in <module>",
         None, None, "  File \"/opt/x.py\", line 3, in <module>"),
        ("2026-03-09T21:31:15+0000 gpu-node-01 python3[51007]: [2026-03-09 21:31:16] The server is fired up and ready to roll!",
         datetime.datetime(2026, 3, 9, 21, 31, 16), None, "The server is fired up and ready to roll!"),
        ("2026-03-09T21:31:15.123456+0100 gpu-node-01 sglang[7]: Max running requests is reset to 48 for speculative decoding.",
         datetime.datetime(2026, 3, 9, 21, 31, 15, 123456), None, "Max running requests is reset to 48 for speculative decoding."),
        ("2026-04-27T02:35:12.506007919Z [2026-04-27 02:35:12.506 TP1] Load weight begin. avail mem=78.52 GB",
         datetime.datetime(2026, 4, 27, 2, 35, 12, 506000), {"TP": 1}, "Load weight begin. avail mem=78.52 GB"),
        ("2026-04-27T02:35:12.506007919Z Loading safetensors checkpoint shards: 100% Completed | 16/16",
         datetime.datetime(2026, 4, 27, 2, 35, 12, 506007), None, "Loading safetensors checkpoint shards: 100% Completed | 16/16"),
        ("sglang-1  | 2026-04-27T02:35:12.506007919Z [2026-04-27 02:35:12.506] server_args=ServerArgs(tp_size=2)",
         datetime.datetime(2026, 4, 27, 2, 35, 12, 506000), None, "server_args=ServerArgs(tp_size=2)"),
        ("sglang-1  | [2026-04-27 02:35:13 TP0] Memory pool end. avail mem=12.41 GB",
         datetime.datetime(2026, 4, 27, 2, 35, 13), {"TP": 0}, "Memory pool end. avail mem=12.41 GB"),
        ("\x1b[36msglang-1  |\x1b[0m [2026-04-27 02:35:13 TP0] Memory pool end. avail mem=12.41 GB",
         datetime.datetime(2026, 4, 27, 2, 35, 13), {"TP": 0}, "Memory pool end. avail mem=12.41 GB"),
        ("RuntimeError: Not enough memory. Please try to increase --mem-fraction-static.",
         None, None, "RuntimeError: Not enough memory. Please try to increase --mem-fraction-static."),
        ("[2026-13-45 99:00:00 TP0] impossible date", None, {"TP": 0}, "impossible date"),
    ],
)
def test_strip_prefix(line, timestamp, ranks, message):
    assert strip_prefix(line) == (timestamp, ranks, message)


# --- the design demo: baseline and the allreduce-fusion trial --------------------------------------


def test_modern_baseline_facts():
    facts = facts_of("modern_tp4_spec_baseline.log")
    expected = {
        "model_path": "/models/Qwen3.5-122B-A10B",
        "tp_size": 4,
        "max_running_requests": 48,
        "max_total_num_tokens": 1183744,
        "context_len": 262144,
        "chunked_prefill_size": 8192,
        "max_prefill_tokens": 16384,
        "mem_fraction_static": 0.82,
        "kv_cache_tokens": 1183744,
        "kv_cache_dtype": "torch.bfloat16",
        "disable_cuda_graph": False,
        "disable_piecewise_cuda_graph": False,
        "cuda_graph_max_bs": 48,
        "attention_backend": "flashinfer",
        "speculative_algorithm": "EAGLE",
        "ready": True,
        "gpu_name": "NVIDIA_RTX_PRO_6000_Blackwell_Server_Edition",
        "triton_version_dir": "triton_3_6_0",
        "missing_moe_configs": [RTX_UP, RTX_DOWN],
        "fallback_moe_configs": [],
        "error": None,
        "timings": {"load_weights": 75.23, "kv_alloc": 1.0, "cuda_graph_capture": 10.2,
                    "piecewise_cuda_graph_capture": 32.04, "total": 135.0},
    }
    assert {key: facts[key] for key in expected} == expected
    assert facts["moe_configs"] == [
        {"kernel": "up", "status": "missing", "path": RTX_UP, "fallback_path": None},
        {"kernel": "down", "status": "missing", "path": RTX_DOWN, "fallback_path": None},
    ]
    # Four ranks print each MoE warning: the facts hold each once, without prefixes.
    assert facts["warnings"] == [
        SPEC_RESET,
        "Using default MoE kernel config. Performance might be sub-optimal! Config file not found at "
        f"{RTX_UP}, you can create them with https://github.com/sgl-project/sglang/tree/main/benchmark/kernels/fused_moe_triton",
        "Using MoE kernel config with down_moe=False. Performance might be sub-optimal! Config file not found at "
        f"{RTX_DOWN}, you can create them with https://github.com/sgl-project/sglang/tree/main/benchmark/kernels/fused_moe_triton",
    ]
    for absent in ("emulator", "server_args_truncated", "piecewise_cuda_graph_disabled_reason"):
        assert absent not in facts


def test_modern_baseline_server_args_repr():
    args = facts_of("modern_tp4_spec_baseline.log")["server_args"]
    assert len(args) > 350
    assert args["json_model_override_args"] == (
        '{"rope_scaling": {"rope_type": "yarn", "factor": 2.0, "original_max_position_embeddings": 262144, '
        '"mrope_section": [11, 11, 10]}}'
    )
    assert args["preferred_sampling_params"] == (
        '{"temperature": 0.6, "top_p": 0.95, "top_k": 20, "stop": [")\\n\\n", "</tool_call>"]}'
    )
    assert args["mm_process_config"] == {"image": {"max_pixels": 1003520, "min_pixels": 3136},
                                         "video": {"fps": 2.0, "max_frames": 768}}
    assert args["chat_template"] == "/etc/sglang/templates/qwen3.5 (tools, reasoning).jinja"
    assert args["tokenizer_metrics_allowed_custom_labels"] == ["tenant", "route (canary, blue)"]
    assert args["constrained_json_whitespace_pattern"] == "[\\n\\t ]*"
    assert args["cuda_graph_bs"] == [1, 2, 4, 8, 12, 16, 24, 32, 40, 48]
    assert args["lora_paths"] is None
    assert args["api_key"] is None
    assert args["random_seed"] == 738164912
    assert args["custom_chat_template_kwargs"] == {"enable_thinking": True, "tools_in_user_message": False}
    assert args["metrics_labels"] == {"cluster": "gpu-a (rack 3)", "tier": "prod"}
    assert args["otel_resource_attributes"] == "deployment.environment=prod,service.version=0.5.10"
    # The last field is intact: the split did not stop inside any nested value.
    assert list(args)[-1] == "trust_remote_code_allowlist" and args["trust_remote_code_allowlist"] is None


def test_allreduce_fusion_trial_facts():
    facts = facts_of("modern_tp4_spec_allreduce_fusion.log")
    assert facts["server_args"]["max_running_requests"] == 48  # configured (spec-decoding reset) ...
    assert facts["max_running_requests"] == 26  # ... but the scheduler runs with 26
    assert facts["server_args"]["enable_flashinfer_allreduce_fusion"] is True
    assert facts["disable_piecewise_cuda_graph"] is True
    assert facts["piecewise_cuda_graph_disabled_reason"] == "--disable-piecewise-cuda-graph is set"
    assert facts["kv_cache_tokens"] == 1097728
    assert facts["ready"] is True
    assert "piecewise_cuda_graph_capture" not in facts["timings"]
    assert facts["timings"]["total"] == 104.0


# --- other formats -----------------------------------------------------------------------------------


def test_old_mid2025_log():
    facts = facts_of("old_mid2025.log")
    expected = {
        "model_path": "Qwen/Qwen3-30B-A3B",
        "tp_size": 2,
        "max_running_requests": 2049,  # None in server_args, 2049 in the scheduler line
        "max_total_num_tokens": 163920,
        "context_len": 40960,
        "chunked_prefill_size": 4096,  # not in the old scheduler line: the configured value
        "max_prefill_tokens": 16384,
        "kv_cache_tokens": 163920,
        "attention_backend": "flashinfer",  # None in server_args, chosen at runtime
        "speculative_algorithm": None,
        "cuda_graph_max_bs": 160,
        "ready": True,
        "gpu_name": "NVIDIA_L40S",
        "triton_version_dir": "triton_3_3_1",
        "missing_moe_configs": [
            "/usr/local/lib/python3.10/dist-packages/sglang/srt/layers/moe/fused_moe_triton/configs/triton_3_3_1/"
            "E=128,N=384,device_name=NVIDIA_L40S.json"
        ],
        # Load weight end had no elapsed= yet: taken from the begin/end timestamps (slowest rank).
        "timings": {"load_weights": 34.0, "kv_alloc": 3.0, "cuda_graph_capture": 14.61, "total": 63.0},
    }
    assert {key: facts[key] for key in expected} == expected
    assert facts["server_args"]["max_running_requests"] is None
    for absent in ("kv_cache_dtype", "disable_piecewise_cuda_graph"):
        assert absent not in facts
    assert facts["warnings"][0] == (
        "/usr/local/lib/python3.10/dist-packages/transformers/utils/hub.py:111: FutureWarning: Using `TRANSFORMERS_CACHE` "
        "is deprecated and will be removed in v5 of Transformers. Use `HF_HOME` instead."
    )
    assert "  warnings.warn(" not in facts["warnings"]


def test_docker_compose_log():
    facts = facts_of("docker_compose.log")
    assert facts["server_args"]["api_key"] == "<redacted>"
    assert "sk-prod" not in json.dumps(facts)
    assert facts["moe_configs"] == [
        {"kernel": "up", "status": "used", "path": H100_DIR + "E=128,N=384,device_name=NVIDIA_H100_80GB_HBM3.json",
         "fallback_path": None},
        {"kernel": "down", "status": "missing", "path": H100_DIR + "E=128,N=384,device_name=NVIDIA_H100_80GB_HBM3_down.json",
         "fallback_path": None},
    ]
    assert facts["missing_moe_configs"] == [H100_DIR + "E=128,N=384,device_name=NVIDIA_H100_80GB_HBM3_down.json"]
    assert facts["max_running_requests"] == 4096
    # Millisecond timestamps: kv_alloc is TP1's 02:35:29.451 -> 02:35:30.396 (the slower rank).
    assert facts["timings"] == {"load_weights": 11.02, "kv_alloc": 0.945, "cuda_graph_capture": 12.61, "total": 34.114}


def test_dp_attention_ep_log():
    facts = facts_of("dp_attention_ep.log")
    assert facts["tp_size"] == 8
    assert facts["server_args"]["dp_size"] == 8 and facts["server_args"]["enable_dp_attention"] is True
    assert facts["kv_cache_tokens"] == 1260352
    assert "kv_cache_dtype" not in facts  # MLA line of that era has no dtype
    assert facts["server_args"]["enable_piecewise_cuda_graph"] is False
    assert "disable_piecewise_cuda_graph" not in facts
    assert [(entry["kernel"], entry["status"]) for entry in facts["moe_configs"]] == [("up", "used"), ("down", "used")]
    assert facts["missing_moe_configs"] == [] and facts["fallback_moe_configs"] == []
    assert facts["gpu_name"] == "NVIDIA_H200"
    assert facts["triton_version_dir"] == "triton_3_4_0"
    assert facts["warnings"] == []
    assert facts["timings"]["cuda_graph_capture"] == 43.17  # slowest of eight ranks


def test_fallback_configs_log():
    facts = facts_of("fallback_configs.log")
    new_dir, old_dir = NEW_CONFIGS + "triton_3_6_0/", NEW_CONFIGS + "triton_3_5_1/"
    up = "E=257,N=256,device_name=NVIDIA_H200,dtype=fp8_w8a8,block_shape=[128, 128].json"
    down = "E=257,N=256,device_name=NVIDIA_H200,dtype=fp8_w8a8,block_shape=[128, 128]_down.json"
    assert facts["moe_configs"] == [
        {"kernel": "up", "status": "fallback", "path": new_dir + up, "fallback_path": old_dir + up},
        {"kernel": "down", "status": "fallback", "path": new_dir + down, "fallback_path": old_dir + down},
    ]
    assert facts["fallback_moe_configs"] == [new_dir + up, new_dir + down]
    assert facts["missing_moe_configs"] == []
    assert facts["triton_version_dir"] == "triton_3_6_0"
    # The W8A8 block-FP8 GEMM config is not a MoE config, but its warning is reported.
    assert all("N=7168,K=2304" not in entry["path"] for entry in facts["moe_configs"])
    assert [w for w in facts["warnings"] if w.startswith("Using default W8A8 Block FP8 kernel config.")] == [
        "Using default W8A8 Block FP8 kernel config. Performance might be sub-optimal! Config file not found at "
        "/opt/sglang/venv/lib/python3.12/site-packages/sglang/srt/layers/quantization/configs/"
        "N=7168,K=2304,device_name=NVIDIA_H200,dtype=fp8_w8a8,block_shape=[128, 128].json"
    ]
    assert len(facts["warnings"]) == 3


def test_tqdm_glued_log():
    facts = facts_of("tqdm_glued.log")
    h100_up = H100_DIR + "E=128,N=384,device_name=NVIDIA_H100_80GB_HBM3.json"
    h100_down = H100_DIR + "E=128,N=384,device_name=NVIDIA_H100_80GB_HBM3_down.json"
    # Glued after a bar with `\r` (up) and without (down).
    assert facts["moe_configs"] == [
        {"kernel": "up", "status": "used", "path": h100_up, "fallback_path": None},
        {"kernel": "down", "status": "missing", "path": h100_down, "fallback_path": None},
    ]
    # TP1's Load weight end (11.02 s) only exists glued to the shard-loading bar; two capture ends share one line.
    assert facts["timings"]["load_weights"] == 11.02
    assert facts["timings"]["cuda_graph_capture"] == 12.7
    assert facts["disable_piecewise_cuda_graph"] is True
    assert facts["max_running_requests"] == 4096
    assert facts["ready"] is True
    assert not any("Capturing batches" in warning or "%|" in warning for warning in facts["warnings"])


def test_crlf_line_endings_and_emulator_marker():
    text = (
        "[2026-03-09 21:31:10] EMULATOR: sglang emulator 0.5.10 (llmops.sglang test double; no GPU work is done)\r\n"
        "[2026-03-09 21:31:10] server_args=ServerArgs(model_path='/models/m', tp_size=1, max_running_requests=None)\r\n"
        "[2026-03-09 21:31:20] max_total_num_tokens=90000, chunked_prefill_size=8192, max_prefill_tokens=16384, "
        "max_running_requests=351, context_len=131072, available_gpu_mem=12.00 GB\r\n"
        "[2026-03-09 21:31:21] The server is fired up and ready to roll!\r\n"
    )
    facts = parse_startup_log(text)
    assert facts["emulator"] is True
    assert facts["max_running_requests"] == 351
    assert facts["context_len"] == 131072
    assert facts["ready"] is True
    assert facts["timings"] == {"total": 11.0}


def test_empty_and_unrelated_text():
    assert parse_startup_log("") == {
        "ready": False, "moe_configs": [], "missing_moe_configs": [], "fallback_moe_configs": [], "warnings": [],
        "error": None, "timings": {},
    }
    facts = parse_startup_log("Mar 09 21:31:02 gpu-node-01 systemd[1]: Started sglang.service.\n")
    assert facts["error"] is None and facts["ready"] is False and "server_args" not in facts


# --- failures -------------------------------------------------------------------------------------------


def test_not_enough_memory():
    facts = facts_of("not_enough_memory.log")
    error = facts["error"]
    assert error["kind"] == "oom"
    assert error["message"] == (
        "RuntimeError: Not enough memory. Please try to increase --mem-fraction-static. Current value: mem_fraction_static=0.55"
    )
    assert error["suggestion"] == "Please try to increase --mem-fraction-static."
    assert error["lines"][0] == "Scheduler hit an exception: Traceback (most recent call last):"
    assert error["lines"][-1] == error["message"]
    assert facts["ready"] is False
    assert facts["mem_fraction_static"] == 0.55
    assert "max_total_num_tokens" not in facts


def test_cuda_graph_capture_failure():
    error = facts_of("cuda_graph_capture_failed.log")["error"]
    assert error["kind"] == "cuda_error"
    # the innermost cause: the illegal access the capture failure was raised from
    assert error["message"] == "torch.AcceleratorError: CUDA error: an illegal memory access was encountered"
    assert error["suggestion"] == "\n".join((
        "Possible solutions:",
        "1. set --mem-fraction-static to a smaller value (e.g., 0.8 or 0.7)",
        "2. set --cuda-graph-max-bs to a smaller value (e.g., 16)",
        "3. disable torch compile by not using --enable-torch-compile",
        "4. disable CUDA graph by --disable-cuda-graph. (Not recommended. Huge performance loss)",
    ))
    assert error["message"] in error["lines"]
    assert len(error["lines"]) <= 30


def test_warmup_failure():
    error = facts_of("warmup_failed.log")["error"]
    assert error["kind"] == "warmup_failed"
    assert error["message"] == (
        "requests.exceptions.ReadTimeout: HTTPConnectionPool(host='127.0.0.1', port=30000): Read timed out. (read timeout=600)"
    )
    assert error["lines"][0] == "Initialization failed. warmup error: Traceback (most recent call last):"
    assert error["suggestion"] is None


def test_argparse_error():
    error = facts_of("argparse_error.log")["error"]
    assert error["kind"] == "config_error"
    assert error["message"].startswith("launch_server.py: error: argument --attention-backend: invalid choice: 'fa5'")
    assert error["lines"][0] == "usage: launch_server.py [-h] --model-path MODEL_PATH"
    assert error["lines"][-1] == error["message"]


def test_missing_shared_library_is_the_installation():
    """An ImportError of a CUDA library: the operator must fix the SGLang installation, not 'an ImportError'."""
    error = facts_of("unknown_traceback.log")["error"]
    assert error["kind"] == "install_error"
    assert error["message"] == "ImportError: libcudart.so.13: cannot open shared object file: No such file or directory"
    assert error["lines"][0] == "Traceback (most recent call last):"
    assert error["suggestion"].startswith("The SGLang installation is broken")


def test_unknown_traceback():
    log = read_log("unknown_traceback.log").replace(
        "ImportError: libcudart.so.13: cannot open shared object file: No such file or directory",
        "KeyError: 'rope_theta'")
    error = parse_startup_log(log)["error"]
    assert error["kind"] == "unknown_traceback" and error["message"] == "KeyError: 'rope_theta'"
    assert error["suggestion"] is None


def test_port_in_use():
    """uvicorn's bind error (the event loop's text) is the operator's cause, with where to look and what to change."""
    facts = facts_of("port_in_use.log")
    error = facts["error"]
    assert error["kind"] == "port_in_use"
    assert error["message"] == ("ERROR:    [Errno 98] error while attempting to bind on address ('127.0.0.1', 30000): "
                                "address already in use")
    assert error["suggestion"] == ("Another process is listening on 127.0.0.1:30000: find it with "
                                   "`ss -ltnp 'sport = :30000'`, stop it or set --port (the module's `port`) to a free port.")
    assert facts["ready"] is False and facts["tp_size"] == 4


PORT_IN_USE_IPV6 = """\
[2026-03-11 13:41:30] ERROR:    [Errno 98] error while attempting to bind on address ('::1', 30000, 0, 0): address already in use
[2026-03-11 13:41:30] Received sigquit from a child process. It usually means the child failed.
"""

NCCL_PORT_IN_USE = """\
[2026-03-11 13:41:30 TP0] Scheduler hit an exception: Traceback (most recent call last):
  File "/opt/sglang/venv/lib/python3.12/site-packages/torch/distributed/rendezvous.py", line 189, in _create_c10d_store
    return TCPStore(
torch.distributed.DistNetworkError: The server socket has failed to listen on any local network address. port: 29500, useIpv6: false, code: -98, name: EADDRINUSE, message: address already in use
[2026-03-11 13:41:31] Received sigquit from a child process. It usually means the child failed.
"""


OOM_DURING_CAPTURE = """\
[2026-03-11 13:41:30 TP1] Scheduler hit an exception: Traceback (most recent call last):
  File "/opt/sglang/venv/lib/python3.12/site-packages/sglang/srt/model_executor/cuda_graph_runner.py", line 393, in __init__
    raise Exception(
Exception: Capture cuda graph failed: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 1 has a total capacity of 94.97 GiB of which 1.06 GiB is free.
Possible solutions:
1. set --mem-fraction-static to a smaller value (e.g., 0.8 or 0.7)
2. set --cuda-graph-max-bs to a smaller value (e.g., 16)
3. disable torch compile by not using --enable-torch-compile
4. disable CUDA graph by --disable-cuda-graph. (Not recommended. Huge performance loss)
Open an issue on GitHub https://github.com/sgl-project/sglang/issues/new/choose 

[2026-03-11 13:41:31] Received sigquit from a child process. It usually means the child failed.
"""

PCG_FAILURE = """\
[2026-03-11 13:41:30 TP0] Scheduler hit an exception: Traceback (most recent call last):
  File "/opt/sglang/venv/lib/python3.12/site-packages/sglang/srt/model_executor/piecewise_cuda_graph_runner.py", line 301, in capture
    self.capture_one_batch_size(num_tokens)
RuntimeError: Piecewise CUDA Graph is enabled by default as an experimental feature.
To work around this error, add --disable-piecewise-cuda-graph to your launch command.
Please report this issue at https://github.com/sgl-project/sglang/issues/new/choose
"""

UNSUPPORTED_ARG = """\
[2026-03-11 13:41:30] Received sigquit from a child process. It usually means the child failed.
Traceback (most recent call last):
  File "/opt/sglang/venv/lib/python3.12/site-packages/sglang/srt/server_args.py", line 1204, in __post_init__
    self._handle_attention_backend_compatibility()
ValueError: fa3 attention backend is not supported on this GPU (compute capability 12.0)
"""

SCHEDULER_KEYERROR = """\
[2026-03-11 13:41:30 TP0] Scheduler hit an exception: Traceback (most recent call last):
  File "/opt/sglang/venv/lib/python3.12/site-packages/sglang/srt/model_loader/loader.py", line 612, in load_weights
    param = params_dict[name]
KeyError: 'model.layers.47.mlp.experts.w2_weight'
[2026-03-11 13:41:31] Received sigquit from a child process. It usually means the child failed.
"""


@pytest.mark.parametrize(
    ("text", "kind", "message", "suggestion"),
    [
        (OOM_DURING_CAPTURE, "oom",
         "Exception: Capture cuda graph failed: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 1 has a total "
         "capacity of 94.97 GiB of which 1.06 GiB is free.",
         "Possible solutions:\n1. set --mem-fraction-static to a smaller value (e.g., 0.8 or 0.7)\n"
         "2. set --cuda-graph-max-bs to a smaller value (e.g., 16)\n3. disable torch compile by not using "
         "--enable-torch-compile\n4. disable CUDA graph by --disable-cuda-graph. (Not recommended. Huge performance loss)"),
        (PCG_FAILURE, "cuda_error",
         "RuntimeError: Piecewise CUDA Graph is enabled by default as an experimental feature.",
         "To work around this error, add --disable-piecewise-cuda-graph to your launch command."),
        (UNSUPPORTED_ARG, "config_error",
         "ValueError: fa3 attention backend is not supported on this GPU (compute capability 12.0)", None),
        # a traceback whose cause is none of the kinds: the generic kind, not the sigquit's runtime_error
        (SCHEDULER_KEYERROR, "unknown_traceback", "KeyError: 'model.layers.47.mlp.experts.w2_weight'", None),
        (PORT_IN_USE_IPV6, "port_in_use",
         "ERROR:    [Errno 98] error while attempting to bind on address ('::1', 30000, 0, 0): address already in use",
         "Another process is listening on ::1:30000: find it with `ss -ltnp 'sport = :30000'`, stop it or set --port "
         "(the module's `port`) to a free port."),
        (NCCL_PORT_IN_USE, "port_in_use",
         "torch.distributed.DistNetworkError: The server socket has failed to listen on any local network address. "
         "port: 29500, useIpv6: false, code: -98, name: EADDRINUSE, message: address already in use",
         "Another process holds a port the server needs (the HTTP --port, or the torch distributed --nccl-port / "
         "--dist-init-addr port): find it with `ss -ltnp`, stop it or choose a free port."),
    ],
)
def test_error_classification(text, kind, message, suggestion):
    error = parse_startup_log(text)["error"]
    assert (error["kind"], error["message"], error["suggestion"]) == (kind, message, suggestion)


# --- truncated logs: a cut-off value is not a fact ----------------------------------------------------------


def test_truncated_moe_path_is_not_a_config():
    facts = facts_of("truncated_moe_path.log")
    assert facts["moe_configs"] == [{"kernel": "up", "status": "missing", "path": RTX_UP, "fallback_path": None}]
    assert facts["missing_moe_configs"] == [RTX_UP]
    # The cut-off down warning is not reported either.
    assert facts["warnings"] == facts_of("modern_tp4_spec_baseline.log")["warnings"][:2]
    assert facts["ready"] is False and facts["error"] is None


def _cut_after(text: str, marker: str, extra: int = 0) -> str:
    return text[: text.index(marker) + len(marker) + extra]


def test_scheduler_line_cut_before_context_len():
    text = _cut_after(read_log("modern_tp4_spec_allreduce_fusion.log"), "max_running_requests=26, cont")
    facts = parse_startup_log(text)
    assert (facts["max_total_num_tokens"], facts["max_running_requests"], facts["chunked_prefill_size"]) == (1097728, 26, 8192)
    assert "context_len" not in facts


@pytest.mark.parametrize(("marker", "key"), [
    ("max_running_requests=2", "max_running_requests"),
    ("context_len=2621", "context_len"),
])
def test_scheduler_number_cut_is_not_reported(marker, key):
    facts = parse_startup_log(_cut_after(read_log("modern_tp4_spec_allreduce_fusion.log"), marker))
    assert facts.get(key) != int(marker.split("=")[1])
    if key == "max_running_requests":
        assert facts[key] == 48  # the configured value: the log never completed the runtime one
    else:
        assert key not in facts


def test_old_scheduler_line_cut_in_last_number():
    facts = parse_startup_log(_cut_after(read_log("old_mid2025.log"), "context_len=409"))
    assert "context_len" not in facts
    assert facts["max_running_requests"] == 2049


def test_kv_line_cut_in_token_count():
    facts = parse_startup_log(_cut_after(read_log("old_mid2025.log"), "#tokens: 1639"))
    assert "kv_cache_tokens" not in facts


def test_server_args_line_cut():
    text = _cut_after(read_log("modern_tp4_spec_baseline.log"), "chat_template='/etc/sglang/templates/qwen3.5 (tools, ")
    facts = parse_startup_log(text)
    assert facts["server_args_truncated"] is True
    assert "chat_template" not in facts["server_args"]
    assert facts["server_args"]["served_model_name"] == "qwen3.5-122b-a10b"
    assert facts["mem_fraction_static"] == 0.82
    assert "attention_backend" not in facts  # comes after the cut


# --- server_args values ---------------------------------------------------------------------------------------


def test_parse_server_args_non_literals_stay_source_text_enum_members_are_their_value():
    body = (
        "model_path='/m', load_format=<LoadFormat.AUTO: 'auto'>, device=device(type='cuda', index=0), "
        "download_dir=PosixPath('/data/hf (shared)'), cuda_graph_bs=(1, 2, 4), tags={'b', 'a'}, "
        "blob=b'\\x00', nested=dict(a=[1, (2, 3)]), ratio=-0.5, flag=True)"
    )
    fields, complete = parse_server_args(body)
    assert complete is True
    assert fields == {
        "model_path": "/m",
        "load_format": "auto",
        "device": "device(type='cuda', index=0)",
        "download_dir": "PosixPath('/data/hf (shared)')",
        "cuda_graph_bs": [1, 2, 4],
        "tags": ["a", "b"],
        "blob": "b'\\x00'",
        "nested": "dict(a=[1, (2, 3)])",
        "ratio": -0.5,
        "flag": True,
    }


def test_parse_server_args_quotes_and_escapes():
    body = (
        "a='it\\'s, (really) [odd]', b=\"say \\\"hi\\\", ok\", c='{\"k\": [1, 2]}', "
        "d={'x': {'y': [1, {'z': ')'}]}}, e=None)"
    )
    fields, complete = parse_server_args(body)
    assert complete is True
    assert fields == {
        "a": "it's, (really) [odd]",
        "b": 'say "hi", ok',
        "c": '{"k": [1, 2]}',
        "d": {"x": {"y": [1, {"z": ")"}]}},
        "e": None,
    }


def test_parse_server_args_unterminated_string():
    fields, complete = parse_server_args("tp_size=4, model_path='/models/a, b")
    assert (fields, complete) == ({"tp_size": 4}, False)


# --- robustness ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", FIXTURE_NAMES)
def test_every_fixture_gives_json_facts(name):
    facts = facts_of(name)
    assert json.loads(json.dumps(facts)) == facts
    assert facts["error"] is None or facts["error"]["kind"] in ERROR_KINDS


def _assert_well_formed(facts: dict) -> None:
    json.dumps(facts)
    assert isinstance(facts["ready"], bool)
    assert isinstance(facts["warnings"], list) and isinstance(facts["moe_configs"], list)
    assert facts["error"] is None or facts["error"]["kind"] in ERROR_KINDS


FUZZ = settings(max_examples=150, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow])
FRAGMENTS = [
    "\n", "\r", "[2026-03-09 21:31:15 TP0] ", "[2026-03-09 21:31:15.123 DP0 TP0 EP0] ", "Mar 09 21:31:15 h sglang[1]: ",
    "sglang-1  | ", "2026-04-27T02:35:12.5Z ", "server_args=ServerArgs(", "tp_size=4, ", "x='a, (b", "<E.X: 'y'>", ")",
    "max_total_num_tokens=12, ", "max_running_requests=", "context_len=9", "KV Cache is allocated. dtype: x, #tokens: ",
    "Traceback (most recent call last):", "RuntimeError: Not enough memory. ", "Possible solutions:", "1. set --x.",
    "Using MoE kernel config from /c/triton_3_6_0/E=1,N=2,device_name=G.json.", "Config file not found at ",
    "Load weight end. elapsed=1.5 s", "Capture cuda graph end. Time elapsed: ", "9" * 5000, "During handling of the above",
]


@FUZZ
@given(st.text(max_size=3000))
def test_never_raises_on_random_text(text):
    _assert_well_formed(parse_startup_log(text))


@FUZZ
@given(st.binary(max_size=3000))
def test_never_raises_on_random_bytes(data):
    _assert_well_formed(parse_startup_log(data.decode("utf-8", errors="replace")))


@FUZZ
@given(st.lists(st.one_of(st.sampled_from(FRAGMENTS), st.text(max_size=12)), max_size=60))
def test_never_raises_on_log_like_fragments(parts):
    _assert_well_formed(parse_startup_log("".join(parts)))


@FUZZ
@given(st.sampled_from(FIXTURE_NAMES), st.sampled_from(FIXTURE_NAMES), st.data())
def test_never_raises_on_splices_of_fixtures(first, second, data):
    head, tail = read_log(first), read_log(second)
    cut = data.draw(st.integers(0, len(head)))
    resume = data.draw(st.integers(0, len(tail)))
    _assert_well_formed(parse_startup_log(head[:cut] + tail[resume:]))


BASELINE_TEXT = read_log("modern_tp4_spec_baseline.log")
BASELINE_FACTS = parse_startup_log(BASELINE_TEXT)
SCALAR_FACTS = (
    "model_path", "tp_size", "max_running_requests", "max_total_num_tokens", "context_len", "chunked_prefill_size",
    "max_prefill_tokens", "mem_fraction_static", "kv_cache_tokens", "kv_cache_dtype", "cuda_graph_max_bs",
    "attention_backend", "speculative_algorithm", "gpu_name", "triton_version_dir",
)


@FUZZ
@given(st.integers(0, len(BASELINE_TEXT)))
def test_a_truncated_log_states_no_wrong_fact(cut):
    facts = parse_startup_log(BASELINE_TEXT[:cut])
    _assert_well_formed(facts)
    for key in SCALAR_FACTS:
        if key in facts:
            assert facts[key] == BASELINE_FACTS[key], key
    assert all(entry in BASELINE_FACTS["moe_configs"] for entry in facts["moe_configs"])
    assert set(facts["warnings"]) <= set(BASELINE_FACTS["warnings"])
    full_args = BASELINE_FACTS["server_args"]
    assert all(full_args[name] == value for name, value in facts.get("server_args", {}).items())


def test_two_hundred_thousand_lines_parse():
    decode = ("Mar 09 21:40:{s:02d} gpu-node-01 sglang[48390]: [2026-03-09 21:40:{s:02d} TP0] Decode batch, "
              "#running-req: 48, #token: 91234, token usage: 0.08, accept len: 2.71, cuda graph: True, "
              "gen throughput (token/s): 1583.22, #queue-req: 0, \n")
    text = BASELINE_TEXT + "".join(decode.format(s=i % 60) for i in range(200_000))
    facts = parse_startup_log(text)
    assert facts["max_running_requests"] == 48
    assert facts["ready"] is True
    assert facts["warnings"] == BASELINE_FACTS["warnings"]
