"""ansible-runner events -> progress events, run directory, artifacts, per-host stats, failures."""
from __future__ import annotations

from pathlib import Path

from llmops_sglang.events import artifacts_of, failures_of, host_stats, progress_events, run_dir_of
from llmops_sglang.models import HostStats, ProgressEvent

PLAY = "MoE tuning - tune the fused-MoE configs the server misses, install them, prove the effect"
TASK = "Tune the up kernel"
TUNER_LINE = ("moe_tune [gpu1] up E=256,N=256,device_name=NVIDIA_RTX_PRO_6000_Blackwell_Server_Edition.json: "
              "2/4 batch sizes (just tuned [8]), elapsed 0:00:41, ETA 0:00:41")


def host_event(kind: str, task: str, res: dict, action: str = "ansible.builtin.set_fact", **extra) -> dict:
    return {"event": kind, "event_data": {"play": PLAY, "task": task, "host": "gpu1", "res": res,
                                          "resolved_action": action, **extra}}


def test_play_and_task_starts_are_stages_and_tasks():
    assert progress_events({"event": "playbook_on_play_start", "event_data": {"name": PLAY, "play": PLAY}}) == [
        ProgressEvent("stage", stage=PLAY)]
    assert progress_events({"event": "playbook_on_task_start", "event_data": {"play": PLAY, "task": TASK}}) == [
        ProgressEvent("task", stage=PLAY, task=TASK)]


def test_a_display_line_of_the_tuner_is_progress_of_its_host():
    """The action plugin's Display line reaches ansible-runner as a verbose event (terminal codes included)."""
    event = {"event": "verbose", "stdout": f"\x1b[0;32m{TUNER_LINE}\x1b[0m", "event_data": {"play": PLAY, "task": TASK}}
    assert progress_events(event) == [ProgressEvent("progress", stage=PLAY, task=TASK, host="gpu1", message=TUNER_LINE)]
    assert progress_events({"event": "verbose", "stdout": "", "event_data": {}}) == []


def test_a_finished_sweep_reports_its_levels():
    sweep = {"levels": [{"concurrency": 1, "summary": {"agg_tok_s": 1201.97, "per_req_tok_s": 1207.06, "n_runs": 5,
                                                        "failed": 0}},
                        {"concurrency": 64, "summary": {"agg_tok_s": 15034.5, "per_req_tok_s": 236.1, "n_runs": 5,
                                                         "failed": 2}}]}
    events = progress_events(host_event("runner_on_ok", "Sweep it", {"changed": False, "sweep": sweep},
                                        action="llmops.sglang.bench"))
    assert [e.kind for e in events] == ["ok", "progress", "progress"]
    assert events[2].message == ("C=64: 15,034.5 tok/s aggregate, 236.1 tok/s per request "
                                 "(median of 5 runs, 2 failed requests)")
    assert {(e.host, e.task) for e in events} == {("gpu1", "Sweep it")}


def test_host_results_carry_failure_messages_and_what_debug_tasks_say():
    failed = progress_events(host_event("runner_on_failed", "Stop here", {"msg": "MoE tuning failed"},
                                        action="ansible.builtin.fail"))
    assert failed == [ProgressEvent("failed", stage=PLAY, task="Stop here", host="gpu1", message="MoE tuning failed")]
    said = progress_events(host_event("runner_on_ok", "Say", {"msg": ["adopt: improved", "| C |"]},
                                      action="ansible.builtin.debug"))
    assert said[0].message == "adopt: improved\n| C |"
    changed = progress_events(host_event("runner_on_ok", "Deploy", {"changed": True, "msg": "module text"},
                                         action="llmops.sglang.server"))
    assert changed == [ProgressEvent("changed", stage=PLAY, task="Deploy", host="gpu1", message=None)]


def test_other_events_are_not_progress():
    assert progress_events({"event": "playbook_on_start", "event_data": {}}) == []
    assert progress_events({"event": "runner_item_on_ok", "event_data": {"host": "gpu1"}}) == []


def test_the_run_directory_comes_from_the_set_fact_that_points_hosts_at_it():
    events = [host_event("runner_on_ok", "Fix the run id", {"ansible_facts": {"tuning_run_id": "r1"}}),
              host_event("runner_on_ok", "Point every host at the run directory",
                         {"ansible_facts": {"tuning_run_dir": "/srv/runs/r1", "tuning_run_selected": ["flags"]}})]
    assert run_dir_of(events) == Path("/srv/runs/r1")
    assert run_dir_of(events[:1]) is None


def test_stats_event_gives_artifacts_and_per_host_counts():
    artifact_data = {"llmops_flags": {"gpu1": {"run_id": "r1", "status": "done"}}}
    stats = {"ok": {"gpu1": 40, "gpu2": 3}, "changed": {"gpu1": 7}, "dark": {"gpu2": 1}, "failures": {},
             "rescued": {"gpu1": 1}, "processed": {"gpu1": 1, "gpu2": 1}, "artifact_data": artifact_data}
    events = [{"event": "playbook_on_stats", "event_data": stats}]
    assert artifacts_of(events) == artifact_data
    assert host_stats(stats) == {"gpu1": HostStats(ok=40, changed=7, rescued=1), "gpu2": HostStats(ok=3, unreachable=1)}
    assert artifacts_of([]) == {} and host_stats(None) == {}


def test_failures_keep_their_order_and_whether_they_were_ignored():
    events = [host_event("runner_on_failed", "Deploy the configuration", {"msg": "server failed to start"}),
              host_event("runner_on_ok", "Keep the failure", {}),
              host_event("runner_on_failed", "Probe", {"msg": "no"}, ignore_errors=True)]
    assert [(f.task, f.message, f.ignored) for f in failures_of(events)] == [
        ("Deploy the configuration", "server failed to start", False), ("Probe", "no", True)]


def test_ansible_warnings_and_early_errors_are_progress_lines_too():
    event = {"event": "verbose", "stdout": "\x1b[1;35m[WARNING]: provided hosts list is empty\x1b[0m", "event_data": {}}
    assert progress_events(event) == [ProgressEvent("progress", message="[WARNING]: provided hosts list is empty")]
