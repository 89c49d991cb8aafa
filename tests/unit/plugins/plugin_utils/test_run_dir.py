# Copyright (c) llmops.sglang contributors
# Apache License 2.0 (see LICENSE)
"""Run directory writes: a record that is null now is removed when an earlier attempt left it (issue 15 item 11); the
run directory's layout, declared once (issue 41 item 1)."""
from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from ansible_collections.llmops.sglang.plugins.module_utils import stages
from ansible_collections.llmops.sglang.plugins.plugin_utils import run_dir
from ansible_collections.llmops.sglang.plugins.plugin_utils.run_dir import record_files, remove_files, write_files


def test_a_later_successful_attempt_removes_the_failure_of_an_earlier_one(tmp_path: Path) -> None:
    write_files(tmp_path, {"requested_args.json": "{}\n", "failure.txt": "SGLang failed to start (oom)"})
    write_files(tmp_path, {"requested_args.json": "{}\n", "sweep.json": "{}\n"})
    assert remove_files(tmp_path, ["failure.txt", "failure.json"]) == [tmp_path / "failure.txt"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["requested_args.json", "sweep.json"]


def test_check_mode_removes_nothing(tmp_path: Path) -> None:
    (tmp_path / "failure.txt").write_text("x")
    assert remove_files(tmp_path, ["failure.txt"], check_mode=True) == [tmp_path / "failure.txt"]
    assert (tmp_path / "failure.txt").exists()


def test_names_outside_the_directory_are_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError):
        remove_files(tmp_path, ["../x"])


def test_a_run_directory_resolves_right_under_the_runs_root(tmp_path: Path) -> None:
    """Issue 36 item 6: every run path is resolved and must stay under the runs root, links included."""
    from ansible_collections.llmops.sglang.plugins.plugin_utils.run_dir import run_directory
    root = tmp_path / "runs"
    root.mkdir()
    assert run_directory(root, "R1") == root.resolve() / "R1"
    (root / "elsewhere").symlink_to(tmp_path)  # a link in the runs root pointing out of it
    for run_id in ("../../escaped", "elsewhere", "a/b", ".."):
        with pytest.raises(ValueError, match="not a run directory right under the runs root"):
            run_directory(root, run_id)


# The layout (issue 41 item 1): every place of a run directory from run_dir.path().

def test_a_place_is_the_run_a_stage_a_host_a_candidate_or_a_record_of_one() -> None:
    run = Path("runs/r1")
    assert run_dir.path(run, record="run") == run / "run.json"
    assert run_dir.path(run, "rollout", record="summary") == run / "rollout" / "summary.json"
    assert run_dir.path(run, "baseline", "gpu1", record="sweep") == run / "baseline" / "gpu1" / "sweep.json"
    assert run_dir.path(run, "flags", "gpu1", measurement="fusion") == run / "flags" / "gpu1" / "trials" / "fusion"
    assert run_dir.path(run, "search", "gpu1", measurement="003", record="goodput") == \
        run / "search" / "gpu1" / "verify" / "003" / "goodput.json"
    assert run_dir.path(run, "upgrade", "gpu1", record="prediction_md") == run / "upgrade" / "gpu1" / "prediction.md"


@pytest.mark.parametrize(("where", "message"), [
    ({"record": "adopted.json"}, "unknown run record 'adopted.json'; records are"),
    ({"stage": "tuning"}, "unknown stage 'tuning'"),
    ({"stage": "flags", "host": "../gpu1"}, "host '../gpu1' is not a folder name"),
    ({"stage": "flags", "host": "gpu1", "measurement": ".."}, "measurement '..' is not a folder name"),
    ({"stage": "baseline", "host": "gpu1", "measurement": "x"}, "stage baseline keeps its one measurement"),
])
def test_a_place_the_layout_does_not_have_is_refused_naming_why(where: dict, message: str) -> None:
    with pytest.raises(ValueError, match=re.escape(message)):
        run_dir.path("runs/r1", where.pop("stage", None), where.pop("host", None), **where)


def test_a_stages_measurements_come_in_the_order_they_were_tried(tmp_path: Path) -> None:
    for folder in ("flags/gpu1/trials/b", "flags/gpu1/trials/a", "search/gpu1/verify/002", "search/gpu1/verify/adopted",
                   "baseline/gpu1"):
        (tmp_path / folder).mkdir(parents=True)
    assert [name for name, _ in run_dir.measurement_dirs(tmp_path, "flags", "gpu1")] == ["a", "b"]
    write_files(tmp_path / "flags" / "gpu1", {"stage.json": json.dumps({"trials": ["b", "a"]})})
    assert run_dir.measurement_dirs(tmp_path, "flags", "gpu1") == [
        ("b", tmp_path / "flags/gpu1/trials/b"), ("a", tmp_path / "flags/gpu1/trials/a")]
    # verify/adopted is the reference the candidates were verified against, not a candidate
    assert run_dir.measurement_dirs(tmp_path, "search", "gpu1") == [("002", tmp_path / "search/gpu1/verify/002")]
    assert run_dir.measurement_dirs(tmp_path, "baseline", "gpu1") == [(None, tmp_path / "baseline/gpu1")]
    assert run_dir.hosts(tmp_path, ("baseline", "verify")) == ["gpu1"]


def test_a_record_reads_back_what_was_written_and_none_when_missing(tmp_path: Path) -> None:
    record_files(run_dir.path(tmp_path, "verify", "gpu1"), {run_dir.record_name("drift"): {"drifted": False}})
    assert run_dir.read_record(tmp_path, "verify", "gpu1", record="drift") == {"drifted": False}
    assert run_dir.read_record(tmp_path, "verify", "gpu2", record="drift") is None


def test_a_skipped_trial_records_its_decision_and_clears_an_earlier_measurement(tmp_path: Path) -> None:
    trial = run_dir.path(tmp_path, "flags", "gpu1", measurement="fusion")
    write_files(trial, {"sweep.json": "{}\n", "failure.txt": "oom", "restart_check.json": "{}\n"})
    record_files(trial, run_dir.skipped_trial({"action": "skip"}))
    assert sorted(p.name for p in trial.iterdir()) == ["decision.json", "restart_check.json"]


def test_every_stage_keeps_its_candidates_in_a_folder_the_layout_knows() -> None:
    assert {stage.measurements for stage in stages.STAGES} == {None, run_dir.TRIALS, run_dir.VERIFIED, run_dir.CANARY}
