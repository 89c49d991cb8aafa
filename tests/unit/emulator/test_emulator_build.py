# Copyright (c) llmops.sglang contributors
# Apache License 2.0 (see LICENSE)
"""tests/emulator/build.py: relocatable venvs with the emulator dists, one per release the profiles play, each with
its checkout at the release's tag, cached by a source stamp.

Installs from PyPI (the emulator's own dependencies); ray is left out here to keep the test quick.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from tests.emulator.build import STAMP_NAME, build, release_paths
from tests.emulator.profiles import EMULATOR_DIR, profile_releases

pytestmark = pytest.mark.skipif(not os.access("/usr/bin/python3", os.X_OK), reason="needs Debian's python3")


@pytest.fixture(name="payload", scope="module")
def payload_fixture(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Path]]:
    dest = tmp_path_factory.mktemp("emulator-build") / "payload"
    return dest, build(dest, venv_target="/opt/sglang/venv", requirements=())


def test_build_installs_retargets_and_caches(payload: tuple[Path, dict[str, Path]]) -> None:
    dest, paths = payload
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
    assert paths["venv"] == release_paths(dest, "0.5.11")["venv"]
    stamp = (dest / STAMP_NAME).stat().st_mtime_ns
    assert build(dest, venv_target="/opt/sglang/venv", requirements=()) == paths
    assert (dest / STAMP_NAME).stat().st_mtime_ns == stamp


def test_every_profiles_release_has_its_venv_and_tagged_checkout(payload: tuple[Path, dict[str, Path]]) -> None:
    dest, _ = payload
    assert profile_releases() == ["0.5.11", "0.5.23"]  # demo.yaml and newest.yaml
    probe = ("import importlib.metadata as m, json, sglang, triton; "
             "print(json.dumps([m.version('sglang'), sglang.__version__, m.version('triton')]))")
    for release in profile_releases():
        paths = release_paths(dest, release)
        versions = json.loads(subprocess.run([str(paths["venv"] / "bin" / "python"), "-c", probe], capture_output=True,
                                             text=True, check=True, env={"PATH": "/usr/bin:/bin"}).stdout)
        assert versions == [release, release, "3.6.0"]
        assert (paths["venv"] / "bin" / "pip").read_text().splitlines()[0].startswith("#!/opt/sglang/venv/bin/python")
        tag = subprocess.run(["git", "-C", str(paths["src"]), "describe", "--tags"], capture_output=True, text=True,
                             check=True).stdout.strip()
        assert tag == f"v{release}"


def test_the_wheelhouse_holds_every_release_its_triton_and_what_it_needs_to_run(payload) -> None:
    dest, paths = payload
    names = sorted(path.name for path in paths["wheelhouse"].iterdir())
    for release in ("0.5.10", "0.5.11", "0.5.17", "0.5.23", "0.5.24"):
        assert f"sglang-{release}-py3-none-any.whl" in names
    assert {"triton-3.5.1-py3-none-any.whl", "triton-3.6.0-py3-none-any.whl", "triton-3.9.0-py3-none-any.whl"} <= set(names)
    assert all(any(name.startswith(f"{dependency}-") for name in names) for dependency in ("aiohttp-3.13.2", "pyyaml", "scipy"))
    with zipfile.ZipFile(paths["wheelhouse"] / "sglang-0.5.24-py3-none-any.whl") as wheel:
        metadata = wheel.read("sglang-0.5.24.dist-info/METADATA").decode()
    assert "Requires-Dist: triton==3.9.0" in metadata.splitlines()
    assert not (release_paths(dest, "0.5.24")["venv"]).exists()  # no profile plays it: a wheel only


def test_0_5_10_keeps_its_config_module_and_configs_where_the_real_0_5_10_does(payload) -> None:
    """PyPI sglang 0.5.10: sglang/srt/layers/moe/fused_moe_triton/fused_moe_triton_config.py, configs/ beside it, no
    moe_runner/triton_utils/ (0.5.11 moved it there); torch==2.9.1 brings Triton 3.5.1."""
    _, paths = payload
    with zipfile.ZipFile(paths["wheelhouse"] / "sglang-0.5.10-py3-none-any.whl") as wheel:
        names = wheel.namelist()
        metadata = wheel.read("sglang-0.5.10.dist-info/METADATA").decode().splitlines()
    old = "sglang/srt/layers/moe/fused_moe_triton/"
    assert {f"{old}__init__.py", f"{old}fused_moe_triton_config.py",
            f"{old}configs/triton_3_5_1/E=257,N=256,device_name=NVIDIA_H200,dtype=fp8_w8a8,block_shape=[128, 128].json"} <= set(names)
    assert not [name for name in names if "/triton_utils/" in name]
    assert "Requires-Dist: triton==3.5.1" in metadata


def test_0_5_10s_server_and_engine_find_its_config_module_there(payload, tmp_path) -> None:
    """sglang._emulator.moe_layout.config_module, which the emulated server and engine look configs up with, gives the
    old location in an unpacked 0.5.10 wheel, so its lookup reads the configs/ beside it."""
    _, paths = payload
    with zipfile.ZipFile(paths["wheelhouse"] / "sglang-0.5.10-py3-none-any.whl") as wheel:
        wheel.extractall(tmp_path / "site")
    probe = ("from sglang._emulator.moe_layout import config_module; module = config_module(); "
             "print(module.__name__, module.get_config_dir())")
    found = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True,
                           env={"PATH": "/usr/bin:/bin", "PYTHONPATH": f"{tmp_path / 'site'}:{EMULATOR_DIR / 'triton'}"})
    assert found.stdout.split() == ["sglang.srt.layers.moe.fused_moe_triton.fused_moe_triton_config",
                                    str(tmp_path / "site" / "sglang" / "srt" / "layers" / "moe" / "fused_moe_triton")]
