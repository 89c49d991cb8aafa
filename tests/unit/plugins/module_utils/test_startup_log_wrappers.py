# Copyright (c) llmops.sglang contributors
# Apache License 2.0 (see LICENSE)
"""Logs as users have them (issue #38 items 9 and 11): passed through other tools, and failing.

The SGLang lines are 0.5.23's own, each with its origin (release, file, line of the format string or raise site);
the wrappers are the tools' own formats (origin beside each). tests/conformance/test_log_wrappers_conformance.py
writes the same wrappers around a log built from the wheel's format strings.
"""
from __future__ import annotations

import re
import textwrap
from pathlib import Path

import pytest

from ansible_collections.llmops.sglang.plugins.module_utils import startup_log
from ansible_collections.llmops.sglang.plugins.module_utils.startup_log import parse_startup_log
from tests.conformance.log_wrappers import IN_PROCESS, WRAPPERS

MODEL = "/srv/models/Qwen3.5-122B-A10B"
# 0.5.23 sglang/srt/entrypoints/engine.py line 311 `logger.info(f"server_args={_server_args_for_logging(server_args)}")`
# (a dict; attention_backend left out so that the fact comes from the runtime line alone)
DUMP = ("server_args={'model_path': '" + MODEL + "', 'tokenizer_path': '" + MODEL + "', 'tokenizer_mode': 'auto', "
        "'mem_fraction_static': 0.81, 'max_running_requests': None, 'chunked_prefill_size': 8192, "
        "'max_prefill_tokens': 16384, 'schedule_policy': 'fcfs', 'tp_size': 4, 'dp_size': 1, "
        "'moe_runner_backend': 'auto', 'speculative_algorithm': 'EAGLE', 'speculative_num_steps': 3, "
        "'speculative_eagle_topk': 1, 'speculative_num_draft_tokens': 4, 'api_key': None}")
READY = [
    # 0.5.23 sglang/srt/arg_groups/overrides.py line 1137
    "[2026-11-30 10:00:01] Attention backend not specified. Use triton backend by default.",
    "[2026-11-30 10:00:01] " + DUMP,
    # 0.5.23 sglang/srt/managers/scheduler.py line 1269
    "[2026-11-30 10:01:40 TP0] max_total_num_tokens=884397, chunked_prefill_size=8192, max_prefill_tokens=16384, "
    "max_running_requests=48, context_len=262144, available_gpu_mem=20.10 GB",
    # 0.5.23 sglang/srt/entrypoints/http_server.py (_wait_and_warmup)
    "[2026-11-30 10:01:45] The server is fired up and ready to roll!",
]
FAILED = READY[:2] + [
    # 0.5.23 sglang/srt/managers/scheduler.py line 6372 `logger.error(f"Scheduler hit an exception: {traceback}")`
    "[2026-11-30 10:01:39 TP0] Scheduler hit an exception: Traceback (most recent call last):",
    '  File "/opt/sglang/venv/lib/python3.11/site-packages/sglang/srt/managers/scheduler.py", line 6366, in '
    "run_scheduler_process",
    "    scheduler = Scheduler(server_args, port_args)",
    '  File "/opt/sglang/venv/lib/python3.11/site-packages/sglang/srt/model_executor/pool_configurator.py", '
    "line 99, in __post_init__",
    "    raise RuntimeError(msg)",
    # 0.5.23 sglang/srt/model_executor/pool_configurator.py lines 96-99
    "RuntimeError: Not enough memory. Please try to increase --mem-fraction-static. Current value: "
    "mem_fraction_static=0.81",
    # 0.5.23 sglang/srt/entrypoints/engine.py line 1978
    "[2026-11-30 10:01:40] Received sigquit from a child process. It usually means the child failed.",
]
FACTS = ("mem_fraction_static", "attention_backend", "max_running_requests", "max_total_num_tokens", "model_path",
         "tp_size", "speculative_algorithm", "ready", "timings")


@pytest.mark.parametrize("wrapper", list(WRAPPERS))
def test_wrapped_log_gives_the_facts_of_the_unwrapped_one(wrapper):
    expected, facts = parse_startup_log("\n".join(READY) + "\n"), parse_startup_log(WRAPPERS[wrapper](READY))
    assert expected["attention_backend"] == "triton" and expected["max_running_requests"] == 48
    assert {name: facts.get(name) for name in FACTS} == {name: expected.get(name) for name in FACTS}
    assert facts["error"] is None and "server_args_truncated" not in facts


