#!/usr/bin/python
# Copyright (c) llmops.sglang contributors
# Apache License 2.0 (see LICENSE)
from __future__ import annotations

DOCUMENTATION = r"""
---
module: sglang_env_facts
short_description: The SGLang installation of a host, and the MoE shape of its model
version_added: 1.0.0
description:
  - Asks the SGLang venv's own Python for the versions of python, sglang, triton, torch and ray, and where
    SGLang reads fused-MoE configs (C(configs/triton_X_Y_Z/) next to the config module, or C(SGLANG_MOE_CONFIG_DIR)).
  - Checks the SGLang source checkout used for tuning (tuner scripts present, version equal to the installed one).
  - Reads the model's C(config.json) and derives its MoE shape.
author:
  - llmops.sglang contributors (@llmops)
extends_documentation_fragment:
  - llmops.sglang.attributes.facts
options:
  python:
    description: Python interpreter of the SGLang installation.
    type: path
    default: /opt/sglang/venv/bin/python
  source_dir:
    description: SGLang source checkout holding C(benchmark/kernels/fused_moe_triton/); V(null) skips the check.
    type: path
  model_path:
    description: Local model directory whose C(config.json) gives the MoE shape; V(null) skips it.
    type: path
  moe_config_dir:
    description: Value of C(SGLANG_MOE_CONFIG_DIR) the service will run with, if any.
    type: path
"""

EXAMPLES = r"""
---
- name: Read the SGLang environment
  llmops.sglang.sglang_env_facts:
    source_dir: /opt/sglang/src
    model_path: /srv/models/Qwen3.5-122B-A10B
  register: sglang_env
"""

RETURN = r"""
versions:
  description: Installed versions (null when a package is missing).
  returned: success
  type: dict
  sample: {python: 3.11.2, sglang: 0.5.11, triton: 3.6.0, torch: null, ray: 2.52.1}
triton_dir:
  description: The C(triton_X_Y_Z) directory name SGLang looks up for the installed Triton.
  returned: when triton is installed
  type: str
  sample: triton_3_6_0
moe_rules:
  description:
    - How the installed SGLang looks MoE configs up (module_utils/moe_rules, read from the real wheels).
    - C(config_module); C(fallback) is V(fixed) (3.4.0, 3.3.1, 3.2.0, 3.1.0) up to 0.5.11 and V(all_dirs) from 0.5.12;
      C(block_m_mismatch) is V(assert) up to 0.5.12 and V(override) later; C(down_missing); C(checked), and a
      C(note) for a release whose wheel was not read.
    - C(problem) instead, for a release older than 0.5.10.
  returned: success
  type: dict
moe_config_root:
  description: Directory holding C(configs/triton_*/) that the server reads.
  returned: success
  type: str
tuner:
  description:
    - Tuner scripts found in the source checkout (C(scripts), C(dir)), its version (C(source_version)) and where that
      came from (C(source_version_origin)) - setuptools-scm's C(python/sglang/_version.py), else the git tag
      (C(git describe --tags)), else a literal C(python/sglang/version.py) - or why it cannot be told
      (C(source_version_problem)), and whether it equals the installed SGLang (C(version_matches)).
  returned: when O(source_dir) is set
  type: dict
model:
  description: The model's C(config.json) and its MoE shape.
  returned: when O(model_path) is set
  type: dict
"""

import json
import os

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.llmops.sglang.plugins.module_utils.command_runner import CommandRunner
from ansible_collections.llmops.sglang.plugins.module_utils.moe_names import triton_dir_for
from ansible_collections.llmops.sglang.plugins.module_utils.moe_shapes import model_moe_shape
from ansible_collections.llmops.sglang.plugins.module_utils.moe_rules import moe_rules
from ansible_collections.llmops.sglang.plugins.module_utils.sglang_env import probe_sglang, tuner_facts
from ansible_collections.llmops.sglang.plugins.module_utils.server_guard import renew_leases


def main() -> None:
    module = AnsibleModule(
        argument_spec=dict(python=dict(type="path", default="/opt/sglang/venv/bin/python"),
                           source_dir=dict(type="path"), model_path=dict(type="path"),
                           moe_config_dir=dict(type="path")),
        supports_check_mode=True,
    )
    renew_leases()  # a sign of the controller, which the host's guards of a running stage wait for
    params = module.params
    try:
        probe = probe_sglang(CommandRunner(module), params["python"])
    except ValueError as exc:
        module.fail_json(msg=str(exc))
    versions = probe["versions"]
    result = {"changed": False, "versions": versions,
              "moe_config_root": params["moe_config_dir"] or probe["config_module_dir"]}
    if versions["triton"]:
        result["triton_dir"] = triton_dir_for(versions["triton"])
    try:
        result["moe_rules"] = moe_rules(versions["sglang"])
    except ValueError as exc:
        result["moe_rules"] = {"version": versions["sglang"], "problem": str(exc)}
    if params["source_dir"]:
        result["tuner"] = tuner_facts(params["source_dir"], versions["sglang"], CommandRunner(module))
    if params["model_path"]:
        config_path = os.path.join(params["model_path"], "config.json")
        try:
            with open(config_path, encoding="utf-8") as handle:
                config = json.load(handle)
            result["model"] = {"config": config, "moe_shape": model_moe_shape(config)}
        except (OSError, ValueError) as exc:
            module.fail_json(msg=f"model_path: cannot read the MoE shape from {config_path}: {exc}")
    module.exit_json(**result)


if __name__ == "__main__":
    main()
