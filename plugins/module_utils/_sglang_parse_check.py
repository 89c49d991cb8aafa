# Copyright (c) llmops.sglang contributors
# Apache License 2.0 (see LICENSE)
"""Whether the installed SGLang's own argparse parser accepts the argv a unit will run (parse only, nothing
starts): the program run with the server's python, its result read, its errors named by the user's field names.

Private to the llmops.sglang collection. Pure functions; runs on the managed host with the server module
(server_preflight).
"""
from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping

from ansible_collections.llmops.sglang.plugins.module_utils.server_args import arg_name, flag_name

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
