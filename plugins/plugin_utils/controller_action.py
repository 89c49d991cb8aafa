# Copyright (c) llmops.sglang contributors
# Apache License 2.0 (see LICENSE)
"""The base of the collection's controller-only actions (run directory, inputs, report, cost): they never connect to
the host and send it nothing."""
from __future__ import annotations

from ansible.plugins.action import ActionBase


class ControllerAction(ActionBase):
    TRANSFERS_FILES = False
    _requires_connection = False

    def arguments(self, spec: dict) -> dict:
        """The task's arguments, validated against ``spec`` (an argument_spec)."""
        return self.validate_argument_spec(argument_spec=spec)[1]
