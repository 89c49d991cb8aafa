from __future__ import annotations

import pytest

from ansible_collections.llmops.sglang.plugins.module_utils.server_args import (
    parse_help_flags, systemd_exec_line, to_cli_args, validate_server_args)

# Shaped like argparse's --help of `python -m sglang.launch_server` (options wrap across lines).
HELP = """usage: launch_server.py [-h] --model-path MODEL_PATH [--tp-size TP_SIZE]

options:
  -h, --help            show this help message and exit
  --model-path MODEL_PATH, --model MODEL_PATH
                        The path of the model weights.
  --tp-size TP_SIZE, --tensor-parallel-size TP_SIZE
                        The tensor parallelism size.
  --max-running-requests MAX_RUNNING_REQUESTS
  --attention-backend {triton,torch_native,fa3,flashinfer}
  --enable-flashinfer-allreduce-fusion
                        Enable FlashInfer allreduce fusion with Residual RMSNorm.
  --cuda-graph-bs CUDA_GRAPH_BS [CUDA_GRAPH_BS ...]
  --json-model-override-args JSON_MODEL_OVERRIDE_ARGS
"""


def test_mapping_becomes_sglang_flags():
    argv = to_cli_args({"tp_size": 4, "enable_flashinfer_allreduce_fusion": True, "disable_cuda_graph": False,
                        "max_running_requests": None, "cuda_graph_bs": [1, 2, 4],
                        "json_model_override_args": {"rope_scaling": {"type": "yarn", "factor": 4.0}}})
    assert argv == ["--tp-size", "4", "--enable-flashinfer-allreduce-fusion", "--cuda-graph-bs", "1", "2", "4",
                    "--json-model-override-args", '{"rope_scaling":{"factor":4.0,"type":"yarn"}}']


def test_exec_line_escapes_systemd_specifiers_and_variables():
    line = systemd_exec_line(["/opt/venv/bin/python", "--json", '{"a": "50%"}', "--x", "$HOME"])
    assert line == "/opt/venv/bin/python --json '{\"a\": \"50%%\"}' --x '$$HOME'"


def test_help_parsing_knows_values_switches_choices_and_aliases():
    flags = parse_help_flags(HELP)
    assert flags["tp_size"] == {"flag": "--tp-size", "takes_value": True, "choices": None}
    assert flags["tensor_parallel_size"]["takes_value"] is True
    assert flags["enable_flashinfer_allreduce_fusion"]["takes_value"] is False
    assert flags["attention_backend"]["choices"] == ["triton", "torch_native", "fa3", "flashinfer"]
    assert flags["cuda_graph_bs"]["takes_value"] is True
    assert "help" not in flags


@pytest.mark.parametrize(("args", "expected"), [
    ({"tp_sise": 4}, "server_args.tp_sise: the installed SGLang has no flag --tp-sise; did you mean tp_size (--tp-size)?"),
    ({"enable_flashinfer_allreduce_fusion": "yes"}, "server_args.enable_flashinfer_allreduce_fusion: "
     "--enable-flashinfer-allreduce-fusion is an on/off flag; use true or false, got 'yes'"),
    ({"max_running_requests": True}, "server_args.max_running_requests: --max-running-requests takes a value"),
    ({"attention_backend": "fa4"}, "server_args.attention_backend: 'fa4' is not one of triton, torch_native, fa3, flashinfer"),
])
def test_validation_names_the_field_and_the_fix(args, expected):
    errors = validate_server_args(args, parse_help_flags(HELP))
    assert len(errors) == 1 and errors[0].startswith(expected)


def test_valid_args_pass():
    assert validate_server_args({"tp_size": 4, "max_running_requests": None, "attention_backend": "fa3",
                                 "enable_flashinfer_allreduce_fusion": False}, parse_help_flags(HELP)) == []
