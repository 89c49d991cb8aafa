# Copyright (c) llmops.sglang contributors
# Apache License 2.0 (see LICENSE)
"""The run report's "Upgrade" section (issue #37): a run with playbooks/upgrade.yml's records shows per host the
versions old -> new, whether the prediction was ready, the MoE configs carried / retuned / missing and the outcome (the
canary's verdict, each other host's promotion), with the canary's decision and what its retune cost.

tests/fixtures/run-upgrade holds three upgrades as the integration test wrote them (its README)."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from ansible_collections.llmops.sglang.plugins.plugin_utils import run_report

FIXTURES = Path(__file__).resolve().parents[3] / "fixtures"
UP = "E=256,N=256,device_name=NVIDIA_RTX_PRO_6000_Blackwell_Server_Edition.json"
DOWN = UP.replace(".json", "_down.json")
HEADER = "| Host | SGLang | Triton | torch | Predicted ready | Carried | Retuned | Missing | Outcome |"


def _run(tmp_path: Path, name: str) -> Path:
    return Path(shutil.copytree(FIXTURES / "run-upgrade" / name, tmp_path / name))


def _report(run_dir: Path) -> tuple[dict, str]:
    files = run_report.report_files(run_dir)
    return json.loads(files["summary.json"]), files["report.md"]


def test_a_run_without_upgrade_records_has_no_upgrade_section():
    summary, markdown = _report(FIXTURES / "run-demo")
    assert summary["upgrade"] is None and "## Upgrade" not in markdown


def test_a_retuned_release_shows_the_canarys_verdict_its_retune_and_the_files_shipped(tmp_path):
    summary, markdown = _report(_run(tmp_path, "retuned"))
    upgrade = summary["upgrade"]
    assert (upgrade["canary"], upgrade["decision"], upgrade["promotion"]) == ("gpu1", "promote", True)
    assert upgrade["hosts"]["gpu1"]["configs"]["retuned"] == sorted([UP, DOWN])
    gpu2 = upgrade["hosts"]["gpu2"]
    # its prediction lost both (tuned for Triton 3.6.0); the canary's retuned files were installed at its promotion
    assert gpu2["ready"] is False and gpu2["outcome"] == "deployed"
    assert gpu2["configs"]["retuned"] == sorted([UP, DOWN]) and gpu2["configs"]["missing"] == []
    assert gpu2["versions"]["new"] == {"sglang": "0.5.24", "triton": "3.9.0", "torch": None}
    estimate = upgrade["retune_cost"]["estimate"]
    assert estimate["engine_gpu_minutes"] > 0 and estimate["gpus"] == 4
    assert not summary["hosts"], "no stage of the routine ran"
    section = markdown[markdown.index("## Upgrade"):]
    assert markdown.startswith("# SGLang tuning run upgrade-0.5.24\n\n## Upgrade\n"), markdown[:200]
    assert "Canary gpu1: **promote**: throughput within noise" in section
    assert (f"gpu1: retuned on this host with the engine: {upgrade['retune_cost']['gpu_minutes']:g} GPU-minutes "
            f"(estimated {estimate['engine_gpu_minutes']:g} before the server stopped") in section
    assert HEADER in section
    assert "| gpu1 | 0.5.11 -> 0.5.24 | 3.6.0 -> 3.9.0 | - | yes | - | up, down | - | promoted (the canary) |" in section
    assert "| gpu2 | 0.5.11 -> 0.5.24 | 3.6.0 -> 3.9.0 | - | no | - | up, down | - | deployed |" in section
    assert f"up `{UP}` (gpu1, gpu2)" in section and f"down `{DOWN}` (gpu1, gpu2)" in section
    assert "`rollout/summary.json` (the promotion)" in section
    assert run_report.summary_text(summary) == [
        "upgrade: sglang 0.5.11 -> 0.5.24; canary gpu1: " + upgrade["summary"], "upgrade: gpu2: deployed"]


def test_carried_configs_are_read_from_each_hosts_carry(tmp_path):
    summary, markdown = _report(_run(tmp_path, "carried"))
    hosts = summary["upgrade"]["hosts"]
    assert hosts["gpu1"]["configs"]["carried"] == hosts["gpu2"]["configs"]["carried"] == sorted([UP, DOWN])
    assert summary["upgrade"]["retune_cost"] is None and "retuned on this host" not in markdown
    assert "| gpu2 | 0.5.11 -> 0.5.23 | 3.6.0 | - | yes | up, down | - | - | deployed |" in markdown


def test_a_rolled_back_canary_says_why_and_nothing_was_promoted(tmp_path):
    summary, markdown = _report(_run(tmp_path, "rolled-back"))
    upgrade = summary["upgrade"]
    assert upgrade["decision"] == "roll back" and upgrade["promotion"] is False
    assert "Canary gpu1: **roll back**: throughput regressed at C=4" in markdown
    assert "| gpu1 | 0.5.11 -> 0.5.17 | 3.6.0 | - | yes | - | - | - | rolled back (the canary) |" in markdown
    assert "rollout/summary.json" not in markdown


def test_a_host_the_promotion_skipped_or_undid_says_so(tmp_path):
    run_dir = _run(tmp_path, "retuned")
    rollout = json.loads((run_dir / "rollout" / "summary.json").read_text())
    rollout["hosts"]["gpu2"] = {"status": "skipped", "batch": 2, "reasons": ["the prediction is not ready here: lost"]}
    (run_dir / "rollout" / "summary.json").write_text(json.dumps(rollout))
    hosts = _report(run_dir)[0]["upgrade"]["hosts"]
    assert hosts["gpu2"]["outcome"] == "skipped: the prediction is not ready here: lost"
    assert hosts["gpu2"]["configs"]["retuned"] == [] and hosts["gpu2"]["configs"]["missing"] == sorted([UP, DOWN])
    rollout["hosts"]["gpu2"], rollout["undone"] = {"status": "failed", "reason": "analysis: p99 TTFT"}, ["gpu2"]
    (run_dir / "rollout" / "summary.json").write_text(json.dumps(rollout))
    assert (_report(run_dir)[0]["upgrade"]["hosts"]["gpu2"]["outcome"]
            == "failed: analysis: p99 TTFT; undone when a batch failed")
    shutil.rmtree(run_dir / "rollout")
    assert _report(run_dir)[0]["upgrade"]["hosts"]["gpu2"]["outcome"] == "not switched"


def test_an_upgrade_in_a_tuning_run_is_reported_after_its_stages(tmp_path):
    run_dir = Path(shutil.copytree(FIXTURES / "run-demo", tmp_path / "run"))
    shutil.copytree(FIXTURES / "run-upgrade" / "rolled-back" / "upgrade", run_dir / "upgrade")
    summary, markdown = _report(run_dir)
    assert list(summary["hosts"]) == ["gpu1"] and summary["upgrade"]["canary"] == "gpu1"
    assert markdown.index("Outcome per host at the key concurrency") < markdown.index("## gpu1") < markdown.index(
        "## Upgrade")
    assert run_report.report_files(run_dir) == run_report.report_files(run_dir), "same directory, same bytes"


@pytest.mark.parametrize("name", ["retuned", "carried", "rolled-back"])
def test_the_html_report_holds_the_upgrade_section(tmp_path, name):
    assert "<h2>Upgrade</h2>" in run_report.report_files(_run(tmp_path, name))["report.html"]
