# Copyright (c) llmops.sglang contributors
# Apache License 2.0 (see LICENSE)
"""Values that reach a systemd unit file: refused when they could leave their setting, quoted by each setting's syntax.

Private to the llmops.sglang collection. Pure functions.

A unit file is read line by line: a line break in a value ends its setting and starts another one (an injected
``ExecStartPre=+...`` runs as root whatever ``User=`` says), so every value that reaches the unit is refused when it
holds a control character, with an error naming the field. What is left is written as systemd reads each setting
(systemd.syntax(7), systemd.service(5), systemd.exec(5), systemd 252):

- a command line (``ExecStart=``): words split at blanks, quoted with ``'`` or ``"`` (anywhere in a word), C escapes
  (``\\n``, ``\\\\``, ``\\'``, ...) inside and outside quotes; ``%`` starts a specifier, ``$`` a variable;
- ``Environment=``: one double-quoted ``KEY=value`` with C escapes; ``%`` specifiers;
- ``ReadOnlyPaths=``/``ReadWritePaths=``: quoted words (a backslash keeps the next character), the ``-`` prefix
  inside the word, ``%`` specifiers, absolute normalized paths (systemd ignores others);
- ``Description=``, ``WorkingDirectory=``, ``LoadCredential=``'s path, ``DeviceAllow=``: the rest of the line as
  written (no unquoting), ``%`` specifiers.
"""
from __future__ import annotations

import re
from collections.abc import Iterable, Mapping

# Every C0 control character and DEL: none of them belongs in a setting.
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
_CONTROL_NAMES = {"\n": "a newline", "\r": "a carriage return", "\0": "a NUL character", "\t": "a tab"}
# What a command line word may hold unquoted (shlex's safe set: a unit without such values renders as before).
_BARE_WORD = re.compile(r"[\w@%+=:,./-]+", re.ASCII)
ENVIRONMENT_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
# A user or group systemd takes as is (its relaxed rules, without what needs quoting), or a numeric id.
USER_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_.-]*\$?|[0-9]+")
SERVICE_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.:-]*")
# DeviceAllow=: a /dev node or a device class of /proc/devices, and the access (r, w, m).
DEVICE_ALLOW = re.compile(r"(?:/dev/|char-|block-)[^\s%]+(?: +[rwm]{1,3})?")
# C escapes systemd's unquoting knows (besides \xHH, octal \NNN, \uXXXX and \UXXXXXXXX).
_C_ESCAPES = {"a": "\a", "b": "\b", "f": "\f", "n": "\n", "r": "\r", "t": "\t", "v": "\v", "s": " ",
              "\\": "\\", '"': '"', "'": "'"}
_HEX_ESCAPES = {"x": 2, "u": 4, "U": 8}


# --- refused values ---------------------------------------------------------------------------------


def control_character_error(field: str, value: object) -> str | None:
    """Why ``value`` cannot go into a unit setting, naming ``field``: it holds a control character."""
    text = str(value)
    found = _CONTROL.search(text)
    if found is None:
        return None
    char = found.group()
    what = _CONTROL_NAMES.get(char, f"the control character U+{ord(char):04X}")
    hint = ("; a YAML block scalar (| or >) ends with a newline: write |- or >-, or a quoted string"
            if char == "\n" and text.endswith("\n") else "")
    return (f"{field}: contains {what}, which would end its setting in the unit file and start another one; "
            f"remove it{hint}")


def path_error(field: str, value: object) -> str | None:
    """Why ``value`` cannot be a path setting of the unit: a control character, relative, or ``.``/``..`` in it
    (systemd ignores a path that is not normalized, so a hardening setting would silently not apply)."""
    text = str(value)
    error = control_character_error(field, text)
    if error is not None:
        return error
    if not text.startswith("/"):
        return f"{field}: {text!r} is not an absolute path; write the path from /"
    if any(part in (".", "..") for part in text.split("/")):
        return f"{field}: {text} has a '.' or '..' component, which systemd ignores in a unit; write it without them"
    return None


