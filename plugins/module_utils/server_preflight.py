# Copyright (c) llmops.sglang contributors
# Apache License 2.0 (see LICENSE)
"""Checks llmops.sglang.server runs on the host before it changes anything, and the address of a unit.

Private to the llmops.sglang collection. Pure functions over text the host printed (``ss``,
``/proc``, a unit file, the output of :data:`PARSE_CHECK_PROGRAM`) plus thin readers of ``/proc``
and the file system; commands run through a ``run(argv) -> (rc, out, err)`` callable.

- where a unit listens: ``--host``/``--port`` found anywhere in its ExecStart (a launcher before the
  SGLang args does not hide them), SGLang's defaults otherwise;
- who holds a TCP port: ``ss -ltnpH`` listeners, each process described by ``/proc`` (command line,
  the systemd unit of its cgroup); processes of the service itself (its cgroup or its MainPID's
  process tree) do not count;
- whether the installed SGLang's own argparse parser accepts the argv the unit will run (parse
  only, nothing starts), its errors named by the user's field names;
- whether ``model_path`` is a model directory the server's user can read, or a hub id.
"""
from __future__ import annotations

import ipaddress
import json
import os
import re
import shutil
import stat as stat_module
import tempfile
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

from ansible_collections.llmops.sglang.plugins.module_utils.server_args import arg_name, flag_name
from ansible_collections.llmops.sglang.plugins.module_utils.systemd_unit import split_command_line

SGLANG_DEFAULT_HOST = "127.0.0.1"
SGLANG_DEFAULT_PORT = 30000
_WILDCARDS = {"0.0.0.0": 4, "::": 6}

# --- the address a unit listens on ----------------------------------------------------------------


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


# --- who holds a port ------------------------------------------------------------------------------

_SS_PROCESS_RE = re.compile(r'\("((?:[^"\\]|\\.)*)",pid=(\d+),fd=\d+\)')


@dataclass
class Listener:
    address: str  # "127.0.0.1", "::", "0.0.0.0" (the wildcards) ...
    port: int
    processes: list[tuple[str, int]] = field(default_factory=list)  # (command name, pid) as ss names them


def _normalize_address(text: str) -> str:
    text = text.strip()
    if text.startswith("[") and text.endswith("]"):
        text = text[1:-1]
    text = text.split("%", 1)[0]  # 127.0.0.53%lo, fe80::1%eth0
    if text in ("*", ""):
        return "::"  # ss prints a socket bound to both families as *
    try:
        address = ipaddress.ip_address(text)
    except ValueError:
        return text
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return str(address.ipv4_mapped)
    return str(address)


def parse_ss_listeners(text: str) -> list[Listener]:
    """Listening TCP sockets in ``ss -ltnpH`` output (columns: State Recv-Q Send-Q Local Peer [users:(...)])."""
    listeners = []
    for line in text.splitlines():
        columns = line.split()
        if len(columns) < 5 or not columns[0].startswith("LISTEN"):
            continue
        local = columns[3]
        address, colon, port = local.rpartition(":")
        if not colon or not port.isdigit():
            continue
        processes = [(name, int(pid)) for name, pid in _SS_PROCESS_RE.findall(line)]
        listeners.append(Listener(_normalize_address(address), int(port), processes))
    return listeners


def _family(address: str) -> int | None:
    try:
        return ipaddress.ip_address(address).version
    except ValueError:
        return None


def addresses_overlap(listening: str, requested: str) -> bool:
    """Whether binding ``requested`` collides with a socket listening on ``listening`` (same port).

    Specific addresses collide when equal; the IPv4 wildcard with every IPv4 address and the IPv6
    wildcard; the IPv6 wildcard with everything (Linux's default dual-stack sockets). A name that is
    not an IP address collides with everything (we cannot tell).
    """
    listening, requested = _normalize_address(listening), _normalize_address(requested)
    if listening == requested or "::" in (listening, requested):
        return True
    families = (_family(listening), _family(requested))
    if None in families:
        return True
    if "0.0.0.0" in (listening, requested):
        return families == (4, 4)
    return False


def conflicting_listeners(listeners: Iterable[Listener], addresses: Iterable[str], port: int) -> list[Listener]:
    """Listeners on ``port`` that a server binding any of ``addresses`` would collide with."""
    wanted = list(addresses)
    return [listener for listener in listeners if listener.port == port
            and any(addresses_overlap(listener.address, address) for address in wanted)]


