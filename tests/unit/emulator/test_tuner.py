# Copyright (c) llmops.sglang contributors
# Apache License 2.0 (see LICENSE)
"""The emulated SGLang MoE tuners, run as the collection runs them: in a copy of the stand-in source
checkout, `cd benchmark/kernels/fused_moe_triton && python tuning_fused_moe_triton.py ...`, with real Ray.

Format strings and file names come from upstream benchmark/kernels/fused_moe_triton/tuning_fused_moe_triton.py
(commit 00e96592), tune_down_moe.py (4d078986) and get_config_file_name in
python/sglang/srt/layers/moe/moe_runner/triton_utils/fused_moe_triton_config.py (02c7c97f). Every Ray cluster lives
under a per-module RAY_TMPDIR; tests assert none of its processes outlive the run. Ray is kept on 127.0.0.1
(RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0 makes Ray resolve "this node" to loopback instead of the NIC).
"""
from __future__ import annotations

import ast
import importlib.util
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import yaml

from tests.emulator import EMULATOR, make_importable  # noqa: E402

make_importable()

from sglang._emulator.kernels import (  # noqa: E402
    KernelModel,
    MoeProblem,
    OutOfResources,
    config_key,
    default_config_for,
    shared_memory_bytes,
)
from sglang._emulator.profile import ProfileError, load_profile  # noqa: E402

from ansible_collections.llmops.sglang.plugins.module_utils.moe_tuning import ray_workers

SRC = EMULATOR / "sglang_src"
TUNER_DIR = Path("benchmark") / "kernels" / "fused_moe_triton"
DEMO_PROFILE = EMULATOR / "profiles" / "demo.yaml"
QWEN = str(EMULATOR / "models" / "Qwen3.5-122B-A10B")
RTX_UP = "E=256,N=256,device_name=NVIDIA_RTX_PRO_6000_Blackwell_Server_Edition.json"
RTX_DOWN = "E=256,N=256,device_name=NVIDIA_RTX_PRO_6000_Blackwell_Server_Edition_down.json"
H200_UP = "E=257,N=256,device_name=NVIDIA_H200,dtype=fp8_w8a8,block_shape=[128, 128].json"
H200_DOWN = "E=257,N=256,device_name=NVIDIA_H200,dtype=fp8_w8a8,block_shape=[128, 128]_down.json"
H200_GPU = {"name": "NVIDIA H200", "count": 8, "compute_capability": "9.0", "memory_mib": 143771,
            "smem_per_block": 232448, "mem_bandwidth_gbs": 4800}
DEMO_BATCH_SIZES = [1, 64, 512]
# The demo profile's margins are set per test profile (below) so the expected gains are known.
MARGINS = {1: 0.03, 16: 0.12, 512: 0.12, 4096: 0.05}

# tuning_fused_moe_triton.py's (00e96592) format strings as regexes; Ray prefixes worker prints with
# "(BenchmarkWorker pid=N[, ip=...]) ".
ANSI = re.compile(r"\x1b\[[0-9;]*m")
START = re.compile(r"^Start tuning over (\d+) configurations to create (.+\.json)\.\.\.$", re.M)
COMPLETED = re.compile(
    r"^\(BenchmarkWorker pid=\d+(?:, ip=[\d.]+)?\) "
    r"(?:Mon|Tue|Wed|Thu|Fri|Sat|Sun) \w{3} [ \d]\d \d{2}:\d{2}:\d{2} \d{4}\] Completed tuning for batch_size=(\d+)$",
    re.M)
WRITING = re.compile(r"^Writing best config to (.+\.json)\.\.\.$", re.M)
TOOK = re.compile(r"^Tuning took (\d+\.\d{2}) seconds$", re.M)
BENCH = re.compile(r"^Batch size: (\d+), config: (\{.*\})\nKernel time: (\d+\.\d{2}) us$", re.M)
WORKER = re.compile(
    r"^\[worker node=(\S+) host=(\S+) node_id=([0-9a-f]+) gpu=(\d+)\] "
    r"batch_size=(\d+) kernel_time=(\d+\.\d{2})us$", re.M)
