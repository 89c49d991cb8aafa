# Copyright (c) llmops.sglang contributors
# Apache License 2.0 (see LICENSE)
"""In-process tests of the emulator's profile, config lookup, server args, capacity and perf model."""
from __future__ import annotations

import json
import logging
import shutil
from pathlib import Path

import pytest

from tests.emulator import EMULATOR, make_importable  # noqa: E402

make_importable()

from sglang._emulator.capacity import plan_memory  # noqa: E402
from sglang._emulator.model_shape import load_model_shape  # noqa: E402
from sglang._emulator.perf import build_perf_model, expected_output_throughput  # noqa: E402
from sglang._emulator.profile import ProfileError, load_profile  # noqa: E402
from sglang.srt.layers.moe.moe_runner.triton_utils import fused_moe_triton_config as moe_config  # noqa: E402
from sglang.srt.server_args import prepare_server_args  # noqa: E402

DEMO_PROFILE = EMULATOR / "profiles" / "demo.yaml"
QWEN = str(EMULATOR / "models" / "Qwen3.5-122B-A10B")
BASELINE = ["--model-path", QWEN, "--tp", "4", "--speculative-algorithm", "NEXTN"]
RTX_UP = "E=256,N=256,device_name=NVIDIA_RTX_PRO_6000_Blackwell_Server_Edition.json"
RTX_DOWN = "E=256,N=256,device_name=NVIDIA_RTX_PRO_6000_Blackwell_Server_Edition_down.json"
# design.md: baseline 1000-in/1000-out sweep of the real case (aggregate output tok/s).
REPORTED_SWEEP = {1: 122, 4: 399, 16: 1214, 32: 1515, 64: 1583}


