# Copyright (c) llmops.sglang contributors
# Apache License 2.0 (see LICENSE)
"""The one name of the SGLang server's systemd service: ``sglang_service_name``, else ``sglang`` (lookup
``llmops.sglang.service_name``; docs/run-directory.md, "Renamed variables").

Up to 2.0.0 the service had three names: the tuning stages and playbooks guarded and restarted
``sglang_service_name``, role ``sglang_server`` deployed ``sglang_server_name`` and role ``sglang_preflight`` checked
``sglang_preflight_service_name``, so a user who set only ``sglang_server_name`` had the host's guard watching another
unit than the one deployed. The old names are still read, with a deprecation warning, until ``REMOVED_IN``; two names
set to different services are refused before anything changes.
"""
from __future__ import annotations

import typing as t
from collections.abc import Mapping

NAME = "sglang_service_name"
DEFAULT = "sglang"
# The names role sglang_server and role sglang_preflight gave the same variable up to 2.0.0.
OLD_NAMES = ("sglang_server_name", "sglang_preflight_service_name")
REMOVED_IN = "3.0.0"


class ServiceNameConflict(ValueError):
    """Two of the service's names are set to different services."""


class ServiceName(t.NamedTuple):
    value: t.Any
    old_names: tuple[str, ...]  # the deprecated names that were set (each deserves its deprecation warning)


def resolve(variables: Mapping[str, t.Any]) -> ServiceName:
    """The service name of a host from its variables (templated): ``sglang_service_name``, else an old name, else
    ``sglang``. A name set to None counts as not set (YAML's empty value), as a role default would have it."""
    given = {name: variables[name] for name in (NAME, *OLD_NAMES) if variables.get(name) is not None}
    if not given:
        return ServiceName(DEFAULT, ())
    (first, value), *others = given.items()
    for other, other_value in others:
        if other_value != value:
            raise ServiceNameConflict(
                f"{first} ({value!r}) and {other} ({other_value!r}) name different services; set only {NAME}, the "
                f"one name of the SGLang service ({' and '.join(OLD_NAMES)} are its deprecated old names, read until "
                f"{REMOVED_IN})")
    return ServiceName(value, tuple(name for name in given if name != NAME))


def deprecation(old_name: str) -> str:
    """The deprecation warning for ``old_name``, naming the variable to set instead."""
    return (f"{old_name} is deprecated: the SGLang service is named {NAME} (one name for the deploy, the preflight "
            f"and the host's guard); {old_name} is still read until {REMOVED_IN}")
