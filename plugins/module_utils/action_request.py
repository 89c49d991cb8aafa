# Copyright (c) llmops.sglang contributors
# Apache License 2.0 (see LICENSE)
"""Data an action plugin of this collection hands its module besides the task's options.

Private to the llmops.sglang collection. Stdlib only (runs on the managed hosts' python3).

Ansible requires every option of a module's argument_spec to be documented (ansible-test validate-modules), so
options only the action plugin sets would show up as user options in ansible-doc. What the action renders or plans
on the controller (the server's unit and launcher, moe_tune's step requests) goes instead as a JSON file into the
task's remote tmp dir, which Ansible passes the module as its tmpdir (``_ansible_tmpdir``); the controller side is
plugin_utils/action_request.py.
"""
from __future__ import annotations

import json
import os


def request_file_name(module: str) -> str:
    """The request file of ``module`` (its FQCN) in the task's tmp dir."""
    return f"{module}.request.json"


def read_request(tmpdir: str, module: str) -> dict | None:
    """The action plugin's request to ``module``; None when there is none (the module was run without it)."""
    try:
        with open(os.path.join(tmpdir, request_file_name(module)), encoding="utf-8") as handle:
            request = json.load(handle)
    except FileNotFoundError:
        return None
    if not isinstance(request, dict):
        raise ValueError(f"{request_file_name(module)}: expected a JSON object, got {type(request).__name__}")
    return request
