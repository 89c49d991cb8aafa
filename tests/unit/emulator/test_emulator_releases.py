# Copyright (c) llmops.sglang contributors
# Apache License 2.0 (see LICENSE)
"""The emulator playing SGLang 0.5.23 (profiles/newest.yaml, the demo's real case derived from demo.yaml): profile
derivation, the release's argument names and resolution rules, its dump, and the real case's capacity."""
from __future__ import annotations

import ast
import asyncio
import json
import logging
from pathlib import Path

import pytest
import yaml

from tests.emulator import EMULATOR, make_importable  # noqa: E402

make_importable()

from sglang._emulator.capacity import plan_memory  # noqa: E402
from sglang._emulator.cuda_graphs import capture_batch_sizes, decode_batch_sizes  # noqa: E402
from sglang._emulator.engine import create_engine  # noqa: E402
from sglang._emulator.model_shape import load_model_shape  # noqa: E402
from sglang._emulator.profile import ProfileError, load_document, load_profile  # noqa: E402
from sglang.srt.server_args import prepare_server_args  # noqa: E402

DEMO = EMULATOR / "profiles" / "demo.yaml"
NEWEST = EMULATOR / "profiles" / "newest.yaml"
QWEN = str(EMULATOR / "models" / "Qwen3.5-122B-A10B")
BASELINE = ["--model-path", QWEN, "--tp", "4", "--speculative-algorithm", "NEXTN"]
FUSION = [*BASELINE, "--enable-flashinfer-allreduce-fusion"]
GONE_IN_0_5_23 = ("cuda_graph_max_bs", "cuda_graph_bs", "disable_piecewise_cuda_graph", "enforce_piecewise_cuda_graph",
                  "piecewise_cuda_graph_max_tokens", "piecewise_cuda_graph_tokens", "piecewise_cuda_graph_compiler",
                  "torchao_config", "enable_nan_detection")