def parse_proc_cgroup(text: str) -> list[str]:
    """The cgroup paths of ``/proc/<pid>/cgroup`` (``0::/system.slice/x.service`` -> that path), unified first."""
    paths = []
    for line in text.splitlines():
        parts = line.split(":", 2)
        if len(parts) == 3 and parts[2]:
            (paths.insert(0, parts[2]) if parts[0] == "0" else paths.append(parts[2]))
    return paths


def unit_of_cgroup(paths: Iterable[str]) -> str | None:
    """The innermost systemd unit (``*.service``/``*.scope``) named in cgroup paths."""
    for path in paths:
        units = [part for part in path.split("/") if part.endswith((".service", ".scope"))]
        if units:
            return units[-1]
    return None


def parse_proc_stat_ppid(text: str) -> int | None:
    """Parent pid from ``/proc/<pid>/stat`` (the command name in parentheses may hold spaces and parens)."""
    try:
        return int(text[text.rindex(")") + 2:].split()[1])
    except (ValueError, IndexError):
        return None


def descendants(main_pid: int, parents: Mapping[int, int]) -> set[int]:
    """main_pid and every process below it, from a pid -> parent pid map."""
    if main_pid <= 0:
        return set()
    children: dict[int, list[int]] = {}
    for pid, parent in parents.items():
        children.setdefault(parent, []).append(pid)
    found, todo = set(), [main_pid]
    while todo:
        pid = todo.pop()
        if pid not in found:
            found.add(pid)
            todo.extend(children.get(pid, ()))
    return found


def _read_text(path: str) -> str | None:
    try:
        with open(path, "rb") as handle:
            return handle.read().decode("utf-8", "replace")
    except OSError:
        return None


def process_parents(proc_root: str = "/proc") -> dict[int, int]:
    """pid -> parent pid of every process visible in ``proc_root``."""
    parents = {}
    try:
        entries = os.listdir(proc_root)
    except OSError:
        return parents
    for entry in entries:
        if entry.isdigit():
            ppid = parse_proc_stat_ppid(_read_text(os.path.join(proc_root, entry, "stat")) or "")
            if ppid is not None:
                parents[int(entry)] = ppid
    return parents


@dataclass
class PortHolder:
    pid: int
    name: str
    cmdline: str = ""
    unit: str | None = None

    def describe(self) -> str:
        what = self.cmdline or self.name
        return f"pid {self.pid} ({what}{f'; {self.unit}' if self.unit else ''})"


def describe_process(pid: int, name: str, proc_root: str = "/proc") -> PortHolder:
    """What ``/proc`` says about a process: its command line (cut to 200 characters) and unit."""
    raw = _read_text(os.path.join(proc_root, str(pid), "cmdline")) or ""
    cmdline = " ".join(part for part in raw.split("\0") if part)
    if len(cmdline) > 200:
        cmdline = cmdline[:197] + "..."
    cgroup = _read_text(os.path.join(proc_root, str(pid), "cgroup")) or ""
    return PortHolder(pid, name, cmdline, unit_of_cgroup(parse_proc_cgroup(cgroup)))


def foreign_holders(conflicts: Iterable[Listener], unit: str, own_pids: set[int],
                    describe: Callable[[int, str], PortHolder]) -> tuple[list[PortHolder], bool]:
    """Processes other than the service's own that hold the conflicting sockets.

    Returns (holders, anonymous): ``anonymous`` is True when a socket was listed without its process
    (``ss`` shows processes only to a user who may see them).
    """
    holders: dict[int, PortHolder] = {}
    anonymous = False
    for listener in conflicts:
        if not listener.processes:
            anonymous = True
        for name, pid in listener.processes:
            if pid in own_pids or pid in holders:
                continue
            holder = describe(pid, name)
            if holder.unit != unit:
                holders[pid] = holder
    return list(holders.values()), anonymous


def port_in_use_message(host: str, port: int, unit: str, holders: list[PortHolder]) -> str:
    where = f"{host}:{port}" if ":" not in host else f"[{host}]:{port}"
    who = ", ".join(holder.describe() for holder in holders) if holders else (
        "a process this user cannot see (`ss -ltnp` as root names it)")
    return (f"port: {where} is already in use by {who}, not by {unit}; the server could not bind it. "
            f"Stop that process or set `port` to a free port")


# --- SGLang's own parser ---------------------------------------------------------------------------

