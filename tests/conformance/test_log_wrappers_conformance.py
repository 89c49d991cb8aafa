# Copyright (c) llmops.sglang contributors
# Apache License 2.0 (see LICENSE)
"""Logs passed through other tools (issue #38 item 9) and the error kinds of the release's raise sites (item 11),
written from the real release's own code.

The log is 0.5.23's (tests/conformance/release_checks.real_log: every line rendered from the wheel's log calls), with
a failing tail built from the wheel too: the scheduler's ``Scheduler hit an exception: {traceback}`` log call, the
raise site of the memory check (its message read from the wheel's source) and the parent's sigquit log call. Each
wrapper of tests/conformance/log_wrappers.py is put around it, and each host-process formatter in place of SGLang's
prefix; the facts and the error must be those of the unwrapped log.
"""
from __future__ import annotations

import ast
import re

import pytest

from ansible_collections.llmops.sglang.plugins.module_utils.startup_log import parse_startup_log
from tests.conformance.conftest import extracted
from tests.conformance.real_logs import _pieces, template
from tests.conformance.release_checks import real_log
from tests.conformance.log_wrappers import IN_PROCESS, WRAPPERS

VERSION = "0.5.23"
# the dump's three forms: the dataclass repr (0.5.10), resolved_dict() (0.5.20), _server_args_for_logging() (0.5.23)
FACT_VERSIONS = ("0.5.10", "0.5.20", VERSION)
FACTS = ("mem_fraction_static", "attention_backend", "max_running_requests", "max_total_num_tokens",
         "kv_cache_tokens", "model_path", "tp_size", "speculative_algorithm", "missing_moe_configs", "gpu_name",
         "ready", "timings", "server_args")
# 0.5.23 sglang/srt/model_executor/pool_configurator.py lines 96-99: the message and how it is completed
_OOM_SITE = "sglang/srt/model_executor/pool_configurator.py"
_OOM_MESSAGE_RE = re.compile(r'msg = "(Not enough memory\. Please try to increase --mem-fraction-static\.)"\n'
                             r'.*?msg \+= f" Current value: mem_fraction_static=\{self\.mem_fraction_static\}"',
                             re.DOTALL)


def _failing_log() -> str:
    """The start up to the KV pool, then the scheduler's OOM as 0.5.23 prints it."""
    src = extracted(VERSION)
    source = (src / _OOM_SITE).read_text(encoding="utf-8")
    match = _OOM_MESSAGE_RE.search(source)
    assert match is not None, f"{_OOM_SITE} no longer raises the OOM message this test was written from"
    line = source[:match.start()].count("\n") + 1
    traceback = (
        "Traceback (most recent call last):\n"
        f'  File "/opt/sglang/venv/lib/python3.11/site-packages/{_OOM_SITE}", line {line + 3}, in __post_init__\n'
        "    raise RuntimeError(msg)\n"
        f"RuntimeError: {match.group(1)} Current value: mem_fraction_static=0.81\n")
    started = [line for line in real_log(VERSION).splitlines() if "max_total_num_tokens=" not in line
               and "fired up" not in line]
    scheduler = template(src, "Scheduler hit an exception", where="managers/scheduler.py")
    sigquit = template(src, "Received sigquit from a child process", where="entrypoints/engine.py")
    return "\n".join(started + [f"[2026-11-30 10:01:39 TP0] {scheduler.render({'traceback': traceback})}".rstrip(),
                                f"[2026-11-30 10:01:40] {sigquit.render({})}"]) + "\n"


@pytest.mark.parametrize("wrapper", list(WRAPPERS))
@pytest.mark.parametrize("version", FACT_VERSIONS)
def test_wrapped_release_log_gives_the_same_facts(version, wrapper):
    lines = real_log(version).splitlines()
    expected, facts = parse_startup_log("\n".join(lines) + "\n"), parse_startup_log(WRAPPERS[wrapper](lines))
    assert expected["ready"] is True and expected["mem_fraction_static"] == 0.81
    assert {name: facts.get(name) for name in FACTS} == {name: expected.get(name) for name in FACTS}
    assert facts["error"] is None and "server_args_truncated" not in facts


