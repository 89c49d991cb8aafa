# Copyright (c) llmops.sglang contributors
# Apache License 2.0 (see LICENSE)
"""The stage registry is the one declaration of the stages: every consumer agrees with it, and a stage added to it
alone reaches the API, the CLI, the run-input checks, the report and the role, while every static file that must
name it says so."""
from __future__ import annotations

import dataclasses
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from ansible.errors import AnsibleFilterError

from ansible_collections.llmops.sglang.plugins.filter.stage import stage as stage_filter
from ansible_collections.llmops.sglang.plugins.filter.stage_names import DOCUMENTATION as STAGE_NAMES_DOC
from ansible_collections.llmops.sglang.plugins.filter.stage_names import stage_names
from ansible_collections.llmops.sglang.plugins.filter.stage import RETURN as STAGE_RETURN
from ansible_collections.llmops.sglang.plugins.module_utils import stages
from tests.unit.layout.stage_consumers import disagreements

REPO = Path(__file__).resolve().parents[3]
# A stage that tunes something between the flags and the MoE stage, declared as a new stage would be.
CANARY = ('    Stage("canary", "Canary", routine=True, records=True, adopts=True, reads_adopted=True, guarded=True,\n'
          '          stops_servers=False),\n')


def test_every_consumer_agrees_with_the_registry():
    assert disagreements(REPO, stages.STAGES) == []


def test_a_consumer_that_disagrees_is_named():
    reordered = (stages.STAGES[1], stages.STAGES[0], *stages.STAGES[2:])
    found = "\n".join(disagreements(REPO, reordered))
    for consumer in ("playbooks/tune.yml", "tuning_run/defaults/main.yml", "argument_specs.yml", "job_templates.yml",
                     "workflow.yml: the success path", "docs/api-cli.md", "README.md", "docs/design.md"):
        assert consumer in found
    unforceable = tuple(dataclasses.replace(s, records=False) if s.name == "verify" else s for s in stages.STAGES)
    assert "surveys/verify.json: must not ask for force" in "\n".join(disagreements(REPO, unforceable))


def test_the_derived_lists_are_the_pipelines():
    assert stages.ROUTINE == ("preflight", "baseline", "flags", "search", "moe_tune", "verify", "report")
    # the search runs only when selected: a run's default stages are the routine without it
    assert stages.DEFAULT == ("preflight", "baseline", "flags", "moe_tune", "verify", "report")
    assert stages.OPT_IN == ("search",)
    assert stages.RECORDED == stages.FORCEABLE == ("preflight", "baseline", "flags", "search", "moe_tune", "verify")
    assert stages.names(stops_servers=True) == ("moe_tune",)
    # the stages whose adopted.json a stage starts from, most recent first (roles/tuning_run/tasks/stage.yml)
    assert stages.adopted_from("baseline") == ()
    assert stages.adopted_from("moe_tune") == ("search", "flags", "baseline")
    assert stages.adopted_from("rollout") == stages.adopted_from("preflight") == ("verify", "moe_tune", "search",
                                                                                  "flags", "baseline")
    with pytest.raises(ValueError, match="unknown stage 'warmup'; stages are preflight, baseline"):
        stages.get("warmup")


def test_the_filters_document_what_they_return():
    documented = yaml.safe_load(STAGE_RETURN)["_value"]["contains"]
    assert set(documented) == set(stage_filter("flags"))
    options = yaml.safe_load(STAGE_NAMES_DOC)["options"]
    assert options["_input"]["choices"] == options["without"]["choices"] == list(stages.PROPERTIES)


def test_stage_names_gives_the_stages_with_a_property_and_without_another():
    assert stage_names("forceable") == list(stages.FORCEABLE)
    # the role's opt-in stages (roles/tuning_run/tasks/main.yml)
    assert stage_names("routine", without="selected_by_default") == list(stages.OPT_IN)
    assert stage_names("routine", without="routine") == []
    with pytest.raises(AnsibleFilterError, match="'warm' is not a stage property; properties are routine, records"):
        stage_names("routine", without="warm")


