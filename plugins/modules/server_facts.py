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

import json
import os
from urllib.error import HTTPError, URLError

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.urls import open_url
from ansible_collections.llmops.sglang.plugins.module_utils.secrets import mask_secrets
from ansible_collections.llmops.sglang.plugins.module_utils.startup_log import parse_startup_log
from ansible_collections.llmops.sglang.plugins.module_utils.systemd_service import invocation_log, unit_state

# /server_info fields that restate a startup fact: fact -> getter on the document.
SERVER_INFO_FACTS = {
    "max_total_num_tokens": lambda info: info.get("max_total_num_tokens"),
    "max_running_requests": lambda info: (info.get("internal_states") or [{}])[0].get("effective_max_running_requests_per_dp"),
    "context_len": lambda info: info.get("max_req_input_len") and None,  # not the same quantity; never merged
    "tp_size": lambda info: info.get("tp_size"),
    "model_path": lambda info: info.get("model_path"),
}


def read_api_key(env_dir: str, name: str | None) -> str | None:
    if not name:
        return None
    try:
        with open(os.path.join(env_dir, f"{name}.env"), encoding="utf-8") as handle:
            for line in handle:
                key, sep, value = line.strip().partition("=")
                if sep and key == "SGLANG_API_KEY":
                    return value
    except OSError:
        return None
    return None


def fetch_server_info(url: str, api_key: str | None, timeout: float) -> dict | None:
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    for path in ("/server_info", "/get_server_info"):
        try:
            with open_url(url.rstrip("/") + path, headers=headers, timeout=timeout) as response:
                return json.loads(response.read())
        except HTTPError as exc:
            if exc.code == 401:
                raise PermissionError(f"{url}{path} answered 401: set api_key (or the service's EnvironmentFile)") from exc
            if exc.code != 404:
                return None
        except (URLError, OSError, ValueError):
            return None
    return None


def merge(facts: dict, server_info: dict | None) -> tuple[dict, dict, list]:
    merged = dict(facts)
    sources = {key: "log" for key in facts}
    mismatches = []
    for key, getter in SERVER_INFO_FACTS.items():
        value = getter(server_info) if server_info else None
        if value is None:
            continue
        if key not in facts:
            merged[key], sources[key] = value, "server_info"
        elif facts[key] == value:
            sources[key] = "log+server_info"
        else:
            mismatches.append({"fact": key, "log": facts[key], "server_info": value})
    return merged, sources, mismatches


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
    params = module.params
    result = {"changed": False}

    def run(argv):
        return module.run_command(argv, environ_update={"LC_ALL": "C", "SYSTEMD_PAGER": ""})

    try:
        if params["log_file"]:
            with open(params["log_file"], encoding="utf-8", errors="replace") as handle:
                text = handle.read()
        else:
            state = unit_state(run, f"{params['name']}.service")
            if not state.invocation_id:
                module.fail_json(msg=f"name: {params['name']}.service has never been started on this host")
            result["invocation_id"] = state.invocation_id
            text = invocation_log(run, state.invocation_id)
        api_key = params["api_key"] or read_api_key(params["env_dir"], params["name"])
        server_info = fetch_server_info(params["url"], api_key, params["timeout"]) if params["url"] else None
    except (OSError, RuntimeError, PermissionError) as exc:
        module.fail_json(msg=str(exc))
    facts, sources, mismatches = merge(parse_startup_log(text), server_info)
    module.exit_json(**mask_secrets({"facts": facts, "sources": sources, "mismatches": mismatches,
                                     "server_info": server_info, "log_lines": text.count("\n"), **result},
                                    [api_key]))


if __name__ == "__main__":
    main()
