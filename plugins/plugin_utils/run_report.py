# Copyright (c) llmops.sglang contributors
# Apache License 2.0 (see LICENSE)
"""summary.json, report.md and report.html of a tuning run, built only from its run directory.

Controller-side (plugin_utils): needs matplotlib and markdown, which are controller requirements of the
collection. The run directory layout is documented in docs/run-directory.md.
"""
from __future__ import annotations

import io
import json
import typing as t
from pathlib import Path

from ansible_collections.llmops.sglang.plugins.module_utils.drift import verdicts_within_drift
from ansible_collections.llmops.sglang.plugins.module_utils.gpu_cost import PART_LABELS, PARTS
from ansible_collections.llmops.sglang.plugins.module_utils.stages import DEFAULT, RECORDED

try:
    import markdown
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import pyplot
    HAS_REPORT_LIBS = True
except ImportError:  # pragma: no cover - reported by the action plugin
    HAS_REPORT_LIBS = False

SCHEMA_VERSION = 1
STAGES = RECORDED  # the stages with per-host records (stage.json, adopted.json), in run order
MEASURED_FILES = ("sweep.json", "facts.json", "comparison.json", "decision.json", "side_effects.json",
                  "requested_args.json", "cost.json", "findings.json", "drift.json")
KEY_LEVEL_HINT = "the highest concurrency measured in both the baseline and the final sweep"


def read_json(path: Path) -> t.Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (FileNotFoundError, NotADirectoryError):
        return None


def _measurement(stage: str, label: str, directory: Path) -> dict | None:
    documents = {name.removesuffix(".json"): read_json(directory / name) for name in MEASURED_FILES}
    if documents["sweep"] is None and documents["decision"] is None:
        return None
    return {"stage": stage, "label": label, "dir": str(directory), **documents}


def host_measurements(run_dir: Path, host: str) -> list[dict]:
    """Every measured configuration of a host in pipeline order (baseline, each flag trial, MoE, verify)."""
    found = []
    for stage in STAGES:
        stage_dir = run_dir / stage / host
        if stage == "search":
            # the re-verified candidates, each with its decision (search_step verdict)
            verified = sorted(p.name for p in (stage_dir / "verify").glob("*") if p.is_dir() and p.name != "adopted")
            candidates = [(f"search: {name}", stage_dir / "verify" / name) for name in verified]
        elif stage == "flags":
            order = (read_json(stage_dir / "stage.json") or {}).get("trials") or sorted(
                p.name for p in (stage_dir / "trials").glob("*") if p.is_dir())
            candidates = [(f"flags: {name}", stage_dir / "trials" / name) for name in order]
        else:
            candidates = [(stage, stage_dir)]
        found += [m for m in (_measurement(stage, label, d) for label, d in candidates) if m]
    return found


def level_values(sweep: dict | None, field: str, percentile: str | None = None) -> dict[int, float]:
    """Median over runs of a level summary field, by concurrency (levels without it are left out)."""
    values = {}
    for level in (sweep or {}).get("levels", []):
        value = (level.get("summary") or {}).get(field)
        if percentile is not None:
            value = value.get(percentile) if isinstance(value, dict) else None
        if isinstance(value, (int, float)):
            values[level["concurrency"]] = float(value)
    return values


def _hosts(run_dir: Path) -> list[str]:
    return sorted({p.name for stage in STAGES for p in (run_dir / stage).glob("*") if p.is_dir()})


def _stage_status(run_dir: Path, stage: str, host: str) -> dict:
    record = read_json(run_dir / stage / host / "stage.json")
    return record or {"status": "not run"}


def _adopted(run_dir: Path, host: str) -> dict | None:
    for stage in reversed(STAGES):
        adopted = read_json(run_dir / stage / host / "adopted.json")
        if adopted is not None:
            return {"stage": stage, **adopted}  # the stage that adopted it, when recorded
    return None


