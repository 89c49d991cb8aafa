# Copyright (c) llmops.sglang contributors
# Apache License 2.0 (see LICENSE)
"""The launcher the unit runs (``<python> <launcher> sglang.launch_server ...``) as a real process: the key reaches
the module's argv in-process only, never /proc/<pid>/cmdline, the environment of any process or the output."""
from __future__ import annotations

import io
import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
import requests

from ansible_collections.llmops.sglang.plugins.module_utils import sglang_launcher
from ansible_collections.llmops.sglang.plugins.module_utils.sglang_launcher import (
    RedactingStream, parse_key, take_key)
from tests.unit.emulator.test_emulator_server import BASELINE, EMULATOR, READY, free_port, write_profile

LAUNCHER = Path(sglang_launcher.__file__)
KEY = "sk-unit-'quote\"and\\backslash-7f3a"
# A stand-in for sglang.launch_server: logs its args the way SGLang 0.5.11 does (`logger.info(f"{server_args=}")`
# after `logging.basicConfig(force=True)`), prints to stdout and to stdout's byte buffer, and reports what the
# process and one multiprocessing spawn child (how SGLang starts its schedulers) can see of the key.
FAKE_SERVER = textwrap.dedent('''
    import json, logging, multiprocessing, os, sys

    def child(path):
        with open(path, "w") as out:
            json.dump({"cmdline": open("/proc/self/cmdline", "rb").read().decode(),
                       "environ": open("/proc/self/environ", "rb").read().decode("utf-8", "replace"),
                       "env_key": os.environ.get("SGLANG_API_KEY")}, out)

    if __name__ == "__main__":
        logging.basicConfig(level=logging.INFO, format="[%(asctime)s] %(message)s", force=True)
        server_args = {"api_key": sys.argv[sys.argv.index("--api-key") + 1] if "--api-key" in sys.argv else None,
                       "argv": sys.argv[1:]}
        logging.getLogger("sglang.srt.entrypoints.engine").info(f"{server_args=}")
        print("plain print of the key:", server_args["api_key"])
        sys.stdout.flush()
        sys.stdout.buffer.write(("bytes: %s\\n" % server_args["api_key"]).encode())
        sys.stdout.buffer.flush()
        report = sys.argv[sys.argv.index("--report") + 1]
        with open(report, "w") as out:
            json.dump({"argv": sys.argv, "main_name": __name__, "spec": __spec__.name if __spec__ else None,
                       "cmdline": open("/proc/self/cmdline", "rb").read().decode(),
                       "environ": open("/proc/self/environ", "rb").read().decode("utf-8", "replace"),
                       "env_key": os.environ.get("SGLANG_API_KEY"), "path0": sys.path[0]}, out)
        process = multiprocessing.get_context("spawn").Process(target=child, args=(report + ".child",))
        process.start()
        process.join(30)
''')