DOWN_LINE = re.compile(r"^M=(\d+): best down (\{.*\}) \((\d+\.\d)us\)$", re.M)
WROTE = re.compile(r"^wrote (.+)$", re.M)
SORTED_KEYS = ["BLOCK_SIZE_M", "BLOCK_SIZE_N", "BLOCK_SIZE_K", "GROUP_SIZE_M", "num_warps", "num_stages"]
DEEPSEEK_V3_CONFIG = {
    "architectures": ["DeepseekV3ForCausalLM"],
    "model_type": "deepseek_v3",
    "hidden_size": 7168,
    "intermediate_size": 18432,
    "moe_intermediate_size": 2048,
    "n_routed_experts": 256,
    "n_shared_experts": 1,
    "num_experts_per_tok": 8,
    "first_k_dense_replace": 3,
    "num_hidden_layers": 61,
    "kv_lora_rank": 512,
    "qk_rope_head_dim": 64,
    "max_position_embeddings": 163840,
    "torch_dtype": "bfloat16",
    "quantization_config": {"activation_scheme": "dynamic", "fmt": "e4m3", "quant_method": "fp8",
                            "weight_block_size": [128, 128]},
}


# --------------------------------------------------------------------------------------------- helpers

def write_profile(path: Path, tuner: dict[str, Any], time_scale: float = 1e-4, gpu: dict | None = None) -> Path:
    """The demo profile with a fast time_scale, a fixed seed and the given tuner section."""
    profile = yaml.safe_load(DEMO_PROFILE.read_text())
    profile.update(time_scale=time_scale, seed=11, tuner={"default_margin": MARGINS, **tuner})
    profile["gpu"].update(gpu or {})
    path.write_text(yaml.safe_dump(profile))
    return path


def checkout(tmp_path: Path) -> Path:
    """A private copy of the stand-in source checkout; returns its fused_moe_triton dir (the tuner's CWD)."""
    root = tmp_path / "sglang"
    shutil.copytree(SRC, root)
    return root / TUNER_DIR


def script_env(profile: Path, ray_tmp: Path, **extra: str) -> dict[str, str]:
    env = {key: value for key, value in os.environ.items() if not key.startswith(("RAY_", "SGLANG_"))}
    env.update(
        PYTHONPATH=os.pathsep.join([str(EMULATOR / "sglang"), str(EMULATOR / "triton")]),
        SGLANG_EMULATOR_PROFILE=str(profile),
        RAY_TMPDIR=str(ray_tmp),
        RAY_DEDUP_LOGS="0",
        RAY_USAGE_STATS_ENABLED="0",
        RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER="0",
        PYTHONUNBUFFERED="1",
        **extra,
    )
    return env


def run_script(cwd: Path, script: str, args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, script, *args], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=180, check=False)


