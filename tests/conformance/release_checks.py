# Copyright (c) llmops.sglang contributors
# Apache License 2.0 (see LICENSE)
"""What the collection reads and accepts, checked against one real release's own artefacts.

Each ``check_*(version)`` returns a list of problems (empty: the capability works on that release) and is
used twice: by the conformance tests (one assertion per release) and by the support matrix
(docs/support-matrix.md is what these checks say, tests/conformance/test_support_matrix.py).

- ``check_help``: ``server_args.parse_help_flags`` on the release's real ``--help`` gives its real option
  set (every option string, value / optional value / several values, static choices), and
  ``validate_server_args`` accepts what the release accepts.
- ``check_names``: the sglang_names table says of each renamed arg what the release's argparse does
  (its own field, a deprecated alias onto the new dest with the same const, or gone), and a request in
  old names validates, warns or fails as the release would.
- ``check_flag_rules``: every flag a rule of roles/sglang_preflight/files/flag_rules.yml names (in the
  release's names) is an option of the release, within the rule's version range.
- ``check_facts`` / ``check_diff``: a startup log written from the release's own format strings
  (tests/conformance/real_logs.py; the server_args dump from its ServerArgs fields) gives the facts its
  server_args say, and server_args_diff reports a server-made change in that release's names.
"""
from __future__ import annotations

import re
from functools import lru_cache
from pathlib import Path
from typing import Any

import yaml

from ansible_collections.llmops.sglang.plugins.module_utils import sglang_names
from ansible_collections.llmops.sglang.plugins.module_utils.server_args import (
    deprecated_alias_warnings, parse_help_flags, validate_server_args)
from ansible_collections.llmops.sglang.plugins.module_utils.server_diff import diff_server_facts
from ansible_collections.llmops.sglang.plugins.module_utils.startup_log import parse_startup_log
from tests.conformance.conftest import extracted
from tests.conformance.moe_checks import TUNER_CLI, check_moe_lookup, check_tuner_driving
from tests.conformance.real_logs import Template, templates
from tests.conformance.release_cli import real_cli, real_options

ROOT = Path(__file__).resolve().parents[2]
RULES = yaml.safe_load((ROOT / "roles/sglang_preflight/files/flag_rules.yml").read_text(encoding="utf-8"))["rules"]
MODEL = "/srv/models/Qwen3.5-122B-A10B"
CONFIGS = "/opt/sglang/venv/lib/python3.11/site-packages/sglang/srt/layers/moe/moe_runner/triton_utils/configs/triton_3_6_0/"
UP = CONFIGS + "E=256,N=256,device_name=NVIDIA_RTX_PRO_6000_Blackwell_Server_Edition.json"
DOWN = UP.replace(".json", "_down.json")
# What the dump of every release holds in these tests (the fields the facts are read from).
REQUESTED = {"model_path": MODEL, "tokenizer_path": MODEL, "tp_size": 4, "mem_fraction_static": 0.81,
             "max_running_requests": 48, "chunked_prefill_size": 8192, "attention_backend": "triton",
             "speculative_algorithm": "EAGLE", "speculative_num_steps": 3, "speculative_eagle_topk": 1,
             "speculative_num_draft_tokens": 4, "api_key": "sk-not-for-logs"}


def _vt(version: str) -> tuple[int, ...]:
    return sglang_names.version_tuple(version)


# --- --help -----------------------------------------------------------------------------------------------

