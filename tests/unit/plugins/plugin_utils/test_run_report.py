# Copyright (c) llmops.sglang contributors
# Apache License 2.0 (see LICENSE)
"""The report of a run directory: summary, Markdown, self-contained HTML with inline plots, determinism.

tests/fixtures/run-demo is the run directory of a `make demo` run (startup logs, units and tuned
configs left out), so these tests see exactly what the pipeline writes.
"""
from __future__ import annotations

import json
import shutil
from html.parser import HTMLParser
from pathlib import Path

import pytest

from ansible_collections.llmops.sglang.plugins.module_utils.drift import drift_check
from ansible_collections.llmops.sglang.plugins.plugin_utils import run_report
from ansible_collections.llmops.sglang.plugins.plugin_utils.run_dir import write_files

DEMO_RUN = Path(__file__).resolve().parents[3] / "fixtures" / "run-demo"


@pytest.fixture
def run_dir(tmp_path) -> Path:
    return Path(shutil.copytree(DEMO_RUN, tmp_path / "run"))


class Elements(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.tags: list[str] = []
        self.references: list[str] = []

    def handle_starttag(self, tag, attrs):
        self.tags.append(tag)
        self.references += [value for name, value in attrs if name in ("src", "href") and value and not value.startswith("#")]


def test_summary_holds_stages_decisions_adopted_and_key_numbers(run_dir):
    summary = run_report.build_summary(run_dir)
    host = summary["hosts"]["gpu1"]
    assert [host["stages"][s]["status"] for s in run_report.STAGES if s != "search"] == ["done"] * 5
    assert "search" not in host["stages"], "a stage off by default is listed only when it ran"
    assert [(d["label"], d["action"]) for d in host["decisions"]] == [
        ("flags: fused-moe-sum-all-reduce", "revert"), ("flags: flashinfer-allreduce-fusion", "revert"),
        ("moe_tune", "adopt")]
    assert host["adopted"]["stage"] == "moe_tune" and len(host["adopted"]["moe_configs"]) == 2
    numbers = host["numbers"]
    assert numbers["key_concurrency"] == 64
    assert set(numbers["baseline_agg_tok_s"]) == {"1", "4", "16", "32", "64"}
    expected = (numbers["final_agg_tok_s"]["64"] / numbers["baseline_agg_tok_s"]["64"] - 1) * 100
    assert numbers["key_change_pct"] == pytest.approx(expected, abs=0.05)


def test_markdown_shows_decisions_tables_side_effects_and_kernels(run_dir):
    text = run_report.render_markdown(run_dir, run_report.build_summary(run_dir), run_report.measured_hosts(run_dir))
    assert "| C | baseline | flags: fused-moe-sum-all-reduce | flags: flashinfer-allreduce-fusion | moe_tune | verify |" in text
    assert "capacity dropped 46% (max_running_requests 48 -> 26)" in text
    assert "max_running_requests 48 -> 26 (-46%)" in text
    assert "### MoE kernels before and after tuning" in text and "| 64 |" in text
    assert "![throughput and latency](plots/gpu1.svg)" in text


def test_html_is_self_contained_with_the_plot_inline(run_dir):
    files = run_report.report_files(run_dir)
    elements = Elements()
    elements.feed(files["report.html"])
    elements.close()
    assert elements.tags.count("svg") == 1 and elements.tags.count("table") >= 3
    assert elements.references == []
    assert files["plots/gpu1.svg"].lstrip().startswith("<?xml")


def test_same_run_directory_gives_the_same_bytes(run_dir):
    first = run_report.report_files(run_dir)
    assert write_files(run_dir, first) != []
    second = run_report.report_files(run_dir)
    assert second == first
    assert write_files(run_dir, second) == [], "an unchanged report must not be rewritten"
    assert json.loads(first["summary.json"])["run_id"] == json.loads((run_dir / "run.json").read_text())["run_id"]


def test_a_run_with_only_a_baseline_reports_what_exists(run_dir):
    for stage in ("flags", "moe_tune", "verify"):
        shutil.rmtree(run_dir / stage)
    summary = run_report.build_summary(run_dir)
    host = summary["hosts"]["gpu1"]
    assert host["stages"]["verify"] == {"status": "not run"} and host["decisions"] == []
    assert "key_change_pct" not in host["numbers"]
    assert "| gpu1 | - |" in run_report.render_markdown(run_dir, summary, run_report.measured_hosts(run_dir))


def _record_drift(run_dir: Path, again_factor: float) -> None:
    """verify's drift.json as verify.yml records it: the adopted (moe_tune) sweep against verify's, scaled."""
    host = run_dir / "verify" / "gpu1"
    again = json.loads((host / "sweep.json").read_text())
    for level in again["levels"]:
        for run in level["runs"]:
            run["agg_tok_s"] *= again_factor
    earlier = json.loads((run_dir / "moe_tune" / "gpu1" / "sweep.json").read_text())
    (host / "drift.json").write_text(json.dumps(drift_check(earlier, again, label="moe_tune/gpu1", same_start=True)))


def test_a_run_without_a_drift_check_has_no_drift_section(run_dir):
    summary = run_report.build_summary(run_dir)
    assert summary["hosts"]["gpu1"]["drift"] is None
    assert "### Drift check" not in run_report.render_markdown(run_dir, summary, run_report.measured_hosts(run_dir))


def test_drift_is_reported_with_the_decisions_it_could_have_flipped(run_dir):
    _record_drift(run_dir, 0.85)
    summary = run_report.build_summary(run_dir)
    drift = summary["hosts"]["gpu1"]["drift"]
    assert drift["drifted"] is True and drift["earlier"] == "moe_tune/gpu1" and drift["largest_pct"] > 10
    assert [entry["label"] for entry in drift["within_drift"]] == [
        "flags: fused-moe-sum-all-reduce", "flags: flashinfer-allreduce-fusion", "moe_tune"]
    text = run_report.render_markdown(run_dir, summary, run_report.measured_hosts(run_dir))
    assert "### Drift check" in text and "Decisions a drift of this size could have flipped" in text
    assert any("3 decision(s) within the drift" in line for line in run_report.summary_text(summary))
