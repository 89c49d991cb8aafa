# Copyright (c) llmops.sglang contributors
# Apache License 2.0 (see LICENSE)
"""Flag compatibility: which requested SGLang flags cannot take effect on this GPU, model and version.

Private to the llmops.sglang collection.
"""
from __future__ import annotations

import re

from ansible_collections.llmops.sglang.plugins.module_utils.server_args import parse_help_flags
from ansible_collections.llmops.sglang.plugins.module_utils.sglang_names import (
    BY_OLD, requested_in_release, status, translate_args, version_tuple)

_VERSION_BOUND = re.compile(r"^\s*(>=|<=|==|>|<)\s*([0-9][0-9a-zA-Z.]*)\s*$")


def version_in_range(version: str, spec: str | None) -> bool:
    """``spec`` is comma-separated bounds like ``>=0.5.0,<0.5.11``; no spec matches every version."""
    if not spec:
        return True
    actual = version_tuple(version)
    checks = {">=": lambda a, b: a >= b, "<=": lambda a, b: a <= b, "==": lambda a, b: a == b,
              ">": lambda a, b: a > b, "<": lambda a, b: a < b}
    for bound in spec.split(","):
        match = _VERSION_BOUND.match(bound)
        if not match:
            raise ValueError(f"sglang: invalid version range {spec!r} (use e.g. '>=0.5.0,<0.5.11')")
        if not checks[match.group(1)](actual, version_tuple(match.group(2))):
            return False
    return True


def _condition_holds(name: str, expected, server_args: dict, context: dict, known_flags: dict | None) -> bool:
    if name == "sm_in":
        return context.get("sm") in expected
    if name == "single_node":
        return (context.get("nnodes") or 1) == 1 or not expected
    if name == "gpu_name_not_regex":
        return not re.search(expected, context.get("gpu_name") or "")
    if name == "topk_min":
        return (context.get("topk") or 0) >= expected
    if name == "moe_dtype_not_in":
        return context.get("moe_dtype") not in expected
    if name == "without_arg":
        return not _arg_set(server_args, expected, known_flags, context.get("sglang_version"))
    raise ValueError(f"requires.{name}: unknown condition (known: sm_in, single_node, gpu_name_not_regex, "
                     "topk_min, moe_dtype_not_in, without_arg)")


def _arg_set(server_args: dict, name: str, known_flags: dict | None, version: str | None) -> bool:
    """Whether ``name`` (a rule's flag, in any release's name) is requested in ``server_args`` (release names)."""
    rename = BY_OLD.get(name)
    state = status(rename, known_flags, version) if rename is not None else "current"
    if state == "gone":
        return False  # the release has no such setting: its parser refuses the request before any rule matters
    if state != "current":
        return requested_in_release(rename, server_args)
    return bool(server_args.get(name))


def _release_spelling(name: str, known_flags: dict | None, version: str | None) -> str:
    """A rule's flag as the release spells it: ``cuda_graph_backend_prefill=tc_piecewise`` for
    ``enforce_piecewise_cuda_graph`` on 0.5.14 - 0.5.21."""
    rename = BY_OLD.get(name)
    if rename is None or status(rename, known_flags, version) == "current":
        return name
    return f"{rename.new}={rename.const}" if rename.const is not None else rename.new


def _known_flags(context: dict) -> dict | None:
    """The installed release's flags, from its ``--help`` (context ``help_text``) when the host gave it."""
    help_text = context.get("help_text")
    return parse_help_flags(help_text) if help_text else None


def evaluate_flag_rules(rules: list[dict], server_args: dict, context: dict) -> list[dict]:
    """Findings for requested flags that will not take effect.

    ``context``: ``sm`` (e.g. ``sm120``), ``gpu_name``, ``nnodes``, ``topk``, ``moe_dtype``,
    ``sglang_version`` and, where the host printed it, ``help_text`` (``launch_server --help``): the release's
    own flags decide which names it takes, the version only without them. Each finding says "will not take
    effect because ..." and cites the rule's source. Rules and requests may use any release's name of a
    renamed arg (``disable_piecewise_cuda_graph`` or ``cuda_graph_backend_prefill: disabled``): both are read
    in the installed release's names.
    """
    findings = []
    version = context.get("sglang_version") or "0"
    known_flags = _known_flags(context)
    server_args = translate_args(server_args, known_flags, version=context.get("sglang_version"))[0]
    for rule in rules:
        if not _arg_set(server_args, rule["flag"], known_flags, context.get("sglang_version")) \
                or not version_in_range(version, rule.get("sglang")):
            continue
        failed = [name for name, expected in rule["requires"].items()
                  if not _condition_holds(name, expected, server_args, context, known_flags)]
        if failed:
            reason = rule["reason"].format_map({**{k: context.get(k) for k in ("sm", "topk", "moe_dtype", "gpu_name")}})
            flag = _release_spelling(rule["flag"], known_flags, context.get("sglang_version"))
            findings.append({"id": rule["id"], "flag": flag, "failed_conditions": failed,
                             "message": f"{flag} will not take effect because {reason}",
                             "source": rule["source"]})
    return findings


def _requested_flags(candidate_args: dict, version: str | None) -> set[str]:
    """The flags a candidate turns on, in the release's names (a flag set to false or null turns nothing on)."""
    translated = translate_args(candidate_args, version=version)[0]
    return {name for name, value in translated.items() if value not in (None, False, "", 0)}


def trial_plan(candidate: dict, findings: list[dict], skip_ineffective: bool = True,
               version: str | None = None) -> dict:
    """Whether a flag candidate is measured: not when the preflight found that none of its flags can take effect.

    ``findings``: the preflight's findings for the candidate (flag_findings.json; they may also name baseline flags,
    which are not the candidate's). A candidate is ineffective when every flag it turns on has a finding; it is
    skipped unless ``force: true`` is set on it or ``skip_ineffective`` is off. Returns ``skip``, ``ineffective``,
    ``findings`` (those about the candidate's flags), ``forced_by`` and, for a skip, the ``decision`` to record.
    """
    requested = _requested_flags(candidate.get("args") or {}, version)
    relevant = [finding for finding in findings or [] if finding["flag"].split("=", 1)[0] in requested]
    ineffective = bool(requested) and requested <= {finding["flag"].split("=", 1)[0] for finding in relevant}
    forced_by = None
    if ineffective and candidate.get("force"):
        forced_by = "force: true on the candidate"
    elif ineffective and not skip_ineffective:
        forced_by = "tuning_run_skip_ineffective: false"
    plan = {"skip": ineffective and forced_by is None, "ineffective": ineffective, "findings": relevant,
            "forced_by": forced_by}
    if plan["skip"]:
        reasons = [f"preflight: {finding['message']}" for finding in relevant]
        plan["decision"] = {
            "adopt": False, "action": "skip", "reasons": reasons, "findings": relevant,
            "summary": "skip: " + "; ".join(reasons) + " (not measured; force: true on the candidate measures it)"}
    return plan
