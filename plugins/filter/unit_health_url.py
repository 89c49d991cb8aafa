# Copyright (c) llmops.sglang contributors
# Apache License 2.0 (see LICENSE)
from __future__ import annotations

DOCUMENTATION = r"""
name: unit_health_url
short_description: The health endpoint of the SGLang server a unit file starts
version_added: 1.0.0
author: llmops.sglang contributors (@llmops)
description:
  - The C(/health) URL of the server a systemd unit written by M(llmops.sglang.server) starts, at the host and port
    of its own C(ExecStart=) (C(--host)/C(--port), SGLang's defaults when absent), asked from the host itself
    (C(0.0.0.0) as C(127.0.0.1), C(::) as C(::1)).
  - The same reading the server module uses to wait for the previous unit after a rollback.
options:
  _input:
    description: The unit file's text.
    type: str
    required: true
"""

EXAMPLES = r"""
- name: Wait for the installed unit's server, wherever it listens
  ansible.builtin.uri:
    url: "{{ unit_file.content | b64decode | llmops.sglang.unit_health_url }}"
"""

RETURN = r"""
_value:
  description: The URL, e.g. V(http://10.0.0.5:30000/health).
  type: str
"""

from ansible_collections.llmops.sglang.plugins.module_utils._unit_file import unit_health_url


class FilterModule:
    def filters(self) -> dict:
        return {"unit_health_url": unit_health_url}
