"""A run its input check refuses leaves nothing behind (issue #39 item 6): no run directory, no run.json, runs/latest
still pointing at the run before, and a recap without changes under the message that nothing was changed. The real
stage playbook through the API, on a controller-local host (the check runs before anything touches a host)."""
from __future__ import annotations

import pytest

from llmops_sglang import api

from tests.unit.layout.test_inventory_layout import REPO_ROOT

INVENTORY = "[sglang_hosts]\ngpu1 ansible_connection=local ansible_python_interpreter=\"{{ ansible_playbook_python }}\"\n"


@pytest.mark.parametrize("stage", ["baseline", "report"])
def test_a_run_refused_by_its_input_check_creates_nothing(tmp_path, monkeypatch, stage):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "hosts.ini").write_text(INVENTORY)
    runs = tmp_path / "runs"
    (runs / "earlier").mkdir(parents=True)
    (runs / "latest").symlink_to("earlier")
    result = api.run(REPO_ROOT / "playbooks" / f"{stage}.yml", tmp_path / "hosts.ini", {"stages": "baseline,flgs"},
                     run_id="refused", runs_dir=runs)
    assert result.status == "failed"
    assert [(f.task, f.message.split(": ", 1)[0]) for f in result.failures] == [
        ("Check the run's inputs before anything is deployed", "1 input error, nothing was changed")]
    assert "unknown stage 'flgs'; did you mean 'flags'?" in result.failures[0].message
    assert result.hosts["gpu1"].changed == 0
    assert sorted(path.name for path in runs.iterdir()) == ["earlier", "latest"]
    assert (runs / "latest").readlink().name == "earlier"
