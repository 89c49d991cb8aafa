from __future__ import annotations

import pytest

from ansible_collections.llmops.sglang.plugins.module_utils.server_args import (
    deprecated_alias_warnings, parse_help_flags, to_cli_args, validate_server_args)

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


def test_help_parsing_knows_values_switches_choices_and_aliases():
    flags = parse_help_flags(HELP)
    assert flags["tp_size"] == {"flag": "--tp-size", "takes_value": True, "value_optional": False, "multiple": False,
                                "choices": None}
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


# Shaped like SGLang 0.5.14's real --help (argparse, prog "sglang serve"): optional values (nargs='?'),
# nargs='*' with choices, deprecated aliases, prose naming flags that are not options.
HELP_0514 = """usage: sglang serve [-h] --model-path MODEL_PATH [--model-checksum [MODEL_CHECKSUM]]
                    [--lora-target-modules [{q_proj,k_proj,v_proj,all} ...]]
                    [--cuda-graph-backend-prefill {full,breakable,tc_piecewise,disabled}]
                    [--cuda-graph-max-bs-decode CUDA_GRAPH_MAX_BS_DECODE]
                    [--experts-shared-outer-loras | --no-experts-shared-outer-loras]
                    [--cuda-graph-max-bs CUDA_GRAPH_MAX_BS] [--disable-piecewise-cuda-graph]

options:
  -h, --help            show this help message and exit
  --model-path MODEL_PATH, --model MODEL_PATH
                        The path of the model weights.
  --model-checksum [MODEL_CHECKSUM]
                        Model file integrity verification. If provided without value, uses
                        model-path as HF repo ID. Otherwise, provide a checksums JSON file path
  --lora-target-modules [{q_proj,k_proj,v_proj,all} ...]
                        The union set of all target modules where LoRA should be applied.
  --cuda-graph-backend-prefill {full,breakable,tc_piecewise,disabled}
  --cuda-graph-max-bs-decode CUDA_GRAPH_MAX_BS_DECODE
  --experts-shared-outer-loras, --no-experts-shared-outer-loras
  --cuda-graph-max-bs CUDA_GRAPH_MAX_BS
                        Deprecated alias for --cuda-graph-max-bs-decode.
  --disable-piecewise-cuda-graph
                        Deprecated alias for --cuda-graph-backend-prefill=disabled. Use
                        --cuda-graph-backend-{decode,prefill}=disabled or --never-a-flag instead.
"""


def test_optional_value_and_star_choices_are_not_switches():
    flags = parse_help_flags(HELP_0514)
    assert flags["model_checksum"] == {"flag": "--model-checksum", "takes_value": True, "value_optional": True,
                                       "multiple": False, "choices": None}
    assert flags["lora_target_modules"]["choices"] == ["q_proj", "k_proj", "v_proj", "all"]
    assert flags["lora_target_modules"]["multiple"] and flags["lora_target_modules"]["value_optional"]
    assert flags["no_experts_shared_outer_loras"]["takes_value"] is False
    # prose is not an option list: neither the `{decode,prefill}` spelling nor a flag named in a sentence
    assert "never_a_flag" not in flags and "cuda_graph_backend_" not in flags
    assert validate_server_args({"model_checksum": True, "lora_target_modules": ["q_proj", "all"]}, flags) == []
    assert validate_server_args({"model_checksum": "/srv/sums.json"}, flags) == []
    assert validate_server_args({"lora_target_modules": ["q_proj", "o_proj"]}, flags) == [
        "server_args.lora_target_modules: ['o_proj'] is not one of q_proj, k_proj, v_proj, all"]
    assert validate_server_args({"cuda_graph_max_bs_decode": [1, 2]}, flags) == [
        "server_args.cuda_graph_max_bs_decode: --cuda-graph-max-bs-decode takes one value, got a list [1, 2]"]


def test_usage_only_options_are_known():
    flags = parse_help_flags("usage: sglang serve [-h] [--tp-size TP_SIZE] [--trust-remote-code]\n"
                             "                    [--dtype {auto,half}] [--x [X ...]]\n")
    assert flags["tp_size"]["takes_value"] and not flags["trust_remote_code"]["takes_value"]
    assert flags["dtype"]["choices"] == ["auto", "half"] and flags["x"]["multiple"]


