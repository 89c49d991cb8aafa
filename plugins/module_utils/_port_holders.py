# Copyright (c) llmops.sglang contributors
# Apache License 2.0 (see LICENSE)
"""Who holds a TCP port: ``ss -ltnpH`` listeners, each process described by ``/proc`` (command line, the systemd
unit of its cgroup); processes of the service itself (its cgroup or its MainPID's process tree) do not count.

Private to the llmops.sglang collection. Pure functions over the text ``ss`` and ``/proc`` print, plus thin readers
of ``/proc``; runs on the managed host with the server module (server_preflight).
"""
from __future__ import annotations

import ipaddress
import os
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

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
