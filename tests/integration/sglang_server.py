"""Deploying SGLang on gpu1 with the sglang_server role and looking at the result on the host (integration tests)."""
from __future__ import annotations

import contextlib
import json
import typing as t
from pathlib import Path

from llmops_sglang.models import RunResult
from tests.integration.ansible import PlaybookRunner, task_results
from tests.sandbox.fleet import Fleet, SandboxHost

PLAYBOOK = Path(__file__).parent / "playbooks" / "server_deploy.yml"
TASK = "Deploy the SGLang server"
BASELINE = {"tp_size": 4, "speculative_algorithm": "NEXTN", "max_running_requests": None}
# Prints the HTTP status of a URL on the host, 0 when nothing answers.
_STATUS_PROBE = """
import sys, urllib.error, urllib.request
try:
    print(urllib.request.urlopen(sys.argv[1], timeout=5).status)
except urllib.error.HTTPError as exc:
    print(exc.code)
except OSError:
    print(0)
"""


def deploy(runner: PlaybookRunner, server_args: dict, **extra) -> tuple[RunResult, dict]:
    """Run the role on gpu1; ``extra`` holds role variables plus ``check``/``diff``/``verbosity`` for the command line."""
    flags = {k: extra.pop(k) for k in ("check", "diff", "verbosity") if k in extra}
    result = runner.run(PLAYBOOK, {"sglang_server_args": server_args, **extra}, limit="gpu1", **flags)
    return result, task_results(result, TASK).get("gpu1", {})


def host_state(fleet: Fleet, host: SandboxHost, name: str = "sglang") -> tuple[str, str, str]:
    """(unit file text, current invocation id, active state) of the service ``name``."""
    unit = fleet.run(host, "cat", f"/etc/systemd/system/{name}.service", check=False).stdout
    invocation = fleet.run(host, "systemctl", "show", "-p", "InvocationID", "--value", f"{name}.service").stdout.strip()
    active = fleet.run(host, "systemctl", "is-active", f"{name}.service", check=False).stdout.strip()
    return unit, invocation, active


def http_status(fleet: Fleet, host: SandboxHost, port: int, path: str = "/health") -> int:
    """HTTP status of a server on the host, asked from the host itself; 0 when nothing answers."""
    return int(fleet.run(host, "python3", "-c", _STATUS_PROBE, f"http://127.0.0.1:{port}{path}").stdout)


def remove_tuned_configs(fleet: Fleet, host: SandboxHost, run_dir: Path, work_dir: str) -> None:
    """Undo a pipeline run's MoE install on ``host`` (other tests expect the configs missing) and its checkpoints.

    The server is stopped too: running, it would keep reporting the removed configs as used, and the next
    deploy of an unchanged unit would not restart it."""
    fleet.run(host, "systemctl", "stop", "sglang.service", check=False)
    installed = run_dir / "moe_tune" / host.name / "installed.json"
    if installed.is_file():
        paths = json.loads(installed.read_text())["installed"]
        fleet.run(host, "rm", "-f", *paths)
        # the install created the triton_X_Y_Z dir when it was missing; an empty one would still count as present
        remove_dirs_when_empty(fleet, host, *sorted({str(Path(p).parent) for p in paths}))
    fleet.run(host, "rm", "-rf", work_dir)


def remove_dirs_when_empty(fleet: Fleet, host: SandboxHost, *directories: str) -> None:
    """Remove each directory that exists and is empty; missing or non-empty ones are left as they are."""
    fleet.run(host, "sh", "-c", 'for d; do [ ! -d "$d" ] || rmdir --ignore-fail-on-non-empty "$d"; done',
              "sh", *directories)


# Disarms every guard of a service on a host and forgets what it restored (llmops.sglang.server_guard's files).
_DISARM_GUARDS = """
for unit in $(systemctl list-unit-files --no-legend 'llmops-guard-*.service' | cut -d' ' -f1); do
    systemctl disable --now "$unit"
    rm -f "/etc/systemd/system/$unit"
done
rm -rf /var/lib/llmops-sglang/guard
systemctl daemon-reload
"""


def disarm_guards(fleet: Fleet, host: SandboxHost) -> None:
    fleet.run(host, "sh", "-c", _DISARM_GUARDS, check=False)


@contextlib.contextmanager
def on_profile(fleet: Fleet, host: SandboxHost, profile: Path) -> t.Iterator[SandboxHost]:
    """``host`` on another emulator profile (its GPUs, SGLang release: Fleet.set_profile) with its server stopped,
    and back on the profile it had afterwards, its server stopped again."""
    previous = Path(host.profile)
    fleet.run(host, "systemctl", "disable", "--now", "sglang.service", check=False)
    fleet.set_profile(host, profile)
    try:
        yield host
    finally:
        fleet.run(host, "systemctl", "disable", "--now", "sglang.service", check=False)
        fleet.set_profile(host, previous)
