"""Every AWX job template run the way AWX runs it - its playbook from the project, the collection from the Galaxy
tarball its execution environment installs (extensions/awx, execution-environment.yml), the demo inventory, extra
vars = the survey's defaults plus the set_stats artifacts of the upstream workflow nodes - along the workflow's
approved path. So the routine runs end to end from the installed artifact, not from this checkout."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.integration.ansible import REPO_ROOT, task_paths, write_demo_inventory
from tests.integration.sglang_server import remove_tuned_configs
from tests.integration.test_pipeline import FAST

pytestmark = [pytest.mark.sandbox, pytest.mark.measuring]
HOST = "gpu2"
AWX = REPO_ROOT / "extensions" / "awx"
FUSION = "flashinfer-allreduce-fusion"


def survey_defaults(survey_file: str) -> dict:
    spec = json.loads((AWX / survey_file).read_text())["spec"]
    return {q["variable"]: ([] if q["type"] == "multiselect" else q["default"]) for q in spec}


def approved_path() -> list[str]:
    """Job template names along success links from the first node, approvals passed."""
    nodes = {n["identifier"]: n for n in yaml.safe_load((AWX / "workflow.yml").read_text())["llmops_awx_workflow"]["nodes"]}
    path, node = [], nodes["preflight"]
    while node:
        if "job_template" in node:
            path.append(node["job_template"])
        following = node.get("success_nodes") or node.get("always_nodes") or []
        node = nodes[following[0]] if following else None
    return path


@pytest.fixture(scope="module")
def gpu2(fleet):
    return next(h for h in fleet.hosts() if h.name == HOST)


@pytest.fixture(scope="module")
def ee_collections(tmp_path_factory) -> Path:
    """The collection as the execution environment has it: built with ansible-galaxy, installed from the tarball."""
    tmp = tmp_path_factory.mktemp("ee")
    bin_dir = Path(sys.executable).parent
    env = {"PATH": f"{bin_dir}:/usr/bin:/bin", "HOME": str(tmp), "ANSIBLE_COLLECTIONS_PATH": str(tmp / "collections")}
    subprocess.run([str(bin_dir / "ansible-galaxy"), "collection", "build", "--output-path", str(tmp / "dist"),
                    str(REPO_ROOT)], cwd=tmp, env=env, check=True, capture_output=True, timeout=120)
    tarball = next((tmp / "dist").glob("llmops-sglang-*.tar.gz"))
    subprocess.run([str(bin_dir / "ansible-galaxy"), "collection", "install", "--offline", "-p",
                    str(tmp / "collections"), str(tarball)], cwd=tmp, env=env, check=True, capture_output=True,
                   timeout=120)
    return tmp / "collections"


@pytest.fixture(scope="module")
def awx_inventory(tmp_path_factory, fleet) -> Path:
    """The demo inventory for one host; the fast benchmark settings come from host_vars (an inventory source).

    Of the demo's flag candidates only the forced FlashInfer fusion is tried: its verdict is decisive (capacity
    48 -> 26, a regression at C=64), so the decisions that flow through the workflow's artifacts are known. The other
    candidate's true effect (+0.5%) is a question of measurement noise, which on a shared 2-core machine is not the
    emulator's alone (two busy loops beside it cost the sandbox's closed-loop sweeps ~3.5%); test_pipeline checks its
    verdict, this test the AWX path."""
    host = next(h for h in fleet.hosts() if h.name == HOST)
    directory = write_demo_inventory(tmp_path_factory.mktemp("awx-inventory"), fleet.connection_vars(),
                               {HOST: {"ansible_host": host.address}})
    demo = yaml.safe_load((REPO_ROOT / "inventory" / "group_vars" / "sglang_hosts.yml").read_text())
    candidates = [c for c in demo["sglang_candidate_flag_sets"] if c["name"] == FUSION]
    (directory / "host_vars").mkdir()
    host_vars = {**FAST, "sglang_candidate_flag_sets": candidates}
    (directory / "host_vars" / f"{HOST}.yml").write_text(yaml.safe_dump(host_vars))
    return directory


def test_job_templates_along_the_approved_workflow_path(runner, awx_inventory, ee_collections, tmp_path, fleet, gpu2,
                                                        monkeypatch):
    templates = {t["name"]: t for t in yaml.safe_load((AWX / "job_templates.yml").read_text())["llmops_awx_job_templates"]}
    path = approved_path()
    assert path == [f"llmops-sglang {s}"
                    for s in ("preflight", "baseline", "flags", "search", "moe_tune", "verify", "rollout", "report")]
    artifacts: dict = {}
    # The execution environment's collections path, as its image sets it: llmops.sglang is the installed artifact.
    monkeypatch.setenv("ANSIBLE_COLLECTIONS_PATH", str(ee_collections))
    try:
        for name in path:
            template = templates[name]
            # The survey default for tuning_run_root is a path on the AWX job host; here it must stay in the test's tmp.
            extravars = {**survey_defaults(template["survey"]), **artifacts, "tuning_run_root": str(tmp_path)}
            result = runner.run(REPO_ROOT / template["playbook"], extravars, inventory=awx_inventory)
            assert result.status == "successful", f"{name}: {result.stdout[-4000:]}"
            roles = {task_file for task_file in task_paths(result) if "/roles/" in task_file}
            assert roles and all(task_file.startswith(f"{ee_collections}/ansible_collections/llmops/sglang/roles/")
                                 for task_file in roles), f"{name} ran roles from outside the installed artifact: {roles}"
            published = result.artifacts
            if template["stage"] == "search":
                # Off by default: without tuning_run_search the node ends at once and publishes nothing.
                assert "llmops_search" not in published
            elif template["stage"] not in ("report", "rollout"):
                assert published[f"llmops_{template['stage']}"][HOST]["status"] == "done"
                assert published["run_id"] == artifacts.get("run_id", published["run_id"])
            artifacts.update(published)
    finally:  # a template that failed must not leave the tuned configs for the next module's tests
        if "run_id" in artifacts:
            remove_tuned_configs(fleet, gpu2, tmp_path / artifacts["run_id"], FAST["tuning_run_moe"]["work_dir"])
    run_dir = tmp_path / artifacts["run_id"]
    assert not (run_dir / "search").exists()
    summary = json.loads((run_dir / "summary.json").read_text())
    assert [(d["label"], d["action"]) for d in summary["hosts"][HOST]["decisions"]] == [
        (f"flags: {FUSION}", "revert"), ("moe_tune", "adopt")]
    assert (run_dir / "report.html").is_file()
