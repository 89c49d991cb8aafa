# Copyright (c) llmops.sglang contributors
# Apache License 2.0 (see LICENSE)
"""The search section of the report: every candidate, the Pareto fronts and their plots, the recommendation with its
evidence, side effects and GPU-minutes (issue 19, deliverable 4).

tests/fixtures/run-search is the run directory of a `make demo-slo` run (examples/demo-slo.yml: baseline and search on
the demo profile), startup logs, unit files and the generated report left out, so these tests see what the pipeline
writes. In it the search started five candidates: 000 (48 running requests, mem_fraction_static 0.88), 002 and 003
(64 at 0.81 and 0.88) met the SLO, 001 and 004 (0.97) ran out of memory at start; 000 was re-verified against the
baseline and its goodput was not significantly higher, so the baseline stays.
"""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from ansible_collections.llmops.sglang.plugins.plugin_utils import run_report
from ansible_collections.llmops.sglang.plugins.plugin_utils._report_search import pareto_front
from ansible_collections.llmops.sglang.plugins.plugin_utils.run_cost import account_stage
from tests.unit.plugins.plugin_utils.test_run_report import Elements

SEARCH_RUN = Path(__file__).resolve().parents[3] / "fixtures" / "run-search"
HOST = "gpu1"


@pytest.fixture
def run_dir(tmp_path) -> Path:
    return Path(shutil.copytree(SEARCH_RUN, tmp_path / "run"))


def stage_dir(run: Path) -> Path:
    return run / "search" / HOST


def read(path: Path):
    return json.loads(path.read_text())


def write(path: Path, content) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(content))


def search_of(run: Path) -> dict:
    return run_report.build_summary(run)["hosts"][HOST]["search"]


def markdown_of(run: Path) -> str:
    return run_report.render_markdown(run, run_report.build_summary(run), run_report.measured_hosts(run))


def by_name(search: dict) -> dict[str, dict]:
    return {candidate["name"]: candidate for candidate in search["candidates"]}


def adopt(run: Path, name: str) -> None:
    """The verdict as search_step writes it when ``name`` wins, and the adopted.json the playbook then records."""
    decision = read(stage_dir(run) / "verify" / "decision.json")
    decision.update(adopt=True, action="adopt", candidate=name,
                    summary=f"adopt candidate {name}: significantly higher goodput than the adopted configuration")
    decision["comparisons"][name].update(verdict="improved", significant=True, improved=True)
    write(stage_dir(run) / "verify" / "decision.json", decision)
    adopted = {key: value for key, value in read(stage_dir(run) / "adopted.json").items()
               if key not in ("sweep", "facts")}  # the fixture was recorded with the names before 2.0.0
    adopted.update(stage="search", args=read(stage_dir(run) / "verify" / name / "requested_args.json"),
                   sweep_file=f"search/{HOST}/verify/{name}/sweep.json",
                   facts_file=f"search/{HOST}/verify/{name}/facts.json")
    write(stage_dir(run) / "adopted.json", adopted)


def test_every_candidate_is_listed_with_its_outcome_goodput_probes_and_gpu_minutes(run_dir):
    search = search_of(run_dir)
    trials = read(stage_dir(run_dir) / "search.json")["strategy"]["trials"]
    assert [c["name"] for c in search["candidates"]] == ["000", "001", "002", "003", "004"]
    for candidate, trial in zip(search["candidates"], trials):
        assert candidate["params"] == trial["params"] and candidate["gpu_minutes"] == trial["gpu_minutes"]
    candidates = by_name(search)
    assert {name for name, c in candidates.items() if c["state"] == "infeasible"} == {"001", "004"}
    for name in ("001", "004"):
        assert candidates[name]["reason"].startswith("SGLang failed to start (oom)")
        assert candidates[name]["goodput_rps"] is None and candidates[name]["probes"] == 0
        assert candidates[name]["boundary"] is None
    for name in ("000", "002", "003"):
        result = read(stage_dir(run_dir) / "trials" / name / "rate_search.json")
        assert candidates[name]["goodput_rps"] == result["rate_rps"] > 0
        assert candidates[name]["probes"] == len(list((stage_dir(run_dir) / "trials" / name / "probes").glob("*.json")))
        assert candidates[name]["boundary"]["runs"] >= 2  # confirmed with every repeat at that rate
    assert max(candidates.values(), key=lambda c: c["goodput_rps"] or 0)["name"] == "000"
    assert search["slo"] == {"ttft_ms": {"target": 200.0, "percentile": 99.0},
                             "tpot_ms": {"target": 5.0, "percentile": 99.0}}


