# Copyright (c) llmops.sglang contributors
# Apache License 2.0 (see LICENSE)
"""Unit tests for the pure parts of plugins/module_utils/moe_engine.py (configs, plans, picks, checkpoints, jobs).

The engine as a program (pools, compiles, timing, resume, deadline) runs on the SGLang emulator in
tests/unit/emulator/test_moe_engine_emulated.py.
"""
from __future__ import annotations

import itertools
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


def get_device_capability(device=None):
    _lazy_init()  # as torch's: initialises CUDA
    return (9, 0)


def get_device_name(device=None):
    _lazy_init()
    return "NVIDIA H100 80GB HBM3"


def _get_nvml_device_index(device):
    return {0: 3}[device]  # CUDA_VISIBLE_DEVICES=3
'''
FAKE_PYNVML = '''
def nvmlInit():
    pass


def nvmlDeviceGetHandleByIndex(index):
    assert index == 3
    return "handle-3"


def nvmlDeviceGetName(handle):
    return b"NVIDIA H100 80GB HBM3"


def nvmlDeviceGetCudaComputeCapability(handle):
    return [9, 0]
'''
KERNEL_MODULE = "sglang/kernels/ops/moe/fused_moe_triton_kernels.py"
CONFIG_MODULE = "sglang/srt/layers/moe/moe_runner/triton_utils/fused_moe_triton_config.py"
ALIGN_MODULE = "sglang/srt/layers/moe/moe_runner/triton_utils/moe_align_block_size.py"
TOUCHES_CUDA = "import torch\nSM = torch.cuda.get_device_capability()\n"
# 0.5.23's platform detection (sglang/srt/platforms/__init__.py, _is_sail_available) and DeepGEMM configurer
ASKS_THE_DEVICE = ("import torch\nNAME = torch.cuda.get_device_name()\nSM = torch.cuda.get_device_capability(0)\n"
                   "assert (NAME, SM) == ('NVIDIA H100 80GB HBM3', (9, 0)), (NAME, SM)\n")


def _preload(tmp_path, touching: str | None, text: str = TOUCHES_CUDA, nvml: bool = False) -> dict:
    """preload_release in a fresh process over a fake torch and release; ``touching``: the file whose import asks
    torch for the device capability (initialising CUDA), as 0.5.23's DeepGEMM configurer does without NVML."""
    root = tmp_path / "site"
    files = {"torch/__init__.py": "from . import cuda\n", "torch/cuda.py": FAKE_TORCH_CUDA, "triton/__init__.py": "",
             "sglang/__init__.py": "", KERNEL_MODULE: "", CONFIG_MODULE: "", ALIGN_MODULE: ""}
    if touching:
        files[touching] = text
    if nvml:
        files["pynvml.py"] = FAKE_PYNVML
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    for folder in {path.parent for path in root.rglob("*.py")} - {root}:
        (folder / "__init__.py").touch()
    engine = Path(moe_engine.__file__)
    code = ("import importlib.util, json, sys\n"
            f"spec = importlib.util.spec_from_file_location('engine_copy', {str(engine)!r})\n"
            "engine = importlib.util.module_from_spec(spec); spec.loader.exec_module(engine)\n"
            f"engine.preload_release({str(tmp_path / 'preload.json')!r})\n"
            "import os, torch\n"
            "assert torch.cuda.get_device_name.__module__ == 'torch.cuda', 'the NVML answers outlived the preload'\n"
            "assert os.environ['PYTORCH_NVML_BASED_CUDA_CHECK'] == '1'\n"
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


def test_preload_answers_the_device_queries_from_nvml_without_initialising_cuda(tmp_path):
    report = _preload(tmp_path, "sglang/__init__.py", ASKS_THE_DEVICE, nvml=True)
    assert report["stopped_at"] is None and report["error"] is None and report["cuda_initialised"] is False
    assert KERNEL_MODULE.replace("/", ".")[:-3] in report["imported"]


def test_preload_without_nvml_stops_where_the_release_asks_the_device(tmp_path):
    report = _preload(tmp_path, "sglang/__init__.py", ASKS_THE_DEVICE)
    assert report["cuda_initialised"] is False and report["stopped_at"][-1].startswith(
        str(tmp_path / "site" / "sglang/__init__.py") + ":")


def test_with_twins_adds_the_screened_group_size_twins_of_the_refined():
    times = {"M128_N128_K64_G1_w8_s3": 278.5, "M128_N128_K64_G16_w8_s3": 267.1, "M64_N128_K64_G1_w8_s3": 281.1,
             "M64_N64_K64_G16_w4_s3": 300.0}
    assert with_twins(["M128_N128_K64_G1_w8_s3"], times) == ["M128_N128_K64_G1_w8_s3", "M128_N128_K64_G16_w8_s3"]
    # M64_N128_K64_G16_w8_s3 was not screened at this M: no twin to add
    assert with_twins(["M64_N128_K64_G1_w8_s3"], times) == ["M64_N128_K64_G1_w8_s3"]


# --------------------------------------------------------------------------------------------- the fleet

def ray_node(ip: str, gpus: int, node_id: str, alive: bool = True, cpus: int = 16) -> dict:
    """One entry of ``ray.nodes()`` (the keys the engine reads)."""
    return {"NodeID": node_id, "NodeManagerAddress": ip, "NodeManagerHostname": f"host-{ip}", "Alive": alive,
            "Resources": {"CPU": float(cpus), **({"GPU": float(gpus)} if gpus else {})}}


def test_fleet_nodes_are_the_live_gpu_nodes_in_a_stable_order_with_a_name_each():
    nodes = moe_engine.fleet_nodes([ray_node("10.0.0.3", 4, "c"), ray_node("10.0.0.1", 2, "a"),
                                    ray_node("10.0.0.2", 0, "cpu-only"), ray_node("10.0.0.4", 4, "dead", alive=False),
                                    ray_node("10.0.0.1", 1, "b")])
    assert [(n["ip"], n["node_id"], n["gpus"], n["name"]) for n in nodes] == [
        ("10.0.0.1", "a", 2, "10.0.0.1-1"), ("10.0.0.1", "b", 1, "10.0.0.1-2"), ("10.0.0.3", "c", 4, "10.0.0.3")]
    assert nodes[0]["cpus"] == 16 and nodes[0]["host"] == "host-10.0.0.1"


def test_partition_is_contiguous_in_batch_size_order_and_balanced_by_gpus():
    sizes = [1, 2, 4, 8, 16, 24, 32, 48, 64, 96, 128, 256]
    assert moe_engine.partition_batch_sizes(sizes, [4, 4, 4]) == [sizes[:4], sizes[4:8], sizes[8:]]
    # A node with twice the GPUs gets twice the batch sizes; unsorted, repeated input is sorted first.
    parts = moe_engine.partition_batch_sizes(list(reversed(sizes)) + [1], [2, 4])
    assert parts == [sizes[:4], sizes[4:]]
    assert [m for part in moe_engine.partition_batch_sizes(sizes, [3, 1, 2]) for m in part] == sizes


def test_partition_minimises_the_largest_cost_per_gpu():
    sizes = [1, 64, 512, 4096]
    # Cost per batch size, e.g. measured kernel time: the expensive largest M gets a node to itself.
    cost = {1: 1.0, 64: 1.0, 512: 1.0, 4096: 6.0}
    assert moe_engine.partition_batch_sizes(sizes, [1, 1], cost.get) == [[1, 64, 512], [4096]]
    for gpus in ([1, 1, 1], [2, 1], [1, 3], [4, 4, 4, 4]):
        parts = moe_engine.partition_batch_sizes(sizes, gpus, cost.get)
        worst = max(sum(cost[m] for m in part) / g for part, g in zip(parts, gpus))
        brute = min(max(sum(cost[m] for m in sizes[a:b]) / g for (a, b), g in zip(zip(cuts, cuts[1:]), gpus))
                    for cuts in _cut_points(len(sizes), len(gpus)))
        assert worst == pytest.approx(brute), (gpus, parts)


def _cut_points(n: int, k: int):
    """Every split of n items into k contiguous (possibly empty) parts, as k + 1 cut points."""
    for inner in itertools.combinations_with_replacement(range(n + 1), k - 1):
        yield (0, *inner, n)


def test_partition_leaves_nodes_without_work_where_they_outnumber_the_batch_sizes():
    assert sorted(map(len, moe_engine.partition_batch_sizes([8, 64], [1, 1, 1]))) == [0, 1, 1]
    with pytest.raises(ValueError, match="at least one GPU"):
        moe_engine.partition_batch_sizes([8], [1, 0])


def test_shard_job_runs_here_in_its_own_work_dir_with_the_nodes_cpus():
    node = {"name": "10.0.0.3", "ip": "10.0.0.3", "gpus": 4, "cpus": 32}
    shard = moe_engine.shard_job(validate_job(job(ray_address="10.0.0.1:6379")), node, [64], 120.0)
    assert shard["ray_address"] is None and moe_engine.ray_address(shard) is None
    assert shard["work_dir"] == "/tmp/engine/shards/10.0.0.3" and shard["output"] == "/tmp/engine/shards/10.0.0.3/result.json"
    assert shard["batch_sizes"] == [64] and shard["compile_workers"] == 28 and shard["deadline_s"] == 120.0
    # What decides the result is the job's: a shard's checkpoint is valid for a rerun of the same job.
    assert fingerprint(shard) == fingerprint(validate_job(job()))


def test_ray_address_from_the_job_else_the_environment(monkeypatch):
    monkeypatch.setenv("RAY_ADDRESS", "10.0.0.1:6379")
    assert moe_engine.ray_address(job()) == "10.0.0.1:6379"
    assert moe_engine.ray_address(job(ray_address="10.0.0.9:6379")) == "10.0.0.9:6379"
    assert moe_engine.ray_address(job(ray_address=None)) is None
    monkeypatch.delenv("RAY_ADDRESS")
    assert moe_engine.ray_address(job()) is None


def shard_result(sizes: list[int], wall: float = 10.0, gpus: int = 4, **changes) -> dict:
    """A shard's result as Engine._result writes it (the fields the merge reads)."""
    up = {str(m): config(16 if m < 64 else 64) for m in sizes}
    down = {str(m): config(16 if m < 64 else 64, bn=32) for m in sizes}
    result = {"engine_version": 1, "shape": dict(SHAPE), "kernels": ["up", "down"], "batch_sizes": sizes,
              "device": {"name": "NVIDIA H100 80GB HBM3", "capability": [9, 0]},
              "release": {"sglang": "0.5.23", "triton": "3.6.0", "kernel_source_sha256": "ab" * 32},
              "files": {"up": {"name": "E=256,N=256.json", "configs": up},
                        "down": {"name": "E=256,N=256_down.json", "configs": down}},
              "per_m": {str(m): {"pick": {"up": "u", "down": "d"}} for m in sizes},
              "candidates": {"up": 624, "down": 624}, "failures": {"up compile:OutOfResources": 12},
              "stats": {"compiles": len(sizes)}, "wall_s": wall, "gpus": gpus,
              "gpu_minutes": round(wall * gpus / 60, 2), "resumed_batch_sizes": 0}
    return {**result, **changes}


def fleet_shard(ip: str, sizes: list[int], **changes) -> dict:
    return {"node": {"ip": ip, "name": ip, "host": f"host-{ip}", "gpus": 4}, "result": shard_result(sizes, **changes)}


def test_merge_gives_one_result_of_the_engines_format_with_every_batch_size():
    shards = [fleet_shard("10.0.0.2", [512, 4096], wall=30.0, resumed_batch_sizes=1),
              fleet_shard("10.0.0.1", [1, 8, 64], wall=20.0)]
    merged = moe_engine.merge_results(shards, 31.26, {"address": "10.0.0.1:6379", "gpus": 8, "nodes": []})
    assert merged["batch_sizes"] == [1, 8, 64, 512, 4096]
    for kernel in ("up", "down"):
        assert list(merged["files"][kernel]["configs"]) == ["1", "8", "64", "512", "4096"]
        assert merged["files"][kernel]["name"] == shards[0]["result"]["files"][kernel]["name"]
    assert merged["files"]["up"]["configs"]["4096"] == config(64)
    assert list(merged["per_m"]) == ["1", "8", "64", "512", "4096"]
    assert merged["gpus"] == 8 and merged["wall_s"] == 31.3 and merged["resumed_batch_sizes"] == 1
    assert merged["gpu_minutes"] == pytest.approx(2.0 + 1.33)
    assert merged["failures"] == {"up compile:OutOfResources": 12}  # the same space fails alike on every node
    assert merged["stats"] == {"shards": {"10.0.0.2": {"compiles": 2}, "10.0.0.1": {"compiles": 3}}}
    assert [(s["ip"], s["batch_sizes"], s["wall_s"]) for s in merged["fleet"]["shards"]] == [
        ("10.0.0.2", [512, 4096], 30.0), ("10.0.0.1", [1, 8, 64], 20.0)]
    assert merged["fleet"]["address"] == "10.0.0.1:6379"
    for name in ("engine_version", "device", "release", "shape", "kernels", "candidates"):
        assert merged[name] == shards[0]["result"][name]


@pytest.mark.parametrize("changes, named", [
    ({"device": {"name": "NVIDIA H200", "capability": [9, 0]}}, "device.name"),
    ({"release": {"sglang": "0.5.23", "triton": "3.5.1", "kernel_source_sha256": "ab" * 32}}, "release.triton"),
    ({"shape": {**SHAPE, "N": 512}}, "shape"),
])
def test_merge_refuses_shards_tuned_on_other_gpus_or_software_naming_the_node(changes, named):
    shards = [fleet_shard("10.0.0.1", [1, 8]), fleet_shard("10.0.0.2", [64], **changes)]
    with pytest.raises(ValueError, match=rf"the shard on 10\.0\.0\.2 \(host-10\.0\.0\.2\) tuned with other {named}"):
        moe_engine.merge_results(shards, 1.0, {})


def test_merge_refuses_overlapping_shards():
    with pytest.raises(ValueError, match="overlap"):
        moe_engine.merge_results([fleet_shard("10.0.0.1", [1, 8]), fleet_shard("10.0.0.2", [8])], 1.0, {})