@pytest.mark.parametrize("wrapper", list(WRAPPERS))
def test_wrapped_failure_gives_the_error_of_the_unwrapped_one(wrapper):
    expected = parse_startup_log("\n".join(FAILED) + "\n")["error"]
    error = parse_startup_log(WRAPPERS[wrapper](FAILED))["error"]
    assert expected["kind"] == "oom"
    if wrapper.endswith("rewrapped"):  # the exception line's rest is one more line of the traceback's text
        assert error["kind"] == expected["kind"] and expected["message"].startswith(error["message"])
        return
    assert (error["kind"], error["message"], error["suggestion"]) == (
        expected["kind"], expected["message"], expected["suggestion"])
    assert [line.strip() for line in error["lines"]] == [line.strip() for line in expected["lines"]]


@pytest.mark.parametrize("formatter", list(IN_PROCESS))
def test_records_formatted_by_the_host_process_give_the_facts(formatter):
    """SGLang inside the tool's process: its records carry the tool's prefix instead of SGLang's."""
    expected, facts = parse_startup_log("\n".join(READY) + "\n"), parse_startup_log(IN_PROCESS[formatter](READY))
    assert {name: facts.get(name) for name in FACTS if name != "timings"} == {
        name: expected.get(name) for name in FACTS if name != "timings"}
    error = parse_startup_log(IN_PROCESS[formatter](FAILED))["error"]
    assert (error["kind"], error["message"]) == ("oom", FAILED[-2])


def test_shell_prompts_in_pasted_output_end_lines_and_are_not_the_server():
    """An operator's paste: the command and a grep typed between two outputs; the grep names an OOM."""
    text = ("user@gpu01:~$ journalctl -u sglang --no-pager -o cat\n" + READY[0] + "\n" + READY[1][:300] + "\n"
            + "(venv) root@gpu01:/srv# tail -n 2 /var/log/sglang.log\n" + "\n".join(READY[2:]) + "\n"
            + "[root@gpu01 ~]# grep -c 'CUDA out of memory' /var/log/sglang.log\n0\n$ \n")
    facts = parse_startup_log(text)
    assert facts["error"] is None
    assert facts["attention_backend"] == "triton" and facts["max_running_requests"] == 48 and facts["ready"] is True
    # the dump was cut where the operator's paste stopped: not continued by the prompt's line
    assert facts["server_args_truncated"] is True and facts["mem_fraction_static"] == 0.81


@pytest.mark.parametrize("width", [60, 80, 100])
def test_lines_word_wrapped_at_spaces(width):
    """A viewer that wraps at word boundaries (textwrap, `fold -s`) drops the space it breaks at."""
    moe = ("[2026-11-30 10:01:23 TP0] Using MoE kernel config from /opt/sglang/venv/lib/python3.11/site-packages/"
           "sglang/srt/layers/moe/moe_runner/triton_utils/configs/triton_3_6_0/E=256,N=256,"
           "device_name=NVIDIA_H100_80GB_HBM3.json.")  # 0.5.23 fused_moe_triton_config.py
    lines = [*READY[:2], moe, *READY[2:]]
    wrapped = "".join("\n".join(textwrap.wrap(line, width, break_on_hyphens=False)) + "\n" for line in lines)
    expected, facts = parse_startup_log("\n".join(lines) + "\n"), parse_startup_log(wrapped)
    for name in (*FACTS, "moe_configs", "context_len"):
        assert facts.get(name) == expected.get(name), name


def test_attention_backend_line_wrapped_at_a_narrow_width():
    line = READY[0]
    facts = parse_startup_log(line[:70] + "\n" + line[70:] + "\n")
    assert facts["attention_backend"] == "triton"


# --- error kinds: the innermost cause --------------------------------------------------------------------------

SITE = "/opt/sglang/venv/lib/python3.11/site-packages/"


def _scheduler_traceback(*lines: str) -> str:
    return ("[2026-11-30 10:01:39 TP0] Scheduler hit an exception: Traceback (most recent call last):\n"
            + "".join(f"{line}\n" for line in lines)
            + "[2026-11-30 10:01:40] Received sigquit from a child process. It usually means the child failed.\n")


