# Copyright (c) llmops.sglang contributors
# Apache License 2.0 (see LICENSE)
"""tests/emulator/build.py: a relocatable venv with the emulator dists, cached by a source stamp.

Installs from PyPI (the emulator's own dependencies); ray is left out here to keep the test quick.
"""
from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from tests.emulator.build import STAMP_NAME, build

pytestmark = pytest.mark.skipif(not os.access("/usr/bin/python3", os.X_OK), reason="needs Debian's python3")


def test_build_installs_retargets_and_caches(tmp_path: Path) -> None:
    dest = tmp_path / "payload"
    paths = build(dest, venv_target="/opt/sglang/venv", requirements=())
    python = paths["venv"] / "bin" / "python"
    probe = ("import importlib.metadata as m, json, os, sglang, triton, "
             "sglang.srt.layers.moe.moe_runner.triton_utils as t; "
             "print(json.dumps([m.version('sglang'), m.version('triton'), sglang.__version__, "
             "sorted(os.listdir(os.path.join(os.path.dirname(t.__file__), 'configs', 'triton_3_5_1')))]))")
    versions = json.loads(subprocess.run([str(python), "-c", probe], capture_output=True, text=True, check=True,
                                         env={"PATH": "/usr/bin:/bin"}).stdout)
    assert versions[:3] == ["0.5.11", "3.6.0", "0.5.11"]
    assert versions[3] == ["E=257,N=256,device_name=NVIDIA_H200,dtype=fp8_w8a8,block_shape=[128, 128].json",
                           "E=257,N=256,device_name=NVIDIA_H200,dtype=fp8_w8a8,block_shape=[128, 128]_down.json"]
    pip_shebang = (paths["venv"] / "bin" / "pip").read_text().splitlines()[0]
    assert pip_shebang.startswith("#!/opt/sglang/venv/bin/python")
    assert paths["nvidia_smi"].read_text().splitlines()[0] == "#!/opt/sglang/venv/bin/python"
    assert os.access(paths["nvidia_smi"], os.X_OK)
    assert (paths["models"] / "Qwen3.5-122B-A10B" / "config.json").is_file()
    assert (paths["profiles"] / "demo.yaml").is_file()
    stamp = (dest / STAMP_NAME).stat().st_mtime_ns
    assert build(dest, venv_target="/opt/sglang/venv", requirements=()) == paths
    assert (dest / STAMP_NAME).stat().st_mtime_ns == stamp
