# Copyright (c) llmops.sglang contributors
# Apache License 2.0 (see LICENSE)
"""One ansible-playbook at a time in a run (issue 36 item 9): two runs of one run id both passed the stage-done check
and deployed to the same servers. Real processes stand in for the ansible-playbooks that own the lock."""
from __future__ import annotations

import subprocess
import time
from pathlib import Path

import pytest

from ansible_collections.llmops.sglang.plugins.plugin_utils.run_lock import (
    LOCK_FILE, STALE_WAIT_S, RunLocked, is_held, lock_run, read_owner)


@pytest.fixture
def playbooks():
    """Stand-ins for ansible-playbook processes (what the lock's owner is); ended after the test."""
    started: list[subprocess.Popen] = []

    def start() -> subprocess.Popen:
        started.append(subprocess.Popen(["sleep", "300"]))
        return started[-1]
    yield start
    for process in started:
        process.kill()
        process.wait()


def _released(path: Path) -> bool:
    deadline = time.monotonic() + STALE_WAIT_S
    while is_held(path) and time.monotonic() < deadline:
        time.sleep(0.05)
    return not is_held(path)


def test_a_second_playbook_of_the_same_run_is_refused_while_the_first_runs(tmp_path, playbooks):
    first, second = playbooks(), playbooks()
    assert lock_run(tmp_path, first.pid) == "acquired"
    assert read_owner(tmp_path / LOCK_FILE)["pid"] == first.pid
    assert lock_run(tmp_path, first.pid) == "held", "a later stage of the same playbook goes on"
    with pytest.raises(RunLocked, match=rf"run {tmp_path.name} is in use by ansible-playbook PID {first.pid} on "):
        lock_run(tmp_path, second.pid)
    with pytest.raises(RunLocked):
        lock_run(tmp_path, second.pid, check_mode=True)
    first.kill()
    first.wait()
    assert _released(tmp_path / LOCK_FILE), "the lock ends with the playbook that held it"
    assert lock_run(tmp_path, second.pid) == "acquired"
    assert read_owner(tmp_path / LOCK_FILE)["pid"] == second.pid


def test_a_lock_left_by_a_playbook_that_just_ended_is_waited_for_not_refused(tmp_path, playbooks):
    first, second = playbooks(), playbooks()
    assert lock_run(tmp_path, first.pid) == "acquired"
    first.kill()
    first.wait()
    assert lock_run(tmp_path, second.pid) == "acquired"  # whether or not its holder had let go yet


def test_check_mode_takes_no_lock(tmp_path, playbooks):
    assert lock_run(tmp_path, playbooks().pid, check_mode=True) == "free"
    assert not (tmp_path / LOCK_FILE).exists()