def check_help(version: str) -> list[str]:
    cli = real_cli(version)
    flags = parse_help_flags(cli["help"])
    real = real_options(version)
    problems = [f"{flag} listed by --help but not parsed" for flag in real if flag[2:].replace("-", "_") not in flags]
    problems += [f"{spec['flag']} parsed but not an option" for name, spec in flags.items()
                 if spec["flag"] not in real and name != "help"]
    for flag, option in real.items():
        spec = flags.get(flag[2:].replace("-", "_"))
        if spec is None:
            continue
        nargs = option["nargs"]
        shape = {"takes_value": nargs != 0, "value_optional": nargs in ("?", "*"), "multiple": nargs in ("*", "+")}
        got = {key: spec[key] for key in shape}
        if got != shape:
            problems.append(f"{flag}: nargs {nargs!r} read as {got}")
        choices = None if option["choices"] is None else [str(choice) for choice in option["choices"]]
        if choices and not any("<stub" in choice for choice in choices) and spec["choices"] != choices:
            problems.append(f"{flag}: choices {choices} read as {spec['choices']}")
    # values the release takes: one per value shape it has
    for flag, option in real.items():
        name = flag[2:].replace("-", "_")
        value: Any = True if option["nargs"] in (0, "?") else "x"
        if option["nargs"] in ("*", "+"):
            value = [option["choices"][0] if option["choices"] else "1"]
        elif option["choices"]:
            value = option["choices"][0]
        if "<stub" in str(value):
            continue
        value = [str(item) for item in value] if isinstance(value, list) else (
            value if isinstance(value, bool) else str(value))
        errors = validate_server_args({name: value}, flags)
        if errors:
            problems.append(f"{flag} {value!r} refused: {errors[0]}")
    return problems


# --- renamed args --------------------------------------------------------------------------------------------

def check_names(version: str) -> list[str]:
    real = real_options(version)
    fields = {field[0] for field in real_cli(version)["fields"]}
    flags = parse_help_flags(real_cli(version)["help"])
    problems = []
    for rename in sglang_names.RENAMES:
        by_version = sglang_names.status(rename, version=version)
        by_help = sglang_names.status(rename, flags)
        old, new = "--" + rename.old.replace("_", "-"), "--" + rename.new.replace("_", "-")
        if by_version != by_help:
            problems.append(f"{rename.old}: the table says {by_version} for {version}, its --help says {by_help}")
        if by_version == "current" and rename.old not in fields and (
                rename.first is None or _vt(version) >= _vt(rename.first)):
            problems.append(f"{rename.old}: not a ServerArgs field of {version}")
        if by_version == "alias" and rename.old_field_kept:  # its own switch, translated after parsing
            option = real.get(old)
            if option is None or option["dest"] != rename.old or "Deprecated" not in (option["help"] or ""):
                problems.append(f"{old}: not a switch documented as deprecated for {new} in {version}: {option}")
        elif by_version == "alias":
            option = real.get(old)
            if option is None or option["dest"] != rename.new or "Deprecated" not in option["action"]:
                problems.append(f"{old}: not a deprecated alias of {new} in {version}: {option}")
            elif rename.const is not None and str(option["const"]) not in (rename.const, "None"):
                problems.append(f"{old}: const {option['const']!r}, the table says {rename.const!r}")
        if by_version in ("removed", "gone") and old in real:
            problems.append(f"{old}: still an option of {version}")
        if by_version in ("alias", "removed") and rename.new not in fields:
            problems.append(f"{rename.new}: not a ServerArgs field of {version}")
        if by_version == "gone" and rename.const is None and (rename.new in fields or new in real):
            problems.append(f"{rename.new}: still in {version}")
        if by_version == "gone" and rename.const is not None and (
                new not in real or str(rename.const) in _choices(real[new])
                or set(rename.instead) != set(_choices(real[new]))):
            problems.append(f"{new}: {version} takes {_choices(real.get(new, {}))}, the table says "
                            f"{rename.const!r} is gone and {list(rename.instead)} remain")
        if by_version == "alias" and real.get(old, {}).get("new_flag"):
            problems += _release_advice_problems(rename, real[old]["new_flag"], flags, version)
        problems += _advice_problems(rename, flags, version)
    problems += _removal_problems(real, flags, version)
    # a request in 0.5.11's names, as a user upgrading would write it
    request = {"disable_piecewise_cuda_graph": True, "cuda_graph_max_bs": 32}
    errors, warnings = validate_server_args(request, flags), deprecated_alias_warnings(request, flags)
    expected = {"current": (0, 0), "alias": (0, 2), "removed": (2, 0)}[
        sglang_names.status(sglang_names.BY_OLD["cuda_graph_max_bs"], version=version)]
    if (len(errors), len(warnings)) != expected:
        problems.append(f"request {request}: errors {errors}, warnings {warnings}")
    if errors and not all("--cuda-graph-backend-prefill=disabled" in e or "--cuda-graph-max-bs-decode" in e
                          for e in errors):
        problems.append(f"errors do not name the new flags: {errors}")
    return problems


