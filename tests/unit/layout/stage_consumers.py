# Copyright (c) llmops.sglang contributors
# Apache License 2.0 (see LICENSE)
"""Every file that names the stages but cannot import the stage registry (plugins/module_utils/stages.py), checked
against it: ``disagreements(root, stages)`` lists, per file, what differs from what the registry says.

The static consumers are YAML that Ansible reads before any filter runs (tune.yml's import_playbook list, role
argument_specs and defaults), AWX data applied as it is, and the docs. scripts/stage_files.py writes them from the
registry; this check reads what they mean (the workflow's success path and approvals, the surveys' force question),
so it also holds the generator to the registry. tune.yml and the docs' stage lists are compared with what the
generator renders, so a disagreement message is the fix.
"""
from __future__ import annotations

import json
import re
import typing as t
from pathlib import Path

import yaml

from scripts.stage_files import DOC_LISTS, doc_list, expected_doc_list, tune_playbook


def _success_path(nodes: list[dict]) -> list[str]:
    """The job templates along the success links from the first node (approvals approved)."""
    by_id = {node["identifier"]: node for node in nodes}
    path, node = [], nodes[0]
    while node is not None:
        if "job_template" in node:
            path.append(node["job_template"])
        following = node.get("success_nodes") or node.get("always_nodes") or []
        node = by_id.get(following[0]) if following else None
        if node is not None and node.get("job_template") in path:
            break
    return path


def _approved_by(nodes: list[dict], identifier: str) -> bool:
    """Whether every link into node ``identifier`` comes from an approval."""
    links = [node for node in nodes for link in ("success_nodes", "failure_nodes", "always_nodes")
             if identifier in node.get(link, [])]
    return bool(links) and all("approval" in node for node in links)


def disagreements(root: Path, stages: t.Sequence[t.Any]) -> list[str]:
    """What each static consumer under ``root`` says differently from ``stages`` (the registry's STAGES)."""
    problems: list[str] = []
    names = [s.name for s in stages]
    routine = [s.name for s in stages if s.routine]
    default = [s.name for s in stages if s.routine and s.selected_by_default]
    recorded = [s.name for s in stages if s.records]

    tune = (root / "playbooks" / "tune.yml").read_text()
    if tune != tune_playbook(stages):
        problems.append(f"playbooks/tune.yml: must be, from the registry:\n{tune_playbook(stages)}")

    for stage in stages:
        playbook = root / stage.playbook
        if not playbook.is_file():
            problems.append(f"{stage.playbook}: missing (stage {stage.name} of the registry)")
            continue
        for play in yaml.safe_load(playbook.read_text()):
            if play.get("tags") != [stage.name]:
                problems.append(f"{stage.playbook}: play {play.get('name')!r} must carry tags: [{stage.name}]")
            if play.get("vars", {}).get("tuning_run_stage", stage.name) != stage.name:
                problems.append(f"{stage.playbook}: play {play.get('name')!r} sets tuning_run_stage to "
                                f"{play['vars']['tuning_run_stage']!r}, not {stage.name!r}")
    for playbook in sorted((root / "playbooks").glob("*.yml")):
        declared = re.search(r"^\s+tuning_run_stage: (\S+)", playbook.read_text(), re.MULTILINE)
        if declared and declared.group(1) not in names:
            problems.append(f"playbooks/{playbook.name}: stage {declared.group(1)!r} is not in the registry")

    defaults = (root / "roles/tuning_run/defaults/main.yml").read_text()
    default_stages = re.search(r"^tuning_run_stages: .*default\((\[[^]]*\])\)", defaults, re.MULTILINE)
    if default_stages is None or yaml.safe_load(default_stages.group(1)) != default:
        problems.append(f"roles/tuning_run/defaults/main.yml: tuning_run_stages must default to {default} (the "
                        "routine's stages selected by default)")
    specs = yaml.safe_load((root / "roles/tuning_run/meta/argument_specs.yml").read_text())["argument_specs"]
    if specs["main"]["options"]["tuning_run_stages"]["default"] != default:
        problems.append(f"roles/tuning_run/meta/argument_specs.yml: main.tuning_run_stages.default must be {default}")
    if specs["stage"]["options"]["tuning_run_stage"]["choices"] != recorded:
        problems.append(f"roles/tuning_run/meta/argument_specs.yml: stage.tuning_run_stage.choices must be {recorded} "
                        "(the stages that begin with stage.yml and record their end)")

    awx = root / "extensions" / "awx"
    templates = yaml.safe_load((awx / "job_templates.yml").read_text())["llmops_awx_job_templates"]
    expected = [{"name": s.awx_job_template, "stage": s.name, "playbook": s.playbook, "survey": s.awx_survey}
                for s in stages]
    if templates != expected:
        problems.append(f"extensions/awx/job_templates.yml: llmops_awx_job_templates must be {expected}")
    for stage in stages:
        survey = awx / stage.awx_survey
        if not survey.is_file():
            problems.append(f"extensions/awx/{stage.awx_survey}: missing (stage {stage.name} of the registry)")
            continue
        force = [q for q in json.loads(survey.read_text())["spec"] if q["variable"] == "force"]
        if stage.forceable != bool(force) or (force and force[0].get("choices") != [stage.name]):
            problems.append(f"extensions/awx/{stage.awx_survey}: "
                            + (f"needs the force question with choices [{stage.name}]" if stage.forceable
                               else f"must not ask for force (stage {stage.name} is not forceable)"))
    nodes = yaml.safe_load((awx / "workflow.yml").read_text())["llmops_awx_workflow"]["nodes"]
    path = _success_path(nodes)
    if path != [s.awx_job_template for s in stages if s.workflow]:
        problems.append(f"extensions/awx/workflow.yml: the success path runs {path}, the registry's workflow stages "
                        f"are {[s.awx_job_template for s in stages if s.workflow]}")
    for stage in stages:
        node = next((n for n in nodes if n.get("job_template") == stage.awx_job_template), None)
        if node is not None and stage.stops_servers and not _approved_by(nodes, node["identifier"]):
            problems.append(f"extensions/awx/workflow.yml: {stage.name} stops the servers; only an approval may lead "
                            "to it")

    for name, pattern, kind in DOC_LISTS:
        match = re.search(pattern, (root / name).read_text())
        want = expected_doc_list(stages, kind)
        if match is None or doc_list(match.group(1), kind) != want:
            problems.append(f"{name}: must list the stages as {want} (where it matches {pattern!r})")
    return problems
