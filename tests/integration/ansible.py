"""Run playbooks in tests the way users run them: ansible-runner, real SSH, this checkout's ansible.cfg."""
from __future__ import annotations

import shutil
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import ansible_runner
import yaml

REPO_ROOT = Path(__file__).resolve().parents[2]
RUNNER_TMP = REPO_ROOT / ".cache" / "runner"


def write_demo_inventory(directory: Path, connection_vars: dict, members: dict[str, dict]) -> Path:
    """An inventory in ``directory`` with the embedded default's group vars (the demo case) for ``members``
    (host name -> host vars, ``ansible_host`` included) of a sandbox fleet (``Fleet.connection_vars()``)."""
    directory.mkdir(parents=True, exist_ok=True)
    hosts = {"all": {"children": {"sglang_hosts": {"hosts": members}}, "vars": connection_vars}}
    (directory / "hosts.yml").write_text(yaml.safe_dump(hosts))
    (directory / "group_vars").symlink_to(REPO_ROOT / "inventory" / "group_vars")
    return directory


@dataclass
class PlaybookResult:
    status: str
    rc: int
    stats: dict
    events: list[dict] = field(repr=False)
    stdout: str = field(repr=False)

    def changed(self, host: str) -> int:
        return self.stats.get("changed", {}).get(host, 0)

    def task_results(self, task_name: str) -> dict[str, dict]:
        """``res`` of every host's ok/failed event for the task named ``task_name``."""
        return {host: data["res"] for host, data in self._task_events(task_name).items()}

    def task_durations(self, task_name: str) -> dict[str, float]:
        """Seconds every host spent in the task named ``task_name`` (without the playbook's own start-up)."""
        return {host: data["duration"] for host, data in self._task_events(task_name).items()}

    def task_paths(self) -> set[str]:
        """Files (without line numbers) of every task that ran: where its role or playbook came from."""
        return {event["event_data"]["task_path"].rsplit(":", 1)[0] for event in self.events
                if event["event"] == "playbook_on_task_start" and event.get("event_data", {}).get("task_path")}

    def artifacts(self) -> dict:
        """set_stats data of the run, as AWX hands it to downstream workflow nodes."""
        for event in self.events:
            if event["event"] == "playbook_on_stats":
                return event.get("event_data", {}).get("artifact_data") or {}
        return {}

    def _task_events(self, task_name: str) -> dict[str, dict]:
        events = {}
        for event in self.events:
            data = event.get("event_data", {})
            if event["event"] in ("runner_on_ok", "runner_on_failed") and data.get("task") == task_name:
                events[data["host"]] = data
        return events


class PlaybookRunner:
    def __init__(self, inventory: Path) -> None:
        self.inventory = inventory

    def run(self, playbook: str | Path, extravars: dict | None = None, *, limit: str | None = None,
            check: bool = False, diff: bool = False, tags: str | None = None,
            inventory: Path | None = None, verbosity: int = 0,
            collections_path: Path | None = None) -> PlaybookResult:
        """Run ``playbook``; ``verbosity`` 3 is ``-vvv`` (module arguments, results, connection details);
        ``collections_path`` replaces ansible.cfg's (this checkout) as where llmops.sglang is found."""
        RUNNER_TMP.mkdir(parents=True, exist_ok=True)
        private_data_dir = tempfile.mkdtemp(prefix="run-", dir=RUNNER_TMP)
        cmdline = " ".join(flag for flag, on in (("--check", check), ("--diff", diff)) if on)
        try:
            result = ansible_runner.run(
                private_data_dir=private_data_dir,
                playbook=str(playbook),
                inventory=str(inventory or self.inventory),
                extravars=extravars or {},
                limit=limit,
                tags=tags,
                cmdline=cmdline or None,
                verbosity=verbosity or None,
                quiet=True,
                envvars={
                    "PATH": f"{Path(sys.executable).parent}:/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin",
                    "ANSIBLE_CONFIG": str(REPO_ROOT / "ansible.cfg"),
                    **({"ANSIBLE_COLLECTIONS_PATH": str(collections_path)} if collections_path else {}),
                },
            )
            return PlaybookResult(status=result.status, rc=result.rc, stats=result.stats or {},
                                  events=list(result.events), stdout=result.stdout.read())
        finally:
            shutil.rmtree(private_data_dir, ignore_errors=True)
