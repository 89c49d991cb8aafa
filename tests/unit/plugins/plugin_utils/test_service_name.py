# Copyright (c) llmops.sglang contributors
# Apache License 2.0 (see LICENSE)
"""The SGLang service has one name, sglang_service_name (issue #41 item 3): the deploy read sglang_server_name, the
preflight sglang_preflight_service_name and the stages' guard sglang_service_name, so a user who set only
sglang_server_name had the guard watching another unit than the one deployed."""
from __future__ import annotations

import pytest
from ansible.errors import AnsibleLookupError
from ansible.parsing.dataloader import DataLoader
from ansible.template import Templar

from ansible_collections.llmops.sglang.plugins.lookup import service_name as lookup_plugin
from ansible_collections.llmops.sglang.plugins.plugin_utils.service_name import (
    REMOVED_IN,
    ServiceName,
    ServiceNameConflict,
    deprecation,
    resolve,
)


@pytest.mark.parametrize(("variables", "resolved"), [
    ({}, ServiceName("sglang", ())),
    ({"sglang_service_name": "sglang-a"}, ServiceName("sglang-a", ())),
    # an old name alone names the service the deploy, the preflight and the guard all act on
    ({"sglang_server_name": "sglang-b"}, ServiceName("sglang-b", ("sglang_server_name",))),
    ({"sglang_preflight_service_name": "sglang-c"}, ServiceName("sglang-c", ("sglang_preflight_service_name",))),
    ({"sglang_service_name": "x", "sglang_server_name": "x", "sglang_preflight_service_name": "x"},
     ServiceName("x", ("sglang_server_name", "sglang_preflight_service_name"))),
    # YAML's empty value is no name (as an unset variable), not a conflict
    ({"sglang_service_name": None, "sglang_server_name": "sglang-b"}, ServiceName("sglang-b", ("sglang_server_name",))),
    ({"sglang_service_name": "sglang-a", "sglang_server_name": None}, ServiceName("sglang-a", ())),
    ({"sglang_port": 30001}, ServiceName("sglang", ())),
], ids=["default", "new-name", "old-server-name", "old-preflight-name", "all-agree", "null-new", "null-old", "others"])
def test_the_service_name_is_the_new_name_else_an_old_one_else_sglang(variables, resolved):
    assert resolve(variables) == resolved


@pytest.mark.parametrize(("variables", "first", "second"), [
    ({"sglang_service_name": "sglang-a", "sglang_server_name": "sglang-b"},
     "sglang_service_name ('sglang-a')", "sglang_server_name ('sglang-b')"),
    ({"sglang_service_name": "sglang-a", "sglang_preflight_service_name": "sglang"},
     "sglang_service_name ('sglang-a')", "sglang_preflight_service_name ('sglang')"),
    ({"sglang_server_name": "sglang-b", "sglang_preflight_service_name": "sglang-c"},
     "sglang_server_name ('sglang-b')", "sglang_preflight_service_name ('sglang-c')"),
], ids=["new-and-server", "new-and-preflight", "two-old-names"])
def test_two_names_of_different_services_are_refused_naming_both(variables, first, second):
    with pytest.raises(ServiceNameConflict) as raised:
        resolve(variables)
    assert str(raised.value).startswith(f"{first} and {second} name different services; set only sglang_service_name")


def test_the_deprecation_names_the_variable_to_set_instead():
    assert deprecation("sglang_server_name") == (
        "sglang_server_name is deprecated: the SGLang service is named sglang_service_name (one name for the deploy, "
        "the preflight and the host's guard); sglang_server_name is still read until 3.0.0")


@pytest.fixture
def deprecations(monkeypatch) -> list[tuple]:
    seen: list[tuple] = []
    monkeypatch.setattr(lookup_plugin.display, "deprecated", lambda msg, **kwargs: seen.append((msg, kwargs)))
    return seen


def lookup(variables: dict, *terms: str) -> list:
    loader = DataLoader()
    return lookup_plugin.LookupModule(loader=loader, templar=Templar(loader=loader)).run(list(terms), variables)


def test_the_lookup_gives_the_old_names_service_with_a_deprecation_of_the_collection(deprecations):
    assert lookup({"sglang_server_name": "sglang-b", "inventory_hostname": "gpu1"}) == ["sglang-b"]
    assert deprecations == [(deprecation("sglang_server_name"),
                             {"version": REMOVED_IN, "collection_name": "llmops.sglang"})]


def test_the_lookup_warns_of_nothing_for_the_new_name_or_the_default(deprecations):
    assert lookup({"sglang_service_name": "sglang-a"}) == ["sglang-a"]
    assert lookup({}) == ["sglang"]
    assert deprecations == []


def test_the_lookup_fails_naming_both_variables_of_a_conflict(deprecations):
    with pytest.raises(AnsibleLookupError, match=r"^sglang_service_name \('a'\) and sglang_server_name \('b'\) name "):
        lookup({"sglang_service_name": "a", "sglang_server_name": "b"})
    assert deprecations == []


def test_the_lookup_takes_no_terms():
    with pytest.raises(AnsibleLookupError, match="takes no terms"):
        lookup({}, "sglang_server_name")
