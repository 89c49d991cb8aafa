# Copyright (c) llmops.sglang contributors
# Apache License 2.0 (see LICENSE)
"""Unit tests for the pure parts of plugins/module_utils/moe_engine.py (configs, plans, picks, checkpoints, jobs).

The engine as a program (pools, compiles, timing, resume, deadline) runs on the SGLang emulator in
tests/unit/emulator/test_moe_engine_emulated.py.
"""
from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

from ansible_collections.llmops.sglang.plugins.module_utils import moe_engine
from ansible_collections.llmops.sglang.plugins.module_utils.moe_engine import (
    CONFIG_KEYS, DEFAULT_TIMING, JobError, batch_size_groups, best_per_block_m, candidates, config_key, family,
    fingerprint, full_config, joint_pick, median, _MainSide, read_checkpoint, refine_set, sglang_file, stage_keys,
    stage_plan, validate_job, with_twins, write_json_atomically)

# SGLang's BF16 default configs (get_default_config, CUDA branch): num_warps/num_stages left to Triton.
DEFAULT_SMALL = {"BLOCK_SIZE_M": 16, "BLOCK_SIZE_N": 32, "BLOCK_SIZE_K": 64, "GROUP_SIZE_M": 1}
DEFAULT_LARGE = {"BLOCK_SIZE_M": 64, "BLOCK_SIZE_N": 64, "BLOCK_SIZE_K": 32, "GROUP_SIZE_M": 8}
SHAPE = {"E": 256, "N": 256, "hidden": 3072, "topk": 8, "dtype": "bf16"}


def config(bm: int, bn: int = 64, bk: int = 128, group: int = 1, warps: int = 4, stages: int = 3) -> dict:
    return {"BLOCK_SIZE_M": bm, "BLOCK_SIZE_N": bn, "BLOCK_SIZE_K": bk, "GROUP_SIZE_M": group, "num_warps": warps,
            "num_stages": stages}


def job(**changes) -> dict:
    base = {"shape": dict(SHAPE), "kernels": ["up", "down"], "batch_sizes": [1, 64], "configs": [config(16)],
            "work_dir": "/tmp/engine", "output": "/tmp/engine/result.json"}
    return {**base, **changes}


# --------------------------------------------------------------------------------------------- configs

def test_full_config_makes_tritons_defaults_explicit_and_keeps_launch_keys_only():
    assert full_config(DEFAULT_SMALL) == {**DEFAULT_SMALL, "num_warps": 4, "num_stages": 3}
    tuned = {**config(32, warps=8, stages=4), "USE_TMA": True, "kpack": 2}
    assert full_config(tuned) == config(32, warps=8, stages=4)
    assert list(full_config(tuned)) == list(CONFIG_KEYS)
    assert full_config({key: str(value) for key, value in config(16).items()}) == config(16)


def test_config_key_names_one_config():
    assert config_key(DEFAULT_SMALL) == "M16_N32_K64_G1_w4_s3"
    assert config_key(config(128, 256, 64, 32, 8, 2)) == "M128_N256_K64_G32_w8_s2"
    assert config_key(DEFAULT_SMALL) == config_key({**DEFAULT_SMALL, "num_warps": 4, "num_stages": 3})


def test_candidates_add_the_defaults_outside_the_space_once():
    space = [config(16, 32, 64), config(64, 128, 128, 16, 8, 4)]
    found = candidates(space, [DEFAULT_SMALL, DEFAULT_LARGE, DEFAULT_LARGE])
    # DEFAULT_SMALL with Triton's defaults is config(16, 32, 64): already in the space; DEFAULT_LARGE (K32) is not.
    assert list(found) == ["M16_N32_K64_G1_w4_s3", "M64_N128_K128_G16_w8_s4", "M64_N64_K32_G8_w4_s3"]
    assert found["M64_N64_K32_G8_w4_s3"] == full_config(DEFAULT_LARGE)
    assert all(found[key] == full_config(c) for key, c in zip(found, space))


# --------------------------------------------------------------------------------------------- plans and picks

