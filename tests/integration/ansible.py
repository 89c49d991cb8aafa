"""Run playbooks in tests the way users run them from Python: ``llmops_sglang.api.run`` (ansible-runner), real SSH,
the development install's ansible.cfg (this checkout's); and what tests read from a run's job events."""
from __future__ import annotations

import contextlib
import tempfile
import typing as t
from pathlib import Path

import yaml

from llmops_sglang import api
from llmops_sglang.models import RunResult

REPO_ROOT = Path(__file__).resolve().parents[2]
SCRATCH = REPO_ROOT / ".cache" / "runner"


def write_demo_inventory(directory: Path, connection_vars: dict, members: dict[str, dict]) -> Path:
    """An inventory in ``directory`` with the embedded default's group vars (the demo case) for ``members``
    (host name -> host vars, ``ansible_host`` included) of a sandbox fleet (``Fleet.connection_vars()``)."""
    directory.mkdir(parents=True, exist_ok=True)
    hosts = {"all": {"children": {"sglang_hosts": {"hosts": members}}, "vars": connection_vars}}
    (directory / "hosts.yml").write_text(yaml.safe_dump(hosts))
    (directory / "group_vars").symlink_to(REPO_ROOT / "inventory" / "group_vars")
    return directory


class PlaybookRunner:
    """``api.run`` on the sandbox fleet's inventory unless told another, from an empty directory of its own.

    The API runs ansible-playbook in the caller's directory; each call here gets a fresh one (removed afterwards), so
    a playbook that leaves ``tuning_run_root`` at the role's default (runs/) does not write into the checkout."""

    def __init__(self, inventory: Path) -> None:
        self.inventory = inventory

    def run(self, playbook: str | Path, extravars: dict | None = None, *, inventory: Path | None = None,
            **options: t.Any) -> RunResult:
        """``options``: api.run's (limit, tags, check, diff, verbosity, ...)."""
        SCRATCH.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(prefix="run-", dir=SCRATCH) as scratch, contextlib.chdir(scratch):
            return api.run(playbook, inventory or self.inventory, extravars, **options)


def task_results(result: RunResult, task_name: str) -> dict[str, dict]:
    """``res`` of every host's ok/failed event for the task named ``task_name``."""
    return {host: data["res"] for host, data in _task_events(result, task_name).items()}


def task_durations(result: RunResult, task_name: str) -> dict[str, float]:
    """Seconds every host spent in the task named ``task_name`` (without the playbook's own start-up)."""
    return {host: data["duration"] for host, data in _task_events(result, task_name).items()}


def task_paths(result: RunResult) -> set[str]:
    """Files (without line numbers) of every task that ran: where its role or playbook came from."""
    return {event["event_data"]["task_path"].rsplit(":", 1)[0] for event in result.events
            if event["event"] == "playbook_on_task_start" and event.get("event_data", {}).get("task_path")}


def _task_events(result: RunResult, task_name: str) -> dict[str, dict]:
    events = {}
    for event in result.events:
        data = event.get("event_data", {})
        if event["event"] in ("runner_on_ok", "runner_on_failed") and data.get("task") == task_name:
            events[data["host"]] = data
    return events
