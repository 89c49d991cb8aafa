# Copyright (c) llmops.sglang contributors
# Apache License 2.0 (see LICENSE)
"""The GPU-minutes of a stage from its run directory, per stage and per trial, in the summary, the report and the
playbook's lines (issue 18 items 1, 4 and 5), on the run directory of a `make demo` run."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from ansible_collections.llmops.sglang.plugins.plugin_utils import run_report
from tests.unit.costed_run import DEMO_RUN, SCALES, demo_run, finish_stages

SKIP = {"adopt": False, "action": "skip", "reasons": ["preflight: enable_flashinfer_allreduce_fusion will not take "
                                                      "effect because ..."],
        "summary": "skip: preflight: enable_flashinfer_allreduce_fusion will not take effect because ..."}


def write_json(path: Path, content) -> None:
    path.write_text(json.dumps(content))


@pytest.fixture
def run_dir(tmp_path) -> Path:
    """The demo run with deploy records (each measurement restarted the server in 14 s)."""
    return demo_run(tmp_path / "run")


def skip_fusion(run: Path) -> None:
    trial = run / "flags" / "gpu1" / "trials" / "flashinfer-allreduce-fusion"
    shutil.rmtree(trial)
    trial.mkdir()
    write_json(trial / "decision.json", SKIP)


def test_each_stage_costs_its_gpus_times_its_wall_time_in_real_gpu_minutes(run_dir):
    costs = finish_stages(run_dir)
    assert costs["preflight"]["gpu_minutes"] == 0.0 and costs["preflight"]["gpus"] == 0  # the server kept serving
    baseline = costs["baseline"]
    assert baseline["gpus"] == 4 and baseline["emulated"] and baseline["time_scale"] == SCALES
    assert baseline["wall_gpu_minutes"] == 4.0  # 4 GPUs x 60 s
    start = baseline["parts"]["server_start"]
    assert start["wall_s"] == 14.0 and start["real_s"] == 2.0 + 120.0  # the log's 12 s are 120 real seconds
    assert sum(p["wall_s"] for p in baseline["parts"].values()) == pytest.approx(60.0, abs=0.2)
    assert baseline["gpu_minutes"] == pytest.approx(4 * baseline["real_s"] / 60, abs=0.1)
    trial = json.loads((run_dir / "flags/gpu1/trials/fused-moe-sum-all-reduce/cost.json").read_text())
    assert trial["gpus"] == 4 and set(trial["parts"]) == {"server_start", "warmup", "benchmark"}
    flags = costs["flags"]["parts"]
    assert flags["benchmark"]["wall_s"] == pytest.approx(45.8, abs=0.2)  # both trials' timed runs


def test_real_servers_are_accounted_at_wall_time_whatever_the_time_scale(run_dir):
    for facts in run_dir.glob("**/facts.json"):
        write_json(facts, {**json.loads(facts.read_text()), "emulator": False})
    costs = finish_stages(run_dir)
    assert all(not cost["emulated"] and cost["gpu_minutes"] == cost["wall_gpu_minutes"] for cost in costs.values())
    assert costs["baseline"]["gpu_minutes"] == 4.0


def test_an_emulated_run_without_a_time_scale_is_accounted_at_wall_time(run_dir):
    costs = finish_stages(run_dir, time_scale=None)
    assert costs["baseline"]["emulated"] and costs["baseline"]["gpu_minutes"] == costs["baseline"]["wall_gpu_minutes"]


def test_a_skipped_candidate_costs_nothing_and_saved_one_measured_configuration(run_dir):
    skip_fusion(run_dir)
    finish_stages(run_dir)
    skipped = json.loads((run_dir / "flags/gpu1/trials/flashinfer-allreduce-fusion/cost.json").read_text())
    measured = [json.loads((run_dir / path / "cost.json").read_text())["gpu_minutes"]
                for path in ("baseline/gpu1", "flags/gpu1/trials/fused-moe-sum-all-reduce")]
    assert skipped["gpu_minutes"] == 0.0 and skipped["skipped"]
    assert skipped["saved_gpu_minutes"] == pytest.approx(sum(measured) / 2, abs=0.1)  # median of two
    summary = run_report.build_summary(run_dir)
    cost = summary["hosts"]["gpu1"]["cost"]
    fusion = next(t for t in cost["trials"] if t["label"] == "flags: flashinfer-allreduce-fusion")
    assert fusion["skipped"] and cost["saved_gpu_minutes"] == skipped["saved_gpu_minutes"]
    decision = next(d for d in summary["hosts"]["gpu1"]["decisions"] if d["label"] == fusion["label"])
    assert decision["action"] == "skip"
    text = run_report.render_markdown(run_dir, summary, run_report.measured_hosts(run_dir))
    assert f"| flags: flashinfer-allreduce-fusion | 0.0 | skipped (preflight), saved ~{skipped['saved_gpu_minutes']:,.1f}" \
           " GPU-min |" in text
    assert ("- **flags: flashinfer-allreduce-fusion**: Not measured: the preflight found it would change nothing on "
            "this host.\n    - preflight: enable_flashinfer_allreduce_fusion") in text


def test_the_summary_report_and_lines_show_stages_trials_and_the_total(run_dir):
    write_json(run_dir / "flags/gpu1/trials/flashinfer-allreduce-fusion/findings.json",
               {"skip": False, "ineffective": True, "findings": [], "forced_by": "force: true on the candidate"})
    costs = finish_stages(run_dir)
    summary = run_report.build_summary(run_dir)
    cost = summary["hosts"]["gpu1"]["cost"]
    assert cost["gpu_minutes"] == pytest.approx(sum(c["gpu_minutes"] for c in costs.values()), abs=0.1)
    assert summary["gpu_minutes"] == cost["gpu_minutes"] and cost["emulated"]
    assert [t["label"] for t in cost["trials"]] == ["baseline", "flags: fused-moe-sum-all-reduce",
                                                    "flags: flashinfer-allreduce-fusion", "moe_tune", "verify"]
    assert cost["trials"][2]["forced_by"] == "force: true on the candidate"
    text = run_report.render_markdown(run_dir, summary, run_report.measured_hosts(run_dir))
    assert "### GPU-minutes" in text and f"Total: **{cost['gpu_minutes']:,.1f} GPU-min**" in text
    assert "| Stage | GPUs | Minutes | GPU-min | server starts | warm-up | benchmark | tuning | kernel benchmarks | other |" in text
    assert f"| baseline | 4 | {costs['baseline']['real_s'] / 60:,.1f} | {costs['baseline']['gpu_minutes']:,.1f} |" in text
    assert "measured although the preflight found it ineffective (force: true on the candidate)" in text
    lines = run_report.summary_text(json.loads(json.dumps(summary, sort_keys=True)))  # as the action reads it back
    assert any(line.startswith("gpu1: GPU-minutes (real-GPU equivalent of the emulated run): preflight 0.0, baseline ")
               and line.endswith(f"; total {cost['gpu_minutes']:,.1f}") for line in lines), lines


def test_the_moe_stage_shows_its_estimate_next_to_what_it_cost(run_dir):
    stage = run_dir / "moe_tune" / "gpu1"
    write_json(stage / "estimate.json", {"gpu_minutes": 1300.0, "tuning_gpu_minutes": 1172.3, "seconds_per_config": 1.4,
                                          "summary": "estimate: 1300.0 GPU-min on 4 GPUs"})
    write_json(stage / "tune_up.json", {"duration_s": 40.0, "tuner_seconds": 7.0, "chunk_size": 4,
                                         "search_space": {"kept": 976}, "progress": [{"batch_sizes": [1, 2, 4, 8]}] * 5})
    write_json(stage / "tune_down.json", {"duration_s": 14.0, "process_seconds": 11.0})
    write_json(stage / "kernel_benchmark.json", {"before_s": 5.0, "after_s": 6.0})
    costs = finish_stages(run_dir)
    tuning = costs["moe_tune"]["parts"]["tuning"]
    assert tuning["wall_s"] == 54.0 and tuning["real_s"] == 33.0 + 7000.0 + 3.0 + 11000.0
    assert costs["moe_tune"]["seconds_per_config"] == round(7.0 / 0.001 / (5 * 976), 3)
    moe = run_report.build_summary(run_dir)["hosts"]["gpu1"]["cost"]["moe"]
    assert moe["estimate_gpu_minutes"] == 1300.0 and moe["actual_gpu_minutes"] == costs["moe_tune"]["gpu_minutes"]
    assert moe["actual_tuning_gpu_minutes"] == round(4 * tuning["real_s"] / 60, 1)
    text = run_report.render_markdown(run_dir, run_report.build_summary(run_dir), run_report.measured_hosts(run_dir))
    assert (f"MoE stage: estimated 1,300.0 GPU-min before the server stopped (tuning 1,172.3, 1.4 s per config), actual "
            f"{moe['actual_gpu_minutes']:,.1f} GPU-min") in text


def test_a_run_from_before_the_accounting_has_no_cost_section(tmp_path):
    run = Path(shutil.copytree(DEMO_RUN, tmp_path / "old"))
    summary = run_report.build_summary(run)
    assert summary["gpu_minutes"] == 0 and summary["hosts"]["gpu1"]["cost"]["trials"] == []
    assert "### GPU-minutes" not in run_report.render_markdown(run, summary, run_report.measured_hosts(run))


def test_the_engine_stage_reports_per_file_the_cache_answer_and_the_engines_gpu_minutes(run_dir):
    stage = run_dir / "moe_tune" / "gpu1"
    write_json(stage / "estimate.json", {"engine": "llmops", "gpu_minutes": 30.0, "tuning_gpu_minutes": 15.6,
                                          "engine_gpu_minutes": 3.9, "summary": "estimate: 30.0 GPU-min on 4 GPUs"})
    write_json(stage / "tune_up.json", {"file_name": "E=256,N=256,device_name=NVIDIA_H100_80GB_HBM3.json",
                                         "duration_s": 250.0, "tuner_seconds": 234.8, "engine": {"gpu_minutes": 4.1},
                                         "cache": {"status": "miss", "key_short": "3f9a1c2b4d5e"}})
    write_json(stage / "tune_down.json", {"file_name": "E=256,N=256,device_name=NVIDIA_H100_80GB_HBM3_down.json",
                                           "duration_s": 3.0, "engine": None,
                                           "cache": {"status": "hit", "key_short": "77aa00bb11cc"}})
    costs = finish_stages(run_dir)
    assert "seconds_per_config" not in costs["moe_tune"] or costs["moe_tune"]["seconds_per_config"] is None
    moe = run_report.build_summary(run_dir)["hosts"]["gpu1"]["cost"]["moe"]
    assert moe["engine"] == {"estimate_gpu_minutes": 3.9, "actual_gpu_minutes": 4.1, "shapes": [
        {"file_name": "E=256,N=256,device_name=NVIDIA_H100_80GB_HBM3.json", "cache": "miss",
         "key_short": "3f9a1c2b4d5e", "engine_gpu_minutes": 4.1},
        {"file_name": "E=256,N=256,device_name=NVIDIA_H100_80GB_HBM3_down.json", "cache": "hit",
         "key_short": "77aa00bb11cc", "engine_gpu_minutes": None}]}
    text = run_report.render_markdown(run_dir, run_report.build_summary(run_dir), run_report.measured_hosts(run_dir))
    assert "MoE stage: estimated 30.0 GPU-min before the server stopped (tuning 15.6), actual" in text
    assert ("MoE engine: estimated 3.9 engine GPU-min, actual 4.1; E=256,N=256,device_name=NVIDIA_H100_80GB_HBM3.json: "
            "cache miss (key 3f9a1c2b4d5e); E=256,N=256,device_name=NVIDIA_H100_80GB_HBM3_down.json: cache hit "
            "(key 77aa00bb11cc).") in text
