# Copyright (c) llmops.sglang contributors
# Apache License 2.0 (see LICENSE)
"""Emulated GPU occupancy shared between the server and the nvidia-smi stand-in.

A running server writes `<state_dir>/gpu-usage-<pid>.json` ({"process_name", "memory_mib": {gpu index:
MiB}}) and removes it on exit; nvidia-smi sums the files of live processes, so memory.used and
the process table show a loaded model exactly while one runs. State dir: $SGLANG_EMULATOR_STATE_DIR,
else the profile's `state_dir`.
"""
from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

STATE_DIR_ENV = "SGLANG_EMULATOR_STATE_DIR"


@dataclass(frozen=True)
class GpuProcess:
    pid: int
    gpu_index: int
    process_name: str
    memory_mib: int


def state_dir(profile_state_dir: str) -> Path:
    return Path(os.environ.get(STATE_DIR_ENV) or profile_state_dir)


def write_usage(directory: Path, process_name: str, memory_mib: dict[int, int]) -> Path:
    if not directory.is_dir():
        directory.mkdir(parents=True, exist_ok=True)
        directory.chmod(0o1777)  # like /dev/shm itself: servers of any user publish here
    path = directory / f"gpu-usage-{os.getpid()}.json"
    temporary = path.with_suffix(".tmp")
    temporary.write_text(json.dumps({"process_name": process_name, "memory_mib": memory_mib}), encoding="utf-8")
    temporary.replace(path)
    return path


def remove_usage(directory: Path) -> None:
    (directory / f"gpu-usage-{os.getpid()}.json").unlink(missing_ok=True)


def read_processes(directory: Path) -> list[GpuProcess]:
    """Processes holding emulated GPU memory; files of dead processes are ignored."""
    processes = []
    for path in sorted(directory.glob("gpu-usage-*.json")):
        pid = int(path.stem.removeprefix("gpu-usage-"))
        if not _alive(pid):
            continue
        try:
            usage = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        processes += [
            GpuProcess(pid, int(index), usage["process_name"], int(mib)) for index, mib in usage["memory_mib"].items()
        ]
    return processes


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
