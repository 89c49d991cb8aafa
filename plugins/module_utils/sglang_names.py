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
- 0.5.22: ``tc_piecewise`` is no longer a prefill CUDA-graph backend (0.5.22
  sglang/srt/model_executor/cuda_graph_config.py lines 40-48 ``Backend.ALL = (FULL, BREAKABLE, DISABLED)``, lines
  237-243 "tc_piecewise was removed; select breakable, full, or disabled"), so ``enforce_piecewise_cuda_graph`` has
  no reading any more; ``cuda_graph_tc_compiler`` is gone with it (0.5.21 arg_groups/fields/exec_.py line 533 has
  it, 0.5.22's has not).
- ``--disable-cuda-graph``: a plain switch up to 0.5.13, a ``DeprecatedStoreTrueAction`` onto its own field from
  0.5.14 (0.5.14 sglang/srt/server_args.py line 6376, ``new_flag="--cuda-graph-backend-{decode,prefill}=disabled"``).
- ``--enable-dp-attention``: deprecated in 0.5.22 (0.5.22 sglang/srt/server_args.py lines 415-423,
  ``new_flag="--attn-dp-size <dp-size>"``); ``handle_deprecated_dp_attention`` (0.5.22
  sglang/srt/arg_groups/parallel_hook.py lines 40-62) turns ``--dp-size N --enable-dp-attention`` into
  ``attn_dp_size=N, dp_size=1`` unless ``--attn-dp-size`` is set, and ``resolved_dict`` (server_args.py lines
  316-332) still reports ``enable_dp_attention`` (true while ``attn_dp_size > 1``).
- ``--monokernel-backend amd``: first seen in 0.5.23, already a ``DeprecatedStoreConstAction`` for
  ``--enable-amd-monokernel`` (0.5.23 sglang/srt/server_args.py lines 425-437); no earlier release has either.
- ``REMOVALS``: flags a release dropped with no replacement.
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
    const: str | bool | None = None
    first: str | None = None  # first release with `old` (None: every release this table covers)
    # First release without the setting: neither `old` nor `new`, or (with `const`) `new` no longer takes `const`.
    gone: str | None = None
    # The release keeps `old` as a field of its dump (reset to its default) beside `new`, which holds the setting.
    old_field_kept: bool = False
    also: tuple[tuple[str, Any], ...] = ()  # further fields the release sets with `new` (field, value)
    # (field, reset value): `new` takes the value requested for `field`, which is then reset (dp_size -> attn_dp_size).
    moves: tuple[str, Any] | None = None
    instead: tuple[str, ...] = ()  # values of `new` a release offers once the setting is gone


RENAMES: tuple[Rename, ...] = (
    Rename("cuda_graph_max_bs", "cuda_graph_max_bs_decode", "0.5.14", "0.5.20"),
    Rename("cuda_graph_bs", "cuda_graph_bs_decode", "0.5.14", "0.5.20"),
    Rename("disable_piecewise_cuda_graph", "cuda_graph_backend_prefill", "0.5.14", "0.5.20", const="disabled"),
    # 0.5.22 cuda_graph_config.py lines 40-48 and 237-243: tc_piecewise is retired, these three remain.
    Rename("enforce_piecewise_cuda_graph", "cuda_graph_backend_prefill", "0.5.14", "0.5.20", const="tc_piecewise",
           gone="0.5.22", instead=("breakable", "full", "disabled")),
    Rename("enable_breakable_cuda_graph", "cuda_graph_backend_prefill", "0.5.14", "0.5.20", const="breakable",
           first="0.5.11"),
    Rename("piecewise_cuda_graph_tokens", "cuda_graph_bs_prefill", "0.5.14", "0.5.20"),
    # 0.5.21 arg_groups/fields/exec_.py line 533 declares cuda_graph_tc_compiler; 0.5.22's no longer does.
    Rename("piecewise_cuda_graph_compiler", "cuda_graph_tc_compiler", "0.5.14", "0.5.20", gone="0.5.22"),
    Rename("piecewise_cuda_graph_max_tokens", "cuda_graph_max_bs_prefill", "0.5.14", "0.5.20"),
    Rename("enable_flashinfer_allreduce_fusion", "flashinfer_allreduce_fusion_backend", "0.5.14", None, const="auto",
           old_field_kept=True),
    # 0.5.14 server_args.py line 6376: DeprecatedStoreTrueAction, new_flag="--cuda-graph-backend-{decode,prefill}=disabled".
    Rename("disable_cuda_graph", "cuda_graph_backend_decode", "0.5.14", None, const="disabled", old_field_kept=True,
           also=(("cuda_graph_backend_prefill", "disabled"),)),
    # 0.5.22 server_args.py lines 415-423 and arg_groups/parallel_hook.py lines 40-62 (handle_deprecated_dp_attention).
    Rename("enable_dp_attention", "attn_dp_size", "0.5.22", None, old_field_kept=True, moves=("dp_size", 1)),
    # 0.5.23 server_args.py lines 425-437: DeprecatedStoreConstAction(dest="enable_amd_monokernel", choices=["amd"]).
    Rename("monokernel_backend", "enable_amd_monokernel", "0.5.23", None, const=True, first="0.5.23"),
)
BY_OLD: dict[str, Rename] = {rename.old: rename for rename in RENAMES}


class Removal(NamedTuple):
    name: str  # ServerArgs field / flag name
    removed: str  # first release without it
    why: str  # what the release does instead, so the user knows what dropping it means


REMOVALS: tuple[Removal, ...] = (
    # 0.5.22 arg_groups/fields/spec.py line 229 declares it; 0.5.23 has no trace of it, and its scheduler.py
    # (lines 3979-3990) runs the sync whenever speculative decoding meets DP attention.
    Removal("speculative_skip_dp_mlp_sync", "0.5.23",
            "the scheduler always runs the MLP sync when speculative decoding and DP attention are both on "
            "(unless SGLANG_ENABLE_DP_SPEC_PREFILL_COORDINATION is set)"),
)
BY_REMOVED: dict[str, Removal] = {removal.name: removal for removal in REMOVALS}


def version_tuple(version: str | None) -> tuple[int, ...]:
    """``"0.5.14.post1"`` -> ``(0, 5, 14, 1)``; ``()`` when unknown."""
    return tuple(int(part) for part in re.findall(r"\d+", version or "")[:4])


def _flag(name: str) -> str:
    return "--" + name.replace("_", "-")


def _spell(field: str, value: Any) -> str:
    return _flag(field) if value is True else f"{_flag(field)}={value}"


def _shown(value: Any) -> str:
    return str(value).lower() if isinstance(value, bool) else str(value)


def reads_as(rename: Rename, value: Any, request: Mapping[str, Any] | None = None) -> tuple[bool, dict[str, Any]]:
    """(applies, fields): whether a requested ``old: value`` asks for anything, and the fields the release reads
    it as (``dp_size: 2, enable_dp_attention: true`` -> ``attn_dp_size: 2, dp_size: 1``); a false switch asks
    for nothing. An explicit ``new`` wider than 1 leaves a moving rename nothing to do (0.5.22
    arg_groups/parallel_hook.py lines 50-58: only ``attn_dp_size == 1`` takes ``dp_size``)."""
    request = request or {}
    if rename.moves is not None:
        field, reset = rename.moves
        if not value:
            return False, {}
        if isinstance(request.get(rename.new), int) and request[rename.new] > 1:
            return True, {}
        return True, {rename.new: request.get(field, f"<{field.replace('_', '-')}>"), field: reset}
    if rename.const is None:
        return value is not None, ({rename.new: value} if value is not None else {})
    if not value:
        return False, {}
    return True, {rename.new: rename.const, **dict(rename.also)}


def new_spelling(rename: Rename, value: Any = True, request: Mapping[str, Any] | None = None) -> str:
    """What to write instead of ``old``: ``--cuda-graph-backend-prefill=disabled`` (``cuda_graph_backend_prefill: disabled``)."""
    fields = reads_as(rename, value if value not in (None, False) else True, request)[1] or {
        rename.new: request.get(rename.new) if request else None}
    flags = " ".join(_spell(field, shown) for field, shown in fields.items())
    return flags + " (server_args " + ", ".join(f"`{field}: {_shown(shown)}`" for field, shown in fields.items()) + ")"


def requested_in_release(rename: Rename, translated: Mapping[str, Any]) -> bool:
    """Whether args in the release's names (``translated``) ask for what ``old: true`` asked for."""
    value = translated.get(rename.new)
    if rename.moves is not None:
        return isinstance(value, int) and value > 1
    return value == rename.const if rename.const is not None else bool(value)


def _has_old(rename: Rename, known_flags: Mapping[str, Any] | None, version: str | None) -> bool:
    """Whether the release takes ``old`` at all (``monokernel_backend`` first came in 0.5.23)."""
    if known_flags is not None:
        return rename.old in known_flags
    return rename.first is None or version_tuple(version) >= version_tuple(rename.first)


def status(rename: Rename, known_flags: Mapping[str, Any] | None = None, version: str | None = None) -> str:
    """``current`` (old is the release's own name), ``alias`` (deprecated alias of new), ``removed``
    (only new is accepted) or ``gone`` (neither, or new no longer takes ``const``: the setting no longer exists).

    Decided by the release's ``--help`` when given (its flags and choices are the truth), else by the version.
    """
    if known_flags is not None:
        if rename.new not in known_flags:
            return "current" if rename.old in known_flags or rename.gone is None else "gone"
        choices = (known_flags[rename.new] or {}).get("choices") if isinstance(known_flags[rename.new], Mapping) else None
        if rename.gone is not None and rename.const is not None and choices and str(rename.const) not in choices:
            return "gone"
        return "alias" if rename.old in known_flags else "removed"
    actual = version_tuple(version)
    if not actual or actual < version_tuple(rename.since):
        return "current"
    if rename.gone is not None and actual >= version_tuple(rename.gone):
        return "gone"
    return "alias" if rename.removed is None or actual < version_tuple(rename.removed) else "removed"


def _release(version: str | None) -> str:
    return f"SGLang {version}" if version else "the installed SGLang"


def removed_error(rename: Rename, value: Any, version: str | None = None,
                  request: Mapping[str, Any] | None = None) -> str:
    release = _release(version)
    # A removal newer than the table (removed None) is known from the release's --help alone.
    removed = f"removed in {rename.removed}" if rename.removed else "no longer accepted"
    return (f"server_args.{rename.old}: {release} has no {_flag(rename.old)} (a deprecated alias from {rename.since}, "
            f"{removed}); use {new_spelling(rename, value, request)}")


def gone_error(rename: Rename, version: str | None = None, known_flags: Mapping[str, Any] | None = None) -> str:
    release = _release(version)
    if rename.const is None:
        return (f"server_args.{rename.old}: {release} has neither {_flag(rename.old)} nor {_flag(rename.new)} "
                f"(removed in {rename.gone}); drop it")
    spec = (known_flags or {}).get(rename.new)
    offered = (spec.get("choices") if isinstance(spec, Mapping) else None) or list(rename.instead)
    choices = [value for value in rename.instead if value in offered] or offered  # the closest first
    return (f"server_args.{rename.old}: {release} has no {_flag(rename.old)}, and its {_flag(rename.new)} no longer "
            f"takes {rename.const} (removed in {rename.gone}); choose {_flag(rename.new)} from "
            f"{', '.join(choices)} (server_args `{rename.new}: {choices[0]}`)")


def removal_error(removal: Removal, version: str | None = None) -> str:
    return (f"server_args.{removal.name}: {_release(version)} has no {_flag(removal.name)} (removed in "
            f"{removal.removed}, with no replacement: {removal.why}); drop it")


def alias_warning(rename: Rename, value: Any, version: str | None = None,
                  request: Mapping[str, Any] | None = None) -> str:
    release = _release(version)
    return (f"server_args.{rename.old}: in {release} {_flag(rename.old)} is a deprecated alias of "
            f"{new_spelling(rename, value, request)}, read as that; "
            + (f"it is removed in {rename.removed}" if rename.removed else "a later release may remove it"))


def old_name_error(rename: Rename, version: str | None = None) -> str:
    release = _release(version)
    if rename.moves is not None:
        use = f"{rename.moves[0]} with {rename.old}: true"
    else:
        use = f"{rename.old}: true" if rename.const is not None else rename.old
    return (f"server_args.{rename.new}: {release} has no {_flag(rename.new)} (it arrived in {rename.since}); "
            f"use {use}")


def older_name(name: str, value: Any, known_flags: Mapping[str, Any] | None = None,
               version: str | None = None) -> Rename | None:
    """The rename whose older name a release predating ``name`` takes for ``name: value`` (None: no such)."""
    return next((rename for rename in RENAMES if rename.new == name and (rename.const is None or rename.const == value)
                 and _has_old(rename, known_flags, version) and status(rename, known_flags, version) == "current"),
                None)


def translate_args(server_args: Mapping[str, Any], known_flags: Mapping[str, Any] | None = None,
                   version: str | None = None) -> tuple[dict[str, Any], list[str], list[str]]:
    """``server_args`` in the release's own names: (translated, warnings, errors).

    An old name the release accepts as a deprecated alias becomes its new name (with a warning); an
    old name the release no longer accepts is an error naming the new flag (or, for a setting that is
    gone, the values the release offers); a new name on a release that predates it is an error naming
    the old one; a flag the release removed without replacement (``REMOVALS``) is an error. Other args
    pass unchanged; a name given explicitly wins over what an old name reads as, except the field a
    moving rename resets (``dp_size: 1`` with ``attn_dp_size``).
    """
    translated: dict[str, Any] = {}
    read_as: list[tuple[Rename, dict[str, Any]]] = []
    warnings: list[str] = []
    errors: list[str] = []
    for name, value in server_args.items():
        rename = BY_OLD.get(name)
        if rename is not None:
            state = status(rename, known_flags, version)
            applies, fields = reads_as(rename, value, server_args)
            if state == "alias":
                if applies:
                    read_as.append((rename, fields))
                    warnings.append(alias_warning(rename, value, version, server_args))
                continue
            if state in ("removed", "gone"):
                if applies:
                    errors.append(removed_error(rename, value, version, server_args) if state == "removed"
                                  else gone_error(rename, version, known_flags))
                continue
        removal = BY_REMOVED.get(name)
        if removal is not None and value not in (None, False) and (
                name not in known_flags if known_flags is not None
                else version_tuple(version) >= version_tuple(removal.removed)):
            errors.append(removal_error(removal, version))
            continue
        older = older_name(name, value, known_flags, version) if value is not None else None
        if older is not None:
            errors.append(old_name_error(older, version))
            continue
        translated[name] = value
    for rename, fields in read_as:
        for field, value in fields.items():
            if rename.moves is not None and field == rename.moves[0]:
                translated[field] = value
            else:
                translated.setdefault(field, value)
    return translated, warnings, errors


def renamed_in(name: str, effective_args: Mapping[str, Any]) -> Rename | None:
    """The rename of a requested old ``name`` when a server's effective args hold its new field instead
    (a request in old names compared with a newer release's dump), or beside the old one reset to False
    (``enable_flashinfer_allreduce_fusion=False, flashinfer_allreduce_fusion_backend='auto'`` from 0.5.14).
    A moving rename applies whenever the dump has its new field: 0.5.22+ report ``enable_dp_attention``
    beside ``attn_dp_size`` (``resolved_dict``, 0.5.22 server_args.py lines 316-332) but read ``dp_size``
    as replicas."""
    rename = BY_OLD.get(name)
    if rename is None or rename.new not in effective_args:
        return None
    if rename.moves is None and name in effective_args and not (rename.old_field_kept and not effective_args[name]):
        return None  # the release reads `old` itself (a kept old field only holds the setting while it is set)
    return rename
