# Copyright (c) llmops.sglang contributors
# Apache License 2.0 (see LICENSE)
"""What changed between two SGLang starts, as told by their startup logs.

This module util is private to the llmops.sglang collection; do not use it from other collections.

Inputs are `startup_log.parse_startup_log` results plus the server args each start requested
(snake_case ServerArgs field names; `--kebab-case` flag spellings are accepted too, and names a newer
release renamed are read in its names, sglang_names). The dumps speak each release's names
(0.5.14+: cuda_graph_backend_prefill where 0.5.11 had disable_piecewise_cuda_graph). The diff names
what the server changed by itself, capacity changes, warnings that appeared or vanished and MoE
kernel configs whose status changed, and says it in sentences for reports.
"""
from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

from ansible_collections.llmops.sglang.plugins.module_utils.sglang_names import reads_as, renamed_in

CAPACITY_METRICS = ("max_running_requests", "max_total_num_tokens", "kv_cache_tokens")
# ServerArgs fields that take a new value on every start unless set (random_seed: random.randint).
_VOLATILE_ARGS = frozenset({"random_seed"})
# Fields a release derives from other requested fields: a change is the server's only when no request of the
# family changed (0.5.14+ cuda_graph_config is resolved from cuda_graph_backend_*/cuda_graph_max_bs_*/...).
_DERIVED_ARGS = {"cuda_graph_config": "cuda_graph_"}
# Decimal numbers in warnings are measurements (GB, ratios) that differ between starts.
_MEASUREMENT_RE = re.compile(r"\d+\.\d+")


def diff_server_facts(
    baseline: Mapping[str, Any],
    candidate: Mapping[str, Any],
    baseline_requested: Mapping[str, Any] | None,
    candidate_requested: Mapping[str, Any] | None,
) -> dict[str, Any]:
    """Diff candidate startup facts against baseline ones.

    Returns `auto_adjusted` (args the candidate server set differently from what was requested, or
    changed although the request did not), `capacity` (changed capacity metrics), `warnings_appeared`,
    `warnings_vanished`, `moe_configs_changed` and `summary_lines`. Raises TypeError naming the
    argument that is not a mapping.
    """
    for name, value in (("baseline", baseline), ("candidate", candidate)):
        if not isinstance(value, Mapping):
            raise TypeError(f"{name} must be a mapping of startup facts, got {type(value).__name__}")
    for name, value in (("baseline_requested", baseline_requested), ("candidate_requested", candidate_requested)):
        if value is not None and not isinstance(value, Mapping):
            raise TypeError(f"{name} must be a mapping of server args, got {type(value).__name__}")
    baseline_args, candidate_args = _mapping(baseline.get("server_args")), _mapping(candidate.get("server_args"))
    auto_adjusted = _auto_adjusted(
        baseline_args,
        candidate_args,
        _in_release_names(_requested(baseline_requested), baseline_args),
        _in_release_names(_requested(candidate_requested), candidate_args),
    )
    capacity = _capacity_changes(baseline, candidate)
    appeared = _new_warnings(_strings(candidate.get("warnings")), _strings(baseline.get("warnings")))
    vanished = _new_warnings(_strings(baseline.get("warnings")), _strings(candidate.get("warnings")))
    moe_changed = _moe_changes(baseline.get("moe_configs"), candidate.get("moe_configs"))
    summary = (
        [_describe_adjustment(entry) for entry in auto_adjusted]
        + [_describe_capacity(entry) for entry in capacity]
        + [f"new warning: {warning}" for warning in appeared]
        + [f"warning gone: {warning}" for warning in vanished]
        + [_describe_moe_change(entry) for entry in moe_changed]
    )
    return {
        "auto_adjusted": auto_adjusted,
        "capacity": capacity,
        "warnings_appeared": appeared,
        "warnings_vanished": vanished,
        "moe_configs_changed": moe_changed,
        "summary_lines": summary,
    }


