# Copyright (c) llmops.sglang contributors
# Apache License 2.0 (see LICENSE)
"""GPU-minute accounting (issue 18 item 1) and the MoE stage's estimate (item 5): GPUs x wall time from the run's
records, the real-GPU equivalent of an emulated run, the estimate from the tuner's plan."""
from __future__ import annotations

import pytest

from ansible_collections.llmops.sglang.plugins.module_utils import gpu_cost
from ansible_collections.llmops.sglang.plugins.module_utils.moe_search_space import (
    compute_bound_search_space, down_candidate_count, pruned_search_space, search_space_plan)

H200_SMEM, SM120_SMEM = 232448, 101376


def sweep(wall_s: float, runs: list[float]) -> dict:
    """A sweep that started at 12:00:00 and took ``wall_s``, with timed runs of ``runs`` seconds."""
    minutes, seconds = divmod(int(wall_s), 60)
    return {"started_at": "2026-12-01T12:00:00+00:00", "finished_at": f"2026-12-01T12:{minutes:02d}:{seconds:02d}+00:00",
            "levels": [{"concurrency": 1, "runs": [{"wall_s": run} for run in runs]}]}


@pytest.mark.parametrize(("args", "environment", "expected"), [
    ({"tp_size": 4}, {}, 4),
    ({"tp_size": 2, "pp_size": 2, "dp_size": 2}, {}, 8),
    ({"tp_size": 8, "dp_size": 8, "enable_dp_attention": True}, {}, 8),  # DP attention runs inside the TP group
    ({"tp_size": 16, "nnodes": 2}, {}, 8),  # this host's share
    ({"tp_size": None, "dp_size": None}, {}, 1),  # SGLang's defaults
])
def test_gpus_are_what_the_server_runs(args, environment, expected):
    assert gpu_cost.deployment_gpus({"server_args": args}, {"tp_size": 99}, environment)[0] == expected


def test_gpus_come_from_the_facts_then_the_request_then_cuda_visible_devices():
    assert gpu_cost.deployment_gpus(None, {"tp_size": 2}, {"CUDA_VISIBLE_DEVICES": "0,1,2,3"}) == (
        2, "tp_size x pp_size x dp_size / nnodes = 2 (requested args)")
    assert gpu_cost.deployment_gpus(None, None, {"CUDA_VISIBLE_DEVICES": "0, 1,2"})[0] == 3
    assert gpu_cost.deployment_gpus(None, None, {})[0] is None


def test_on_real_gpus_the_real_time_is_the_wall_time():
    assert gpu_cost.part(120.0, 100.0) == {"wall_s": 120.0, "real_s": 120.0}
    assert gpu_cost.part(-3, 5) == {"wall_s": 0.0, "real_s": 0.0}


def test_an_emulator_scales_only_the_work_its_programs_timed():
    # 12 s of the server's own log at time scale 0.1 are 120 real seconds; the 3 s before its first line stay 3 s.
    assert gpu_cost.part(15.0, 12.0, 0.1) == {"wall_s": 15.0, "real_s": 123.0}
    assert gpu_cost.part(10.0, 50.0, 0.5)["real_s"] == 20.0  # work is never more than the wall time


def test_a_measurement_is_its_restart_until_ready_its_warmup_and_its_timed_runs():
    parts = gpu_cost.measurement_parts({"restarted": True, "ready_seconds": 130.0}, {"timings": {"total": 120.0}},
                                       sweep(100, [20.0, 20.0, 20.0, 20.0]))
    assert parts == {"server_start": {"wall_s": 130.0, "real_s": 130.0}, "warmup": {"wall_s": 20.0, "real_s": 20.0},
                     "benchmark": {"wall_s": 80.0, "real_s": 80.0}}
    record = gpu_cost.cost_record(parts, 4, "tp 4", False, None)
    assert record["gpu_minutes"] == round(4 * 230 / 60, 1) == record["wall_gpu_minutes"]
    assert record["parts"]["benchmark"]["gpu_minutes"] == round(4 * 80 / 60, 1)
    assert "time_scale" not in record


def test_a_deploy_that_did_not_restart_started_nothing():
    parts = gpu_cost.measurement_parts({"restarted": False, "ready_seconds": None}, {"timings": {"total": 120.0}}, None)
    assert parts["server_start"] == {"wall_s": 0.0, "real_s": 0.0} and parts["benchmark"]["wall_s"] == 0.0