def test_refine_set_keeps_the_leaders_and_the_best_two_of_every_block_size_m():
    times = {config_key(config(16, bn)): 10.0 + i for i, bn in enumerate((32, 64, 128, 256))}
    times.update({config_key(config(64, bn)): 20.0 + i for i, bn in enumerate((32, 64, 128, 256))})
    times[config_key(config(128))] = 40.0
    times[config_key(config(256))] = math.inf  # failed launches never count
    times[config_key(config(32))] = None
    keys = refine_set(times, share=0.1, minimum=1)
    assert keys == ["M16_N32_K128_G1_w4_s3", "M16_N64_K128_G1_w4_s3", "M64_N32_K128_G1_w4_s3",
                    "M64_N64_K128_G1_w4_s3", "M128_N64_K128_G1_w4_s3"]
    # The share (rounded up) or the minimum, whichever keeps more, on top of the per-BLOCK_SIZE_M pairs.
    assert len(refine_set(times, share=0.5, minimum=1)) == 7
    assert refine_set(times, share=0.0, minimum=6)[:6] == sorted(
        (key for key in times if times[key] is not None and math.isfinite(times[key])), key=times.get)[:6]


SIZES = [1, 2, 4, 8, 16, 24, 32, 48, 64, 96, 128, 256, 512, 1024, 1536, 2048, 3072, 4096]


def test_stage_plan_gives_the_largest_class_every_config_and_the_others_leaders_nearest_first():
    # sglang 0.5.23's up kernel on an H100 (benchmarks/results/moe_engine_gpu.json): M=1, M<=512 (GDC_EARLY), larger.
    groups = [[1], SIZES[1:13], SIZES[13:]]
    plan = [(stage["select"], stage["sizes"], stage.get("neighbours")) for stage in stage_plan(SIZES, groups)]
    assert plan == [("base", SIZES[1:13], None), ("twins", SIZES[1:13], SIZES[1:13]),
                    ("leaders", [1], [2]), ("climb", [1], None), ("climb", [1], None),
                    ("leaders", SIZES[13:], [512]), ("climb", SIZES[13:], None), ("climb", SIZES[13:], None)]
    # Down: {1}, {2..64}, {96..4096}: the 9-size class is screened in full; {2..64} from 96, then {1} from 2.
    down = [(stage["select"], stage.get("neighbours")) for stage in stage_plan(SIZES, [[1], SIZES[1:9], SIZES[9:]], climbs=0)]
    assert down == [("base", None), ("twins", SIZES[9:]), ("leaders", [96]), ("leaders", [2])]
    assert stage_plan(SIZES, [[1], SIZES[1:]], staged=False) == [{"select": "all", "sizes": SIZES}]
    assert stage_plan(SIZES, None) == [{"select": "all", "sizes": SIZES}]  # the probe told nothing


def test_stage_keys_per_selection():
    configs = {config_key(c): full_config(c) for c in
               [config(16, group=1), config(16, group=16), config(16, bn=128, group=1), config(16, bn=128, group=16),
                config(64, group=1), config(64, group=16), config(64, bn=32, stages=4)]}
    assert family("M16_N64_K128_G16_w4_s3") == "M16_N64_K128_w4_s3"
    base = stage_keys({"select": "base", "sizes": [64]}, configs, {}, DEFAULT_TIMING)
    assert base == ["M16_N64_K128_G1_w4_s3", "M16_N128_K128_G1_w4_s3", "M64_N64_K128_G1_w4_s3",
                    "M64_N32_K128_G1_w4_s4"]
    screen = {"M16_N64_K128_G1_w4_s3": {64: 9.0}, "M16_N128_K128_G1_w4_s3": {64: 12.0},
              "M64_N64_K128_G1_w4_s3": {64: 30.0}, "M64_N32_K128_G1_w4_s4": {64: 50.0}}
    lead = {**DEFAULT_TIMING, "lead_share": 0.0, "lead_min": 1, "lead_per_block_m": 1}
    # Twins: the rest of the families that lead (the fastest, and the best BLOCK_SIZE_M=64).
    assert stage_keys({"select": "twins", "sizes": [64], "neighbours": [64]}, configs, screen, lead) == [
        "M16_N64_K128_G1_w4_s3", "M16_N64_K128_G16_w4_s3", "M64_N64_K128_G1_w4_s3", "M64_N64_K128_G16_w4_s3"]
    leaders = stage_keys({"select": "leaders", "sizes": [1], "neighbours": [64]}, configs, screen, lead)
    assert leaders == ["M16_N64_K128_G1_w4_s3", "M64_N64_K128_G1_w4_s3"]
    # No times at the neighbour (a resumed run): every candidate.
    assert stage_keys({"select": "leaders", "sizes": [1], "neighbours": [2]}, configs, screen, lead) == list(configs)
    # Climb: one parameter away from the best at each of the class's batch sizes.
    climb = stage_keys({"select": "climb", "sizes": [1]}, configs, {"M64_N64_K128_G1_w4_s3": {1: 5.0},
                                                                    "M16_N64_K128_G1_w4_s3": {1: 6.0}}, lead)
    assert climb == ["M16_N64_K128_G1_w4_s3", "M64_N64_K128_G16_w4_s3"]