def run_tuner(cwd: Path, args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    result = run_script(cwd, "tuning_fused_moe_triton.py", args, env)
    result.stdout = ANSI.sub("", result.stdout)
    return result


def ray_processes(ray_tmp: Path) -> list[int]:
    """Live (non-zombie) processes of the Ray clusters whose temp dir is `ray_tmp`."""
    pids = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            cmdline = Path(f"/proc/{entry}/cmdline").read_bytes().decode(errors="replace")
        except OSError:
            continue
        if str(ray_tmp) in cmdline:
            pids.append(int(entry))
    return pids


def assert_ray_gone(ray_tmp: Path, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while ray_processes(ray_tmp) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert ray_processes(ray_tmp) == []


def load_common_utils() -> ModuleType:
    path = SRC / TUNER_DIR / "common_utils.py"
    spec = importlib.util.spec_from_file_location("emulated_fused_moe_common_utils", path)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def parse_benchmark(stdout: str) -> dict[int, tuple[dict, float]]:
    return {int(m): (ast.literal_eval(config), float(t)) for m, config, t in BENCH.findall(stdout)}


def demo_problem() -> MoeProblem:
    return MoeProblem(num_experts=256, topk=8, hidden_size=3072, intermediate_size=256, dtype=None)


# --------------------------------------------------------------------------------------------- fixtures

@pytest.fixture(scope="module")
def ray_tmp() -> Iterator[Path]:
    """Under /tmp, not pytest's base directory: Ray's unix sockets live below it (AF_UNIX paths: 107 bytes), and a
    checkout's path plus .cache/pytest-unit-py311/ray0/ray/session_<time>_<pid>/sockets/plasma_store exceeds that."""
    path = Path(tempfile.mkdtemp(prefix="llmops-ray-", dir="/tmp"))
    yield path
    assert_ray_gone(path)
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture(autouse=True)
def demo_profile_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SGLANG_EMULATOR_PROFILE", str(DEMO_PROFILE))
    monkeypatch.delenv("SGLANG_MOE_CONFIG_DIR", raising=False)


@pytest.fixture(scope="module")
def demo_runs(tmp_path_factory: pytest.TempPathFactory, ray_tmp: Path) -> dict[str, Any]:
    """The collection's before/tune/install/after sequence for the demo model (local Ray, 4 GPUs)."""
    base = tmp_path_factory.mktemp("demo")
    profile = write_profile(base / "profile.yaml", {"seconds_per_config": 1.4})
    cwd = checkout(base)
    env = script_env(profile, ray_tmp)
    common = ["--model", QWEN, "--tp-size", "4", "--batch-sizes", *map(str, DEMO_BATCH_SIZES)]
    before = run_tuner(cwd, common, env)
    tune = run_tuner(cwd, [*common, "--tune"], env)
    config_dir = base / "moe"
    installed = config_dir / "configs" / "triton_3_6_0" / RTX_UP
    installed.parent.mkdir(parents=True)
    shutil.copy(cwd / RTX_UP, installed)
    after = run_tuner(cwd, common, {**env, "SGLANG_MOE_CONFIG_DIR": str(config_dir)})
    return {"cwd": cwd, "profile": profile, "env": env, "before": before, "tune": tune, "after": after}


# --------------------------------------------------------------------------------------------- common_utils

def test_search_space_batch_sizes_and_shard_size_follow_upstream() -> None:
    common_utils = load_common_utils()
    space = common_utils.get_configs_compute_bound()
    assert len(space) == 1920
    assert len({tuple(config.values()) for config in space}) == 1920
    assert len(common_utils.filter_by_block_shape(space, [128, 128])) == 1280
    assert common_utils.get_default_batch_sizes() == [1, 2, 4, 8, 16, 24, 32, 48, 64, 96, 128, 256, 512, 1024,
                                                      1536, 2048, 3072, 4096]
    assert common_utils.calculate_shard_intermediate_size(1024, 4) == 512
    assert common_utils.calculate_shard_intermediate_size(2048, 8, 2) == 1024
    with pytest.raises(AssertionError, match="divisible"):
        common_utils.calculate_shard_intermediate_size(1024, 6, 4)
    shuffled = {"num_stages": 3, "USE_TMA": True, "GROUP_SIZE_M": 16, "BLOCK_SIZE_K": 128, "num_warps": 4,
                "BLOCK_SIZE_N": 64, "BLOCK_SIZE_M": 32}
    assert list(common_utils.sort_config(shuffled)) == [*SORTED_KEYS, "USE_TMA"]


def test_model_config_reads_demo_and_deepseek_shapes(tmp_path: Path) -> None:
    common_utils = load_common_utils()
    demo = common_utils.get_model_config(QWEN, 4)
    shape = (demo["num_experts"], demo["topk"], demo["hidden_size"], demo["shard_intermediate_size"])
    assert shape == (256, 8, 3072, 512)
    assert demo["dtype"] == "bfloat16" and demo["block_shape"] is None
    model = tmp_path / "DeepSeek-V3"
    model.mkdir()
    (model / "config.json").write_text(json.dumps(DEEPSEEK_V3_CONFIG))
    fused = common_utils.get_model_config(str(model), 8)
    assert (fused["num_experts"], fused["shard_intermediate_size"], fused["block_shape"]) == (257, 512, [128, 128])
    assert common_utils.get_model_config(str(model), 8, disable_shared_experts_fusion=True)["num_experts"] == 256
    assert common_utils.get_model_config(str(model), 8, ep_size=8)["num_experts"] == 33
    with pytest.raises(OSError, match="only reads local model directories"):
        common_utils.get_model_config(str(tmp_path / "missing"), 8)


# --------------------------------------------------------------------------------------------- kernel model

def test_default_config_is_slower_than_best_single_config_by_the_profile_margin(tmp_path: Path) -> None:
    kernels = KernelModel(load_profile(write_profile(tmp_path / "p.yaml", {"jitter": 0.0})))
    space = load_common_utils().get_configs_compute_bound()
    problem = demo_problem()
    for num_tokens, margin in ((1, 0.03), (64, 0.12), (512, 0.12), (4096, 0.05)):
        runnable = [c for c in space if shared_memory_bytes(c, 2, 2) <= 101376]
        best = min(kernels.kernel_time_us(problem, num_tokens, c, c) for c in runnable)
        default = default_config_for(problem, num_tokens)
        slowdown = kernels.kernel_time_us(problem, num_tokens, default, default) / best - 1
        assert slowdown == pytest.approx(margin, abs=1e-9)
        assert best >= kernels.ideal_time_us(problem, num_tokens)


def test_kernel_time_follows_the_memory_roofline(tmp_path: Path) -> None:
    kernels = KernelModel(load_profile(write_profile(tmp_path / "p.yaml", {"jitter": 0.0})))
    problem = demo_problem()
    # M=1 touches top-k = 8 experts: 8 * 3 * 3072 * 256 * 2 bytes over 0.85 * 1792 GB/s, plus t0 = 12 us.
    weights = 8 * 3 * 3072 * 256 * 2
    activations = (3072 + 6 * 8 * 256 + 8 * 3072 + 3072) * 2
    assert kernels.ideal_time_us(problem, 1) == pytest.approx(12 + (weights + activations) / (0.85 * 1792e3), rel=1e-9)
    times = [kernels.ideal_time_us(problem, m) for m in (1, 8, 64, 512, 4096)]
    assert times == sorted(times) and times[-1] / times[0] > 20


def test_jitter_is_seeded_and_below_one_percent(tmp_path: Path) -> None:
    profile = load_profile(write_profile(tmp_path / "p.yaml", {"jitter": 0.009}))
    smooth = KernelModel(load_profile(write_profile(tmp_path / "q.yaml", {"jitter": 0.0})))
    problem = demo_problem()
    configs = load_common_utils().get_configs_compute_bound()[::37]
    first = [KernelModel(profile).kernel_time_us(problem, 64, c, c) for c in configs]
    again = [KernelModel(profile).kernel_time_us(problem, 64, c, c) for c in configs]
    exact = [smooth.kernel_time_us(problem, 64, c, c) for c in configs]
    assert first == again
    ratios = [a / b - 1 for a, b in zip(first, exact)]
    assert max(abs(r) for r in ratios) < 0.009 and max(ratios) - min(ratios) > 0.005
    assert KernelModel(profile, seed=1).kernel_time_us(problem, 64, configs[0], configs[0]) != first[0]


def test_out_of_resources_uses_tritons_pipelined_smem_formula(tmp_path: Path) -> None:
    kernels = KernelModel(load_profile(write_profile(tmp_path / "p.yaml", {})))
    fp8 = MoeProblem(num_experts=256, topk=8, hidden_size=2048, intermediate_size=512, dtype="fp8_w8a8")
    crash_config = {"BLOCK_SIZE_M": 128, "BLOCK_SIZE_N": 256, "BLOCK_SIZE_K": 128, "GROUP_SIZE_M": 32,
                    "num_warps": 8, "num_stages": 4}
    with pytest.raises(OutOfResources) as raised:
        kernels.benchmark(fp8, 512, crash_config)
    assert (raised.value.required, raised.value.limit) == (147456, 101376)
    assert "out of resource: shared memory, Required: 147456, Hardware limit: 101376" in str(raised.value)
    assert kernels.benchmark(fp8, 512, {**crash_config, "num_stages": 3}) > 0  # 98304 bytes fit


def test_compile_failures_are_a_seeded_pick_of_the_search_space(tmp_path: Path) -> None:
    profile = load_profile(write_profile(tmp_path / "p.yaml", {"compile_error_configs": 7}))
    space = load_common_utils().get_configs_compute_bound()
    broken = KernelModel(profile).start_tuning(space)
    assert len(broken) == 7 and broken == KernelModel(profile).start_tuning(list(reversed(space)))
    kernels = KernelModel(profile)
    kernels.start_tuning(space)
    failing = next(c for c in space if config_key(c) in broken)
    with pytest.raises(RuntimeError, match="PassManager::run failed"):
        kernels.benchmark(demo_problem(), 16, failing)


@pytest.mark.parametrize(("tuner", "message"), [
    ({"seconds_per_kernel": 1}, r"unknown key 'tuner\.seconds_per_kernel'"),
    ({"jitter": "low"}, r"'tuner\.jitter' must be a number, got 'low'"),
    ({"jitter": 0.05}, r"'tuner\.jitter' must be in \[0, 0\.01\)"),
    ({"compile_error_configs": 2.5}, r"'tuner\.compile_error_configs' must be an integer, got 2\.5"),
    ({"default_margin": {64: 2.0}}, r"'tuner\.default_margin' values must be in \(0, worst_config_penalty\)"),
])
def test_bad_tuner_section_is_a_clear_error(tmp_path: Path, tuner: dict[str, Any], message: str) -> None:
    profile = yaml.safe_load(DEMO_PROFILE.read_text())
    profile["tuner"] = tuner
    path = tmp_path / "p.yaml"
    path.write_text(yaml.safe_dump(profile))
    with pytest.raises(ProfileError, match=message):
        KernelModel(load_profile(path))


# --------------------------------------------------------------------------------------------- main tuner (Ray)

def test_tune_writes_sglangs_file_with_sorted_configs(demo_runs: dict[str, Any]) -> None:
    tune = demo_runs["tune"]
    assert tune.returncode == 0, tune.stderr[-3000:]
    assert START.findall(tune.stdout) == [("1920", RTX_UP)]
    assert WRITING.findall(tune.stdout) == [RTX_UP]
    assert len(TOOK.findall(tune.stdout)) == 1
    assert sorted(int(m) for m in COMPLETED.findall(tune.stdout)) == DEMO_BATCH_SIZES
    text = (demo_runs["cwd"] / RTX_UP).read_text()
    configs = json.loads(text)
    assert text == json.dumps(configs, indent=4) + "\n"
    assert list(configs) == [str(m) for m in DEMO_BATCH_SIZES]
    assert all(list(config) == SORTED_KEYS for config in configs.values())
    assert not list(demo_runs["cwd"].glob(".tmp-*"))


def test_batch_sizes_are_spread_over_the_profiles_gpus(demo_runs: dict[str, Any]) -> None:
    workers = WORKER.findall(demo_runs["tune"].stdout)
    assert [int(w[4]) for w in workers] == DEMO_BATCH_SIZES
    assert [w[0] for w in workers] == ["127.0.0.1"] * 3
    # Round-robin over 4 actors of one GPU each (upstream _distribute); Ray, not the actor's index, picks each
    # actor's GPU, so the 3 batch sizes land on 3 distinct GPUs of the 4, whichever they are.
    gpus = [int(w[3]) for w in workers]
    assert len(set(gpus)) == 3 and set(gpus) <= {0, 1, 2, 3}


def test_benchmark_mode_shows_the_tuned_gain_over_the_default_config(demo_runs: dict[str, Any]) -> None:
    before, after = demo_runs["before"], demo_runs["after"]
    assert before.returncode == 0 and after.returncode == 0, before.stderr[-2000:] + after.stderr[-2000:]
    assert "Using default MoE kernel config. Performance might be sub-optimal!" in before.stderr
    default, tuned = parse_benchmark(before.stdout), parse_benchmark(after.stdout)
    assert sorted(default) == sorted(tuned) == DEMO_BATCH_SIZES
    installed = json.loads((demo_runs["cwd"] / RTX_UP).read_text())
    problem = demo_problem()
    for m in DEMO_BATCH_SIZES:
        assert default[m][0] == default_config_for(problem, m)
        assert tuned[m][0] == installed[str(m)]
        gain = default[m][1] / tuned[m][1] - 1
        # Both runs carry up to 0.4 % jitter each.
        assert gain == pytest.approx(KernelModel(load_profile(demo_runs["profile"])).settings.margin_at(m), abs=0.009)
    assert default[64][1] / tuned[64][1] > 1.10


def test_search_space_file_block_filter_oor_and_compile_errors(tmp_path: Path, ray_tmp: Path) -> None:
    model = tmp_path / "DeepSeek-V3"
    model.mkdir()
    (model / "config.json").write_text(json.dumps(DEEPSEEK_V3_CONFIG))
    profile = write_profile(tmp_path / "h200.yaml", {"compile_error_configs": 2}, gpu=H200_GPU)
    near_ideal = {"BLOCK_SIZE_M": 16, "BLOCK_SIZE_N": 128, "BLOCK_SIZE_K": 128, "GROUP_SIZE_M": 16,
                  "num_warps": 4, "num_stages": 3}
    candidates = [
        near_ideal,
        {**near_ideal, "GROUP_SIZE_M": 1, "num_stages": 4},
        {**near_ideal, "BLOCK_SIZE_N": 64, "num_warps": 8},
        {**near_ideal, "BLOCK_SIZE_M": 64, "BLOCK_SIZE_N": 256, "num_stages": 2},
        {**near_ideal, "BLOCK_SIZE_K": 256},  # dropped: block_k 128 % 256 != 0
        # 4 * (256*128 + 128*256) = 262144 bytes > H200's 232448: OutOfResources at every M.
        {**near_ideal, "BLOCK_SIZE_M": 256, "BLOCK_SIZE_N": 256, "num_stages": 5},
    ]
    space_file = tmp_path / "space.json"
    space_file.write_text(json.dumps(candidates))
    cwd = checkout(tmp_path)
    # Ray, like on a GPU host, only sees (and numbers workers by) the CUDA_VISIBLE_DEVICES GPUs.
    env = script_env(profile, ray_tmp, CUDA_VISIBLE_DEVICES="5,7")
    result = run_tuner(cwd, ["--model", str(model), "--tp", "8", "--dtype", "fp8_w8a8", "--batch-sizes", "16", "256",
                             "--search-space-file", str(space_file), "--tune"], env)
    assert result.returncode == 0, result.stderr[-3000:]
    assert START.findall(result.stdout) == [("5", H200_UP)]
    assert sorted(int(w[3]) for w in WORKER.findall(result.stdout)) == [5, 7]
    tuned = json.loads((cwd / H200_UP).read_text())
    # What the tuner must pick: the fastest of the configs that neither fail to compile nor overflow smem.
    kernels = KernelModel(load_profile(profile))
    kept = [c for c in candidates if c["BLOCK_SIZE_K"] <= 128]
    broken = kernels.start_tuning(kept)
    assert len(broken) == 2
    problem = MoeProblem(num_experts=257, topk=8, hidden_size=7168, intermediate_size=256, dtype="fp8_w8a8",
                         block_shape=(128, 128))
    for m in (16, 256):
        runnable = [c for c in kept[:4] if config_key(c) not in broken]
        expected = min(runnable, key=lambda c: kernels.kernel_time_us(problem, m, c, c))
        assert tuned[str(m)] == expected
        assert config_key(tuned[str(m)]) not in broken and tuned[str(m)] != kept[4]
    assert_ray_gone(ray_tmp)


def test_search_space_file_must_be_a_json_list(tmp_path: Path, ray_tmp: Path) -> None:
    space_file = tmp_path / "space.json"
    space_file.write_text(json.dumps({"configs": [{"BLOCK_SIZE_M": 16}]}))
    result = run_tuner(checkout(tmp_path), ["--model", QWEN, "--tp", "4", "--search-space-file", str(space_file),
                                            "--tune"], script_env(DEMO_PROFILE, ray_tmp))
    assert result.returncode == 1
    assert "ValueError: --search-space-file must contain a JSON list of configs" in result.stderr


def test_crash_injection_fails_the_run_without_output(tmp_path: Path, ray_tmp: Path) -> None:
    profile = write_profile(tmp_path / "p.yaml", {"crash_at_batch_size": 64})
    cwd = checkout(tmp_path)
    result = run_tuner(cwd, ["--model", QWEN, "--tp", "4", "--batch-sizes", "1", "64", "--tune"],
                       script_env(profile, ray_tmp))
    assert result.returncode != 0
    assert "Start tuning over 1920 configurations" in result.stdout
    assert "Writing best config" not in result.stdout
    assert "ActorDiedError" in result.stderr or "actor died" in result.stderr.lower()
    assert sorted(p.name for p in cwd.iterdir() if p.suffix == ".json") == []
    assert_ray_gone(ray_tmp)


@pytest.mark.parametrize("kill_signal", [signal.SIGTERM, signal.SIGKILL], ids=["SIGTERM", "SIGKILL"])
def test_killed_tuner_leaves_no_json(tmp_path: Path, ray_tmp: Path, kill_signal: signal.Signals) -> None:
    # 1920 configs x 1.4 s x 0.005 = 13 s per batch size: the kill lands mid-tuning.
    profile = write_profile(tmp_path / "p.yaml", {}, time_scale=0.005)
    cwd = checkout(tmp_path)
    process = subprocess.Popen(
        [sys.executable, "tuning_fused_moe_triton.py", "--model", QWEN, "--tp", "4", "--batch-sizes", "1", "64",
         "--tune"], cwd=cwd, env=script_env(profile, ray_tmp), stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
        text=True, start_new_session=True)
    try:
        assert process.stdout is not None
        for line in process.stdout:
            if line.startswith("Start tuning over"):
                break
        time.sleep(1.0)
        process.send_signal(kill_signal)
        assert process.wait(timeout=30) != 0
        assert list(cwd.glob("*.json")) == [] and list(cwd.glob(".tmp-*")) == []
        if kill_signal == signal.SIGTERM:
            assert_ray_gone(ray_tmp)  # Ray's driver-side handler shuts the local cluster down
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
        # After SIGKILL, raylet and GCS die with the driver (Ray's fate sharing) but Ray's dashboard
        # and runtime-env agents linger: end those, which this test started, by pid.
        deadline = time.monotonic() + 20
        while (pids := ray_processes(ray_tmp)) and time.monotonic() < deadline:
            for pid in pids:
                _kill(pid)
            time.sleep(0.5)
    assert_ray_gone(ray_tmp)


def _kill(pid: int) -> None:
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


CLUSTER_HELPER = """
import sys
from ray.cluster_utils import Cluster
cluster = Cluster(initialize_head=True, head_node_args=dict(num_gpus=2, num_cpus=2, node_ip_address="127.0.0.1",
                                                            include_dashboard=False))
cluster.add_node(num_gpus=2, num_cpus=2, node_ip_address="127.0.0.1")
cluster.wait_for_nodes()
print(cluster.address, flush=True)
sys.stdin.read()  # until the test closes stdin
cluster.shutdown()
"""


@contextmanager
def two_node_cluster(env: dict[str, str]) -> Iterator[str]:
    """Two Ray nodes with 2 GPUs each on this host, standing in for two GPU hosts; yields the cluster's address
    and shuts it down cleanly after the body."""
    helper = subprocess.Popen([sys.executable, "-c", CLUSTER_HELPER], env=env, stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        assert helper.stdout is not None and helper.stdin is not None
        yield helper.stdout.readline().strip()
        helper.stdin.close()
        assert helper.wait(timeout=60) == 0
    finally:
        if helper.poll() is None:
            helper.kill()
            helper.wait()


def test_attached_multi_node_cluster_runs_batch_sizes_on_every_node(tmp_path: Path, ray_tmp: Path) -> None:
    profile = write_profile(tmp_path / "p.yaml", {})
    env = script_env(profile, ray_tmp)
    with two_node_cluster(env) as address:
        assert re.fullmatch(r"127\.0\.0\.1:\d+", address)
        result = run_tuner(checkout(tmp_path), ["--model", QWEN, "--tp", "4", "--batch-sizes", "1", "2", "4", "8"],
                           {**env, "RAY_ADDRESS": address})
        assert result.returncode == 0, result.stderr[-3000:]
        workers = WORKER.findall(result.stdout)
        assert sorted(int(w[4]) for w in workers) == [1, 2, 4, 8]
        assert len({w[2] for w in workers}) == 2
        assert len({(w[2], w[3]) for w in workers}) == 4
        assert len(parse_benchmark(result.stdout)) == 4
    assert_ray_gone(ray_tmp)


def test_ray_itself_tells_where_a_tuner_run_worked(tmp_path: Path, ray_tmp: Path) -> None:
    """moe_tuning.ray_workers asks the cluster's GCS (real Ray, no dashboard) right after the tuner exited: the job
    of the tuner's driver pid, its BenchmarkWorker actors (one GPU each) and their nodes, as for the real tuner."""
    profile = write_profile(tmp_path / "p.yaml", {})
    env = script_env(profile, ray_tmp)
    with two_node_cluster(env) as address:
        cluster_env = {**env, "RAY_ADDRESS": address}
        tuner = subprocess.Popen([sys.executable, "tuning_fused_moe_triton.py", "--model", QWEN, "--tp", "4",
                                  "--batch-sizes", "1", "2", "4", "8", "16"], cwd=checkout(tmp_path), env=cluster_env,
                                 stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        assert tuner.wait(timeout=180) == 0
        seen = ray_workers(sys.executable, cluster_env, tuner.pid, [1, 2, 4, 8, 16])
        assert seen["cluster_gpus"] == 4 and seen["gpus_used"] == 4
        assert len(seen["nodes_used"]) == 2 and seen["hosts_used"] == ["127.0.0.1"]
        assert seen["workers_per_host"] == {"127.0.0.1": 4}
        assert len({worker["actor_id"] for worker in seen["workers"]}) == 4
        # Fewer batch sizes than workers: Ray cannot tell which workers had one, so no host counts as used.
        assert ray_workers(sys.executable, cluster_env, tuner.pid, [1])["hosts_used"] == []
        with pytest.raises(ValueError, match="has no job of the tuner's driver"):
            ray_workers(sys.executable, cluster_env, 1, [1])
    assert_ray_gone(ray_tmp)


# --------------------------------------------------------------------------------------------- down tuner

def test_down_tuner_pins_block_size_m_and_writes_the_down_file(demo_runs: dict[str, Any], tmp_path: Path) -> None:
    cwd, env = demo_runs["cwd"], demo_runs["env"]
    out_dir = tmp_path / "down"
    out_dir.mkdir()
    result = run_script(cwd, "tune_down_moe.py", ["--model", QWEN, "--tp-size", "4", "--dtype", "auto",
                                                  "--gate-up-config", RTX_UP, "--batch-sizes", "1", "48", "512",
                                                  "--out-dir", str(out_dir)], env)
    assert result.returncode == 0, result.stderr[-3000:]
    path = out_dir / RTX_DOWN
    assert WROTE.findall(result.stdout) == [str(path)]
    lines = DOWN_LINE.findall(result.stdout)
    assert [int(m) for m, _, _ in lines] == [1, 48, 512]
    text = path.read_text()
    down = json.loads(text)
    assert text == json.dumps(down, indent=4) and not text.endswith("\n")
    gate_up = json.loads((cwd / RTX_UP).read_text())
    nearest = {1: "1", 48: "64", 512: "512"}
    for m, printed, _ in lines:
        assert ast.literal_eval(printed) == down[m]
        assert down[m]["BLOCK_SIZE_M"] == gate_up[nearest[int(m)]]["BLOCK_SIZE_M"]
        assert list(down[m]) == SORTED_KEYS
    # The screened down config is at least as fast as reusing the gate/up config for the down GEMM.
    kernels = KernelModel(load_profile(demo_runs["profile"]))
    for m, _, micros in lines:
        up = gate_up[nearest[int(m)]]
        assert float(micros) <= kernels.kernel_time_us(demo_problem(), int(m), up, up) + 0.05


def test_down_tuner_default_dtype_names_the_fp8_block_file(tmp_path: Path, ray_tmp: Path) -> None:
    model = tmp_path / "DeepSeek-V3"
    model.mkdir()
    (model / "config.json").write_text(json.dumps(DEEPSEEK_V3_CONFIG))
    gate_up = tmp_path / H200_UP
    entry = {"BLOCK_SIZE_M": 64, "BLOCK_SIZE_N": 128, "BLOCK_SIZE_K": 128, "GROUP_SIZE_M": 1, "num_warps": 4,
             "num_stages": 3}
    gate_up.write_text(json.dumps({"1": {**entry, "BLOCK_SIZE_M": 16}, "256": entry}, indent=4) + "\n")
    profile = write_profile(tmp_path / "h200.yaml", {}, gpu=H200_GPU)
    result = run_script(checkout(tmp_path), "tune_down_moe.py",
                        ["--model", str(model), "--tp-size", "8", "--gate-up-config", str(gate_up),
                         "--batch-sizes", "2", "200", "--out-dir", str(tmp_path)], script_env(profile, ray_tmp))
    assert result.returncode == 0, result.stderr[-3000:]
    down = json.loads((tmp_path / H200_DOWN).read_text())
    assert {m: c["BLOCK_SIZE_M"] for m, c in down.items()} == {"2": 16, "200": 64}
    assert all(128 % c["BLOCK_SIZE_K"] == 0 for c in down.values())
