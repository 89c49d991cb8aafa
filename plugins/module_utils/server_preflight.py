# Copyright (c) llmops.sglang contributors
# Apache License 2.0 (see LICENSE)
"""Checks llmops.sglang.server runs on the host before it changes anything: the model path, SGLang's own parser on
the argv of the new unit, the port, and ``systemd-analyze verify`` of the unit.

Private to the llmops.sglang collection. Commands run through a ``run(argv) -> (rc, out, err)`` callable; what each
check reads is parsed by its own module: _unit_file (the unit's ExecStart and address), _port_holders (who holds a
port), _sglang_parse_check (SGLang's own parser), _model_path (the model path).
"""
from __future__ import annotations

import ipaddress
import os
import shutil
import tempfile
from collections.abc import Callable, Mapping

from ansible_collections.llmops.sglang.plugins.module_utils._model_path import model_path_errors, server_identity
from ansible_collections.llmops.sglang.plugins.module_utils._port_holders import (
    conflicting_listeners, describe_process, descendants, foreign_holders, parse_ss_listeners, port_in_use_message,
    process_parents)
from ansible_collections.llmops.sglang.plugins.module_utils._sglang_parse_check import (
    PARSE_CHECK_PROGRAM, argument_fields, parse_check_errors, parse_check_result)
from ansible_collections.llmops.sglang.plugins.module_utils._unit_file import (
    SGLANG_DEFAULT_HOST, SGLANG_DEFAULT_PORT, exec_start_argv, launch_server_args, unit_listen_address)

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