def run_launcher(tmp_path: Path, *args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    package = tmp_path / "pkg"
    package.mkdir(exist_ok=True)
    (package / "fake_server.py").write_text(FAKE_SERVER)
    environment = {k: v for k, v in os.environ.items() if k not in ("SGLANG_API_KEY", "CREDENTIALS_DIRECTORY")}
    environment.update(PYTHONPATH=str(package), **(env or {}))
    return subprocess.run([sys.executable, str(LAUNCHER), "fake_server", *args], capture_output=True, text=True,
                          env=environment, cwd=tmp_path, timeout=60)


def credentials(tmp_path: Path, content: str) -> dict:
    directory = tmp_path / "credentials"
    directory.mkdir()
    (directory / "sglang-api-key").write_text(content)
    return {"CREDENTIALS_DIRECTORY": str(directory)}


def test_credential_key_reaches_the_module_in_process_only_and_is_masked_in_its_output(tmp_path: Path) -> None:
    report = tmp_path / "report.json"
    done = run_launcher(tmp_path, "--port", "1", "--report", str(report),
                        env=credentials(tmp_path, f"SGLANG_API_KEY={KEY}\n"))
    assert done.returncode == 0, done.stderr
    seen = json.loads(report.read_text())
    assert seen["argv"][-2:] == ["--api-key", KEY], "the module gets the key in its sys.argv"
    assert seen["main_name"] == "__main__" and seen["spec"] == "fake_server", "run as `python -m` would"
    assert seen["path0"] == str(tmp_path), "sys.path[0] is the working directory, as with -m"
    assert seen["cmdline"].split("\0")[:5] == [sys.executable, str(LAUNCHER), "fake_server", "--port", "1"]
    for name, where in (("cmdline", seen), ("environ", seen)):
        assert KEY not in where[name], f"the key is in the process's {name}"
    child = json.loads((tmp_path / "report.json.child").read_text())
    assert "multiprocessing" in child["cmdline"] and KEY not in child["cmdline"]
    assert KEY not in child["environ"] and child["env_key"] is None
    output = done.stdout + done.stderr
    for form in (KEY, repr(KEY)[1:-1], json.dumps(KEY)[1:-1]):
        assert form not in output
    assert "server_args={'api_key': '***', 'argv': [" in done.stderr, done.stderr
    assert "plain print of the key: ***" in done.stdout and "bytes: ***" in done.stdout


def test_environment_key_is_popped_so_no_child_inherits_it(tmp_path: Path) -> None:
    report = tmp_path / "report.json"
    done = run_launcher(tmp_path, "--report", str(report), env={"SGLANG_API_KEY": "sk-env-only-1234"})
    assert done.returncode == 0, done.stderr
    seen = json.loads(report.read_text())
    assert seen["argv"][-2:] == ["--api-key", "sk-env-only-1234"] and seen["env_key"] is None
    assert json.loads((tmp_path / "report.json.child").read_text())["env_key"] is None
    assert "sk-env-only-1234" not in done.stdout + done.stderr


def test_without_a_key_the_module_runs_unchanged(tmp_path: Path) -> None:
    report = tmp_path / "report.json"
    done = run_launcher(tmp_path, "--port", "1", "--report", str(report))
    assert done.returncode == 0, done.stderr
    assert json.loads(report.read_text())["argv"][1:] == ["--port", "1", "--report", str(report)]
    assert "'api_key': None" in done.stderr


@pytest.mark.parametrize("args", [["--api-key", "x"], ["--api-key=x"]])
def test_a_key_on_the_command_line_is_refused(tmp_path: Path, args: list[str]) -> None:
    done = run_launcher(tmp_path, *args)
    assert done.returncode != 0 and "readable by every local user" in done.stderr


def test_key_file_forms() -> None:
    assert parse_key("SGLANG_API_KEY=abc\n") == "abc"
    assert parse_key("# note\nSGLANG_API_KEY=a=b\n") == "a=b"
    assert parse_key("raw-key\n") == "raw-key"
    assert parse_key("") is None and parse_key("SGLANG_API_KEY=\n") is None
    environ = {"SGLANG_API_KEY": "from-env"}
    assert take_key(environ) == "from-env" and environ == {}


def test_redacting_stream_masks_every_escaping_of_the_key() -> None:
    target = io.StringIO()
    stream = RedactingStream(target, KEY)
    stream.write(f"server_args=ServerArgs(api_key={KEY!r}, x=1)\n")
    stream.writelines([json.dumps({"api_key": KEY}) + "\n", f"raw {KEY}\n"])
    assert KEY not in target.getvalue() and repr(KEY)[1:-1] not in target.getvalue()
    assert target.getvalue().count("***") == 3
    assert stream.getvalue is not None  # everything else is the wrapped stream's


def test_emulated_sglang_started_by_the_launcher_logs_the_key_masked(tmp_path: Path) -> None:
    """End to end with the emulator, which logs `server_args=ServerArgs(... api_key='...' ...)` as SGLang does."""
    port, key = free_port(), "sk-emu-9a8b7c6d"
    log_path = tmp_path / "server.log"
    environment = {k: v for k, v in os.environ.items() if k not in ("SGLANG_API_KEY", "SGLANG_MOE_CONFIG_DIR")}
    environment.update(PYTHONPATH=f"{EMULATOR / 'sglang'}:{EMULATOR / 'triton'}",
                       SGLANG_EMULATOR_PROFILE=str(write_profile(tmp_path)),
                       SGLANG_EMULATOR_STATE_DIR=str(tmp_path / "state"), **credentials(tmp_path, f"SGLANG_API_KEY={key}\n"))
    with open(log_path, "wb") as log:
        process = subprocess.Popen([sys.executable, str(LAUNCHER), "sglang.launch_server", *BASELINE, "--port", str(port)],
                                   stdout=log, stderr=subprocess.STDOUT, env=environment, cwd=tmp_path)
    try:
        deadline = time.monotonic() + 60
        while READY not in log_path.read_text() and process.poll() is None:
            assert time.monotonic() < deadline, log_path.read_text()[-3000:]
            time.sleep(0.05)
        url = f"http://127.0.0.1:{port}"
        assert requests.get(f"{url}/v1/models", timeout=5).status_code == 401
        assert requests.get(f"{url}/v1/models", headers={"Authorization": f"Bearer {key}"}, timeout=5).status_code == 200
        assert key not in Path(f"/proc/{process.pid}/cmdline").read_bytes().decode()
        assert key not in Path(f"/proc/{process.pid}/environ").read_bytes().decode("utf-8", "replace")
    finally:
        process.send_signal(signal.SIGTERM)
        process.wait(20)
    log = log_path.read_text()
    assert "api_key='***'" in log and key not in log