def _main_traceback(*lines: str) -> str:
    return "Traceback (most recent call last):\n" + "".join(f"{line}\n" for line in lines)


@pytest.mark.parametrize(("text", "kind", "message"), [
    # sgl-project/sglang#4130 (sgl-kernel's RMSNorm on a GPU its build lacks): the build, not the GPU being unavailable
    (_scheduler_traceback(
        f'  File "{SITE}sgl_kernel/elementwise.py", line 37, in rmsnorm',
        "    torch.ops.sgl_kernel.rmsnorm.default(out, input, weight, eps, enable_pdl)",
        "RuntimeError: RMSNorm failed with error code no kernel image is available for execution on the device"),
     "arch_unsupported",
     "RuntimeError: RMSNorm failed with error code no kernel image is available for execution on the device"),
    # sgl-project/sglang#5871 (Qwen3-30B-A3B-FP8 on A10, Triton's fp8 check)
    (_scheduler_traceback(
        f'  File "{SITE}triton/language/semantic.py", line 761, in cast',
        "ValueError: type fp8e4nv not supported in this architecture. The supported fp8 dtypes are "
        "('fp8e4b15', 'fp8e5')"),
     "arch_unsupported",
     "ValueError: type fp8e4nv not supported in this architecture. The supported fp8 dtypes are ('fp8e4b15', 'fp8e5')"),
    # triton-lang/triton#8539: the arch is named in the lines after the exception line (ptxas' stderr)
    (_scheduler_traceback(
        f'  File "{SITE}triton/backends/nvidia/compiler.py", line 460, in make_cubin',
        "    raise PTXASError(error)",
        "triton.runtime.errors.PTXASError: PTXAS error: Internal Triton PTX codegen error",
        "`ptxas` stderr:",
        "ptxas fatal   : Value 'sm_121a' is not defined for option 'gpu-name'"),
     "arch_unsupported", "triton.runtime.errors.PTXASError: PTXAS error: Internal Triton PTX codegen error"),
    # 0.5.23 sglang/kernels/ops/attention/flash_attention_v3.py line 139
    (_scheduler_traceback(
        f'  File "{SITE}sglang/kernels/ops/attention/flash_attention_v3.py", line 138, in flash_attn_with_kvcache',
        "    raise NotImplementedError(",
        "NotImplementedError: flash_attn at sgl-kernel is only supported on sm90 and above"),
     "arch_unsupported", "NotImplementedError: flash_attn at sgl-kernel is only supported on sm90 and above"),
    # A configuration error raised as a RuntimeError: 0.5.23 sglang/srt/arg_groups/kv_cache_hook.py line 128
    (_main_traceback(
        f'  File "{SITE}sglang/srt/server_args.py", line 402, in __post_init__',
        "    run_post_init_hooks(self)",
        f'  File "{SITE}sglang/srt/arg_groups/kv_cache_hook.py", line 128, in handle_kv_cache_dtype',
        "    raise RuntimeError(",
        "RuntimeError: --kv-cache-dtype=nvfp4 requires Blackwell SM100 or SM120. Use --kv-cache-dtype=fp4_mx_block16 "
        "for the block-size-16 FP4 recipe."),
     "config_error",
     "RuntimeError: --kv-cache-dtype=nvfp4 requires Blackwell SM100 or SM120. Use --kv-cache-dtype=fp4_mx_block16 "
     "for the block-size-16 FP4 recipe."),
    # 0.5.23 sglang/srt/arg_groups/validation_hook.py line 55: no flag named, the raise site says it is the flags
    (_main_traceback(
        f'  File "{SITE}sglang/srt/arg_groups/validation_hook.py", line 55, in validate_watermark',
        'ValueError: watermark context_window must be an integer from 1 to 64'),
     "config_error", "ValueError: watermark context_window must be an integer from 1 to 64"),
    # The scheduler's unrecognised cause, then the parent's 0.5.23 engine.py line 2003 RuntimeError: the generic
    # kind for the innermost traceback, not a runtime_error from the parent's report
    (_scheduler_traceback(
        f'  File "{SITE}sglang/srt/model_loader/loader.py", line 612, in load_weights',
        "    param = params_dict[name]",
        "KeyError: 'model.layers.47.mlp.experts.w2_weight'") + _main_traceback(
        f'  File "{SITE}sglang/srt/entrypoints/engine.py", line 2020, in _wait_for_scheduler_ready',
        "    raise _scheduler_died_error(j, scheduler_procs[j])",
        "RuntimeError: Rank 0 scheduler died during initialization (exit code: 1). If exit code is -9 (SIGKILL), "
        "a common cause is the OS OOM killer. Run `dmesg -T | grep -i oom` to check."),
     "unknown_traceback", "KeyError: 'model.layers.47.mlp.experts.w2_weight'"),
    # Only the parent's report (0.5.23 engine.py line 2032): SGLang says a child failed, the log holds no cause
    (_main_traceback(
        f'  File "{SITE}sglang/srt/entrypoints/engine.py", line 2031, in _wait_for_scheduler_ready',
        '    raise RuntimeError(',
        "RuntimeError: Initialization failed. Please see the error messages above."),
     "runtime_error", "RuntimeError: Initialization failed. Please see the error messages above."),
    # A chain: the innermost cause (torch's OOM) is the kind and the message, not the wrapper raised from it
    (_scheduler_traceback(
        f'  File "{SITE}torch/cuda/graphs.py", line 88, in capture_end',
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB.",
        "",
        "The above exception was the direct cause of the following exception:",
        "",
        "Traceback (most recent call last):",
        f'  File "{SITE}sglang/srt/model_executor/model_runner.py", line 2210, in init_device_graphs',
        "KeyError: 'capture_stream'"),
     "oom", "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB."),
])
def test_error_kind_is_the_innermost_cause(text, kind, message):
    error = parse_startup_log(text)["error"]
    assert (error["kind"], error["message"]) == (kind, message), error


