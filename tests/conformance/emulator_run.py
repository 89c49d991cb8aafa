# Copyright (c) llmops.sglang contributors
# Apache License 2.0 (see LICENSE)
"""Run the SGLang emulator (tests/emulator) once for a profile and give back its --help and startup log.

The profile (its effective document, ``base`` merged in) is copied with ``time_scale`` 0.001 (startup in well
under a second) and otherwise unchanged,
so the release it names (``sglang_version``) and everything it logs are the profile's own.
"""
from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import yaml

from tests.emulator.profiles import profile_document

ROOT = Path(__file__).resolve().parents[2]
EMULATOR = ROOT / "tests" / "emulator"
QWEN = str(EMULATOR / "models" / "Qwen3.5-122B-A10B")
READY = "The server is fired up and ready to roll!"


def _env(profile: Path, state_dir: Path) -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": f"{EMULATOR / 'sglang'}:{EMULATOR / 'triton'}", "COLUMNS": "100",
            "SGLANG_EMULATOR_PROFILE": str(profile), "SGLANG_EMULATOR_STATE_DIR": str(state_dir)}


def fast_profile(profile: Path, directory: Path) -> Path:
    """The profile's effective document (its ``base`` merged in) with a fast clock (its start too) and a fixed
    seed."""
    document = profile_document(profile)
    document.update(time_scale=0.001, seed=7, startup={**document["startup"], "time_scale": None})
    target = directory / profile.name
    target.write_text(yaml.safe_dump(document), encoding="utf-8")
    return target


def emulator_help(profile: Path, directory: Path) -> str:
    result = subprocess.run([sys.executable, "-m", "sglang.launch_server", "--help"], capture_output=True, text=True,
                            env=_env(fast_profile(profile, directory), directory / "state"), timeout=60,
                            cwd=directory, check=False)
    if result.returncode != 0:
        raise RuntimeError(result.stderr[-2000:])
    return result.stdout


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def emulator_startup_log(profile: Path, directory: Path, args: list[str]) -> str:
    """stderr of one start until it is ready (then the server is stopped by its pid)."""
    log_path = directory / "server.log"
    with log_path.open("w", encoding="utf-8") as log:
        process = subprocess.Popen(
            [sys.executable, "-m", "sglang.launch_server", "--model-path", QWEN, *args, "--port", str(_free_port())],
            stdout=log, stderr=subprocess.STDOUT, env=_env(fast_profile(profile, directory), directory / "state"),
            cwd=directory)
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            text = log_path.read_text(encoding="utf-8", errors="replace")
            if READY in text or process.poll() is not None:
                return text
            time.sleep(0.1)
        raise TimeoutError(f"the emulator did not become ready: {log_path.read_text(encoding='utf-8')[-2000:]}")
    finally:
        process.terminate()
        try:
            process.wait(15)
        except subprocess.TimeoutExpired:
            process.kill()
