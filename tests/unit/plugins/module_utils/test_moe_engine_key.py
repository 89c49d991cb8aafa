# Copyright (c) llmops.sglang contributors
# Apache License 2.0 (see LICENSE)
"""The engine cache's key: what it holds, its canonical address, and the host probe run by a real interpreter
against installed-package layouts (a release's kernel module, an older release's, the emulator's)."""
from __future__ import annotations

import hashlib
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from ansible_collections.llmops.sglang.plugins.module_utils.moe_engine import ENGINE_VERSION
from ansible_collections.llmops.sglang.plugins.module_utils.moe_engine_key import (
    cache_key, canonical, host_mismatch, key_sha256, probe_host, result_host_parts)

GPU = {"name": "NVIDIA H100 80GB HBM3", "compute_capability": "9.0"}
PROBE = {"triton": "3.6.0", "kernel_source_sha256": "ab" * 32}
SHAPE = {"E": 256, "N": 256, "hidden": 3072, "topk": 8, "dtype": "bf16"}
QUANT = {"dtype": "auto", "per_channel_quant": False, "block_shape": None}
SPACE = {"mode": "pruned", "sha256": "cd" * 32}


def key(**changes) -> dict:
    parts = {"gpu": GPU, "probe": PROBE, "shape": SHAPE, "quantisation": QUANT, "kernel": "up",
             "batch_sizes": [64, 1, 8], "search_space": SPACE, **changes}
    return cache_key(**parts)


def test_the_key_holds_what_makes_a_config_valid_and_the_question_it_answers():
    built = key()
    assert built == {"schema": 1, "engine_version": ENGINE_VERSION, "gpu_name": GPU["name"], "gpu_capability": "9.0",
                     "triton": "3.6.0", "kernel_source_sha256": "ab" * 32, "shape": SHAPE, "quantisation": QUANT,
                     "kernel": "up", "batch_sizes": [1, 8, 64], "search_space": SPACE}


def test_the_address_is_the_sha256_of_the_canonical_json_whatever_the_order():
    built = key()
    reordered = dict(reversed(list(built.items())))
    reordered["shape"] = dict(reversed(list(SHAPE.items())))
    assert canonical(reordered) == canonical(built)
    assert canonical(built).startswith(b'{"batch_sizes":[1,8,64],"engine_version":')  # sorted keys, no spaces
    assert key_sha256(reordered) == key_sha256(built) == hashlib.sha256(canonical(built)).hexdigest()
    assert key(batch_sizes=[64, 8, 1]) == built  # the batch sizes are a set


@pytest.mark.parametrize("changes", [
    {"gpu": {**GPU, "name": "NVIDIA H200"}}, {"gpu": {**GPU, "compute_capability": "9.1"}},
    {"probe": {**PROBE, "triton": "3.5.1"}}, {"probe": {**PROBE, "kernel_source_sha256": "ef" * 32}},
    {"shape": {**SHAPE, "N": 128}}, {"shape": {**SHAPE, "E": 128}}, {"shape": {**SHAPE, "dtype": "fp16"}},
    {"quantisation": {**QUANT, "dtype": "fp8_w8a8"}}, {"quantisation": {**QUANT, "block_shape": [128, 128]}},
    {"kernel": "down"}, {"batch_sizes": [1, 8]}, {"search_space": {"mode": "full", "sha256": None}},
])
def test_every_part_changes_the_address(changes):
    assert key_sha256(key(**changes)) != key_sha256(key())


def test_a_part_the_host_cannot_tell_leaves_no_key_and_is_named():
    with pytest.raises(ValueError, match=r"the host does not tell kernel_source_sha256 \(No module named 'triton'\)"):
        key(probe={"triton": "3.6.0", "kernel_source_sha256": None, "problem": "No module named 'triton'"})
    with pytest.raises(ValueError, match="gpu_capability"):
        key(gpu={**GPU, "compute_capability": None})


def test_the_engine_result_is_compared_with_the_probe():
    result = {"device": {"name": GPU["name"], "capability": [9, 0]},
              "release": {"triton": "3.6.0", "kernel_source_sha256": "ab" * 32, "sglang": "0.5.23"}}
    assert result_host_parts(result) == {"gpu_name": GPU["name"], "gpu_capability": "9.0", "triton": "3.6.0",
                                         "kernel_source_sha256": "ab" * 32}
    assert host_mismatch(key(), result_host_parts(result)) == []
    result["release"]["triton"] = "3.5.1"
    assert host_mismatch(key(), result_host_parts(result)) == ["triton: probe '3.6.0', engine '3.5.1'"]


# --- the probe, run by a real interpreter ------------------------------------------------------------------------


def _write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def _run_with(site: Path):
    def run(argv):
        done = subprocess.run(argv, env={"PYTHONPATH": str(site)}, capture_output=True, text=True, check=False)
        return done.returncode, done.stdout, done.stderr
    return run


@pytest.fixture
def site(tmp_path: Path) -> Path:
    _write(tmp_path / "triton" / "__init__.py", '__version__ = "3.6.0"\n')
    # Importing sglang would fail: the probe must find the kernel file without running the package's __init__.
    _write(tmp_path / "sglang" / "__init__.py", 'raise ImportError("importing sglang pulls in torch")\n')
    return tmp_path


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_the_probe_hashes_the_kernel_module_the_engine_imports_without_importing_sglang(site):
    current = _write(site / "sglang" / "kernels" / "ops" / "moe" / "fused_moe_triton_kernels.py", "kernel = 1\n")
    _write(site / "sglang" / "srt" / "layers" / "moe" / "fused_moe_triton" / "fused_moe_triton_kernels.py", "old\n")
    probe = probe_host(_run_with(site), sys.executable)
    assert probe == {"triton": "3.6.0", "kernel_source": str(current), "kernel_source_sha256": _sha(current)}


def test_an_older_release_has_its_kernels_beside_the_layer(site):
    older = _write(site / "sglang" / "srt" / "layers" / "moe" / "fused_moe_triton" / "fused_moe_triton_kernels.py",
                   "kernel = 0\n")
    assert probe_host(_run_with(site), sys.executable)["kernel_source_sha256"] == _sha(older)


def test_on_an_emulator_host_the_emulated_kernel_model_is_the_source(site):
    model = _write(site / "sglang" / "_emulator" / "kernels.py", "model = 1\n")
    _write(site / "sglang" / "_emulator" / "__init__.py", "")
    _write(site / "sglang" / "_emulator" / "moe_engine_bench.py",
           f"def kernel_source_file():\n    return {str(model)!r}\n")
    (site / "sglang" / "__init__.py").write_text("")
    assert probe_host(_run_with(site), sys.executable)["kernel_source_sha256"] == _sha(model)


def test_a_probe_that_cannot_tell_reports_none_and_why(site):
    assert probe_host(_run_with(site), sys.executable)["kernel_source_sha256"] is None  # no kernel module installed
    shutil.rmtree(site / "triton")
    probe = probe_host(_run_with(site), sys.executable)
    assert probe["triton"] is None and probe["kernel_source_sha256"] is None
    assert "No module named 'triton'" in probe["problem"]