def test_median_and_best_per_block_m():
    assert median([3.0, 1.0, 2.0]) == 2.0 and median([]) == math.inf
    best = best_per_block_m({"M16_N32_K64_G1_w4_s3": 5.0, "M16_N64_K64_G1_w4_s3": 4.0, "M32_N64_K64_G1_w4_s3": 6.0,
                             "M64_N64_K64_G1_w4_s3": math.inf})
    assert best == {16: ("M16_N64_K64_G1_w4_s3", 4.0), 32: ("M32_N64_K64_G1_w4_s3", 6.0)}


def test_batch_size_groups_gather_the_batch_sizes_of_each_binary():
    up, mid, large = object(), object(), object()
    binary_of = {4096: large, 1: up, 2: mid, 512: mid, 1024: large}
    assert batch_size_groups(binary_of) == [[1], [2, 512], [1024, 4096]]
    assert batch_size_groups({}) == []


def test_joint_pick_takes_the_fastest_up_plus_down_not_the_fastest_up():
    up = {"M16_N64_K128_G1_w4_s4": 10.0, "M16_N32_K64_G1_w4_s3": 10.5, "M32_N64_K128_G1_w4_s3": 11.0,
          "M64_N64_K128_G1_w8_s3": 14.0}
    down = {"M16_N128_K64_G1_w4_s4": 20.0, "M32_N128_K64_G1_w4_s4": 12.0, "M32_N64_K64_G1_w4_s3": 12.5,
            "M64_N64_K64_G1_w4_s3": 11.5}
    pick = joint_pick(up, down)
    # Fastest up: BLOCK_SIZE_M 16 (10 + 20 = 30); fastest down: 64 (14 + 11.5 = 25.5); the pair: 32 (11 + 12 = 23).
    assert pick == {"up": "M32_N64_K128_G1_w4_s3", "up_us": 11.0, "down": "M32_N128_K64_G1_w4_s4", "down_us": 12.0}
    assert joint_pick(up, None) == {"up": "M16_N64_K128_G1_w4_s4", "up_us": 10.0}


def test_joint_pick_needs_a_block_size_m_both_kernels_ran():
    with pytest.raises(ValueError, match="no up config ran"):
        joint_pick({"M16_N64_K128_G1_w4_s4": math.inf}, None)
    with pytest.raises(ValueError, match="no BLOCK_SIZE_M ran for both"):
        joint_pick({"M16_N64_K128_G1_w4_s4": 1.0}, {"M32_N64_K128_G1_w4_s4": 1.0})


def test_sglang_file_is_in_batch_size_order():
    configs = {"a": config(16), "b": config(64)}
    written = sglang_file({512: "b", 1: "a", 64: "b"}, configs)
    assert list(written) == ["1", "64", "512"] and written["512"] == config(64)


# --------------------------------------------------------------------------------------------- checkpoints

def test_fingerprint_follows_what_decides_the_result_only():
    first = fingerprint(job())
    assert fingerprint(job()) == first and len(first) == 32
    assert fingerprint(job(configs=[config(16), config(32)])) != first
    assert fingerprint(job(shape={**SHAPE, "N": 512})) != first
    assert fingerprint(job(kernels=["up"])) != first
    assert fingerprint(job(timing={"launches": 4})) != first
    # Where and for how long it runs does not matter.
    assert fingerprint(job(work_dir="/elsewhere", output="/elsewhere/r.json", deadline_s=60, gpus=[0, 1, 2],
                           compile_workers=64)) == first


