# Copyright (c) llmops.sglang contributors
# Apache License 2.0 (see LICENSE)
"""report.md of a tuning run and the lines the report prints, from its summary (_report_summary) and the
measurements it was built from: the outcome table, per host its decisions as plain sentences with their evidence, the
goodput search, the GPU-minutes, the drift check, the throughput tables, what the server changed by itself, the MoE
kernel table and the adopted configuration.

Private to the llmops.sglang collection (plugin_utils/run_report.py is the report's interface); controller-side.
"""
from __future__ import annotations

import json
import statistics
import textwrap
from pathlib import Path

from ansible_collections.llmops.sglang.plugins.module_utils.gpu_cost import PART_LABELS, PARTS
from ansible_collections.llmops.sglang.plugins.plugin_utils._report_search import FRONT_LATENCIES, FRONT_PERCENTILE
from ansible_collections.llmops.sglang.plugins.plugin_utils._report_summary import STAGES, level_values
from ansible_collections.llmops.sglang.plugins.plugin_utils._report_upgrade import upgrade_lines, upgrade_section
from ansible_collections.llmops.sglang.plugins.plugin_utils.run_dir import read_record

KEY_LEVEL_HINT = "the highest concurrency measured in both the baseline and the final sweep"
# Each decision's plain sentence, before its evidence (decisions.decide_trial, restart_check, flag_rules).
DECISION_SENTENCES = {"adopt": "Adopted: it measured better than the configuration before it.",
                      "revert": "Not adopted: the configuration before it stays.",
                      "skip": "Not measured: the preflight found it would change nothing on this host.",
                      "restart_check": "Not adopted yet: a fresh restart must confirm the gain first."}
# The search's trial states as the report names them: an invalid candidate was skipped without a start.
SEARCH_STATES = {"complete": "complete", "infeasible": "infeasible", "invalid": "skipped"}
REASON_WIDTH = 160  # a failed start's reason is the server's whole error; summary.json keeps it


def _number(value: float | None) -> str:
    return "-" if value is None else f"{value:,.1f}"


