# Copyright (c) llmops.sglang contributors
# Apache License 2.0 (see LICENSE)
"""The server module returns the facts of the start it deployed from the log it already holds, as server_facts
would read them, and says why when they could not be read (without failing the deploy)."""
from __future__ import annotations

from pathlib import Path

from ansible_collections.llmops.sglang.plugins.module_utils import _server_deploy, _server_facts

LOGS = Path(__file__).resolve().parents[3] / "fixtures" / "logs"


class StubModule:
    check_mode = False

    def __init__(self, **params) -> None:
        self.params = {"name": "sglang", "unit_dir": "/etc/systemd/system", "env_dir": "/etc/sglang", "host": "0.0.0.0",
                       "port": 30001, "api_key": "sekrit", **params}

    def run_command(self, argv, **kwargs):
        raise AssertionError(f"no command may run to get the facts of a log at hand: {argv}")


def test_the_deploy_returns_the_facts_server_facts_gives_for_the_same_log(monkeypatch):
    text = (LOGS / "modern_tp4_spec_baseline.log").read_text(encoding="utf-8")
    asked = []

    def fetch(url, api_key, timeout):
        asked.append((url, api_key))
        return {"max_total_num_tokens": 1183744, "tp_size": 4, "api_key": "sekrit"}
    monkeypatch.setattr(_server_facts, "_fetch_server_info", fetch)
    result = _server_deploy.ServerDeployment(StubModule(), {}).facts("abc", text)

    expected = _server_facts.server_facts({"name": None, "log_file": str(LOGS / "modern_tp4_spec_baseline.log"),
                                           "url": "http://127.0.0.1:30001", "api_key": "sekrit", "env_dir": "/x",
                                           "timeout": 10}, run=None)
    assert asked[0] == ("http://127.0.0.1:30001", "sekrit")  # 0.0.0.0 is asked on the loopback, with the deploy's key
    assert result["invocation_id"] == "abc" and result["startup_log"] == text and result["facts_error"] is None
    for key in ("facts", "sources", "mismatches", "server_info", "log_lines"):
        assert result[key] == expected[key], key
    assert result["server_info"]["api_key"] == "***" and result["sources"]["tp_size"] == "log+server_info"


def test_a_401_is_returned_as_facts_error_and_the_log_is_kept(monkeypatch):
    def refuse(url, api_key, timeout):
        raise PermissionError(f"{url}/server_info answered 401: set api_key (or the service's EnvironmentFile)")
    monkeypatch.setattr(_server_facts, "_fetch_server_info", refuse)
    result = _server_deploy.ServerDeployment(StubModule(), {}).facts("abc", "one\ntwo\n")
    assert result["facts"] is None and "answered 401" in result["facts_error"]
    assert result["startup_log"] == "one\ntwo\n" and result["log_lines"] == 2