def _choices(option: dict) -> list[str]:
    return [str(choice) for choice in option.get("choices") or []]


def _sample_request(rename: sglang_names.Rename) -> dict[str, Any]:
    """A request in ``old``'s name, as a user of an older release writes it."""
    if rename.moves is not None:
        return {rename.moves[0]: 2, rename.old: True}
    return {rename.old: True if rename.const is not None else "1"}


# The part of a message that says what to write instead: after "use", "alias of" or "choose".
_ADVICE = re.compile(r"(?:; use |alias of |; choose )(?P<advice>.*)$")
_ADVISED_FLAG = re.compile(r"(--[a-z0-9][a-z0-9-]*)(?:=([^\s(,]+))?")


def _advice_problems(rename: sglang_names.Rename, flags: dict, version: str) -> list[str]:
    """Every flag (and value of the table's) the collection tells a user of ``old`` to write is one the release takes."""
    real = real_options(version, hidden=True)
    request = _sample_request(rename)
    problems = []
    for message in validate_server_args(request, flags) + deprecated_alias_warnings(request, flags):
        advice = _ADVICE.search(message)
        for flag, value in _ADVISED_FLAG.findall(advice.group("advice") if advice else ""):
            option = real.get(flag)
            if option is None:
                problems.append(f"{rename.old}: the advice names {flag}, which {version} does not have")
            elif rename.const is not None and value and _choices(option) and value not in _choices(option):
                problems.append(f"{rename.old}: the advice names {flag}={value}; {version} takes {_choices(option)}")
    return problems


def _release_advice_problems(rename: sglang_names.Rename, new_flag: str, flags: dict, version: str) -> list[str]:
    """The release's own deprecation pointer (``new_flag=`` of its Deprecated*Action, e.g.
    ``--cuda-graph-backend-{decode,prefill}=disabled``) names only flags the collection's warning names too."""
    pointed = [prefix + part for prefix, parts in re.findall(r"(--[a-z0-9-]+?)\{([a-z,]+)\}", new_flag)
               for part in parts.split(",")] or re.findall(r"--[a-z0-9][a-z0-9-]*", new_flag)
    warnings = " ".join(deprecated_alias_warnings(_sample_request(rename), flags))
    return [f"{rename.old}: {version} points to {flag} (new_flag={new_flag!r}), the warning does not: {warnings!r}"
            for flag in pointed if flag not in warnings]


def _removal_problems(real: dict, flags: dict, version: str) -> list[str]:
    """A flag the table says a release removed without replacement is absent from it on, refused naming the
    removal (not a similar-looking flag), and taken before."""
    problems = []
    for removal in sglang_names.REMOVALS:
        flag, request = "--" + removal.name.replace("_", "-"), {removal.name: True}
        errors = validate_server_args(request, flags)
        if _vt(version) >= _vt(removal.removed):
            if flag in real:
                problems.append(f"{flag}: still an option of {version}, the table says removed in {removal.removed}")
            if errors != [sglang_names.removal_error(removal)]:
                problems.append(f"{flag}: refused as {errors}")
        elif flag in real and errors:
            problems.append(f"{flag}: refused by {version}, which takes it: {errors}")
    return problems


# --- flag rules ------------------------------------------------------------------------------------------------

