# Copyright (c) llmops.sglang contributors
# Apache License 2.0 (see LICENSE)
"""A real SGLang release's startup-log format strings, read from its own source, and log lines written from them.

``templates(src_dir, anchor)`` finds every ``logger.<level>(...)`` / ``log_info_on_rank0(logger, ...)`` call
in the release's ``sglang/srt`` whose message starts with (or, for ``{cache_name} ...``, holds) ``anchor``,
and returns it as a ``Template``: the literal text and the message's placeholders in order, each with
its source expression and format spec, for f-strings, ``"..." "..."`` concatenations and ``%``-style
messages alike. ``Template.render(values)`` writes the line the release would print, taking each
placeholder's value from ``values`` by its expression's last name (``self.max_total_num_tokens`` ->
``max_total_num_tokens``), by the whole expression, or from a default by its format spec; a conditional
expression (``'VA upper bound' if self.post_capture_active else 'is allocated'``) takes ``values`` of its
condition's name (default: false). ``Template.regex()`` matches any line the template can print.
"""
from __future__ import annotations

import ast
import re
import warnings
from functools import lru_cache
from pathlib import Path
from typing import Any, NamedTuple

_LOG_METHODS = {"info", "warning", "warn", "error", "debug", "critical", "exception"}


class Placeholder(NamedTuple):
    expression: str
    spec: str  # format spec ("" or ".2f")
    conversion: int  # -1, ord("r"), ...
    node: Any  # the expression's AST (conditionals are chosen at render time)


class Template(NamedTuple):
    path: str  # file inside the wheel
    line: int
    pieces: tuple  # str literals and Placeholders, in order

    @property
    def text(self) -> str:
        return "".join(piece if isinstance(piece, str) else "{" + piece.expression + "}" for piece in self.pieces)

    def regex(self) -> re.Pattern[str]:
        return re.compile("".join(re.escape(piece) if isinstance(piece, str) else r".*?" for piece in self.pieces) + "$")

    def render(self, values: dict[str, Any]) -> str:
        return "".join(piece if isinstance(piece, str) else _render(piece, values) for piece in self.pieces)


def _last_name(expression: str) -> str:
    names = re.findall(r"[A-Za-z_]\w*", expression)
    return names[-1] if names else expression


def _value(node: ast.AST, expression: str, spec: str, values: dict[str, Any]) -> Any:
    if isinstance(node, ast.IfExp):
        condition = values.get(_last_name(ast.unparse(node.test)), False)
        chosen = node.body if condition else node.orelse
        return _value(chosen, ast.unparse(chosen), spec, values)
    if isinstance(node, ast.Constant):
        return node.value
    for key in (expression, _last_name(expression)):
        if key in values:
            return values[key]
    if "perf_counter" in expression:
        return values.get("elapsed", 1.0)
    if spec.endswith("f"):
        return 1.0
    if spec.endswith("d"):
        return 1
    return _last_name(expression)


def _render(piece: Placeholder, values: dict[str, Any]) -> str:
    value = _value(piece.node, piece.expression, piece.spec, values)
    if piece.conversion == ord("r"):
        value = repr(value)
    elif piece.conversion == ord("s"):
        value = str(value)
    return format(value, piece.spec)


