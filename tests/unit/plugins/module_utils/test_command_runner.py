# Copyright (c) llmops.sglang contributors
# Apache License 2.0 (see LICENSE)
"""The one command runner of the modules: forced locale, check-mode awareness, a clear error."""
from __future__ import annotations

import os
import sys

import pytest

from ansible_collections.llmops.sglang.plugins.module_utils.command_runner import (
    FORCED_LOCALE, CommandError, CommandRunner, command_environment)


class FakeModule:
    def __init__(self, check_mode: bool = False, answer: tuple = (0, "out", "")) -> None:
        self.check_mode, self.answer, self.calls = check_mode, answer, []

    def run_command(self, argv, environ_update=None, cwd=None):
        self.calls.append({"argv": argv, "environ_update": environ_update, "cwd": cwd})
        return self.answer


def test_the_locale_is_forced_over_every_other_environment():
    env = command_environment({"LC_ALL": "de_DE.UTF-8", "CUDA_VISIBLE_DEVICES": 0},
                              base={"PATH": "/bin", "LANGUAGE": "de"})
    assert env == {"PATH": "/bin", "CUDA_VISIBLE_DEVICES": "0", **FORCED_LOCALE}
    assert FORCED_LOCALE == {"LANGUAGE": "C", "LC_ALL": "C"}


def test_a_command_runs_with_the_runners_and_the_calls_environment():
    module = FakeModule()
    run = CommandRunner(module, environ={"SYSTEMD_PAGER": "", "A": "runner"})
    assert run(["systemctl", "show", "x"], environ={"A": "call"}, cwd="/tmp") == (0, "out", "")
    assert module.calls == [{"argv": ["systemctl", "show", "x"], "cwd": "/tmp",
                             "environ_update": {"SYSTEMD_PAGER": "", "A": "call", **FORCED_LOCALE}}]


def test_check_mode_skips_what_changes_the_host_and_runs_what_only_reads():
    module = FakeModule(check_mode=True, answer=(0, "ActiveState=active\n", ""))
    run = CommandRunner(module)
    assert run(["systemctl", "restart", "sglang.service"], changes=True) == (0, "", "")
    assert module.calls == []
    assert run(["systemctl", "show", "sglang.service"]) == (0, "ActiveState=active\n", "")
    assert [call["argv"][1] for call in module.calls] == ["show"]


def test_outside_check_mode_a_change_runs():
    module = FakeModule()
    CommandRunner(module)(["systemctl", "daemon-reload"], changes=True)
    assert module.calls[0]["argv"] == ["systemctl", "daemon-reload"]


def test_a_failed_command_names_the_command_its_rc_and_the_tail_of_its_stderr():
    module = FakeModule(answer=(3, "", "x" * 5000 + "Unit sglang.service not found."))
    with pytest.raises(CommandError) as caught:
        CommandRunner(module)(["systemctl", "show", "my unit"], check=True)
    message = str(caught.value)
    assert message.startswith("`systemctl show 'my unit'` failed (rc=3): ")
    assert message.endswith("Unit sglang.service not found.") and len(message) < 900
    assert caught.value.rc == 3
    assert CommandRunner(FakeModule(answer=(1, "", "")))(["false"]) == (1, "", "")  # check=False: the caller decides


def test_bound_fixes_environment_and_cwd():
    module = FakeModule()
    run = CommandRunner(module).bound(environ={"X": 1}, cwd="/srv")
    run(["python", "--help"])
    assert module.calls[0]["environ_update"]["X"] == "1" and module.calls[0]["cwd"] == "/srv"


def test_a_real_program_reads_the_forced_locale():
    code = "import os; print(os.environ['LC_ALL'], os.environ['LANGUAGE'])"
    import subprocess
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                          env=command_environment({"LC_ALL": "fr_FR.UTF-8"}, base=os.environ))
    assert done.stdout.split() == ["C", "C"]