def test_a_quoted_code_line_names_no_cause():
    """A traceback quotes the code of each frame: text in that code is not what went wrong."""
    error = parse_startup_log(_scheduler_traceback(
        f'  File "{SITE}sglang/srt/model_executor/model_runner.py", line 811, in init_memory_pool',
        '    logger.warning("CUDA out of memory while probing; retrying with a smaller pool")',
        "KeyError: 'num_key_value_heads'"))["error"]
    assert (error["kind"], error["message"]) == ("unknown_traceback", "KeyError: 'num_key_value_heads'")


def test_arch_unsupported_says_what_to_install():
    error = parse_startup_log(_scheduler_traceback(
        "RuntimeError: CUDA error: no kernel image is available for execution on the device"))["error"]
    assert error["kind"] == "arch_unsupported" and "architecture" in error["suggestion"]


# 0.5.23 sglang/srt/arg_groups/model_hook.py line 1033: SGLang turns the feature off and starts anyway
NOT_SUPPORTED_WARNING = ("[2026-11-30 10:00:01] Automatically turn off --chunked-prefill-size as it is not supported "
                         "for qwen3_5_moe")


def test_a_not_supported_warning_is_no_error():
    facts = parse_startup_log("\n".join([NOT_SUPPORTED_WARNING, *READY]) + "\n")
    assert facts["error"] is None and facts["ready"] is True


def test_a_not_supported_warning_is_not_the_cause_of_a_traceback():
    error = parse_startup_log(NOT_SUPPORTED_WARNING + "\n" + _scheduler_traceback(
        f'  File "{SITE}sglang/srt/model_loader/loader.py", line 612, in load_weights',
        "KeyError: 'model.layers.47.mlp.experts.w2_weight'"))["error"]
    assert (error["kind"], error["message"]) == (
        "unknown_traceback", "KeyError: 'model.layers.47.mlp.experts.w2_weight'")


def test_the_documented_kinds_are_the_parsers():
    """docs/support-matrix.md lists every kind, in rank order, each with a real line."""
    text = (Path(__file__).resolve().parents[4] / "docs" / "support-matrix.md").read_text(encoding="utf-8")
    section = text[text.index("### Failures: `error.kind`"):text.index("## Pinning and upgrading")]
    rows = re.findall(r"^\| `(\w+)` \| [^|]+ \| (.+) \|$", section, re.MULTILINE)
    assert [kind for kind, _ in rows] == list(startup_log._ERROR_KINDS)  # pylint: disable=protected-access
    assert all("`" in example for _, example in rows)
