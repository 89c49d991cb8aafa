"""run()/run_async() with a real ansible-runner on a local play: result, events, cancellation, timeout."""
from __future__ import annotations

import asyncio
import shutil
import sys
import threading
import time
from pathlib import Path

import ansible_runner
import pytest

from llmops_sglang import api
from llmops_sglang.collection import default_runs_dir, find_collection
from llmops_sglang.models import ProgressEvent

PLAYBOOKS = Path(__file__).parent / "playbooks"
PLAYBOOK = PLAYBOOKS / "local.yml"
INVENTORY = PLAYBOOKS / "inventory.ini"
CHECKOUT = Path(__file__).resolve().parents[3]
PAUSE_S = 120  # the play's pause: a run stopped by the API ends before it would have ended by itself


def local_vars(tmp_path: Path, sleep_s: float = 0, fail: bool = False) -> dict:
    return {"api_test_run_dir": str(tmp_path / "run-local"), "api_test_sleep_s": sleep_s, "api_test_fail": fail}


def test_tune_is_run_by_fqcn_and_stages_by_their_playbook():
    collection = find_collection()
    assert api.playbook_for("tune", collection) == "llmops.sglang.tune"
    assert api.playbook_for("flags", collection) == str(collection.path / "playbooks" / "flags.yml")
    assert Path(api.playbook_for("flags", collection)).resolve() == CHECKOUT / "playbooks" / "flags.yml"
    assert api.playbook_for("site.yml", collection) == "site.yml"


def test_pipeline_options_become_the_pipeline_variables(tmp_path):
    variables = api.pipeline_vars({"run_id": "from-e", "x": 1}, "r1", ["baseline", "flags"], True, tmp_path / "runs")
    assert variables == {"run_id": "r1", "x": 1, "stages": "baseline,flags", "force": True,
                         "tuning_run_root": str(tmp_path / "runs")}
    assert api.pipeline_vars(None, None, None, "moe_tune", None) == {"force": "moe_tune"}


def test_runner_uses_this_environment_ansible_and_the_checkout_config():
    env = api.runner_env(find_collection())
    assert env["PATH"].split(":")[0] == str(Path(sys.executable).parent)
    assert env["ANSIBLE_CONFIG"] == str(CHECKOUT / "ansible.cfg")


def test_an_installed_collection_leaves_the_config_to_ansible(monkeypatch):
    monkeypatch.setattr("llmops_sglang.collection.development_config", lambda: None)
    assert "ANSIBLE_CONFIG" not in api.runner_env(find_collection())


def test_check_and_diff_become_ansible_playbook_options():
    assert api.playbook_cmdline(check=False, diff=False) is None
    assert api.playbook_cmdline(check=True, diff=False) == "--check"
    assert api.playbook_cmdline(check=True, diff=True) == "--check --diff"


def test_a_run_returns_status_stats_artifacts_run_dir_and_progress(tmp_path):
    events: list[ProgressEvent] = []
    result = api.run(PLAYBOOK, INVENTORY, local_vars(tmp_path), on_event=events.append)
    assert result.succeeded and result.rc == 0
    assert result.hosts["api-test-host"].ok == 4 and result.hosts["api-test-host"].failures == 0
    assert result.artifacts == {"llmops_local": {"api-test-host": {
        "status": "done", "check": False, "diff": False, "verbosity": 0, "cwd_runs": str(Path.cwd() / "runs")}}}
    assert result.run_dir == tmp_path / "run-local" and result.run_id == "run-local"
    assert result.summary is None  # not a run directory: nothing to summarize
    assert [e.kind for e in events][:2] == ["stage", "task"]
    assert ProgressEvent("ok", stage="Local - a play that the API can watch, cancel and time out", task="Say something",
                         host="api-test-host", message="first line\nsecond line") in events
    assert events[-1].kind == "finished"


def test_finished_comes_last_though_a_callback_prints_after_the_recap(tmp_path, monkeypatch):
    """ansible.posix.profile_tasks prints its task timings after the play recap (output events after the stats
    event); ``finished`` still ends the events."""
    monkeypatch.setenv("ANSIBLE_CALLBACKS_ENABLED", "ansible.posix.profile_tasks")
    events: list[ProgressEvent] = []
    result = api.run(PLAYBOOK, INVENTORY, local_vars(tmp_path), on_event=events.append)
    assert result.succeeded
    stats = next(i for i, e in enumerate(result.events) if e["event"] == "playbook_on_stats")
    assert any(e["event"] == "verbose" and "Say something" in e.get("stdout", "") for e in result.events[stats:])
    assert any(e.kind == "progress" and "Say something" in e.message for e in events)
    assert [e.kind for e in events].count("finished") == 1 and events[-1].kind == "finished"


