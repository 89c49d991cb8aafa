# Copyright (c) llmops.sglang contributors
# Apache License 2.0 (see LICENSE)
"""Flags from 0.5.22 on, and MoE lines as users' logs carry them (issue #38 items 1-6 and 10).

Every fixture is the real release's: its ``--help`` and option table (tests/conformance/release_cli.py, from the
PyPI wheel), its ServerArgs fields for the dumps and its own log format strings (tests/conformance/real_logs.py).
What the release does with a value is cited beside each test (release, file, line).
"""
from __future__ import annotations

import pytest

from ansible_collections.llmops.sglang.plugins.module_utils.flag_rules import evaluate_flag_rules
from ansible_collections.llmops.sglang.plugins.module_utils.gpu_cost import deployment_gpus
from ansible_collections.llmops.sglang.plugins.module_utils.server_args import (
    deprecated_alias_warnings, parse_help_flags, to_cli_args, validate_server_args)
from ansible_collections.llmops.sglang.plugins.module_utils.server_diff import diff_server_facts
from ansible_collections.llmops.sglang.plugins.module_utils.sglang_names import translate_args
from ansible_collections.llmops.sglang.plugins.module_utils.startup_log import parse_startup_log
from tests.conformance.conftest import extracted
from tests.conformance.real_logs import templates
from tests.conformance.release_checks import RULES, real_log
from tests.conformance.release_cli import real_cli, real_options

V21, V22, V23 = "0.5.21", "0.5.22", "0.5.23"
GONE_PIECEWISE = ("server_args.enforce_piecewise_cuda_graph: {release} has no --enforce-piecewise-cuda-graph, and "
                  "its --cuda-graph-backend-prefill no longer takes tc_piecewise (removed in 0.5.22); choose "
                  "--cuda-graph-backend-prefill from breakable, full, disabled (server_args "
                  "`cuda_graph_backend_prefill: breakable`)")


def _help(version: str) -> str:
    return real_cli(version)["help"]


def _flags(version: str) -> dict:
    return parse_help_flags(_help(version))


# --- item 1: enforce_piecewise_cuda_graph after tc_piecewise ------------------------------------------------------

@pytest.mark.parametrize("version", (V22, V23))
def test_enforce_piecewise_names_the_backends_the_release_takes(version):
    """0.5.22 retired tc_piecewise (0.5.22 sglang/srt/model_executor/cuda_graph_config.py lines 40-48:
    ``Backend.ALL = (FULL, BREAKABLE, DISABLED)``; lines 237-243: "tc_piecewise was removed; select breakable, full,
    or disabled"): the request is refused naming what the release's --help offers, by --help and by version alike."""
    assert real_options(version)["--cuda-graph-backend-prefill"]["choices"] == ["full", "breakable", "disabled"]
    assert validate_server_args({"enforce_piecewise_cuda_graph": True}, _flags(version)) == [
        GONE_PIECEWISE.format(release="the installed SGLang")]
    assert translate_args({"enforce_piecewise_cuda_graph": True}, version=version)[2] == [
        GONE_PIECEWISE.format(release=f"SGLang {version}")]


def test_enforce_piecewise_still_reads_as_tc_piecewise_on_0_5_21():
    assert "tc_piecewise" in real_options(V21)["--cuda-graph-backend-prefill"]["choices"]
    assert validate_server_args({"enforce_piecewise_cuda_graph": True}, _flags(V21)) == [
        "server_args.enforce_piecewise_cuda_graph: the installed SGLang has no --enforce-piecewise-cuda-graph (a "
        "deprecated alias from 0.5.14, removed in 0.5.20); use --cuda-graph-backend-prefill=tc_piecewise (server_args "
        "`cuda_graph_backend_prefill: tc_piecewise`)"]


@pytest.mark.parametrize(("version", "backend", "fires"), [(V21, "tc_piecewise", True), (V22, "breakable", False),
                                                           (V23, "full", False)])