def test_read_checkpoint_ignores_another_jobs_and_unreadable_files(tmp_path):
    path = tmp_path / "engine-checkpoint.json"
    mine = fingerprint(job())
    empty = {"fingerprint": mine, "done": {}, "compile": {}}
    assert read_checkpoint(str(path), mine) == empty  # missing
    data = {"fingerprint": mine, "done": {"1": {"pick": {"up": "M16_N32_K64_G1_w4_s3"}}},
            "compile": {"up/M16_N32_K64_G1_w4_s3": "ok"}}
    write_json_atomically(str(path), data)
    assert read_checkpoint(str(path), mine) == data
    other = fingerprint(job(configs=[config(32)]))
    assert read_checkpoint(str(path), other) == {"fingerprint": other, "done": {}, "compile": {}}
    path.write_text("{not json")
    assert read_checkpoint(str(path), mine) == empty
    assert [p.name for p in tmp_path.iterdir()] == ["engine-checkpoint.json"]  # no temp file left behind
    write_json_atomically(str(path), data)
    assert json.loads(path.read_text()) == data


# --------------------------------------------------------------------------------------------- jobs

def test_validate_job_fills_in_defaults():
    valid = validate_job(job(batch_sizes=[64, 1, 64]))
    assert valid["batch_sizes"] == [1, 64]
    assert valid["gpus"] == [0] and valid["compile_workers"] == 1 and valid["deadline_s"] == 24 * 3600
    assert valid["timing"]["launches"] == 8 and validate_job(job(timing={"launches": 4}))["timing"]["launches"] == 4
    assert valid["kernels"] == ["up", "down"]
    assert valid["start_method"] == "forkserver"


@pytest.mark.parametrize(("changes", "field"), [
    ({"shape": {**SHAPE, "E": 0}}, "job.shape.E"),
    ({"shape": {key: value for key, value in SHAPE.items() if key != "E"}}, "job.shape.E"),
    ({"shape": {**SHAPE, "topk": 2.5}}, "job.shape.topk"),
    ({"shape": {**SHAPE, "dtype": "fp8_w8a8"}}, "job.shape.dtype"),
    ({"kernels": ["down"]}, "job.kernels"),
    ({"kernels": ["up", "gate"]}, "job.kernels"),
    ({"kernels": []}, "job.kernels"),
    ({"batch_sizes": []}, "job.batch_sizes"),
    ({"batch_sizes": [1, 0]}, "job.batch_sizes"),
    ({"batch_sizes": [1, "64"]}, "job.batch_sizes"),
    ({"configs": []}, "job.configs"),
    ({"start_method": "fork"}, "job.start_method"),
])
def test_validate_job_errors_name_the_field(changes, field):
    with pytest.raises(JobError, match=f"^{field.replace('.', '[.]')}: "):
        validate_job(job(**changes))


def test_validate_job_names_a_missing_field():
    broken = job()
    del broken["output"]
    with pytest.raises(JobError, match="^job[.]output: missing"):
        validate_job(broken)


class _ReleaseWithoutDownFile:
    """A release whose get_config_file_name has no ``down_moe`` (older than 0.5.10): its file_name refuses down."""

    @staticmethod
    def file_name(shape: dict, kernel: str) -> str:
        if kernel == "down":
            raise JobError("job.kernels: this SGLang release reads no separate down config file")
        return f"E={shape['E']},N={shape['N']},device_name=NVIDIA_H100_80GB_HBM3.json"


@pytest.mark.parametrize(("requested", "expected"), [("auto", ["up"]), (["up"], ["up"])])
def test_kernels_auto_and_named_on_a_release_without_a_down_file(requested, expected):
    main_side = object.__new__(_MainSide)
    main_side.job, main_side.release = job(), _ReleaseWithoutDownFile()
    assert main_side.kernels(requested) == expected


def test_a_named_down_kernel_the_release_never_reads_is_refused_before_any_compile():
    main_side = object.__new__(_MainSide)
    main_side.job, main_side.release = job(), _ReleaseWithoutDownFile()
    with pytest.raises(JobError, match="^job[.]kernels: this SGLang release reads no separate down config file"):
        main_side.kernels(["up", "down"])


