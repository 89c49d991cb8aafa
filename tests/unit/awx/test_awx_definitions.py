# Copyright (c) llmops.sglang contributors
# Apache License 2.0 (see LICENSE)
"""extensions/awx: surveys valid by AWX's rules and wired to what the stages consume, the workflow graph,
awx_configure.yml, and the execution environment definition."""
from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from ansible.errors import AnsibleFilterError

from ansible_collections.llmops.sglang.plugins.filter.awx_workflow_nodes import awx_workflow_nodes
from ansible_collections.llmops.sglang.plugins.plugin_utils.awx_workflow import find_cycle, paths_to, workflow_errors

REPO = Path(__file__).resolve().parents[3]
AWX = REPO / "extensions" / "awx"
TEMPLATES = yaml.safe_load((AWX / "job_templates.yml").read_text())
WORKFLOW = yaml.safe_load((AWX / "workflow.yml").read_text())["llmops_awx_workflow"]
# awx/main/constants.py SURVEY_TYPE_MAPPING
SURVEY_TYPES = {"text": str, "textarea": str, "password": str, "multiplechoice": str, "multiselect": str,
                "integer": int, "float": (int, float)}
STAGE_SOURCES = [REPO / "roles" / "tuning_run" / "defaults" / "main.yml", *(REPO / "roles" / "tuning_run" / "tasks").glob("*.yml")]


def survey_errors(survey: dict) -> list[str]:
    """The checks of awx/api/views/__init__.py::_validate_spec_data."""
    errors = [f"top-level {key!r} missing" for key in ("name", "description", "spec") if key not in survey]
    spec = survey.get("spec")
    if not isinstance(spec, list) or not spec:
        return errors + ["spec must be a non-empty list"]
    variables = [question.get("variable") for question in spec]
    errors += [f"variable {v!r} repeated" for v in sorted({v for v in variables if variables.count(v) > 1})]
    for index, question in enumerate(spec):
        where = f"spec[{index}]"
        errors += [f"{where}: {key!r} missing" for key in ("type", "question_name", "variable", "required") if key not in question]
        kind = question.get("type")
        if kind not in SURVEY_TYPES:
            errors.append(f"{where}: type {kind!r} invalid")
            continue
        if not isinstance(question.get("required"), bool):
            errors.append(f"{where}: required must be a boolean")
        for bound in ("min", "max"):
            if bound in question and not isinstance(question[bound], int):
                errors.append(f"{where}: {bound} must be an integer")
        default = question.get("default")
        if kind in ("multiplechoice", "multiselect"):
            choices = question.get("choices")
            choices = choices.split("\n") if isinstance(choices, str) else choices
            if not choices:
                errors.append(f"{where}: {kind} needs choices")
            elif default not in (None, ""):
                picked = default.split("\n") if isinstance(default, str) else default
                if kind == "multiplechoice" and len(picked) != 1 or any(p not in choices for p in picked):
                    errors.append(f"{where}: default {default!r} not among the choices")
        elif default not in (None, "") and not isinstance(default, SURVEY_TYPES[kind]):
            errors.append(f"{where}: default {default!r} does not match type {kind}")
    return errors


def stage_text(template: dict) -> str:
    return "\n".join(path.read_text() for path in [REPO / template["playbook"], *STAGE_SOURCES])


@pytest.mark.parametrize("template", TEMPLATES["llmops_awx_job_templates"], ids=lambda t: t["stage"])
def test_survey_is_valid_by_awx_rules(template):
    survey = json.loads((AWX / template["survey"]).read_text())
    assert survey_errors(survey) == []


def test_the_validator_catches_what_awx_rejects():
    bad = {"name": "x", "description": "", "spec": [
        {"type": "integer", "question_name": "n", "variable": "n", "required": True, "default": "3"},
        {"type": "multiplechoice", "question_name": "c", "variable": "c", "required": False, "choices": ["a"], "default": "b"},
        {"type": "dropdown", "question_name": "d", "variable": "n", "required": "yes"}]}
    errors = survey_errors(bad)
    assert "spec[0]: default '3' does not match type integer" in errors
    assert "spec[1]: default 'b' not among the choices" in errors
    assert "spec[2]: type 'dropdown' invalid" in errors and "variable 'n' repeated" in errors