PARSE_CHECK_MARKER = "LLMOPS_SGLANG_PARSE_CHECK "
# Run as `python -c PARSE_CHECK_PROGRAM <argv...>` with the server's python: builds the parser SGLang's
# launch_server builds (ServerArgs.add_cli_args on a plain ArgumentParser) and parses argv, nothing
# else. argparse stops at the first error, so the offending option is dropped and the rest parsed
# again, to report every bad value at once.
PARSE_CHECK_PROGRAM = r'''
import argparse, json, sys
MARKER = "LLMOPS_SGLANG_PARSE_CHECK "
def emit(**result):
    sys.stdout.write("\n" + MARKER + json.dumps(result) + "\n")
    sys.stdout.flush()
try:
    from sglang.srt.server_args import ServerArgs
except BaseException as exc:
    emit(import_error="%s: %s" % (type(exc).__name__, exc))
    sys.exit(0)
class ParseError(Exception):
    pass
def error(message):
    raise ParseError(message)
argv = sys.argv[1:]
errors = []
for _ in range(50):
    parser = argparse.ArgumentParser(prog="python -m sglang.launch_server")
    ServerArgs.add_cli_args(parser)
    parser.error = error
    try:
        parser.parse_args(argv)
        break
    except ParseError as exc:
        message = str(exc)
    except SystemExit as exc:
        errors.append({"message": "argparse exited (%s) without an error message" % exc.code})
        break
    actions = {"/".join(a.option_strings): a for a in parser._actions if a.option_strings}
    action = None
    if message.startswith("argument "):
        action = actions.get(message[len("argument "):].split(": ", 1)[0])
    errors.append({"message": message, "option_strings": list(action.option_strings) if action else [],
                   "dest": action.dest if action else None})
    if action is None:
        break
    kept, skipping = [], False
    for token in argv:
        if token.split("=", 1)[0] in action.option_strings:
            skipping = "=" not in token
            continue
        if skipping and not token.startswith("--"):
            continue
        skipping = False
        kept.append(token)
    if kept == argv:
        break
    argv = kept
emit(errors=errors)
'''

_ARGPARSE_STDERR_RE = re.compile(r"^\S[^\n]*?: error: (?P<message>.+)$", re.MULTILINE)
_INVALID_VALUE_RE = re.compile(r"^invalid (\S+) value: ")


def parse_check_result(rc: int, out: str, err: str) -> dict:
    """The program's result: ``{"errors": [...]}`` or ``{"import_error": "..."}``, or ``{"failure": "..."}``
    when it printed no result (a crash: the last lines of stderr), or argparse's own exit-2 message."""
    for line in reversed(out.splitlines()):
        if line.startswith(PARSE_CHECK_MARKER):
            try:
                return json.loads(line[len(PARSE_CHECK_MARKER):])
            except ValueError:
                break
    argparse_error = _ARGPARSE_STDERR_RE.findall(err or "")
    if rc == 2 and argparse_error:
        return {"errors": [{"message": argparse_error[-1].strip(), "option_strings": [], "dest": None}]}
    tail = " ".join((err or out or "").strip().splitlines()[-5:])
    return {"failure": f"rc={rc}: {tail[-800:]}" if tail else f"rc={rc}, no output"}


def _error_field(error: Mapping, fields: Mapping[str, str]) -> str | None:
    options = set(error.get("option_strings") or ())
    if not options:
        match = re.match(r"argument (\S+): ", error.get("message") or "")
        options = set(match.group(1).split("/")) if match else set()
    for name, label in fields.items():
        if flag_name(name) in options or name == error.get("dest"):
            return label
    dest = error.get("dest") or (arg_name(sorted(options)[0]) if options else None)
    return fields.get(dest) if dest else None


def parser_error_messages(errors: Iterable[Mapping], fields: Mapping[str, str]) -> list[str]:
    """argparse errors in the user's words: ``server_args.tp_size: invalid int value 'four' (SGLang's parser)``.

    ``fields`` maps an argument name (``tp_size``, ``model_path``, ``port``) to how the user set it
    (``server_args.tp_size``, ``model_path``, ``port``).
    """
    messages = []
    for error in errors:
        message = error.get("message") or ""
        label = _error_field(error, fields)
        text = message.split(": ", 1)[1] if message.startswith("argument ") and ": " in message else message
        text = _INVALID_VALUE_RE.sub(r"invalid \1 value ", text)
        if label is None and error.get("option_strings"):
            label = error["option_strings"][0]
        messages.append(f"{label}: {text} (SGLang's parser)" if label else f"SGLang's parser: {text}")
    return messages


