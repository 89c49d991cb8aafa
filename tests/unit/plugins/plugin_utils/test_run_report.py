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
from ansible_collections.llmops.sglang.plugins.plugin_utils._report_summary import level_spread
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
    assert "| gpu1 (emulated) | - |" in run_report.render_markdown(run_dir, summary, run_report.measured_hosts(run_dir))


def test_a_stage_folder_without_its_record_is_unfinished_not_not_run(run_dir):
    """A run directory copied mid-stage: moe_tune has its kernel table but no stage.json yet (written at its end)."""
    (run_dir / "moe_tune" / "gpu1" / "stage.json").unlink()
    shutil.rmtree(run_dir / "verify")
    stages = run_report.build_summary(run_dir)["hosts"]["gpu1"]["stages"]
    assert stages["moe_tune"] == {"status": "unfinished"} and stages["verify"] == {"status": "not run"}
    text = run_report.render_markdown(run_dir, run_report.build_summary(run_dir), run_report.measured_hosts(run_dir))
    assert "moe_tune unfinished, verify not run." in text


def test_an_emulated_run_says_so_where_the_numbers_are(run_dir):
    summary = run_report.build_summary(run_dir)
    assert summary["emulated_hosts"] == ["gpu1"] and summary["hosts"]["gpu1"]["emulated"] is True
    files = run_report.report_files(run_dir)
    text = files["report.md"]
    assert text.startswith("# SGLang tuning run 20261130T200107Z (emulated)\n\n> **Emulated: nothing here was measured "
                           "on a GPU.** gpu1 ran SGLang's emulator")
    assert "| gpu1 (emulated) | 64 | 12,645.3 |" in text
    assert "### Aggregate output throughput (tok/s, median of runs; emulated)" in text
    assert "### MoE kernels before and after tuning (emulated)" in text
    assert "<title>SGLang tuning run 20261130T200107Z (emulated)</title>" in files["report.html"]
    assert "<!-- gpu1 (emulated) -->" in files["plots/gpu1.svg"]  # the suptitle (matplotlib names each text)
    assert "(+5.7%, emulated)" in run_report.summary_text(summary)[0]


def test_a_measured_run_has_no_emulated_mark(run_dir):
    for facts in run_dir.rglob("facts.json"):
        facts.write_text(json.dumps({**json.loads(facts.read_text()), "emulator": False}))
    summary = run_report.build_summary(run_dir)
    assert summary["emulated_hosts"] == []
    text = run_report.report_files(run_dir)["report.md"]
    assert "emulated" not in text.lower()


def test_the_headline_is_reconciled_with_the_decisions_at_every_level(run_dir):
    text = run_report.render_markdown(run_dir, run_report.build_summary(run_dir), run_report.measured_hosts(run_dir))
    assert "- gpu1: C=1 +8.0%, C=4 +4.2%, C=16 +2.8%, C=32 +11.2%, C=64 +5.7%" in text
    assert "are not these end-to-end changes" in text


def test_each_decision_is_a_plain_sentence_with_its_evidence_beneath(run_dir):
    text = run_report.render_markdown(run_dir, run_report.build_summary(run_dir), run_report.measured_hosts(run_dir))
    assert ("- **flags: flashinfer-allreduce-fusion**: Not adopted: the configuration before it stays.\n"
            "    - regressed at C=64 (-8.6% .. -2.2% across levels)\n"
            "    - capacity dropped 46% (max_running_requests 48 -> 26) with no throughput gain\n") in text
    assert ("- **moe_tune**: Adopted: it measured better than the configuration before it.\n"
            "    - improved at C=1,4,32,64 (best +11.1% at C=1)") in text
    html = run_report.report_files(run_dir)["report.html"]
    assert "<li><strong>moe_tune</strong>: Adopted: it measured better than the configuration before it.<ul>" in html


def test_the_plot_shades_the_runs_range_where_a_level_ran_more_than_once(run_dir):
    sweep = json.loads((run_dir / "baseline" / "gpu1" / "sweep.json").read_text())
    spread = level_spread(sweep, "agg_tok_s")
    level = next(level for level in sweep["levels"] if len(level["runs"]) > 1)
    values = [run["agg_tok_s"] for run in level["runs"]]
    assert spread[level["concurrency"]] == (min(values), max(values))
    assert all(len(lv["runs"]) > 1 for lv in sweep["levels"] if lv["concurrency"] in spread)
    assert "band: runs' range" in run_report.report_files(run_dir)["plots/gpu1.svg"]


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