@pytest.mark.parametrize("template", TEMPLATES["llmops_awx_job_templates"], ids=lambda t: t["stage"])
def test_every_survey_variable_is_consumed_by_the_stage(template):
    text = stage_text(template)
    survey = json.loads((AWX / template["survey"]).read_text())
    for question in survey["spec"]:
        assert re.search(rf"\b{question['variable']}\b", text), f"{question['variable']} is not used by {template['playbook']}"
        if question["type"] == "multiselect":
            assert question["choices"] == [template["stage"]], "force may only name the template's own stage"


@pytest.mark.parametrize("template", TEMPLATES["llmops_awx_job_templates"], ids=lambda t: t["stage"])
def test_every_inventory_input_of_a_stage_is_documented(template):
    documented = set(re.findall(r"^\| `([a-z_]+)`", (AWX / "README.md").read_text(), re.MULTILINE))
    documented |= set(re.findall(r"`(tuning_run_[a-z]+)`", (AWX / "README.md").read_text()))
    # variables read by the playbook: not module names (llmops.sglang.sglang_env_facts), not mapping keys
    used = set(re.findall(r"(?<![./\w])(sglang_[a-z_]+)\b(?!:)", (REPO / template["playbook"]).read_text()))
    used = {name for name in used if not name.startswith("sglang_server")}  # the role's own inputs, set by the stage
    assert used - documented == set(), f"{template['playbook']} needs inventory variables the AWX docs do not list"


def test_job_templates_point_at_existing_stage_playbooks():
    for template in TEMPLATES["llmops_awx_job_templates"]:
        playbook = yaml.safe_load((REPO / template["playbook"]).read_text())
        assert isinstance(playbook, list) and all(
            {"hosts", "import_playbook", "ansible.builtin.import_playbook"} & set(play) for play in playbook)
    names = {t["name"] for t in TEMPLATES["llmops_awx_job_templates"]}
    assert {n["job_template"] for n in WORKFLOW["nodes"] if "job_template" in n} <= names


def test_workflow_is_acyclic_and_reaches_the_moe_stage_only_through_the_approval():
    nodes = WORKFLOW["nodes"]
    assert workflow_errors(nodes) == [] and find_cycle(nodes) == []
    paths = paths_to(nodes, "moe_tune")
    assert paths and all("approve_moe_tune" in path for path in paths)
    approval = next(n for n in nodes if n["identifier"] == "approve_moe_tune")
    assert approval["approval"]["timeout"] > 0 and approval["failure_nodes"] == ["verify"]
    assert all(paths_to(nodes, "report")), "every branch must be able to end in the report"


def test_filter_rejects_a_cycle_and_converts_approvals():
    cyclic = [{"identifier": "a", "job_template": "A", "success_nodes": ["b"]},
              {"identifier": "b", "job_template": "B", "success_nodes": ["a"]}]
    with pytest.raises(AnsibleFilterError, match="cycle: a -> b -> a"):
        awx_workflow_nodes(cyclic, organization="Default")
    converted = {n["identifier"]: n for n in awx_workflow_nodes(WORKFLOW["nodes"], organization="Default")}
    assert converted["approve_moe_tune"]["unified_job_template"]["type"] == "workflow_approval"
    assert converted["flags"]["related"]["success_nodes"] == [{"identifier": "search"}]
    assert converted["search"]["related"]["success_nodes"] == [{"identifier": "approve_moe_tune"}]
    assert converted["flags"]["unified_job_template"] == {"type": "job_template", "name": "llmops-sglang flags",
                                                         "organization": {"name": "Default"}}