@pytest.fixture(name="newest")
def newest_fixture(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SGLANG_EMULATOR_PROFILE", str(NEWEST))
    monkeypatch.delenv("SGLANG_MOE_CONFIG_DIR", raising=False)


def write(path: Path, document: dict) -> Path:
    path.write_text(yaml.safe_dump(document), encoding="utf-8")
    return path


# --- profiles derived from another -----------------------------------------------------------------------------

def test_newest_is_the_demo_on_0_5_23() -> None:
    demo, newest = load_document(DEMO), load_document(NEWEST)
    assert (demo["sglang_version"], newest["sglang_version"]) == ("0.5.11", "0.5.23")
    assert {key: value for key, value in newest.items() if key not in ("description", "sglang_version")} == {
        key: value for key, value in demo.items() if key not in ("description", "sglang_version")}
    assert load_profile(NEWEST).raw == newest and "base" not in newest


def test_base_is_deep_merged_relative_to_the_deriving_profile(tmp_path: Path) -> None:
    (tmp_path / "sub").mkdir()
    write(tmp_path / "sub" / "middle.yaml", {"base": str(DEMO), "gpu": {"count": 2}, "tuner": {"jitter": 0.0}})
    child = write(tmp_path / "child.yaml", {"base": "sub/middle.yaml", "gpu": {"name": "X"}, "seed": 5})
    profile = load_profile(child)
    assert (profile.gpu.name, profile.gpu.count, profile.gpu.memory_mib) == ("X", 2, 97887)
    assert profile.seed == 5 and profile.raw["tuner"] == {"time_scale": 0.001, "jitter": 0.0}
    assert profile.decode.step_ms == load_profile(DEMO).decode.step_ms  # lists and tables come whole from the base


def test_a_base_loop_and_unknown_keys_are_named(tmp_path: Path) -> None:
    write(tmp_path / "a.yaml", {"base": "b.yaml"})
    write(tmp_path / "b.yaml", {"base": "a.yaml"})
    with pytest.raises(ProfileError, match="'base' chain loops"):
        load_profile(tmp_path / "a.yaml")
    with pytest.raises(ProfileError, match=r"unknown key 'gpu\.smem_per_sm'"):
        load_profile(write(tmp_path / "c.yaml", {"base": str(DEMO), "gpu": {"smem_per_sm": 1}}))
    with pytest.raises(ProfileError, match="cannot read emulator profile"):
        load_profile(write(tmp_path / "d.yaml", {"base": "absent.yaml"}))


# --- 0.5.23's names and rules ----------------------------------------------------------------------------------

def test_the_dump_has_0_5_23s_names_in_its_order(newest: None) -> None:
    args = prepare_server_args(BASELINE)
    table = json.loads((EMULATOR / "sglang/sglang/_emulator/cli/sglang-0.5.23.json").read_text())["fields"]
    assert args.dump_fields() == [name for name in table if name in set(args.dump_fields())]
    assert not set(GONE_IN_0_5_23) & set(args.dump_fields())
    dumped = ast.literal_eval(args.dump().removeprefix("server_args="))
    assert list(dumped) == args.dump_fields() and dumped["cuda_graph_config"] == args.cuda_graph_config
    assert dumped["file_storage_path"] is None and dumped["lora_backend"] == "csgmv"  # 0.5.23's defaults


def test_speculative_decoding_and_graphs_resolve_as_0_5_23(newest: None, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.INFO):
        args = prepare_server_args(BASELINE)
    assert (args.speculative_algorithm, args.max_running_requests) == ("EAGLE", 48)
    assert (args.speculative_num_steps, args.speculative_eagle_topk, args.speculative_num_draft_tokens) == (3, 1, 4)
    assert args.speculative_draft_model_path is None  # only archs with MTP in the checkpoint get model_path
    decode, prefill = args.cuda_graph_config["decode"], args.cuda_graph_config["prefill"]
    # 96 GB, TP4: the tier's 512; the speculative batch sizes (NEXTN is unresolved when they are generated)
    assert (decode["backend"], decode["max_bs"], decode["bs"]) == ("full", 512, decode_batch_sizes(512, True, False))
    assert decode["bs"][:10] == [1, 2, 3, 4, 5, 6, 7, 8, 10, 12]
    assert (prefill["backend"], prefill["max_bs"], prefill["bs"][-1]) == ("breakable", 8192, 8192)
    assert args.cuda_graph_max_bs_decode is None and args.cuda_graph_backend_prefill is None  # raw input
    assert "Attention backend not specified. Use flashinfer backend by default." in caplog.text
    assert "Max running requests is reset to 48 for speculative decoding." in caplog.text


def test_the_fusion_is_a_backend_and_turns_the_prefill_graph_off_on_sm120(newest: None,
                                                                         caplog: pytest.LogCaptureFixture) -> None:
    args = prepare_server_args(FUSION)
    assert (args.flashinfer_allreduce_fusion_backend, args.enable_flashinfer_allreduce_fusion) == ("auto", False)
    assert args.allreduce_fusion and args.graph_backend("prefill") == "disabled"
    assert "--enable-flashinfer-allreduce-fusion is deprecated. Please use --flashinfer-allreduce-fusion-backend=auto" \
        in caplog.text
    assert ("Breakable CUDA graph is incompatible with FlashInfer allreduce fusion on sm120; disabling prefill CUDA "
            "graph.") in caplog.text
    enforced = prepare_server_args([*FUSION, "--enforce-disable-flashinfer-allreduce-fusion"])
    assert enforced.flashinfer_allreduce_fusion_backend is None and enforced.graph_backend("prefill") == "breakable"
    explicit = prepare_server_args([*FUSION, "--cuda-graph-backend-prefill", "breakable"])
    assert explicit.allreduce_fusion and explicit.graph_backend("prefill") == "breakable"  # explicit: no cascade


def test_the_per_phase_flags_and_their_precedence(newest: None, caplog: pytest.LogCaptureFixture) -> None:
    capped = prepare_server_args([*BASELINE, "--cuda-graph-max-bs-decode", "32"])
    assert capped.cuda_graph_config["decode"]["max_bs"] == 32 and capped.decode_graph_limit == 32
    assert prepare_server_args([*BASELINE, "--max-running-requests", "24"]).cuda_graph_config["decode"]["max_bs"] == 24
    off = prepare_server_args([*BASELINE, "--disable-cuda-graph"])
    assert off.disable_cuda_graph and off.graph_backend("decode") == off.graph_backend("prefill") == "disabled"
    assert ("'--disable-cuda-graph' is deprecated and will be removed in a future release. Use "
            "'--cuda-graph-backend-{decode,prefill}=disabled' instead.") in caplog.text
    config = prepare_server_args([*BASELINE, "--disable-prefill-cuda-graph", "--cuda-graph-config",
                                  '{"prefill": {"backend": "full", "max_bs": 1024}}'])
    assert config.cuda_graph_config["prefill"]["backend"] == "full" and config.cuda_graph_config["prefill"]["bs"][-1] == 1024
    with pytest.raises(SystemExit):  # 0.5.11's flag is gone
        prepare_server_args([*BASELINE, "--disable-piecewise-cuda-graph"])


def test_the_real_cases_capacity_is_the_demos(newest: None, monkeypatch: pytest.MonkeyPatch) -> None:
    shape = load_model_shape(QWEN)
    plans = {}
    for name, profile in (("newest", NEWEST), ("demo", DEMO)):
        monkeypatch.setenv("SGLANG_EMULATOR_PROFILE", str(profile))
        plans[name] = [plan_memory(prepare_server_args(argv), shape, load_profile()) for argv in (BASELINE, FUSION)]
    for newest_plan, demo_plan in zip(plans["newest"], plans["demo"]):
        assert (newest_plan.max_running_requests, newest_plan.max_total_num_tokens, newest_plan.avail_after_graphs_gib) \
            == (demo_plan.max_running_requests, demo_plan.max_total_num_tokens, demo_plan.avail_after_graphs_gib)
    baseline, fusion = plans["newest"]
    assert (baseline.max_running_requests, fusion.max_running_requests) == (48, 26)
    assert fusion.capped_by_mamba and fusion.mamba_ratio == 5 and fusion.mamba_state_slots == 5 * 26
    assert capture_batch_sizes(decode_batch_sizes(512, True, False), 26)[-3:] == [22, 24, 26]


def test_a_graph_capture_oom_names_0_5_23s_flags(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SGLANG_EMULATOR_PROFILE", str(write(tmp_path / "fast.yaml", {"base": str(NEWEST),
                                                                                    "time_scale": 0.0001})))
    engine = create_engine(prepare_server_args([*BASELINE, "--mem-fraction-static", "0.97"]), load_profile())
    with pytest.raises(Exception, match="Capture cuda graph failed: CUDA out of memory") as failed:
        asyncio.run(engine.start())
    assert "2. set --cuda-graph-max-bs-decode to a smaller value (e.g., 16)" in str(failed.value)
