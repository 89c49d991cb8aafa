# Copyright (c) llmops.sglang contributors
# Apache License 2.0 (see LICENSE)
"""Tests for the parse_startup_log and server_args_diff filters (direct calls, docs, and a real playbook)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from ansible.errors import AnsibleFilterError

from ansible_collections.llmops.sglang.plugins.filter import parse_startup_log as parse_plugin
from ansible_collections.llmops.sglang.plugins.filter import server_args_diff as diff_plugin
from ansible_collections.llmops.sglang.plugins.module_utils.startup_log import parse_startup_log

REPO = Path(__file__).resolve().parents[4]
LOGS = REPO / "tests" / "fixtures" / "logs"
BASELINE_LOG = LOGS / "modern_tp4_spec_baseline.log"
TRIAL_LOG = LOGS / "modern_tp4_spec_allreduce_fusion.log"
DEMO_LINES = [
    "disable_piecewise_cuda_graph set by the server (not requested): False -> True",
    "max_running_requests 48 -> 26 (-46%)",
    "max_total_num_tokens 1183744 -> 1097728 (-7%)",
    "kv_cache_tokens 1183744 -> 1097728 (-7%)",
]


def test_each_file_exposes_its_filter():
    assert parse_plugin.FilterModule().filters() == {"parse_startup_log": parse_plugin.parse_startup_log}
    assert diff_plugin.FilterModule().filters() == {"server_args_diff": diff_plugin.server_args_diff}


def test_parse_filter_takes_text_or_lines():
    text = BASELINE_LOG.read_text(encoding="utf-8")
    from_text = parse_plugin.parse_startup_log(text)
    assert from_text == parse_startup_log(text)
    assert parse_plugin.parse_startup_log(text.splitlines()) == from_text
    assert from_text["max_running_requests"] == 48


@pytest.mark.parametrize("bad", [None, 42, {"stdout": "x"}, ["line", 3]])
def test_parse_filter_names_the_bad_input(bad):
    with pytest.raises(AnsibleFilterError, match=r"parse_startup_log: _input must be the log text or a list of lines"):
        parse_plugin.parse_startup_log(bad)


def test_diff_filter_argument_order():
    baseline = parse_startup_log(BASELINE_LOG.read_text(encoding="utf-8"))
    trial = parse_startup_log(TRIAL_LOG.read_text(encoding="utf-8"))
    diff = diff_plugin.server_args_diff(trial, baseline, {"enable_flashinfer_allreduce_fusion": True})
    assert diff["summary_lines"] == DEMO_LINES


@pytest.mark.parametrize(
    ("arguments", "name", "type_name"),
    [
        (("log text", {}), "_input", "str"),
        (({}, None), "baseline_facts", "NoneType"),
        (({}, {}, ["enable_flashinfer_allreduce_fusion"]), "candidate_requested", "list"),
        (({}, {}, {}, "tp_size=4"), "baseline_requested", "str"),
    ],
)
def test_diff_filter_names_the_bad_argument(arguments, name, type_name):
    with pytest.raises(AnsibleFilterError, match=rf"server_args_diff: {name} must be a dict, got {type_name}"):
        diff_plugin.server_args_diff(*arguments)


@pytest.mark.parametrize(("plugin", "name", "options"), [
    (parse_plugin, "parse_startup_log", ["_input"]),
    (diff_plugin, "server_args_diff", ["_input", "baseline_facts", "candidate_requested", "baseline_requested"]),
])
def test_filter_docs(plugin, name, options):
    doc = yaml.safe_load(plugin.DOCUMENTATION)
    assert doc["name"] == name
    assert doc["short_description"]
    assert str(doc["version_added"]) == "1.0.0"  # the first release
    assert list(doc["options"]) == options
    assert doc["options"]["_input"]["required"] is True
    assert yaml.safe_load(plugin.RETURN)["_value"]["type"] == "dict"
    examples = yaml.safe_load(plugin.EXAMPLES)
    assert any(f"llmops.sglang.{name}" in json.dumps(task) for task in examples)


def _ansible_env(tmp_path: Path) -> dict[str, str]:
    """Run Ansible from this checkout with every state directory inside tmp_path."""
    return {
        **os.environ,
        "ANSIBLE_CONFIG": str(REPO / "ansible.cfg"),
        "HOME": str(tmp_path),
        "ANSIBLE_LOCAL_TEMP": str(tmp_path / "local-tmp"),
        "ANSIBLE_REMOTE_TEMP": str(tmp_path / "remote-tmp"),
        "ANSIBLE_NOCOLOR": "1",
    }


def _ansible_command(name: str) -> str:
    return str(Path(sys.executable).parent / name)


@pytest.mark.parametrize("name", ["parse_startup_log", "server_args_diff"])
def test_ansible_doc_renders_the_filter_docs(tmp_path, name):
    result = subprocess.run(
        [_ansible_command("ansible-doc"), "-t", "filter", f"llmops.sglang.{name}"],
        cwd=REPO, env=_ansible_env(tmp_path), capture_output=True, text=True, timeout=120, check=False,
    )
    assert result.returncode == 0 and "ERROR" not in result.stderr, result.stderr
    assert f"llmops.sglang.{name}" in result.stdout
    assert "RETURN VALUES" in result.stdout


PLAYBOOK = """\
- name: Parse two startup logs and diff them with the collection's filters
  hosts: localhost
  gather_facts: false
  tasks:
    - name: Parse
      ansible.builtin.set_fact:
        baseline_facts: "{{ lookup('ansible.builtin.file', baseline_log, rstrip=false) | llmops.sglang.parse_startup_log }}"
        trial_facts: "{{ (lookup('ansible.builtin.file', trial_log, rstrip=false) | split('\\n')) | llmops.sglang.parse_startup_log }}"

    - name: Diff and write the result
      ansible.builtin.copy:
        content: >-
          {{ {'trial': trial_facts | dict2items | rejectattr('key', 'eq', 'server_args') | items2dict,
              'diff': trial_facts | llmops.sglang.server_args_diff(baseline_facts,
                                                                  {'enable_flashinfer_allreduce_fusion': true})} | to_json }}
        dest: "{{ out }}"
        mode: "0644"
"""


def test_filters_in_a_real_playbook(tmp_path):
    playbook = tmp_path / "diff.yml"
    playbook.write_text(PLAYBOOK, encoding="utf-8")
    out = tmp_path / "diff.json"
    command = [
        _ansible_command("ansible-playbook"), str(playbook), "-i", "localhost,", "-c", "local",
        "-e", json.dumps({"baseline_log": str(BASELINE_LOG), "trial_log": str(TRIAL_LOG), "out": str(out),
                          "ansible_python_interpreter": sys.executable}),
    ]
    result = subprocess.run(
        command, cwd=REPO, env=_ansible_env(tmp_path), capture_output=True, text=True, timeout=300, check=False
    )
    assert result.returncode == 0, result.stdout + result.stderr
    written = json.loads(out.read_text(encoding="utf-8"))
    assert written["diff"]["summary_lines"] == DEMO_LINES
    assert written["trial"]["max_running_requests"] == 26
    assert written["trial"]["ready"] is True
