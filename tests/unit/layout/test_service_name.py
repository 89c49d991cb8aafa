"""The SGLang service has one name, sglang_service_name, read through lookup llmops.sglang.service_name (issue #41
item 3): role sglang_server deployed sglang_server_name, role sglang_preflight checked
sglang_preflight_service_name and the stages guarded sglang_service_name, so a user who set only sglang_server_name
had the host's guard watching another unit than the one deployed. The real playbooks on a controller-local host:
the checks run before anything touches a host."""
from __future__ import annotations

import re
from pathlib import Path

import ansible_runner
import pytest

from llmops_sglang import api
from llmops_sglang.collection import find_collection

from tests.unit.layout.test_inventory_layout import REPO_ROOT
from tests.unit.layout.test_refused_run import INVENTORY

NAMES = ("sglang_service_name", "sglang_server_name", "sglang_preflight_service_name")
JINJA = re.compile(r"{{.*?}}|{%.*?%}", re.DOTALL)
CONFLICT = {"sglang_service_name": "sglang-a", "sglang_server_name": "sglang-b"}
BOTH_NAMED = "sglang_service_name ('sglang-a') and sglang_server_name ('sglang-b') name different services"


def test_every_task_takes_the_service_name_from_the_lookup():
    """No template of a role or playbook reads one of the names itself: the deploy, the preflight, the guard, the
    failure checks and the rollout all act on the unit the lookup names."""
    readers = [f"{path.relative_to(REPO_ROOT)}: {expression}"
               for folder in ("roles", "playbooks") for path in sorted((REPO_ROOT / folder).rglob("*"))
               if path.suffix in (".yml", ".j2")
               for expression in JINJA.findall(path.read_text(encoding="utf-8"))
               if any(re.search(rf"\b{name}\b", expression) for name in NAMES)]
    assert readers == []


@pytest.fixture
def controller(tmp_path, monkeypatch) -> Path:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "hosts.ini").write_text(INVENTORY)
    return tmp_path


def test_a_run_with_two_service_names_is_refused_before_anything_is_created(controller):
    result = api.run(REPO_ROOT / "playbooks" / "baseline.yml", controller / "hosts.ini", CONFLICT, run_id="two-names",
                     runs_dir=controller / "runs")
    assert result.status == "failed"
    assert [f.task for f in result.failures] == ["Check the run's inputs before anything is deployed"]
    assert BOTH_NAMED in result.failures[0].message
    assert result.hosts["gpu1"].changed == 0 and not (controller / "runs").exists()


def test_a_run_with_a_bad_service_name_is_refused_naming_the_variable(controller):
    result = api.run(REPO_ROOT / "playbooks" / "baseline.yml", controller / "hosts.ini",
                     {"sglang_service_name": "sglang/a"}, run_id="bad-name", runs_dir=controller / "runs")
    assert [(f.task, f.message.split(": ", 1)[1]) for f in result.failures] == [
        ("Check the run's inputs before anything is deployed",
         "sglang_service_name: 'sglang/a' is not a service name (letters, digits, '_', '.', ':' and '-', starting "
         "with a letter, digit or '_'; without .service)")]
    assert not (controller / "runs").exists()


def test_the_deploy_role_alone_refuses_two_names_before_it_creates_its_user(controller):
    (controller / "deploy.yml").write_text(
        "- name: Deploy\n  hosts: gpu1\n  gather_facts: false\n  roles:\n    - role: llmops.sglang.sglang_server\n"
        "      sglang_server_model_path: /srv/models/m\n")
    result = api.run(controller / "deploy.yml", controller / "hosts.ini", CONFLICT, check=True)
    assert [f.task for f in result.failures] == ["Resolve the service name"]
    assert BOTH_NAMED in result.failures[0].message
    assert result.hosts["gpu1"].changed == 0


def test_an_old_name_alone_names_the_service_with_a_deprecation_of_the_collection(controller):
    """sglang_server_name set alone is the service the run checks (and its guard arms): a real deprecation in the
    task result, naming the variable to set instead, as ansible-playbook and AWX show it."""
    (controller / "enter.yml").write_text(
        "- name: Enter the run\n  hosts: gpu1\n  gather_facts: false\n  roles:\n    - role: llmops.sglang.tuning_run\n")
    (controller / "runner").mkdir()
    runner = ansible_runner.run(private_data_dir=str(controller / "runner"), playbook=str(controller / "enter.yml"),
                                inventory=str(controller / "hosts.ini"), envvars=api.runner_env(find_collection()),
                                quiet=True, extravars={"sglang_server_name": "sglang/b",
                                                       "tuning_run_root": str(controller / "runs")})
    results = [(event.get("event_data") or {}).get("res") or {} for event in runner.events]
    deprecations = [d for result in results for d in result.get("deprecations", [])]
    assert [(d["collection_name"], d["version"]) for d in deprecations] == [("llmops.sglang", "3.0.0")]
    assert deprecations[0]["msg"].startswith("sglang_server_name is deprecated: the SGLang service is named "
                                             "sglang_service_name")
    # the old name's value is the one checked (a bad one, so that the run stops there)
    errors = [event["event_data"]["res"]["msg"] for event in runner.events if event.get("event") == "runner_on_failed"]
    assert len(errors) == 1 and "sglang_service_name: 'sglang/b' is not a service name" in errors[0]
    assert not (controller / "runs").exists()