def _ansible(*argv: str, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run([str(Path(sys.executable).parent / argv[0]), *argv[1:]], cwd=REPO, capture_output=True, text=True,
                          env={"PATH": f"{Path(sys.executable).parent}:/usr/bin:/bin", "ANSIBLE_CONFIG": str(REPO / "ansible.cfg"),
                               "HOME": str(REPO / ".cache"), **env})


def test_awx_configure_playbook_parses_with_the_awx_collection():
    result = _ansible("ansible-playbook", "--syntax-check", "playbooks/awx_configure.yml", "-i", "localhost,")
    assert result.returncode == 0, result.stderr


# No controller listens there: with awx.awx installed the playbook gets as far as the first AWX object.
NO_CONTROLLER = {"CONTROLLER_HOST": "http://127.0.0.1:9", "CONTROLLER_OAUTH_TOKEN": "unused"}
MISSING = "playbooks/awx_configure.yml needs the awx.awx collection, an optional dependency of llmops.sglang"


def test_awx_configure_without_awx_awx_fails_first_naming_how_to_install_it():
    """awx.awx is optional (issue #39 item 2); without it Ansible stopped while loading the playbook with
    "couldn't resolve module/action 'awx.awx.project'". Here it is on no collections path the playbook searches."""
    result = _ansible("ansible-playbook", "playbooks/awx_configure.yml", "-i", "localhost,", **NO_CONTROLLER,
                      ANSIBLE_COLLECTIONS_SCAN_SYS_PATH="false")
    assert result.returncode == 2, result.stdout + result.stderr
    assert MISSING in result.stdout + result.stderr
    assert "`ansible-galaxy collection install awx.awx`" in result.stdout + result.stderr
    assert "Project of this repository" not in result.stdout


def awx_collection() -> Path | None:
    """awx.awx where this Python's ansible finds it: the `ansible` package bundles it up to 13.x (ansible-core 2.20)."""
    import ansible_collections  # noqa: PLC0415 - the collection loader's namespace, as ansible-playbook searches it
    return next((path / "awx" / "awx" for path in map(Path, ansible_collections.__path__)
                 if (path / "awx" / "awx" / "MANIFEST.json").is_file()), None)


@pytest.mark.skipif(awx_collection() is None, reason="awx.awx is not installed (the `ansible` package of ansible-core "
                                                     "2.21 no longer bundles it; the 2.19 venv runs this)")
def test_awx_configure_with_awx_awx_goes_on_to_the_awx_objects():
    result = _ansible("ansible-playbook", "playbooks/awx_configure.yml", "-i", "localhost,", **NO_CONTROLLER)
    assert MISSING not in result.stdout + result.stderr
    assert "TASK [Project of this repository]" in result.stdout, result.stdout + result.stderr


def _ee_context(context: Path, venv: Path) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", str(REPO / "scripts" / "ee.sh"), str(context)], capture_output=True, text=True,
                          env={"PATH": "/usr/bin:/bin", "HOME": str(context.parent), "VENV": str(venv)})


def test_make_ee_gives_a_build_context_with_the_built_collection(tmp_path):
    """`make ee` (scripts/ee.sh): the tarball `ansible-galaxy collection build` makes (of galaxy.yml's version) is
    built first and copied into the context, which is checked (ansible-builder alone says "Complete!" without it)."""
    result = _ee_context(tmp_path / "context", Path(sys.executable).parent.parent)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "No matches" not in result.stdout + result.stderr
    build = tmp_path / "context" / "_build"
    version = yaml.safe_load((REPO / "galaxy.yml").read_text())["version"]
    tarball = f"collections/llmops-sglang-{version}.tar.gz"
    assert (build / tarball).read_bytes() == (REPO / "dist" / Path(tarball).name).read_bytes()
    collections = yaml.safe_load((build / "requirements.yml").read_text())["collections"]
    assert {"name": tarball, "type": "file"} in collections and "awx.awx" in [c["name"] for c in collections]
    assert "matplotlib==3.10.9" in (build / "requirements.txt").read_text()
    assert "ansible-core==2.19.14" in (tmp_path / "context" / "Dockerfile").read_text()


def test_make_ee_fails_where_the_context_lacks_the_collection(tmp_path):
    """A build whose tarball never reaches the context (here: ansible-galaxy builds nothing) is an error naming the
    missing file, not "Complete!"."""
    venv, real = tmp_path / "venv", Path(sys.prefix)
    (venv / "bin").mkdir(parents=True)
    # The test venv seen through another prefix: its config and packages, its python and ansible-builder.
    for path in ("pyvenv.cfg", "lib", "bin/python", "bin/ansible-builder"):
        (venv / path).symlink_to(real / path)
    (venv / "bin" / "ansible-galaxy").write_text("#!/bin/sh\nexit 0\n")
    (venv / "bin" / "ansible-galaxy").chmod(0o755)
    result = _ee_context(tmp_path / "context", venv)
    assert result.returncode == 1
    assert "_build/collections/llmops-sglang-" in result.stderr and "is missing" in result.stderr
