#!/usr/bin/python
# Copyright (c) llmops.sglang contributors
# Apache License 2.0 (see LICENSE)
from __future__ import annotations

DOCUMENTATION = r"""
---
module: gpu_facts
short_description: GPUs of a host from nvidia-smi
version_added: 1.0.0
description:
  - Queries C(nvidia-smi --query-gpu=... --format=csv,noheader,nounits) for index, name, uuid, memory,
    compute capability, driver and power limit, adds SGLang's device name form (spaces replaced by C(_)),
    and the PCIe/NVLink topology matrix from C(nvidia-smi topo -m).
author:
  - llmops.sglang contributors (@llmops)
extends_documentation_fragment:
  - llmops.sglang.attributes.facts
options:
  nvidia_smi:
    description: Path or name of C(nvidia-smi).
    type: str
    default: nvidia-smi
  topology:
    description: Also return the C(nvidia-smi topo -m) matrix.
    type: bool
    default: true
"""

EXAMPLES = r"""
---
- name: Read the GPUs
  llmops.sglang.gpu_facts:
  register: gpus

- name: Show SGLang's device name
  ansible.builtin.debug:
    msg: "{{ gpus.summary.sglang_device_name }}"
"""

RETURN = r"""
gpus:
  description: One entry per GPU.
  returned: success
  type: list
  elements: dict
  sample:
    - index: 0
      name: NVIDIA RTX PRO 6000 Blackwell Server Edition
      uuid: GPU-5b1c0e36-0000-4000-8000-000000000000
      memory_total_mib: 97887
      compute_capability: "12.0"
      sm: sm120
      driver_version: 580.95.05
      power_limit_w: 600.0
      pci_bus_id: "00000000:01:00.0"
      sglang_device_name: NVIDIA_RTX_PRO_6000_Blackwell_Server_Edition
summary:
  description:
    - Count, distinct names, whether all GPUs are the same model, and that model's facts.
    - C(spec) holds datasheet numbers nvidia-smi does not report (C(mem_bandwidth_gbs), C(smem_per_block)); null for
      GPU models the collection does not know.
  returned: success
  type: dict
  sample: {count: 4, names: [NVIDIA RTX PRO 6000 Blackwell Server Edition], homogeneous: true,
           spec: {mem_bandwidth_gbs: 1792, smem_per_block: 101376}}
topology:
  description: Output of C(nvidia-smi topo -m).
  returned: when O(topology=true)
  type: str
"""

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.llmops.sglang.plugins.module_utils.command_runner import CommandRunner
from ansible_collections.llmops.sglang.plugins.module_utils.gpu import parse_query_gpu, query_gpu_argv, summarize
from ansible_collections.llmops.sglang.plugins.module_utils.server_guard import renew_leases


def main() -> None:
    module = AnsibleModule(
        argument_spec=dict(nvidia_smi=dict(type="str", default="nvidia-smi"),
                           topology=dict(type="bool", default=True)),
        supports_check_mode=True,
    )
    renew_leases()  # a sign of the controller, which the host's guards of a running stage wait for
    nvidia_smi = module.get_bin_path(module.params["nvidia_smi"])
    if nvidia_smi is None:
        module.fail_json(msg=f"nvidia_smi: `{module.params['nvidia_smi']}` was not found on the host; "
                             "install the NVIDIA driver or set nvidia_smi to its path")
    run = CommandRunner(module)
    rc, out, err = run(query_gpu_argv(nvidia_smi))
    if rc != 0:
        module.fail_json(msg=f"nvidia-smi failed (rc={rc}): {(err or out).strip()}", rc=rc)
    try:
        gpus = parse_query_gpu(out)
    except ValueError as exc:
        module.fail_json(msg=str(exc))
    if not gpus:
        module.fail_json(msg="nvidia-smi lists no GPUs on this host")
    result = {"changed": False, "gpus": gpus, "summary": summarize(gpus)}
    if module.params["topology"]:
        rc, out, err = run([nvidia_smi, "topo", "-m"])
        result["topology"] = out if rc == 0 else None
    module.exit_json(**result)


if __name__ == "__main__":
    main()
