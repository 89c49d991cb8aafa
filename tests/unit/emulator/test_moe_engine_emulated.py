# Copyright (c) llmops.sglang contributors
# Apache License 2.0 (see LICENSE)
"""llmops.sglang's MoE tuning engine (plugins/module_utils/moe_engine.py) run as the collection runs it,
``python moe_engine.py JOB.json``, on the SGLang emulator: its process pools, screening, refining, joint up/down
pick, checks, checkpoints, deadline and crash handling are the production code; only the kernels are the
emulator's (sglang/_emulator/moe_engine_bench.py, tests/emulator/README.md "MoE tuning engine").

The program is run from a copy in a temp dir: plugins/module_utils on sys.path would shadow the stdlib's ``secrets``.
"""
from __future__ import annotations

import json
import os
import random
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.emulator import EMULATOR, make_importable

make_importable()

from sglang._emulator.kernels import KernelModel, TunerSettings, shared_memory_bytes  # noqa: E402
from sglang._emulator.kernels import config_key as model_key  # noqa: E402
from sglang._emulator.moe_engine_bench import (  # noqa: E402
    EmulatedBench,
    EmulatedRelease,
    batch_size_groups,
    moe_problem,
    padded_tokens,
)
from sglang._emulator.profile import ProfileError, load_profile  # noqa: E402

from ansible_collections.llmops.sglang.plugins.module_utils import moe_engine  # noqa: E402
from ansible_collections.llmops.sglang.plugins.module_utils.moe_search_space import (  # noqa: E402
    compute_bound_search_space)

REPO = Path(__file__).resolve().parents[3]
ENGINE = REPO / "plugins" / "module_utils" / "moe_engine.py"
DEMO_PROFILE = EMULATOR / "profiles" / "demo.yaml"
# The demo's real case: Qwen3.5-122B-A10B at TP4 on the RTX PRO 6000 Blackwell (smem 101376 bytes a block).
SHAPE = {"E": 256, "N": 256, "hidden": 3072, "topk": 8, "dtype": "bf16"}
SMEM = 101376
SIZES = [1, 16, 64, 512]
KERNELS = ("up", "down")
UP_FILE = "E=256,N=256,device_name=NVIDIA_RTX_PRO_6000_Blackwell_Server_Edition.json"
DOWN_FILE = "E=256,N=256,device_name=NVIDIA_RTX_PRO_6000_Blackwell_Server_Edition_down.json"


def space() -> list[dict]:
    """60 configs of SGLang's space: a seeded sample, 4 BLOCK_SIZE_M=256/num_warps=4 (compiler crash), 4 too big for
    the GPU's shared memory, and the model's ideal tiles (so the picks have something to find)."""
    full = compute_bound_search_space()
    bm256_w4 = [c for c in full if c["BLOCK_SIZE_M"] == 256 and c["num_warps"] == 4
                and shared_memory_bytes(c, 2, 2) <= SMEM][:4]
    too_big = [c for c in full if shared_memory_bytes(c, 2, 2) > SMEM and c["num_warps"] == 8][::97][:4]
    model = KernelModel(load_profile(DEMO_PROFILE))
    ideal = [model.ideal_config(moe_problem(SHAPE), m, gemm) for m in SIZES for gemm in ("up", "down")]
    chosen = {moe_engine.config_key(c): moe_engine.full_config(c) for c in bm256_w4 + too_big + ideal}
    rest = [c for c in full if moe_engine.config_key(c) not in chosen]
    for config in random.Random(7).sample(rest, 60 - len(chosen)):
        chosen[moe_engine.config_key(config)] = config
    assert len(chosen) == 60
    return list(chosen.values())


def write_profile(path: Path, **tuner: Any) -> Path:
    profile = yaml.safe_load(DEMO_PROFILE.read_text())
    profile.update(time_scale=1e-3, seed=11)
    profile["tuner"] = {"time_scale": 2e-3, **tuner}
    path.write_text(yaml.safe_dump(profile))
    return path


