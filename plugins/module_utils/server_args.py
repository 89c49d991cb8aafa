# Copyright (c) llmops.sglang contributors
# Apache License 2.0 (see LICENSE)
"""SGLang server arguments: structured mapping <-> CLI flags, validated against the installed SGLang.

Private to the llmops.sglang collection.
"""
from __future__ import annotations

import difflib
import json
import re
from collections.abc import Mapping

from ansible_collections.llmops.sglang.plugins.module_utils.sglang_names import (
    BY_OLD, BY_REMOVED, gone_error, old_name_error, older_name, removal_error, removed_error, status, translate_args)

# argparse --help: an option's invocation line (`  --flag METAVAR, --alias METAVAR   help`, indented less than
# the help column) and the usage block (`[--flag [X]]`); a part is one option string with its value shape.
_OPTION_PART = re.compile(r"(--?[A-Za-z0-9][\w-]*)((?: (?:\{[^}]*\}|\[[^\]]*\]+|[^\s,\[{][^\s,]*))*)")
_INVOCATION_LINE = re.compile(r"^ {1,8}(-{1,2}[A-Za-z0-9].*?)(?: {2,}\S.*)?$")
_USAGE_OPTION = re.compile(r"\[(--[A-Za-z0-9][\w-]*)((?: (?:\{[^}]*\}|\[[^\[\]]*(?:\[[^\[\]]*\])?[^\[\]]*\]|[^\s\[\]|]+))*)\]"
                           r"|(?<![\w\[-])(--[A-Za-z0-9][\w-]*)((?: (?:\{[^}]*\}|[A-Z][A-Z0-9_]*))?)(?=[\s\]]|$)")


def flag_name(arg: str) -> str:
    """``tp_size`` -> ``--tp-size``."""
    return "--" + arg.replace("_", "-")


def arg_name(flag: str) -> str:
    """``--tp-size`` -> ``tp_size``."""
    return flag.lstrip("-").replace("-", "_")


def to_cli_args(server_args: Mapping[str, object], known_flags: Mapping[str, dict] | None = None) -> list[str]:
    """SGLang CLI argv for a mapping of ServerArgs fields.

    True is a bare flag, None is omitted (SGLang's default applies), lists expand to ``nargs`` values,
    mappings are passed as JSON (SGLang's JSON-valued flags take a string). False is omitted too, except
    for a flag the release (``known_flags``, its ``--help``) also lists as ``--no-<flag>``: argparse's
    BooleanOptionalAction, whose default is "auto" (None: the model or platform decides), so only
    ``--no-<flag>`` turns it off (0.5.23 arg_groups/fields/exec_.py line 45: ``enable_tf32_matmul``,
    ``Optional[bool] = None``, which GLM4-MoE and MiniMax-M2 resolve to true).
    """
    argv: list[str] = []
    for name, value in server_args.items():
        if value is False and known_flags is not None and f"no_{name}" in known_flags:
            argv.append(known_flags[f"no_{name}"]["flag"])
        if value is None or value is False:
            continue
        flag = flag_name(name)
        if value is True:
            argv.append(flag)
        elif isinstance(value, (list, tuple)):
            argv += [flag, *(str(v) for v in value)]
        elif isinstance(value, Mapping):
            argv += [flag, json.dumps(value, separators=(",", ":"), sort_keys=True)]
        else:
            argv += [flag, str(value)]
    return argv


# ServerArgs fields holding secrets: on a command line they are readable by every local user.
SECRET_ARGS = ("api_key", "admin_api_key")
# Flags that lead the canonical command line (the rest follow sorted by flag).
LEADING_ARGS = ("model_path", "host", "port")


def secret_arg_errors(server_args: Mapping[str, object]) -> list[str]:
    """Errors for secrets given in server_args; each tells to use the module's ``api_key`` option."""
    return [f"server_args.{name}: a key in server_args would be on the server's command line, readable by every "
            f"local user; set the API key with the `api_key` option (the launcher hands it to SGLang in-process)"
            + ("; an admin API key is not supported" if name == "admin_api_key" else "")
            for name in SECRET_ARGS if server_args.get(name) not in (None, False)]


def canonical_args(server_args: Mapping[str, object]) -> dict:
    """``server_args`` in the canonical order: model_path, host, port, then every other field sorted by flag.

    The same arguments in another order give the same command line, so the same unit and no restart."""
    leading = {name: server_args[name] for name in LEADING_ARGS if name in server_args}
    rest = sorted((name for name in server_args if name not in LEADING_ARGS), key=flag_name)
    return {**leading, **{name: server_args[name] for name in rest}}


def _value_shape(rest: str) -> dict:
    """What argparse's metavar text after an option string says: takes a value, optional, several, choices.

    `` X`` one value; `` [X]`` an optional value (nargs='?'); `` [X ...]`` any number (nargs='*');
    `` X [X ...]`` one or more (nargs='+'); `` {a,b}`` in place of X: the choices; nothing: a switch.
    """
    rest = rest.strip()
    if not rest:
        return {"takes_value": False, "value_optional": False, "multiple": False, "choices": None}
    optional = rest.startswith("[")
    multiple = "..." in rest
    first = rest.lstrip("[").split(" ", 1)[0].rstrip("]")
    choices = first[1:-1].split(",") if first.startswith("{") and first.endswith("}") else None
    return {"takes_value": True, "value_optional": optional, "multiple": multiple, "choices": choices}