def test_tags_select_tasks_and_the_result_keeps_the_events_and_the_output(tmp_path):
    result = api.run(PLAYBOOK, INVENTORY, local_vars(tmp_path), tags=["speak"])
    assert result.succeeded and result.hosts["api-test-host"].ok == 1
    started = [e["event_data"]["task"] for e in result.events if e["event"] == "playbook_on_task_start"]
    assert started == ["Say something"]
    assert "TASK [Say something]" in result.stdout and "first line" in result.stdout
    assert "Publish a result" not in result.stdout


def test_relative_playbook_and_inventory_paths_are_the_callers(tmp_path, monkeypatch):
    monkeypatch.chdir(PLAYBOOKS.parent)  # ansible-runner itself runs in its private data directory
    result = api.run("playbooks/local.yml", "playbooks/inventory.ini", local_vars(tmp_path))
    assert result.succeeded and list(result.hosts) == ["api-test-host"]
    assert result.playbook == str(PLAYBOOK)


def test_limit_check_diff_and_verbosity_reach_ansible_playbook(tmp_path):
    inventory = tmp_path / "inventory.ini"
    host = INVENTORY.read_text().split(" ", 1)[1]
    inventory.write_text(f"api-test-host {host}other-host {host}")
    events: list[ProgressEvent] = []
    result = api.run(PLAYBOOK, inventory, local_vars(tmp_path), on_event=events.append, limit="api-test-host",
                     check=True, diff=True, verbosity=2)
    assert result.succeeded and list(result.hosts) == ["api-test-host"]
    assert result.artifacts["llmops_local"]["api-test-host"] | {"cwd_runs": None} == {
        "status": "done", "check": True, "diff": True, "verbosity": 2, "cwd_runs": None}
    # -v's lines (here the config file ansible-playbook says it uses) arrive as progress events
    assert any(e.kind == "progress" and e.message == f"Using {CHECKOUT / 'ansible.cfg'} as config file" for e in events)


