# Copyright (c) llmops.sglang contributors
# Apache License 2.0 (see LICENSE)
"""SGLang argument names that changed between releases: the one table the collection translates with.

Private to the llmops.sglang collection. Pure stdlib.

Every entry is taken from the releases' own code (PyPI wheels) and checked against each release's
real ``launch_server --help`` by tests/conformance:

- 0.5.10 and 0.5.11: ``cuda_graph_max_bs``, ``cuda_graph_bs``, ``disable_piecewise_cuda_graph``,
  ``enforce_piecewise_cuda_graph``, ``piecewise_cuda_graph_tokens``, ``piecewise_cuda_graph_compiler``
  and ``piecewise_cuda_graph_max_tokens`` are ServerArgs fields and flags (sglang/srt/server_args.py).
- 0.5.14 and 0.5.17: the fields are gone (``cuda_graph_backend_decode/prefill``,
  ``cuda_graph_max_bs_decode/prefill``, ``cuda_graph_bs_decode/prefill``, ``cuda_graph_tc_compiler``
  replace them); the old flags are registered in ``ServerArgs.add_cli_args`` as
  ``DeprecatedAliasStoreAction`` / ``DeprecatedStoreConstAction`` onto the new dest, e.g.
  ``--disable-piecewise-cuda-graph`` -> ``dest="cuda_graph_backend_prefill", const_value=Backend.DISABLED``
  (0.5.14 sglang/srt/server_args.py lines 6358-6432).
- 0.5.20 and 0.5.23: the deprecated registrations are gone; only ``--disable-cuda-graph`` stays
  (``DeprecatedStoreTrueAction``, ``new_flag="--cuda-graph-backend-{decode,prefill}=disabled"``).
- 0.5.14 to 0.5.23: ``--enable-flashinfer-allreduce-fusion`` is still a flag, but only a deprecated switch for
  ``flashinfer_allreduce_fusion_backend = "auto"``; the old field stays in the dump, always False
  (0.5.14 sglang/srt/server_args.py ``_handle_deprecated_args``; 0.5.23 sglang/srt/arg_groups/serving_hook.py).
"""
from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, NamedTuple


class Rename(NamedTuple):
    old: str  # ServerArgs field / flag name up to `since`
    new: str  # field that replaces it from `since`
    since: str  # first release where `old` is only a deprecated alias of `new`
    removed: str | None  # first release that no longer accepts `old` (None: every release this table covers does)
    # Value of `new` for a boolean `old` (store-const aliases); None: the value carries over.
    const: str | None = None
    first: str | None = None  # first release with `old` (None: every release this table covers)
    gone: str | None = None  # first release without `new` either (the setting itself is gone)
    # The release keeps `old` as a field of its dump (reset to its default) beside `new`, which holds the setting.
    old_field_kept: bool = False


RENAMES: tuple[Rename, ...] = (
    Rename("cuda_graph_max_bs", "cuda_graph_max_bs_decode", "0.5.14", "0.5.20"),
    Rename("cuda_graph_bs", "cuda_graph_bs_decode", "0.5.14", "0.5.20"),
    Rename("disable_piecewise_cuda_graph", "cuda_graph_backend_prefill", "0.5.14", "0.5.20", const="disabled"),
    Rename("enforce_piecewise_cuda_graph", "cuda_graph_backend_prefill", "0.5.14", "0.5.20", const="tc_piecewise"),
    Rename("enable_breakable_cuda_graph", "cuda_graph_backend_prefill", "0.5.14", "0.5.20", const="breakable",
           first="0.5.11"),
    Rename("piecewise_cuda_graph_tokens", "cuda_graph_bs_prefill", "0.5.14", "0.5.20"),
    # 0.5.23 has no cuda_graph_tc_compiler field either (arg_groups/fields/exec_.py)
    Rename("piecewise_cuda_graph_compiler", "cuda_graph_tc_compiler", "0.5.14", "0.5.20", gone="0.5.23"),
    Rename("piecewise_cuda_graph_max_tokens", "cuda_graph_max_bs_prefill", "0.5.14", "0.5.20"),
    Rename("enable_flashinfer_allreduce_fusion", "flashinfer_allreduce_fusion_backend", "0.5.14", None, const="auto",
           old_field_kept=True),
)
BY_OLD: dict[str, Rename] = {rename.old: rename for rename in RENAMES}


def version_tuple(version: str | None) -> tuple[int, ...]:
    """``"0.5.14.post1"`` -> ``(0, 5, 14, 1)``; ``()`` when unknown."""
    return tuple(int(part) for part in re.findall(r"\d+", version or "")[:4])


def _flag(name: str) -> str:
    return "--" + name.replace("_", "-")


