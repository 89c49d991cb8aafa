# Copyright (c) llmops.sglang contributors
# Apache License 2.0 (see LICENSE)
"""Flag compatibility: which requested SGLang flags cannot take effect on this GPU, model and version.

Private to the llmops.sglang collection.
"""
from __future__ import annotations

import re

_VERSION_BOUND = re.compile(r"^\s*(>=|<=|==|>|<)\s*([0-9][0-9a-zA-Z.]*)\s*$")


def version_tuple(version: str) -> tuple[int, ...]:
    return tuple(int(part) for part in re.findall(r"\d+", version)[:4])


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


def _condition_holds(name: str, expected, server_args: dict, context: dict) -> bool:
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
        return not server_args.get(expected)
    raise ValueError(f"requires.{name}: unknown condition (known: sm_in, single_node, gpu_name_not_regex, "
                     "topk_min, moe_dtype_not_in, without_arg)")


def evaluate_flag_rules(rules: list[dict], server_args: dict, context: dict) -> list[dict]:
    """Findings for requested flags that will not take effect.

    ``context``: ``sm`` (e.g. ``sm120``), ``gpu_name``, ``nnodes``, ``topk``, ``moe_dtype``,
    ``sglang_version``. Each finding says "will not take effect because ..." and cites the rule's source.
    """
    findings = []
    version = context.get("sglang_version") or "0"
    for rule in rules:
        if not server_args.get(rule["flag"]) or not version_in_range(version, rule.get("sglang")):
            continue
        failed = [name for name, expected in rule["requires"].items()
                  if not _condition_holds(name, expected, server_args, context)]
        if failed:
            reason = rule["reason"].format_map({**{k: context.get(k) for k in ("sm", "topk", "moe_dtype", "gpu_name")}})
            findings.append({"id": rule["id"], "flag": rule["flag"], "failed_conditions": failed,
                             "message": f"{rule['flag']} will not take effect because {reason}",
                             "source": rule["source"]})
    return findings
