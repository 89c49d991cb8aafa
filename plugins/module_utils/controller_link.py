# Copyright (c) llmops.sglang contributors
# Apache License 2.0 (see LICENSE)
"""What this host's kernel knows of the controller behind a module's SSH connection (llmops.sglang.server_guard).

Private to the llmops.sglang collection. A module sees its controller go through the pipes of its SSH channel, which
report a hang-up once sshd closes them: at once after a Ctrl-C or a crash (the controller's TCP stack sends a FIN or
an RST), but after a silent network partition (a switch, a firewall or a route dropping packets, a frozen VM: nothing
ever arrives) sshd learns nothing until TCP keepalive (two hours by default) or its ClientAlive settings, neither of
which the collection sets. So a module that renews a guard lease sends a heartbeat down its SSH channel every renewal
period and, before each renewal, asks the kernel whether the controller's machine acknowledged it: while the SSH
connection's socket is retransmitting (an acknowledgment resets the kernel's count), the controller is silent.

The heartbeat is a blank line on stderr: ansible parses only stdout, as JSON (a line written there by a thread could
land inside the result being printed), and shows a module's stderr only when the module failed.
"""
from __future__ import annotations

import ipaddress
import os
import select
import sys

SSH_CONNECTION_VAR = "SSH_CONNECTION"
HEARTBEAT = b"\n"
# One table per address family, both in this process's network namespace (which is sshd's).
TCP_TABLES = ("/proc/net/tcp", "/proc/net/tcp6")
ESTABLISHED = "01"

Endpoint = tuple[str, int]
Connection = tuple[Endpoint, Endpoint]  # (this host's end, the controller's end)


def ssh_endpoints(value: str) -> Connection | None:
    """(this host's end, the controller's end) of an ``SSH_CONNECTION`` value (``client port server port``); None when
    it is not one."""
    fields = value.split()
    if len(fields) != 4:
        return None
    try:
        return (_address(fields[2]), int(fields[3])), (_address(fields[0]), int(fields[1]))
    except ValueError:
        return None


def _address(text: str) -> str:
    """An address as one spelling: no zone (``fe80::1%eth0``), an IPv4-mapped IPv6 address as its IPv4 address."""
    address = ipaddress.ip_address(text.split("%")[0])
    return str(getattr(address, "ipv4_mapped", None) or address)


def session_connection(pid: str = "self", proc: str = "/proc") -> Connection | None:
    """The SSH connection this process runs under: ``SSH_CONNECTION``, which sshd sets for the session, from the
    environment of ``pid`` or of its nearest ancestor that has it (sudo, as become, drops it from the module's own).
    None outside an SSH session, or where an ancestor's environment cannot be read (another user's, without root)."""
    prefix = f"{SSH_CONNECTION_VAR}=".encode()
    while pid != "0":  # the parent of PID 1, and of a process whose parent is outside its PID namespace
        try:
            with open(f"{proc}/{pid}/environ", "rb") as handle:
                value = next((entry[len(prefix):] for entry in handle.read().split(b"\0") if entry.startswith(prefix)),
                             None)
            if value is not None:
                return ssh_endpoints(value.decode("ascii", "replace"))
            with open(f"{proc}/{pid}/status", encoding="utf-8") as handle:
                pid = next(line.split()[1] for line in handle if line.startswith("PPid:"))
        except (OSError, StopIteration):
            return None
    return None


def _proc_spellings(endpoint: Endpoint) -> set[str]:
    """How /proc/net/tcp{,6} print ``endpoint``: the address in upper-case hex, each 32-bit word in host byte order,
    then the port; an IPv4 address also as IPv4-mapped IPv6 (a socket of an sshd that listens on ``::``)."""
    address, port = endpoint
    parsed = ipaddress.ip_address(address)
    forms = [parsed.packed] + ([ipaddress.IPv6Address(f"::ffff:{parsed}").packed] if parsed.version == 4 else [])
    return {f"{_in_host_order(raw).hex().upper()}:{port:04X}" for raw in forms}


def _in_host_order(raw: bytes) -> bytes:
    if sys.byteorder == "big":
        return raw
    return b"".join(raw[i:i + 4][::-1] for i in range(0, len(raw), 4))


def retransmits(local: Endpoint, remote: Endpoint, tables: tuple[str, ...] = TCP_TABLES) -> int | None:
    """How many retransmission timeouts fired on the established TCP connection from ``local`` to ``remote`` since
    the peer last acknowledged new data (the kernel resets the count then); None when no such connection is in the
    tables."""
    local_spellings, remote_spellings = _proc_spellings(local), _proc_spellings(remote)
    for table in tables:
        try:
            with open(table, encoding="ascii") as handle:
                for line in handle:
                    fields = line.split()
                    if (fields[3] == ESTABLISHED and fields[1] in local_spellings
                            and fields[2] in remote_spellings):
                        return int(fields[6], 16)
        except OSError:
            continue
    return None


def controller_silent(connection: Connection | None, tables: tuple[str, ...] = TCP_TABLES) -> bool | None:
    """Whether the controller's machine stopped acknowledging what this host sends it over ``connection``: True while
    the kernel retransmits on it (what was sent waited longer than a retransmission timeout, a few hundred ms on a
    LAN, seconds at most across the world), False when it acknowledged everything the last timeout covered, None
    when there is no such connection to ask (not under sshd, or sshd's connection already closed)."""
    count = retransmits(*connection, tables=tables) if connection else None
    return None if count is None else count > 0


def send_heartbeat(fd: int = 2) -> None:
    """One blank line down the SSH channel behind ``fd``: something the controller's machine must acknowledge. Skipped
    when the pipe is full rather than blocking the renewal thread; never raising (a closed channel is seen on
    stdout)."""
    try:
        poller = select.poll()
        poller.register(fd, select.POLLOUT)
        if any(events & select.POLLOUT for _fd, events in poller.poll(0)):
            os.write(fd, HEARTBEAT)
    except OSError:
        pass
