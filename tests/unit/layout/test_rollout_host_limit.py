# Copyright (c) llmops.sglang contributors
# Apache License 2.0 (see LICENSE)
"""A failing rollout host holds the rollout at most ``rollout_host_timeout_s`` (issue #36 item 13): the server
module's two waits (the new start, the rollback's restart) a third of it each, the rescue's wait on the previous
configs what is left of it, at the address the restored unit listens on (not 127.0.0.1 when it binds elsewhere).

The expressions are rollout.yml's own, taken from the playbook and evaluated by a real ansible-playbook (localhost,
connection local) with the variables a failing host has at that point."""
from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from ansible_collections.llmops.sglang.plugins.filter import unit_health_url as health_plugin

REPO = Path(__file__).resolve().parents[3]
ROLLOUT = REPO / "playbooks" / "rollout.yml"
DELAY_S = 5
UNIT = ("[Service]\nExecStart=/opt/sglang/venv/bin/python /usr/local/libexec/llmops-sglang/sglang_launcher.py "
        "sglang.launch_server --model-path /m --host 10.0.0.5 --port 31000\n")


def _rollout_tasks() -> tuple[dict, dict]:
    """The deploy play's vars and its tasks by name (those of the host's block and of its rescue)."""
    play = next(p for p in yaml.safe_load(ROLLOUT.read_text()) if p["name"].startswith("Rollout - deploy"))
    block = next(t for t in play["tasks"] if t["name"] == "Roll out to this host")
    return play["vars"], {t["name"]: t for t in block["block"] + block["rescue"]}


def _task(tasks: dict, prefix: str) -> dict:
    return next(task for name, task in tasks.items() if name.startswith(prefix))


def _evaluate(tmp_path: Path, extravars: dict, seconds_later: float = 0.0) -> dict:
    """What rollout.yml decides for a failing host: the server's ready timeout, and the rescue's probe (URL,
    retries) ``seconds_later`` seconds after the host started."""
    play_vars, tasks = _rollout_tasks()
    start = _task(tasks, "Start this host's time limit")
    wait = _task(tasks, "Wait until the rolled-back server answers")
    out = tmp_path / "decided.json"
    playbook = [{
        "hosts": "localhost", "gather_facts": False,
        "vars": {"rollout_host_limit_s": play_vars["rollout_host_limit_s"]},
        "tasks": [
            {"name": "start", "ansible.builtin.set_fact": start["ansible.builtin.set_fact"]},
            {"name": "later", "ansible.builtin.set_fact": {
                "rollout_host_deadline": f"{{{{ rollout_host_deadline | float - {seconds_later} }}}}"}},
            {"name": "decide", "ansible.builtin.copy": {"dest": str(out), "mode": "0600", "content": json.dumps({
                "ready_timeout": "{{ rollout_ready_timeout }}", "retries": wait["retries"], "url": wait["ansible.builtin.uri"]["url"],
                "delay": wait["delay"], "limit": "{{ rollout_host_limit_s }}"})}},
        ],
    }]
    path = tmp_path / "rollout-decides.yml"
    path.write_text(yaml.safe_dump(playbook, sort_keys=False))
    facts = {"rollout_restored_unit": {"content": base64.b64encode(UNIT.encode()).decode()}, **extravars}
    env = {**os.environ, "ANSIBLE_CONFIG": str(REPO / "ansible.cfg"), "HOME": str(tmp_path),
           "ANSIBLE_LOCAL_TEMP": str(tmp_path / "local-tmp"), "ANSIBLE_NOCOLOR": "1"}
    result = subprocess.run([str(Path(sys.executable).parent / "ansible-playbook"), str(path), "-i", "localhost,",
                             "-c", "local", "-e", json.dumps({**facts, "ansible_python_interpreter": sys.executable})],
                            cwd=REPO, env=env, capture_output=True, text=True, timeout=300, check=False)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return json.loads(out.read_text())


def _worst_case_s(decided: dict) -> int:
    """A host whose new start and whose rollback's restart both wait their whole timeout, then the rescue's probe
    every retry (and the first try)."""
    return 2 * int(decided["ready_timeout"]) + (int(decided["retries"]) + 1) * int(decided["delay"])


@pytest.mark.parametrize("extravars", [{}, {"rollout_host_timeout_s": 900}, {"sglang_server_ready_timeout": 120}])
def test_a_failing_host_holds_the_rollout_at_most_its_limit(tmp_path, extravars):
    limit = extravars.get("rollout_host_timeout_s", 3600)
    decided = _evaluate(tmp_path, extravars, seconds_later=2 * min(limit // 3, 1800))
    assert int(decided["limit"]) == limit
    assert _worst_case_s(decided) <= limit + DELAY_S, decided
    assert int(decided["ready_timeout"]) == min(limit // 3, extravars.get("sglang_server_ready_timeout", 1800))


def test_past_the_limit_the_rescue_probes_once(tmp_path):
    assert int(_evaluate(tmp_path, {"rollout_host_timeout_s": 600}, seconds_later=900)["retries"]) == 0


def test_the_rescue_probes_the_restored_units_own_address(tmp_path):
    assert _evaluate(tmp_path, {})["url"] == "http://10.0.0.5:31000/health"


def test_the_filter_reads_the_units_own_address():
    assert health_plugin.FilterModule().filters() == {"unit_health_url": health_plugin.unit_health_url}
    assert health_plugin.unit_health_url(UNIT.replace("10.0.0.5", "0.0.0.0")) == "http://127.0.0.1:31000/health"
    assert health_plugin.unit_health_url(UNIT.replace("10.0.0.5", "::")) == "http://[::1]:31000/health"
