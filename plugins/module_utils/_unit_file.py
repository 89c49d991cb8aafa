# Copyright (c) llmops.sglang contributors
# Apache License 2.0 (see LICENSE)
"""What a unit file says, read as systemd reads it: the argv of its ExecStart, the value of a setting, the address
its server listens on (``--host``/``--port`` found anywhere in its ExecStart: a launcher before the SGLang args does
not hide them; SGLang's defaults otherwise) and its health endpoint, the SGLang arguments of its command line.

Private to the llmops.sglang collection. Pure functions; runs on the managed host with the server module (server
preflight, unit_change) and on the controller (filter unit_health_url).
"""
from __future__ import annotations

from collections.abc import Iterable

from ansible_collections.llmops.sglang.plugins.module_utils.systemd_unit import split_command_line

SGLANG_DEFAULT_HOST = "127.0.0.1"
SGLANG_DEFAULT_PORT = 30000


def exec_start_argv(unit_text: str | None) -> list[str] | None:
    """argv of the (last) ``ExecStart=`` of a unit file, unquoted as systemd does; None without one.

    Continuation lines (trailing ``\\``) are joined, the command prefixes (``-``, ``@``, ``:``, ``+``,
    ``!``) dropped, and ``%%``/``$$`` turned back into ``%``/``$`` (``${VAR}`` references stay as text).
    ValueError when systemd could not read it either (unbalanced quoting).
    """
    if not unit_text:
        return None
    command = None
    lines = unit_text.splitlines()
    index = 0
    while index < len(lines):
        line = lines[index].strip()
        index += 1
        if not line.startswith("ExecStart="):
            continue
        value = line[len("ExecStart="):]
        while value.endswith("\\") and index < len(lines):
            value = value[:-1] + " " + lines[index].strip()
            index += 1
        command = value.strip() or None  # an empty ExecStart= resets the list
    if command is None:
        return None
    argv = split_command_line(command.replace("%%", "%"))  # specifiers are resolved before the line is split
    if argv:
        argv[0] = argv[0].lstrip("-@:+!")
    return [token.replace("$$", "$") for token in argv]


def option_value(argv: Iterable[str], *flags: str) -> str | None:
    """The value argparse would take for the last of ``--flag VALUE`` / ``--flag=VALUE`` in argv."""
    found = None
    tokens = list(argv)
    for position, token in enumerate(tokens):
        name, equals, inline = token.partition("=")
        if name not in flags:
            continue
        if equals:
            found = inline
        elif position + 1 < len(tokens):
            found = tokens[position + 1]
    return found


def listen_address(argv: Iterable[str] | None) -> tuple[str, int]:
    """(host, port) of an SGLang command line: its ``--host``/``--port`` tokens, SGLang's defaults otherwise."""
    tokens = list(argv or [])
    host = option_value(tokens, "--host") or SGLANG_DEFAULT_HOST
    port = option_value(tokens, "--port")
    try:
        return host, int(port) if port is not None else SGLANG_DEFAULT_PORT
    except ValueError:
        return host, SGLANG_DEFAULT_PORT


def unit_listen_address(unit_text: str | None) -> tuple[str, int]:
    """(host, port) the server of a unit file listens on; SGLang's defaults for a unit systemd cannot start (its
    ExecStart= unreadable), since nothing listens on its behalf."""
    try:
        return listen_address(exec_start_argv(unit_text))
    except ValueError:
        return listen_address(None)


def health_url(host: str, port: int) -> str:
    """The health endpoint of a server listening on host:port, asked from the host itself."""
    if host in ("", "0.0.0.0"):
        host = "127.0.0.1"
    elif host == "::":
        host = "::1"
    if ":" in host and not host.startswith("["):
        host = f"[{host}]"
    return f"http://{host}:{port}/health"


def unit_health_url(unit_text: str | None) -> str:
    """Health endpoint of the server a unit file starts (its own host/port, not the requested ones)."""
    return health_url(*unit_listen_address(unit_text))


def launch_server_args(argv: list[str] | None) -> list[str] | None:
    """The SGLang arguments of a command line: what follows ``sglang.launch_server`` (``python -m
    sglang.launch_server ...``, ``python <launcher> sglang.launch_server ...``) or a ``.../sglang/launch_server.py``
    script; None when absent."""
    if not argv:
        return None
    for position, token in enumerate(argv):
        if position > 0 and (token == "sglang.launch_server" or token.endswith("/sglang/launch_server.py")):
            return argv[position + 1:]
    return None


def unit_setting(unit_text: str | None, name: str) -> str | None:
    """The last value of ``Name=`` in a unit file (None when unset)."""
    found = None
    for line in (unit_text or "").splitlines():
        key, equals, value = line.strip().partition("=")
        if equals and key == name:
            found = value.strip()
    return found
