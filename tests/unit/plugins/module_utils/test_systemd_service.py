# Copyright (c) llmops.sglang contributors
# Apache License 2.0 (see LICENSE)
"""The cause of a failed start when the log names no error, and the wait that follows a start's journal (its log,
read once)."""
from __future__ import annotations

from pathlib import Path

import pytest

from ansible_collections.llmops.sglang.plugins.module_utils import systemd_service
from ansible_collections.llmops.sglang.plugins.module_utils._server_facts import startup_facts
from ansible_collections.llmops.sglang.plugins.module_utils.startup_log import parse_startup_log
from ansible_collections.llmops.sglang.plugins.module_utils.systemd_service import (
    READY_MARKER, start_failure, wait_until_ready)


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


# --- the wait follows the start's journal, and that is its log ----------------------------------------------------

LOGS = Path(__file__).resolve().parents[3] / "fixtures" / "logs"


def big_start_log() -> str:
    """A real start's log with >64 KB of lines between the server_args dump and the ready marker."""
    lines = (LOGS / "modern_tp4_spec_baseline.log").read_text(encoding="utf-8").splitlines(keepends=True)
    args_line = next(i for i, line in enumerate(lines) if "server_args=ServerArgs(" in line)
    filler = [f"Mar 09 21:32:0{i % 10} gpu-node-01 sglang[48390]: [2026-03-09 21:32:00 TP0] padding line {i}\n"
              for i in range(2000)]
    return "".join(lines[:args_line + 1] + filler + lines[args_line + 1:])


class FakeHost:
    """systemctl show answers from ``states`` (the last repeats); journalctl (not followed) prints ``journal``."""

    def __init__(self, journal: str, states=(("active", "running"),)) -> None:
        self.journal, self.states, self.calls = journal, list(states), []

    def run(self, argv):
        self.calls.append(argv)
        if argv[0] == "systemctl":
            active, sub = self.states.pop(0) if len(self.states) > 1 else self.states[0]
            return 0, f"ActiveState={active}\nSubState={sub}\nInvocationID=abc123\nMainPID=7\nNRestarts=0\n", ""
        assert argv == systemd_service.journal_argv("abc123"), argv
        return 0, self.journal, ""

    @property
    def journal_reads(self) -> int:
        return sum(argv[0] == "journalctl" for argv in self.calls)


@pytest.fixture
def follow(monkeypatch, tmp_path):
    """The follower prints a file (then stays, as journalctl --follow does, unless ``then_exit``) instead of the
    host's journal; /health answers 200."""
    def arrange(text: str, then_exit: bool = False) -> None:
        path = tmp_path / "journal.txt"
        path.write_bytes(text.encode("utf-8", errors="surrogateescape"))
        real = systemd_service.journal_argv

        def journal_argv(invocation_id, follow=False):
            if not follow:
                return real(invocation_id)
            assert real(invocation_id, follow=True)[-3:] == ["--follow", "--no-tail", "_SYSTEMD_INVOCATION_ID=abc123"]
            return ["sh", "-c", f'cat "$0"{"" if then_exit else "; exec sleep 60"}', str(path)]
        monkeypatch.setattr(systemd_service, "journal_argv", journal_argv)
    monkeypatch.setattr(systemd_service, "health_status", lambda url, timeout_s=2.0: 200)
    return arrange


def test_the_followed_journal_over_64k_is_the_whole_log_and_is_read_once(follow):
    text = big_start_log()
    assert len(text.encode()) > 2 * 65536 and READY_MARKER in text
    follow(text)
    host = FakeHost(journal=text)
    ready = wait_until_ready(host.run, "sglang.service", "http://127.0.0.1:30000/health", timeout_s=30)
    assert ready.ready and ready.reason == "ready" and ready.health_status == 200
    assert ready.followed and ready.log == text
    assert host.journal_reads == 0, "the journal the wait followed is not read again"


def test_the_facts_of_the_followed_log_are_those_of_the_whole_start(follow):
    text = big_start_log()
    follow(text)
    ready = wait_until_ready(FakeHost(journal=text).run, "sglang.service", "http://x/health", timeout_s=30)
    facts = startup_facts(ready.log, None, None, 1)
    assert facts["facts"] == parse_startup_log(text) and facts["log_lines"] == text.count("\n")
    # the server_args dump is >64 KB before the marker: a 64 KB tail would not have it
    assert facts["facts"]["max_running_requests"] == 48 and facts["facts"]["server_args"]["tp_size"] == 4


def test_a_follow_that_ended_early_falls_back_to_one_read_of_the_journal(follow):
    text = big_start_log()
    follow(text[: len(text) // 2] + "[x] The server is fired up and ready to roll!\n", then_exit=True)
    host = FakeHost(journal=text)
    ready = wait_until_ready(host.run, "sglang.service", "http://x/health", timeout_s=30)
    assert ready.ready and not ready.followed
    assert ready.log == text and host.journal_reads == 1


def test_a_log_over_the_limit_is_read_from_the_journal_and_its_marker_still_seen(follow, monkeypatch):
    monkeypatch.setattr(systemd_service, "MAX_FOLLOWED_BYTES", 4096)
    text = big_start_log()
    follow(text)
    host = FakeHost(journal=text)
    ready = wait_until_ready(host.run, "sglang.service", "http://x/health", timeout_s=30)
    assert ready.ready and not ready.followed and ready.log == text and host.journal_reads == 1


def test_a_start_that_exits_keeps_its_followed_log(follow):
    text = (LOGS / "not_enough_memory.log").read_text(encoding="utf-8")
    follow(text)
    host = FakeHost(journal="not read", states=[("activating", "start"), ("failed", "failed")])
    ready = wait_until_ready(host.run, "sglang.service", "http://x/health", timeout_s=30)
    assert not ready.ready and ready.reason == "the service stopped while starting (state failed/failed)"
    assert ready.followed and ready.log == text and host.journal_reads == 0


def test_bytes_that_are_not_utf8_come_out_as_run_command_decodes_them(follow):
    text = "line \udcff\udcfe bytes\n[x] The server is fired up and ready to roll!\n"
    follow(text)
    ready = wait_until_ready(FakeHost(journal=text).run, "sglang.service", "http://x/health", timeout_s=30)
    assert ready.followed and ready.log == text