def server_arg_errors(prefix: str, server_args: Mapping) -> list[str]:
    """Control characters in server args (names and values; a list's items each). A mapping value goes to the
    command line as JSON, whose escapes hold no control character."""
    errors = []
    for name, value in server_args.items():
        field = f"{prefix}.{name}"
        errors.append(control_character_error(f"{prefix}[{name!r}] (a name)", name))
        if isinstance(value, (list, tuple)):
            errors += [control_character_error(f"{field}[{index}]", item) for index, item in enumerate(value)]
        elif not isinstance(value, (Mapping, bool)) and value is not None:
            errors.append(control_character_error(field, value))
    return [error for error in errors if error]


def environment_errors(prefix: str, environment: Mapping) -> list[str]:
    """Names that are not variable names, and values with control characters."""
    errors = []
    for name, value in environment.items():
        if not isinstance(name, str) or not ENVIRONMENT_NAME.fullmatch(name):
            errors.append(f"{prefix}: {name!r} is not a variable name (letters, digits and '_', not starting with "
                          f"a digit)")
        else:
            errors.append(control_character_error(f"{prefix}.{name}", value))
    return [error for error in errors if error]


def _name_error(field: str, value: object, pattern: re.Pattern, what: str) -> str | None:
    if isinstance(value, str) and pattern.fullmatch(value):
        return None
    return control_character_error(field, value) or f"{field}: {value!r} is not {what}"


def service_name_error(field: str, value: object) -> str | None:
    """Why ``value`` cannot name the service (the unit ``<value>.service``): empty, ``.`` or ``..``, a ``/``, a
    control character or another character a unit name cannot hold."""
    return _name_error(field, value, SERVICE_NAME,
                       "a service name (letters, digits, '_', '.', ':' and '-', starting with a letter, digit or '_'; "
                       "without .service)")


def unit_value_errors(args: Mapping) -> list[str]:
    """Every problem of the server module's options that reach the unit, each naming its option; empty when all of
    them can be written. Options left out get the module's defaults, which are valid."""
    errors = [service_name_error("name", args.get("name"))]
    for field in ("user", "group"):
        if args.get(field):
            errors.append(_name_error(field, args[field], USER_NAME, "a user or group name"))
    for field in ("python", "working_directory", "env_dir"):
        if args.get(field) is not None:
            errors.append(path_error(field, args[field]))
    for field in ("host", "port", "launcher_path"):
        if args.get(field) is not None:
            errors.append(control_character_error(field, args[field]))
    model_path = args.get("model_path")
    if model_path is not None:
        check = path_error if str(model_path).startswith("/") else control_character_error
        errors.append(check("model_path", model_path))
    errors += [path_error(f"read_write_paths[{index}]", path)
               for index, path in enumerate(args.get("read_write_paths") or [])]
    errors += [_name_error(f"device_allow[{index}]", entry, DEVICE_ALLOW,
                           "a DeviceAllow= entry (a /dev path, char-CLASS or block-CLASS, then r, w and/or m)")
               for index, entry in enumerate(args.get("device_allow") or [])]
    errors += server_arg_errors("server_args", args.get("server_args") or {})
    errors += environment_errors("environment", args.get("environment") or {})
    return [error for error in errors if error]


# --- quoting -----------------------------------------------------------------------------------------


def specifiers_escaped(text: str) -> str:
    """``text`` for a setting that expands ``%`` specifiers."""
    return text.replace("%", "%%")


def quoted_word(word: str) -> str:
    """One word as systemd's unquoting gives it back: as is when it holds only safe characters, else in single
    quotes with its backslashes and single quotes escaped (systemd reads C escapes inside quotes too)."""
    if _BARE_WORD.fullmatch(word):
        return word
    return "'" + word.replace("\\", "\\\\").replace("'", "\\'") + "'"


