# Copyright (c) llmops.sglang contributors
# Apache License 2.0 (see LICENSE)
"""Whose fault a failed measurement is: the candidate's (recorded, reverted) or the measurement's (the stage fails).

Note that this module util is private to the llmops.sglang collection; do not use it from other collections.

A measurement deploys a configuration, reads its startup facts and the deployed unit, and sweeps it
(roles/tuning_run/tasks/measure.yml). When a step fails:

* ``deploy`` - the server module did not get the configuration running (it rolled back): the candidate's fault.
  Its structured failure (kind, message, suggestion, log lines) is kept.
* ``sweep`` - the server died under the sweep (unit no longer active, a new invocation, /health not 200), or it
  stayed up but failed requests (every request of a run, more than max_failed_share of a level, a level over its
  time limit, answers the benchmark cannot use): the candidate's fault. A benchmark that could not run (input
  error, no client), a 401 (the key), or a server that cannot be reached while it is healthy: not the candidate's
  fault - the stage fails, so it is not marked done and a resume measures again.
* ``facts``/``unit`` - reading what the server did failed: the candidate's fault only if the server died.
"""
from __future__ import annotations

import typing as t

CANDIDATE = "candidate"
MEASUREMENT = "measurement"
# error_kind values of the bench module that are never the configuration's doing.
NOT_THE_SERVERS_DOING = {
    "input": "fix the benchmark options (tuning_run_bench)",
    "client": "the benchmark client could not run on the host (tuning_run_bench.engine, the SGLang venv's python)",
    "auth": "set sglang_api_key to the server's API key (normally from Vault)",
}


def server_state(unit_status: dict | None, health_status: t.Any, deployed_invocation: str | None) -> dict:
    """What the server looked like after the failed step: ``alive`` plus the evidence for it."""
    status = unit_status or {}
    active = status.get("ActiveState")
    invocation = status.get("InvocationID") or None
    try:
        health = int(health_status) if health_status not in (None, "") else None
    except (TypeError, ValueError):
        health = None
    problems = []
    if active is not None and active != "active":
        problems.append(f"the unit is {active}")
    if deployed_invocation and invocation and invocation != deployed_invocation:
        problems.append(f"the unit was restarted (invocation {invocation}, measured {deployed_invocation})")
    if health is not None and health != 200:
        problems.append(f"/health answered {health if health > 0 else 'nothing'}")
    known = active is not None or health is not None
    return {"alive": known and not problems, "known": known, "active_state": active, "invocation_id": invocation,
            "deployed_invocation_id": deployed_invocation, "health_status": health, "problems": problems}


def _first_line(text: str) -> str:
    return (text or "").strip().splitlines()[0] if (text or "").strip() else ""


def classify(step: str, result: dict | None, *, unit_status: dict | None = None, health_status: t.Any = None,
             deployed_invocation: str | None = None) -> dict:
    """The failure record of a measurement: ``fault`` (candidate/measurement), ``step``, ``kind``, ``message``
    (the whole message), ``summary`` (one line, for decision reasons), ``suggestion`` and the evidence."""
    result = result or {}
    message = str(result.get("msg") or "failed")
    record: dict[str, t.Any] = {"step": step, "message": message, "suggestion": None}
    if step == "deploy":
        failure = result.get("failure") if isinstance(result.get("failure"), dict) else {}
        record.update(fault=CANDIDATE, kind=failure.get("kind") or ("invalid_flags" if result.get("errors")
                                                                    else "start_failed"),
                      suggestion=failure.get("suggestion"), server_failure=failure or None,
                      rolled_back=result.get("rolled_back"), errors=result.get("errors"))
        record["summary"] = _first_line(message)
        return record
    state = server_state(unit_status, health_status, deployed_invocation)
    record["server"] = state
    kind = result.get("error_kind")
    sweep = result.get("sweep") if isinstance(result.get("sweep"), dict) else None
    if sweep is not None:
        record["sweep"] = sweep
    if step == "sweep" and kind in NOT_THE_SERVERS_DOING:
        record.update(fault=MEASUREMENT, kind=kind, suggestion=NOT_THE_SERVERS_DOING[kind])
    elif state["known"] and not state["alive"]:
        record.update(fault=CANDIDATE, kind="died_under_sweep" if step == "sweep" else "died_after_start",
                      message=f"the server died {'under the sweep' if step == 'sweep' else 'after it started'} "
                              f"({'; '.join(state['problems'])}): {message}")
    elif step == "sweep" and kind in ("requests_failed", "time_limit", "server"):
        record.update(fault=CANDIDATE, kind=kind, message=f"the server failed under the sweep: {message}")
    else:
        # unreachable with a healthy server, a facts or unit read that failed, an unclassified benchmark failure:
        # nothing says the configuration is at fault, so nothing may be concluded from it.
        record.update(fault=MEASUREMENT, kind=kind or f"{step}_failed",
                      suggestion="the server is healthy, so this is not the configuration's doing; check that the "
                                 "host can reach the server as configured (sglang_port) and rerun the run"
                      if state["alive"] else None)
    record["summary"] = _first_line(record["message"])
    return record
