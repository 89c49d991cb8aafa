# Copyright (c) llmops.sglang contributors
# Apache License 2.0 (see LICENSE)
"""A controller action's options are what its module stub documents (issue #41 item 5): the argument spec the action
validates a task with, caught as it validates, against the DOCUMENTATION ``ansible-doc`` reads - names, type, required,
default, choices, elements, aliases and suboptions. Actions whose module is a real one hand the task to that module,
whose argument_spec ansible-test's validate-modules holds to its docs."""
from __future__ import annotations

import importlib
from pathlib import Path

import pytest
from ansible.module_utils.common.arg_spec import ArgumentSpecValidator
from ansible.parsing.plugin_docs import read_docstring
from ansible.plugins.action import ActionBase

from ansible_collections.llmops.sglang.plugins.plugin_utils.controller_action import ControllerAction, options_spec

PLUGINS = Path(__file__).resolve().parents[4] / "plugins"
ACTIONS = sorted(path.stem for path in (PLUGINS / "action").glob("*.py") if path.stem != "__init__")
# The actions that run a module of their own on the host (it validates their arguments, docs and spec side by side).
HOST_MODULE_ACTIONS = ("moe_tune", "server")


def action_class(name: str) -> type:
    return importlib.import_module(f"ansible_collections.llmops.sglang.plugins.action.{name}").ActionModule


def documented(options: dict | None) -> dict:
    """The documented options in a comparable form: argument_spec's own defaults filled in."""
    return {name: {"type": option.get("type", "str"), "required": option.get("required", False),
                   "default": option.get("default"), "choices": option.get("choices"),
                   "elements": option.get("elements"), "aliases": sorted(option.get("aliases", [])),
                   "suboptions": documented(option.get("suboptions"))}
            for name, option in (options or {}).items()}


def validated(spec: dict | None) -> dict:
    """An argument spec in the same form as :func:`documented`."""
    return documented({name: {**{key: value for key, value in option.items() if key != "options"},
                              "suboptions": option.get("options")} for name, option in (spec or {}).items()})


class _Validated(Exception):
    """Raised by the stand-in validate_argument_spec, carrying the spec the action asked for."""


def spec_validated_by(name: str, monkeypatch) -> dict:
    def catch(self, argument_spec=None, **_kwargs):
        raise _Validated(argument_spec)
    monkeypatch.setattr(ActionBase, "run", lambda self, tmp=None, task_vars=None: {})
    monkeypatch.setattr(ActionBase, "validate_argument_spec", catch)
    cls = action_class(name)
    with pytest.raises(_Validated) as caught:
        cls.__new__(cls).run(None, {"inventory_hostname": "gpu1"})
    return caught.value.args[0]


def test_every_action_is_a_controller_action_with_a_stub_or_drives_its_host_module():
    stubs = [name for name in ACTIONS if "def main(" not in (PLUGINS / "modules" / f"{name}.py").read_text()]
    assert [name for name in ACTIONS if name not in stubs] == list(HOST_MODULE_ACTIONS)
    assert [name for name in ACTIONS if issubclass(action_class(name), ControllerAction)] == stubs


@pytest.mark.parametrize("name", [name for name in ACTIONS if name not in HOST_MODULE_ACTIONS])
def test_a_controller_action_validates_with_the_options_its_stub_documents(name, monkeypatch):
    docs = read_docstring(str(PLUGINS / "modules" / f"{name}.py"))["doc"]["options"]
    spec = spec_validated_by(name, monkeypatch)
    assert spec, f"{name} validates with no options"
    assert validated(spec) == documented(docs)


DOCS_WITH_EVERYTHING = {
    "step": {"description": "x", "type": "str", "required": True, "choices": ["a", "b"], "aliases": ["phase"]},
    "limits": {"description": "x", "type": "dict", "version_added": "2.1.0",
               "suboptions": {"repeats": {"description": "x", "type": "int", "default": 3},
                              "hosts": {"description": "x", "type": "list", "elements": "str", "default": []}}},
    "token": {"description": "x", "type": "str", "no_log": True},
}


def test_the_spec_of_documented_options_keeps_what_validation_reads_and_drops_the_prose():
    spec = options_spec(DOCS_WITH_EVERYTHING)
    assert validated(spec) == documented(DOCS_WITH_EVERYTHING)
    assert spec["limits"]["options"]["hosts"] == {"type": "list", "elements": "str", "default": []}
    assert spec["token"]["no_log"] is True
    result = ArgumentSpecValidator(spec).validate({"phase": "b", "limits": {"hosts": "g1,g2"}, "token": "t"})
    assert not result.error_messages, result.error_messages
    assert result.validated_parameters["step"] == "b", "the alias reaches the option"
    assert result.validated_parameters["limits"] == {"repeats": 3, "hosts": ["g1", "g2"]}, "suboptions' defaults apply"
    assert "t" in result._no_log_values
    refused = ArgumentSpecValidator(spec).validate({"step": "c"})
    assert any("step" in message and "one of" in message for message in refused.error_messages)
