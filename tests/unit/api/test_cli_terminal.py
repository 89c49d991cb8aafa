"""The CLI as a user sees it: in a pseudo-terminal (rich: colors, live progress) and redirected (plain lines)."""
from __future__ import annotations

import fcntl
import os
import pty
import re
import shutil
import signal
import struct
import subprocess
import sys
import termios
import time
from pathlib import Path

import pytest

from tests.unit.api.scripted_cli import DEMO_RUN

SCRIPTED_CLI = Path(__file__).with_name("scripted_cli.py")
CLI = [sys.executable, "-m", "llmops_sglang.cli"]
ESC = "\x1b"
SPINNER_FRAMES = "⠋⠙⠹⠸⠼⠴⠦⠧⠇⠏"  # rich's "dots" spinner
STYLE_CODE = re.compile(r"\x1b\[[0-9;]*m")


def terminal_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if k not in ("NO_COLOR", "FORCE_COLOR", "TTY_COMPATIBLE", "TTY_INTERACTIVE", "COLUMNS", "LINES")}
    return {**env, "TERM": "xterm-256color"}


def default_sigint() -> None:
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def run_in_terminal(argv: list[str], interrupt_after: str | None = None,
                    env: dict[str, str] | None = None) -> tuple[int, str]:
    """Run ``argv`` with a 160x40 pseudo-terminal as its stdin/stdout/stderr; returns its exit code and output.
    With ``interrupt_after``, press Ctrl-C (SIGINT) once that text has appeared."""
    controller, terminal = pty.openpty()
    fcntl.ioctl(terminal, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 160, 0, 0))
    # Ctrl-C as a user's terminal delivers it: SIGINT at its default in the program, even when pytest itself runs
    # as a background job of a non-interactive shell (scripts/gates.sh), where the shell leaves it ignored.
    with subprocess.Popen(argv, stdin=terminal, stdout=terminal, stderr=terminal,
                          env={**terminal_env(), **(env or {})}, preexec_fn=default_sigint) as process:
        os.close(terminal)
        output = b""
        while True:
            try:
                chunk = os.read(controller, 65536)
            except OSError:  # EIO: the program closed the terminal
                break
            if not chunk:
                break
            output += chunk
            if interrupt_after and interrupt_after.encode() in output:
                process.send_signal(signal.SIGINT)
                interrupt_after = None
        os.close(controller)
        return process.wait(timeout=60), output.decode("utf-8", "replace")


def run_redirected(argv: list[str]) -> tuple[int, str]:
    done = subprocess.run(argv, capture_output=True, text=True, env=terminal_env(), timeout=60, check=False)
    return done.returncode, done.stdout


@pytest.fixture
def runs_dir(tmp_path) -> Path:
    shutil.copytree(DEMO_RUN, tmp_path / "20261130T200107Z")
    return tmp_path


def test_runs_in_a_terminal_is_a_rich_table(runs_dir):
    code, out = run_in_terminal([*CLI, "runs", "--runs-dir", str(runs_dir)])
    assert code == 0
    assert "\x1b[1m" in out  # bold header: rich styled it for the terminal
    text = STYLE_CODE.sub("", out)
    assert "20261130T200107Z" in text and "gpu1: +5.7% at C=64, adopted moe_tune" in text


def test_runs_redirected_has_no_control_codes(runs_dir):
    code, out = run_redirected([*CLI, "runs", "--runs-dir", str(runs_dir)])
    assert code == 0 and ESC not in out and "gpu1: +5.7% at C=64, adopted moe_tune" in out


def test_tune_in_a_terminal_shows_live_progress():
    code, out = run_in_terminal([sys.executable, str(SCRIPTED_CLI), "tune", "-i", "inv"])
    assert code == 0
    assert "\x1b[?25l" in out  # the live view hides the cursor while it redraws
    assert any(frame in out for frame in SPINNER_FRAMES)
    text = STYLE_CODE.sub("", out)
    assert "MoE tuning > Tune the up kernel" in text and "MoE tuning > Sweep it  gpu1" in text  # the live status line
    assert "2/4 batch sizes" in text and "C=64: 13,360.2 tok/s aggregate" in text
    assert "llmops.sglang.tune: successful" in text


def test_tune_redirected_prints_plain_lines():
    code, out = run_redirected([sys.executable, str(SCRIPTED_CLI), "tune", "-i", "inv"])
    assert code == 0 and ESC not in out
    assert "[MoE tuning] Tune the up kernel\n" in out and "[MoE tuning] gpu1 C=64: 13,360.2 tok/s aggregate\n" in out
    assert not any(frame in out for frame in SPINNER_FRAMES)


def test_a_failed_tune_exits_1_in_a_terminal_too(monkeypatch):
    monkeypatch.setenv("SCRIPTED_STATUS", "failed")
    code, out = run_in_terminal([sys.executable, str(SCRIPTED_CLI), "tune", "-i", "inv"])
    assert code == 1 and "the sweep stopped early" in out


def test_ctrl_c_stops_the_run_and_says_how_to_resume():
    started = time.monotonic()
    code, out = run_in_terminal([sys.executable, str(SCRIPTED_CLI), "tune", "-i", "inv", "--run-id", "r7"],
                                interrupt_after="== MoE tuning", env={"SCRIPTED_PAUSE_S": "60"})
    assert code == 130 and time.monotonic() - started < 60  # the scripted run stopped at the cancel, not after 60 s
    assert "interrupted: the playbook was stopped; resume with --run-id r7" in STYLE_CODE.sub("", out)