def _key_numbers(measurements: list[dict]) -> dict:
    """Baseline and final throughput by concurrency (JSON keys: strings) and the change at the key level."""
    baseline = next((m for m in measurements if m["stage"] == "baseline" and m["sweep"]), None)
    final = next((m for m in reversed(measurements) if m["stage"] == "verify" and m["sweep"]), None)
    numbers: dict[str, t.Any] = {}
    for name, measurement in (("baseline", baseline), ("final", final)):
        if measurement:
            throughput = level_values(measurement["sweep"], "agg_tok_s")
            numbers[f"{name}_agg_tok_s"] = {str(c): v for c, v in sorted(throughput.items())}
            numbers[f"{name}_max_running_requests"] = (measurement["facts"] or {}).get("max_running_requests")
    common = set(numbers.get("baseline_agg_tok_s", {})) & set(numbers.get("final_agg_tok_s", {}))
    if common:
        key = max(common, key=int)
        before, after = numbers["baseline_agg_tok_s"][key], numbers["final_agg_tok_s"][key]
        numbers["key_concurrency"] = int(key)
        numbers["key_change_pct"] = round((after - before) / before * 100, 1) if before else None
    return numbers


def measured_hosts(run_dir: Path) -> dict[str, list[dict]]:
    """Every host's measurements, read once for the summary, the Markdown and the plots."""
    return {host: host_measurements(run_dir, host) for host in _hosts(run_dir)}


def _trial_cost(measurement: dict) -> dict:
    cost, findings = measurement["cost"] or {}, measurement["findings"] or {}
    return {"stage": measurement["stage"], "label": measurement["label"], "gpu_minutes": cost.get("gpu_minutes"),
            "skipped": bool(cost.get("skipped")), "saved_gpu_minutes": cost.get("saved_gpu_minutes"),
            "forced_by": findings.get("forced_by")}


def _moe_cost(run_dir: Path, host: str, stage_cost: dict | None) -> dict | None:
    """The MoE stage's estimate (made before the server stopped) next to what it cost."""
    estimate = read_json(run_dir / "moe_tune" / host / "estimate.json")
    if estimate is None:
        return None
    actual = stage_cost or {}
    return {"estimate_gpu_minutes": estimate["gpu_minutes"], "estimate_tuning_gpu_minutes": estimate["tuning_gpu_minutes"],
            "actual_gpu_minutes": actual.get("gpu_minutes"),
            "actual_tuning_gpu_minutes": ((actual.get("parts") or {}).get("tuning") or {}).get("gpu_minutes"),
            "seconds_per_config": estimate["seconds_per_config"],
            "measured_seconds_per_config": actual.get("seconds_per_config"), "summary": estimate.get("summary")}


def host_cost(run_dir: Path, host: str, stages: dict, measurements: list[dict]) -> dict:
    """GPU-minutes of the host: total over its stages, per measured (or skipped) configuration, the MoE estimate."""
    costs = {stage: record["cost"] for stage, record in stages.items() if record.get("cost")}
    trials = [_trial_cost(m) for m in measurements if m["cost"]]
    return {"gpu_minutes": round(sum(c["gpu_minutes"] for c in costs.values()), 1),
            "wall_gpu_minutes": round(sum(c["wall_gpu_minutes"] for c in costs.values()), 1),
            "emulated": any(c.get("emulated") for c in costs.values()),
            "trials": trials, "saved_gpu_minutes": round(sum(t["saved_gpu_minutes"] or 0 for t in trials), 1),
            "moe": _moe_cost(run_dir, host, costs.get("moe_tune"))}


def _drift(measurements: list[dict]) -> dict | None:
    """verify's drift check with the decisions of the run a drift of its size could have flipped."""
    check = next((m["drift"] for m in measurements if m["drift"]), None)
    if check is None:
        return None
    decided = [{"label": m["label"], "action": m["decision"]["action"], "comparison": m["comparison"]}
               for m in measurements if m["decision"] and m["comparison"]]
    fields = ("drifted", "earlier", "same_start", "moved", "drift_pct", "largest_pct", "summary")
    return {key: check[key] for key in fields} | {
        "within_drift": verdicts_within_drift(check, decided)}


def host_summary(run_dir: Path, host: str, measurements: list[dict]) -> dict:
    decisions = [{"stage": m["stage"], "label": m["label"], **{k: m["decision"][k] for k in ("action", "summary", "reasons")}}
                 for m in measurements if m["decision"]]
    # a stage a run does not select by default (the search) is listed when it ran
    stages = {stage: _stage_status(run_dir, stage, host) for stage in STAGES
              if stage in DEFAULT or (run_dir / stage / host).is_dir()}
    return {
        "stages": stages,
        "decisions": decisions,
        "adopted": _adopted(run_dir, host),
        "numbers": _key_numbers(measurements),
        "cost": host_cost(run_dir, host, stages, measurements),
        "drift": _drift(measurements),
    }