def _add_flag(flags: dict, flag: str, rest: str) -> None:
    if not flag.startswith("--"):
        return
    name = arg_name(flag)
    spec = {"flag": flag, **_value_shape(rest)}
    known = flags.get(name)
    if known is None or (spec["takes_value"] and not known["takes_value"]):
        flags[name] = spec


def parse_help_flags(help_text: str) -> dict[str, dict]:
    """Flags ``python -m sglang.launch_server --help`` lists.

    ``{arg_name: {flag, takes_value, value_optional, multiple, choices}}`` for every option string
    (aliases included). Read from argparse's option lines (every option string with its value shape),
    and from the usage block for options only it shows; help prose that mentions a flag is not an option.
    """
    flags: dict[str, dict] = {}
    usage: list[str] = []
    in_usage = False
    for line in help_text.splitlines():
        if line.startswith("usage:"):
            in_usage = True
        elif in_usage and not line.strip():
            in_usage = False
        if in_usage:
            usage.append(line)
            continue
        match = _INVOCATION_LINE.match(line)
        if match is None:
            continue
        for part in match.group(1).split(", "):
            option = _OPTION_PART.fullmatch(part.strip())
            if option is not None:
                _add_flag(flags, option.group(1), option.group(2))
    for match in _USAGE_OPTION.finditer(" ".join(line.strip() for line in usage)):
        flag, rest = (match.group(1), match.group(2)) if match.group(1) else (match.group(3), match.group(4))
        if arg_name(flag) not in flags:
            _add_flag(flags, flag, rest or "")
    flags.pop("help", None)
    return flags


def _value_errors(name: str, value: object, spec: Mapping) -> list[str]:
    flag = spec["flag"]
    if not spec["takes_value"]:
        if isinstance(value, bool):
            return []
        return [f"server_args.{name}: {flag} is an on/off flag; use true or false, got {value!r}"]
    if isinstance(value, bool):
        if not value or spec.get("value_optional"):
            return []  # false: omitted; true: the bare flag, which an optional-value option takes
        return [f"server_args.{name}: {flag} takes a value, got a boolean; set a value or null to use SGLang's default"]
    if isinstance(value, (list, tuple)) and not spec.get("multiple"):
        return [f"server_args.{name}: {flag} takes one value, got a list {list(value)!r}"]
    choices = spec.get("choices")
    items = value if isinstance(value, (list, tuple)) else [value]
    if choices:
        wrong = [item for item in items if str(item) not in choices]
        if wrong:
            shown = wrong[0] if len(wrong) == 1 and not isinstance(value, (list, tuple)) else wrong
            return [f"server_args.{name}: {shown!r} is not one of {', '.join(choices)}"]
    return []


def validate_server_args(server_args: Mapping[str, object], known_flags: Mapping[str, dict],
                         version: str | None = None) -> list[str]:
    """Errors for args the installed SGLang (``version`` names it in the messages) does not know or cannot take;
    each names the field and the fix.

    A name the release does not list is explained by the collection's tables first (sglang_names: a rename,
    a setting that is gone, a removal without replacement), by string similarity only when they know nothing.
    """
    errors = []
    for name, value in server_args.items():
        spec = known_flags.get(name)
        if spec is None:
            rename = BY_OLD.get(name)
            state = status(rename, known_flags) if rename is not None else None
            older = older_name(name, value, known_flags)
            if state == "removed":
                errors.append(removed_error(rename, value, version, request=server_args))
            elif state == "gone":
                errors.append(gone_error(rename, version, known_flags=known_flags))
            elif name in BY_REMOVED:
                errors.append(removal_error(BY_REMOVED[name], version))
            elif older is not None:  # a newer release's name on an older release
                errors.append(old_name_error(older, version))
            else:
                errors.append(_unknown_flag_error(name, known_flags, version))
        elif value is not None:
            errors.extend(_value_errors(name, value, spec))
    return errors


def deprecated_alias_warnings(server_args: Mapping[str, object], known_flags: Mapping[str, dict],
                              version: str | None = None) -> list[str]:
    """Warnings for requested old names the installed SGLang takes only as deprecated aliases (sglang_names)."""
    return translate_args(server_args, known_flags, version)[1]


def _unknown_flag_error(name: str, known_flags: Mapping[str, dict], version: str | None = None) -> str:
    release = f"SGLang {version}" if version else "the installed SGLang"
    message = f"server_args.{name}: {release} has no flag {flag_name(name)}"
    close = difflib.get_close_matches(name, list(known_flags), n=1, cutoff=0.6)
    if close:
        return f"{message}; did you mean {close[0]} ({known_flags[close[0]]['flag']})?"
    return message + " (see `python -m sglang.launch_server --help` on the host)"