def run_engine(base: Path, profile: Path, job: dict, timeout: float = 90) -> tuple[int, list[dict], str]:
    program = base / "engine" / "moe_engine.py"
    if not program.exists():
        program.parent.mkdir(parents=True)
        shutil.copy(ENGINE, program)
    job_path = base / "job.json"
    job_path.write_text(json.dumps(job))
    env = {key: value for key, value in os.environ.items() if not key.startswith(("SGLANG_", "CUDA_"))}
    env.update(PYTHONPATH=os.pathsep.join([str(EMULATOR / "sglang"), str(EMULATOR / "triton")]),
               SGLANG_EMULATOR_PROFILE=str(profile), PYTHONUNBUFFERED="1")
    proc = subprocess.run([sys.executable, str(program), str(job_path)], cwd=base, env=env, capture_output=True,
                          text=True, timeout=timeout, check=False)
    events = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    return proc.returncode, events, proc.stderr


def make_job(base: Path, configs: list[dict], **extra: Any) -> dict:
    return {"shape": SHAPE, "kernels": ["up", "down"], "batch_sizes": SIZES, "configs": configs,
            "work_dir": str(base / "work"), "output": str(base / "result.json"), "gpus": [0, 1],
            "compile_workers": 2, **extra}


@pytest.fixture(scope="module")
def tuned(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """One engine run (with one crashing config and two miscompiling ones) and its rerun."""
    base = tmp_path_factory.mktemp("engine")
    profile = write_profile(base / "profile.yaml", engine_crash_configs=1, compile_error_configs=2)
    configs = space()
    job = make_job(base, configs)
    first = run_engine(base, profile, job)
    result = json.loads((base / "result.json").read_text()) if first[0] == 0 else None
    rerun = run_engine(base, profile, job)
    again = json.loads((base / "result.json").read_text()) if rerun[0] == 0 else None
    return {"base": base, "profile": profile, "configs": configs, "first": first, "result": result,
            "rerun": rerun, "again": again}


@pytest.fixture(scope="module")
def unstaged(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The same run as ``tuned`` with every config compiled for every specialisation (``timing.staged: false``)."""
    base = tmp_path_factory.mktemp("unstaged")
    profile = write_profile(base / "profile.yaml", engine_crash_configs=1, compile_error_configs=2)
    configs = space()
    rc, events, stderr = run_engine(base, profile, make_job(base, configs, timing={"staged": False}))
    assert rc == 0, (events[-3:], stderr[-3000:])
    return {"profile": profile, "configs": configs, "result": json.loads((base / "result.json").read_text())}


# --------------------------------------------------------------------------------------------- the program

def test_engine_tunes_every_batch_size_of_both_kernels(tuned: dict[str, Any]) -> None:
    rc, events, stderr = tuned["first"]
    assert rc == 0, (events[-3:], stderr[-3000:])
    assert events[-1]["event"] == "done"
    result = tuned["result"]
    assert result["device"]["name"] == "NVIDIA RTX PRO 6000 Blackwell Server Edition"
    assert result["device"]["smem_per_block_optin"] == SMEM
    assert result["release"]["kernel_module"] == "sglang._emulator.kernels"
    assert result["release"]["align"] == "emulated" and result["release"]["triton"] == "3.6.0"
    assert result["files"]["up"]["name"] == UP_FILE and result["files"]["down"]["name"] == DOWN_FILE
    for kernel in ("up", "down"):
        # Sorted as text: the engine writes its result with sort_keys (the batch-size order of sglang_file is lost).
        assert sorted(result["files"][kernel]["configs"], key=int) == [str(m) for m in SIZES]
    assert result["resumed_batch_sizes"] == 0 and result["gpus"] == 2


def test_picks_are_candidates_and_share_block_size_m(tuned: dict[str, Any]) -> None:
    result, configs = tuned["result"], tuned["configs"]
    allowed = {moe_engine.config_key(c) for c in configs} | {moe_engine.config_key(_default(m)) for m in SIZES}
    for m in SIZES:
        up = result["files"]["up"]["configs"][str(m)]
        down = result["files"]["down"]["configs"][str(m)]
        assert moe_engine.config_key(up) in allowed and moe_engine.config_key(down) in allowed
        assert up["BLOCK_SIZE_M"] == down["BLOCK_SIZE_M"]
        assert set(up) == set(moe_engine.CONFIG_KEYS)
        assert result["per_m"][str(m)]["rel_error"]["up"] < 2e-3
        final = result["per_m"][str(m)]["final_us"]
        for kernel in KERNELS:  # the pick is among the finalists, with the time the joint pick used
            key = moe_engine.config_key(result["files"][kernel]["configs"][str(m)])
            assert final[kernel][key] == result["per_m"][str(m)]["pick"][f"{kernel}_us"]


def _default(m: int) -> dict:
    return moe_engine.full_config({"BLOCK_SIZE_M": 16, "BLOCK_SIZE_N": 32, "BLOCK_SIZE_K": 64, "GROUP_SIZE_M": 1}
                                  if m <= SHAPE["E"] else
                                  {"BLOCK_SIZE_M": 64, "BLOCK_SIZE_N": 64, "BLOCK_SIZE_K": 32, "GROUP_SIZE_M": 8})


def test_picks_are_no_slower_than_the_default_in_the_model(tuned: dict[str, Any]) -> None:
    result = tuned["result"]
    model = KernelModel(load_profile(tuned["profile"]))
    problem = moe_problem(SHAPE)
    for m in SIZES:
        up, down = (result["files"][k]["configs"][str(m)] for k in ("up", "down"))
        picked = model.gemm_time_us(problem, m, "up", up) + model.gemm_time_us(problem, m, "down", down)
        default = sum(model.gemm_time_us(problem, m, gemm, _default(m)) for gemm in ("up", "down"))
        assert picked <= default * 1.01, (m, up, down)
        assert result["per_m"][str(m)]["default"]["up"] == moe_engine.config_key(_default(m))


def test_failures_are_counted_by_reason(unstaged: dict[str, Any]) -> None:
    result, configs = unstaged["result"], unstaged["configs"]
    broken = KernelModel(load_profile(unstaged["profile"])).start_tuning(configs)
    runtime = [c for c in configs if (c["BLOCK_SIZE_M"] == 256 and c["num_warps"] == 4) or model_key(c) in broken]
    oor = [c for c in configs if shared_memory_bytes(c, 2, 2) > SMEM and c not in runtime]
    assert len(runtime) >= 4 and len(oor) >= 4
    expected = {}
    for kernel in ("up", "down"):
        expected.update({f"{kernel} compile:RuntimeError": len(runtime), f"{kernel} compile:OutOfResources": len(oor),
                         f"{kernel} compile:crashed": 1})
    assert result["failures"] == expected
    assert result["stats"]["lost"] == 2
    count = len(moe_engine.candidates(configs, [_default(m) for m in SIZES]))
    assert count > len(configs)  # the M > E default (BLOCK_SIZE_K 32) is outside the space
    assert result["candidates"] == {"up": count, "down": count}
    compiled = result["stats"]["compiles"]
    assert compiled == 2 * count - 2  # the crashed compiles report nothing
    assert result["stats"]["variants"] > compiled - 2 * (len(runtime) + len(oor))


@pytest.fixture(scope="module")
def dense(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """A staged run over a regular grid (216 configs: every combination, as SGLang's pruned space is), where the
    leaders' one-parameter neighbours exist for the climb."""
    base = tmp_path_factory.mktemp("dense")
    profile = write_profile(base / "profile.yaml")
    configs = [c for c in compute_bound_search_space() if c["BLOCK_SIZE_M"] <= 64 and c["BLOCK_SIZE_N"] <= 128
               and c["BLOCK_SIZE_K"] <= 128 and c["GROUP_SIZE_M"] in (1, 16) and c["num_stages"] <= 4]
    assert len(configs) == 216
    rc, events, stderr = run_engine(base, profile, make_job(base, configs))
    assert rc == 0, (events[-3:], stderr[-3000:])
    return {"profile": profile, "configs": configs, "result": json.loads((base / "result.json").read_text()),
            "events": events}


def test_staged_compiles_the_main_class_for_all_and_the_others_for_the_leaders(dense: dict[str, Any]) -> None:
    result = dense["result"]
    # E=256: up classes {1} and {16, 64, 512}; down {1}, {16, 64} and {512} (GDC_EARLY: M * topk <= 512).
    plan = {kernel: [(stage["select"], stage["sizes"], stage.get("neighbours")) for stage in stages]
            for kernel, stages in result["stats"]["stages"].items()}
    climbs = [("climb", [1], None)] * 2
    assert plan["up"] == [("base", [16, 64, 512], None), ("twins", [16, 64, 512], [16, 64, 512]),
                          ("leaders", [1], [16]), *climbs]
    assert plan["down"] == [("base", [16, 64], None), ("twins", [16, 64], [16, 64]),  # nearest first: 512 / 64 < 16
                            ("leaders", [512], [64]), ("climb", [512], None), ("climb", [512], None),
                            ("leaders", [1], [16]), *climbs]
    assert result["stats"]["batch_size_groups"] == {"up": [[1], [16, 64, 512]], "down": [[1], [16, 64], [512]]}
    every_class = sum(len(groups) for groups in result["stats"]["batch_size_groups"].values()) * 217
    assert result["stats"]["variants"] < 0.6 * every_class  # 216 configs and the M > E default, each class
    base = {kernel: stages[0]["configs"] for kernel, stages in result["stats"]["stages"].items()}
    # One of each GROUP_SIZE_M pair (108) and the M > E default's own family, less the probe (screened already).
    assert base == {"up": 108, "down": 108}
    model = KernelModel(load_profile(dense["profile"]))
    problem = moe_problem(SHAPE)
    space_keys = moe_engine.candidates(dense["configs"], [_default(m) for m in SIZES])
    for m in SIZES:  # within the emulated screen's noise of the model's best pair over the whole space
        times = {k: {key: model.gemm_time_us(problem, m, k, c) for key, c in space_keys.items()} for k in KERNELS}
        best = moe_engine.joint_pick(times["up"], times["down"])
        picked = sum(model.gemm_time_us(problem, m, k, result["files"][k]["configs"][str(m)]) for k in KERNELS)
        assert picked <= (best["up_us"] + best["down_us"]) * 1.02, m
    timeline = result["stats"]["timeline"]
    assert set(timeline) == {"main_side", "workers_started", "timers_ready", "compilers_ready", "first_compile",
                             "screened", "refined", "checked"}
    assert timeline["first_compile"] <= timeline["screened"] <= timeline["refined"] <= timeline["checked"]
    # M=16 and 64 are settled once both kernels' main classes are: refined while the leaders of M=1 and 512 compile.
    assert result["stats"]["timed_while_compiling"] > 0
    assert [e for e in dense["events"] if e["event"] == "compile" and e.get("pending") == 0]


def test_workers_are_forked_from_a_server_that_imported_the_release_once(tuned: dict[str, Any]) -> None:
    start = tuned["result"]["stats"]["start"]
    assert start["method"] == "forkserver" and "fallback" not in start
    preload = start["preload"]
    assert preload["error"] is None and preload["stopped_at"] is None and preload["modules"] > 0
    # Every compile worker that started (those replacing crashed workers too) had the release imported already.
    assert start["preloaded_compile_workers"] == start["compile_workers_started"] >= 1


def test_a_release_whose_import_initialises_cuda_gets_spawned_workers(tmp_path: Path) -> None:
    profile = write_profile(tmp_path / "profile.yaml", engine_import_initialises_cuda=True)
    rc, events, stderr = run_engine(tmp_path, profile, make_job(tmp_path, space()[:12], batch_sizes=[1, 64]))
    assert rc == 0, (events[-3:], stderr[-3000:])
    start = json.loads((tmp_path / "result.json").read_text())["stats"]["start"]
    assert start["method"] == "spawn" and "could not start a compile worker" in start["fallback"]
    assert start["preloaded_compile_workers"] == 0 and start["compile_workers_started"] >= 1
    assert start["preload"]["error"] is None  # the server's import worked; its forks could not use CUDA
    assert "Cannot re-initialize CUDA in forked subprocess" in start["probe_error"]  # the probe's reason


def test_spawn_is_kept_where_the_job_asks_for_it(tmp_path: Path) -> None:
    profile = write_profile(tmp_path / "profile.yaml")
    rc, events, stderr = run_engine(tmp_path, profile, make_job(tmp_path, space()[:12], batch_sizes=[1, 64],
                                                                start_method="spawn"))
    assert rc == 0, (events[-3:], stderr[-3000:])
    start = json.loads((tmp_path / "result.json").read_text())["stats"]["start"]
    assert start["method"] == "spawn" and "preload" not in start and "fallback" not in start
    assert start["preloaded_compile_workers"] == 0 and start["compile_workers_started"] >= 1


def test_rerun_resumes_without_compiling(tuned: dict[str, Any]) -> None:
    rc, events, stderr = tuned["rerun"]
    assert rc == 0, (events[-3:], stderr[-3000:])
    again, first = tuned["again"], tuned["result"]
    assert again["resumed_batch_sizes"] == len(SIZES)
    assert again["stats"]["compiles"] == 0 and again["stats"]["measurements"] == 0
    assert again["files"] == first["files"]
    assert not [e for e in events if e["event"] == "compile"]


@pytest.fixture(scope="module")
def deadline_run(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """A run whose 0.5 s deadline falls while it compiles (0.6 s x variants x 0.05 a config, 2 workers)."""
    base = tmp_path_factory.mktemp("deadline")
    profile = write_profile(base / "profile.yaml", time_scale=0.05)
    rc, events, stderr = run_engine(base, profile, make_job(base, space(), deadline_s=0.5))
    return {"base": base, "rc": rc, "events": events, "stderr": stderr}


def test_deadline_ends_the_run_with_exit_3(deadline_run: dict[str, Any]) -> None:
    events = deadline_run["events"]
    assert deadline_run["rc"] == moe_engine.EXIT_DEADLINE, (events[-3:], deadline_run["stderr"][-3000:])
    assert events[-1]["event"] == "deadline" and events[-1]["error"].startswith("deadline of")
    assert not (deadline_run["base"] / "result.json").exists()


def test_deadline_is_kept(deadline_run: dict[str, Any]) -> None:
    # The queued compiles are dropped at the deadline: the run must not work off the backlog (minutes with a full
    # space). The backlog's emulated compiles take seconds, so at 0.5 s (before or while it compiles, as the machine
    # goes) it is never empty: the engine says when it is (a compile event with nothing pending).
    assert not [event for event in deadline_run["events"] if event["event"] == "compile" and event.get("pending") == 0]


# --------------------------------------------------------------------------------------------- the backend

def test_batch_size_groups_follow_the_align_padding_divisibility_by_16_and_gdc_early() -> None:
    # M=1: 8 slots < 257, padded to 8 * BM; M=64: 512 slots + 257 * (BM - 1), rounded up to 4.
    assert padded_tokens(1, 8, 256, 16) == 128
    assert padded_tokens(64, 8, 256, 16) == 512 + 257 * 15 + 1 == 4368
    assert padded_tokens(64, 8, 256, 64) == (512 + 257 * 63 + 3) // 4 * 4 == 16704
    config = {"BLOCK_SIZE_M": 16}
    assert batch_size_groups(config, [1], SHAPE, "up") == [[1]]  # EM 128, 8 valid tokens: (True, False)
    assert batch_size_groups(config, [1, 2, 4], SHAPE, "up") == [[1], [2, 4]]  # 16 and 32 valid tokens
    assert batch_size_groups(config, [1, 2, 64], SHAPE, "up") == [[1], [2, 64]]  # EM 4368 % 16 == 0, 512 % 16 == 0
    assert batch_size_groups(config, [1, 2, 64, 65], SHAPE, "up") == [[1], [2, 64], [65]]  # EM 4376 % 16 == 8
    # GDC_EARLY (A.shape[0] <= 512): M <= 512 up; M * topk <= 512, so M <= 64, down.
    sizes = [1, 2, 4, 8, 16, 24, 32, 48, 64, 96, 128, 256, 512, 1024, 1536, 2048, 3072, 4096]
    assert batch_size_groups(config, sizes, SHAPE, "up") == [[1], sizes[1:13], sizes[13:]]
    assert batch_size_groups(config, sizes, SHAPE, "down") == [[1], sizes[1:9], sizes[9:]]
    # With E + 1 = 257 odd, EM = numel + 257 * (BM - 1) rounded to 4 is a multiple of 16 exactly when numel is:
    # the groups do not depend on the config.
    groups = {str(batch_size_groups({"BLOCK_SIZE_M": bm}, list(range(1, 600)), SHAPE, "up"))
              for bm in (16, 32, 64, 128, 256)}
    assert len(groups) == 1


def test_bench_contracts(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SGLANG_EMULATOR_PROFILE", str(write_profile(tmp_path / "p.yaml", time_scale=1e-6)))
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3")
    configs = space()
    job = moe_engine.validate_job(make_job(tmp_path, configs))
    bench = EmulatedBench(job)
    assert bench.device == {"name": "NVIDIA RTX PRO 6000 Blackwell Server Edition", "capability": [12, 0],
                            "sm_count": 188, "l2_bytes": 128 << 20, "smem_per_block_optin": SMEM}
    ok = next(c for c in configs if c["BLOCK_SIZE_M"] == 16 and shared_memory_bytes(c, 2, 2) <= SMEM)
    record = bench.compile("up", ok)
    assert record["status"] == "ok" and record["groups"] == batch_size_groups(ok, SIZES, SHAPE, "up")
    assert record["variants"] == len(record["groups"])
    assert set(record) == {"status", "seconds", "variants", "groups", "shared", "n_regs", "n_spills"}
    bm256 = next(c for c in configs if c["BLOCK_SIZE_M"] == 256 and c["num_warps"] == 4)
    assert bench.compile("down", bm256)["status"] == "compile:RuntimeError"
    big = next(c for c in configs if shared_memory_bytes(c, 2, 2) > SMEM and c["BLOCK_SIZE_M"] != 256)
    failed = bench.compile("up", big)
    assert failed["status"] == "compile:OutOfResources" and "Hardware limit: 101376" in failed["error"]
    model = KernelModel(load_profile())
    t = model.gemm_time_us(moe_problem(SHAPE), 64, "up", ok)
    screen = bench.screen_times("up", ok, [1, 64], 200)
    graph = bench.graph_times("up", 64, ok, 200)
    assert set(screen) == {1, 64} and len(screen[64]) == len(graph) == 200
    assert sum(screen[64]) / 200 == pytest.approx(t, rel=0.02)
    assert sum(graph) / 200 == pytest.approx(t, rel=0.002)
    assert 0.02 < _cv(screen[64]) < 0.05 and 0.002 < _cv(graph) < 0.008
    assert 5e-4 < bench.check("down", 64, ok) < 2e-3
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "4")
    with pytest.raises(RuntimeError, match="No CUDA GPUs are available"):
        EmulatedBench(job)


def _cv(samples: list[float]) -> float:
    mean = sum(samples) / len(samples)
    return (sum((s - mean) ** 2 for s in samples) / len(samples)) ** 0.5 / mean


def test_release_defaults_names_and_facts(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SGLANG_EMULATOR_PROFILE", str(EMULATOR / "profiles" / "newest.yaml"))
    release = EmulatedRelease({"shape": SHAPE})
    assert release.default_config(64, SHAPE, "up") == _default(64)
    assert release.default_config(512, SHAPE, "down") == _default(512)
    assert release.file_name(SHAPE, "down") == DOWN_FILE
    facts = release.facts()
    assert facts["sglang"] == "0.5.23" and facts["torch"] is None and len(facts["kernel_source_sha256"]) == 64


@pytest.mark.parametrize(("tuner", "message"), [
    ({"engine_compile_seconds": -1}, r"'tuner\.engine_compile_seconds' and 'tuner\.engine_crash_configs' must be"),
    ({"engine_crash_configs": 1.5}, r"'tuner\.engine_crash_configs' must be an integer, got 1\.5"),
])
def test_engine_settings_are_validated(tmp_path: Path, tuner: dict, message: str) -> None:
    with pytest.raises(ProfileError, match=message):
        TunerSettings.from_profile(load_profile(write_profile(tmp_path / "p.yaml", **tuner)))