def parse_check_errors(result: Mapping, fields: Mapping[str, str], python: str) -> list[str]:
    """Errors of a parse check result (see :func:`parse_check_result`), each naming what to fix."""
    if "import_error" in result:
        return [f"python: {python} cannot import sglang.srt.server_args ({result['import_error']}), "
                f"which the check of server_args with SGLang's own parser needs; set `python` to the "
                f"interpreter of the SGLang installation (or validate_flags: false to skip the checks)"]
    if "failure" in result:
        return [f"python: checking the arguments with SGLang's parser ({python} -c ...) failed, "
                f"{result['failure']} (validate_flags: false skips the checks)"]
    return parser_error_messages(result.get("errors") or [], fields)


def argument_fields(server_args: Mapping[str, object]) -> dict[str, str]:
    """Argument name -> the user's field name, for the module's own options and ``server_args``."""
    fields = {name: f"server_args.{name}" for name in server_args}
    fields.update({name: name for name in ("model_path", "port", "host", "api_key")})
    return fields


# --- the model path --------------------------------------------------------------------------------

_HUB_ID_RE = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]*(?:/[A-Za-z0-9_][A-Za-z0-9_.-]*)?$")


@dataclass
class Identity:
    """Who the server runs as."""
    name: str
    uid: int
    gids: set[int]


def _may(st: os.stat_result, who: Identity, bits: int) -> bool:
    """Whether ``who`` has all of ``bits`` (4 read, 2 write, 1 search) on a file with this stat (mode bits only)."""
    if who.uid == 0:
        return True
    if st.st_uid == who.uid:
        granted = (st.st_mode >> 6) & 7
    elif st.st_gid in who.gids:
        granted = (st.st_mode >> 3) & 7
    else:
        granted = st.st_mode & 7
    return granted & bits == bits


def _has_acl(path: str) -> bool:
    try:
        return "system.posix_acl_access" in os.listxattr(path)
    except (OSError, AttributeError):
        return False


def looks_local(model_path: str) -> bool:
    """A file system path rather than a hub id (absolute, ``./``/``../``/``~`` relative)."""
    return model_path.startswith(("/", "./", "../", "~")) or model_path in (".", "..")


def unit_setting(unit_text: str | None, name: str) -> str | None:
    """The last value of ``Name=`` in a unit file (None when unset)."""
    found = None
    for line in (unit_text or "").splitlines():
        key, equals, value = line.strip().partition("=")
        if equals and key == name:
            found = value.strip()
    return found


def hidden_by_unit(path: str, unit_text: str | None) -> str | None:
    """The unit setting that hides ``path`` (a real path) from the server: ``ProtectHome=yes|tmpfs`` hides
    /home, /root and /run/user, ``PrivateTmp=yes`` gives it an empty /tmp and /var/tmp."""
    def under(*roots: str) -> bool:
        return any(path == root or path.startswith(root + "/") for root in roots)
    protect_home = (unit_setting(unit_text, "ProtectHome") or "no").lower()
    if protect_home in ("yes", "true", "1", "on", "tmpfs") and under("/home", "/root", "/run/user"):
        return f"ProtectHome={protect_home}"
    if (unit_setting(unit_text, "PrivateTmp") or "no").lower() in ("yes", "true", "1", "on") and under("/tmp", "/var/tmp"):
        return "PrivateTmp=yes"
    return None


