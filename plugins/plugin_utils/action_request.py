# Copyright (c) llmops.sglang contributors
# Apache License 2.0 (see LICENSE)
"""Controller side of module_utils/action_request.py: an action plugin sends its module a request file."""
from __future__ import annotations

import json

from ansible.errors import AnsibleActionFail
from ansible.plugins.action import ActionBase
from ansible_collections.llmops.sglang.plugins.module_utils.action_request import request_file_name


def send_request(action: ActionBase, module: str, request: dict) -> None:
    """Write ``request`` where the next ``action._execute_module(module)`` of this task finds it: the task's remote
    tmp dir (made here when the connection has none yet, e.g. with pipelining; removed with the task)."""
    if action._is_become_unprivileged():
        # Ansible then hands the module no tmp dir of the task's (the become user could not read it).
        raise AnsibleActionFail(f"{module} runs as the connection user or with become to root, not with become_user "
                                "of another unprivileged user")
    shell = action._connection._shell
    if shell.tmpdir is None:
        action._make_tmp_path()
    action._transfer_data(shell.join_path(shell.tmpdir, request_file_name(module)), json.dumps(request))