def _pieces(node: ast.AST) -> list | None:
    """Literal text and placeholders of a message expression, or None when it is not a message."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return [node.value]
    if isinstance(node, ast.JoinedStr):
        pieces: list = []
        for value in node.values:
            if isinstance(value, ast.Constant):
                pieces.append(value.value)
            elif isinstance(value, ast.FormattedValue):
                spec = "".join(part.value for part in value.format_spec.values
                               if isinstance(part, ast.Constant)) if value.format_spec else ""
                pieces.append(Placeholder(ast.unparse(value.value), spec, value.conversion, value.value))
        return pieces
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        left, right = _pieces(node.left), _pieces(node.right)
        return None if left is None or right is None else left + right
    return None


def _percent_pieces(pieces: list, args: list[ast.AST]) -> list:
    """``"a %s b %.2f" , x, y`` as pieces (logging's lazy %-formatting)."""
    out: list = []
    arg_index = 0
    for piece in pieces:
        if not isinstance(piece, str):
            out.append(piece)
            continue
        position = 0
        for match in re.finditer(r"%(?:\((\w+)\))?([-#0 +]*\d*(?:\.\d+)?)([sdrif%])", piece):
            out.append(piece[position:match.start()])
            position = match.end()
            if match.group(3) == "%":
                out.append("%")
                continue
            node = args[arg_index] if arg_index < len(args) else ast.Constant("?")
            arg_index += 1
            kind = match.group(3)
            spec = match.group(2) + ("" if kind in "sr" else ("d" if kind in "di" else "f"))
            out.append(Placeholder(ast.unparse(node), spec if kind not in "sr" else "", ord("r") if kind == "r" else -1,
                                   node))
        out.append(piece[position:])
    return [piece for piece in out if piece != ""]


def _merge(pieces: list) -> tuple:
    merged: list = []
    for piece in pieces:
        if isinstance(piece, str) and merged and isinstance(merged[-1], str):
            merged[-1] += piece
        else:
            merged.append(piece)
    return tuple(merged)


def _message_arguments(call: ast.Call) -> tuple[ast.AST, list[ast.AST]] | None:
    func = call.func
    if isinstance(func, ast.Attribute) and func.attr in _LOG_METHODS and call.args:
        return call.args[0], list(call.args[1:])
    if isinstance(func, ast.Name) and func.id.startswith("log_info_on_rank0") and len(call.args) >= 2:
        return call.args[1], list(call.args[2:])
    return None


@lru_cache(maxsize=None)
def _file_templates(path: str) -> tuple[Template, ...]:
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # the release's own invalid escapes are not ours to report
            tree = ast.parse(Path(path).read_text(encoding="utf-8"))
    except (SyntaxError, UnicodeDecodeError):
        return ()
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        arguments = _message_arguments(node)
        if arguments is None:
            continue
        pieces = _pieces(arguments[0])
        if pieces is None:
            continue
        if arguments[1]:
            pieces = _percent_pieces(pieces, arguments[1])
        found.append(Template(path, node.lineno, _merge(pieces)))
    return tuple(found)


@lru_cache(maxsize=None)
def _srt_files(src_dir: str) -> tuple[tuple[str, str], ...]:
    """(path, source) of every module under sglang/srt, read once."""
    return tuple((str(path), path.read_text(encoding="utf-8", errors="replace"))
                 for path in sorted(Path(src_dir, "sglang", "srt").rglob("*.py")))


def templates(src_dir: str | Path, anchor: str, *, anywhere: bool = False) -> list[Template]:
    """Every log call of the release whose message starts with ``anchor`` (``anywhere``: holds it)."""
    src = str(src_dir)
    matches = []
    for path, text in _srt_files(src):
        if anchor.split("{", 1)[0].strip()[:24] not in text:
            continue
        for template in _file_templates(path):
            literal = "".join(piece if isinstance(piece, str) else "\0" for piece in template.pieces)
            if literal.startswith(anchor) or (anywhere and anchor in literal):
                matches.append(template._replace(path=str(Path(path).relative_to(src))))
    return matches


# A template led by a placeholder counts only with this much literal text around its placeholders: "{e}" or
# "{label}: {exc}" would match any line.
MIN_LEADING_PLACEHOLDER_LITERAL = 25


@lru_cache(maxsize=None)
def placeholder_led_templates(src_dir: str | Path) -> tuple[Template, ...]:
    """Every log call of the release whose message starts with a placeholder and has substantial literal text
    (0.5.17+ memory_pool.py ``f"{cache_name} {'VA upper bound' if ... else 'is allocated'}. dtype: ..."``, whose
    line starts with ``KV Cache``): they print lines no first word of theirs can find."""
    src, found = str(src_dir), []
    for path, text in _srt_files(src):
        if "logger" not in text and "log_info_on_rank0" not in text:
            continue
        for candidate in _file_templates(path):
            literal = sum(len(piece) for piece in candidate.pieces if isinstance(piece, str))
            if candidate.pieces and not isinstance(candidate.pieces[0], str) and literal >= MIN_LEADING_PLACEHOLDER_LITERAL:
                found.append(candidate._replace(path=str(Path(path).relative_to(src))))
    return tuple(found)


def template(src_dir: str | Path, anchor: str, *, anywhere: bool = False, where: str | None = None) -> Template:
    """The one template for ``anchor`` (``where``: a part of the file path when several files log it)."""
    found = [found for found in templates(src_dir, anchor, anywhere=anywhere) if where is None or where in found.path]
    if not found:
        raise LookupError(f"no log call starting with {anchor!r} in {src_dir}")
    return found[0]
