# Copyright (c) llmops.sglang contributors
# Apache License 2.0 (see LICENSE)
"""Starts a Python module (``sglang.launch_server``) with the API key added in-process, out of argv and logs.

Installed on the host by llmops.sglang.server (``launcher_path``, root-owned, mode 0755) and run by the unit as
``<venv python> <launcher> sglang.launch_server <server args without the key>``. The file is standalone: it
uses the standard library only and nothing else of the collection.

Why: SGLang takes the key only as ``--api-key`` (``ServerArgs.api_key``; no environment variable in 0.5.11 nor
0.5.23, ``sglang/srt/server_args.py``), and its main process logs every server arg, the key included:
``logger.info(f"{server_args=}")`` (0.5.11, ``sglang/srt/entrypoints/engine.py``, ``_launch_subprocesses``),
``logger.info(f"server_args={_server_args_for_logging(server_args)}")`` from 0.5.20 (0.5.23, same file; it
redacts watermark secrets only). So the launcher

1. reads the key from the systemd credential ``sglang-api-key`` (``LoadCredential=``: a root-only file on
   disk, copied by systemd into a directory only the service can read; the key is never in an environment
   block) or, for hand-written units, pops ``SGLANG_API_KEY`` from the environment so no child inherits it;
2. appends ``--api-key <key>`` to ``sys.argv`` inside this process: ``/proc/<pid>/cmdline`` keeps the argv
   the kernel saw at exec, without the key. SGLang's scheduler children are started by multiprocessing's
   spawn (argv ``python -c 'from multiprocessing.spawn import spawn_main; ...' --multiprocessing-fork``),
   which passes ``sys.argv`` and the pickled ServerArgs through a pipe, not on a command line;
3. wraps ``sys.stdout`` and ``sys.stderr`` so every occurrence of the key (and of its repr/JSON escapings)
   is written as ``***`` — before SGLang configures logging, whose handlers then write to the wrappers;
4. runs the module as ``python -m`` would (``runpy.run_module(..., run_name="__main__", alter_sys=True)``,
   ``sys.path[0]`` = the working directory), so multiprocessing's spawn children import it as ``__mp_main__``
   exactly as with ``-m``.
"""
from __future__ import annotations

import json
import os
import runpy
import sys

CREDENTIAL = "sglang-api-key"
ENV_KEY = "SGLANG_API_KEY"
MASK = "***"


def parse_key(text: str) -> str | None:
    """The key of a credential/env file: the value of its ``SGLANG_API_KEY=`` line, else its only line."""
    lines = [line for line in text.splitlines() if line.strip()]
    for line in lines:
        name, sep, value = line.partition("=")
        if sep and name.strip() == ENV_KEY:
            return value.strip() or None
    return lines[0].strip() if len(lines) == 1 and "=" not in lines[0] else None


def take_key(environ) -> str | None:
    """The API key for this start; removes ``SGLANG_API_KEY`` from ``environ`` (children must not inherit it)."""
    from_env = environ.pop(ENV_KEY, None)
    directory = environ.get("CREDENTIALS_DIRECTORY")
    if directory:
        try:
            with open(os.path.join(directory, CREDENTIAL), encoding="utf-8") as handle:
                key = parse_key(handle.read())
            if key:
                return key
        except FileNotFoundError:
            pass
    return from_env or None


def secret_forms(secret: str) -> list[str]:
    """The key as it can appear in a log line: verbatim, inside a repr and inside JSON; longest first."""
    forms = {secret, repr(secret)[1:-1], json.dumps(secret)[1:-1], json.dumps(secret, ensure_ascii=False)[1:-1]}
    return sorted((f for f in forms if f), key=len, reverse=True)


def redact(text: str, forms: list[str]) -> str:
    for form in forms:
        text = text.replace(form, MASK)
    return text


class _RedactingBinary:
    """``sys.stdout.buffer`` of a redacting stream: bytes written through it are redacted too."""

    def __init__(self, raw, forms: list[str], encoding: str) -> None:
        self._raw = raw
        self._forms = [f.encode(encoding, "backslashreplace") for f in forms]

    def write(self, data) -> int:
        out = bytes(data)
        for form in self._forms:
            out = out.replace(form, MASK.encode())
        self._raw.write(out)
        return len(data)

    def __getattr__(self, name):
        return getattr(self._raw, name)


class RedactingStream:
    """A text stream that writes ``***`` wherever the secret would be; everything else goes to ``stream``.

    A log record is written by one ``write`` call (``logging.StreamHandler.emit``), so a key inside one
    record is always caught; a key split by the writer over two ``write`` calls is not (nothing does that).
    """

    def __init__(self, stream, secret: str) -> None:
        self._stream = stream
        self._forms = secret_forms(secret)

    def write(self, text: str) -> int:
        self._stream.write(redact(text, self._forms))
        return len(text)

    def writelines(self, lines) -> None:
        for line in lines:
            self.write(line)

    @property
    def buffer(self):
        return _RedactingBinary(self._stream.buffer, self._forms, getattr(self._stream, "encoding", None) or "utf-8")

    def __getattr__(self, name):
        return getattr(self._stream, name)


def main(argv: list[str] | None = None, environ=None) -> None:
    argv = list(sys.argv if argv is None else argv)
    environ = os.environ if environ is None else environ
    if len(argv) < 2 or argv[1].startswith("-"):
        raise SystemExit(f"usage: {argv[0]} MODULE [ARGS...]  (e.g. sglang.launch_server --model-path ...)")
    module, args = argv[1], argv[2:]
    if any(a == "--api-key" or a.startswith("--api-key=") for a in args):
        raise SystemExit(f"{argv[0]}: --api-key on the command line is readable by every local user; "
                         f"pass the key as the {CREDENTIAL} credential (or {ENV_KEY}) instead")
    key = take_key(environ)
    if key:
        sys.stdout = RedactingStream(sys.stdout, key)
        sys.stderr = RedactingStream(sys.stderr, key)
        args = [*args, "--api-key", key]
    sys.argv = [argv[0], *args]  # runpy replaces argv[0] by the module's file, as -m does
    sys.path[0] = os.getcwd()  # -m semantics: the working directory, not the launcher's directory
    runpy.run_module(module, run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main()