def _table(header: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    return "\n".join(lines + ["| " + " | ".join(row) + " |" for row in rows])


def _throughput_table(measurements: list[dict], field: str) -> str:
    columns = {m["label"]: level_values(m["sweep"], field) for m in measurements if m["sweep"]}
    levels = sorted({c for values in columns.values() for c in values})
    rows = [[str(c)] + [_number(values.get(c)) for values in columns.values()] for c in levels]
    return _table(["C", *columns], rows)


def _outcome_row(host: str, summary: dict) -> list[str]:
    numbers, adopted = summary["numbers"], summary["adopted"] or {}
    key = str(numbers.get("key_concurrency"))
    change = numbers.get("key_change_pct")
    name = f"{host} (emulated)" if summary["emulated"] else host
    return [name, key if key != "None" else "-", _number(numbers.get("baseline_agg_tok_s", {}).get(key)),
            _number(numbers.get("final_agg_tok_s", {}).get(key)), "-" if change is None else f"{change:+.1f}%",
            f"{numbers.get('baseline_max_running_requests', '-')} -> {numbers.get('final_max_running_requests', '-')}",
            adopted.get("stage", "-"), _number(summary["cost"]["gpu_minutes"])]


def _cost_note(cost: dict) -> str:
    if not cost["emulated"]:
        return "GPUs x wall time of each stage that measured or tuned."
    return ("Emulated GPUs: the real-GPU equivalent (the time the server, the benchmark and the tuner timed as their "
            f"work divided by the emulator's time scale; the rest as measured). Wall time here: "
            f"{cost['wall_gpu_minutes']:,.1f} GPU-min.")


def _trial_note(trial: dict) -> str:
    if trial["skipped"]:
        saved = trial["saved_gpu_minutes"]
        return "skipped (preflight)" + (f", saved ~{saved:,.1f} GPU-min" if saved is not None else "")
    return f"measured although the preflight found it ineffective ({trial['forced_by']})" if trial["forced_by"] else ""


def _cost_section(summary: dict) -> list[str]:
    cost = summary["cost"]
    rows = []
    for stage in (name for name in STAGES if name in summary["stages"]):
        record = summary["stages"][stage].get("cost")
        if record:
            parts = record.get("parts") or {}
            rows.append([stage, str(record["gpus"]), _number(record["real_s"] / 60), _number(record["gpu_minutes"])]
                        + [_number((parts.get(name) or {}).get("gpu_minutes")) for name in PARTS])
    if not rows:
        return []  # a run from before the accounting
    header = ["Stage", "GPUs", "Minutes", "GPU-min", *(PART_LABELS[name] for name in PARTS)]
    parts = ["### GPU-minutes", f"Total: **{cost['gpu_minutes']:,.1f} GPU-min**. {_cost_note(cost)}", _table(header, rows)]
    trials = [[t["label"], _number(t["gpu_minutes"]), _trial_note(t)] for t in cost["trials"]]
    if trials:
        parts.append(_table(["Configuration", "GPU-min", "Note"], trials))
    if cost["moe"]:
        parts.append(_moe_cost_text(cost["moe"]))
    return parts


def _drift_section(drift: dict | None) -> list[str]:
    if drift is None:
        return []
    lines = [f"- {entry['label']} ({entry['action']}): {entry['why']}" for entry in drift["within_drift"]]
    if lines:
        lines.insert(0, "Decisions a drift of this size could have flipped (measure them again):")
    return ["### Drift check", drift["summary"] + "."] + (["\n".join(lines)] if lines else [])


def _moe_cost_text(moe: dict) -> str:
    measured, per_config = moe["measured_seconds_per_config"], moe["seconds_per_config"]
    estimated = f", {per_config:g} s per config" if per_config else ""
    measured_text = f", {measured:g} s per config measured" if measured else ""
    text = (f"MoE stage: estimated {_number(moe['estimate_gpu_minutes'])} GPU-min before the server stopped (tuning "
            f"{_number(moe['estimate_tuning_gpu_minutes'])}{estimated}), actual {_number(moe['actual_gpu_minutes'])} "
            f"GPU-min (tuning {_number(moe['actual_tuning_gpu_minutes'])}{measured_text}).")
    return text + (" " + _engine_cost_text(moe["engine"]) if moe.get("engine") else "")


def _engine_cost_text(engine: dict) -> str:
    """``MoE engine: estimated 3.9 engine GPU-min, actual 4.1; <file>: cache miss (key 3f9a1c2b4d5e), ...``."""
    shapes = "; ".join(f"{shape['file_name']}: cache {shape['cache'] or 'not used'}"
                       + (f" (key {shape['key_short']})" if shape["key_short"] else "") for shape in engine["shapes"])
    return (f"MoE engine: estimated {_number(engine['estimate_gpu_minutes'])} engine GPU-min, actual "
            f"{_number(engine['actual_gpu_minutes'])}" + (f"; {shapes}" if shapes else "") + ".")


def _params_text(params: dict) -> str:
    return ", ".join(f"{name}={value}" for name, value in params.items())


def _slo_text(slo: dict | None) -> str:
    if not slo:
        return "not recorded"
    return ", ".join(f"p{spec['percentile']:g} {metric.removesuffix('_ms').upper()} <= {spec['target']:g} ms"
                     for metric, spec in slo.items())


def _percentile_note(slo: dict | None) -> str:
    """Which latencies the SLO judges at another percentile than the fronts' p99, or does not judge at all."""
    notes = []
    for metric, label in FRONT_LATENCIES.items():
        spec = (slo or {}).get(metric)
        if spec is None:
            notes.append(f"{label} is not in the SLO")
        elif spec["percentile"] != 99:
            notes.append(f"the SLO judges {label} at p{spec['percentile']:g}, the plot shows p99")
    return ("Note: " + "; ".join(notes) + ".") if notes else ""


def _candidate_row(candidate: dict, knobs: list[str]) -> list[str]:
    boundary = candidate["boundary"] or {}
    goodput = candidate["goodput_rps"]
    return ([candidate["name"]] + [str(candidate["params"].get(knob, "-")) for knob in knobs]
            + [SEARCH_STATES.get(candidate["state"], candidate["state"]), "-" if goodput is None else f"{goodput:,.2f}"]
            + [_number(boundary.get(f"{metric}_{FRONT_PERCENTILE}")) for metric in FRONT_LATENCIES]
            + [_number(boundary.get("agg_tok_s")), str(candidate["probes"]), _number(candidate["gpu_minutes"]),
               textwrap.shorten(candidate["reason"] or "", REASON_WIDTH, placeholder=" ...")])


def _candidate_table(search: dict) -> str:
    knobs = list(dict.fromkeys(knob for c in search["candidates"] for knob in c["params"]))
    header = (["Candidate", *knobs, "State", "Goodput (req/s)"]
              + [f"{FRONT_PERCENTILE} {label} (ms)" for label in FRONT_LATENCIES.values()]
              + ["Output tok/s", "Probes", "GPU-min", "Reason"])
    return _table(header, [_candidate_row(c, knobs) for c in search["candidates"]])


def _verification_text(verification: dict | None) -> str:
    if verification is None:
        return "Nothing was re-verified."
    median = statistics.median
    held = "the SLO held in every run" if verification["slo_held_in_every_run"] else "the SLO missed in a run"
    return (f"Re-verified on fresh starts at {verification['rate_rps']:g} req/s, {verification['runs']} runs each: "
            f"candidate {verification['candidate']} {median(verification['goodput_rps']):,.2f} req/s of goodput "
            f"(median) against {median(verification['reference_goodput_rps']):,.2f} for the adopted configuration; "
            f"{verification['verdict']} ({verification['evidence']}); {held}.")


def _recommendation_text(search: dict) -> list[str]:
    recommendation = search["recommendation"]
    if recommendation["action"] == "adopt":
        head = (f"**Adopt candidate {recommendation['candidate']}** ({_params_text(recommendation['params'])}): "
                f"goodput {recommendation['goodput_rps']:,.2f} req/s under the SLO.")
    else:
        best = recommendation["best_candidate"]
        head = "**The adopted configuration stays**" + (f" (the best candidate was {best})." if best else ".")
    parts = ["#### Recommendation", head + f" Verdict: {recommendation['summary']}.",
             _verification_text(recommendation["verification"])]
    side_effects = recommendation["side_effects"]
    if side_effects is not None:
        lines = [(f"search: {recommendation['candidate']}", line) for line in side_effects["summary_lines"]]
        parts += [f"#### Side effects (against the configuration adopted by {side_effects['against']})",
                  _side_effect_lines(lines) if lines else
                  "None: the server ran it as requested, with the same capacity and warnings."]
    return parts


def _search_cost_text(search: dict, cost: dict | None, emulated: bool) -> str:
    """The stage's GPU-minutes by part (its cost.json accounting, as every stage's), next to the budget's count."""
    if not cost:
        return ""
    real = " (real-GPU equivalent of the emulated run)" if emulated else ""
    parts = ", ".join(f"{PART_LABELS[name].lower()} {cost['parts'][name]['gpu_minutes']:,.1f}" for name in PARTS
                      if (cost.get("parts") or {}).get(name, {}).get("gpu_minutes"))
    spent = search["spent"] or {}
    return (f"The search cost {cost['gpu_minutes']:,.1f} GPU-min{real} ({parts}); its budget counted "
            f"{spent.get('restarts', 0)} restarts and {spent.get('gpu_minutes') or 0.0:,.1f} GPU-min for the "
            f"candidates, the re-verification not included.")


def _search_section(host: str, search: dict, cost: dict | None, emulated: bool) -> list[str]:
    fronts = "; ".join(f"vs {FRONT_PERCENTILE} {label}: {', '.join(search['front'][metric]) or 'none'}"
                       for metric, label in FRONT_LATENCIES.items())
    parts = ["### Goodput search",
             f"SLO: {_slo_text(search['slo'])}. Goodput: the highest request rate at which the SLO held in every run "
             f"of the rate search; latencies and throughput are the medians of those runs; GPU-min is what the "
             f"search counted against its budget. Stopped: "
             f"{search['stop_reason'] or 'the space was exhausted'}.",
             _candidate_table(search), f"Pareto front (goodput {fronts})."]
    if any(search["front"].values()):
        parts.append(f"![goodput against latency](plots/{host}-search.svg)")
    parts += [note for note in (_percentile_note(search["slo"]),) if note]
    parts += _recommendation_text(search)
    parts += [text for text in (_search_cost_text(search, cost, emulated),) if text]
    return parts


def _side_effect_lines(lines: list[tuple[str, str]]) -> str:
    """What the server changed by itself, one line per (configuration label, change)."""
    return "\n".join(f"- {label}: {line}" for label, line in lines)


def _host_section(run_dir: Path, host: str, summary: dict, measurements: list[dict]) -> str:
    stages = ", ".join(f"{stage} {summary['stages'][stage]['status']}" for stage in STAGES if stage in summary["stages"])
    mark = "; emulated" if summary["emulated"] else ""
    parts = [f"## {host}", f"Stages: {stages}.", "### Decisions"]
    parts.append("\n".join(_decision_item(d) for d in summary["decisions"]) or "No trials.")
    if summary["search"]:
        parts += _search_section(host, summary["search"], summary["stages"]["search"].get("cost"),
                                 summary["cost"]["emulated"])
    parts += _cost_section(summary) + _drift_section(summary["drift"])
    parts += [f"### Aggregate output throughput (tok/s, median of runs{mark})", _throughput_table(measurements, "agg_tok_s"),
              f"### Per-request output throughput (tok/s, median of runs{mark})",
              _throughput_table(measurements, "per_req_tok_s"), f"![throughput and latency](plots/{host}.svg)"]
    side_effects = [(m["label"], line) for m in measurements for line in (m["side_effects"] or {}).get("summary_lines", [])]
    if side_effects:
        parts += ["### What the server changed by itself", _side_effect_lines(side_effects)]
    kernel_table = read_record(run_dir, "moe_tune", host, record="kernel_table")
    if kernel_table and kernel_table.get("table"):
        parts += [f"### MoE kernels before and after tuning{' (emulated)' if summary['emulated'] else ''}",
                  kernel_table["table"]]
    adopted = summary["adopted"]
    if adopted:
        parts += [f"### Adopted configuration (from {adopted['stage']})",
                  "```json\n" + json.dumps(adopted.get("args", {}), indent=2, sort_keys=True) + "\n```"]
        if adopted.get("moe_configs"):
            parts.append("Tuned MoE configs: " + ", ".join(f"`{name}`" for name in adopted["moe_configs"]))
    return "\n\n".join(parts)


def _decision_item(decision: dict) -> str:
    """A decision as a plain sentence, with its evidence (the decision's reasons) beneath."""
    failed = decision["action"] == "revert" and decision["reasons"][:1] and decision["reasons"][0].startswith("failed:")
    sentence = "Not adopted: it failed." if failed else DECISION_SENTENCES.get(decision["action"], decision["action"])
    evidence = "".join(f"\n    - {reason}" for reason in decision["reasons"])
    return f"- **{decision['label']}**: {sentence}{evidence}"


def report_title(summary: dict) -> str:
    return f"SGLang tuning run {summary['run_id']}" + (" (emulated)" if summary["emulated_hosts"] else "")


def _emulated_note(summary: dict) -> list[str]:
    hosts = summary["emulated_hosts"]
    if not hosts:
        return []
    return [f"> **Emulated: nothing here was measured on a GPU.** {', '.join(hosts)} ran SGLang's emulator on sandbox "
            "hosts. Every throughput, latency and kernel time for them (marked *emulated*) is the emulator's model of "
            "the GPUs it names, not a measurement."]


def _level_changes(host: str, numbers: dict) -> str | None:
    """Baseline -> final at every concurrency both measured: the outcome table shows only the highest."""
    before, after = numbers.get("baseline_agg_tok_s", {}), numbers.get("final_agg_tok_s", {})
    levels = sorted((set(before) & set(after)), key=int)
    changes = [f"C={c} {(after[c] - before[c]) / before[c] * 100:+.1f}%" for c in levels if before[c]]
    return f"{host}: {', '.join(changes)}" if len(changes) > 1 else None


def render_markdown(run_dir: Path, summary: dict, measured: dict[str, list[dict]]) -> str:
    hosts = summary["hosts"]
    header = ["Host", "C", "Baseline tok/s", "Final tok/s", "Change", "max_running_requests", "Adopted from", "GPU-min"]
    parts = [f"# {report_title(summary)}", *_emulated_note(summary)]
    if hosts:  # an upgrade's run measures no stage of the routine
        parts += [f"Outcome per host at the key concurrency C ({KEY_LEVEL_HINT}):",
                  _table(header, [_outcome_row(host, hosts[host]) for host in hosts])]
    changes = [line for line in (_level_changes(host, hosts[host]["numbers"]) for host in hosts) if line]
    if changes:
        parts.append("Baseline -> final at every concurrency measured by both:\n\n"
                     + "\n".join(f"- {line}" for line in changes)
                     + "\n\nEach decision below compares one change with the configuration before it, at every level, "
                     "so its gains (\"best +X% at C=...\") are not these end-to-end changes.")
    if summary["gpu_minutes"]:
        parts.append(f"The run cost {summary['gpu_minutes']:,.1f} GPU-minutes"
                     + (" (real-GPU equivalent of the emulated run)." if any(h["cost"]["emulated"] for h in hosts.values())
                        else "."))
    parts += [_host_section(run_dir, host, hosts[host], measured[host]) for host in hosts]
    if summary.get("upgrade"):  # summary.json of a run reported before the upgrade's section has none
        parts += upgrade_section(summary["upgrade"], _table)
    return "\n\n".join(parts) + "\n"


def summary_text(summary: dict) -> list[str]:
    """The few lines printed at the end of the playbook."""
    lines = []
    for host, data in summary["hosts"].items():
        numbers = data["numbers"]
        if numbers.get("key_change_pct") is not None:
            key = str(numbers["key_concurrency"])
            lines.append(f"{host}: C={key} {_number(numbers['baseline_agg_tok_s'][key])} -> "
                         f"{_number(numbers['final_agg_tok_s'][key])} tok/s ({numbers['key_change_pct']:+.1f}%"
                         f"{', emulated' if data['emulated'] else ''}), "
                         f"adopted from {(data['adopted'] or {}).get('stage', '-')}")
        lines += [f"{host}: {d['label']}: {d['summary']}" for d in data["decisions"]]
        if data["drift"]:
            flippable = len(data["drift"]["within_drift"])
            lines.append(f"{host}: {data['drift']['summary']}"
                         + (f" ({flippable} decision(s) within the drift: see the report)" if flippable else ""))
        lines += _cost_lines(host, data)
        lines += _search_lines(host, data["search"])
    return lines + upgrade_lines(summary.get("upgrade"))


def _search_lines(host: str, search: dict | None) -> list[str]:
    """The search's recommendation with its goodput and its evidence, and what the search cost."""
    if search is None:
        return []
    recommendation, slo = search["recommendation"], _slo_text(search["slo"])
    name = recommendation["candidate"] or recommendation["best_candidate"]
    best = next((c for c in search["candidates"] if c["name"] == name), None)
    goodput = (f"candidate {name} ({_params_text(best['params'])}): goodput {best['goodput_rps']:,.2f} req/s under the "
               f"SLO ({slo})") if best else f"no candidate met the SLO ({slo})"
    if recommendation["action"] == "adopt":
        line = f"{host}: search recommends {goodput}"
    elif best:
        line = f"{host}: search recommends keeping the adopted configuration; best {goodput}"
    else:
        line = f"{host}: search recommends keeping the adopted configuration: {goodput}"
    verification = recommendation["verification"]
    if verification:
        line += (f"; re-verified at {verification['rate_rps']:g} req/s: "
                 f"{statistics.median(verification['goodput_rps']):,.2f} vs "
                 f"{statistics.median(verification['reference_goodput_rps']):,.2f} req/s of goodput for the adopted "
                 f"configuration, {verification['verdict']}")
    cost = search["gpu_minutes"]
    return [line + ("" if cost is None else f"; the search cost {cost:,.1f} GPU-min")]


def search_lines(summary: dict) -> list[str]:
    """Every host's search recommendation (make demo-slo prints them from summary.json)."""
    return [line for host, data in summary["hosts"].items() for line in _search_lines(host, data.get("search"))]


def _cost_lines(host: str, data: dict) -> list[str]:
    cost = data["cost"]
    costs = {stage: data["stages"][stage].get("cost") for stage in STAGES  # summary.json sorts its keys
             if stage in data["stages"]}
    stages = ", ".join(f"{stage} {cost['gpu_minutes']:,.1f}" for stage, cost in costs.items() if cost)
    if not stages:
        return []
    real = " (real-GPU equivalent of the emulated run)" if cost["emulated"] else ""
    lines = [f"{host}: GPU-minutes{real}: {stages}; total {cost['gpu_minutes']:,.1f}"]
    lines += [f"{host}: {t['label']}: {_trial_note(t)}" for t in cost["trials"] if _trial_note(t)]
    if cost["moe"]:
        lines.append(f"{host}: {_moe_cost_text(cost['moe'])}")
    return lines
