# Copyright (c) llmops.sglang contributors
# Apache License 2.0 (see LICENSE)
"""What the server_facts module does: read the startup log of the unit's current start (or a log file), fetch
``/server_info`` and merge the two, every value with its source. The module holds its docs, argument_spec and a
main() that calls :func:`server_facts` once. The server module returns the same facts of the start it deployed
from the log it followed (:func:`startup_facts`), so that journal is read once.

Private to the llmops.sglang collection. Runs on the managed host (Ansiballz ships it with the module): stdlib and
ansible.module_utils only.
"""
from __future__ import annotations

import json
import os
from urllib.error import HTTPError, URLError

from ansible.module_utils.urls import open_url
from ansible_collections.llmops.sglang.plugins.module_utils.secrets import mask_secrets
from ansible_collections.llmops.sglang.plugins.module_utils.startup_log import parse_startup_log
from ansible_collections.llmops.sglang.plugins.module_utils.systemd_service import invocation_log, unit_state

# /server_info fields that restate a startup fact: fact -> getter on the document.
_SERVER_INFO_FACTS = {
    "max_total_num_tokens": lambda info: info.get("max_total_num_tokens"),
    "max_running_requests": lambda info: (info.get("internal_states") or [{}])[0].get("effective_max_running_requests_per_dp"),
    "context_len": lambda info: info.get("max_req_input_len") and None,  # not the same quantity; never merged
    "tp_size": lambda info: info.get("tp_size"),
    "model_path": lambda info: info.get("model_path"),
}


def _read_api_key(env_dir: str, name: str | None) -> str | None:
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


def _fetch_server_info(url: str, api_key: str | None, timeout: float) -> dict | None:
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


def _merge(facts: dict, server_info: dict | None) -> tuple[dict, dict, list]:
    merged = dict(facts)
    sources = {key: "log" for key in facts}
    mismatches = []
    for key, getter in _SERVER_INFO_FACTS.items():
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


def startup_facts(text: str, url: str | None, api_key: str | None, timeout: float) -> dict:
    """``facts``, ``sources``, ``mismatches``, ``server_info`` and ``log_lines`` of one start's log ``text``: parsed,
    merged with ``/server_info`` of ``url`` (None: not asked), secrets masked.

    Raises PermissionError (a 401 without the right key) with the message to fail with.
    """
    server_info = _fetch_server_info(url, api_key, timeout) if url else None
    facts, sources, mismatches = _merge(parse_startup_log(text), server_info)
    return mask_secrets({"facts": facts, "sources": sources, "mismatches": mismatches, "server_info": server_info,
                         "log_lines": text.count("\n")}, [api_key])


def server_facts(params: dict, run) -> dict:
    """The module's result for its ``params``: the startup log of the unit's current start (``run`` runs systemctl
    and journalctl) or of ``log_file`` parsed, merged with ``/server_info``, secrets masked.

    Raises OSError, RuntimeError or PermissionError (a 401 without the right key) with the message to fail with.
    """
    result = {"changed": False}
    if params["log_file"]:
        with open(params["log_file"], encoding="utf-8", errors="replace") as handle:
            text = handle.read()
    else:
        state = unit_state(run, f"{params['name']}.service")
        if not state.invocation_id:
            raise RuntimeError(f"name: {params['name']}.service has never been started on this host")
        result["invocation_id"] = state.invocation_id
        text = invocation_log(run, state.invocation_id)
    api_key = params["api_key"] or _read_api_key(params["env_dir"], params["name"])
    return mask_secrets({**startup_facts(text, params["url"], api_key, params["timeout"]), **result}, [api_key])