def model_path_errors(model_path: str, working_directory: str = "/", who: Identity | None = None,
                      stat: Callable[[str], os.stat_result] = os.stat,
                      has_acl: Callable[[str], bool] = _has_acl, unit_text: str | None = None) -> list[str]:
    """Why the server could not load ``model_path`` (empty when it can, or when it is a hub id).

    A local path (absolute, ``./``-like, or existing relative to the service's working directory)
    must be a directory holding ``config.json`` (or a ``.gguf`` file), readable by ``who`` along the
    whole path (mode bits; a path with a POSIX ACL is given the benefit of the doubt) and not hidden
    by the unit's sandboxing (``unit_text``: ProtectHome=, PrivateTmp=). Anything else must look like
    a hub id (``org/name``).
    """
    path = os.path.join(working_directory or "/", os.path.expanduser(model_path))
    try:
        st = stat(path)
    except FileNotFoundError:
        st = None
    except OSError as exc:
        return [f"model_path: {model_path} cannot be read on the host: {exc.strerror or exc}"]
    if st is None:
        if looks_local(model_path) or not _HUB_ID_RE.match(model_path):
            where = "" if model_path.startswith("/") else f" (relative to working_directory {working_directory})"
            return [f"model_path: {model_path} does not exist on the host{where}"
                    + ("" if looks_local(model_path) else " and is not a hub id (org/name)")]
        return []  # a hub id: SGLang downloads it
    config = config_st = None
    if stat_module.S_ISREG(st.st_mode) and path.endswith(".gguf"):
        pass
    elif not stat_module.S_ISDIR(st.st_mode):
        return [f"model_path: {model_path} is not a directory (a model directory holds config.json)"]
    else:
        config = os.path.join(path, "config.json")
        try:
            config_st = stat(config)
        except OSError:
            return [f"model_path: {model_path} has no config.json; it is not a model directory "
                    f"(point it at the directory holding config.json and the weights)"]
    hidden = hidden_by_unit(os.path.realpath(path), unit_text)
    if hidden:
        return [f"model_path: {model_path} is hidden from the server by the unit's {hidden}; "
                f"put the model elsewhere (e.g. /srv/models)"]
    if who is None:
        return []
    denied = _denied(path, st, config, who, stat, has_acl)
    if denied:
        return [f"model_path: {model_path} is not readable by the server's user {who.name} ({denied})"]
    if config_st is not None and not _may(config_st, who, 4) and not has_acl(config):
        return [f"model_path: {model_path}/config.json is not readable by the server's user {who.name}"]
    return []


def _denied(path: str, st: os.stat_result, config: str | None, who: Identity,
            stat: Callable[[str], os.stat_result], has_acl: Callable[[str], bool]) -> str | None:
    """The first directory of the path ``who`` may not enter (or the model dir it may not list)."""
    real = os.path.realpath(path)
    parts = real.split("/")
    for depth in range(len(parts) - 1 if real != "/" else 0):
        parent = "/".join(parts[:depth + 1]) or "/"
        try:
            parent_st = stat(parent)
        except OSError:
            continue
        if not _may(parent_st, who, 1) and not has_acl(parent):
            return f"no search permission on {parent}"
    if config is not None and not _may(st, who, 5) and not has_acl(path):
        return f"no read+search permission on {path}"
    if config is None and not _may(st, who, 4) and not has_acl(path):
        return f"no read permission on {path}"
    return None


def server_identity(user: str, group: str | None) -> Identity | None:
    """uid and groups the unit's process gets (``User=``, ``Group=`` or the primary group, plus the
    user's supplementary groups); None when the user does not exist (yet) on the host."""
    import grp
    import pwd
    try:
        entry = pwd.getpwnam(user)
    except KeyError:
        return None
    gid = entry.pw_gid
    if group:
        try:
            gid = grp.getgrnam(group).gr_gid
        except KeyError:
            pass
    try:
        gids = set(os.getgrouplist(user, gid))
    except OSError:
        gids = set()
    return Identity(user, entry.pw_uid, gids | {gid})


# --- the checks, run on the host -------------------------------------------------------------------

Runner = Callable[[list], tuple]


def _resolve(host: str) -> list[str]:
    if host in ("", "0.0.0.0"):
        return ["0.0.0.0"]
    try:
        ipaddress.ip_address(host.strip("[]"))
        return [host.strip("[]")]
    except ValueError:
        pass
    import socket
    try:
        return sorted({info[4][0] for info in socket.getaddrinfo(host, None, type=socket.SOCK_STREAM)})
    except OSError:
        return [host]  # unresolvable: collides with everything (addresses_overlap)


def _bind_probe(host: str, port: int) -> bool:
    """Whether host:port can be bound now (fallback when ``ss`` is missing)."""
    import errno
    import socket
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((host, port))
        except OSError as exc:
            return exc.errno != errno.EADDRINUSE
    return True


def _which(program: str) -> str | None:
    return shutil.which(program, path=os.pathsep.join([os.environ.get("PATH", ""), "/usr/sbin", "/sbin", "/usr/bin"]))