def _in_release(name: str, version: str) -> str:
    rename = sglang_names.BY_OLD.get(name)
    if rename is not None and sglang_names.status(rename, version=version) != "current":
        return rename.new
    return name


def check_flag_rules(version: str) -> list[str]:
    from ansible_collections.llmops.sglang.plugins.module_utils.flag_rules import version_in_range

    dests = {option["dest"] for option in real_cli(version)["options"]} | {field[0] for field in real_cli(version)["fields"]}
    problems = []
    for rule in RULES:
        if not version_in_range(version, rule.get("sglang")):
            continue
        named = [rule["flag"], *([rule["requires"]["without_arg"]] if "without_arg" in rule["requires"] else [])]
        problems += [f"rule {rule['id']}: {version} has no {_in_release(name, version)}" for name in named
                     if _in_release(name, version) not in dests]
        problems += _rule_value_problems(rule, version)
    return problems


def _rule_value_problems(rule: dict, version: str) -> list[str]:
    """A rule whose flag the release reads as one value of a new flag (``enforce_piecewise_cuda_graph`` ->
    ``cuda_graph_backend_prefill=tc_piecewise``) can fire only while the release takes that value."""
    rename = sglang_names.BY_OLD.get(rule["flag"])
    if rename is None or rename.const is None or sglang_names.status(rename, version=version) == "current":
        return []
    option = real_options(version).get("--" + rename.new.replace("_", "-"), {})
    if _choices(option) and str(rename.const) not in _choices(option):
        return [f"rule {rule['id']}: can never fire on {version}: --{rename.new.replace('_', '-')} takes "
                f"{_choices(option)}, not {rename.const}"]
    return []


# --- startup logs written from the release's format strings ------------------------------------------------

class _Dump:
    """The server_args value in a log call: prints as the release's dump (repr and str alike)."""

    def __init__(self, text: str) -> None:
        self.text = text

    def __repr__(self) -> str:
        return self.text

    __str__ = __repr__

    def __format__(self, spec: str) -> str:
        return self.text


def dump_args(version: str, overrides: dict[str, Any]) -> dict[str, Any]:
    """The release's own fields (defaults as printed) with ``overrides`` in that release's names."""
    values: dict[str, Any] = {}
    for name, default in real_cli(version)["fields"]:
        values[name] = overrides[name] if name in overrides else _Dump(default)
    missing = [name for name in overrides if name not in values]
    if missing:
        raise LookupError(f"sglang {version} has no ServerArgs field {missing}")
    return values


def dump_text(version: str, values: dict[str, Any]) -> str:
    """``ServerArgs(a=1, ...)`` (dataclass repr, <= 0.5.17) or ``{'a': 1, ...}`` (resolved_dict, 0.5.20+)."""
    if _vt(version) >= (0, 5, 20):
        return "{" + ", ".join(f"{name!r}: {value!r}" for name, value in values.items()) + "}"
    return "ServerArgs(" + ", ".join(f"{name}={value!r}" for name, value in values.items()) + ")"


def _one(version: str, anchor: str, *, where: str | None = None, holds: str | None = None,
         anywhere: bool = False) -> Template:
    found = [t for t in templates(extracted(version), anchor, anywhere=anywhere)
             if (where is None or where in t.path) and (holds is None or holds in t.text)]
    if not found:
        raise LookupError(f"sglang {version}: no log call {anchor!r} (where={where}, holds={holds})")
    return found[0]


def _graph_word(version: str, path: str) -> str:
    source = (extracted(version) / path).read_text(encoding="utf-8")
    return "CUDA graph" if '"cuda": "CUDA graph"' in source else "cuda graph"


