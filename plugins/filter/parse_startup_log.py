# Copyright (c) llmops.sglang contributors
# Apache License 2.0 (see LICENSE)
from __future__ import annotations

DOCUMENTATION = r"""
name: parse_startup_log
author: llmops.sglang contributors
version_added: 1.0.0
short_description: Parse an SGLang server startup log into structured facts
description:
  - Reads the startup log of one SGLang server start and returns what the server printed about itself
    (effective server args, capacity, KV cache, CUDA graph settings, MoE kernel configs used / missing /
    fallen back, warnings, the startup error if any, phase timings).
  - Copes with journald, docker and docker compose prefixes, SGLang rank tags (C(TP0), C(DP0 TP0 EP0), ...),
    tqdm progress bars and a log cut off mid-line. A value that may have been cut off is not reported.
  - The same parser as the modules use (C(plugins/module_utils/startup_log.py)).
options:
  _input:
    description:
      - The log text, or its lines (for example C(stdout_lines)); lines are taken as complete.
    type: raw
    required: true
"""

EXAMPLES = r"""
- name: Read the log of the current server invocation
  ansible.builtin.command:
    cmd: journalctl --all --no-pager --output=short-iso _SYSTEMD_INVOCATION_ID={{ invocation_id }}
  register: startup_log
  changed_when: false

- name: Turn it into facts
  ansible.builtin.set_fact:
    startup_facts: "{{ startup_log.stdout | llmops.sglang.parse_startup_log }}"

- name: Fail with SGLang's own advice when the server did not come up
  ansible.builtin.fail:
    msg: "{{ startup_facts.error.kind }}: {{ startup_facts.error.message }} {{ startup_facts.error.suggestion | default('', true) }}"
  when: not startup_facts.ready
"""

RETURN = r"""
_value:
  description:
    - Startup facts. Keys the log does not state are absent; a value the log states as None is null.
      Runtime lines win over the configured server args (for example C(max_running_requests)).
  type: dict
  contains:
    server_args:
      description:
        - The server_args dump as a dict, in the release's own field names - C(server_args=ServerArgs(...)) up to
          0.5.17, C(server_args={...}) from 0.5.20 - joined when it was split over several lines. Enum members
          count as their value, other non-literal values are kept as source text, API keys are redacted.
      type: dict
    server_args_truncated:
      description: Present (true) when the server_args line was cut off; the field being written at the cut is left out.
      type: bool
    max_running_requests:
      description: Effective value from the scheduler line, else the configured one.
      type: int
    max_total_num_tokens:
      description: From the scheduler line.
      type: int
    kv_cache_tokens:
      description: "The first C(#tokens:) value of a C(KV Cache is allocated.) line, or of the final
        C(Post-capture KV sizing: KV cache allocated.) line (0.5.17+) when there is one."
      type: int
    disable_piecewise_cuda_graph:
      description: Up to 0.5.11; from server_args, true when a C(Disable piecewise CUDA graph because ...) line appears.
      type: bool
    cuda_graph_backend_prefill:
      description: From 0.5.14 (the setting 0.5.11 called C(disable_piecewise_cuda_graph)); from server_args.
      type: str
    prefill_cuda_graph_disabled_reason:
      description: From 0.5.14; the text after C(Disable prefill CUDA graph because).
      type: str
    ready:
      description: Whether C(The server is fired up and ready to roll!) appears.
      type: bool
    moe_configs:
      description:
        - One entry per distinct (kernel, path) with C(kernel) up|down (from the file name), C(status)
          used|fallback|missing, C(path), C(fallback_path); C(reuses_up_config) true where 0.5.16+ reused the
          tuned up config for a missing down file. Every config a line names counts (a tool that folds lines
          into one event can carry the up and the down warning in one).
      type: list
      elements: dict
    gpu_name:
      description:
        - The GPU as SGLang names its MoE config files (C(device_name=), spaces as underscores), from the first
          MoE config line; from a line cut before its file name ends too, as long as the name itself is whole.
        - Absent when no MoE config line names it.
      type: str
    missing_moe_configs:
      description: Exact-version config paths SGLang reported missing (default config used).
      type: list
      elements: str
    fallback_moe_configs:
      description: Exact-version config paths SGLang replaced by another Triton version's file.
      type: list
      elements: str
    warnings:
      description: Distinct warning messages, prefixes stripped.
      type: list
      elements: str
    error:
      description:
        - C(kind), what the operator must fix, the innermost cause (port_in_use, oom, gpu_unavailable,
          arch_unsupported, moe_config_error, model_error, install_error, nccl_error, cuda_error, warmup_failed,
          config_error; the generic unknown_traceback and runtime_error; docs/support-matrix.md),
          C(message) (the key line), C(lines) (traceback tail, at most 30),
          C(suggestion) (SGLang's own fix text, else ours for the kind; null when there is none).
        - Null when the log has no error.
      type: dict
    timings:
      description:
        - Seconds for C(load_weights), C(kv_alloc), C(cuda_graph_capture) (decode/verify graphs),
          C(piecewise_cuda_graph_capture) (up to 0.5.11), C(prefill_cuda_graph_capture) and
          C(draft_cuda_graph_capture) (0.5.14+) and C(total) (first log line to the ready line); only those the
          log allows to derive.
      type: dict
  sample:
    ready: true
    max_running_requests: 26
    disable_piecewise_cuda_graph: true
    gpu_name: NVIDIA_RTX_PRO_6000_Blackwell_Server_Edition
    triton_version_dir: triton_3_6_0
    missing_moe_configs:
      - /srv/moe-configs/configs/triton_3_6_0/E=256,N=256,device_name=NVIDIA_RTX_PRO_6000_Blackwell_Server_Edition.json
    error: null
"""

from typing import Any

from ansible.errors import AnsibleFilterError

from ansible_collections.llmops.sglang.plugins.module_utils.startup_log import parse_startup_log as _parse


def parse_startup_log(log: Any) -> dict[str, Any]:
    """Filter: startup facts of an SGLang log given as text or as a list of lines."""
    if isinstance(log, list) and all(isinstance(line, str) for line in log):
        return _parse("".join(f"{line}\n" for line in log))
    if isinstance(log, str):
        return _parse(log)
    raise AnsibleFilterError(f"parse_startup_log: _input must be the log text or a list of lines, got {type(log).__name__}")


class FilterModule:
    def filters(self) -> dict[str, Any]:
        return {"parse_startup_log": parse_startup_log}