def test_the_eagle_target_rule_fires_where_the_release_skips_the_graph(version, backend, fires):
    """The release skips the EAGLE target's prefill graph only on tc_piecewise (0.5.21 and 0.5.22
    model_executor/model_runner_components/cuda_graph_setup.py lines 493-508 / 490-505,
    ``check_cuda_graph_backend(Phase.PREFILL, Backend.TC_PIECEWISE)``), which only 0.5.21 still takes."""
    findings = evaluate_flag_rules(RULES, {"cuda_graph_backend_prefill": backend, "speculative_algorithm": "EAGLE"},
                                   {"sglang_version": version, "help_text": _help(version)})
    assert [finding["id"] for finding in findings] == (["prefill-cuda-graph-eagle-target"] if fires else [])
    if fires:
        assert findings[0]["flag"] == "cuda_graph_backend_prefill=tc_piecewise"


# --- item 2: decided by the host's --help ------------------------------------------------------------------------

def test_the_tc_compiler_is_gone_from_0_5_22():
    """0.5.21 arg_groups/fields/exec_.py line 533 declares cuda_graph_tc_compiler; 0.5.22's does not."""
    assert "--cuda-graph-tc-compiler" in real_options(V21) and "--cuda-graph-tc-compiler" not in real_options(V22)
    request = {"piecewise_cuda_graph_compiler": "eager"}
    assert validate_server_args(request, _flags(V21)) == [
        "server_args.piecewise_cuda_graph_compiler: the installed SGLang has no --piecewise-cuda-graph-compiler (a "
        "deprecated alias from 0.5.14, removed in 0.5.20); use --cuda-graph-tc-compiler=eager (server_args "
        "`cuda_graph_tc_compiler: eager`)"]
    gone = ("server_args.piecewise_cuda_graph_compiler: {} has neither --piecewise-cuda-graph-compiler nor "
            "--cuda-graph-tc-compiler (removed in 0.5.22); drop it")
    assert validate_server_args(request, _flags(V22)) == [gone.format("the installed SGLang")]
    assert translate_args(request, version=V22)[2] == [gone.format("SGLang 0.5.22")]


def test_the_hosts_help_wins_over_its_version():
    """A host whose version says 0.5.21 but whose code is 0.5.22's (a source install ahead of its metadata):
    its --help decides, so no finding points at tc_piecewise, which its parser refuses."""
    request = {"cuda_graph_backend_prefill": "tc_piecewise", "speculative_algorithm": "EAGLE"}
    by_version = evaluate_flag_rules(RULES, request, {"sglang_version": V21})
    by_help = evaluate_flag_rules(RULES, request, {"sglang_version": V21, "help_text": _help(V22)})
    assert [finding["flag"] for finding in by_version] == ["cuda_graph_backend_prefill=tc_piecewise"]
    assert by_help == []
    assert translate_args({"piecewise_cuda_graph_compiler": "eager"}, _flags(V22), V21)[2] == [
        "server_args.piecewise_cuda_graph_compiler: SGLang 0.5.21 has neither --piecewise-cuda-graph-compiler nor "
        "--cuda-graph-tc-compiler (removed in 0.5.22); drop it"]


# --- item 3: deprecations --------------------------------------------------------------------------------------

DEPRECATIONS = [
    # 0.5.14 server_args.py line 6376 (0.5.13: a plain store_true): DeprecatedStoreTrueAction,
    # new_flag="--cuda-graph-backend-{decode,prefill}=disabled"
    ({"disable_cuda_graph": True}, "0.5.13", None),
    ({"disable_cuda_graph": True}, V22,
     "server_args.disable_cuda_graph: in the installed SGLang --disable-cuda-graph is a deprecated alias of "
     "--cuda-graph-backend-decode=disabled --cuda-graph-backend-prefill=disabled (server_args "
     "`cuda_graph_backend_decode: disabled`, `cuda_graph_backend_prefill: disabled`), read as that; a later release "
     "may remove it"),
    # 0.5.22 server_args.py lines 415-423: new_flag="--attn-dp-size <dp-size>"
    ({"dp_size": 2, "enable_dp_attention": True}, V21, None),
    ({"dp_size": 2, "enable_dp_attention": True}, V23,
     "server_args.enable_dp_attention: in the installed SGLang --enable-dp-attention is a deprecated alias of "
     "--attn-dp-size=2 --dp-size=1 (server_args `attn_dp_size: 2`, `dp_size: 1`), read as that; a later release may "
     "remove it"),
    # 0.5.23 server_args.py lines 425-437: --monokernel-backend amd, new_flag="--enable-amd-monokernel"
    ({"monokernel_backend": "amd"}, V23,
     "server_args.monokernel_backend: in the installed SGLang --monokernel-backend is a deprecated alias of "
     "--enable-amd-monokernel (server_args `enable_amd_monokernel: true`), read as that; a later release may remove "
     "it"),
]


