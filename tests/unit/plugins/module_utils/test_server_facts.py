# Copyright (c) llmops.sglang contributors
# Apache License 2.0 (see LICENSE)
"""Unit tests for plugins/module_utils/_server_facts.py (the server_facts module's logic): a log file's facts,
merged with /server_info, every value with its source."""
from __future__ import annotations

from pathlib import Path

from ansible_collections.llmops.sglang.plugins.module_utils import _server_facts
from ansible_collections.llmops.sglang.plugins.module_utils.startup_log import parse_startup_log

LOGS = Path(__file__).resolve().parents[3] / "fixtures" / "logs"


def _params(**overrides) -> dict:
    return {"name": None, "log_file": None, "url": None, "api_key": None, "env_dir": "/nonexistent", "timeout": 1,
            **overrides}


def test_a_log_file_without_url_gives_the_parsed_facts_from_the_log():
    log = LOGS / "modern_tp4_spec_baseline.log"
    result = _server_facts.server_facts(_params(log_file=str(log)), run=None)
    text = log.read_text(encoding="utf-8", errors="replace")
    assert result["changed"] is False and "invocation_id" not in result
    assert result["log_lines"] == text.count("\n") and result["server_info"] is None and result["mismatches"] == []
    assert set(result["sources"].values()) <= {"log"} and result["facts"].keys() == parse_startup_log(text).keys()


def test_merge_adds_what_the_log_lacks_and_reports_disagreement():
    info = {"max_total_num_tokens": 12, "tp_size": 4, "model_path": "/m",
            "internal_states": [{"effective_max_running_requests_per_dp": 48}]}
    merged, sources, mismatches = _server_facts._merge({"tp_size": 4, "max_total_num_tokens": 10}, info)
    assert merged == {"tp_size": 4, "max_total_num_tokens": 10, "model_path": "/m", "max_running_requests": 48}
    assert sources == {"tp_size": "log+server_info", "max_total_num_tokens": "log", "model_path": "server_info",
                       "max_running_requests": "server_info"}
    assert mismatches == [{"fact": "max_total_num_tokens", "log": 10, "server_info": 12}]
