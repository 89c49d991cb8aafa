"""From ansible-runner events to progress events and to the parts of a RunResult that only events carry.

Where progress comes from: a play start is a stage, a task start is a task. The MoE tuner's action plugin
prints a line per tuned chunk with Ansible's Display while the task runs; ansible-runner turns such a line
into a ``verbose`` event (its ``stdout``, with the play and task of the moment), as it does with errors that stop
ansible-playbook before a play starts. A module cannot stream output while it runs, so a sweep's levels arrive
with the bench task's result.
"""
from __future__ import annotations

import re
import typing as t
from pathlib import Path

from llmops_sglang.models import HostStats, ProgressEvent, TaskFailure

HOST_OUTCOMES = {"runner_on_ok": "ok", "runner_on_failed": "failed", "runner_on_unreachable": "unreachable",
                 "runner_on_skipped": "skipped"}
BENCH_ACTION = "llmops.sglang.bench"
DEBUG_ACTION = "ansible.builtin.debug"
# llmops.sglang.moe_tune's progress_line(): "moe_tune [<host>] <kernel> <file>: 3/18 batch sizes ..."
HOST_IN_LINE = re.compile(r"^\S+ \[(?P<host>[^\]]+)\] ")
# ansible-runner's stdout of a verbose event may carry terminal codes of the stdout callback.
ANSI_CODE = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
RECAP_COUNTS = {"ok": "ok", "changed": "changed", "failures": "failures", "dark": "unreachable",
                "skipped": "skipped", "rescued": "rescued", "ignored": "ignored"}


def progress_events(event: dict) -> list[ProgressEvent]:
    """The progress events (none, one or several) one ansible-runner event stands for."""
    kind, data = event.get("event"), event.get("event_data") or {}
    stage = data.get("play")
    if kind == "playbook_on_play_start":
        return [ProgressEvent("stage", stage=data.get("name") or stage)]
    if kind == "playbook_on_task_start":
        return [ProgressEvent("task", stage=stage, task=data.get("task"))]
    if kind == "verbose":
        return _output_lines(event.get("stdout") or "", stage, data.get("task"))
    if kind in HOST_OUTCOMES:
        return _host_outcome(HOST_OUTCOMES[kind], data)
    if kind == "playbook_on_stats":
        return [ProgressEvent("finished")]
    return []


def _output_lines(stdout: str, stage: str | None, task: str | None) -> list[ProgressEvent]:
    """Lines Ansible printed outside a task result: plugins' progress, warnings, errors before a play starts."""
    events = []
    for line in ANSI_CODE.sub("", stdout).splitlines():
        if line.strip():
            match = HOST_IN_LINE.match(line)
            events.append(ProgressEvent("progress", stage=stage, task=task, host=match["host"] if match else None,
                                        message=line.strip()))
    return events


def _host_outcome(outcome: str, data: dict) -> list[ProgressEvent]:
    result = data.get("res") or {}
    if outcome == "ok" and result.get("changed"):
        outcome = "changed"
    common = {"stage": data.get("play"), "task": data.get("task"), "host": data.get("host")}
    events = [ProgressEvent(outcome, message=_message(outcome, data), **common)]
    if outcome != "skipped" and data.get("resolved_action") == BENCH_ACTION:
        events += [ProgressEvent("progress", message=level_line(level), **common)
                   for level in (result.get("sweep") or {}).get("levels", [])]
    return events


def _message(outcome: str, data: dict) -> str | None:
    """A failure's message, or what a debug task says (decisions, sweep tables); other results say nothing."""
    message = (data.get("res") or {}).get("msg")
    if outcome not in ("failed", "unreachable") and data.get("resolved_action") != DEBUG_ACTION:
        return None
    if isinstance(message, list):
        return "\n".join(str(line) for line in message)
    return None if message is None else str(message)


def level_line(level: dict) -> str:
    summary = level.get("summary") or {}
    agg, per_request = summary.get("agg_tok_s"), summary.get("per_req_tok_s")
    throughput = "-" if agg is None else f"{agg:,.1f}"
    per_request_text = "" if per_request is None else f", {per_request:,.1f} tok/s per request"
    return (f"C={level.get('concurrency')}: {throughput} tok/s aggregate{per_request_text} "
            f"(median of {summary.get('n_runs', '?')} runs, {summary.get('failed', 0)} failed requests)")


def run_dir_of(events: t.Iterable[dict]) -> Path | None:
    """The run directory the tuning_run role pointed every host at (set_fact ``tuning_run_dir``)."""
    for event in events:
        facts = ((event.get("event_data") or {}).get("res") or {}).get("ansible_facts") or {}
        if event.get("event") == "runner_on_ok" and facts.get("tuning_run_dir"):
            return Path(facts["tuning_run_dir"])
    return None


def artifacts_of(events: t.Iterable[dict]) -> dict:
    """set_stats data of the run (``artifact_data`` of the playbook_on_stats event)."""
    for event in events:
        if event.get("event") == "playbook_on_stats":
            return (event.get("event_data") or {}).get("artifact_data") or {}
    return {}


def output_of(events: t.Iterable[dict]) -> str:
    """The playbook's output as ansible-playbook printed it: every event's ``stdout`` in order (how AWX shows a job's
    output; lines outside any task, -v's included, are ``verbose`` events)."""
    return "\n".join(event["stdout"] for event in events if event.get("stdout"))


def host_stats(stats: dict | None) -> dict[str, HostStats]:
    """Per-host counts from the playbook_on_stats event data ({"ok": {host: n}, "dark": {...}, ...})."""
    stats = stats or {}
    hosts = sorted({host for key in ("processed", *RECAP_COUNTS) for host in stats.get(key) or {}})
    return {host: HostStats(**{name: (stats.get(key) or {}).get(host, 0) for key, name in RECAP_COUNTS.items()})
            for host in hosts}


def failures_of(events: t.Iterable[dict]) -> tuple[TaskFailure, ...]:
    """Every failed or unreachable task result in order (``ignored`` for ignore_errors tasks)."""
    failures = []
    for event in events:
        if event.get("event") in ("runner_on_failed", "runner_on_unreachable"):
            data = event.get("event_data") or {}
            failures.append(TaskFailure(host=data.get("host", "?"), stage=data.get("play"), task=data.get("task"),
                                        message=str((data.get("res") or {}).get("msg", "failed")),
                                        ignored=bool(data.get("ignore_errors"))))
    return tuple(failures)