def _mapping(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _strings(value: Any) -> list[str]:
    return [item for item in value if isinstance(item, str)] if isinstance(value, list) else []


def _requested(requested: Mapping[str, Any] | None) -> dict[str, Any]:
    """Requested args keyed by ServerArgs field name (`--max-running-requests` -> max_running_requests)."""
    return {str(key).lstrip("-").replace("-", "_"): value for key, value in (requested or {}).items()}


def _in_release_names(requested: dict[str, Any], effective: Mapping[str, Any]) -> dict[str, Any]:
    """A request in older names (``disable_piecewise_cuda_graph: true``) in the names of the release
    whose dump is ``effective`` (``cuda_graph_backend_prefill: disabled`` from 0.5.14, sglang_names).

    ``dp_size: 2, enable_dp_attention: true`` is ``attn_dp_size: 2, dp_size: 1`` in a 0.5.22+ dump, which
    still reports ``enable_dp_attention`` (true while attention DP runs): a rename, not two changes the
    server made."""
    translated: dict[str, Any] = {}
    moved: dict[str, Any] = {}
    for name, value in requested.items():
        rename = renamed_in(name, effective)
        if rename is None:
            translated.setdefault(name, value)
            continue
        applies, fields = reads_as(rename, value, requested)
        if applies and rename.moves is not None:
            moved.update(fields)
            translated[name] = value  # still reported under its old name
        elif applies:
            translated.update(fields)
    return {**translated, **moved}


def _canonical(value: Any) -> Any:
    """A form in which a requested value (YAML, survey text) equals the repr'd effective value."""
    if value is None or isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, (int, float)):
        return float(value)
    if isinstance(value, str):
        text = value.strip()
        if text[:1] in ("{", "["):
            try:
                return _canonical(json.loads(text))
            except ValueError:
                return text
        try:
            return float(text)
        except ValueError:
            return text.lower()
    if isinstance(value, Mapping):
        return {str(key): _canonical(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_canonical(item) for item in value]
    return value


def _same(left: Any, right: Any) -> bool:
    return left == right or _canonical(left) == _canonical(right)


def _auto_adjusted(
    baseline_args: Mapping[str, Any],
    candidate_args: Mapping[str, Any],
    baseline_requested: dict[str, Any],
    candidate_requested: dict[str, Any],
) -> list[dict[str, Any]]:
    adjusted = []
    for arg, effective in candidate_args.items():
        if arg in _VOLATILE_ARGS:
            continue
        if arg in candidate_requested:
            requested = candidate_requested[arg]
            if _same(requested, effective):
                continue
        else:
            # A change is the server's doing only when the request for it did not change too.
            if arg in baseline_requested or arg not in baseline_args or _same(baseline_args[arg], effective):
                continue
            family = _DERIVED_ARGS.get(arg)
            if family is not None and _family_request_changed(family, baseline_requested, candidate_requested):
                continue
            requested = None
            if isinstance(effective, Mapping) and isinstance(baseline_args[arg], Mapping):
                adjusted.extend({"arg": path, "requested": None, "effective": after, "baseline": before}
                                for path, before, after in _changed_leaves(arg, baseline_args[arg], effective))
                continue
        adjusted.append({"arg": arg, "requested": requested, "effective": effective, "baseline": baseline_args.get(arg)})
    return adjusted


def _changed_leaves(path: str, before: Mapping[str, Any], after: Mapping[str, Any]) -> list[tuple[str, Any, Any]]:
    """What the server changed inside a nested setting, by dotted path: 0.5.23's resolved ``cuda_graph_config``
    holds every phase's graph settings, of which one (``cuda_graph_config.prefill.backend``) changes."""
    changed = []
    for key in dict.fromkeys([*before, *after]):
        old, new = before.get(key), after.get(key)
        if isinstance(old, Mapping) and isinstance(new, Mapping):
            changed += _changed_leaves(f"{path}.{key}", old, new)
        elif not _same(old, new):
            changed.append((f"{path}.{key}", old, new))
    return changed


def _family_request_changed(prefix: str, baseline_requested: dict[str, Any], candidate_requested: dict[str, Any]) -> bool:
    names = {name for name in (*baseline_requested, *candidate_requested) if name.startswith(prefix)}
    return any(not _same(baseline_requested.get(name), candidate_requested.get(name)) for name in names)


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _capacity_changes(baseline: Mapping[str, Any], candidate: Mapping[str, Any]) -> list[dict[str, Any]]:
    changes = []
    for metric in CAPACITY_METRICS:
        before, after = baseline.get(metric), candidate.get(metric)
        if not (_is_number(before) and _is_number(after)) or before == after:
            continue
        change_pct = round((after - before) / before * 100, 1) if before else None
        changes.append({"metric": metric, "baseline": before, "candidate": after, "change_pct": change_pct})
    return changes


def _new_warnings(warnings: list[str], reference: list[str]) -> list[str]:
    """Warnings not in `reference`, ignoring measured values inside them."""
    known = {_MEASUREMENT_RE.sub("#", warning) for warning in reference}
    return [warning for warning in warnings if _MEASUREMENT_RE.sub("#", warning) not in known]


def _moe_by_file(entries: Any) -> dict[tuple[str, str], Mapping[str, Any]]:
    """MoE config entries keyed by (kernel, file name): the same shape across config dirs."""
    keyed: dict[tuple[str, str], Mapping[str, Any]] = {}
    for entry in entries if isinstance(entries, list) else []:
        if isinstance(entry, Mapping) and isinstance(entry.get("path"), str):
            keyed.setdefault((str(entry.get("kernel")), entry["path"].rsplit("/", 1)[-1]), entry)
    return keyed


def _moe_changes(baseline_entries: Any, candidate_entries: Any) -> list[dict[str, Any]]:
    before, after = _moe_by_file(baseline_entries), _moe_by_file(candidate_entries)
    changes = []
    for key in dict.fromkeys([*before, *after]):
        old, new = before.get(key), after.get(key)
        if old is not None and new is not None and dict(old) == dict(new):
            continue
        kernel, file_name = key
        changes.append({"kernel": kernel, "file": file_name, "baseline": old, "candidate": new})
    return changes


def _describe_adjustment(entry: Mapping[str, Any]) -> str:
    if entry["requested"] is None:
        return f"{entry['arg']} set by the server (not requested): {entry['baseline']!r} -> {entry['effective']!r}"
    return f"{entry['arg']} requested {entry['requested']!r} but the server used {entry['effective']!r}"


def _describe_capacity(entry: Mapping[str, Any]) -> str:
    change = "" if entry["change_pct"] is None else f" ({entry['change_pct']:+.0f}%)"
    return f"{entry['metric']} {entry['baseline']} -> {entry['candidate']}{change}"


def _describe_moe_change(entry: Mapping[str, Any]) -> str:
    old, new = entry["baseline"], entry["candidate"]
    old_status = old.get("status") if old is not None else "not reported"
    new_status = new.get("status") if new is not None else "not reported"
    detail = " (path changed)" if old_status == new_status else ""
    return f"MoE {entry['kernel']} kernel config {entry['file']}: {old_status} -> {new_status}{detail}"
