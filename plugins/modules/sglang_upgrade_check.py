#!/usr/bin/python
# Copyright (c) llmops.sglang contributors
# Apache License 2.0 (see LICENSE)
from __future__ import annotations

DOCUMENTATION = r"""
---
module: sglang_upgrade_check
short_description: Predict what an installed SGLang release will do with this host's tuned MoE configs and flags
version_added: 2.0.0
description:
  - Runs before anything restarts. It compares the release installed at O(python) (see M(llmops.sglang.sglang_release))
    with the one serving at O(current_python), for this host's deployment (O(model_path), O(server_args), O(gpu_name),
    O(moe_config_dir)).
  - MoE configs. It derives the up and down fused-MoE config files the deployment looks up (from the model's
    C(config.json), C(tp_size) and C(ep_size), and the GPU). For each file it reports which tuned config each release
    loads and from where, including a fallback to another C(triton_*) directory, and which the new release misses
    (RV(moe)).
  - Each release is asked with its own code where it can be. A small program runs with that release's python,
    imports its config module, and calls its C(get_config_file_name) and C(get_moe_configs) with the server's
    C(SGLANG_MOE_CONFIG_DIR). The messages these calls log are read as the server's startup log is read. Where the
    import or the call fails, the collection's model of the release's lookup rules answers instead.
    RV(lookup_source) says which was used.
  - Flags. It checks the server arguments against the new release's C(launch_server --help) and the collection's
    table of renamed options. It reports the options the new release refuses (removed or renamed, with their
    replacement) and the deprecated aliases it still reads (RV(flags)).
  - Carry or retune. A tuned config the new release would miss (V(lost)) or only fall back to (V(fallback)) is to
    be carried when it was tuned for the new release's Triton (the C(triton_*) directory it lies in) and both
    releases hold the same fused-MoE kernel source (by hash); RV(carry) lists it as M(llmops.sglang.moe_configs)
    installs it into the new release. Otherwise it must be retuned for the new release (RV(retune), with what
    changed).
  - Changes nothing, in check mode or not.
author:
  - llmops.sglang contributors (@llmops)
extends_documentation_fragment:
  - llmops.sglang.attributes.facts
options:
  python:
    description: Python of the new release's venv (RV(llmops.sglang.sglang_release#module:python)).
    type: path
    required: true
  current_python:
    description: Python of the release serving now.
    type: path
    default: /opt/sglang/venv/bin/python
  model_path:
    description: The served model's directory; its C(config.json) gives the MoE shape.
    type: path
    required: true
  server_args:
    description: The server arguments the deployment runs with (ServerArgs field names, as the role
      llmops.sglang.sglang_server takes them); C(tp_size) and C(ep_size) also set the MoE shape.
    type: dict
    default: {}
  gpu_name:
    description: The GPU's name as C(nvidia-smi) reports it (RV(llmops.sglang.gpu_facts#module:summary.name)); the
      config file names carry it.
    type: str
    required: true
  moe_config_dir:
    description: The server's C(SGLANG_MOE_CONFIG_DIR), if it sets one; default each release's own package directory.
    type: path
"""

EXAMPLES = r"""
---
- name: Install the new release beside the serving one
  llmops.sglang.sglang_release:
    version: 0.5.24
  register: release

- name: Predict, before any restart, what it does with the tuned MoE configs and the flags in use
  llmops.sglang.sglang_upgrade_check:
    python: "{{ release.python }}"
    model_path: /srv/models/Qwen3.5-122B-A10B
    server_args: {tp_size: 4, enable_flashinfer_allreduce_fusion: true}
    gpu_name: NVIDIA RTX PRO 6000 Blackwell Server Edition
  register: prediction
"""

RETURN = r"""
versions:
  description: The C(current) and the C(new) release's versions of python, sglang, triton, torch and ray, and the
    sha256 of its fused-MoE kernel source (C(kernel_source_sha256), null where it cannot be read).
  returned: success
  type: dict
moe:
  description:
    - One entry per config file the deployment looks up. Each has C(kernel) (V(up) or V(down)), C(E), C(N), C(dtype)
      and C(file_name). C(current) and C(new) each hold C(status), C(path) and C(reuses_up_config). C(status) is
      V(used) (the exact Triton directory), V(fallback) (another C(triton_*) directory), V(missing) (defaults) or
      V(error).
    - C(verdict) is one of the following. V(kept) means the new release loads a tuned config for its own Triton.
      V(fallback) means it loads only another Triton's config, which is sub-optimal. V(lost) means the current release
      loads a tuned config and the new one runs defaults. V(gained) means the new release finds a config the current
      one does not. V(untuned) means neither release loads one. V(error) means the new release raises during the
      lookup.
    - C(action) is V(carry), V(retune) or V(none) (nothing to do), and C(action_reason) says why.
  returned: success
  type: list
  elements: dict
carry:
  description: The tuned configs to carry into the new release, as O(llmops.sglang.moe_configs#module:configs) takes
    them (C(src) the file the current release loads, C(name) the file name the new release looks up).
  returned: success
  type: list
  elements: dict
  sample:
    - src: "/opt/sglang/venv/lib/python3.11/site-packages/sglang/srt/layers/moe/moe_runner/triton_utils/configs/triton_3_6_0/\
        E=256,N=256,device_name=NVIDIA_H100_80GB_HBM3.json"
      name: "E=256,N=256,device_name=NVIDIA_H100_80GB_HBM3.json"
retune:
  description: The configs that must be tuned again for the new release (C(kernel), C(E), C(N), C(dtype),
    C(file_name), and C(why)).
  returned: success
  type: list
  elements: dict
lookup_source:
  description: Per release (C(current), C(new)), what answered the MoE lookup. V(release) means the release's own code
    answered; V(model) means the collection's model of its rules did.
  returned: success
  type: dict
  sample: {current: release, new: release}
lookup_model_reason:
  description: Per release, why its own code could not answer (null where it did).
  returned: success
  type: dict
flags:
  description:
    - C(errors) lists the server arguments the new release refuses. Each message names the argument and what to use
      instead.
    - C(warnings) lists the deprecated aliases the new release still reads.
    - C(removed_options) and C(added_options) are the options the new C(--help) lacks or adds compared with the
      current one.
  returned: success
  type: dict
ready:
  description: False when the new release loses a tuned MoE config, fails a lookup, or refuses a server argument.
  returned: success
  type: bool
summary:
  description: One line per finding, in the operator's words.
  returned: success
  type: list
  elements: str
"""

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.llmops.sglang.plugins.module_utils._sglang_upgrade import UpgradeCheckError, predict
from ansible_collections.llmops.sglang.plugins.module_utils.command_runner import CommandRunner


def main() -> None:
    module = AnsibleModule(
        argument_spec=dict(python=dict(type="path", required=True),
                           current_python=dict(type="path", default="/opt/sglang/venv/bin/python"),
                           model_path=dict(type="path", required=True), server_args=dict(type="dict", default={}),
                           gpu_name=dict(type="str", required=True), moe_config_dir=dict(type="path")),
        supports_check_mode=True,
    )
    try:
        result = predict(CommandRunner(module), module.params)
    except UpgradeCheckError as exc:
        module.fail_json(msg=str(exc))
    module.exit_json(**result)


if __name__ == "__main__":
    main()