def test_playbooks_run_in_the_callers_directory_so_runs_land_in_its_runs(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # the tuning_run role's default root is relative: the directory of the run
    result = api.run(PLAYBOOKS / "run_dir.yml", INVENTORY, run_id="r1")
    assert result.succeeded
    assert result.run_dir == tmp_path / "runs" / "r1" == default_runs_dir() / "r1"
    assert (tmp_path / "runs" / "r1" / "run.json").is_file() and (tmp_path / "runs" / "latest").is_symlink()
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    elsewhere = api.run(PLAYBOOKS / "run_dir.yml", INVENTORY, {"tuning_run_root": "~/llmops"}, run_id="r2")
    assert elsewhere.run_dir == tmp_path / "home" / "llmops" / "r2"  # ~ expanded (the role's input is a path)


def test_the_run_ids_old_name_still_names_the_run_with_a_deprecation_warning(tmp_path):
    """llmops_run_id (what earlier releases published for AWX workflow nodes) resumes the run it names, and the task
    result carries a real deprecation of the collection (what ansible-playbook and AWX print as one)."""
    def deprecations(name: str, run_id: str) -> list[dict]:
        (tmp_path / run_id).mkdir()
        runner = ansible_runner.run(private_data_dir=str(tmp_path / run_id), playbook=str(PLAYBOOKS / "run_dir.yml"),
                                    inventory=str(INVENTORY), envvars=api.runner_env(find_collection()), quiet=True,
                                    extravars={name: run_id, "tuning_run_root": str(tmp_path / "runs")})
        assert runner.status == "successful" and (tmp_path / "runs" / run_id / "run.json").is_file()
        results = [(event.get("event_data") or {}).get("res") or {} for event in runner.events]
        return [deprecation for result in results for deprecation in result.get("deprecations", [])]

    old_name = deprecations("llmops_run_id", "r3")
    assert [(d["collection_name"], d["version"]) for d in old_name] == [("llmops.sglang", "3.0.0")]
    assert old_name[0]["msg"].startswith("llmops_run_id is deprecated: the run id is named run_id")
    assert deprecations("run_id", "r4") == []


def test_a_failed_run_names_the_failed_task(tmp_path):
    result = api.run(PLAYBOOK, INVENTORY, local_vars(tmp_path, fail=True))
    assert (result.status, result.succeeded) == ("failed", False) and result.rc != 0
    assert [(f.host, f.task, f.message) for f in result.failures] == [
        ("api-test-host", "Fail when asked to", "asked to fail")]


def test_an_inventory_path_that_does_not_exist_is_refused_before_anything_runs(tmp_path):
    """ansible-playbook only warns and runs on the implicit localhost: the run said successful, rc 0, no hosts."""
    events: list[ProgressEvent] = []
    with pytest.raises(api.InventoryNotFound) as refused:
        api.run(PLAYBOOK, tmp_path / "inventroy.yml", local_vars(tmp_path), on_event=events.append)
    assert f"inventory {tmp_path / 'inventroy.yml'}: no such file or directory" in str(refused.value)
    assert events == [] and not (tmp_path / "run-local").exists()


def test_a_run_where_no_host_ran_a_task_fails_with_that_reason(tmp_path):
    """An inventory without a host the play targets: ansible-playbook skips the play and exits 0."""
    (tmp_path / "empty.ini").write_text("[sglang_hosts]\n")
    inline = api.run(PLAYBOOK, "nohost-matches-this,", local_vars(tmp_path), limit="other")
    result = api.run(PLAYBOOK, tmp_path / "empty.ini", local_vars(tmp_path))
    assert (result.status, result.succeeded, result.hosts, result.rc) == ("failed", False, {}, 0)
    assert result.reason == api.NO_HOSTS and result.reason.startswith("no host ran a task")
    assert inline.status == "failed" and not inline.succeeded
    ran = api.run(PLAYBOOK, INVENTORY, local_vars(tmp_path))
    assert ran.succeeded and ran.reason is None


def remaining_processes(marker: str) -> list[int]:
    """Processes of a run whose command line names ``marker``, after giving SIGTERM a moment to act."""
    deadline = time.monotonic() + 3
    while api.playbook_processes(marker) and time.monotonic() < deadline:
        time.sleep(0.1)
    return api.playbook_processes(marker)


def test_setting_the_cancel_event_stops_the_playbook_and_its_workers(tmp_path):
    cancel = threading.Event()

    def cancel_when_waiting(event: ProgressEvent) -> None:
        if event.kind == "task" and event.task == "Wait":
            cancel.set()

    inventory = Path(shutil.copy(INVENTORY, tmp_path / "inventory.ini"))  # names this run's processes
    started = time.monotonic()
    result = api.run(PLAYBOOK, inventory, local_vars(tmp_path, sleep_s=PAUSE_S), on_event=cancel_when_waiting,
                     cancel=cancel)
    assert result.status == "canceled" and not result.succeeded  # a run left to end would be "successful"
    assert time.monotonic() - started < PAUSE_S, "stopped at the cancel, not after the pause"
    assert remaining_processes(str(inventory)) == []  # ansible-core's workers live in sessions of their own
    assert result.run_dir == tmp_path / "run-local"  # known from the events before the cancel


def test_a_timeout_stops_the_playbook_and_its_workers(tmp_path):
    inventory = Path(shutil.copy(INVENTORY, tmp_path / "inventory.ini"))
    started = time.monotonic()
    result = api.run(PLAYBOOK, inventory, local_vars(tmp_path, sleep_s=PAUSE_S), timeout=2)
    assert result.status == "timeout" and not result.succeeded
    assert 2 <= time.monotonic() - started < PAUSE_S, "stopped at the timeout, not after the pause"
    assert remaining_processes(str(inventory)) == []


def test_an_exception_in_on_event_stops_the_run_and_is_raised(tmp_path):
    def broken(event: ProgressEvent) -> None:
        if event.kind == "task" and event.task == "Wait":
            raise ValueError("display broke")

    started = time.monotonic()
    with pytest.raises(ValueError, match="display broke"):
        api.run(PLAYBOOK, INVENTORY, local_vars(tmp_path, sleep_s=PAUSE_S), on_event=broken)
    assert time.monotonic() - started < PAUSE_S, "stopped at the exception, not after the pause"


def test_run_async_delivers_events_on_the_loop_and_returns_the_result(tmp_path):
    async def main():
        loop_thread = threading.get_ident()
        threads = set()
        result = await api.run_async(PLAYBOOK, INVENTORY, local_vars(tmp_path),
                                     on_event=lambda event: threads.add(threading.get_ident()))
        return result, threads, loop_thread

    result, threads, loop_thread = asyncio.run(main())
    assert result.succeeded and threads == {loop_thread}


def test_cancelling_the_async_task_stops_the_playbook(tmp_path):
    async def main():
        waiting = asyncio.Event()
        task = asyncio.create_task(api.run_async(
            PLAYBOOK, INVENTORY, local_vars(tmp_path, sleep_s=PAUSE_S),
            on_event=lambda event: waiting.set() if event.kind == "task" and event.task == "Wait" else None))
        await waiting.wait()
        task.cancel()
        started = time.monotonic()
        with pytest.raises(asyncio.CancelledError):
            await task
        return time.monotonic() - started

    assert asyncio.run(main()) < PAUSE_S, "stopped at the task's cancel, not after the pause"