def _copy_collection(destination: Path) -> Path:
    """The collection's content (what `ansible-galaxy collection build` ships and the docs) in a fresh tree, on a
    collections path of its own."""
    copy = destination / "ansible_collections" / "llmops" / "sglang"
    for name in ("plugins", "playbooks", "roles", "extensions", "meta", "docs"):
        shutil.copytree(REPO / name, copy / name, ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("galaxy.yml", "README.md"):
        shutil.copy(REPO / name, copy / name)
    return copy


PROBE = r"""
import json, sys
from pathlib import Path
from ansible_collections.llmops.sglang.plugins.module_utils import stages, run_inputs
from ansible_collections.llmops.sglang.plugins.plugin_utils import run_report
from ansible_collections.llmops.sglang.plugins.filter.stage import stage
from llmops_sglang import api, collection
from tests.unit.layout.stage_consumers import disagreements
from scripts.stage_files import tune_playbook, workflow_text
found = collection.find_collection()
print(json.dumps({
    "collection": str(found.path), "api": list(collection.stages()), "playbook": api.playbook_for("canary", found),
    "inputs": list(run_inputs.STAGES), "forceable": list(run_inputs.FORCEABLE_STAGES),
    "report": list(run_report.STAGES),
    "role": stage("canary"), "moe_tune_from": stage("moe_tune")["adopted_from"],
    "tune": tune_playbook(stages.STAGES), "workflow": workflow_text(stages.STAGES),
    "disagreements": disagreements(Path(sys.argv[1]), stages.STAGES)}))
"""


def test_a_stage_added_to_the_registry_alone_reaches_every_consumer(tmp_path):
    copy = _copy_collection(tmp_path / "colls")
    registry = copy / "plugins" / "module_utils" / "stages.py"
    text = registry.read_text()
    after_flags = re.search(r'    Stage\("flags".*?\),\n', text, re.DOTALL).end()
    registry.write_text(text[:after_flags] + CANARY + text[after_flags:])
    colls = str(tmp_path / "colls")
    env = {**os.environ, "PYTHONPATH": f"{colls}:{REPO}", "ANSIBLE_COLLECTIONS_PATH": colls}
    probe = subprocess.run([sys.executable, "-c", PROBE, str(copy)], cwd=tmp_path, env=env, capture_output=True,
                           text=True, check=True)
    seen = json.loads(probe.stdout)
    assert seen["collection"] == str(copy)
    order = ["preflight", "baseline", "flags", "canary", "search", "moe_tune", "verify"]
    assert seen["api"] == seen["inputs"] == [*order, "report"]  # the API, the CLI and -e stages
    assert seen["playbook"] == str(copy / "playbooks" / "canary.yml")
    assert seen["report"] == seen["forceable"] == order
    assert seen["role"]["guarded"] and seen["role"]["adopted_from"] == ["flags", "baseline"]
    assert seen["moe_tune_from"] == ["search", "canary", "flags", "baseline"]
    assert "- name: Flags\n  ansible.builtin.import_playbook: flags.yml\n\n- name: Canary\n  ansible.builtin." \
           "import_playbook: canary.yml\n\n- name: Search" in seen["tune"]
    assert seen["workflow"] == "preflight -> baseline -> flags -> canary -> search -> approval -> moe_tune -> " \
                               "verify -> rollout -> report"
    # the files that cannot import the registry name what they lack, and nothing else disagrees
    named = sorted({problem.split(":", 1)[0] for problem in seen["disagreements"]})
    assert named == ["README.md", "docs/api-cli.md", "docs/design.md", "extensions/awx/README.md",
                     "extensions/awx/job_templates.yml", "extensions/awx/surveys/canary.json",
                     "extensions/awx/workflow.yml", "playbooks/canary.yml", "playbooks/tune.yml",
                     "roles/tuning_run/README.md", "roles/tuning_run/defaults/main.yml",
                     "roles/tuning_run/meta/argument_specs.yml"]

