# Copyright (c) llmops.sglang contributors
# Apache License 2.0 (see LICENSE)
"""The filters the stages use to skip ineffective candidates and to estimate the MoE stage (issue 18 items 4, 5)."""
from __future__ import annotations

import pytest
from ansible.errors import AnsibleFilterError

from ansible_collections.llmops.sglang.plugins.filter.flag_trial_plan import flag_trial_plan
from ansible_collections.llmops.sglang.plugins.filter.moe_cost_estimate import moe_cost_estimate

FINDING = {"id": "allreduce-fusion-arch", "flag": "enable_flashinfer_allreduce_fusion", "failed_conditions": ["sm_in"],
           "message": "enable_flashinfer_allreduce_fusion will not take effect because ...", "source": "sglang"}
FINDINGS = {"flashinfer-allreduce-fusion": [FINDING], "fused-moe-sum-all-reduce": []}
FUSION = {"name": "flashinfer-allreduce-fusion", "args": {"enable_flashinfer_allreduce_fusion": True}}
# What llmops.sglang.moe_tune returns in check mode for the demo (20 batch sizes, prefiltered for SM120, 4 GPUs).
DEMO_PLAN = {"changed": True, "file_name": "E=256,N=256,device_name=NVIDIA_RTX_PRO_6000_Blackwell_Server_Edition.json",
             "batch_sizes": [1, 2, 4, 8, 16, 24, 32, 48, 64, 96, 128, 192, 256, 512, 1024, 1536, 2048, 3072, 4096, 8192],
             "search_space": {"mode": "prefiltered", "total": 1920, "kept": 976, "dropped": 944}, "chunk_size": 4,
             "resumed": 0, "chunks": [[1, 2, 4, 8], [16, 24, 32, 48], [64, 96, 128, 192], [256, 512, 1024, 1536],
                                      [2048, 3072, 4096, 8192]], "progress": []}


def test_the_filter_takes_the_candidates_findings_by_name_and_force_as_ansible_does():
    assert flag_trial_plan(FUSION, FINDINGS)["skip"] is True
    assert flag_trial_plan({**FUSION, "force": "yes"}, FINDINGS)["forced_by"] == "force: true on the candidate"
    assert flag_trial_plan(FUSION, FINDINGS, skip_ineffective="false")["skip"] is False
    assert flag_trial_plan(FUSION, {})["skip"] is False  # no preflight in this run: measure
    with pytest.raises(AnsibleFilterError, match="flashinfer-allreduce-fusion.force: must be true or false"):
        flag_trial_plan({**FUSION, "force": "always"}, FINDINGS)
    with pytest.raises(AnsibleFilterError, match="must be a candidate"):
        flag_trial_plan(["not", "a", "candidate"], FINDINGS)


def test_the_estimate_of_the_demo_from_the_tuners_plan():
    estimate = moe_cost_estimate(DEMO_PLAN, down=True, facts={"server_args": {"tp_size": 4}},
                                 reference_cost={"real_s": 480.0})
    assert (estimate["gpus"], estimate["workers"], estimate["rounds"], estimate["down_candidates"]) == (4, 4, 5, 384)
    assert estimate["parts_s"] == {"tuning_up": 6832.0, "tuning_down": 2688.0, "measurement": 480.0}  # 4 screeners
    assert estimate["gpu_minutes"] == round(4 * (6832 + 2688 + 480) / 60, 1)
    cluster = moe_cost_estimate(DEMO_PLAN, workers=8, seconds_per_config=1.0, requested_args={"tp_size": 4})
    assert cluster["rounds"] == 3 and cluster["parts_s"]["tuning_up"] == 3 * 976.0  # 20 batch sizes over 8 GPUs
    with pytest.raises(AnsibleFilterError, match="the up kernel's plan"):
        moe_cost_estimate({"changed": False})


def test_the_engine_plan_is_estimated_with_the_engines_model():
    plan = {**DEMO_PLAN, "compile_workers": 60, "devices": ["0", "1", "2", "3"], "cache": {"status": "miss"}}
    estimate = moe_cost_estimate(plan, down=True, engine="llmops", facts={"server_args": {"tp_size": 4}},
                                 reference_cost={"real_s": 480.0})
    assert estimate["engine"] == "llmops" and (estimate["compile_workers"], estimate["engine_gpus"]) == (60, 4)
    assert estimate["parts_s"]["measurement"] == 480.0 and estimate["engine_s"] > 0
    assert "seconds_per_config" not in estimate and estimate["tuning_gpu_minutes"] < moe_cost_estimate(
        DEMO_PLAN, down=True, facts={"server_args": {"tp_size": 4}})["tuning_gpu_minutes"] / 50