def test_an_emulated_measurement_in_real_gpu_time():
    parts = gpu_cost.measurement_parts({"restarted": True, "ready_seconds": 14.0}, {"timings": {"total": 12.0}},
                                       sweep(30, [5.0, 5.0, 5.0, 5.0, 5.0]), scale=0.1)
    assert parts["server_start"]["real_s"] == 2.0 + 120.0
    assert parts["warmup"]["real_s"] == 50.0 and parts["benchmark"]["real_s"] == 250.0
    record = gpu_cost.cost_record(parts, 4, "tp 4", True, {"serving": 0.1})
    assert record["wall_gpu_minutes"] == round(4 * 44 / 60, 1) and record["gpu_minutes"] == round(4 * 422 / 60, 1)
    assert record["time_scale"] == {"serving": 0.1}


def test_tuning_scales_the_up_tuners_own_time_and_the_down_processes():
    parts = gpu_cost.tuning_parts({"duration_s": 40.0, "tuner_seconds": 7.0}, {"duration_s": 14.0, "process_seconds": 11.0},
                                  {"before_s": 5.0, "after_s": 6.0}, scale=0.001)
    assert parts["tuning"] == {"wall_s": 54.0, "real_s": 33.0 + 7000.0 + 3.0 + 11000.0}
    assert parts["kernel_benchmark"] == {"wall_s": 11.0, "real_s": 11.0}  # kept as measured
    assert gpu_cost.tuning_parts(None, None, None) == {}


def test_the_rest_of_the_stage_is_other_and_the_parts_add_up():
    activity = gpu_cost.add_parts({"benchmark": {"wall_s": 100.0, "real_s": 1000.0}},
                                  {"benchmark": {"wall_s": 50.0, "real_s": 500.0}, "tuning": {"wall_s": 10, "real_s": 10}})
    parts = gpu_cost.stage_parts(200.0, activity)
    assert parts["benchmark"] == {"wall_s": 150.0, "real_s": 1500.0}
    assert parts["other"] == {"wall_s": 40.0, "real_s": 40.0}
    assert gpu_cost.stage_parts(100.0, activity)["other"]["wall_s"] == 0.0  # never negative


def test_scales_apply_only_to_an_emulated_server():
    assert gpu_cost.scales_for(False, {"serving": 0.1, "tuning": 0.001}) == (None, None, None)
    assert gpu_cost.scales_for(True, {"serving": 0.1, "tuning": 0.001, "startup": 0.025}) == (0.1, 0.001, 0.025)
    assert gpu_cost.scales_for(True, {"serving": 0.1}) == (0.1, 0.1, 0.1)  # tuner and starts at its time scale
    assert gpu_cost.scales_for(True, None) == (None, None, None)


def test_a_start_of_its_own_time_scale_is_scaled_by_it():
    # 3 s of the server's log at startup scale 0.025 are 120 real seconds; the sweep stays at the serving scale.
    parts = gpu_cost.measurement_parts({"restarted": True, "ready_seconds": 5.0}, {"timings": {"total": 3.0}},
                                       sweep(30, [5.0, 5.0, 5.0, 5.0, 5.0]), scale=0.1, startup_scale=0.025)
    assert parts["server_start"]["real_s"] == 2.0 + 120.0 and parts["benchmark"]["real_s"] == 250.0
    line = gpu_cost.cost_line(gpu_cost.cost_record(parts, 4, "tp 4", True,
                                                   {"serving": 0.1, "tuning": 0.001, "startup": 0.025}))
    assert line.endswith("(time scale 0.1 serving, 0.001 tuning, 0.025 startup)")


def test_a_skipped_candidate_saved_the_median_measured_configuration():
    assert gpu_cost.saved_estimate([40.0, 44.0, 100.0]) == 44.0
    assert gpu_cost.saved_estimate([]) is None


def test_the_moe_estimate_counts_rounds_of_the_search_space_per_gpu():
    # The demo: 20 batch sizes on 4 GPUs, 976 prefiltered configs, down over 384 configs per batch size, 1.4 s each;
    # the down screener runs one process per GPU: 5 rounds of 4 batch sizes.
    plan = {"batch_sizes": list(range(1, 21)), "chunks": [list(range(i, i + 4)) for i in range(1, 21, 4)],
            "chunk_size": 4, "resumed": 0, "search_space": {"mode": "prefiltered", "kept": 976}}
    estimate = gpu_cost.moe_estimate(plan, gpus=4, workers=4, down_candidates=384, measurement_s=600.0)
    assert (estimate["rounds"], estimate["down_processes"], estimate["down_rounds"]) == (5, 4, 5)
    assert estimate["parts_s"] == {"tuning_up": round(5 * 976 * 1.4, 1), "tuning_down": round(5 * 384 * 1.4, 1),
                                   "measurement": 600.0}
    assert estimate["tuning_gpu_minutes"] == round(4 * (5 * 976 + 5 * 384) * 1.4 / 60, 1)
    assert estimate["gpu_minutes"] == round(4 * ((5 * 976 + 5 * 384) * 1.4 + 600) / 60, 1)
    assert estimate["summary"].startswith(f"estimate: {estimate['gpu_minutes']:.1f} GPU-min on 4 GPUs")
    assert "down 5 rounds (20 batch sizes on 4 GPUs) x 384 configs" in estimate["summary"]