def command_line(argv: Iterable[str]) -> str:
    """An ``ExecStart=`` value that runs exactly ``argv`` (its first word an absolute path)."""
    return " ".join(specifiers_escaped(quoted_word(word)).replace("$", "$$") for word in argv)


def environment_assignment(name: str, value: object) -> str:
    """An ``Environment=`` value: the double-quoted ``name=value``."""
    text = f"{name}={value}".replace("\\", "\\\\").replace('"', '\\"')
    return f'"{specifiers_escaped(text)}"'


def optional_path(path: str) -> str:
    """A ``ReadOnlyPaths=``/``ReadWritePaths=`` word for ``path`` that systemd skips when it does not exist."""
    return specifiers_escaped(quoted_word("-" + path))


def template_variables(args: Mapping, command: list[str], default_device_allow: Iterable[str]) -> dict:
    """The variables of the unit template, each ready for its setting; ``args`` passed :func:`unit_value_errors`."""
    name = args["name"]
    model_path = str(args["model_path"])
    env_file = f"{args.get('env_dir', '/etc/sglang')}/{name}.env"
    device_allow = args.get("device_allow")
    return {
        "sglang_unit_name": name,
        "sglang_description": specifiers_escaped(f"SGLang server {name} ({model_path})"),
        "sglang_exec_start": command_line(command),
        "sglang_environment": [environment_assignment(key, value)
                               for key, value in sorted((args.get("environment") or {}).items())],
        "sglang_api_key_file": specifiers_escaped(env_file) if args.get("api_key") else "",
        "sglang_user": args.get("user", "sglang"),
        "sglang_group": args.get("group"),
        "sglang_working_directory": specifiers_escaped(args.get("working_directory", "/")),
        "sglang_read_only_paths": [optional_path(model_path)] if model_path.startswith("/") else [],
        "sglang_read_write_paths": [optional_path(path) for path in args.get("read_write_paths") or []],
        "sglang_device_allow": [specifiers_escaped(entry)
                                for entry in (default_device_allow if device_allow is None else device_allow)],
    }


# --- reading a command line back ------------------------------------------------------------------------


def _unescape(text: str, at: int) -> tuple[str, int]:
    """The character of the C escape whose letter is at ``text[at]``, and where the text goes on. An escape systemd
    does not know stays as written (ExecStart= reads it that way, with a warning)."""
    letter = text[at]
    if letter in _C_ESCAPES:
        return _C_ESCAPES[letter], at + 1
    if letter in _HEX_ESCAPES:
        digits = _HEX_ESCAPES[letter]
        code = text[at + 1:at + 1 + digits]
        if re.fullmatch(f"[0-9a-fA-F]{{{digits}}}", code):
            return chr(int(code, 16)), at + 1 + digits
    code = text[at:at + 3]
    if re.fullmatch("[0-7]{3}", code):
        return chr(int(code, 8)), at + 3
    return "\\" + letter, at + 1


def split_command_line(text: str) -> list[str]:
    """The words of a command line as systemd splits and unquotes them (``%`` specifiers and ``$`` variables are
    left as written). ValueError for unbalanced quoting or a trailing backslash: systemd refuses such a line."""
    words: list[str] = []
    word: list[str] = []
    in_word, quote, index = False, None, 0
    while index < len(text):
        char = text[index]
        index += 1
        if char == "\\":
            if index >= len(text):
                raise ValueError("it ends with a backslash")
            unescaped, index = _unescape(text, index)
            word.append(unescaped)
            in_word = True
        elif char == quote:
            quote = None
        elif quote is not None:
            word.append(char)
        elif char in "'\"":
            quote, in_word = char, True
        elif char in " \t\n":
            if in_word:
                words.append("".join(word))
            word, in_word = [], False
        else:
            word.append(char)
            in_word = True
    if quote is not None:
        raise ValueError(f"unbalanced quoting (a {quote} is never closed)")
    if in_word:
        words.append("".join(word))
    return words