def test_removed_old_name_names_the_new_flag():
    removed = HELP_0514.replace("  --disable-piecewise-cuda-graph\n", "").replace(" [--disable-piecewise-cuda-graph]", "")
    errors = validate_server_args({"disable_piecewise_cuda_graph": True}, parse_help_flags(removed))
    assert errors == ["server_args.disable_piecewise_cuda_graph: the installed SGLang has no --disable-piecewise-cuda-graph "
                      "(a deprecated alias from 0.5.14, removed in 0.5.20); use --cuda-graph-backend-prefill=disabled "
                      "(server_args `cuda_graph_backend_prefill: disabled`)"]


def test_deprecated_alias_is_accepted_with_a_warning():
    flags = parse_help_flags(HELP_0514)
    assert validate_server_args({"disable_piecewise_cuda_graph": True, "cuda_graph_max_bs": 16}, flags) == []
    assert deprecated_alias_warnings({"disable_piecewise_cuda_graph": True, "tp_size": 4}, flags) == [
        "server_args.disable_piecewise_cuda_graph: in the installed SGLang --disable-piecewise-cuda-graph is a deprecated "
        "alias of --cuda-graph-backend-prefill=disabled (server_args `cuda_graph_backend_prefill: disabled`), read as that; "
        "it is removed in 0.5.20"]
    assert deprecated_alias_warnings({"disable_piecewise_cuda_graph": True}, parse_help_flags(HELP)) == []


def test_a_setting_gone_in_both_names_is_refused_by_name():
    """0.5.22 has neither --piecewise-cuda-graph-compiler nor --cuda-graph-tc-compiler (sglang_names; 0.5.21
    arg_groups/fields/exec_.py line 533 declares cuda_graph_tc_compiler, 0.5.22's does not)."""
    errors = validate_server_args({"piecewise_cuda_graph_compiler": "eager"}, parse_help_flags(HELP_0514))
    assert errors == ["server_args.piecewise_cuda_graph_compiler: the installed SGLang has neither "
                      "--piecewise-cuda-graph-compiler nor --cuda-graph-tc-compiler (removed in 0.5.22); drop it"]


def test_a_newer_releases_name_on_an_older_release_names_the_old_one():
    """0.5.11 (HELP has --cuda-graph-bs) has no --cuda-graph-bs-decode (0.5.14+)."""
    errors = validate_server_args({"cuda_graph_bs_decode": [1, 2]}, parse_help_flags(HELP))
    assert errors == ["server_args.cuda_graph_bs_decode: the installed SGLang has no --cuda-graph-bs-decode "
                      "(it arrived in 0.5.14); use cuda_graph_bs"]


def test_the_fusion_switch_is_read_as_its_backend_from_0_5_14():
    """0.5.14+ keep --enable-flashinfer-allreduce-fusion as a switch for --flashinfer-allreduce-fusion-backend=auto
    (0.5.23 sglang/srt/arg_groups/serving_hook.py); 0.5.11 has only the switch."""
    help_0523 = HELP + "  --flashinfer-allreduce-fusion-backend {auto,trtllm,cutedsl}\n"
    assert validate_server_args({"enable_flashinfer_allreduce_fusion": True}, parse_help_flags(help_0523)) == []
    assert deprecated_alias_warnings({"enable_flashinfer_allreduce_fusion": True}, parse_help_flags(help_0523)) == [
        "server_args.enable_flashinfer_allreduce_fusion: in the installed SGLang --enable-flashinfer-allreduce-fusion is "
        "a deprecated alias of --flashinfer-allreduce-fusion-backend=auto (server_args "
        "`flashinfer_allreduce_fusion_backend: auto`), read as that; a later release may remove it"]
    assert validate_server_args({"flashinfer_allreduce_fusion_backend": "auto"}, parse_help_flags(HELP)) == [
        "server_args.flashinfer_allreduce_fusion_backend: the installed SGLang has no "
        "--flashinfer-allreduce-fusion-backend (it arrived in 0.5.14); use enable_flashinfer_allreduce_fusion: true"]
