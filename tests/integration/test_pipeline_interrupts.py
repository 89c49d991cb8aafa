"""Ctrl-C of `ansible-playbook tune.yml` at the stages' risky points (issue #15 item 7): in a flag trial's
sweep (a candidate serving) and while the MoE tuner runs (the server stopped). Each time the host's guard
ends the abandoned work and serves the adopted configuration again within the lease plus a restart, and a
resume of the run goes on from there."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.integration.ansible import REPO_ROOT, write_demo_inventory
from tests.integration.sglang_server import disarm_guards, host_state, http_status, remove_tuned_configs

pytestmark = pytest.mark.sandbox
HOST = "gpu2"
LEASE_S = 45
RUN_ID = "interrupts"
SETTINGS = {
    "tuning_run_guard_lease": LEASE_S,
    "tuning_run_bench": {"concurrency_levels": [1, 16], "repeats": 3, "input_len": 1000, "output_len": 300,
                         "endpoint": "completions", "request_timeout_s": 120},
    "tuning_run_moe": {"batch_sizes": [1, 8, 64, 512], "search_space": "prefiltered",
                       "work_dir": "/var/lib/llmops-sglang/moe-tune", "timeout": 900, "force": False},
}
BOUND_S = LEASE_S + 90  # lease + the restart of the adopted configuration on a loaded 2-core machine


@pytest.fixture(scope="module")
def host(fleet):
    return next(h for h in fleet.hosts() if h.name == HOST)


@pytest.fixture(scope="module")
def run(tmp_path_factory, fleet, host):
    """An inventory of the demo's group vars on this host, and a runs root; the host is left as found."""
    directory = tmp_path_factory.mktemp("interrupts")
    write_demo_inventory(directory / "inventory", fleet.connection_vars(), {HOST: {"ansible_host": host.address}})
    yield {"inventory": directory / "inventory", "run_dir": directory / "runs" / RUN_ID,
           "extravars": {**SETTINGS, "tuning_run_root": str(directory / "runs"), "run_id": RUN_ID}}
    remove_tuned_configs(fleet, host, directory / "runs" / RUN_ID, SETTINGS["tuning_run_moe"]["work_dir"])
    disarm_guards(fleet, host)


def _start(run: dict, stages: str) -> subprocess.Popen:
    """`ansible-playbook tune.yml` as a user runs it in a terminal: its own process group, which Ctrl-C signals."""
    command = [str(Path(sys.executable).parent / "ansible-playbook"), str(REPO_ROOT / "tune.yml"),
               "-i", str(run["inventory"]), "-e", json.dumps({**run["extravars"], "stages": stages})]
    env = {**os.environ, "ANSIBLE_CONFIG": str(REPO_ROOT / "ansible.cfg"),
           "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}"}
    return subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True, cwd=REPO_ROOT)


def _until(predicate, timeout_s: float, what: str, playbook: subprocess.Popen | None = None) -> float:
    started = time.monotonic()
    while time.monotonic() - started < timeout_s:
        if predicate():
            return time.monotonic() - started
        if playbook is not None and playbook.poll() is not None:
            raise AssertionError(f"the playbook ended before {what}:\n{playbook.communicate()[0][-4000:]}")
        time.sleep(0.5)
    if playbook is not None:
        playbook.kill()
        raise AssertionError(f"not within {timeout_s}s: {what}\n{playbook.communicate()[0][-4000:]}")
    raise AssertionError(f"not within {timeout_s}s: {what}")


_LIST_WORK = """
import glob, json
work = []
for path in glob.glob("/run/llmops-sglang/work/*.json"):
    try:
        work.append(json.load(open(path)))
    except (OSError, ValueError):
        pass  # ended meanwhile
print(json.dumps(work))
"""


def _work(fleet, host) -> list[dict]:
    """The llmops modules at work on the host, as its guard sees them."""
    return json.loads(fleet.run(host, "python3", "-c", _LIST_WORK).stdout)


def _ctrl_c(playbook: subprocess.Popen) -> float:
    os.killpg(playbook.pid, signal.SIGINT)
    interrupted = time.monotonic()
    output = playbook.communicate(timeout=60)[0]
    assert playbook.returncode != 0, output[-3000:]
    return interrupted


def _serving(fleet, host, unit: str) -> bool:
    current, _, active = host_state(fleet, host)
    return current == unit and active == "active" and http_status(fleet, host, 30000) == 200


def test_ctrl_c_in_a_flag_trial_serves_the_baseline_again(run, fleet, host):
    playbook = _start(run, "preflight,baseline,flags")
    candidate_sweep = lambda: ("--enable-fused-moe-sum-all-reduce" in host_state(fleet, host)[0]  # noqa: E731
                               and _work(fleet, host) != [])
    _until(candidate_sweep, 600, "the first candidate's sweep started", playbook)
    interrupted = _ctrl_c(playbook)

    adopted = (run["run_dir"] / "baseline" / HOST / "unit.service").read_text()
    _until(lambda: _serving(fleet, host, adopted), BOUND_S, "the baseline serves again")
    print(f"flags: the baseline serves again {time.monotonic() - interrupted:.1f}s after Ctrl-C (lease {LEASE_S}s)")
    assert _work(fleet, host) == [], "the abandoned sweep must have ended"
    assert not (run["run_dir"] / "flags" / HOST / "stage.json").exists(), "an interrupted stage is not done"


def test_ctrl_c_while_the_tuner_runs_restarts_the_server_without_the_partial_configs(run, fleet, host):
    missing_before = fleet.run(host, "sh", "-c", "ls /opt/sglang/venv/lib/python3*/site-packages/sglang/srt/layers/"
                               "moe/moe_runner/triton_utils/configs/", check=False).stdout
    adopted = (run["run_dir"] / "baseline" / HOST / "unit.service").read_text()
    playbook = _start(run, "moe_tune")
    tuner_running = lambda: any(work["groups"] for work in _work(fleet, host))  # noqa: E731
    _until(tuner_running, 600, "the MoE tuner started", playbook)
    assert host_state(fleet, host)[2] != "active", "the server is stopped while the tuner has the GPUs"
    interrupted = _ctrl_c(playbook)

    _until(lambda: _serving(fleet, host, adopted), BOUND_S, "the adopted configuration serves again")
    print(f"moe_tune: the server serves again {time.monotonic() - interrupted:.1f}s after Ctrl-C (lease {LEASE_S}s)")
    assert _work(fleet, host) == []
    assert fleet.run(host, "pgrep", "-f", "tuning_fused_moe", check=False).stdout == "", "the tuner must be ended"
    assert fleet.run(host, "sh", "-c", "ls /opt/sglang/venv/lib/python3*/site-packages/sglang/srt/layers/"
                     "moe/moe_runner/triton_utils/configs/", check=False).stdout == missing_before
    restored = json.loads(fleet.run(host, "cat", "/var/lib/llmops-sglang/guard/sglang.restored.json").stdout)
    assert restored["action"] == "restart" and restored["armed_by"] == f"{RUN_ID}/moe_tune"
