# Copyright (c) llmops.sglang contributors
# Apache License 2.0 (see LICENSE)
"""A failing rollout host holds the rollout at most ``rollout_host_timeout_s`` (issue #36 item 13): the server
module's two waits (the new start, the rollback's restart) and the undo's wait on the recorded revision (issue #36
item 15) a third of it each, the undo's at the address the restored unit listens on (not 127.0.0.1 when it binds
elsewhere: tests/unit/plugins/module_utils/test_revisions.py).

The expressions are rollout.yml's own, taken from the playbook and evaluated by a real ansible-playbook (localhost,
connection local) with the variables a failing host has at that point."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from ansible_collections.llmops.sglang.plugins.filter import unit_health_url as health_plugin

REPO = Path(__file__).resolve().parents[3]
ROLLOUT = REPO / "playbooks" / "rollout_batches.yml"  # rollout.yml's batches
UNIT = ("[Service]\nExecStart=/opt/sglang/venv/bin/python /usr/local/libexec/llmops-sglang/sglang_launcher.py "
        "sglang.launch_server --model-path /m --host 10.0.0.5 --port 31000\n")


def _rollout_play() -> tuple[dict, dict]:
    """The deploy play's vars and its tasks by name (those of the host's block and of its rescue too)."""
    play = next(p for p in yaml.safe_load(ROLLOUT.read_text()) if p["name"].startswith("Rollout - a canary batch"))
    tasks = {t["name"]: t for t in play["tasks"]}
    block = tasks["Roll out to this host"]
    return play["vars"], {**tasks, **{t["name"]: t for t in block["block"] + block["rescue"]}}


def _task(tasks: dict, prefix: str) -> dict:
    return next(task for name, task in tasks.items() if name.startswith(prefix))


def _evaluate(tmp_path: Path, extravars: dict) -> dict:
    """The three waits' timeouts rollout.yml gives a failing host: the deploy's (the server module's start and its
    rollback's restart wait as long), and the undo's."""
    play_vars, tasks = _rollout_play()
    start = _task(tasks, "Give each of a failing host's three waits")
    deploy = _task(tasks, "Deploy the adopted server")
    undo = _task(tasks, "Put every host this rollout updated back")
    out = tmp_path / "decided.json"
    playbook = [{
        "hosts": "localhost", "gather_facts": False,
        "vars": {"rollout_host_limit_s": play_vars["rollout_host_limit_s"]},
        "tasks": [
            {"name": "start", "ansible.builtin.set_fact": start["ansible.builtin.set_fact"]},
            # the undo is delegated to each updated host in a loop: here the host itself is the item
            {"name": "decide", "vars": {"item": "localhost"}, "ansible.builtin.copy": {
                "dest": str(out), "mode": "0600", "content": json.dumps({
                    "deploy": deploy["vars"]["sglang_server_ready_timeout"],
                    "undo": undo["llmops.sglang.revision"]["ready_timeout"], "limit": "{{ rollout_host_limit_s }}"})}}],
    }]
    path = tmp_path / "rollout-decides.yml"
    path.write_text(yaml.safe_dump(playbook, sort_keys=False))
    env = {**os.environ, "ANSIBLE_CONFIG": str(REPO / "ansible.cfg"), "HOME": str(tmp_path),
           "ANSIBLE_LOCAL_TEMP": str(tmp_path / "local-tmp"), "ANSIBLE_NOCOLOR": "1"}
    result = subprocess.run([str(Path(sys.executable).parent / "ansible-playbook"), str(path), "-i", "localhost,",
                             "-c", "local", "-e", json.dumps({**extravars, "ansible_python_interpreter": sys.executable})],
                            cwd=REPO, env=env, capture_output=True, text=True, timeout=300, check=False)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return {key: int(value) for key, value in json.loads(out.read_text()).items()}


@pytest.mark.parametrize("extravars", [{}, {"rollout_host_timeout_s": 900}, {"sglang_server_ready_timeout": 120}])
def test_a_failing_host_holds_the_rollout_at_most_its_limit(tmp_path, extravars):
    limit = extravars.get("rollout_host_timeout_s", 3600)
    decided = _evaluate(tmp_path, extravars)
    assert decided["limit"] == limit
    # the new start, the server module's rollback and the undo each wait their whole timeout
    assert 2 * decided["deploy"] + decided["undo"] <= limit, decided
    assert decided["deploy"] == decided["undo"] == min(limit // 3, extravars.get("sglang_server_ready_timeout", 1800))


def test_the_filter_reads_the_units_own_address():
    assert health_plugin.FilterModule().filters() == {"unit_health_url": health_plugin.unit_health_url}
    assert health_plugin.unit_health_url(UNIT.replace("10.0.0.5", "0.0.0.0")) == "http://127.0.0.1:31000/health"
    assert health_plugin.unit_health_url(UNIT.replace("10.0.0.5", "::")) == "http://[::1]:31000/health"