@pytest.mark.parametrize(("request_args", "version", "warning"), DEPRECATIONS)
def test_deprecated_flags_warn_with_what_to_use(request_args, version, warning):
    flags = _flags(version)
    assert validate_server_args(request_args, flags) == []
    assert deprecated_alias_warnings(request_args, flags) == ([warning] if warning else [])
    if warning:
        old = "--" + next(name for name in request_args if name in warning.split(":")[0]).replace("_", "-")
        assert "Deprecated" in real_options(version)[old]["action"]


def test_monokernel_backend_is_unknown_before_0_5_23():
    assert validate_server_args({"monokernel_backend": "amd"}, _flags(V22))[0].startswith(
        "server_args.monokernel_backend: the installed SGLang has no flag --monokernel-backend")


# --- item 4: attention DP -------------------------------------------------------------------------------------

def _dp_log(version: str, **dump) -> dict:
    return parse_startup_log(real_log(version, extra=dump))


@pytest.mark.parametrize("version", (V22, V23))
def test_the_old_dp_attention_spelling_is_a_rename_not_server_changes(version):
    """``--dp-size 2 --enable-dp-attention`` resolves to attn_dp_size=2, dp_size=1 (0.5.22
    arg_groups/parallel_hook.py lines 40-62) and the dump still reports enable_dp_attention (server_args.py lines
    316-332: ``resolved_dict()["enable_dp_attention"] = attn_dp_size > 1``)."""
    baseline = _dp_log(version)
    candidate = _dp_log(version, dp_size=1, attn_dp_size=2, enable_dp_attention=True)
    diff = diff_server_facts(baseline, candidate, {"tp_size": 4},
                             {"tp_size": 4, "dp_size": 2, "enable_dp_attention": True})
    assert diff["auto_adjusted"] == []
    assert deployment_gpus(candidate, None, None)[0] == 4


@pytest.mark.parametrize(("version", "dump", "gpus"), [
    # attention DP runs inside the TP group: 0.5.22 runtime_context.py line 73, attn_tp = tp // attn_dp // attn_cp
    (V21, {"dp_size": 2, "enable_dp_attention": True}, 4),
    (V22, {"dp_size": 1, "attn_dp_size": 2, "enable_dp_attention": True}, 4),
    # two replicas (dp_size counts replicas again from 0.5.22, parallel_hook.py line 45), each TP 4 with attention DP 2
    (V23, {"dp_size": 2, "attn_dp_size": 2, "enable_dp_attention": True}, 8),
    (V23, {"dp_size": 2}, 8),
])
def test_the_gpu_count_of_attention_dp(version, dump, gpus):
    assert deployment_gpus(_dp_log(version, **dump), None, None)[0] == gpus


@pytest.mark.parametrize("request_args", [{"attn_dp_size": 2}, {"dp_size": 2, "enable_dp_attention": True}])
def test_a_rule_on_dp_attention_reads_it_in_0_5_22s_name(request_args):
    """0.5.22 arg_groups/overrides.py lines 947-956 auto-enable the FlashInfer fusion only
    ``and not attn_dp_enabled_of(view)`` (runtime_context.py line 199: ``attn_dp_size > 1``)."""
    findings = evaluate_flag_rules(RULES, {"enable_flashinfer_allreduce_fusion": True, **request_args},
                                   {"sm": "sm90", "gpu_name": "NVIDIA_H100_80GB_HBM3", "sglang_version": V22,
                                    "help_text": _help(V22)})
    assert [finding["id"] for finding in findings] == ["allreduce-fusion-dp-attention"]
    assert findings[0]["flag"] == "flashinfer_allreduce_fusion_backend=auto"


# --- item 5: three-state flags ----------------------------------------------------------------------------------