def real_log(version: str, cuda_graph: dict[str, Any] | None = None, extra: dict[str, Any] | None = None) -> str:
    """A TP=4 speculative MoE start as ``version`` prints it, from its own log calls.

    ``cuda_graph``: the CUDA-graph fields of the dump in the release's names (default: prefill graphs
    disabled, decode batch size 48); ``extra``: further fields of the dump (the release's names)."""
    pcg_old = _vt(version) < (0, 5, 14)
    if cuda_graph is None:
        cuda_graph = ({"disable_piecewise_cuda_graph": True, "cuda_graph_max_bs": 48} if pcg_old
                      else {"cuda_graph_backend_prefill": "disabled", "cuda_graph_max_bs_decode": 48})
    dump = _Dump(dump_text(version, dump_args(version, {**REQUESTED, **cuda_graph, **(extra or {})})))
    lines: list[str] = []

    def emit(clock: str, ranks: str, template: Template, **values: Any) -> None:
        lines.append(f"[2026-11-30 10:{clock}{ranks}] " + template.render(values))

    emit("00:01", "", _one(version, "Attention backend not specified. Use"), backend="triton", attention_backend="triton")
    emit("00:01", "", _one(version, "server_args=", where="engine.py"), server_args=dump, resolved_dict=dump)
    capture = _one(version, "Capture ", holds=" end.", where="model_runner" if pcg_old or _vt(version) < (0, 5, 17)
                   else "cuda_graph_setup.py")
    capture = next(t for t in templates(extracted(version), "Capture ") if " end." in t.text and "prefill" not in t.text
                   and "piecewise" not in t.text and "extend" not in t.text and t.path == capture.path)
    graph = {"graph_backend[self.device]": _graph_word(version, capture.path),
             "graph_backend[model_runner.device]": _graph_word(version, capture.path)}
    if _vt(version) >= (0, 5, 17):
        kv = _one(version, ". dtype: ", where="memory_pool.py", holds="#tokens: {num_tokens}, K size", anywhere=True)
    else:
        kv = _one(version, "KV Cache is allocated", where="memory_pool.py", holds="K size")
    for rank in range(4):
        tag = f" TP{rank}"
        emit("00:05", tag, _one(version, "Load weight begin"), **{"get_available_gpu_memory(self.device, self.gpu_id)": 94.12})
        emit("01:20", tag, _one(version, "Load weight end", where="model_runner.py"), elapsed=75.02, weight_load_time=75.02,
             __name__="Qwen3_5MoeForCausalLM", quant_str="", after_avail_memory=37.31, **{"~": 0})
        emit("01:22", tag, kv, cache_name="KV Cache", post_capture_active=False, dtype="torch.bfloat16", num_tokens=900000,
             k_size_GB=5.0, v_size_GB=5.0)
        emit("01:22", tag, _one(version, "Memory pool end"), **{"get_available_gpu_memory(self.device, self.gpu_id)": 20.1})
        emit("01:23", tag, _one(version, "Using MoE kernel config from"), config_file_path=UP)
        if _vt(version) >= (0, 5, 16):  # first in the 0.5.16 wheel (test_down_kernel_message)
            emit("01:23", tag, _one(version, "Down MoE config file not found"), config_file_path=DOWN)
        else:
            emit("01:23", tag, _one(version, "Using MoE kernel config with down_moe=False"), config_file_path=DOWN)
        emit("01:37", tag, capture, capture_name="target verify", elapsed=14.02, capture_time=14.02, **graph)
        if pcg_old:
            emit("01:38", tag, _one(version, "Disable piecewise CUDA graph because --disable-piecewise-cuda-graph"))
        else:
            emit("01:38", tag, _one(version, "Disable prefill CUDA graph because cuda_graph_config"))
        if _vt(version) >= (0, 5, 17):
            emit("01:39", tag, _one(version, "Post-capture KV sizing: KV cache allocated"), dtype="torch.bfloat16",
                 max_total_num_tokens=884397)
    emit("01:40", " TP0", _one(version, "max_total_num_tokens=", where="scheduler.py"), max_total_num_tokens=884397,
         chunked_prefill_size=8192, max_prefill_tokens=16384, max_running_requests=48, context_len=262144)
    emit("01:45", "", _one(version, "The server is fired up"))
    return "\n".join(lines) + "\n"


