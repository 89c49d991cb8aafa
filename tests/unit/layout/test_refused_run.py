"""A run its input check refuses leaves nothing behind (issue #39 item 6): no run directory, no run.json, runs/latest
still pointing at the run before, and a recap without changes under the message that nothing was changed. The real
stage playbook through the API, on a controller-local host (the check runs before anything touches a host)."""
from __future__ import annotations

import pytest

from llmops_sglang import api

from tests.unit.layout.test_inventory_layout import REPO_ROOT

INVENTORY = ('[sglang_hosts]\ngpu1 ansible_connection=local '
             'ansible_python_interpreter="{{ ansible_playbook_python }}"\n')


@pytest.mark.parametrize(("stage", "extravars", "message"), [
    ("baseline", {"stages": "baseline,flgs"}, "unknown stage 'flgs'; did you mean 'flags'?"),
    ("report", {"stages": "baseline,flgs"}, "unknown stage 'flgs'; did you mean 'flags'?"),
    # a top-level typo (issue #39 item 7): Ansible ignores the variable, the default policy would apply
    ("baseline", {"tuning_run_polcy": {"min_effect_pct": 5}},
     "tuning_run_polcy: no role or playbook of llmops.sglang reads this variable (a typo?); did you mean "
     "'tuning_run_policy'?"),
], ids=["stage-typo", "report", "top-level-typo"])
def test_a_run_refused_by_its_input_check_creates_nothing(tmp_path, monkeypatch, stage, extravars, message):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "hosts.ini").write_text(INVENTORY)
    runs = tmp_path / "runs"
    (runs / "earlier").mkdir(parents=True)
    (runs / "latest").symlink_to("earlier")
    result = api.run(REPO_ROOT / "playbooks" / f"{stage}.yml", tmp_path / "hosts.ini", extravars,
                     run_id="refused", runs_dir=runs)
    assert result.status == "failed"
    assert [(f.task, f.message.split(": ", 1)[0]) for f in result.failures] == [
        ("Check the run's inputs before anything is deployed", "1 input error, nothing was changed")]
    assert message in result.failures[0].message
    assert result.hosts["gpu1"].changed == 0
    assert sorted(path.name for path in runs.iterdir()) == ["earlier", "latest"]
    assert (runs / "latest").readlink().name == "earlier"


def test_a_run_id_with_a_path_in_it_writes_nothing_outside_the_runs_root(tmp_path, monkeypatch):
    """Issue 36 item 6: -e run_id=../../escaped wrote run.json and a latest link outside the runs root."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "hosts.ini").write_text(INVENTORY)
    runs = tmp_path / "a" / "b" / "runs"
    runs.mkdir(parents=True)
    result = api.run(REPO_ROOT / "playbooks" / "baseline.yml", tmp_path / "hosts.ini", None,
                     run_id="../../escaped", runs_dir=runs)
    assert result.status == "failed"
    assert [f.task for f in result.failures] == ["Check the run's inputs before anything is deployed"]
    assert "run_id (-e run_id, tuning_run_id): must be 1 to 128 letters" in result.failures[0].message
    assert not (tmp_path / "a" / "escaped").exists() and not (tmp_path / "a" / "latest").exists()
    assert list(runs.iterdir()) == []


def test_a_second_playbook_of_a_run_in_use_stops_before_the_stage_done_check(tmp_path, monkeypatch):
    """Issue 36 item 9: two ansible-playbooks of one run id both passed the stage-done check and deployed to the same
    servers. The run is held by a live process (a stand-in for the first ansible-playbook)."""
    import subprocess
    from ansible_collections.llmops.sglang.plugins.plugin_utils.run_lock import lock_run
    monkeypatch.chdir(tmp_path)
    (tmp_path / "hosts.ini").write_text(INVENTORY)
    runs = tmp_path / "runs"
    (runs / "busy").mkdir(parents=True)
    first = subprocess.Popen(["sleep", "300"])
    try:
        assert lock_run(runs / "busy", first.pid) == "acquired"
        result = api.run(REPO_ROOT / "playbooks" / "baseline.yml", tmp_path / "hosts.ini", None,
                         run_id="busy", runs_dir=runs)
    finally:
        first.kill()
        first.wait()
    assert result.status == "failed"
    assert [f.task for f in result.failures] == ["Hold the run for this ansible-playbook"]
    assert f"run busy is in use by ansible-playbook PID {first.pid}" in result.failures[0].message
    assert sorted(path.name for path in (runs / "busy").iterdir()) == [".lock"], "no run.json, no stage entered"
