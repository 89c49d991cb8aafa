# Copyright (c) llmops.sglang contributors
# Apache License 2.0 (see LICENSE)
"""SGLang server arguments: structured mapping <-> CLI flags, validated against the installed SGLang.

Private to the llmops.sglang collection.
"""
from __future__ import annotations

import difflib
import json
import re
import shlex
from collections.abc import Mapping

# `--flag-name METAVAR`, `--flag-name {a,b}`, `--flag [X ...]`, or a bare `--flag` in argparse help.
_HELP_OPTION = re.compile(r"(?:^|[\s,\[])(--[a-z0-9][a-z0-9-]*)(?:[ =](\{[^}]*\}|[A-Z][A-Z0-9_]*|\[?[A-Z][A-Z0-9_]* \.\.\.\]?))?")


def flag_name(arg: str) -> str:
    """``tp_size`` -> ``--tp-size``."""
    return "--" + arg.replace("_", "-")


def arg_name(flag: str) -> str:
    """``--tp-size`` -> ``tp_size``."""
    return flag.lstrip("-").replace("-", "_")


def to_cli_args(server_args: Mapping[str, object]) -> list[str]:
    """SGLang CLI argv for a mapping of ServerArgs fields.

    True is a bare flag, False and None are omitted (SGLang's defaults apply), lists expand to
    ``nargs`` values, mappings are passed as JSON (SGLang's JSON-valued flags take a string).
    """
    argv: list[str] = []
    for name, value in server_args.items():
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


def systemd_exec_line(argv: list[str]) -> str:
    """Quote argv for an ExecStart= line: shell-like quoting, with ``$``/``%`` escaped for systemd."""
    return " ".join(shlex.quote(a).replace("%", "%%").replace("$", "$$") for a in argv)


def parse_help_flags(help_text: str) -> dict[str, dict]:
    """Flags ``python -m sglang.launch_server --help`` lists: ``{arg_name: {flag, takes_value, choices}}``."""
    flags: dict[str, dict] = {}
    for match in _HELP_OPTION.finditer(help_text):
        flag, value = match.group(1), match.group(2)
        name = arg_name(flag)
        choices = value[1:-1].split(",") if value and value.startswith("{") else None
        known = flags.get(name)
        if known is None or (value and not known["takes_value"]):
            flags[name] = {"flag": flag, "takes_value": bool(value), "choices": choices}
    flags.pop("help", None)
    return flags


def validate_server_args(server_args: Mapping[str, object], known_flags: Mapping[str, dict]) -> list[str]:
    """Errors for args the installed SGLang does not know or cannot take; each names the field and the fix."""
    errors = []
    for name, value in server_args.items():
        spec = known_flags.get(name)
        if spec is None:
            errors.append(_unknown_flag_error(name, known_flags))
        elif value is None:
            continue
        elif not spec["takes_value"] and not isinstance(value, bool):
            errors.append(f"server_args.{name}: {spec['flag']} is an on/off flag; use true or false, got {value!r}")
        elif spec["takes_value"] and isinstance(value, bool) and value:
            errors.append(f"server_args.{name}: {spec['flag']} takes a value, got a boolean; "
                          f"set a value or null to use SGLang's default")
        elif spec["choices"] and value is not False and str(value) not in spec["choices"]:
            errors.append(f"server_args.{name}: {value!r} is not one of {', '.join(spec['choices'])}")
    return errors


def _unknown_flag_error(name: str, known_flags: Mapping[str, dict]) -> str:
    message = f"server_args.{name}: the installed SGLang has no flag {flag_name(name)}"
    close = difflib.get_close_matches(name, list(known_flags), n=1, cutoff=0.6)
    if close:
        return f"{message}; did you mean {close[0]} ({known_flags[close[0]]['flag']})?"
    return message + " (see `python -m sglang.launch_server --help` on the host)"