def expected_facts(version: str) -> dict[str, Any]:
    kv_tokens = 884397 if _vt(version) >= (0, 5, 17) else 900000
    names = ({"disable_piecewise_cuda_graph": True, "cuda_graph_max_bs": 48} if _vt(version) < (0, 5, 14)
             else {"cuda_graph_backend_prefill": "disabled", "cuda_graph_max_bs_decode": 48})
    return {**{k: v for k, v in REQUESTED.items() if k not in ("tokenizer_path", "api_key")}, **names,
            "max_total_num_tokens": 884397, "kv_cache_tokens": kv_tokens, "ready": True, "error": None,
            "missing_moe_configs": [DOWN]}


def check_facts(version: str) -> list[str]:
    facts = parse_startup_log(real_log(version))
    problems = [f"{name}: expected {value!r}, read {facts.get(name)!r}" for name, value in expected_facts(version).items()
                if facts.get(name) != value]
    if facts.get("server_args", {}).get("api_key") != "<redacted>":
        problems.append("api_key not redacted")
    if facts.get("server_args_truncated"):
        problems.append("server_args read as truncated")
    if facts["timings"].get("cuda_graph_capture") != 14.02 or facts["timings"].get("load_weights") != 75.02:
        problems.append(f"timings {facts['timings']}")
    statuses = sorted((entry["kernel"], entry["status"]) for entry in facts["moe_configs"])
    if statuses != [("down", "missing"), ("up", "used")]:
        problems.append(f"MoE configs {statuses}")
    return problems


def check_diff(version: str) -> list[str]:
    """The prefill graph turned off by the server (requested nothing) in the release's names."""
    if _vt(version) < (0, 5, 14):
        before, after, name = {"disable_piecewise_cuda_graph": False}, {"disable_piecewise_cuda_graph": True}, \
            "disable_piecewise_cuda_graph"
    else:
        before, after, name = {"cuda_graph_backend_prefill": "tc_piecewise"}, {"cuda_graph_backend_prefill": "disabled"}, \
            "cuda_graph_backend_prefill"
    baseline, candidate = parse_startup_log(real_log(version, before)), parse_startup_log(real_log(version, after))
    requested = {"tp_size": 4, "speculative_algorithm": "EAGLE"}
    diff = diff_server_facts(baseline, candidate, requested, requested)
    problems = []
    if [entry["arg"] for entry in diff["auto_adjusted"]] != [name]:
        problems.append(f"auto_adjusted {diff['auto_adjusted']}")
    # the request in 0.5.11's name is the same request on every release: no server-made change
    same = diff_server_facts(candidate, candidate, requested, {**requested, "disable_piecewise_cuda_graph": True})
    if same["auto_adjusted"]:
        problems.append(f"disable_piecewise_cuda_graph: true read as a server change: {same['auto_adjusted']}")
    return problems


CHECKS = {"facts": check_facts, "side-effect diff": check_diff, "flag validation (--help)": check_help,
          "renamed flags": check_names, "flag rules": check_flag_rules,
          # tests/conformance/moe_checks.py (MoE config names/lookup/pairing, tuner CLI)
          "MoE names + lookup": check_moe_lookup, "tuner driving": check_tuner_driving}


def not_checked(capability: str, version: str) -> str | None:
    """Why ``capability`` cannot be checked on ``version``: the tuner scripts are not in the wheels, and
    tests/fixtures/sglang_tuner_cli holds their options only for some tags."""
    if capability == "tuner driving" and version not in TUNER_CLI:
        return "no tuner fixture for this tag"
    return None


@lru_cache(maxsize=None)
def run_check(capability: str, version: str) -> tuple[str, ...]:
    """The problems ``CHECKS[capability]`` finds on ``version``, computed once per session."""
    return tuple(CHECKS[capability](version))
