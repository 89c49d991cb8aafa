# Copyright (c) llmops.sglang contributors
# Apache License 2.0 (see LICENSE)
"""Whose fault a failed measurement is: the candidate's (recorded, reverted) or the measurement's (the stage fails).

Note that this module util is private to the llmops.sglang collection; do not use it from other collections.

A measurement deploys a configuration, reads its startup facts and the deployed unit, and sweeps it
(roles/tuning_run/tasks/measure.yml). When a step fails:

* ``deploy`` - the server module did not get the configuration running (it rolled back): the candidate's fault,
  unless the module's checks named the host (``port``, ``model_path``, ``python``) or the start failed on a port
  another process holds. Its structured failure (kind, message, suggestion, log lines) is kept.
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
# Failed starts (error.kind of the server module) that the host causes, whatever the configuration.
HOST_FAILURE_KINDS = ("port_in_use",)
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
        errors = result.get("errors") or []
        host_errors = [e for e in errors if not str(e).startswith("server_args.")]
        # The server module's checks name their field: only server_args.* are the candidate's; the port, the model
        # path, the python of the host are the deployment's, and a port taken by another process at start too.
        host_problem = bool(host_errors) or failure.get("kind") in HOST_FAILURE_KINDS
        record.update(fault=MEASUREMENT if host_problem else CANDIDATE,
                      kind=failure.get("kind") or ("host_preflight" if host_errors else
                                                   "invalid_flags" if errors else "start_failed"),
                      suggestion=failure.get("suggestion"), server_failure=failure or None,
                      rolled_back=result.get("rolled_back"), errors=errors or None)
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
