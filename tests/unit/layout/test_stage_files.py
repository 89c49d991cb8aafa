# Copyright (c) llmops.sglang contributors
# Apache License 2.0 (see LICENSE)
"""scripts/stage_files.py writes every static file that names the stages from the registry, so a new stage is its
playbook, its logic in Python and one registry entry: every consumer then knows it, and the role runs it by default
or only when selected, as the registry says (issue 41 item 2)."""
from __future__ import annotations

import dataclasses
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import yaml

from ansible_collections.llmops.sglang.plugins.module_utils import stages
from scripts.stage_files import load_stages, stale_files, workflow_nodes
from tests.unit.layout.stage_consumers import disagreements
from tests.unit.layout.test_stage_registry import REPO, _copy_collection

GENERATOR = REPO / "scripts" / "stage_files.py"
# What naming a stage in the registry makes the generator write: the static consumers.
CONSUMERS = {"playbooks/tune.yml", "roles/tuning_run/defaults/main.yml", "roles/tuning_run/meta/argument_specs.yml",
             "extensions/awx/job_templates.yml", "extensions/awx/workflow.yml", "extensions/awx/README.md",
             "README.md", "docs/api-cli.md", "docs/design.md", "roles/tuning_run/README.md"}
INVENTORY = ('[sglang_hosts]\ngpu1 ansible_connection=local '
             'ansible_python_interpreter="{{ ansible_playbook_python }}"\n')


def _generate(root: Path, *options: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(GENERATOR), "--root", str(root), *options], capture_output=True,
                          text=True, check=False)


def test_the_files_that_name_the_stages_are_as_the_registry_writes_them():
    generated = _generate(REPO, "--check")
    assert (generated.returncode, generated.stderr) == (0, "")


def _add_stage(copy: Path, name: str, *, selected_by_default: bool) -> set[str]:
    """What a new stage takes, written as its author would: a playbook that runs it through the tuning_run role, its
    logic in Python (a filter the playbook calls), one registry entry after the flags stage. Returns those files."""
    title = name.capitalize()
    playbook = f"""---
- name: {title} - what the run was given for the {name} stage, recorded
  hosts: sglang_hosts
  gather_facts: false
  tags: [{name}]
  vars:
    tuning_run_stage: {name}
  tasks:
    - name: Enter the run and begin the stage
      ansible.builtin.import_role:
        name: llmops.sglang.tuning_run
        tasks_from: stage.yml

    - name: Work out what the stage records
      ansible.builtin.set_fact:
        tuning_run_stage_details: "{{{{ tuning_run_{name} | default(none) | llmops.sglang.{name}_details }}}}"

    - name: Finish the stage
      ansible.builtin.import_role:
        name: llmops.sglang.tuning_run
        tasks_from: finish.yml
"""
    logic = f"""def details(inputs):
    return {{"inputs": inputs}}


class FilterModule:
    def filters(self):
        return {{"{name}_details": details}}
"""
    entry = (f'    Stage("{name}", "{title}", routine=True, records=True, adopts=False, reads_adopted=False, '
             f'guarded=False,\n          stops_servers=False, selected_by_default={selected_by_default}),\n')
    (copy / "playbooks" / f"{name}.yml").write_text(playbook)
    (copy / "plugins" / "filter" / f"{name}.py").write_text(logic)
    registry = copy / "plugins" / "module_utils" / "stages.py"
    text = registry.read_text()
    after_flags = re.search(r'    Stage\("flags".*?\),\n', text, re.DOTALL).end()
    registry.write_text(text[:after_flags] + entry + text[after_flags:])
    return {f"playbooks/{name}.yml", f"plugins/filter/{name}.py", "plugins/module_utils/stages.py"}


def _contents(root: Path) -> dict[str, bytes]:
    return {str(path.relative_to(root)): path.read_bytes() for path in root.rglob("*") if path.is_file()}


def _tune(copy: Path, tmp_path: Path, run_id: str, *extravars: str) -> Path:
    """playbooks/tune.yml of the copy with only the new stages' plays (--tags) on a controller-local host; the run."""
    env = {**os.environ, "ANSIBLE_COLLECTIONS_PATH": str(copy.parents[2])}
    runs = tmp_path / "runs"
    args = ["-e", f"tuning_run_root={runs}", "-e", f"run_id={run_id}", *(a for e in extravars for a in ("-e", e))]
    played = subprocess.run([str(Path(sys.executable).parent / "ansible-playbook"), "-i", str(tmp_path / "hosts.ini"),
                             str(copy / "playbooks" / "tune.yml"), "--tags", "canary,shadow", *args],
                            cwd=tmp_path, env=env, capture_output=True, text=True, check=False)
    assert played.returncode == 0, played.stdout + played.stderr
    return runs / run_id


