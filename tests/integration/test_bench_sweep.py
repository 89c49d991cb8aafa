"""#6 on a sandbox host: a bench sweep whose server is killed mid-way returns the completed levels and a clear
error within the per-request timeout; bad input fails fast with a clear message."""
from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from tests.integration.ansible import task_durations, task_results
from tests.integration.sglang_server import BASELINE, deploy

pytestmark = pytest.mark.sandbox
PLAYBOOK = Path(__file__).parent / "playbooks" / "bench_sweep.yml"
TASK = "Run the sweep"
REQUEST_TIMEOUT_S = 20
PROGRESS_FILE = "/root/bench-kill.progress"
# Three repeats make the last level several seconds long: the kill after its first repeat lands inside it.
KILLED_SWEEP = {"bench_concurrency_levels": [1, 4, 64], "bench_repeats": 3, "bench_input_len": 250,
                "bench_output_len": 250, "bench_request_timeout_s": REQUEST_TIMEOUT_S,
                "bench_progress_file": PROGRESS_FILE}
KILL_AFTER = "run_done concurrency=64 repeat=1 "
KEYED = {"sglang_service_name": "sglang-keyed", "sglang_server_port": 30004, "sglang_server_api_key": "right-key"}
# Module run time (without the playbook's start-up) within which bad input must be reported: far below the
# playbook's 60 s request timeout, so nothing waited for a timeout; the rest is module start-up on a busy machine.
FAIL_FAST_S = 10


@pytest.fixture(scope="module")
def baseline_server(runner):
    """The baseline on port 30000, deployed again afterwards: the killed server must be healthy for later tests."""
    result, _ = deploy(runner, BASELINE)
    assert result.status == "successful", result.stdout
    yield
    restored, res = deploy(runner, BASELINE, sglang_server_state="restarted")
    assert restored.status == "successful" and res["restarted"], restored.stdout


@pytest.fixture(scope="module")
def keyed_server(runner):
    """An instance with an API key (its own name and port), removed afterwards."""
    result, _ = deploy(runner, BASELINE, **KEYED)
    assert result.status == "successful", result.stdout
    yield
    removed, _ = deploy(runner, BASELINE, **KEYED, sglang_server_state="absent")
    assert removed.status == "successful", removed.stdout


def kill_when_progress_shows(fleet, host, marker: str, finished: threading.Event, killed_at: list[float]) -> None:
    """Poll the sweep's progress file; SIGKILL the server once ``marker`` shows up."""
    while not finished.wait(0.2):
        progress = fleet.run(host, "cat", PROGRESS_FILE, check=False).stdout
        if marker in progress:
            fleet.run(host, "systemctl", "kill", "--signal=KILL", "sglang.service")
            killed_at.append(time.monotonic())
            return


def test_killed_server_yields_completed_levels_and_an_error(fleet, runner, gpu1, baseline_server):
    finished, killed_at = threading.Event(), []
    killer = threading.Thread(target=kill_when_progress_shows, args=(fleet, gpu1, KILL_AFTER, finished, killed_at))
    killer.start()
    try:
        result = runner.run(PLAYBOOK, KILLED_SWEEP, limit="gpu1")
    finally:
        ended_at = time.monotonic()
        finished.set()
        killer.join()
        fleet.run(gpu1, "rm", "-f", PROGRESS_FILE)
    assert killed_at, f"the sweep never reached {KILL_AFTER!r}: {result.stdout}"
    print(f"sweep ended {ended_at - killed_at[0]:.1f}s after the kill")

    res = task_results(result, TASK)["gpu1"]
    assert result.status == "failed"
    assert [level["concurrency"] for level in res["sweep"]["levels"]] == [1, 4]
    assert res["sweep"]["error"].startswith("concurrency 64: cannot connect to http://127.0.0.1:30000")
    assert res["msg"] == f"benchmark stopped early: {res['sweep']['error']}"
    assert "| 4 |" in res["table"] and "| 64 |" not in res["table"]
    # the error above is the refused connection's, not a request timeout's: the dead server ended the sweep


@pytest.mark.parametrize(("options", "message"), [
    ({"bench_concurrency_levels": [1, 0]}, "concurrency_levels must contain positive integers, got 0"),
    ({"bench_port": 30999},
     "benchmark stopped early: cannot connect to http://127.0.0.1:30999 (GET /v1/models): "
     "[Errno 111] Connection refused"),
    ({"bench_port": KEYED["sglang_server_port"], "bench_api_key": "wrong-key"},
     "benchmark stopped early: http://127.0.0.1:30004 answered HTTP 401 Unauthorized: the API key is wrong "
     "(set api_key to the value of the server's --api-key)"),
], ids=["concurrency-0", "unreachable-port", "wrong-api-key"])
def test_bad_input_fails_fast(runner, keyed_server, options, message):
    result = runner.run(PLAYBOOK, {"bench_concurrency_levels": [1, 4], **options}, limit="gpu1")
    assert result.status == "failed"
    assert task_results(result, TASK)["gpu1"]["msg"] == message
    assert task_durations(result, TASK)["gpu1"] < FAIL_FAST_S
