# Copyright (c) llmops.sglang contributors
# Apache License 2.0 (see LICENSE)
"""rollout_batches.yml's own variables (``rollout_records``, ``rollout_outcome``, ``rollout_analysis_plan``), taken from
the playbook and evaluated by a real ansible-playbook on three local hosts with the records a failing second batch
leaves: what the play's undo, records, summary and message read (the decisions themselves:
tests/unit/plugins/module_utils/test_rollout_batch.py)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[3]
ROLLOUT = REPO / "playbooks" / "rollout_batches.yml"
RECORDS = {
    "h1": {"status": "deployed", "batch": 1, "revision": "000001", "reason": None},
    "h2": {"status": "failed", "batch": 2, "revision": "000004", "reason": "analysis: level 8: p99 TPOT +60%"},
}

CONTENT = "{{ {'outcome': rollout_outcome, 'analysis': rollout_analysis_plan} | to_json }}"


def _play_vars() -> dict:
    play = next(p for p in yaml.safe_load(ROLLOUT.read_text()) if p["name"].startswith("Rollout - a canary batch"))
    return play["vars"]


def test_the_batch_reads_every_hosts_record_and_a_host_not_reached_has_none(tmp_path):
    out = tmp_path / "outcome.json"
    play_vars = _play_vars()
    playbook = [
        {"hosts": "localhost", "gather_facts": False, "tasks": [
            {"name": "the batch's number", "ansible.builtin.set_fact": {"rollout_batch": 2}}]},
        {"hosts": "h1:h2:h3", "gather_facts": False, "serial": [1, 2],  # batch 1: h1; batch 2: h2, h3
         "vars": {key: play_vars[key] for key in ("rollout_analysis_plan", "rollout_records", "rollout_outcome")},
         "tasks": [
             {"name": "the records", "ansible.builtin.set_fact": {"rollout_record": "{{ records[inventory_hostname] }}"},
              "when": "inventory_hostname in records"},
             {"name": "what the batch decides", "run_once": True, "when": "ansible_play_batch | length > 1",
              "ansible.builtin.copy": {"dest": str(out), "mode": "0600", "content": CONTENT}}]},
    ]
    path = tmp_path / "batch.yml"
    path.write_text(yaml.safe_dump(playbook, sort_keys=False))
    (tmp_path / "hosts.ini").write_text("h1\nh2\nh3\n")
    env = {**os.environ, "ANSIBLE_CONFIG": str(REPO / "ansible.cfg"), "HOME": str(tmp_path),
           "ANSIBLE_LOCAL_TEMP": str(tmp_path / "local-tmp"), "ANSIBLE_NOCOLOR": "1"}
    extravars = {"records": RECORDS, "ansible_connection": "local", "ansible_python_interpreter": sys.executable,
                 "rollout_analysis": {"limits": {"max_tpot_p99_increase_pct": 25}}}
    result = subprocess.run([str(Path(sys.executable).parent / "ansible-playbook"), str(path), "-i",
                             str(tmp_path / "hosts.ini"), "-e", json.dumps(extravars)],
                            cwd=REPO, env=env, capture_output=True, text=True, timeout=300, check=False)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    decided = json.loads(out.read_text())
    outcome = decided["outcome"]
    assert (outcome["failed"], outcome["updated"], outcome["recorded"]) == (["h2"], ["h1", "h2"], ["h2", "h3"])
    assert outcome["summary"]["hosts"] == {**RECORDS, "h3": {"status": "not reached"}}
    assert outcome["summary"]["canary"] == ["h1"] and outcome["summary"]["stopped_at"] == "h2"
    assert outcome["message"].startswith("rollout stopped in batch 2 at h2: analysis: level 8: p99 TPOT +60%.")
    assert decided["analysis"]["on"] and decided["analysis"]["limits"]["max_tpot_p99_increase_pct"] == 25
    assert decided["analysis"]["bench"]["requests_per_level"] == 64