# --------------------------------------------------------------------------------------------- fork server preload

FAKE_TORCH_CUDA = '''
_initialized = False


def _lazy_init():
    global _initialized
    _initialized = True


def is_initialized():
    return _initialized


def get_device_capability():
    _lazy_init()  # as torch's: initialises CUDA
    return (9, 0)
'''
KERNEL_MODULE = "sglang/kernels/ops/moe/fused_moe_triton_kernels.py"
CONFIG_MODULE = "sglang/srt/layers/moe/moe_runner/triton_utils/fused_moe_triton_config.py"
ALIGN_MODULE = "sglang/srt/layers/moe/moe_runner/triton_utils/moe_align_block_size.py"
TOUCHES_CUDA = "import torch\nSM = torch.cuda.get_device_capability()\n"


def _preload(tmp_path, touching: str | None) -> dict:
    """preload_release in a fresh process over a fake torch and release; ``touching``: the file whose import asks
    torch for the device capability (initialising CUDA), as 0.5.23's DeepGEMM configurer does without NVML."""
    root = tmp_path / "site"
    files = {"torch/__init__.py": "from . import cuda\n", "torch/cuda.py": FAKE_TORCH_CUDA, "triton/__init__.py": "",
             "sglang/__init__.py": "", KERNEL_MODULE: "", CONFIG_MODULE: "", ALIGN_MODULE: ""}
    if touching:
        files[touching] = TOUCHES_CUDA
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    for folder in {path.parent for path in root.rglob("*.py")}:
        (folder / "__init__.py").touch()
    engine = Path(moe_engine.__file__)
    code = ("import importlib.util, json, sys\n"
            f"spec = importlib.util.spec_from_file_location('engine_copy', {str(engine)!r})\n"
            "engine = importlib.util.module_from_spec(spec); spec.loader.exec_module(engine)\n"
            f"engine.preload_release({str(tmp_path / 'preload.json')!r})\n"
            "print(json.dumps(sorted(m for m in sys.modules if m.startswith('sglang'))))\n")
    proc = subprocess.run([sys.executable, "-c", code], env={**os.environ, "PYTHONPATH": str(root)},
                          capture_output=True, text=True, check=True)
    return {**json.loads((tmp_path / "preload.json").read_text()), "imported": json.loads(proc.stdout)}


def test_preload_imports_the_release_without_initialising_cuda(tmp_path):
    report = _preload(tmp_path, None)
    assert report["stopped_at"] is None and report["error"] is None and report["cuda_initialised"] is False
    assert {KERNEL_MODULE, CONFIG_MODULE, ALIGN_MODULE} <= {name.replace(".", "/") + ".py" for name in report["imported"]}


@pytest.mark.parametrize("touching", ["sglang/__init__.py", KERNEL_MODULE])
def test_preload_stops_an_import_that_would_initialise_cuda(tmp_path, touching):
    """Also in SGLang's package init, which runs at the first import of anything under sglang (before the guard
    covered it, the emulator check imported it unguarded and the server's forks could not use CUDA)."""
    report = _preload(tmp_path, touching)
    assert report["cuda_initialised"] is False
    assert report["stopped_at"] and report["stopped_at"][-1].startswith(str(tmp_path / "site" / touching) + ":")
    assert KERNEL_MODULE.replace("/", ".")[:-3] not in report["imported"]  # the workers import it themselves


def test_with_twins_adds_the_screened_group_size_twins_of_the_refined():
    times = {"M128_N128_K64_G1_w8_s3": 278.5, "M128_N128_K64_G16_w8_s3": 267.1, "M64_N128_K64_G1_w8_s3": 281.1,
             "M64_N64_K64_G16_w4_s3": 300.0}
    assert with_twins(["M128_N128_K64_G1_w8_s3"], times) == ["M128_N128_K64_G1_w8_s3", "M128_N128_K64_G16_w8_s3"]
    # M64_N128_K64_G16_w8_s3 was not screened at this M: no twin to add
    assert with_twins(["M64_N128_K64_G1_w8_s3"], times) == ["M64_N128_K64_G1_w8_s3"]
