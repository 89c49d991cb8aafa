# Copyright (c) llmops.sglang contributors
# Apache License 2.0 (see LICENSE)
"""Running a controller action (plugin_utils/controller_action.py) in a unit test, without a task or a connection."""
from __future__ import annotations

import types

from ansible.plugins.action import ActionBase

from ansible_collections.llmops.sglang.plugins.plugin_utils.controller_action import ControllerAction


def run_controller_action(monkeypatch, action_class: type, arguments: dict, *, check_mode: bool = False,
                          task_vars: dict | None = None) -> dict:
    """``action_class``'s run with ``arguments`` as its validated arguments: the base class's run and the validation
    against its stub's options stand aside, so a test gives every option the action reads."""
    monkeypatch.setattr(ActionBase, "run", lambda self, tmp=None, task_vars=None: {})
    monkeypatch.setattr(ControllerAction, "arguments", lambda self: arguments)
    action = action_class.__new__(action_class)
    action._task = types.SimpleNamespace(check_mode=check_mode)
    return action.run(None, task_vars or {})