def test_boundary_latencies_are_the_medians_of_the_runs_at_the_slo_meeting_rate(run_dir):
    candidate = by_name(search_of(run_dir))["000"]
    runs = [run for path in sorted((stage_dir(run_dir) / "trials" / "000" / "probes").glob("*.json"))
            for level in read(path)["levels"] if level["request_rate"] == candidate["goodput_rps"]
            for run in level["runs"]]
    assert len(runs) == candidate["boundary"]["runs"]
    ttft = sorted(run["ttft_ms"]["p99"] for run in runs)
    assert ttft[0] <= candidate["boundary"]["ttft_ms_p99"] <= ttft[-1]
    assert all(run["slo_holds"] for run in runs), "the rate meets the SLO only where every run held it"


def test_pareto_front_keeps_the_points_nothing_dominates():
    points = {"a": (10.0, 50.0), "b": (20.0, 60.0), "c": (30.0, 55.0), "d": (10.0, 40.0), "e": (20.0, 60.0)}
    assert pareto_front(points) == ["a", "b", "e"]  # c: b has more at less; d: a has more at the same


def test_the_fronts_of_the_recorded_run(run_dir):
    search = search_of(run_dir)
    candidates = by_name(search)
    for metric in ("ttft_ms", "tpot_ms"):
        key = f"{metric}_p99"
        points = {name: (c["boundary"][key], c["goodput_rps"]) for name, c in candidates.items() if c["boundary"]}
        assert search["front"][metric] == pareto_front(points)
        # 000 has the most goodput; 003 the same as 002 at lower latency (both at 64 running requests, 003 with the
        # larger KV cache); a failed start has no point
        assert search["front"][metric] == ["000", "003"]


def test_markdown_has_the_candidate_table_the_fronts_and_the_plot(run_dir):
    text = markdown_of(run_dir)
    section = text[text.index("### Goodput search"):text.index("### GPU-minutes")]
    assert "SLO: p99 TPOT <= 5 ms, p99 TTFT <= 200 ms." in section
    assert ("| Candidate | max_running_requests | mem_fraction_static | State | Goodput (req/s) | p99 TTFT (ms) "
            "| p99 TPOT (ms) | Output tok/s | Probes | GPU-min | Reason |") in section
    goodput = by_name(search_of(run_dir))["000"]["goodput_rps"]
    assert f"| 000 | 48 | 0.88 | complete | {goodput:,.2f} |" in section
    assert "| 001 | 48 | 0.97 | infeasible | - | - | - | - | 0 |" in section
    assert "| 004 | 64 | 0.97 | infeasible | - |" in section
    assert len([line for line in section.splitlines() if line.startswith("| 00")]) == 5
    assert "Pareto front (goodput vs p99 TTFT: 000, 003; vs p99 TPOT: 000, 003)." in section
    assert "![goodput against latency](plots/gpu1-search.svg)" in section
    assert "Note:" not in section, "the SLO judges both latencies at p99, as the plots"


def test_html_inlines_both_plots_and_the_search_plot_is_a_file(run_dir):
    files = run_report.report_files(run_dir)
    elements = Elements()
    elements.feed(files["report.html"])
    assert elements.tags.count("svg") == 2 and elements.references == []
    assert "plots/gpu1-search.svg" in files and files["plots/gpu1-search.svg"].lstrip().startswith("<?xml")
    plot = files["plots/gpu1-search.svg"]
    assert "Goodput vs p99 TTFT" in plot and "Goodput vs p99 TPOT" in plot and plot.count("Pareto front") == 2
    assert run_report.report_files(run_dir) == files, "same run directory, same bytes"


def test_without_a_measured_candidate_there_is_no_search_plot(run_dir):
    for probes in stage_dir(run_dir).glob("trials/*/probes"):
        shutil.rmtree(probes)
    files = run_report.report_files(run_dir)
    assert "plots/gpu1-search.svg" not in files
    assert files["report.html"].count("<svg") == 1
    assert "Pareto front (goodput vs p99 TTFT: none; vs p99 TPOT: none)." in files["report.md"]


