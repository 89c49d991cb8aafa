#!/usr/bin/python
# Copyright (c) llmops.sglang contributors
# Apache License 2.0 (see LICENSE)
from __future__ import annotations

DOCUMENTATION = r"""
---
module: server_facts
short_description: What an SGLang server really did at startup
version_added: 1.0.0
description:
  - Reads the startup log of the current start of a systemd unit (journal lines of its invocation id
    only, so the time does not grow with the journal) or a log file, parses it with the collection's
    startup-log parser, queries C(/server_info) (falling back to C(/get_server_info)) and returns both
    merged, with the source of every value.
  - Effective capacity (max_running_requests, KV tokens), arguments the server changed by itself,
    MoE configs used / fallen back / missing, warnings, readiness and the classified error.
  - M(llmops.sglang.server) returns the same facts of the start it deployed (from the log it followed); this module
    reads those of a server that runs already.
  - Secrets are masked in the whole result, whatever their source (O(api_key), the service's key file, C(/server_info),
    the log), every C(api_key) / C(admin_api_key) value (C(server_info.api_key), C(facts.server_args.api_key), ...)
    is V(***), and the key itself is replaced by V(***) wherever else it would appear.
author:
  - llmops.sglang contributors (@llmops)
extends_documentation_fragment:
  - llmops.sglang.attributes.facts
options:
  name:
    description: systemd service name (without C(.service)). Mutually exclusive with O(log_file).
    type: str
  log_file:
    description: Parse this log file instead of the journal.
    type: path
  url:
    description: Base URL of the server; V(null) skips the HTTP query.
    type: str
    default: http://127.0.0.1:30000
  api_key:
    description: API key for C(/server_info); by default read from the service's EnvironmentFile (C(SGLANG_API_KEY)).
    type: str
  env_dir:
    description: Directory of the EnvironmentFile written by M(llmops.sglang.server).
    type: path
    default: /etc/sglang
  timeout:
    description: HTTP timeout in seconds.
    type: float
    default: 10
"""

EXAMPLES = r"""
---
- name: Facts of the running server
  llmops.sglang.server_facts:
    name: sglang
  register: facts

- name: Effective capacity
  ansible.builtin.debug:
    msg: "{{ facts.facts.max_running_requests }} requests, {{ facts.facts.max_total_num_tokens }} tokens"
"""

RETURN = r"""
facts:
  description: Parsed startup facts (see the parser's documentation), merged with C(/server_info) values.
  returned: success
  type: dict
  sample: {max_running_requests: 48, max_total_num_tokens: 1166432, ready: true, missing_moe_configs: []}
sources:
  description: Where each fact came from (V(log), V(server_info) or V(log+server_info) when both agree).
  returned: success
  type: dict
  sample: {max_running_requests: log+server_info, kv_cache_tokens: log}
mismatches:
  description: Facts where the log and C(/server_info) disagree (the log value is kept).
  returned: success
  type: list
  elements: dict
server_info:
  description: The C(/server_info) document (secrets masked as V(***)), or null when not reachable.
  returned: success
  type: dict
invocation_id:
  description: systemd invocation id whose journal was read.
  returned: when O(name) is given
  type: str
log_lines:
  description: Number of log lines parsed.
  returned: success
  type: int
"""

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.llmops.sglang.plugins.module_utils._server_facts import server_facts
from ansible_collections.llmops.sglang.plugins.module_utils.command_runner import CommandRunner
from ansible_collections.llmops.sglang.plugins.module_utils.systemd_service import SYSTEMD_ENVIRON


def main() -> None:
    module = AnsibleModule(
        argument_spec=dict(
            name=dict(type="str"),
            log_file=dict(type="path"),
            url=dict(type="str", default="http://127.0.0.1:30000"),
            api_key=dict(type="str", no_log=True),
            env_dir=dict(type="path", default="/etc/sglang"),
            timeout=dict(type="float", default=10),
        ),
        mutually_exclusive=[("name", "log_file")],
        required_one_of=[("name", "log_file")],
        supports_check_mode=True,
    )
    try:
        result = server_facts(module.params, CommandRunner(module, environ=SYSTEMD_ENVIRON))
    except (OSError, RuntimeError, PermissionError) as exc:
        module.fail_json(msg=str(exc))
    module.exit_json(**result)


if __name__ == "__main__":
    main()
