# Copyright (c) llmops.sglang contributors
# Apache License 2.0 (see LICENSE)
"""The moe_targets filter: thin over module_utils.moe_targets.moe_targets, errors as AnsibleFilterError, docs."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from ansible.errors import AnsibleFilterError

from ansible_collections.llmops.sglang.plugins.filter import moe_targets as plugin

FIXTURES = Path(__file__).resolve().parents[3] / "fixtures" / "moe_configs"

REPO = Path(__file__).resolve().parents[4]
QWEN = json.loads((REPO / "tests" / "fixtures" / "moe_configs" / "hf_configs" / "qwen3_5_moe_style_bf16.json").read_text())
RTX_PRO = "NVIDIA RTX PRO 6000 Blackwell Server Edition"
ROOT = "/opt/sglang/venv/lib/python3.11/site-packages/sglang/srt/layers/moe/moe_runner/triton_utils/configs/triton_3_6_0"
UP = "E=256,N=256,device_name=NVIDIA_RTX_PRO_6000_Blackwell_Server_Edition.json"
DOWN = "E=256,N=256,device_name=NVIDIA_RTX_PRO_6000_Blackwell_Server_Edition_down.json"


def test_filter_is_exposed():
    assert plugin.FilterModule().filters() == {"moe_targets": plugin.moe_targets}


def test_filter_returns_targets_and_tuner_args():
    result = plugin.moe_targets(QWEN, tp_size="4", ep_size=1, device_name=RTX_PRO, triton_version="3.6.0",
                                missing=[f"{ROOT}/{UP}", f"{ROOT}/{DOWN}"])
    assert result["agree"] is True
    assert [t["path"] for t in result["targets"]] == [f"{ROOT}/{UP}", f"{ROOT}/{DOWN}"]
    assert result["tuner_args"] == ["--dtype", "auto"] and result["expected_tuner_output"] == UP


def test_filter_disagreement_is_a_filter_error_with_both_lists():
    wrong_tp = f"{ROOT}/E=256,N=512,device_name=NVIDIA_RTX_PRO_6000_Blackwell_Server_Edition.json"
    with pytest.raises(AnsibleFilterError, match="moe_targets: server log and derived MoE config names disagree") as raised:
        plugin.moe_targets(QWEN, tp_size=4, device_name=RTX_PRO, triton_version="3.6.0", missing=[wrong_tp])
    assert wrong_tp in str(raised.value) and f"triton_3_6_0/{UP}" in str(raised.value)


@pytest.mark.parametrize(("model", "kwargs", "message"), [
    ("not a dict", {"device_name": RTX_PRO, "triton_version": "3.6.0"}, "the input must be the model's parsed config.json"),
    (QWEN, {"triton_version": "3.6.0"}, "device_name .* and triton_version .* are required"),
    (QWEN, {"device_name": RTX_PRO, "triton_version": "3.6.0", "dtype": "float32"}, "the tuner would write"),
    ({"architectures": ["LlamaForCausalLM"]}, {"device_name": RTX_PRO, "triton_version": "3.6.0"}, "LlamaForCausalLM: config.json has no MoE shape"),
])
def test_filter_errors(model, kwargs, message):
    with pytest.raises(AnsibleFilterError, match=f"^moe_targets: .*{message}"):
        plugin.moe_targets(model, tp_size=4, **kwargs)


def test_filter_docs_match_the_signature():
    doc = yaml.safe_load(plugin.DOCUMENTATION)
    assert doc["name"] == "moe_targets"
    assert list(doc["options"]) == ["_input", "tp_size", "ep_size", "device_name", "triton_version", "missing", "dtype",
                                    "disable_shared_experts_fusion", "per_channel_quant", "installed_sglang"]
    assert list(yaml.safe_load(plugin.RETURN)["_value"]["contains"]) == [
        "agree", "targets", "derived", "only_in_log", "only_derived", "message", "tuner_args", "expected_tuner_output",
        "moe_rules"]


def test_the_filter_reports_the_lookup_rules_of_the_installed_release():
    config = json.loads((FIXTURES / "hf_configs" / "qwen3_30b_a3b.json").read_text())
    old = plugin.moe_targets(config, 1, device_name="NVIDIA H200", triton_version="3.6.0", installed_sglang="0.5.11")
    assert old["moe_rules"]["fallback"] == "fixed" and old["moe_rules"]["block_m_mismatch"] == "assert"
    assert plugin.moe_targets(config, 1, device_name="NVIDIA H200", triton_version="3.6.0",
                              installed_sglang="0.5.23")["moe_rules"]["fallback"] == "all_dirs"
    with pytest.raises(AnsibleFilterError, match="sglang 0.4.9 is older than 0.5.10"):
        plugin.moe_targets(config, 1, device_name="NVIDIA H200", triton_version="3.6.0", installed_sglang="0.4.9")


@pytest.mark.parametrize(("kind", "name"), [("filter", "moe_targets"), ("module", "moe_tune"), ("module", "moe_configs"),
                                            ("filter", "moe_cost_estimate"), ("filter", "flag_trial_plan"),
                                            ("module", "run_cost")])
def test_ansible_doc_renders(tmp_path, kind, name):
    env = {**os.environ, "ANSIBLE_CONFIG": str(REPO / "ansible.cfg"), "HOME": str(tmp_path), "ANSIBLE_NOCOLOR": "1",
           "ANSIBLE_LOCAL_TEMP": str(tmp_path / "local-tmp")}
    result = subprocess.run([str(Path(sys.executable).parent / "ansible-doc"), "-t", kind, f"llmops.sglang.{name}"],
                            cwd=REPO, env=env, capture_output=True, text=True, timeout=120, check=False)
    assert result.returncode == 0 and "ERROR" not in result.stderr and "WARNING" not in result.stderr, result.stderr
    assert "RETURN VALUES" in result.stdout