@pytest.mark.parametrize(("chunk_size", "gpus", "tuner", "processes", "rounds"), [
    (4, 4, "many", 4, 5),  # one screener per GPU of a chunk
    (2, 4, "many", 2, 10),  # a chunk of 2 keeps 2 of the 4 GPUs busy
    (8, 4, "many", 4, 5),  # a cluster's chunk: the head host's 4 GPUs
    (1, 4, "one", 4, 5),  # the up tuner's chunks of one are not the down screener's
    (None, 0, "many", 1, 20),  # GPUs unknown: one process
])
def test_the_down_estimate_counts_rounds_of_one_screener_per_gpu(chunk_size, gpus, tuner, processes, rounds):
    plan = {"batch_sizes": list(range(1, 21)), "chunks": [], "chunk_size": chunk_size,
            "tuner_cli": {"batch_sizes_per_run": tuner}, "search_space": {"mode": "full", "kept": 1920}}
    estimate = gpu_cost.moe_estimate(plan, gpus=gpus, workers=4, down_candidates=384, seconds_per_config=1.0)
    assert (estimate["down_processes"], estimate["down_rounds"]) == (processes, rounds)
    assert estimate["parts_s"]["tuning_down"] == rounds * 384.0


def test_the_moe_estimate_skips_what_the_checkpoint_holds_and_a_one_batch_size_tuner_takes_a_round_each():
    plan = {"batch_sizes": [1, 2, 4, 8, 16], "chunks": [[8, 16]], "resumed": 3,
            "search_space": {"mode": "full", "kept": 1920}, "tuner_cli": {"batch_sizes_per_run": "many"}}
    estimate = gpu_cost.moe_estimate(plan, gpus=8, workers=8, down_candidates=None, seconds_per_config=1.0)
    assert estimate["rounds"] == 1 and estimate["parts_s"]["tuning_up"] == 1920.0
    assert estimate["parts_s"]["tuning_down"] == 0.0 and estimate["resumed"] == 3
    one_per_run = {**plan, "chunks": [[8], [16]], "tuner_cli": {"batch_sizes_per_run": "one"}}
    assert gpu_cost.moe_estimate(one_per_run, gpus=8, workers=8, down_candidates=None)["rounds"] == 2


def test_measured_seconds_per_config_from_the_tuners_own_time():
    tune_up = {"tuner_seconds": 6.832, "chunk_size": 4, "search_space": {"kept": 976},
               "progress": [{"batch_sizes": [1, 2, 4, 8]}] * 5}
    assert gpu_cost.measured_seconds_per_config(tune_up, 0.001) == 1.4
    assert gpu_cost.measured_seconds_per_config({**tune_up, "tuner_seconds": None}) is None


def test_the_pruned_space_is_the_measured_third_of_the_space_on_h200():
    space = compute_bound_search_space()
    kept, dropped = pruned_search_space(space, H200_SMEM, 2, 2)
    assert (len(kept), dropped) == (624, 1296)  # h200-moe-tuning.md: prefilter + GROUP_SIZE_M in {1, 16}
    assert {config["GROUP_SIZE_M"] for config in kept} == {1, 16}
    assert all(config["num_stages"] * config["BLOCK_SIZE_K"] * (config["BLOCK_SIZE_M"] + config["BLOCK_SIZE_N"]) * 2
               <= H200_SMEM for config in kept)
    plan = search_space_plan("pruned", None, SM120_SMEM, (2, 2))
    assert (plan["mode"], plan["total"], plan["kept"]) == ("pruned", 1920, 324)
    assert search_space_plan("prefiltered", None, SM120_SMEM, (2, 2))["kept"] == 976
    with pytest.raises(ValueError, match="smem_per_block: required with search_space=pruned"):
        search_space_plan("pruned", None, None, (2, 2))


def test_the_down_screener_tries_the_space_with_block_size_m_pinned():
    assert down_candidate_count() == 384
    assert down_candidate_count([128, 128]) == 256


def test_the_cost_line_says_what_real_gpus_would_have_spent():
    record = gpu_cost.cost_record({"benchmark": {"wall_s": 30.0, "real_s": 300.0}}, 4, "tp 4", True,
                                  {"serving": 0.1, "tuning": 0.001})
    assert gpu_cost.cost_line(record) == (
        "20.0 GPU-min (4 GPUs x 5.0 min: benchmark 20.0); real-GPU equivalent of an emulated 2.0 GPU-min "
        "(time scale 0.1 serving, 0.001 tuning)")
    assert gpu_cost.cost_line(gpu_cost.cost_record({}, 0, "no GPU work", False, None)) == "0 GPU-min (no GPU work)"