def test_the_recommendation_keeps_the_adopted_configuration_with_the_test_as_evidence(run_dir):
    search = search_of(run_dir)
    recommendation = search["recommendation"]
    assert recommendation["action"] == "keep" and recommendation["candidate"] is None
    assert recommendation["best_candidate"] == "000" and recommendation["side_effects"] is None
    verification = recommendation["verification"]
    decision = read(stage_dir(run_dir) / "verify" / "decision.json")
    assert verification["candidate"] == "000" and verification["verdict"] == decision["comparisons"]["000"]["verdict"]
    assert verification["rate_rps"] == by_name(search)["000"]["goodput_rps"] and verification["runs"] == 3
    text = markdown_of(run_dir)
    assert ("**The adopted configuration stays** (the best candidate was 000). Verdict: keep the adopted "
            "configuration: no candidate's goodput was significantly higher at") in text
    assert f"Re-verified on fresh starts at {verification['rate_rps']:g} req/s, 3 runs each: candidate 000" in text
    assert "#### Side effects" not in text
    lines = run_report.search_lines(run_report.build_summary(run_dir))
    goodput = by_name(search)["000"]["goodput_rps"]
    assert len(lines) == 1 and lines[0].startswith(
        "gpu1: search recommends keeping the adopted configuration; best candidate 000 (max_running_requests=48, "
        f"mem_fraction_static=0.88): goodput {goodput:,.2f} req/s under the SLO (p99 TPOT <= 5 ms, p99 TTFT <= 200 ms)"
        f"; re-verified at {verification['rate_rps']:g} req/s: ")


def test_an_adopted_candidate_is_recommended_with_its_goodput_and_side_effects(run_dir):
    adopt(run_dir, "000")
    search = search_of(run_dir)
    recommendation = search["recommendation"]
    goodput = by_name(search)["000"]["goodput_rps"]
    assert recommendation["action"] == "adopt" and recommendation["goodput_rps"] == goodput
    assert recommendation["args"]["mem_fraction_static"] == 0.88
    # 0.88 of the GPU memory instead of the baseline's 0.81: the server sized a larger KV cache by itself
    side_effects = recommendation["side_effects"]
    assert side_effects["against"] == "baseline"
    capacity = {entry["metric"]: entry for entry in side_effects["capacity"]}
    assert capacity["max_total_num_tokens"]["candidate"] > capacity["max_total_num_tokens"]["baseline"]
    text = markdown_of(run_dir)
    assert (f"**Adopt candidate 000** (max_running_requests=48, mem_fraction_static=0.88): goodput {goodput:,.2f} "
            "req/s under the SLO. Verdict: adopt candidate 000") in text
    assert "#### Side effects (against the configuration adopted by baseline)" in text
    assert "- search: 000: max_total_num_tokens " in text
    line = run_report.search_lines(run_report.build_summary(run_dir))[0]
    assert line.startswith(f"gpu1: search recommends candidate 000 (max_running_requests=48, mem_fraction_static=0.88):"
                           f" goodput {goodput:,.2f} req/s under the SLO (p99 TPOT <= 5 ms, p99 TTFT <= 200 ms)")
    assert line in run_report.summary_text(run_report.build_summary(run_dir))


def test_an_slo_at_another_percentile_is_noted(run_dir):
    for path in stage_dir(run_dir).glob("trials/*/probes/*.json"):
        sweep = read(path)
        sweep["workload"]["slo"]["ttft_ms"]["percentile"] = 90.0
        del sweep["workload"]["slo"]["tpot_ms"]
        write(path, sweep)
    text = markdown_of(run_dir)
    assert "SLO: p90 TTFT <= 200 ms." in text
    assert "Note: the SLO judges TTFT at p90, the plot shows p99; TPOT is not in the SLO." in text