def build_summary(run_dir: Path, measured: dict[str, list[dict]] | None = None) -> dict:
    measured = measured if measured is not None else measured_hosts(run_dir)
    run = read_json(run_dir / "run.json") or {}
    hosts = {host: host_summary(run_dir, host, measurements) for host, measurements in measured.items()}
    return {
        "schema_version": SCHEMA_VERSION,
        "run_id": run.get("run_id", run_dir.name),
        "created_at": run.get("created_at"),
        "gpu_minutes": round(sum(h["cost"]["gpu_minutes"] for h in hosts.values()), 1),
        "hosts": hosts,
    }


# ---- Markdown ------------------------------------------------------------------------------------

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
    return [host, key if key != "None" else "-", _number(numbers.get("baseline_agg_tok_s", {}).get(key)),
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
    measured = moe["measured_seconds_per_config"]
    return (f"MoE stage: estimated {_number(moe['estimate_gpu_minutes'])} GPU-min before the server stopped (tuning "
            f"{_number(moe['estimate_tuning_gpu_minutes'])}, {moe['seconds_per_config']:g} s per config), actual "
            f"{_number(moe['actual_gpu_minutes'])} GPU-min (tuning {_number(moe['actual_tuning_gpu_minutes'])}"
            + (f", {measured:g} s per config measured" if measured else "") + ").")


def _host_section(run_dir: Path, host: str, summary: dict, measurements: list[dict]) -> str:
    stages = ", ".join(f"{stage} {summary['stages'][stage]['status']}" for stage in STAGES if stage in summary["stages"])
    parts = [f"## {host}", f"Stages: {stages}.", "### Decisions"]
    parts.append("\n".join(f"- **{d['label']}**: {d['summary']}" for d in summary["decisions"]) or "No trials.")
    parts += _cost_section(summary) + _drift_section(summary["drift"])
    parts += ["### Aggregate output throughput (tok/s, median of runs)", _throughput_table(measurements, "agg_tok_s"),
              "### Per-request output throughput (tok/s, median of runs)",
              _throughput_table(measurements, "per_req_tok_s"), f"![throughput and latency](plots/{host}.svg)"]
    side_effects = [(m["label"], line) for m in measurements for line in (m["side_effects"] or {}).get("summary_lines", [])]
    if side_effects:
        parts += ["### What the server changed by itself",
                  "\n".join(f"- {label}: {line}" for label, line in side_effects)]
    kernel_table = read_json(run_dir / "moe_tune" / host / "kernel_table.json")
    if kernel_table and kernel_table.get("table"):
        parts += ["### MoE kernels before and after tuning", kernel_table["table"]]
    adopted = summary["adopted"]
    if adopted:
        parts += [f"### Adopted configuration (from {adopted['stage']})",
                  "```json\n" + json.dumps(adopted.get("args", {}), indent=2, sort_keys=True) + "\n```"]
        if adopted.get("moe_configs"):
            parts.append("Tuned MoE configs: " + ", ".join(f"`{name}`" for name in adopted["moe_configs"]))
    return "\n\n".join(parts)


def render_markdown(run_dir: Path, summary: dict, measured: dict[str, list[dict]]) -> str:
    hosts = summary["hosts"]
    header = ["Host", "C", "Baseline tok/s", "Final tok/s", "Change", "max_running_requests", "Adopted from", "GPU-min"]
    parts = [f"# SGLang tuning run {summary['run_id']}",
             f"Outcome per host at the key concurrency C ({KEY_LEVEL_HINT}):",
             _table(header, [_outcome_row(host, hosts[host]) for host in hosts])]
    if summary["gpu_minutes"]:
        parts.append(f"The run cost {summary['gpu_minutes']:,.1f} GPU-minutes"
                     + (" (real-GPU equivalent of the emulated run)." if any(h["cost"]["emulated"] for h in hosts.values())
                        else "."))
    parts += [_host_section(run_dir, host, hosts[host], measured[host]) for host in hosts]
    return "\n\n".join(parts) + "\n"


def summary_text(summary: dict) -> list[str]:
    """The few lines printed at the end of the playbook."""
    lines = []
    for host, data in summary["hosts"].items():
        numbers = data["numbers"]
        if numbers.get("key_change_pct") is not None:
            key = str(numbers["key_concurrency"])
            lines.append(f"{host}: C={key} {_number(numbers['baseline_agg_tok_s'][key])} -> "
                         f"{_number(numbers['final_agg_tok_s'][key])} tok/s ({numbers['key_change_pct']:+.1f}%), "
                         f"adopted from {(data['adopted'] or {}).get('stage', '-')}")
        lines += [f"{host}: {d['label']}: {d['summary']}" for d in data["decisions"]]
        if data["drift"]:
            flippable = len(data["drift"]["within_drift"])
            lines.append(f"{host}: {data['drift']['summary']}"
                         + (f" ({flippable} decision(s) within the drift: see the report)" if flippable else ""))
        lines += _cost_lines(host, data)
    return lines


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


# ---- plots and HTML ------------------------------------------------------------------------------

def render_plot(measurements: list[dict], host: str) -> str:
    """One SVG with throughput, per-request throughput and TTFT p50/p99 against concurrency."""
    pyplot.rcParams["svg.hashsalt"] = "llmops-sglang"  # stable element ids: same run dir, same bytes
    figure, axes = pyplot.subplots(1, 3, figsize=(15, 4.2))
    panels = (("agg_tok_s", None, "Aggregate output tok/s"), ("per_req_tok_s", None, "Per-request output tok/s"),
              ("ttft_ms", "p50", "TTFT ms (p50 solid, p99 dashed)"))
    for axis, (field, percentile, title) in zip(axes, panels):
        for index, measurement in enumerate(m for m in measurements if m["sweep"]):
            color = f"C{index % 10}"
            values = level_values(measurement["sweep"], field, percentile)
            if values:
                levels = sorted(values)
                axis.plot(levels, [values[c] for c in levels], marker="o", color=color, label=measurement["label"])
            if field == "ttft_ms":
                tail = level_values(measurement["sweep"], field, "p99")
                levels = sorted(tail)
                axis.plot(levels, [tail[c] for c in levels], linestyle="--", color=color)
        axis.set_xscale("log", base=2)
        levels = sorted({c for m in measurements if m["sweep"] for c in level_values(m["sweep"], "agg_tok_s")})
        axis.set_xticks(levels, [str(c) for c in levels])
        axis.minorticks_off()
        axis.set_xlabel("concurrency")
        axis.set_title(title)
        axis.grid(True, alpha=0.3)
    axes[0].legend(fontsize="small")
    figure.suptitle(host)
    figure.tight_layout()
    buffer = io.StringIO()
    figure.savefig(buffer, format="svg", metadata={"Date": None})
    pyplot.close(figure)
    return buffer.getvalue()


HTML_PAGE = """<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>{title}</title>
<style>body{{font-family:sans-serif;max-width:1200px;margin:2em auto;line-height:1.4}}
table{{border-collapse:collapse;margin:1em 0}}td,th{{border:1px solid #bbb;padding:3px 8px;text-align:right}}
td:first-child,th:first-child{{text-align:left}}pre{{background:#f5f5f5;padding:1em;overflow:auto}}
figure svg{{width:100%;height:auto}}</style></head>
<body>
{body}
</body></html>
"""


def render_html(markdown_text: str, plots: dict[str, str], title: str) -> str:
    """report.md as HTML with each plot's SVG inlined where the Markdown links it (no external file)."""
    body = markdown.markdown(markdown_text, extensions=["tables", "fenced_code"])
    for host, svg in plots.items():
        inline = svg[svg.index("<svg"):]
        image = f'<img alt="throughput and latency" src="plots/{host}.svg" />'
        body = body.replace(f"<p>{image}</p>", f"<figure>{inline}</figure>").replace(image, f"<figure>{inline}</figure>")
    return HTML_PAGE.format(title=title, body=body)


def report_files(run_dir: Path) -> dict[str, str]:
    """Relative path -> content of everything the report consists of."""
    measured = measured_hosts(run_dir)
    summary = build_summary(run_dir, measured)
    markdown_text = render_markdown(run_dir, summary, measured)
    plots = {host: render_plot(measured[host], host) for host in summary["hosts"]}
    files = {"summary.json": json.dumps(summary, indent=2, sort_keys=True) + "\n", "report.md": markdown_text,
             "report.html": render_html(markdown_text, plots, f"SGLang tuning run {summary['run_id']}")}
    files.update({f"plots/{host}.svg": svg for host, svg in plots.items()})
    return files