@pytest.fixture(autouse=True)
def demo_profile(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SGLANG_EMULATOR_PROFILE", str(DEMO_PROFILE))
    monkeypatch.delenv("SGLANG_MOE_CONFIG_DIR", raising=False)
    moe_config.get_moe_configs.cache_clear()


def test_demo_profile_loads_typed_values() -> None:
    profile = load_profile()
    assert profile.gpu.name == "NVIDIA RTX PRO 6000 Blackwell Server Edition"
    assert (profile.gpu.count, profile.gpu.memory_mib, profile.gpu.smem_per_block) == (4, 97887, 101376)
    assert profile.gpu.compute_capability == "12.0" and profile.gpu.sm_version == 120
    assert profile.decode.step_ms[48] == pytest.approx(44.96)
    assert profile.raw["gpu"]["driver"] == "580.95.05"


def test_unknown_profile_key_is_named(tmp_path: Path) -> None:
    text = DEMO_PROFILE.read_text().replace("  smem_per_block: 101376", "  smem_per_block: 101376\n  smem_per_sm: 1")
    path = tmp_path / "profile.yaml"
    path.write_text(text)
    with pytest.raises(ProfileError, match=r"unknown key 'gpu\.smem_per_sm'"):
        load_profile(path)


def test_starts_run_at_their_own_time_scale(tmp_path: Path) -> None:
    profile = load_profile()
    assert profile.startup_scaled(122.0) == pytest.approx(122.0 * 0.025)  # the demo's start: 3 s, not 12 s
    assert profile.scaled(122.0) == pytest.approx(12.2)
    path = tmp_path / "profile.yaml"
    path.write_text(DEMO_PROFILE.read_text().replace("  time_scale: 0.025", "  time_scale: 0"))
    with pytest.raises(ProfileError, match=r"'startup\.time_scale' must be > 0"):
        load_profile(path)
    path.write_text(DEMO_PROFILE.read_text().replace("  time_scale: 0.025", "  time_scale: null"))
    assert load_profile(path).startup_scaled(122.0) == pytest.approx(12.2)  # null: the profile's time_scale


def test_tuner_section_is_kept_raw_for_the_tuner(tmp_path: Path) -> None:
    path = tmp_path / "profile.yaml"
    path.write_text(DEMO_PROFILE.read_text() + "tuner:\n  seconds_per_config: 0.5\n")
    assert load_profile(path).raw["tuner"] == {"seconds_per_config": 0.5}


def test_missing_profile_file_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(ProfileError, match="cannot read emulator profile"):
        load_profile(tmp_path / "absent.yaml")


def test_config_file_names_follow_sglang() -> None:
    assert moe_config.get_config_file_name(256, 256, None) == RTX_UP
    assert moe_config.get_config_file_name(256, 256, None, [0, 0], down_moe=True) == RTX_DOWN
    assert moe_config.get_config_file_name(257, 256, "fp8_w8a8", [128, 128], per_channel_quant=True) == (
        "E=257,N=256,device_name=NVIDIA_RTX_PRO_6000_Blackwell_Server_Edition,dtype=fp8_w8a8,"
        "block_shape=[128, 128],per_channel_quant=True.json"
    )


def test_qwen_moe_shape_at_tp4_and_ep2() -> None:
    shape = load_model_shape(QWEN)
    assert shape.moe_file_shape(4, 1, False) == (256, 256)
    assert shape.moe_file_shape(4, 2, False) == (128, 512)
    assert shape.moe_dtype is None and shape.top_k == 8


def test_deepseek_style_model_gets_the_fused_shared_expert(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text(json.dumps({
        "architectures": ["DeepseekV3ForCausalLM"], "hidden_size": 7168, "num_hidden_layers": 61,
        "n_routed_experts": 256, "num_experts_per_tok": 8, "moe_intermediate_size": 2048,
        "kv_lora_rank": 512, "qk_rope_head_dim": 64,
        "quantization_config": {"quant_method": "fp8", "weight_block_size": [128, 128]},
    }))
    shape = load_model_shape(str(tmp_path))
    assert shape.moe_file_shape(8, 1, False) == (257, 256)
    assert shape.moe_file_shape(8, 1, True) == (256, 256)
    assert (shape.moe_dtype, shape.block_shape, shape.is_mla) == ("fp8_w8a8", (128, 128), True)


def test_builtin_configs_miss_the_demo_shape(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO)
    assert moe_config.get_moe_configs(256, 256, None) is None
    assert moe_config.get_moe_configs(256, 256, None, down_moe=True) is None
    messages = [r.getMessage() for r in caplog.records]
    builtin = Path(moe_config.__file__).resolve().parent / "configs" / "triton_3_6_0"
    assert messages == [
        "Using default MoE kernel config. Performance might be sub-optimal! Config file not found at "
        f"{builtin / RTX_UP}, you can create them with {moe_config.TUNER_URL}",
        "Using MoE kernel config with down_moe=False. Performance might be sub-optimal! Config file not found at "
        f"{builtin / RTX_DOWN}, you can create them with {moe_config.TUNER_URL}",
    ]


def test_config_dir_env_exact_then_fallback(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                            caplog: pytest.LogCaptureFixture) -> None:
    sample = Path(moe_config.__file__).resolve().parent / "configs" / "triton_3_5_1"
    older, newer = tmp_path / "configs" / "triton_3_4_0", tmp_path / "configs" / "triton_3_5_1"
    older.mkdir(parents=True)
    newer.mkdir()
    for directory in (older, newer):
        shutil.copy(sample / "E=257,N=256,device_name=NVIDIA_H200,dtype=fp8_w8a8,block_shape=[128, 128].json",
                    directory / RTX_UP)
    monkeypatch.setenv("SGLANG_MOE_CONFIG_DIR", str(tmp_path))
    caplog.set_level(logging.INFO)
    configs = moe_config.get_moe_configs(256, 256, None)
    assert configs[1]["BLOCK_SIZE_M"] == 16 and 1024 in configs
    # sglang 0.5.11 (the demo profile's release) falls back only through ["3.4.0", "3.3.1", "3.2.0", "3.1.0"]:
    # never to triton_3_5_1, although it is newer (0.5.12+ scan every dir newest first).
    assert caplog.records[-1].getMessage() == (
        f"Config file not found at {tmp_path / 'configs' / 'triton_3_6_0' / RTX_UP}. Fallback to triton version "
        f"3.4.0 and use MoE kernel config from {older / RTX_UP}. Performance might be sub-optimal!"
    )
    (older / RTX_UP).unlink()
    moe_config.get_moe_configs.cache_clear()
    assert moe_config.get_moe_configs(256, 256, None) is None
    assert caplog.records[-1].getMessage().startswith("Using default MoE kernel config.")
    exact = tmp_path / "configs" / "triton_3_6_0"
    exact.mkdir()
    shutil.copy(newer / RTX_UP, exact / RTX_UP)
    moe_config.get_moe_configs.cache_clear()
    moe_config.get_moe_configs(256, 256, None)
    assert caplog.records[-1].getMessage() == f"Using MoE kernel config from {exact / RTX_UP}."


def test_speculative_decoding_resets_max_running_requests(caplog: pytest.LogCaptureFixture) -> None:
    args = prepare_server_args(BASELINE)
    assert (args.speculative_algorithm, args.max_running_requests) == ("EAGLE", 48)
    assert (args.speculative_num_steps, args.speculative_eagle_topk, args.speculative_num_draft_tokens) == (3, 1, 4)
    assert args.speculative_draft_model_path == QWEN
    assert "Max running requests is reset to 48 for speculative decoding." in caplog.text
    explicit = prepare_server_args([*BASELINE, "--max-running-requests", "32"])
    assert explicit.max_running_requests == 32


def test_allreduce_fusion_on_sm120_disables_piecewise_cuda_graph() -> None:
    args = prepare_server_args([*BASELINE, "--enable-flashinfer-allreduce-fusion"])
    assert args.enable_flashinfer_allreduce_fusion and args.disable_piecewise_cuda_graph
    assert args.piecewise_disable_reason == "FlashInfer allreduce fusion is enabled on sm120"
    enforced = prepare_server_args([*BASELINE, "--enable-flashinfer-allreduce-fusion",
                                    "--enforce-disable-flashinfer-allreduce-fusion"])
    assert not enforced.enable_flashinfer_allreduce_fusion and not enforced.disable_piecewise_cuda_graph


def test_capacity_drops_from_48_to_26_with_the_fusion_workspace() -> None:
    profile, shape = load_profile(), load_model_shape(QWEN)
    baseline = plan_memory(prepare_server_args(BASELINE), shape, profile)
    fusion = plan_memory(prepare_server_args([*BASELINE, "--enable-flashinfer-allreduce-fusion"]), shape, profile)
    assert (baseline.max_running_requests, fusion.max_running_requests) == (48, 26)
    assert fusion.max_total_num_tokens < baseline.max_total_num_tokens
    assert not baseline.not_enough_memory and not baseline.graph_capture_oom


@pytest.mark.parametrize(("fraction", "outcome"), [(0.55, "not_enough_memory"), (0.97, "graph_capture_oom")])
def test_mem_fraction_static_limits(fraction: float, outcome: str) -> None:
    plan = plan_memory(prepare_server_args([*BASELINE, "--mem-fraction-static", str(fraction)]),
                       load_model_shape(QWEN), load_profile())
    assert getattr(plan, outcome)


def test_demo_baseline_curve_matches_the_reported_case() -> None:
    profile, shape = load_profile(), load_model_shape(QWEN)
    args = prepare_server_args(BASELINE)
    perf = build_perf_model(profile, args, shape)
    plan = plan_memory(args, shape, profile)
    curve = {c: expected_output_throughput(perf, c, 1000, 1000, plan.max_running_requests) for c in REPORTED_SWEEP}
    for concurrency, reported in REPORTED_SWEEP.items():
        assert curve[concurrency] == pytest.approx(reported, rel=0.03), concurrency


def test_flag_effects_stay_within_noise_and_tuned_configs_help() -> None:
    profile, shape = load_profile(), load_model_shape(QWEN)

    def sweep(extra: list[str], up: str = "missing", down: str = "missing") -> list[float]:
        args = prepare_server_args([*BASELINE, *extra])
        perf, plan = build_perf_model(profile, args, shape, up, down), plan_memory(args, shape, profile)
        return [expected_output_throughput(perf, c, 1000, 1000, plan.max_running_requests) for c in REPORTED_SWEEP]

    baseline = sweep([])
    for flag_set in (["--enable-fused-moe-sum-all-reduce"],
                     ["--enable-fused-moe-sum-all-reduce", "--enable-flashinfer-allreduce-fusion"]):
        assert all(abs(t / b - 1) < 0.035 for t, b in zip(sweep(flag_set), baseline)), flag_set
    tuned, fallback = sweep([], "used", "used"), sweep([], "fallback", "fallback")
    assert all(t / b > 1.08 for t, b in zip(tuned, baseline))
    assert all(1.0 < f / b < t / b for f, t, b in zip(fallback, tuned, baseline))
