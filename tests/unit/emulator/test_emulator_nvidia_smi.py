# Copyright (c) llmops.sglang contributors
# Apache License 2.0 (see LICENSE)
"""The nvidia-smi stand-in (tests/emulator/bin/nvidia-smi) run as a process, as the collection runs it."""
from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

EMULATOR = Path(__file__).resolve().parents[2] / "emulator"
GPU_NAME = "NVIDIA RTX PRO 6000 Blackwell Server Edition"
ALL_FIELDS = ("index,name,uuid,memory.total,memory.used,memory.free,compute_cap,driver_version,power.limit,"
              "pci.bus_id,utilization.gpu")


def nvidia_smi(tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(EMULATOR / "sglang"),
           "SGLANG_EMULATOR_PROFILE": str(EMULATOR / "profiles" / "demo.yaml"),
           "SGLANG_EMULATOR_STATE_DIR": str(tmp_path / "state")}
    return subprocess.run([sys.executable, str(EMULATOR / "bin" / "nvidia-smi"), *args], capture_output=True,
                          text=True, env=env, timeout=30)


def test_query_with_header_and_units(tmp_path: Path) -> None:
    result = nvidia_smi(tmp_path, f"--query-gpu={ALL_FIELDS}", "--format=csv")
    lines = result.stdout.splitlines()
    assert result.returncode == 0 and len(lines) == 5
    assert lines[0] == ("index, name, uuid, memory.total [MiB], memory.used [MiB], memory.free [MiB], compute_cap, "
                        "driver_version, power.limit [W], pci.bus_id, utilization.gpu [%]")
    first = lines[1].split(", ")
    assert first[:2] == ["0", GPU_NAME] and re.fullmatch(r"GPU-[0-9a-f]{8}(-[0-9a-f]{4}){3}-[0-9a-f]{12}", first[2])
    assert first[3:] == ["97887 MiB", "0 MiB", "97249 MiB", "12.0", "580.95.05", "600.00 W", "00000000:01:00.0", "0 %"]
    assert len({line.split(", ")[2] for line in lines[1:]}) == 4


def test_query_noheader_nounits_and_id_selection(tmp_path: Path) -> None:
    result = nvidia_smi(tmp_path, "--query-gpu", "name,memory.total,compute_cap", "--format=csv,noheader,nounits",
                        "-i", "1,3")
    assert result.stdout.splitlines() == [f"{GPU_NAME}, 97887, 12.0"] * 2


def test_unknown_field_is_rejected_like_nvidia_smi(tmp_path: Path) -> None:
    result = nvidia_smi(tmp_path, "--query-gpu=index,memory.bogus", "--format=csv")
    assert result.returncode == 2
    assert result.stdout.splitlines()[0] == 'Field "memory.bogus" is not a valid field to query.'


def test_list_gpus(tmp_path: Path) -> None:
    lines = nvidia_smi(tmp_path, "-L").stdout.splitlines()
    assert len(lines) == 4
    assert re.fullmatch(rf"GPU 3: {GPU_NAME} \(UUID: GPU-[0-9a-f-]{{36}}\)", lines[3])


def test_topology_matrix(tmp_path: Path) -> None:
    lines = nvidia_smi(tmp_path, "topo", "-m").stdout.splitlines()
    assert lines[0].split("\t")[1:] == ["GPU0", "GPU1", "GPU2", "GPU3", "CPU Affinity", "NUMA Affinity", "GPU NUMA ID"]
    assert lines[1].split("\t")[:5] == ["GPU0", " X ", "NODE", "SYS", "SYS"]
    assert lines[4].split("\t")[1:6] == ["SYS", "SYS", "NODE", " X ", "32-63"]
    assert "  NV#  = Connection traversing a bonded set of # NVLinks" in lines


def test_plain_table(tmp_path: Path) -> None:
    output = nvidia_smi(tmp_path, ).stdout
    lines = output.splitlines()
    assert "| NVIDIA-SMI 580.95.05              Driver Version: 580.95.05      CUDA Version: 13.0     |" in lines
    table = [line for line in lines[1:] if line]
    assert all(len(line) == 91 for line in table), [line for line in table if len(line) != 91]
    assert sum("0MiB /  97887MiB" in line or "0MiB / 97887MiB" in line for line in lines) == 4
    assert "No running processes found" in output


@pytest.mark.parametrize("args", [["--query-gpu=index"], ["--bogus"], ["topo"]])
def test_bad_invocations_exit_2(tmp_path: Path, args: list[str]) -> None:
    result = nvidia_smi(tmp_path, *args)
    assert result.returncode == 2 and "Invalid combination of input arguments" in result.stdout
