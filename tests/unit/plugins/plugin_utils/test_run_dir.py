# Copyright (c) llmops.sglang contributors
# Apache License 2.0 (see LICENSE)
"""Run directory writes: a record that is null now is removed when an earlier attempt left it (issue 15 item 11)."""
from __future__ import annotations

from pathlib import Path

from ansible_collections.llmops.sglang.plugins.plugin_utils.run_dir import remove_files, write_files


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
    import pytest
    with pytest.raises(ValueError):
        remove_files(tmp_path, ["../x"])


def test_a_run_directory_resolves_right_under_the_runs_root(tmp_path: Path) -> None:
    """Issue 36 item 6: every run path is resolved and must stay under the runs root, links included."""
    import pytest
    from ansible_collections.llmops.sglang.plugins.plugin_utils.run_dir import run_directory
    root = tmp_path / "runs"
    root.mkdir()
    assert run_directory(root, "R1") == root.resolve() / "R1"
    (root / "elsewhere").symlink_to(tmp_path)  # a link in the runs root pointing out of it
    for run_id in ("../../escaped", "elsewhere", "a/b", ".."):
        with pytest.raises(ValueError, match="not a run directory right under the runs root"):
            run_directory(root, run_id)
