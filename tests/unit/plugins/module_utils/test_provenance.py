"""provenance_mismatches: tuned MoE configs fit a host only with the same GPU, Triton, SGLang and model shape."""
from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest
from ansible.errors import AnsibleFilterError

from ansible_collections.llmops.sglang.plugins.filter.provenance_mismatches import provenance_mismatches as filter_
from ansible_collections.llmops.sglang.plugins.module_utils.provenance import provenance_mismatches

RTX = "NVIDIA RTX PRO 6000 Blackwell Server Edition"
PROVENANCE = {
    "gpu": RTX, "gpu_count": 4, "triton_dir": "triton_3_6_0", "tp_size": 4,
    "versions": {"python": "3.11.2", "ray": "2.52.1", "sglang": "0.5.11", "triton": "3.6.0", "torch": None},
    "moe_shape": {"architecture": "Qwen3_5MoeForCausalLM", "block_shape": None, "dtype": "bfloat16",
                  "hidden_size": 3072, "moe_intermediate_size": 1024, "num_experts": 256, "quant_method": None,
                  "shared_expert_fusable": False, "topk": 8},
}


def host_like(**changes) -> dict:
    host = {"gpu": PROVENANCE["gpu"], "versions": copy.deepcopy(PROVENANCE["versions"]),
            "moe_shape": copy.deepcopy(PROVENANCE["moe_shape"])}
    for path, value in changes.items():
        section, _, key = path.partition("__")
        if key:
            host[section][key] = value
        else:
            host[section] = value
    return host


def test_an_identical_host_fits():
    assert provenance_mismatches(PROVENANCE, host_like()) == []


def test_versions_that_do_not_matter_for_the_kernels_are_ignored():
    assert provenance_mismatches(PROVENANCE, host_like(versions__python="3.12.1", versions__ray="2.40.0")) == []


@pytest.mark.parametrize("change, reason", [
    ({"gpu": "NVIDIA H100 80GB HBM3"}, f"GPU NVIDIA H100 80GB HBM3 differs from the tuned GPU {RTX}"),
    ({"versions__triton": "3.5.1"}, "triton 3.5.1 differs from the tuned triton 3.6.0"),
    ({"versions__sglang": "0.5.10"}, "sglang 0.5.10 differs from the tuned sglang 0.5.11"),
    ({"versions__triton": None}, "triton (unknown) differs from the tuned triton 3.6.0"),
    ({"moe_shape__num_experts": 128, "moe_shape__topk": 4},
     "model MoE shape differs: num_experts 128 (tuned: 256), topk 4 (tuned: 8)"),
])
def test_each_mismatch_is_named_with_both_values(change, reason):
    assert provenance_mismatches(PROVENANCE, host_like(**change)) == [reason]


def test_every_mismatch_is_listed():
    host = host_like(gpu="NVIDIA H100 80GB HBM3", versions__triton="3.5.1", moe_shape__hidden_size=4096)
    assert len(provenance_mismatches(PROVENANCE, host)) == 3


def test_a_host_without_the_model_does_not_fit():
    assert provenance_mismatches(PROVENANCE, host_like(moe_shape=None))[0].startswith("model MoE shape differs: ")


def test_the_filter_checks_its_inputs_and_reads_a_recorded_provenance(tmp_path: Path):
    recorded = tmp_path / "provenance.json"
    recorded.write_text(json.dumps(PROVENANCE))
    assert filter_(json.loads(recorded.read_text()), host_like()) == []
    with pytest.raises(AnsibleFilterError, match="host must be a dict"):
        filter_(PROVENANCE, "gpu2")
