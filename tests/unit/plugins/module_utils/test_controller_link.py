"""The kernel's view of a module's SSH connection: whether the controller acknowledges it (issue #36 item 11)."""
from __future__ import annotations

import os
import socket
import threading

from ansible_collections.llmops.sglang.plugins.module_utils.controller_link import (
    HEARTBEAT, controller_silent, retransmits, send_heartbeat, session_connection, ssh_endpoints)
from tests.unit.tcp_tables import ACKNOWLEDGED, LISTENER, MAPPED, PARTITIONED, SANDBOX, SSH_CONNECTION, write_table


def test_ssh_connection_names_this_hosts_end_first():
    assert ssh_endpoints(SSH_CONNECTION) == SANDBOX
    assert ssh_endpoints("fe80::1%eth0 50000 ::ffff:10.0.0.5 2222") == (("10.0.0.5", 2222), ("fe80::1", 50000))
    assert ssh_endpoints("10.213.0.1 40000 10.213.0.11") is None
    assert ssh_endpoints("10.213.0.1 x 10.213.0.11 22") is None


def _process(proc, pid, parent, environ):
    (proc / pid).mkdir()
    (proc / pid / "environ").write_bytes(b"\0".join(f"{k}={v}".encode() for k, v in environ.items()) + b"\0")
    (proc / pid / "status").write_text(f"Name:\tx\nPid:\t{pid}\nPPid:\t{parent}\n", encoding="utf-8")


def test_the_session_is_found_in_the_nearest_ancestor_that_sshd_started(tmp_path):
    """sudo (become) drops SSH_CONNECTION from the module's environment; the shell sshd started has it."""
    _process(tmp_path, "self", "300", {"LLMOPS_GUARD_HOLDER": "R/flags"})  # the module, under sudo
    _process(tmp_path, "300", "200", {"SUDO_USER": "ops"})  # sudo
    _process(tmp_path, "200", "100", {"SSH_CONNECTION": SSH_CONNECTION})  # sh -c, from sshd
    _process(tmp_path, "100", "1", {"SSH_CONNECTION": "192.0.2.9 1 192.0.2.8 22"})  # never reached
    assert session_connection(proc=str(tmp_path)) == SANDBOX


def test_no_session_outside_sshd_or_behind_an_unreadable_ancestor(tmp_path):
    _process(tmp_path, "self", "50", {})
    _process(tmp_path, "50", "1", {})
    _process(tmp_path, "1", "0", {})
    assert session_connection(proc=str(tmp_path)) is None  # up to PID 1 and no further
    (tmp_path / "50" / "environ").unlink()
    assert session_connection(proc=str(tmp_path)) is None


def test_the_kernels_table_tells_acknowledged_from_silent(tmp_path):
    acknowledged = write_table(tmp_path / "tcp", LISTENER, ACKNOWLEDGED)
    partitioned = write_table(tmp_path / "tcp-partitioned", LISTENER, PARTITIONED)
    mapped = write_table(tmp_path / "tcp6", MAPPED)
    assert retransmits(*SANDBOX, tables=(acknowledged,)) == 0
    assert retransmits(*SANDBOX, tables=(partitioned,)) == 3
    assert retransmits(*SANDBOX, tables=(str(tmp_path / "absent"), mapped)) == 2
    assert controller_silent(SANDBOX, (acknowledged,)) is False
    assert controller_silent(SANDBOX, (partitioned,)) is True
    assert controller_silent((SANDBOX[0], ("10.213.0.1", 40001)), (partitioned,)) is None  # another connection
    assert controller_silent(None, (partitioned,)) is None


def test_a_real_connection_is_found_in_this_kernels_tables():
    """The spelling of addresses and ports (byte order) as this machine's kernel prints them."""
    with socket.create_server(("127.0.0.1", 0)) as server:
        with socket.create_connection(server.getsockname()):
            accepted, _ = server.accept()
            with accepted:
                local, remote = accepted.getsockname(), accepted.getpeername()
                assert retransmits(local, remote) == 0
                assert controller_silent((local, remote)) is False
                assert retransmits(local, (remote[0], remote[1] + 1)) is None


def test_a_heartbeat_is_one_blank_line_and_never_blocks_or_raises():
    read_end, write_end = os.pipe()
    with os.fdopen(read_end, "rb", buffering=0) as reader, os.fdopen(write_end, "wb", buffering=0) as writer:
        send_heartbeat(writer.fileno())
        assert reader.read(10) == HEARTBEAT
        os.set_blocking(writer.fileno(), False)
        while writer.write(b"x" * 4096) is not None:  # None: the pipe is full (a non-blocking raw write)
            pass
        os.set_blocking(writer.fileno(), True)  # as sshd's pipe is
        sender = threading.Thread(target=send_heartbeat, args=(writer.fileno(),), daemon=True)
        sender.start()
        sender.join(timeout=5)
        assert not sender.is_alive(), "a full pipe must not block the renewal thread"
        reader.close()
        send_heartbeat(writer.fileno())  # EPIPE: the hang-up is seen on stdout