# The engine's run on an H100 (benchmarks/results/moe_engine_gpu.json) as moe_tune's plan: 624 configs, SGLang's 18
# batch sizes in one chunk, 15 compile workers, one GPU.
H100_ENGINE_PLAN = {"batch_sizes": [1, 2, 4, 8, 16, 24, 32, 48, 64, 96, 128, 256, 512, 1024, 1536, 2048, 3072, 4096],
                    "resumed": 0, "search_space": {"mode": "pruned", "kept": 624}, "compile_workers": 15,
                    "devices": ["0"]}


def test_the_engine_estimate_reproduces_the_h100_run_it_is_sourced_from():
    plan = {**H100_ENGINE_PLAN, "chunks": [H100_ENGINE_PLAN["batch_sizes"]]}
    estimate = gpu_cost.moe_engine_estimate(plan, gpus=4, down=True)
    assert abs(estimate["engine_s"] - 83.3) < 0.2  # the run took 83.3 s wall
    assert estimate["parts_s"]["engine_start"] == 33.5
    assert estimate["parts_s"]["engine_compile"] == round(456.3 / 15, 1)  # its 1,123 variants on 15 workers
    assert estimate["engine_gpu_minutes"] == round(estimate["engine_s"] / 60, 2)  # one engine GPU
    assert estimate["tuning_gpu_minutes"] == round(4 * estimate["engine_s"] / 60, 1)  # the deployment's 4 are held
    assert estimate["model"]["source"].startswith("benchmarks/results/moe_engine_gpu.json, NVIDIA H100 80GB HBM3")
    assert "start 34 s + compile 624 configs x 2 kernels on 15 workers" in estimate["summary"]


def test_the_engine_estimate_scales_with_workers_gpus_and_what_is_left_and_a_cache_hit_costs_nothing():
    plan = {**H100_ENGINE_PLAN, "chunks": [H100_ENGINE_PLAN["batch_sizes"]]}
    base = gpu_cost.moe_engine_estimate(plan, gpus=4, down=True)["parts_s"]
    more = gpu_cost.moe_engine_estimate({**plan, "compile_workers": 30, "devices": ["0", "1"]}, gpus=4, down=True)
    assert abs(more["parts_s"]["engine_compile"] - base["engine_compile"] / 2) <= 0.1
    assert abs(more["parts_s"]["engine_timing"] - base["engine_timing"] / 2) <= 0.1
    up_only = gpu_cost.moe_engine_estimate(plan, gpus=4, down=False)["parts_s"]
    assert abs(up_only["engine_compile"] - base["engine_compile"] / 2) <= 0.1
    for settled in ({**plan, "cache": {"status": "hit"}}, {**plan, "chunks": [], "resumed": 18}):
        estimate = gpu_cost.moe_engine_estimate(settled, gpus=4, down=True, measurement_s=120.0)
        assert estimate["engine_s"] == 0.0 and estimate["tuning_gpu_minutes"] == 0.0
        assert estimate["gpu_minutes"] == 8.0  # the measurement of the tuned configs only
    assert "in the controller's cache (no engine run)" in gpu_cost.moe_engine_estimate(
        {**plan, "cache": {"status": "hit"}}, gpus=4, down=True)["summary"]


def test_the_engine_estimate_on_a_ray_cluster_times_on_every_gpu_of_its_hosts():
    plan = {**H100_ENGINE_PLAN, "chunks": [H100_ENGINE_PLAN["batch_sizes"]]}
    one = gpu_cost.moe_engine_estimate(plan, gpus=4, down=True)
    fleet = gpu_cost.moe_engine_estimate(plan, gpus=4, down=True, engine_gpus=12)
    assert fleet["engine_gpus"] == 12 and "on 12 GPUs" in fleet["summary"]
    assert abs(fleet["parts_s"]["engine_timing"] - one["parts_s"]["engine_timing"] / 12) <= 0.1
    assert fleet["parts_s"]["engine_compile"] == one["parts_s"]["engine_compile"]  # each node compiles its share
    assert abs(fleet["engine_gpu_minutes"] - 12 * fleet["engine_s"] / 60) < 0.02


def test_the_engine_run_has_no_seconds_per_config():
    tune_up = {"tuner_seconds": 234.8, "chunk_size": 18, "search_space": {"kept": 624},
               "progress": [{"batch_sizes": H100_ENGINE_PLAN["batch_sizes"]}], "cache": {"status": "miss"}}
    assert gpu_cost.measured_seconds_per_config(tune_up) is None
