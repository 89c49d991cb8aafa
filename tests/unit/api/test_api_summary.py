"""Typed summary and sweeps of the recorded demo run (tests/fixtures/run-demo), run listing, report regeneration."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from ansible_collections.llmops.sglang.plugins.module_utils.drift import drift_check
from llmops_sglang.models import Summary, Sweep
from llmops_sglang.runs import list_runs, load_sweeps, read_summary, write_report
from tests.unit.costed_run import demo_run, finish_stages

DEMO_RUN = Path(__file__).resolve().parents[2] / "fixtures" / "run-demo"
TUNED_CONFIGS = ("E=256,N=256,device_name=NVIDIA_RTX_PRO_6000_Blackwell_Server_Edition.json",
                 "E=256,N=256,device_name=NVIDIA_RTX_PRO_6000_Blackwell_Server_Edition_down.json")


@pytest.fixture
def runs_dir(tmp_path) -> Path:
    shutil.copytree(DEMO_RUN, tmp_path / "20261130T200107Z")
    return tmp_path


def test_summary_types_stages_decisions_adopted_and_numbers():
    summary = read_summary(DEMO_RUN)
    assert (summary.run_id, summary.created_at) == ("20261130T200107Z", "2026-11-30T20:01:08Z")
    assert summary.run_dir == DEMO_RUN
    host = summary.hosts["gpu1"]
    assert host.stages_done() == ["preflight", "baseline", "flags", "moe_tune", "verify"]
    assert host.stages["flags"].details["trials"] == ["fused-moe-sum-all-reduce", "flashinfer-allreduce-fusion"]
    assert [(d.stage, d.label, d.action, d.adopted) for d in host.decisions] == [
        ("flags", "flags: fused-moe-sum-all-reduce", "revert", False),
        ("flags", "flags: flashinfer-allreduce-fusion", "revert", False),
        ("moe_tune", "moe_tune", "adopt", True)]
    assert "capacity dropped 46% (max_running_requests 48 -> 26) with no throughput gain" in host.decisions[1].reasons
    assert host.adopted.stage == "moe_tune" and host.adopted.moe_configs == TUNED_CONFIGS
    assert host.adopted.args["tp_size"] == 4 and host.adopted.environment == {"CUDA_VISIBLE_DEVICES": "0,1,2,3"}
    numbers = host.numbers
    assert (numbers.key_concurrency, numbers.key_change_pct) == (64, 5.7)
    assert sorted(numbers.final_agg_tok_s) == [1, 4, 16, 32, 64]  # int levels, not JSON's string keys
    assert numbers.final_agg_tok_s[64] == pytest.approx(13360.18, abs=0.01)
    assert numbers.baseline_max_running_requests == numbers.final_max_running_requests == 48


def test_summary_json_parses_to_the_same_objects(runs_dir):
    run_dir = runs_dir / "20261130T200107Z"
    write_report(run_dir)
    parsed = Summary.from_dict(json.loads((run_dir / "summary.json").read_text()), run_dir)
    assert parsed == read_summary(run_dir)


def test_a_stage_not_run_is_typed_as_such(runs_dir):
    run_dir = runs_dir / "20261130T200107Z"
    shutil.rmtree(run_dir / "verify")
    host = read_summary(run_dir).hosts["gpu1"]
    assert host.stages["verify"].status == "not run" and not host.stages["verify"].done
    assert host.numbers.key_change_pct is None and host.numbers.final_agg_tok_s == {}


def test_every_measurement_loads_as_a_typed_sweep():
    sweeps = load_sweeps(DEMO_RUN, "gpu1")
    assert list(sweeps) == ["baseline", "flags: fused-moe-sum-all-reduce", "flags: flashinfer-allreduce-fusion",
                            "moe_tune", "verify"]
    baseline = sweeps["baseline"]
    assert (baseline.engine, baseline.endpoint) == ("native", "completions")
    assert (baseline.input_len, baseline.output_len) == (1000, 300)
    assert [level.concurrency for level in baseline.levels] == [1, 4, 16, 32, 64]
    first = baseline.levels[0]
    assert (first.n_runs, first.ok, first.failed) == (3, 12, 0)
    assert first.agg_tok_s == pytest.approx(1201.98, abs=0.01)
    assert first.ttft_ms["p50"] == pytest.approx(9.657, abs=0.001)
    assert baseline.agg_tok_s()[64] == read_summary(DEMO_RUN).hosts["gpu1"].numbers.baseline_agg_tok_s[64]
    assert Sweep.load(DEMO_RUN / "verify" / "gpu1" / "sweep.json") == Sweep.from_dict(
        json.loads((DEMO_RUN / "verify" / "gpu1" / "sweep.json").read_text()), "gpu1")
    assert baseline.sequential is None and baseline.not_measured == ()


def test_a_candidate_sweep_says_how_its_stopping_rule_measured_it():
    document = json.loads((DEMO_RUN / "baseline" / "gpu1" / "sweep.json").read_text())
    rule = {"design": {"min_repeats": 2, "max_repeats": 10}, "reference_runs": {"1": 5}}
    document.update(sequential=rule, not_measured=[{"concurrency": 64, "reason": "C=32 regressed"}])
    sweep = Sweep.from_dict(document, "flags: x")
    assert sweep.sequential == rule and sweep.not_measured == (64,)


def test_runs_are_listed_oldest_first_without_the_latest_link(runs_dir):
    newer = runs_dir / "second"
    shutil.copytree(DEMO_RUN, newer)
    run_json = json.loads((newer / "run.json").read_text())
    (newer / "run.json").write_text(json.dumps({**run_json, "run_id": "second", "created_at": "2026-12-01T08:00:00Z"}))
    (runs_dir / "latest").symlink_to("second")
    (runs_dir / "not-a-run").mkdir()
    write_report(runs_dir / "20261130T200107Z")
    entries = list_runs(runs_dir)
    assert [(e.run_id, e.reported) for e in entries] == [("20261130T200107Z", True), ("second", False)]
    assert list_runs(runs_dir / "not-a-run") == []


def test_report_regeneration_writes_the_report_once(runs_dir):
    run_dir = runs_dir / "20261130T200107Z"
    written = {p.relative_to(run_dir).as_posix() for p in write_report(run_dir)}
    assert written == {"summary.json", "report.md", "report.html", "plots/gpu1.svg"}
    assert write_report(run_dir) == []  # deterministic: nothing changes the second time


def test_gpu_minutes_are_typed_per_stage_per_configuration_and_in_total(tmp_path):
    run_dir = demo_run(tmp_path / "20261130T200107Z")
    costs = finish_stages(run_dir)
    write_report(run_dir)
    summary = read_summary(run_dir)
    host = summary.hosts["gpu1"]
    baseline = host.stages["baseline"].cost
    assert (baseline.gpus, baseline.gpu_minutes, baseline.emulated) == (4, costs["baseline"]["gpu_minutes"], True)
    assert baseline.parts["server_start"] == costs["baseline"]["parts"]["server_start"]["gpu_minutes"]
    assert "cost" not in host.stages["baseline"].details
    assert host.cost.gpu_minutes == summary.gpu_minutes == pytest.approx(sum(c["gpu_minutes"] for c in costs.values()),
                                                                         abs=0.1)
    assert [trial.label for trial in host.cost.trials] == [
        "baseline", "flags: fused-moe-sum-all-reduce", "flags: flashinfer-allreduce-fusion", "moe_tune", "verify"]
    assert host.cost.trials[0].gpu_minutes == json.loads((run_dir / "baseline/gpu1/cost.json").read_text())["gpu_minutes"]
    assert host.cost.moe is None  # the demo run predates estimate.json
    assert Summary.from_dict(json.loads((run_dir / "summary.json").read_text()), run_dir) == summary


def test_the_drift_check_is_typed_with_the_decisions_it_could_have_flipped(runs_dir):
    run_dir = runs_dir / "20261130T200107Z"
    assert read_summary(run_dir).hosts["gpu1"].drift is None  # the demo run predates drift.json
    earlier = json.loads((run_dir / "moe_tune/gpu1/sweep.json").read_text())
    again = {"levels": [{**level, "runs": [{**run, "agg_tok_s": run["agg_tok_s"] * 0.85} for run in level["runs"]]}
                        for level in json.loads((run_dir / "verify/gpu1/sweep.json").read_text())["levels"]]}
    (run_dir / "verify/gpu1/drift.json").write_text(json.dumps(drift_check(earlier, again, label="moe_tune/gpu1", same_start=True)))
    drift = read_summary(run_dir).hosts["gpu1"].drift
    assert drift.drifted and drift.earlier == "moe_tune/gpu1" and sorted(drift.drift_pct) == [1, 4, 16, 32, 64]
    assert drift.largest_pct == max(drift.drift_pct.values()) and "moved beyond noise" in drift.summary
    assert "moe_tune" in drift.within_drift
