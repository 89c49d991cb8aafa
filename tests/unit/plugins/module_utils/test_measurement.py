# Copyright (c) llmops.sglang contributors
# Apache License 2.0 (see LICENSE)
"""Whose fault a failed measurement is (issue 15 item 4)."""
from __future__ import annotations

import pytest

from ansible_collections.llmops.sglang.plugins.module_utils.measurement import CANDIDATE, MEASUREMENT, classify

ALIVE = {"ActiveState": "active", "InvocationID": "abc"}
OOM = {"msg": "SGLang failed to start (oom): RuntimeError: Not enough memory.\nLog lines:\n...",
       "failure": {"kind": "oom", "message": "RuntimeError: Not enough memory.", "suggestion": "raise it",
                   "lines": ["x"]}, "rolled_back": True}


def test_a_failed_start_is_the_candidates_and_keeps_the_structured_failure() -> None:
    record = classify("deploy", OOM)
    assert record["fault"] == "candidate" and record["kind"] == "oom" and record["suggestion"] == "raise it"
    assert record["server_failure"]["lines"] == ["x"] and record["rolled_back"] is True
    assert record["message"] == OOM["msg"] and record["summary"] == "SGLang failed to start (oom): RuntimeError: " \
                                                                    "Not enough memory."


@pytest.mark.parametrize("kind", ["input", "client", "auth"])
def test_benchmark_input_client_and_auth_failures_are_never_the_candidates(kind: str) -> None:
    record = classify("sweep", {"msg": "x", "error_kind": kind}, unit_status=ALIVE, health_status=200,
                      deployed_invocation="abc")
    assert record["fault"] == "measurement" and record["kind"] == kind and record["suggestion"]


def test_unreachable_with_a_healthy_server_is_the_measurements() -> None:
    record = classify("sweep", {"msg": "benchmark stopped early: cannot connect", "error_kind": "unreachable"},
                      unit_status=ALIVE, health_status=200, deployed_invocation="abc")
    assert record["fault"] == "measurement" and "server is healthy" in record["suggestion"]


@pytest.mark.parametrize(("status", "health", "problem"), [
    ({"ActiveState": "failed", "InvocationID": "abc"}, -1, "the unit is failed"),
    ({"ActiveState": "active", "InvocationID": "def"}, 200, "the unit was restarted"),
    (ALIVE, 503, "/health answered 503"),
])
def test_a_server_that_died_under_the_sweep_is_the_candidates(status: dict, health: int, problem: str) -> None:
    record = classify("sweep", {"msg": "benchmark stopped early: cannot connect", "error_kind": "unreachable"},
                      unit_status=status, health_status=health, deployed_invocation="abc")
    assert record["fault"] == "candidate" and record["kind"] == "died_under_sweep"
    assert record["message"].startswith("the server died under the sweep (") and problem in record["message"]


def test_requests_failing_on_a_live_server_are_the_candidates() -> None:
    record = classify("sweep", {"msg": "benchmark stopped early: 900 of 1024 failed", "error_kind": "requests_failed",
                                "sweep": {"levels": []}}, unit_status=ALIVE, health_status=200,
                      deployed_invocation="abc")
    assert record["fault"] == "candidate" and record["kind"] == "requests_failed" and record["sweep"] == {"levels": []}


def test_facts_that_cannot_be_read_from_a_live_server_are_the_measurements() -> None:
    record = classify("facts", {"msg": "http://127.0.0.1:30000/server_info answered 401"}, unit_status=ALIVE,
                      health_status=200, deployed_invocation="abc")
    assert record["fault"] == "measurement" and record["kind"] == "facts_failed"


def test_an_unclassified_benchmark_failure_fails_the_stage() -> None:
    record = classify("sweep", {"msg": "MODULE FAILURE"}, unit_status=ALIVE, health_status=200)
    assert record["fault"] == "measurement"


def test_invalid_candidate_flags_are_the_candidates() -> None:
    record = classify("deploy", {"msg": "invalid SGLang flags, nothing was changed: server_args.tp_size: invalid int "
                                        "value 'four' (SGLang's parser)",
                                 "errors": ["server_args.tp_size: invalid int value 'four' (SGLang's parser)"]})
    assert record["fault"] == CANDIDATE and record["kind"] == "invalid_flags"


@pytest.mark.parametrize("error", [
    "port: 127.0.0.1:30000 is already in use by pid 812 (python3 -m http.server 30000), not by sglang.service",
    "model_path: /srv/models/missing does not exist on the host",
    "python: /opt/sglang/venv/bin/python does not exist on the host",
])
def test_what_the_host_lacks_is_not_the_candidates(error: str) -> None:
    record = classify("deploy", {"msg": f"nothing was changed: {error}", "errors": [error]})
    assert record["fault"] == MEASUREMENT and record["kind"] == "host_preflight"


def test_a_start_on_a_port_another_process_took_is_not_the_candidates() -> None:
    record = classify("deploy", {"msg": "SGLang failed to start (port_in_use)", "rolled_back": True,
                                 "failure": {"kind": "port_in_use", "message": "[Errno 98] address already in use",
                                             "suggestion": "free 127.0.0.1:30000"}})
    assert record["fault"] == MEASUREMENT and record["kind"] == "port_in_use"
