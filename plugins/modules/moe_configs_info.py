#!/usr/bin/python
# Copyright (c) llmops.sglang contributors
# Apache License 2.0 (see LICENSE)
from __future__ import annotations

DOCUMENTATION = r"""
---
module: moe_configs_info
short_description: List the fused-MoE Triton config files SGLang reads on a host
version_added: 1.0.0
description:
  - Parses every C(configs/triton_*) directory SGLang reads fused-MoE configs from (next to the installed package's
    config module, or a managed C(SGLANG_MOE_CONFIG_DIR) given as O(config_dir)), the same directories
    M(llmops.sglang.moe_configs) installs into. Changes nothing.
author:
  - llmops.sglang contributors (@llmops)
extends_documentation_fragment:
  - llmops.sglang.attributes.facts
options:
  python:
    description: Python interpreter of the SGLang installation; finds the package's config directory and the Triton version.
    type: path
    default: /opt/sglang/venv/bin/python
  config_dir:
    description:
      - Managed C(SGLANG_MOE_CONFIG_DIR); its C(configs/) is listed instead of the package's own.
    type: path
  triton_dir:
    description: The C(triton_X_Y_Z) directory RV(install_dir) names; default the one of the installed Triton.
    type: str
seealso:
  - module: llmops.sglang.moe_configs
"""

EXAMPLES = r"""
---
- name: What is installed
  llmops.sglang.moe_configs_info:
  register: moe_listing

- name: The configs of the installed Triton
  ansible.builtin.debug:
    msg: "{{ moe_listing.listing[moe_listing.install_dir | basename] | default([]) | map(attribute='file_name') }}"
"""

RETURN = r"""
install_dir:
  description: The C(configs/<triton_dir>) directory SGLang looks in first (where M(llmops.sglang.moe_configs) installs).
  returned: always
  type: str
  sample: /opt/sglang/venv/lib/python3.11/site-packages/sglang/srt/layers/moe/moe_runner/triton_utils/configs/triton_3_6_0
listing:
  description:
    - Per C(triton_*) directory, its fused-MoE files parsed (C(file_name), C(kernel) up/down, C(E), C(N),
      C(device_name), C(dtype), C(block_shape), C(per_channel_quant)).
  returned: always
  type: dict
  sample:
    triton_3_6_0:
      - {file_name: "E=256,N=256,device_name=NVIDIA_RTX_PRO_6000_Blackwell_Server_Edition.json", kernel: up, E: 256, N: 256}
"""

import os

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.llmops.sglang.plugins.module_utils.command_runner import CommandRunner
from ansible_collections.llmops.sglang.plugins.module_utils.moe_install import config_roots, list_configs


def main() -> None:
    module = AnsibleModule(
        argument_spec=dict(
            python=dict(type="path", default="/opt/sglang/venv/bin/python"),
            config_dir=dict(type="path"),
            triton_dir=dict(type="str"),
        ),
        supports_check_mode=True,
    )
    params = module.params
    try:
        roots = config_roots(CommandRunner(module), params["python"], params["config_dir"], params["triton_dir"])
    except (ValueError, OSError) as exc:
        module.fail_json(msg=str(exc))
    module.exit_json(changed=False, install_dir=os.path.join(roots.root, roots.triton_dir), listing=list_configs(roots.root))


if __name__ == "__main__":
    main()
