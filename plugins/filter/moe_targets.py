# Copyright (c) llmops.sglang contributors
# Apache License 2.0 (see LICENSE)
from __future__ import annotations

DOCUMENTATION = r"""
name: moe_targets
author: llmops.sglang contributors
version_added: 1.0.0
short_description: The fused-MoE config files to tune, from two sources that must agree
description:
  - Derives the up and down config file names the server looks up from the model's C(config.json), the
    parallelism, the raw GPU name and the installed Triton version, and cross-checks them with the missing-config
    paths the server itself logged (C(server_facts) C(facts.missing_moe_configs)).
  - Fails, showing both lists, when the server reported missing configs and the two sources disagree.
  - Chooses the tuner arguments (C(--dtype), C(--per-channel-quant), C(--disable-shared-experts-fusion)) that make
    the tuner write exactly the up name the server looks up, and fails naming both names when no arguments can.
  - With nothing missing the result has no targets (the tuning stage is a no-op) and the message says so.
options:
  _input:
    description: The model's parsed C(config.json).
    type: dict
    required: true
  tp_size:
    description: Tensor-parallel size of the deployment.
    type: int
    required: true
  ep_size:
    description: Expert-parallel size of the deployment.
    type: int
    default: 1
  device_name:
    description: Raw GPU name as nvidia-smi prints it (spaces are replaced like SGLang does).
    type: str
    required: true
  triton_version:
    description: Installed Triton version, e.g. V(3.6.0).
    type: str
    required: true
  missing:
    description: Config paths the server logged as missing (exact-version paths).
    type: list
    elements: str
    default: []
  dtype:
    description: Override of the C(dtype=) selector (e.g. V(fp8_w8a8) for online FP8 quantisation); V('') forces none.
    type: str
  disable_shared_experts_fusion:
    description: Whether the server runs with C(--disable-shared-experts-fusion).
    type: bool
    default: false
  per_channel_quant:
    description: Whether the server's quantisation is per-channel (adds C(per_channel_quant=True) to the names).
    type: bool
    default: false
  installed_sglang:
    description:
      - Installed SGLang version (C(sglang_env_facts) C(versions.sglang)); adds RV(_value.moe_rules), how that release
        looks the files up (fallback directories, BLOCK_SIZE_M pairing, a missing C(_down) file).
      - A release older than 0.5.10 fails naming the version.
    type: str
"""

EXAMPLES = r"""
- name: Decide what to tune
  ansible.builtin.set_fact:
    moe: >-
      {{ model_config | llmops.sglang.moe_targets(tp_size=4, ep_size=1, device_name=gpus.summary.name,
         triton_version=env.versions.triton, missing=facts.facts.missing_moe_configs) }}

- name: Nothing to tune
  ansible.builtin.debug:
    msg: "{{ moe.message }}"
  when: moe.targets | length == 0
"""

RETURN = r"""
_value:
  description: The reconciled targets and how to produce them.
  type: dict
  contains:
    agree:
      description: Whether the logged and derived names are the same set.
      type: bool
    targets:
      description:
        - Derived targets the server confirmed, each C(kernel), C(file_name), C(triton_dir), C(path), C(install_dir),
          C(E), C(N), C(dtype), C(block_shape).
      type: list
      elements: dict
    derived:
      description: Every derived target (up and down), confirmed or not.
      type: list
      elements: dict
    only_in_log:
      description: Logged paths the derivation does not produce.
      type: list
      elements: str
    only_derived:
      description: Derived C(triton_dir/file_name) the server did not report missing.
      type: list
      elements: str
    message:
      description: One-line verdict (or both lists when they disagree).
      type: str
    tuner_args:
      description: Selector flags for the tuner (pass to M(llmops.sglang.moe_tune) O(llmops.sglang.moe_tune#module:tuner_args)).
      type: list
      elements: str
    expected_tuner_output:
      description: File name the main tuner writes with RV(_value.tuner_args); equals the up target's name.
      type: str
    moe_rules:
      description: The lookup rules of O(installed_sglang) (module_utils/moe_rules); absent without it.
      type: dict
  sample:
    agree: true
    targets:
      - kernel: up
        file_name: E=256,N=256,device_name=NVIDIA_RTX_PRO_6000_Blackwell_Server_Edition.json
        triton_dir: triton_3_6_0
    tuner_args: [--dtype, auto]
"""

from typing import Any

from ansible.errors import AnsibleFilterError
from ansible_collections.llmops.sglang.plugins.plugin_utils.moe_plan import targets_plan


def moe_targets(model_config: Any, tp_size: int, ep_size: int = 1, device_name: str | None = None,
                triton_version: str | None = None, missing: list | None = None, dtype: str | None = None,
                disable_shared_experts_fusion: bool = False, per_channel_quant: bool = False,
                installed_sglang: str | None = None) -> dict[str, Any]:
    try:
        return targets_plan(model_config, tp_size, ep_size, device_name, triton_version, missing, dtype,
                            disable_shared_experts_fusion, per_channel_quant, installed_sglang)
    except ValueError as exc:
        raise AnsibleFilterError(f"moe_targets: {exc}") from exc


class FilterModule:
    def filters(self) -> dict[str, Any]:
        return {"moe_targets": moe_targets}