def test_a_refused_candidate_is_listed_as_skipped(run_dir):
    """A candidate the flag rules refused, recorded as search_step's next step records it: no start, no budget."""
    state = read(stage_dir(run_dir) / "search.json")
    reason = "ineffective here: enable_flashinfer_allreduce_fusion only runs on SM90/SM100 GPUs"
    trial = {"number": 5, "params": {"max_running_requests": 32, "mem_fraction_static": 0.81}, "state": "invalid",
             "value": None, "reason": reason, "gpu_minutes": 0.0}
    state["strategy"]["trials"].append(trial)
    write(stage_dir(run_dir) / "search.json", state)
    write(stage_dir(run_dir) / "trials" / "005" / "trial.json", trial)
    skipped = by_name(search_of(run_dir))["005"]
    assert skipped["state"] == "invalid" and skipped["reason"] == reason and skipped["probes"] == 0
    assert f"| 005 | 32 | 0.81 | skipped | - | - | - | - | 0 | 0.0 | {reason} |" in markdown_of(run_dir)


def test_the_cost_is_the_stage_cost_with_its_parts(run_dir):
    summary = run_report.build_summary(run_dir)
    search = summary["hosts"][HOST]["search"]
    cost = summary["hosts"][HOST]["stages"]["search"]["cost"]
    assert search["gpu_minutes"] == cost["gpu_minutes"] > 0
    text = markdown_of(run_dir)
    assert (f"The search cost {cost['gpu_minutes']:,.1f} GPU-min (real-GPU equivalent of the emulated run) "
            f"(server starts {cost['parts']['server_start']['gpu_minutes']:,.1f}, ") in text
    assert f"its budget counted {search['spent']['restarts']} restarts" in text


def test_the_stage_cost_counts_the_probes_and_the_reverification_as_benchmarks(run_dir):
    record = read(stage_dir(run_dir) / "stage.json")
    _cost, records = account_stage(stage_dir(run_dir), 290.0, {"serving": 0.1, "tuning": 0.001, "startup": 0.025})
    measured = {path.relative_to(stage_dir(run_dir)).as_posix(): cost for path, cost in records.items()}
    assert {"trials/000", "trials/002", "trials/003", "verify/000"} <= set(measured)
    assert all(measured[name]["parts"]["benchmark"]["wall_s"] > 0 for name in ("trials/000", "verify/000"))
    assert record["cost"]["parts"]["benchmark"]["gpu_minutes"] > 0, "recorded by the run itself"


def test_a_run_without_a_search_has_no_search_summary():
    summary = run_report.build_summary(Path(__file__).resolve().parents[3] / "fixtures" / "run-demo")
    assert summary["hosts"]["gpu1"]["search"] is None
    assert run_report.search_lines(summary) == []


def test_a_search_where_no_candidate_met_the_slo_keeps_the_adopted_configuration(run_dir):
    """As search.yml leaves it then: every rate 0, nothing re-verified, the stage record's decision."""
    state = read(stage_dir(run_dir) / "search.json")
    for trial in state["strategy"]["trials"]:
        trial["value"] = 0.0 if trial["state"] == "complete" else None
    write(stage_dir(run_dir) / "search.json", state)
    shutil.rmtree(stage_dir(run_dir) / "verify")
    record = read(stage_dir(run_dir) / "stage.json")
    record["search"]["decision"] = "no candidate met the SLO at any rate; the adopted configuration stays"
    write(stage_dir(run_dir) / "stage.json", record)
    search = search_of(run_dir)
    assert search["recommendation"]["action"] == "keep" and search["recommendation"]["best_candidate"] is None
    assert search["front"] == {"ttft_ms": [], "tpot_ms": []}
    text = markdown_of(run_dir)
    assert ("**The adopted configuration stays**. Verdict: no candidate met the SLO at any rate; the adopted "
            "configuration stays.\n\nNothing was re-verified.") in text
    assert run_report.search_lines(run_report.build_summary(run_dir))[0].startswith(
        "gpu1: search recommends keeping the adopted configuration: no candidate met the SLO (p99 TPOT <= 5 ms")


def test_the_best_candidate_comes_with_the_surrogates_confidence_in_it(run_dir):
    assert search_of(run_dir)["recommendation"]["best_candidate_confidence"] is None  # a state from before it
    state = read(stage_dir(run_dir) / "search.json")
    state["strategy"]["confidence"] = 0.62
    write(stage_dir(run_dir) / "search.json", state)
    assert search_of(run_dir)["recommendation"]["best_candidate_confidence"] == 0.62