def port_error(run: Runner, unit: str, host: str, port: int, main_pid: int, current_unit: str | None,
               proc_root: str = "/proc") -> str | None:
    """Why ``host:port`` cannot be bound by the new start of ``unit``: held by another process.

    Sockets of the service itself (processes in its cgroup or below its MainPID) do not count: a
    restart frees them.
    """
    ss = _which("ss")
    if ss is None:
        if _bind_probe(host if host else "0.0.0.0", port) or (main_pid and unit_listen_address(current_unit)[1] == port):
            return None
        return port_in_use_message(host, port, unit, [])
    rc, out, err = run([ss, "-ltnpH"])
    if rc != 0:
        return f"port: `ss -ltnpH` failed (rc={rc}): {err.strip()[-300:]}"
    conflicts = conflicting_listeners(parse_ss_listeners(out), _resolve(host), port)
    if not conflicts:
        return None
    own = descendants(main_pid, process_parents(proc_root))
    holders, anonymous = foreign_holders(conflicts, unit, own, lambda pid, name: describe_process(pid, name, proc_root))
    if holders:
        return port_in_use_message(host, port, unit, holders)
    if anonymous and not (main_pid and unit_listen_address(current_unit)[1] == port):
        return port_in_use_message(host, port, unit, [])
    return None


def unit_argv(unit_text: str | None, params: Mapping) -> list[str]:
    """The SGLang arguments the unit will run: from its ExecStart, else rebuilt from the module's options."""
    found = launch_server_args(exec_start_argv(unit_text))
    if found is not None:
        return found
    from ansible_collections.llmops.sglang.plugins.module_utils.server_args import to_cli_args
    return to_cli_args({"model_path": params.get("model_path"), "host": params.get("host", SGLANG_DEFAULT_HOST),
                        "port": params.get("port", SGLANG_DEFAULT_PORT), **dict(params.get("server_args") or {})})


def sglang_parser_errors(run_python: Runner, python: str, argv: list[str], fields: Mapping[str, str]) -> list[str]:
    """Errors of SGLang's own argparse parser on argv (run with the server's python; parse only)."""
    rc, out, err = run_python([python, "-c", PARSE_CHECK_PROGRAM, *argv])
    return parse_check_errors(parse_check_result(rc, out, err), fields, python)


def preflight_errors(run: Runner, params: Mapping, unit: str, main_pid: int, unit_text: str | None,
                     run_python: Runner | None = None, current_unit: str | None = None) -> list[str]:
    """Everything that would make the new start fail and can be known before changing anything:
    the model path, SGLang's own parser on the argv of the new unit ``unit_text`` (with ``validate_flags``), the
    port."""
    errors = model_path_errors(params["model_path"], params.get("working_directory") or "/",
                               server_identity(params.get("user") or "root", params.get("group")),
                               unit_text=unit_text)
    if params.get("validate_flags", True):
        try:
            argv = unit_argv(unit_text, params)
        except ValueError as exc:
            errors.append(f"unit: the ExecStart= of the rendered unit cannot be read as systemd reads it: {exc}; "
                          f"systemd would refuse the unit (check unit_template)")
        else:
            errors += sglang_parser_errors(run_python or run, params["python"], argv,
                                           argument_fields(params.get("server_args") or {}))
    port = port_error(run, unit, params.get("host", SGLANG_DEFAULT_HOST), params["port"], main_pid, current_unit)
    if port:
        errors.append(port)
    return errors


def verify_unit(run: Runner, unit: str, unit_text: str, unit_path: str, workdir: str) -> dict:
    """``systemd-analyze verify`` of the unit a deploy would install, from a temporary file of the unit's name in
    ``workdir`` (systemd names a unit after its file): ``{verified, skipped, rc, messages}``, the messages about this
    unit (those about its dependencies left out) naming ``unit_path``. ``skipped`` says why it did not run."""
    analyze = _which("systemd-analyze")
    if analyze is None:
        return {"verified": False, "skipped": "systemd-analyze is not installed on the host", "messages": []}
    directory = tempfile.mkdtemp(dir=workdir)
    path = os.path.join(directory, unit)
    try:
        with open(path, "w", encoding="utf-8") as handle:
            handle.write(unit_text)
        rc, out, err = run([analyze, "verify", path])
    finally:
        shutil.rmtree(directory)
    lines = [line.strip().replace(path, unit_path) for line in f"{err}\n{out}".splitlines() if line.strip()]
    own = [line for line in lines if unit in line]
    return {"verified": rc == 0, "skipped": None, "rc": rc, "messages": own or lines}