@pytest.mark.parametrize("version", (V22, V23))
def test_false_is_spelled_out_for_the_releases_three_state_flags(version):
    """0.5.23 arg_groups/fields/exec_.py lines 45-53: ``enable_tf32_matmul: Optional[bool] = None`` with
    ``argparse.BooleanOptionalAction`` (GLM4-MoE and MiniMax-M2 resolve None to true: model_overrides/glm4_moe.py
    line 46, minimax_m2.py line 19); 0.5.22 (lines 45-51): a plain ``bool = False`` switch."""
    flags, options = _flags(version), real_options(version)
    three_state = {option["dest"]: string for string, option in options.items()
                   if option["action"] == "BooleanOptionalAction" and string.startswith("--no-")}
    assert ("enable_tf32_matmul" in three_state) == (version == V23)
    for dest, no_flag in three_state.items():
        assert to_cli_args({dest: False}, flags) == [no_flag]
    switches = [option["dest"] for option in options.values() if option["action"] == "_StoreTrueAction"]
    assert switches and all(to_cli_args({dest: False}, flags) == [] for dest in switches)
    assert validate_server_args({"enable_tf32_matmul": False}, flags) == []


# --- item 6: a removed flag ---------------------------------------------------------------------------------------

def test_a_removed_flag_is_named_removed_not_a_lookalike():
    """0.5.22 arg_groups/fields/spec.py line 229 declares speculative_skip_dp_mlp_sync; 0.5.23 has no trace of it."""
    assert "--speculative-skip-dp-mlp-sync" in real_options(V22)
    assert validate_server_args({"speculative_skip_dp_mlp_sync": True}, _flags(V22)) == []
    assert validate_server_args({"speculative_skip_dp_mlp_sync": True}, _flags(V23)) == [
        "server_args.speculative_skip_dp_mlp_sync: the installed SGLang has no --speculative-skip-dp-mlp-sync "
        "(removed in 0.5.23, with no replacement: the scheduler always runs the MLP sync when speculative decoding "
        "and DP attention are both on (unless SGLANG_ENABLE_DP_SPEC_PREFILL_COORDINATION is set)); drop it"]


# --- item 10: MoE config lines as users' logs carry them ----------------------------------------------------------

H800_UP = ("/usr/local/lib/python3.10/dist-packages/sglang/srt/layers/moe/moe_runner/triton_utils/configs/triton_3_5_1/"
           "E=256,N=256,device_name=NVIDIA_H800,dtype=fp8_w8a8,block_shape=[128, 128].json")
B200_UP = H800_UP.replace("NVIDIA_H800", "NVIDIA_B200").replace("triton_3_5_1", "triton_3_6_0")


def _moe_line(version: str, path: str) -> str:
    """The release's own warning (0.5.23 moe_runner/triton_utils/fused_moe_triton_config.py lines 162-176)."""
    template = templates(extracted(version), "Using default MoE kernel config")[0]
    return template.render({"config_file_path": path})


@pytest.mark.parametrize(("path", "gpu"), [(H800_UP, "NVIDIA_H800"), (B200_UP, "NVIDIA_B200")])
def test_the_gpu_is_read_from_a_moe_line_cut_before_its_file_name_ends(path, gpu):
    """A line cut short (a terminal's width, ``cut -c``) keeps device_name= but not the whole path: no config is
    reported, the GPU still is; a name cut inside is not read."""
    line = _moe_line(V23, path)
    cut = line[:line.index("dtype=fp8_w8a8") + 8]
    facts = parse_startup_log(f"[2026-11-30 10:01:23 TP0] {cut}\n")
    assert facts["moe_configs"] == [] and facts["gpu_name"] == gpu
    inside = line[:line.index("device_name=") + len("device_name=NVIDIA_H")]
    assert "gpu_name" not in parse_startup_log(f"[2026-11-30 10:01:23 TP0] {inside}\n")


def test_up_and_down_named_in_one_block_are_both_reported():
    """With no up and no down file 0.5.23 warns twice (fused_moe_triton_config.py lines 150-176: the down lookup
    first asks for the up config); a tool that folds a process's lines into one event carries both in one message."""
    down = H800_UP.replace(".json", "_down.json")
    block = _moe_line(V23, H800_UP) + " " + _moe_line(V23, down)
    facts = parse_startup_log(f"[2026-11-30 10:01:23 TP0] {block}\n")
    assert facts["missing_moe_configs"] == [H800_UP, down]
    assert [entry["kernel"] for entry in facts["moe_configs"]] == ["up", "down"]
    assert facts["gpu_name"] == "NVIDIA_H800"