@pytest.mark.parametrize("wrapper", list(WRAPPERS))
def test_wrapped_release_failure_gives_the_same_error(wrapper):
    text = _failing_log()
    expected = parse_startup_log(text)["error"]
    error = parse_startup_log(WRAPPERS[wrapper](text.splitlines()))["error"]
    assert expected["kind"] == "oom" and expected["message"].startswith("RuntimeError: Not enough memory.")
    assert error["kind"] == expected["kind"] and error["suggestion"] == expected["suggestion"]
    # a re-wrapping tool cuts the exception line at its width: the rest is a line of the traceback's text
    assert expected["message"].startswith(error["message"]) if wrapper.endswith("rewrapped") \
        else error["message"] == expected["message"]


@pytest.mark.parametrize("formatter", list(IN_PROCESS))
def test_release_records_formatted_by_the_host_process(formatter):
    """SGLang inside the tool's process (xinference's model actor): the tool's formatter instead of SGLang's prefix."""
    lines = real_log(VERSION).splitlines()
    expected, facts = parse_startup_log("\n".join(lines) + "\n"), parse_startup_log(IN_PROCESS[formatter](lines))
    same = [name for name in FACTS if name != "timings"]  # the tool's clock is not SGLang's
    assert {name: facts.get(name) for name in same} == {name: expected.get(name) for name in same}
    failing = _failing_log()
    expected_error = parse_startup_log(failing)["error"]
    error = parse_startup_log(IN_PROCESS[formatter](failing.splitlines()))["error"]
    assert (error["kind"], error["message"]) == (expected_error["kind"], expected_error["message"])


# --- error kinds from the release's raise sites (issue #38 item 11) ----------------------------------------------

_CONFIG_FILES = ("sglang/srt/server_args.py", "sglang/srt/arg_groups")
_SITE = "/opt/sglang/venv/lib/python3.11/site-packages/"
_RAISED = ("ValueError", "RuntimeError", "NotImplementedError", "AssertionError")


def _config_raise_sites(src) -> list[tuple[str, int, str, str]]:
    """(file, line, type, message) of every `raise <Type>("...")` and `assert ..., "..."` of ServerArgs' checks."""
    files = [src / _CONFIG_FILES[0], *sorted((src / _CONFIG_FILES[1]).rglob("*.py"))]
    sites = []
    for path in files:
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Raise) and isinstance(node.exc, ast.Call) and isinstance(node.exc.func, ast.Name) \
                    and node.exc.func.id in _RAISED and node.exc.args:
                kind, message_node = node.exc.func.id, node.exc.args[0]
            elif isinstance(node, ast.Assert) and node.msg is not None:
                kind, message_node = "AssertionError", node.msg
            else:
                continue
            pieces = _pieces(message_node)
            if pieces:
                text = "".join(piece if isinstance(piece, str) else "{" + piece.expression + "}" for piece in pieces)
                sites.append((str(path.relative_to(src)), node.lineno, kind, " ".join(text.split())))
    return sites


def test_every_flag_check_of_the_release_is_a_config_error():
    """Each exception 0.5.23's ServerArgs checks raise (server_args.py and arg_groups/, hundreds of sites), printed
    as the main process prints it, is config_error: whatever its type and words (a RuntimeError, "requires SM100",
    "not supported"), the raise site says the flags are the cause. A port check's message is the port's."""
    src = extracted(VERSION)
    sites = _config_raise_sites(src)
    assert len(sites) > 300
    wrong = []
    for path, line, kind, message in sites:
        text = ("Traceback (most recent call last):\n"
                f'  File "{_SITE}sglang/srt/server_args.py", line 402, in __post_init__\n'
                "    run_post_init_hooks(self)\n"
                f'  File "{_SITE}{path}", line {line}, in check\n'
                "    raise ...\n"
                f"{kind}: {message}\n")
        error = parse_startup_log(text)["error"]
        expected = "port_in_use" if "already in use" in message.lower() else "config_error"
        if error["kind"] != expected:
            wrong.append((path, line, error["kind"], message))
    assert wrong == []