def new_spelling(rename: Rename, value: Any = True) -> str:
    """What to write instead of ``old``: ``--cuda-graph-backend-prefill=disabled`` (``cuda_graph_backend_prefill: disabled``)."""
    shown = rename.const if rename.const is not None else value
    return f"{_flag(rename.new)}={shown} (server_args `{rename.new}: {shown}`)"


def translate_value(rename: Rename, value: Any) -> tuple[bool, Any]:
    """(applies, value of ``new``) for a requested ``old: value``; a false switch requests nothing."""
    if rename.const is None:
        return value is not None, value
    return bool(value), rename.const


def status(rename: Rename, known_flags: Mapping[str, Any] | None = None, version: str | None = None) -> str:
    """``current`` (old is the release's own name), ``alias`` (deprecated alias of new), ``removed``
    (only new is accepted) or ``gone`` (neither: the setting no longer exists).

    Decided by the release's ``--help`` when given (its flags are the truth), else by the version.
    """
    if known_flags is not None:
        if rename.new not in known_flags:
            return "current" if rename.old in known_flags or rename.gone is None else "gone"
        return "alias" if rename.old in known_flags else "removed"
    actual = version_tuple(version)
    if not actual or actual < version_tuple(rename.since):
        return "current"
    if rename.gone is not None and actual >= version_tuple(rename.gone):
        return "gone"
    return "alias" if rename.removed is None or actual < version_tuple(rename.removed) else "removed"


def _release(version: str | None) -> str:
    return f"SGLang {version}" if version else "the installed SGLang"


def removed_error(rename: Rename, value: Any, version: str | None = None) -> str:
    release = _release(version)
    # A removal newer than the table (removed None) is known from the release's --help alone.
    removed = f"removed in {rename.removed}" if rename.removed else "no longer accepted"
    return (f"server_args.{rename.old}: {release} has no {_flag(rename.old)} (a deprecated alias from {rename.since}, "
            f"{removed}); use {new_spelling(rename, value)}")


def gone_error(rename: Rename, version: str | None = None) -> str:
    release = _release(version)
    return (f"server_args.{rename.old}: {release} has neither {_flag(rename.old)} nor {_flag(rename.new)} "
            f"(removed in {rename.gone}); drop it")


def alias_warning(rename: Rename, value: Any, version: str | None = None) -> str:
    release = _release(version)
    return (f"server_args.{rename.old}: in {release} {_flag(rename.old)} is a deprecated alias of "
            f"{new_spelling(rename, value)}, read as that; "
            + (f"it is removed in {rename.removed}" if rename.removed else "a later release may remove it"))


def old_name_error(rename: Rename, version: str | None = None) -> str:
    release = _release(version)
    use = f"{rename.old}: true" if rename.const is not None else rename.old
    return (f"server_args.{rename.new}: {release} has no {_flag(rename.new)} (it arrived in {rename.since}); "
            f"use {use}")


def translate_args(server_args: Mapping[str, Any], known_flags: Mapping[str, Any] | None = None,
                   version: str | None = None) -> tuple[dict[str, Any], list[str], list[str]]:
    """``server_args`` in the release's own names: (translated, warnings, errors).

    An old name the release accepts as a deprecated alias becomes its new name (with a warning); an
    old name the release no longer accepts is an error naming the new flag; a new name on a release
    that predates it is an error naming the old one. Other args pass unchanged.
    """
    translated: dict[str, Any] = {}
    warnings: list[str] = []
    errors: list[str] = []
    for name, value in server_args.items():
        rename = BY_OLD.get(name)
        if rename is not None:
            state = status(rename, known_flags, version)
            if state == "alias":
                applies, new_value = translate_value(rename, value)
                if applies:
                    translated.setdefault(rename.new, new_value)
                    warnings.append(alias_warning(rename, value, version))
                continue
            if state in ("removed", "gone"):
                if translate_value(rename, value)[0]:
                    errors.append(removed_error(rename, value, version) if state == "removed"
                                  else gone_error(rename, version))
                continue
        else:
            candidates = [r for r in RENAMES if r.new == name]
            older = next((r for r in candidates if r.const == value), candidates[0] if candidates else None)
            if older is not None and value is not None and status(older, known_flags, version) == "current":
                errors.append(old_name_error(older, version))
                continue
        translated[name] = value
    return translated, warnings, errors


def renamed_in(name: str, effective_args: Mapping[str, Any]) -> Rename | None:
    """The rename of a requested old ``name`` when a server's effective args hold its new field instead
    (a request in old names compared with a newer release's dump), or beside the old one reset to False
    (``enable_flashinfer_allreduce_fusion=False, flashinfer_allreduce_fusion_backend='auto'`` from 0.5.14)."""
    rename = BY_OLD.get(name)
    if rename is None or rename.new not in effective_args:
        return None
    if name in effective_args and not (rename.old_field_kept and not effective_args[name]):
        return None  # the release reads `old` itself (a kept old field only holds the setting while it is set)
    return rename
