# Copyright (c) llmops.sglang contributors
# Apache License 2.0 (see LICENSE)
"""The upgrade's part of a run's summary.json and report.md (playbooks/upgrade.yml's records, docs/upgrade.md): per
host the versions old -> new, whether the new release was ready there, its MoE configs carried, retuned and missing,
and what became of it (the canary's verdict, the promotion's rollout status); the canary's decision and what its
retune cost.

Private to the llmops.sglang collection (plugin_utils/run_report.py is the report's interface); controller-side.
"""
from __future__ import annotations

import typing as t
from pathlib import Path, PurePosixPath

from ansible_collections.llmops.sglang.plugins.module_utils import upgrade_verdict
from ansible_collections.llmops.sglang.plugins.plugin_utils import run_dir as layout
from ansible_collections.llmops.sglang.plugins.plugin_utils.run_dir import read_record

STAGE = "upgrade"
OUTCOMES = {"promote": "promoted (the canary)", "roll back": "rolled back (the canary)"}


def upgrade_summary(run_dir: Path) -> dict[str, t.Any] | None:
    """summary.json's ``upgrade``: None for a run without upgrade records."""
    hosts = layout.hosts(run_dir, [STAGE])
    if not hosts:
        return None
    verdicts = {host: read_record(run_dir, STAGE, host, record="canary") for host in hosts}
    canary = next((host for host, verdict in verdicts.items() if verdict), None)
    verdict = verdicts.get(canary)
    rollout = read_record(run_dir, "rollout", record="summary") or {}
    return {"canary": canary,
            "decision": verdict["report"]["decision"] if verdict else None,
            "summary": verdict["summary"] if verdict else None,
            "retune_cost": verdict["report"]["retune_cost"] if verdict else None,
            "promotion": bool(rollout.get("hosts")),
            "hosts": {host: _host(run_dir, host, verdict if host == canary else None, rollout) for host in hosts}}


def _host(run_dir: Path, host: str, verdict: dict | None, rollout: dict) -> dict[str, t.Any]:
    prediction = read_record(run_dir, STAGE, host, record="prediction") or {}
    promoted = (rollout.get("hosts") or {}).get(host)
    if verdict:
        configs = verdict["report"]["configs"]
    else:  # carried here; retuned on the canary and shipped at this host's promotion
        configs = upgrade_verdict.configs(prediction, _carried(run_dir, host),
                                          (promoted or {}).get("moe_configs") or () if _deployed(promoted) else ())
    return {"versions": upgrade_verdict.versions(prediction), "ready": prediction.get("ready"), "configs": configs,
            "kernels": {row["file_name"]: row["kernel"] for row in prediction.get("moe") or ()},
            "outcome": OUTCOMES[verdict["report"]["decision"]] if verdict else _promotion(host, promoted, rollout)}


def _carried(run_dir: Path, host: str) -> list[str]:
    carry = read_record(run_dir, STAGE, host, record="carry") or {}
    return [PurePosixPath(path).name for path in carry.get("installed") or ()] if carry.get("changed") else []


def _deployed(promoted: dict | None) -> bool:
    return bool(promoted) and promoted.get("status") == "deployed"


def _promotion(host: str, promoted: dict | None, rollout: dict) -> str:
    """What the promotion (the rollout's summary.json) did with a host other than the canary."""
    if not promoted:
        return "not switched"
    reasons = promoted.get("reasons") or ([promoted["reason"]] if promoted.get("reason") else [])
    undone = "; undone when a batch failed" if host in (rollout.get("undone") or ()) else ""
    return promoted["status"] + (f": {'; '.join(reasons)}" if reasons else "") + undone


def _change(old: str | None, new: str | None) -> str:
    return f"{old or '-'} -> {new or '-'}" if old != new else (new or "-")


def _kernels(names: list[str], kernels: dict[str, str]) -> str:
    """Config files by their kernel (up, down) in a table cell; the section names the files once, below the table."""
    return ", ".join(kernels.get(name, name) for name in names) or "-"


def _row(host: str, data: dict) -> list[str]:
    old, new = data["versions"]["current"], data["versions"]["new"]
    ready = {True: "yes", False: "no", None: "-"}[data["ready"]]
    configs, kernels = data["configs"], data["kernels"]
    return [host, *(_change(old[key], new[key]) for key in ("sglang", "triton", "torch")), ready,
            *(_kernels(configs[what], kernels) for what in ("carried", "retuned", "missing")), data["outcome"]]


def _files(hosts: dict) -> str:
    """The config file of each kernel, with the hosts that look it up."""
    files: dict[tuple[str, str], list[str]] = {}
    for host, data in hosts.items():
        for name, kernel in data["kernels"].items():
            files.setdefault((kernel, name), []).append(host)
    return "; ".join(f"{kernel} `{name}` ({', '.join(users)})" for (kernel, name), users in sorted(files.items()))


def upgrade_section(upgrade: dict, table: t.Callable[[list[str], list[list[str]]], str]) -> list[str]:
    """report.md's "Upgrade" section; ``table`` is the report's Markdown table."""
    canary, decision = upgrade["canary"], upgrade["decision"]
    head = (f"Canary {canary}: **{decision}**: {upgrade['summary'].removeprefix(decision + ': ')}." if canary
            else "No canary was judged (the upgrade stopped before its A/B, or ran with upgrade_canary_ab=false).")
    parts = ["## Upgrade", head]
    if upgrade["retune_cost"]:
        parts.append(f"{canary}: {upgrade_verdict.retune_text(upgrade['retune_cost'])}.")
    header = ["Host", "SGLang", "Triton", "torch", "Predicted ready", "Carried", "Retuned", "Missing", "Outcome"]
    parts.append(table(header, [_row(host, data) for host, data in upgrade["hosts"].items()]))
    if any(data["kernels"] for data in upgrade["hosts"].values()):
        parts.append("MoE config files: " + _files(upgrade["hosts"]) + ".")
    evidence = ([f"`{_relative(canary, 'canary_md')}` (old against new)"] if canary else [])
    evidence += [f"`{_relative('<host>', 'prediction_md')}`"]
    evidence += [f"`{layout.path(Path(), 'rollout', record='summary')}` (the promotion)"] if upgrade["promotion"] else []
    parts.append("Evidence: " + ", ".join(evidence) + ".")
    return parts


def _relative(host: str, record: str) -> Path:
    """A record of the upgrade's host folder, relative to the run directory (report.md lies there)."""
    return layout.path(Path(), STAGE, host, record=record)


def upgrade_lines(upgrade: dict | None) -> list[str]:
    """The upgrade's lines printed at the end of the report playbook."""
    if upgrade is None:
        return []
    versions = {_change(d["versions"]["current"]["sglang"], d["versions"]["new"]["sglang"]) for d in upgrade["hosts"].values()}
    head = f"upgrade: sglang {', '.join(sorted(versions))}"
    if upgrade["canary"]:
        head += f"; canary {upgrade['canary']}: {upgrade['summary']}"
    return [head] + [f"upgrade: {host}: {data['outcome']}" for host, data in upgrade["hosts"].items()
                     if host != upgrade["canary"]]
