# Copyright (c) llmops.sglang contributors
# Apache License 2.0 (see LICENSE)
"""The base of the collection's controller-only actions (run directory, inputs, report, cost): they never connect to
the host and send it nothing. Each one's options are declared once, in the DOCUMENTATION of its stub of the same name
in plugins/modules/ (what ``ansible-doc`` shows); the action validates its task's arguments against that."""
from __future__ import annotations

import copy
import functools
import importlib

import yaml
from ansible.plugins.action import ActionBase

# The keys of a documented option that argument_spec reads too; the others (description, version_added) are docs only.
SPEC_KEYS = ("type", "required", "default", "choices", "elements", "aliases", "no_log")


def options_spec(options: dict) -> dict:
    """The argument_spec of documented ``options``: each option's :data:`SPEC_KEYS`, its ``suboptions`` as
    ``options``."""
    spec = {}
    for name, option in options.items():
        spec[name] = {key: option[key] for key in SPEC_KEYS if key in option}
        if "suboptions" in option:
            spec[name]["options"] = options_spec(option["suboptions"])
    return spec


@functools.cache
def documented_spec(action_module: str) -> dict:
    """The argument_spec an action (its Python module name, ``...plugins.action.<name>``) validates with: the options
    of ``...plugins.modules.<name>``'s DOCUMENTATION."""
    stub = importlib.import_module(action_module.replace(".plugins.action.", ".plugins.modules.", 1))
    return options_spec(yaml.safe_load(stub.DOCUMENTATION)["options"])


class ControllerAction(ActionBase):
    TRANSFERS_FILES = False
    _requires_connection = False

    def arguments(self) -> dict:
        """The task's arguments, validated against the options this action's module stub documents."""
        # A copy: validation hands a mutable default (default: {}) to the task as it is, and the spec is cached.
        spec = copy.deepcopy(documented_spec(type(self).__module__))
        return self.validate_argument_spec(argument_spec=spec)[1]