def test_a_new_stage_is_its_playbook_its_python_and_one_registry_entry(tmp_path):
    copy = _copy_collection(tmp_path / "colls")
    before = _contents(copy)
    hand_written = (_add_stage(copy, "canary", selected_by_default=True)
                    | _add_stage(copy, "shadow", selected_by_default=False))

    stale = _generate(copy, "--check")
    named = set(re.findall(r"^(\S+): stale", stale.stderr, re.MULTILINE))
    surveys = {"extensions/awx/surveys/canary.json", "extensions/awx/surveys/shadow.json"}
    assert stale.returncode == 1 and named == CONSUMERS | surveys
    assert _generate(copy).returncode == 0
    changed = {name for name, content in _contents(copy).items() if before.get(name) != content}
    assert changed == hand_written | named, "only the generator wrote what else knows the stages"

    registry = load_stages(copy)
    assert disagreements(copy, registry) == [], "every static consumer agrees with the registry"
    assert stale_files(copy, registry) == {}
    tune = (copy / "playbooks" / "tune.yml").read_text()
    assert "import_playbook: flags.yml\n\n- name: Shadow\n  ansible.builtin.import_playbook: shadow.yml\n\n" \
           "- name: Canary\n  ansible.builtin.import_playbook: canary.yml\n\n- name: Search" in tune
    specs = yaml.safe_load((copy / "roles/tuning_run/meta/argument_specs.yml").read_text())["argument_specs"]
    assert specs["main"]["options"]["tuning_run_stages"]["default"] == [
        "preflight", "baseline", "flags", "canary", "moe_tune", "verify", "report"]
    assert "shadow" in specs["stage"]["options"]["tuning_run_stage"]["choices"]
    shadow_survey = json.loads((copy / "extensions/awx/surveys/shadow.json").read_text())
    assert shadow_survey["description"] == "What the run was given for the shadow stage, recorded."
    assert [q["variable"] for q in shadow_survey["spec"]] == ["run_id", "tuning_run_root", "force"]
    assert [q for q in shadow_survey["spec"] if q["variable"] == "force"][0]["choices"] == ["shadow"]
    workflow = yaml.safe_load((copy / "extensions/awx/workflow.yml").read_text())["llmops_awx_workflow"]
    assert workflow["description"].startswith("preflight -> baseline -> flags -> shadow -> canary -> search ->")

    # The role: the default stage runs in a run without -e stages, the other one only once its inputs are set.
    (tmp_path / "hosts.ini").write_text(INVENTORY)
    plain = _tune(copy, tmp_path, "plain")
    assert (plain / "canary" / "gpu1" / "stage.json").is_file()
    assert not (plain / "shadow").exists()
    given = _tune(copy, tmp_path, "given", '{"tuning_run_shadow": {"mirror": 0.1}}')
    assert json.loads((given / "shadow" / "gpu1" / "stage.json").read_text())["inputs"] == {"mirror": 0.1}


def test_a_second_stage_that_stops_the_servers_gets_an_approval_made_from_the_registry():
    drain = stages.Stage("drain", "Draining", routine=True, records=True, adopts=False, reads_adopted=False,
                         guarded=True, stops_servers=True)
    registry = (*stages.STAGES[:-3], drain, *stages.STAGES[-3:])  # before rollout, the report and the upgrade
    kept = {"name": "Stop the servers for MoE tuning?", "description": "Worded by hand.", "timeout": 60}
    nodes = {node["identifier"]: node for node in workflow_nodes(registry, {"moe_tune": kept})}
    assert nodes["approve_moe_tune"] == {"identifier": "approve_moe_tune", "approval": kept,
                                         "success_nodes": ["moe_tune"], "failure_nodes": ["verify"]}
    assert nodes["verify"]["success_nodes"] == ["approve_drain"]
    assert nodes["approve_drain"]["approval"]["name"] == "Stop the servers for Draining?"
    assert (nodes["approve_drain"]["success_nodes"], nodes["approve_drain"]["failure_nodes"]) == (["drain"],
                                                                                                  ["rollout"])
    assert nodes["rollout"] == {"identifier": "rollout", "job_template": "llmops-sglang rollout",
                                "always_nodes": ["report"]}


def test_a_stage_that_can_no_longer_be_forced_loses_its_force_question(tmp_path):
    copy = _copy_collection(tmp_path / "colls")
    registry = tuple(dataclasses.replace(s, records=False) if s.name == "verify" else s for s in stages.STAGES)
    survey = json.loads(stale_files(copy, registry)["extensions/awx/surveys/verify.json"])
    assert "force" not in [q["variable"] for q in survey["spec"]]
