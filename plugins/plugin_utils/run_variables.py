# Copyright (c) llmops.sglang contributors
# Apache License 2.0 (see LICENSE)
"""Top-level variables of a run that nothing in the collection reads: a typo such as ``tuning_run_polcy`` that
Ansible would silently ignore, leaving the default in force (nested keys are checked by module_utils/run_inputs.py)."""
from __future__ import annotations

import difflib
import functools
import re
import typing as t
from pathlib import Path

COLLECTION = Path(__file__).resolve().parents[2]
# The prefixes of the collection's own variables: a name with one of them is meant for the collection.
NAME = re.compile(r"\b(?:tuning_run|sglang)_\w+")


def _names_in(paths: t.Iterable[Path]) -> frozenset[str]:
    return frozenset(name for path in paths for name in NAME.findall(path.read_text(encoding="utf-8")))


@functools.cache
def read_names() -> frozenset[str]:
    """Every such name the roles and playbooks mention: the inputs and the facts the collection sets (no plugin reads
    a variable by name; they get values as arguments)."""
    return _names_in(path for folder in ("roles", "playbooks") for path in (COLLECTION / folder).rglob("*")
                     if path.suffix in (".yml", ".j2"))


@functools.cache
def input_names() -> tuple[str, ...]:
    """The inputs the roles declare (meta/argument_specs.yml, defaults/main.yml, and the inventory variables their
    defaults name): what a did-you-mean suggests."""
    return tuple(sorted(_names_in([*COLLECTION.glob("roles/*/meta/argument_specs.yml"),
                                   *COLLECTION.glob("roles/*/defaults/main.yml")])))


def unknown_variables(names: t.Iterable[str]) -> list[str]:
    """One error per variable of ``names`` that has the collection's prefix and is read nowhere in it."""
    errors = []
    for name in sorted(set(names)):
        if NAME.fullmatch(name) and name not in read_names():
            close = difflib.get_close_matches(name, input_names(), n=1)
            errors.append(f"{name}: no role or playbook of llmops.sglang reads this variable (a typo?)"
                          + (f"; did you mean {close[0]!r}?" if close else ""))
    return errors
