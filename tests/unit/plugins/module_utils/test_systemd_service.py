# Copyright (c) llmops.sglang contributors
# Apache License 2.0 (see LICENSE)
"""The cause of a failed start when the log names no error."""
from __future__ import annotations

import pytest

from ansible_collections.llmops.sglang.plugins.module_utils.systemd_service import start_failure


@pytest.mark.parametrize(("reason", "kind", "says"), [
    ("not ready within 300s (no ready marker in the log)", "start_timeout", "raise `ready_timeout`"),
    ("ready marker logged but http://127.0.0.1:30000/health answered None", "health_check_failed", "check `host`"),
    ("not ready within 300s", "health_check_failed", "never answered 200"),
    ("the service stopped while starting (state failed/failed)", "exited", "read the log lines"),
])
def test_start_failure_speaks_the_operators_cause(reason, kind, says):
    failure = start_failure(reason)
    assert failure["kind"] == kind and failure["message"] == reason and failure["lines"] == []
    assert says in failure["suggestion"]


def test_an_unforeseen_reason_stays_unknown():
    assert start_failure("something else") == {"kind": "unknown", "message": "something else", "lines": [],
                                               "suggestion": None}
