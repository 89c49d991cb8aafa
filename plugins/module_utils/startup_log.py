# Copyright (c) llmops.sglang contributors
# Apache License 2.0 (see LICENSE)
"""Parse an SGLang server startup log into structured facts.

This module util is private to the llmops.sglang collection; do not use it from other collections.

Pure and stdlib-only: it runs on the managed hosts (module side) and on the controller (filters).
The formats it reads are SGLang's own log lines as of mid-2025 .. 2026, releases 0.5.10 .. 0.5.23 (prefix
``[YYYY-MM-DD HH:MM:SS(.mmm)( DP0 TP0 ...)] message``, sglang/srt/utils/common.py::configure_logger,
the same in every release), optionally wrapped in journald (short, short-precise, short-iso), docker,
docker compose / container-name, torchrun (``[rank0]:``), per-GPU launcher (``[GPU 0]``, mpirun's
``[1,0]<stdout>:``, srun's ``0: ``), Ray (``(pid=N)``) or Python-logging (``INFO:name:``,
``asctime - name - LEVEL - ``, xinference's two formats) prefixes, a relaying tool's prefix on every line
(traceback and dump lines too), with a time-only SGLang prefix, HTML-escaped or ``<br>``-separated (copied
from a web UI), with shell prompts pasted between outputs, with tqdm progress bars (``\\r``) mixed in, and
with the server_args dump split over several lines (journald's LineMax, terminal wrapping). The dump is
``server_args=ServerArgs(...)`` (the dataclass repr, 0.5.10 .. 0.5.17, sglang/srt/entrypoints/engine.py
``logger.info(f"{server_args=}")``) or ``server_args={...}`` (a dict, 0.5.20 ``server_args.resolved_dict()``, 0.5.23
``_server_args_for_logging``). Every fact is taken from what the server printed; a value that may
have been cut off by a truncated log is not reported. The text is expected to hold one server start
(e.g. one systemd invocation).
"""
from __future__ import annotations

import ast
import datetime
import html
import re
import warnings
from typing import Any, Iterator, NamedTuple

# --- line prefixes -------------------------------------------------------------------------------

# Outer prefixes added by the log transport, outermost first: docker compose service column,
# docker timestamps (`docker logs -t`), journald short / short-iso / short-iso-precise.
_ISO_TS = r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?(?:Z|[+-]\d\d:?\d\d)"
_LEVELS = r"(?:DEBUG|INFO|WARNING|WARN|ERROR|CRITICAL)"
_OUTER_PREFIX_RE = re.compile(
    r"(?:[A-Za-z0-9][\w.-]* +\| ?)?"
    r"(?:(?P<journal_ts>[A-Z][a-z]{2} [ \d]\d \d\d:\d\d:\d\d(?:\.\d+)?|" + _ISO_TS + r") \S+ [^\s\[\]:]+(?:\[\d+\])?: "
    r"|(?P<docker_ts>" + _ISO_TS + r") (?!" + _LEVELS + r" ))?"
    # Tools that relay the server's output, one prefix each, nested in any order:
    r"(?:"
    # torchrun / torch.distributed elastic: `[rank0]: ` or `[default0]:`
    r"\[(?:rank|default)\d+\]: ?"
    # per-GPU launchers: `[GPU 0] `, `[GPU0]: `; mpirun --tag-output: `[1,0]<stdout>:`
    r"|\[GPU ?\d+\]:? |\[\d+,\d+\]<std(?:out|err)>:"
    # Ray's worker/actor output: `(pid=4242) `, `(SGLangActor pid=4242, ip=10.0.0.2) `
    r"|\((?:[\w.:-]+ )?pid=\d+(?:, ip=[\w.:-]+)?\) "
    # Python logging set up by a wrapper: basicConfig's `INFO:sglang.srt.x:`,
    # `2026-11-30 10:00:01,123 - sglang.srt.x - INFO - `, xinference's `%(asctime)s %(name)-12s %(process)d
    # %(levelname)-8s ` and its TextFileFormatter (xinference/deploy/utils.py, 2026) `<ISO ts> INFO xinference.stdout
    # pid:1 role:worker address:host:port node:host `
    r"|(?P<py_level>" + _LEVELS + r"):[\w.]+:"
    r"|(?P<py_ts>\d{4}-\d\d-\d\d \d\d:\d\d:\d\d(?:,\d{3})?)"
    r"(?: - [\w.]+ - (?P<py_level2>" + _LEVELS + r") - | [\w.]+ +\d+ (?P<py_level3>" + _LEVELS + r")"
    # `%(levelname)-8s `: the level padded to 8 characters, then one space (a traceback's indent stays)
    r"(?:(?<=DEBUG) {4}|(?<=INFO) {5}|(?<=WARNING) {2}|(?<=WARN) {5}|(?<=ERROR) {4}|(?<=CRITICAL) ))"
    r"|(?P<xinference_ts>" + _ISO_TS + r") (?P<py_level4>" + _LEVELS + r") [\w.]+ "
    r"pid:\d+ role:\S* address:\S* node:\S* "
    r")*"
)
_PY_LEVEL_GROUPS = ("py_level", "py_level2", "py_level3", "py_level4")
_RANK_TAGS = r"(?: (?:DP|PP|ATTN_CP|MOE_DP|TP|EP)\d+)*"
# SGLang's own prefix (utils/common.py::configure_logger); `.mmm` only with SGLANG_LOG_MS; a date-less
# `[HH:MM:SS TP0]` when a logging config (SGLANG_LOGGING_CONFIG_PATH) sets datefmt to the time only.
_SGLANG_PREFIX_RE = re.compile(
    r"\[(?P<ts>(?:\d{4}-\d\d-\d\d )?\d\d:\d\d:\d\d(?:[.,]\d{3})?)(?P<ranks>" + _RANK_TAGS + r")\] ?"
)
_LINE_PREFIX_RE = re.compile(_OUTER_PREFIX_RE.pattern + "(?:" + _SGLANG_PREFIX_RE.pattern + ")?")
# The same prefix in the middle of a line: a log line glued to a progress bar without a newline.
_GLUED_PREFIX_RE = re.compile(r"\[\d{4}-\d\d-\d\d \d\d:\d\d:\d\d(?:\.\d{3})?" + _RANK_TAGS + r"\] ")
_ANSI_ESCAPE_RE = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
# A log copied from a web page (Loki/Grafana, an issue's HTML): `&#39;`, `&quot;`, `&lt;`, ...
_HTML_ENTITY_RE = re.compile(r"&(?:#\d{1,7}|#x[0-9a-fA-F]{1,6}|quot|apos|amp|lt|gt|nbsp);")
# A log copied from a web page whose lines end in `<br>` instead of a newline.
_BR_RE = re.compile(r"<br\s*/?>", re.IGNORECASE)
_BR_LINE_END_RE = re.compile(r"<br\s*/?>\r?$", re.IGNORECASE | re.MULTILINE)
# A shell prompt pasted with the output (`user@host:~$ journalctl ...`, `(venv) root@gpu01:/srv# `,
# `[root@host dir]# `, `$ `): the line is the operator's command, not the server's.
_SHELL_PROMPT_RE = re.compile(
    r"(?:\([\w.-]+\) )?(?:[\w.-]+@[\w.-]+:\S*?[$#]|\[[\w.-]+@[\w.-]+ [^\]]*\][$#]|\$)(?: |$)")
_SRUN_LABEL_RE = re.compile(r" *\d{1,5}: ")
_PROMPT_SCAN = 80  # a prompt's `user@host` is near the start of its line
_RANK_RE = re.compile(r"([A-Z_]+)(\d+)")
_FRACTION_RE = re.compile(r"[.,](\d+)")


class _Record(NamedTuple):
    timestamp: str | None  # SGLang's own timestamp text (local time of the server)
    ranks: str  # e.g. "DP0 TP0 EP0"; "" for the main process or unprefixed lines
    message: str
    prefixed: bool  # carried SGLang's own `[...]` prefix (or a Python-logging wrapper's)
    complete: bool  # False for the last line of a text cut mid-line
    level: str | None = None  # level name a Python-logging wrapper printed


def _strip_outer(line: str) -> tuple[str | None, str]:
    """Remove transport prefixes; return (their timestamp text, rest of the line)."""
    if "\x1b" in line:
        line = _ANSI_ESCAPE_RE.sub("", line)
    if line.startswith("[") and _SGLANG_PREFIX_RE.match(line):
        return None, line  # SGLang's own prefix first: no transport prefix
    match = _OUTER_PREFIX_RE.match(line)
    timestamp = match.group("py_ts") or match.group("xinference_ts") or match.group("docker_ts")
    return timestamp or match.group("journal_ts"), line[match.end():]


def _strip_sglang(text: str) -> tuple[str | None, str, str]:
    """Remove SGLang's `[time ranks]` prefix; return (time text, ranks, message)."""
    match = _SGLANG_PREFIX_RE.match(text) if text.startswith("[") else None
    if match is None:
        return None, "", text
    return match.group("ts"), match.group("ranks").strip(), text[match.end():]


def _to_datetime(text: str | None) -> datetime.datetime | None:
    """Naive wall-clock datetime of a prefix timestamp; None when it has no year or is invalid.

    A time-only SGLang prefix (``10:00:01``) gives that time on 1900-01-01: good for durations
    within one day (a start that crosses midnight has no duration rather than a wrong one).
    """
    if not text:
        return None
    try:
        if text[2:3] == ":":  # time only
            text = "1900-01-01 " + text
        elif not text[:4].isdigit():  # journald short format ("Mar 09 ...") carries no year
            return None
        fraction = _FRACTION_RE.match(text, 19)
        microseconds = int(fraction.group(1)[:6].ljust(6, "0")) if fraction else 0
        return datetime.datetime(
            int(text[0:4]), int(text[5:7]), int(text[8:10]),
            int(text[11:13]), int(text[14:16]), int(text[17:19]), microseconds,
        )
    except ValueError:
        return None


def strip_prefix(line: str) -> tuple[datetime.datetime | None, dict[str, int] | None, str]:
    """Split one log line into (timestamp, ranks, message).

    Handles journald, docker, docker compose and SGLang prefixes in any supported combination.
    The timestamp is SGLang's own when present, else the transport's (journald short format has
    no year and gives None); it is a naive datetime of the wall-clock time as printed.
    Ranks is e.g. ``{"DP": 0, "TP": 0, "EP": 0}``, or None when the line has no rank tags.
    """
    outer_ts, rest = _strip_outer(line)
    sglang_ts, ranks, message = _strip_sglang(rest)
    parsed_ranks = {tag: int(number) for tag, number in _RANK_RE.findall(ranks)} or None
    return _to_datetime(sglang_ts or outer_ts), parsed_ranks, message.rstrip()


def _iter_records(text: str) -> Iterator[_Record]:
    if "<br" in text and _BR_LINE_END_RE.search(text):
        text = _BR_RE.sub("\n", text)  # a web page's lines: `<br>` where the log had a newline
    lines = text.split("\n")
    cut_mid_line = not text.endswith("\n")
    last_index = len(lines) - 1
    # Once a Python-logging wrapper's prefix is seen in front of SGLang's own, the wrapper relays the server's
    # output line by line (xinference, a supervisor): its prefix and level say nothing about where a log line
    # starts, SGLang's prefix does (traceback and dump lines carry the wrapper's prefix too).
    relay = False
    srun_labels = False  # `srun --label` puts the task number in front of every line: `0: [2026-...] ...`
    for index, line in enumerate(lines):
        complete = not (cut_mid_line and index == last_index)
        label = _SRUN_LABEL_RE.match(line) if line[:1].isdigit() else None
        if label is not None:
            srun_labels = srun_labels or _SGLANG_PREFIX_RE.match(line, label.end()) is not None
            if srun_labels:
                line = line[label.end():]
        if "&" in line and _HTML_ENTITY_RE.search(line):
            line = html.unescape(line).replace("\xa0", " ")
        if ("@" in line[:_PROMPT_SCAN] or line.startswith("$")) and _SHELL_PROMPT_RE.match(line):
            yield _Record(None, "", "", True, complete)  # a command typed between pasted outputs: ends any open line
            continue
        # Fast path for the usual line: one match for all prefixes, one piece.
        match = _LINE_PREFIX_RE.match(line)
        message = line[match.end():]
        if "\r" in line or "\x1b" in line or (message.find("[", 1) > 0 and _GLUED_PREFIX_RE.search(message, 1)):
            yield from _records_of_line(line, complete)
            continue
        message = message.rstrip()
        if message:
            level = next((match.group(group) for group in _PY_LEVEL_GROUPS if match.group(group)), None)
            relay = relay or (level is not None and match.group("ts") is not None)
            if relay:
                level = None
            timestamp = match.group("ts") or (None if relay else match.group("py_ts"))
            prefixed = match.group("ts") is not None or level is not None
            yield _Record(timestamp, (match.group("ranks") or "").strip(), message, prefixed, complete, level)


def _records_of_line(line: str, complete: bool) -> Iterator[_Record]:
    """Records of a line holding progress-bar updates, glued log lines or terminal escapes."""
    rest = _strip_outer(line)[1]
    pieces = [piece for segment in rest.split("\r") if segment for piece in _split_glued(segment)]
    for piece_index, piece in enumerate(pieces):
        timestamp, ranks, message = _strip_sglang(piece)
        message = message.rstrip()
        if message:
            piece_complete = complete or piece_index < len(pieces) - 1
            yield _Record(timestamp, ranks, message, timestamp is not None, piece_complete)


def _split_glued(segment: str) -> list[str]:
    if segment.find("[", 1) < 0:
        return [segment]
    starts = [match.start() for match in _GLUED_PREFIX_RE.finditer(segment, 1)]
    if not starts:
        return [segment]
    bounds = [0, *starts, len(segment)]
    return [segment[begin:end] for begin, end in zip(bounds, bounds[1:])]


# --- server_args=ServerArgs(...) / server_args={...} ---------------------------------------------------

_SERVER_ARGS_CALL = "server_args=ServerArgs("  # 0.5.10 .. 0.5.17: the dataclass repr
_SERVER_ARGS_DICT = "server_args={"  # 0.5.20+: resolved_dict() / _server_args_for_logging()
_SERVER_ARGS_START = (_SERVER_ARGS_CALL, _SERVER_ARGS_DICT)
# Tokens that matter for splitting a dataclass repr: complete string literals (repr never puts a raw
# newline in one), a quote that is never closed (cut-off line), brackets, commas.
_REPR_TOKEN_RE = re.compile(r"""'(?:[^'\\\n]|\\.)*'|"(?:[^"\\\n]|\\.)*"|['"]|[()\[\]{}<>,]""")
_KEYWORD_RE = re.compile(r"\s*([A-Za-z_]\w*)=(.*)", re.DOTALL)
_DICT_KEY_RE = re.compile(r"""\s*(['"])([A-Za-z_]\w*)\1\s*:\s*(.*)""", re.DOTALL)
# An enum member's repr inside a dump: `<Backend.DISABLED: 'disabled'>` stands for its value.
_ENUM_REPR_RE = re.compile(r"""<[A-Za-z_][\w.]*: ('(?:[^'\\]|\\.)*'|"(?:[^"\\]|\\.)*"|-?\d+(?:\.\d+)?|True|False|None)>""")
_OPENERS = "([{<"
_SECRET_SUFFIX = "api_key"
_REDACTED = "<redacted>"


def _split_call_arguments(body: str, closer: str = ")") -> tuple[list[str], bool]:
    """Split the inside of `Name(...)` (or of `{...}` with closer `}`) at top-level commas; return
    (arguments, call was closed).

    A scanner rather than `ast.parse` of the whole call: real reprs can hold `<Enum.X: 'x'>`
    values, which are not Python syntax, and a cut-off line has no closing parenthesis.
    """
    arguments: list[str] = []
    depth = 0
    start = 0
    for token in _REPR_TOKEN_RE.finditer(body):
        symbol = token.group()
        if symbol[0] in "'\"":
            if len(symbol) == 1:
                break  # unterminated string literal: the line was cut here
            continue
        if symbol in _OPENERS:
            depth += 1
        elif symbol == ",":
            if depth == 0:
                arguments.append(body[start:token.start()])
                start = token.end()
        elif depth > 0:
            depth -= 1
        elif symbol == closer:
            arguments.append(body[start:token.start()])
            return arguments, True
    return arguments, False


def _jsonable(value: Any) -> bool:
    if value is None or isinstance(value, (bool, int, float, str)):
        return True
    if isinstance(value, list):
        return all(_jsonable(item) for item in value)
    if isinstance(value, dict):
        return all(isinstance(key, str) and _jsonable(item) for key, item in value.items())
    return False


def _as_json_types(value: Any) -> Any:
    if isinstance(value, (tuple, list)):
        return [_as_json_types(item) for item in value]
    if isinstance(value, (set, frozenset)):
        return sorted((_as_json_types(item) for item in value), key=repr)
    if isinstance(value, dict):
        return {key: _as_json_types(item) for key, item in value.items()}
    return value


def _literal(source: str) -> Any:
    """The Python literal in `source`, or `source` itself when it is not a JSON-able literal.

    Enum members (`<Backend.DISABLED: 'disabled'>`, alone or inside a dict/list) count as their value.
    """
    text = _ENUM_REPR_RE.sub(r"\1", source) if "<" in source else source
    try:
        value = _as_json_types(ast.literal_eval(text))
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        return source
    return value if _jsonable(value) else source


def parse_server_args(body: str, form: str = "call") -> tuple[dict[str, Any], bool]:
    """Parse the text after `server_args=ServerArgs(` (form ``call``) or `server_args={` (form ``dict``);
    return (fields, complete).

    Values that are Python literals become their value, enum members their value; anything else
    (calls such as `device(type='cuda')`) stays as its source text. When the dump was cut,
    `complete` is False and the field being written at the cut is left out (only fields followed by
    a top-level comma count). Fields named like an API key are redacted.
    """
    arguments, complete = _split_call_arguments(body, "}" if form == "dict" else ")")
    key_re = _DICT_KEY_RE if form == "dict" else _KEYWORD_RE
    fields: dict[str, Any] = {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # invalid escapes in odd strings must not warn or raise
        for argument in arguments:
            match = key_re.match(argument)
            if match is None:
                continue
            name, source = match.group(match.lastindex - 1), match.group(match.lastindex).strip()
            value = _literal(source)
            fields[name] = _REDACTED if name.endswith(_SECRET_SUFFIX) and value is not None else value
    return fields, complete


# --- other startup lines ---------------------------------------------------------------------------

# "KV Cache is allocated. [dtype: X, ]#tokens: N, ..." (memory_pool.py; dtype from 0.5.14, a label such as
# "draft KV Cache" in front from 0.5.17); 0.5.17+ resize the pool after graph capture and say
# "Post-capture KV sizing: KV cache allocated. dtype: %s, #tokens: %d, ..." (kv_pool_runtime.py): that one is final.
_KV_CACHE_RE = re.compile(r"(?:KV Cache is allocated|Post-capture KV sizing: KV cache allocated)\."
                          r"(?: dtype: (?P<dtype>[^,\s]+),)? #tokens: (?P<tokens>\d{1,18}),")
_KV_CACHE_FINAL = "Post-capture KV sizing: KV cache allocated."
_LOAD_ELAPSED_RE = re.compile(r"Load weight end\. elapsed=(\d+(?:\.\d+)?) s")
# "Capture cuda graph end. Time elapsed: 12.3 s." (0.5.10/0.5.11 model_runner.py);
# "Capture target decode cuda graph end. elapsed=12.3 s, ..." (0.5.14), "... CUDA graph end. bs=[..], elapsed=..."
# (0.5.23 cuda_graph_setup.py); role target/draft, phase decode/verify/prefill.
_CAPTURE_ELAPSED_RE = re.compile(r"(?:Time elapsed: |elapsed=)(\d+(?:\.\d+)?) s")
_CAPTURE_END_RE = re.compile(r"Capture (?:(?P<role>target|draft) (?P<phase>decode|verify|prefill) )?"
                             r"(?P<what>cuda graph|CUDA graph|piecewise CUDA graph) end\.")
_PCG_DISABLED = "Disable piecewise CUDA graph because "  # 0.5.10 .. 0.5.11 model_runner.py
_PREFILL_GRAPH_DISABLED = "Disable prefill CUDA graph "  # 0.5.14+ ("because ...", "for EAGLE target ...")
# The attention backend SGLang chose ("not set" before 0.5.10; "not specified" 0.5.10+, server_args.py /
# 0.5.20+ arg_groups/overrides.py; "Falling back to 'x' for deterministic inference").
_ATTENTION_DEFAULT_RE = re.compile(
    r"Attention backend not (?:set|(?:explicitly )?specified)\. "
    r"(?:Use (\w+) backend by default|Falling back to '(\w+)' for deterministic inference)")
_READY_MARKER = "The server is fired up and ready to roll!"
_EMULATOR_MARKER = "EMULATOR:"
# First words of every line `_StartupFacts._feed_fact` reads: one cheap test skips all other lines.
_FACT_PREFIXES = (
    "max_total_num_tokens=", "KV Cache is allocated.", _KV_CACHE_FINAL, "Load weight ", "Memory pool end", "Capture ",
    "Attention backend not", _PCG_DISABLED, _PREFILL_GRAPH_DISABLED, _EMULATOR_MARKER,
)
_SCHEDULER_KEYS = (
    "max_total_num_tokens", "chunked_prefill_size", "max_prefill_tokens", "max_running_requests", "context_len",
)
_INTEGER_RE = re.compile(r"-?\d{1,18}")

_MOE_PATTERNS = (
    # (regex, kernel or None = from the file name, status)
    (re.compile(r"Using MoE kernel config from (?P<path>.+?\.json)(?:\.|$)"), None, "used"),
    (re.compile(
        r"Config file not found at (?P<path>.+?\.json)\. Fallback to triton version \S+ "
        r"and use MoE kernel config from (?P<fallback>.+?\.json)(?:\.|$)"
    ), None, "fallback"),
    # The kernel is the file's: 0.5.16+ print this for the down kernel too (`..._down.json`).
    (re.compile(
        r"Using default MoE kernel config\. Performance might be sub-optimal! "
        r"Config file not found at (?P<path>.+?\.json)(?:,|$)"
    ), None, "missing"),
    # 0.5.16+ fused_moe_triton_config.py (first seen in the 0.5.16 wheel; not in 0.5.15): no down file, the tuned up config is reused (without TMA).
    (re.compile(
        r"Down MoE config file not found at (?P<path>.+?\.json); reusing the tuned up-projection config"
    ), "down", "missing"),
    (re.compile(
        r"Using MoE kernel config with down_moe=False\. Performance might be sub-optimal! "
        r"Config file not found at (?P<path>.+?\.json)(?:,|$)"
    ), "down", "missing"),
)
_MOE_FILE_RE = re.compile(r"E=\d+,N=\d+,device_name=(?P<device>[^,]*?)(?:,.*)?(?:_down)?\.json")
# The GPU in a MoE config line whose path cannot be read whole (cut, re-wrapped): fused_moe_triton_config.py
# get_config_file_name writes device_name=get_device_name().replace(" ", "_") (0.5.23 line 44), so it has no space.
# A name cut short has neither after it, and is not read.
_MOE_DEVICE_RE = re.compile(r"/E=\d+,N=\d+,device_name=(?P<device>[^,/\s]+?)(?=[,.]|_down)")
_TRITON_DIR_RE = re.compile(r"/(triton_\d+(?:_\d+)*)/")

# Lower-case markers of lines worth reporting as warnings (SGLang's own lines carry no level name).
_WARNING_MARKERS = (
    "warning", "sub-optimal", "deprecat", "capacity is unbalanced", "is reset to", "does not match up config",
    "kv cache pool is full", "using default moe kernel config",
)

# Facts read from server_args (same name) unless a runtime line states them.
# Each release's own names (sglang_names.RENAMES): 0.5.10/0.5.11 disable_piecewise_cuda_graph and
# cuda_graph_max_bs, 0.5.14+ cuda_graph_backend_prefill/decode and cuda_graph_max_bs_decode/prefill.
_SERVER_ARGS_FACTS = (
    "model_path", "tp_size", "ep_size", "dp_size", "max_running_requests", "chunked_prefill_size",
    "max_prefill_tokens", "mem_fraction_static", "disable_cuda_graph", "disable_piecewise_cuda_graph",
    "cuda_graph_max_bs", "cuda_graph_backend_decode", "cuda_graph_backend_prefill", "cuda_graph_max_bs_decode",
    "cuda_graph_max_bs_prefill", "attention_backend", "moe_runner_backend", "speculative_algorithm",
    "speculative_draft_model_path", "speculative_num_steps", "speculative_eagle_topk", "speculative_num_draft_tokens",
)


def _is_warning(message: str) -> bool:
    lowered = message.lower()
    for marker in _WARNING_MARKERS:
        if marker in lowered:
            return True
    return False


def _key_values(message: str, complete: bool) -> dict[str, str]:
    """`a=1, b=2` pairs; the last pair of a cut-off line is dropped (its value may be partial)."""
    parts = message.split(", ")
    if not complete:
        parts.pop()
    pairs = [part.split("=", 1) for part in parts if "=" in part]
    return {key.strip(): value.strip() for key, value in pairs}


# --- errors ----------------------------------------------------------------------------------------

# Every line `_line_error_kind` classifies contains one of these (lower-case); others skip the checks.
_ERROR_HINTS = ("error", "memory", "exception", "failed", "supported", "sigquit", "already in use", "cuda",
                "nvidia", "gpu", "no such file", "not a valid", "shared object", "undefined symbol", "no module",
                "requires", "kernel image", "scheduler died")
# The taxonomy (docs/support-matrix.md, "Failures: error.kind", one real line per kind): each kind names what the
# operator must fix; a log's kind is its innermost cause, read from the exceptions themselves (their type, text and
# raise site), never from the code lines a traceback quotes. Ranked: when a log holds several causes, the lower one
# is the cause of the others (an OOM makes the scheduler raise and the parent print sigquit: the operator must fix
# the memory). The last two are generic: a traceback whose cause is none of the above (`unknown_traceback`), and
# SGLang's report that a child failed with no traceback that says why (`runtime_error`).
_ERROR_KINDS = ("port_in_use", "oom", "gpu_unavailable", "arch_unsupported", "moe_config_error", "model_error",
                "install_error", "nccl_error", "cuda_error", "warmup_failed", "config_error", "unknown_traceback",
                "runtime_error")
# Lower-case text that names the operator's cause on its own (torch, CUDA, Triton, ptxas, transformers,
# huggingface_hub, sglang/srt/models/registry.py "Model architectures [...] are not supported for now").
_CAUSE_MARKERS = (
    # a build (torch, sgl-kernel, flashinfer, Triton's ptxas) without kernels for this GPU's architecture
    ("arch_unsupported", ("no kernel image is available for execution", "cudaerrornokernelimagefordevice",
                          "not supported in this architecture", "is not supported on cuda arch",
                          "is not defined for option 'gpu-name'")),
    ("gpu_unavailable", ("no cuda gpus are available", "invalid device ordinal", "cuda driver version is insufficient",
                         "found no nvidia driver", "nvidia driver on your system is too old",
                         "uncorrectable ecc error", "gpu is lost",
                         "busy or unavailable", "cudaerrornodevice", "nvml_success == r internal assert")),
    ("model_error", ("does not appear to have a file named", "is not a valid model identifier", "repository not found",
                     "repositorynotfounderror", "gatedrepoerror", "model architectures", "safetensorerror",
                     "error while deserializing header", "can't load tokenizer", "can't load the configuration",
                     "unrecognized model", "incompletefile")),
    ("install_error", ("cannot open shared object file", "undefined symbol", "no module named")),
    ("nccl_error", ("nccl error", "ncclsystemerror", "ncclinternalerror", "ncclunhandledcudaerror", "ncclremoteerror")),
)
# A kernel's own statement that it needs another architecture: "flash_attn at sgl-kernel is only supported on sm90
# and above" (0.5.23 sglang/kernels/ops/attention/flash_attention_v3.py line 139), "sm_120 is not supported".
_ARCH_REQUIREMENT_RE = re.compile(
    r"(?:only supported on|requires an?|requires) (?:nvidia )?sm[_ ]?\d{2,3}|\bsm_?\d{2,3}[af]? is not supported")
# SGLang's own words that a child process failed (0.5.23 entrypoints/engine.py lines 1978, 2003, 2032): the cause
# is in the child's traceback above, if the log holds it.
_CHILD_FAILED_MARKERS = ("Received sigquit from a child process",
                         "Initialization failed. Please see the error messages", "scheduler died during initialization")
# Where ServerArgs validates the flags: sglang/srt/server_args.py (every release) and the hooks of
# sglang/srt/arg_groups/ that 0.5.23's ServerArgs.__post_init__ calls; the exception types they raise on purpose.
_CONFIG_RAISE_SITES = ("/sglang/srt/server_args.py", "/sglang/srt/arg_groups/")
_CONFIG_RAISE_TYPES = ("ValueError", "AssertionError", "NotImplementedError", "RuntimeError")
# Our words when SGLang gives none: what to check for each cause.
_KIND_SUGGESTIONS = {
    "oom": "The GPU memory ran out: lower --mem-fraction-static when CUDA-graph capture or a forward ran out of "
           "memory, or lower --max-running-requests / the CUDA-graph batch size (--cuda-graph-max-bs, "
           "--cuda-graph-max-bs-decode from 0.5.14).",
    "gpu_unavailable": "The server could not use the GPUs: check `nvidia-smi` on the host (driver loaded, GPUs visible "
                       "to the service's user: CUDA_VISIBLE_DEVICES, DeviceAllow) and that tp_size x pp_size x dp_size "
                       "fits the GPUs.",
    "moe_config_error": "An installed fused-MoE kernel config is not usable by this SGLang (0.5.11 asserts that an "
                        "up/down pair has equal BLOCK_SIZE_M): remove or re-tune the config files of this shape "
                        "(llmops.sglang.moe_configs restores the previous set).",
    "model_error": "SGLang could not load the model: check model_path (a directory with config.json and weights, "
                   "readable by the service's user, or an HF repo id and its token) and that this SGLang release "
                   "supports the model's architecture.",
    "install_error": "The SGLang installation is broken or does not match the host (a missing shared library or "
                     "an incompatible wheel): reinstall SGLang and its kernel packages for this CUDA driver.",
    "arch_unsupported": "The installed build has no kernels for this GPU's architecture (compute capability): install "
                        "torch, sgl-kernel and Triton builds for it (Blackwell sm_100/sm_120 needs CUDA 12.8+ wheels; "
                        "TRITON_PTXAS_PATH can point Triton at a newer ptxas), or choose a backend / dtype the GPU "
                        "supports (FP8 needs sm_89+ in Triton).",
    "nccl_error": "NCCL failed between the GPUs or hosts: check the NCCL_* settings, the network interfaces and that "
                  "every rank reaches --dist-init-addr.",
}
_TRACEBACK_HEADER = "Traceback (most recent call last):"
_EXCEPTION_LINE_RE = re.compile(
    r"(?P<type>(?:[A-Za-z_]\w*\.)*\w*(?:Error|Exception|Exit|Interrupt|Timeout))(?::\s*(?P<text>.*))?$"
)
_ARGPARSE_ERROR_RE = re.compile(r"\S+: error: ")
_SUGGESTION_PLEASE_RE = re.compile(r"\b(Please [^.\n]{0,200}?--[a-z0-9-]+[^\n]{0,200}?\.)(?=\s|$)")
_NUMBERED_LINE_RE = re.compile(r"\d+\. ")
_MAX_SUGGESTION_SCAN = 1000  # SGLang's fix sentences are short; bounds the regex work on huge lines
_MAX_ERROR_LINES = 30
_MAX_LINES_AFTER_KEY = 12  # room for SGLang's multi-line fix text after the exception line
_CHAIN_MARKERS = ("During handling of the above exception", "The above exception was the direct cause")
_FRAME_RE = re.compile(r'File "([^"]+)", line \d+')


def _cause_kind(text: str) -> str | None:
    """The operator's cause a text names on its own (an exception's text, a log line), or None."""
    lowered = text.lower()
    if not any(hint in lowered for hint in _ERROR_HINTS):
        return None
    # uvicorn/asyncio's bind error, torch's TCPStore, 0.5.23 server_args.py line 886 "Port is already in use."
    if "already in use" in lowered and ("address" in lowered or "port" in lowered) or "eaddrinuse" in lowered:
        return "port_in_use"
    if "not enough memory" in lowered or "out of memory" in lowered or "OutOfMemoryError" in text:
        return "oom"
    for kind, markers in _CAUSE_MARKERS:
        if any(marker in lowered for marker in markers):
            return kind
    # What an exception says, not a warning: SGLang warns "... is not supported ..." / "... requires SM100 ..." when it
    # turns a feature off and starts anyway (0.5.23 arg_groups/model_hook.py line 1033 "Automatically turn off
    # --chunked-prefill-size as it is not supported for {model_type}").
    exception = _EXCEPTION_LINE_RE.match(text.partition("\n")[0])
    if exception is not None and _ARCH_REQUIREMENT_RE.search(lowered):
        return "arch_unsupported"
    # a CUDA fault, or SGLang's CUDA-graph capture failing (cuda_graph_runner.py "Capture cuda graph failed",
    # 0.5.10/0.5.11 piecewise_cuda_graph_runner.py "Piecewise CUDA Graph is enabled by default as an experimental ...")
    if "CUDA error" in text or "cuda graph failed" in lowered or "cuda graph is enabled by default" in lowered:
        return "cuda_error"
    if "Initialization failed. warmup error" in text:
        return "warmup_failed"
    if _ARGPARSE_ERROR_RE.match(text) or exception is not None and "is not supported" in text:
        return "config_error"
    if exception is not None and exception.group("type").rsplit(".", 1)[-1] in ("ValueError", "AssertionError") \
            and "--" in text.partition(":")[2]:
        return "config_error"  # a check that names the flag to change
    return None


def _line_error_kind(message: str) -> str | None:
    """Error kind named by one log line outside a traceback, or None."""
    kind = _cause_kind(message)
    if kind is not None:
        return kind
    exception = _EXCEPTION_LINE_RE.match(message)
    if exception is not None and exception.group("type").rsplit(".", 1)[-1] == "RuntimeError":
        return "runtime_error"
    if "Scheduler hit an exception" in message or any(marker in message for marker in _CHILD_FAILED_MARKERS):
        return "runtime_error"
    return None


# uvicorn/asyncio/uvloop: "[Errno 98] error while attempting to bind on address ('127.0.0.1', 30000): address already in use"
_BIND_ADDRESS_RE = re.compile(r"bind on address \('(?P<host>[^']*)', (?P<port>\d+)(?:, \d+, \d+)?\)")


def _port_in_use_suggestion(message: str) -> str:
    """Ours (SGLang prints none): which address, and the two ways out."""
    match = _BIND_ADDRESS_RE.search(message)
    if match is None:
        return ("Another process holds a port the server needs (the HTTP --port, or the torch distributed "
                "--nccl-port / --dist-init-addr port): find it with `ss -ltnp`, stop it or choose a free port.")
    host, port = match.group("host"), match.group("port")
    return (f"Another process is listening on {host}:{port}: find it with `ss -ltnp 'sport = :{port}'`, "
            f"stop it or set --port (the module's `port`) to a free port.")


def _suggestion(lines: list[str]) -> str | None:
    """SGLang's own fix text inside an error's lines."""
    found: list[str] = []
    in_solutions = False
    for line in lines:
        text = line.strip()
        if text == "Possible solutions:":
            in_solutions = True
            found.append(text)
            continue
        if in_solutions and _NUMBERED_LINE_RE.match(text):
            found.append(text)
            continue
        in_solutions = False
        if text.startswith("To work around this error"):
            found.append(text)
        found.extend(match.group(1) for match in _SUGGESTION_PLEASE_RE.finditer(text, 0, _MAX_SUGGESTION_SCAN))
    return "\n".join(dict.fromkeys(found)) or None


class _ErrorCandidate(NamedTuple):
    rank: int  # position in _ERROR_KINDS: lower wins
    position: int
    kind: str
    message: str
    lines: list[str]
    # a traceback's lines from the cause on: SGLang's fix text may follow a later exception of the chain
    rest: list[str] | None = None


class _RaisedException(NamedTuple):
    offset: int  # of its exception line in the block
    type: str  # without the module: "ValueError"
    text: str  # the exception line and the lines of text after it (torch's CUDA notes, Triton's ptxas stderr)
    frames: list[str]  # the files of its traceback, innermost last


def _block_exceptions(block: list[str]) -> list[_RaisedException]:
    """The exceptions of a traceback block in the order printed: a chain's innermost cause first."""
    found: list[_RaisedException] = []
    frames: list[str] = []
    text: list[str] | None = None  # the lines of the exception being read
    for offset, line in enumerate(block):
        stripped = line.strip()
        frame = _FRAME_RE.match(stripped)
        if frame is not None or stripped.startswith(_CHAIN_MARKERS) or _TRACEBACK_HEADER in stripped:
            text = None
            if frame is None:
                frames = []
            else:
                frames.append(frame.group(1))
            continue
        if text is not None:
            if len(text) < _MAX_LINES_AFTER_KEY:
                text.append(stripped)
                found[-1] = found[-1]._replace(text="\n".join(text))
            continue
        exception = _EXCEPTION_LINE_RE.match(stripped)
        if exception is not None:
            text = [stripped]
            found.append(_RaisedException(offset, exception.group("type").rsplit(".", 1)[-1], stripped, frames))
            frames = []
    return found


def _exception_kind(exception: _RaisedException) -> str | None:
    """The cause one exception names: its raise site (ServerArgs' validation is the flags), its text, or the
    fused-MoE config reader failing on an installed config (0.5.11 fused_moe_triton_config.py
    ``assert config["BLOCK_SIZE_M"] == down_config["BLOCK_SIZE_M"]``)."""
    kind = _cause_kind(exception.text)
    if kind == "port_in_use":
        return kind  # ServerArgs checks the ports too: the port is the cause, not the flags
    if exception.frames and exception.type in _CONFIG_RAISE_TYPES and any(
            site in exception.frames[-1] for site in _CONFIG_RAISE_SITES):
        return "config_error"
    if kind is not None:
        return kind
    if exception.type in ("AssertionError", "JSONDecodeError", "KeyError") and any(
            frame.endswith("fused_moe_triton_config.py") for frame in exception.frames):
        return "moe_config_error"
    return None


def _first_cause(exceptions: list[_RaisedException]) -> tuple[_RaisedException | None, str | None]:
    """The first exception (in the order printed) that names a cause, and its kind."""
    for exception in exceptions:
        kind = _exception_kind(exception)
        if kind is not None:
            return exception, kind
    return None, None


def _block_candidate(block: list[str], position: int) -> _ErrorCandidate:
    """Classify a traceback block (header line plus the unprefixed lines after it) by its innermost cause: the first
    exception of the chain that names one. Without one, the block is a failure SGLang reports for a child
    (runtime_error), a failed warm-up (the header says so) or an unknown traceback."""
    exceptions = _block_exceptions(block)
    exception, kind = _first_cause(exceptions)
    if kind is None:
        exception = exceptions[-1] if exceptions else None
        if exception is not None and any(marker in exception.text for marker in _CHILD_FAILED_MARKERS):
            kind = "runtime_error"
        else:
            kind = "warmup_failed" if "Initialization failed. warmup error" in block[0] else "unknown_traceback"
    key = exception.offset if exception is not None else 0
    end = min(len(block), key + 1 + _MAX_LINES_AFTER_KEY)
    return _ErrorCandidate(_ERROR_KINDS.index(kind), position, kind, block[key].strip(),
                           block[max(0, end - _MAX_ERROR_LINES):end], block[key:])


def _usage_context(records: list[_Record], index: int) -> list[str]:
    """An argparse error line with the `usage:` lines printed just before it."""
    first = index
    for back in range(index, max(index - _MAX_ERROR_LINES, -1), -1):
        if records[back].message.startswith("usage:"):
            first = back
            break
    return [record.message for record in records[first:index + 1]]


def _find_error(records: list[_Record], dump_records: set[int]) -> dict[str, Any] | None:
    candidates: list[_ErrorCandidate] = []
    index = 0
    while index < len(records):
        message = records[index].message
        if message.startswith(_SERVER_ARGS_START) or index in dump_records:
            index += 1
            continue
        if _TRACEBACK_HEADER in message:
            end = index + 1
            while end < len(records) and not records[end].prefixed:
                chained = records[end - 1].message.startswith(_CHAIN_MARKERS)
                if _TRACEBACK_HEADER in records[end].message and not chained:
                    break
                end += 1
            candidates.append(_block_candidate([record.message for record in records[index:end]], index))
            index = end
            continue
        kind = _line_error_kind(message)
        if kind is not None:
            lines = _usage_context(records, index) if kind == "config_error" else [message]
            candidates.append(_ErrorCandidate(_ERROR_KINDS.index(kind), index, kind, message.strip(), lines))
        index += 1
    if not candidates:
        return None
    best = min(candidates, key=lambda candidate: (candidate.rank, candidate.position))
    suggestion = _suggestion(best.lines if best.rest is None else best.rest)
    if suggestion is None and best.kind == "port_in_use":
        suggestion = _port_in_use_suggestion(best.message)
    if suggestion is None:
        suggestion = _KIND_SUGGESTIONS.get(best.kind)
    return {"kind": best.kind, "message": best.message, "lines": best.lines, "suggestion": suggestion}


# --- the parser ------------------------------------------------------------------------------------


class _StartupFacts:
    """Accumulates facts record by record; `result()` builds the output dict."""

    def __init__(self) -> None:
        self.records: list[_Record] = []
        self.server_args: dict[str, Any] | None = None
        self.server_args_complete = True
        # The dump being read while it is still open: its form and text (it may continue on the next
        # unprefixed lines: journald's LineMax split, terminal wrapping, a release printing it split).
        self.dump_form: str | None = None
        self.dump_parts: list[str] = []
        self.dump_records: set[int] = set()
        self.wrapped: _Record | None = None  # a fact line that stops before its end (wrapped), held for one record
        # Values the server printed while running; they win over the configured server_args.
        self.runtime: dict[str, Any] = {}
        self.pcg_disabled_reason: str | None = None
        self.prefill_graph_disabled_reason: str | None = None
        self.kv_cache: dict[str, tuple[int, str | None]] = {}
        self.ready = False
        self.emulator = False
        self.moe: dict[tuple[str, str], dict[str, Any]] = {}
        self.moe_device: str | None = None  # device_name= of the first MoE config line, read whole or not
        self.warnings: dict[str, None] = {}
        self.first_timestamp: str | None = None
        self.ready_timestamp: str | None = None
        # First timestamp / elapsed value of each phase per rank.
        self.phase_times: dict[str, dict[str, str]] = {}
        self.phase_elapsed: dict[str, dict[str, float]] = {}

    def feed(self, record: _Record) -> None:
        if self.wrapped is not None:
            wrapped, self.wrapped = self.wrapped, None
            if not record.prefixed and _continues_wrapped(record.message):
                # a terminal or viewer wrapped the line: the rest of it, cut at the width without a separator
                self.records.append(record)
                text = wrapped.message + (" " if _space_dropped(wrapped.message) else "") + record.message
                if _maybe_wrapped(text) and not _maybe_wrapped(wrapped.message + " " + record.message):
                    text = wrapped.message + " " + record.message  # the wrap fell on a space (stripped)
                joined = wrapped._replace(message=text, complete=record.complete)
                if _maybe_wrapped(joined.message):
                    self.wrapped = joined  # wrapped more than once
                else:
                    self._feed_message(joined)
                return
            self._feed_message(wrapped)
        if record.prefixed and _maybe_wrapped(record.message):
            self.records.append(record)
            self.wrapped = record  # read with the next line if that one is its continuation
            return
        self.records.append(record)
        self._feed_message(record)

    def _feed_message(self, record: _Record) -> None:
        message = record.message
        if record.timestamp is not None and self.first_timestamp is None:
            self.first_timestamp = record.timestamp
        if self.dump_form is not None:
            if not record.prefixed:
                self._continue_dump(message)
                return
            self.dump_form = None  # the next log line: the dump stays as far as it got
        if not message:
            return  # a shell prompt's boundary: it only ends what was open
        if message.startswith(_SERVER_ARGS_START):
            if self.server_args is None:
                self._start_dump(message)
            return
        if message.startswith(_FACT_PREFIXES):
            self._feed_fact(message, record)
        elif _READY_MARKER in message and not self.ready:
            self.ready, self.ready_timestamp = True, record.timestamp
        if "MoE kernel config" in message or "MoE config file" in message:
            self._feed_moe(message)
        if record.complete and not message[0].isspace() and (
                record.level in ("WARNING", "WARN", "ERROR", "CRITICAL") or _is_warning(message)):
            self.warnings.setdefault(message.strip())

    def _start_dump(self, message: str) -> None:
        form = "call" if message.startswith(_SERVER_ARGS_CALL) else "dict"
        self.dump_parts = [message[len(_SERVER_ARGS_CALL if form == "call" else _SERVER_ARGS_DICT):]]
        self.server_args, self.server_args_complete = parse_server_args(self.dump_parts[0], form)
        self.dump_form = None if self.server_args_complete else form

    def _continue_dump(self, message: str) -> None:
        self.dump_records.add(len(self.records) - 1)
        self.dump_parts.append(message.strip())
        if ")" in message or "}" in message:  # only a closing bracket can complete the dump
            fields, complete = parse_server_args("".join(self.dump_parts), self.dump_form)
            if complete:
                self.server_args, self.server_args_complete, self.dump_form = fields, True, None

    def _finish_dump(self) -> None:
        if self.dump_form is not None and len(self.dump_parts) > 1:
            self.server_args, self.server_args_complete = parse_server_args("".join(self.dump_parts), self.dump_form)
        self.dump_form = None

    def _feed_fact(self, message: str, record: _Record) -> None:
        if message.startswith("max_total_num_tokens="):
            self._feed_scheduler(message, record.complete)
        elif message.startswith(("KV Cache is allocated.", _KV_CACHE_FINAL)):
            self._feed_kv_cache(message, record)
        elif message.startswith("Load weight begin"):
            self._mark_time("load_begin", record)
        elif message.startswith("Load weight end."):
            self._mark_time("load_end", record)
            self._mark_elapsed("load_weights", _LOAD_ELAPSED_RE.match(message), record)
        elif message.startswith("Memory pool end"):
            self._mark_time("memory_pool_end", record)
        elif message.startswith("Capture "):
            capture = _CAPTURE_END_RE.match(message)
            if capture is not None:
                self._mark_elapsed(_capture_phase(capture), _CAPTURE_ELAPSED_RE.search(message), record)
        elif message.startswith("Attention backend not"):
            match = _ATTENTION_DEFAULT_RE.match(message)
            if match is not None and record.complete:
                self.runtime.setdefault("attention_backend", match.group(1) or match.group(2))
        elif message.startswith(_PCG_DISABLED):
            if self.pcg_disabled_reason is None:
                self.pcg_disabled_reason = message[len(_PCG_DISABLED):]
        elif message.startswith(_PREFILL_GRAPH_DISABLED):
            if self.prefill_graph_disabled_reason is None and record.complete:
                reason = message[len(_PREFILL_GRAPH_DISABLED):]
                self.prefill_graph_disabled_reason = reason[len("because "):] if reason.startswith("because ") else reason
        elif message.startswith(_EMULATOR_MARKER):
            self.emulator = True

    def _feed_scheduler(self, message: str, complete: bool) -> None:
        if "max_total_num_tokens" in self.runtime:
            return  # first scheduler (TP0 / DP0) only
        pairs = _key_values(message, complete)
        for key in _SCHEDULER_KEYS:
            value = pairs.get(key)
            if value is not None and (value == "None" or _INTEGER_RE.fullmatch(value)):
                self.runtime[key] = None if value == "None" else int(value)

    def _feed_kv_cache(self, message: str, record: _Record) -> None:
        final = message.startswith(_KV_CACHE_FINAL)
        if not final:
            self._mark_time("kv_cache_allocated", record)
        match = _KV_CACHE_RE.match(message)
        if match is not None:  # the first rank's; a post-capture resize is the final size
            self.kv_cache.setdefault("final" if final else "allocated", (int(match.group("tokens")), match.group("dtype")))

    def _feed_moe(self, message: str) -> None:
        """Every MoE config file a message names: a tool that joins lines (or a wrapper's block) can carry the up
        and the down kernel's warnings in one message."""
        device = _MOE_DEVICE_RE.search(message)
        if device is not None and self.moe_device is None:
            self.moe_device = device.group("device")
        for pattern, kernel, status in _MOE_PATTERNS:
            for match in pattern.finditer(message):
                self._moe_entry(match, kernel, status)

    def _moe_entry(self, match: re.Match[str], kernel: str | None, status: str) -> None:
        path = match.group("path")
        file_name = path.rsplit("/", 1)[-1]
        if _MOE_FILE_RE.fullmatch(file_name) is None:
            return  # e.g. W8A8 block-FP8 GEMM configs: not a MoE kernel
        kernel = kernel or ("down" if file_name.endswith("_down.json") else "up")
        entry = {"kernel": kernel, "status": status, "path": path, "fallback_path": match.groupdict().get("fallback")}
        if match.group(0).startswith("Down MoE config file not found"):
            entry["reuses_up_config"] = True
        self.moe.setdefault((kernel, path), entry)

    def _mark_time(self, phase: str, record: _Record) -> None:
        if record.timestamp is not None:
            self.phase_times.setdefault(phase, {}).setdefault(record.ranks, record.timestamp)

    def _mark_elapsed(self, phase: str, match: re.Match[str] | None, record: _Record) -> None:
        if match is not None:
            self.phase_elapsed.setdefault(phase, {}).setdefault(record.ranks, float(match.group(1)))

    def _phase_seconds(self, begin: str, *ends: str) -> float | None:
        """Slowest rank's time from its first `begin` to its first of `ends` (first end phase seen)."""
        durations = []
        for ranks, begin_text in self.phase_times.get(begin, {}).items():
            end_text = next(
                (self.phase_times[end][ranks] for end in ends if ranks in self.phase_times.get(end, {})), None
            )
            seconds = _seconds_between(begin_text, end_text)
            if seconds is not None:
                durations.append(seconds)
        return max(durations) if durations else None

    def _timings(self) -> dict[str, float]:
        elapsed = {phase: max(values.values()) for phase, values in self.phase_elapsed.items()}
        timings = {
            "load_weights": elapsed.get("load_weights", self._phase_seconds("load_begin", "load_end")),
            "kv_alloc": self._phase_seconds("load_end", "memory_pool_end", "kv_cache_allocated"),
            "cuda_graph_capture": elapsed.get("cuda_graph_capture"),
            "piecewise_cuda_graph_capture": elapsed.get("piecewise_cuda_graph_capture"),
            "prefill_cuda_graph_capture": elapsed.get("prefill_cuda_graph_capture"),
            "draft_cuda_graph_capture": elapsed.get("draft_cuda_graph_capture"),
            "total": _seconds_between(self.first_timestamp, self.ready_timestamp),
        }
        return {phase: round(seconds, 3) for phase, seconds in timings.items() if seconds is not None}

    def _moe_facts(self) -> dict[str, Any]:
        entries = list(self.moe.values())
        facts: dict[str, Any] = {
            "moe_configs": entries,
            "missing_moe_configs": list(dict.fromkeys(e["path"] for e in entries if e["status"] == "missing")),
            "fallback_moe_configs": list(dict.fromkeys(e["path"] for e in entries if e["status"] == "fallback")),
        }
        if entries:
            # Entries exist only for file names _MOE_FILE_RE matched.
            facts["gpu_name"] = _MOE_FILE_RE.fullmatch(entries[0]["path"].rsplit("/", 1)[-1]).group("device")
            triton_dir = _TRITON_DIR_RE.search(entries[0]["path"])
            if triton_dir is not None:
                facts["triton_version_dir"] = triton_dir.group(1)
        elif self.moe_device is not None:  # no path read whole, but the line named the GPU
            facts["gpu_name"] = self.moe_device
        return facts

    def result(self) -> dict[str, Any]:
        if self.wrapped is not None:
            self._feed_message(self.wrapped)
            self.wrapped = None
        self._finish_dump()
        facts: dict[str, Any] = {}
        if self.server_args is not None:
            facts["server_args"] = self.server_args
            if not self.server_args_complete:
                facts["server_args_truncated"] = True
            facts.update({name: self.server_args[name] for name in _SERVER_ARGS_FACTS if name in self.server_args})
        facts.update(self.runtime)
        kv_cache = self.kv_cache.get("final") or self.kv_cache.get("allocated")
        if kv_cache is not None:
            facts["kv_cache_tokens"] = kv_cache[0]
            if kv_cache[1]:
                facts["kv_cache_dtype"] = kv_cache[1]
        if self.pcg_disabled_reason is not None:
            facts["disable_piecewise_cuda_graph"] = True
            facts["piecewise_cuda_graph_disabled_reason"] = self.pcg_disabled_reason
        if self.prefill_graph_disabled_reason is not None:
            facts["prefill_cuda_graph_disabled_reason"] = self.prefill_graph_disabled_reason
        facts["ready"] = self.ready
        facts.update(self._moe_facts())
        facts["warnings"] = list(self.warnings)
        facts["error"] = _find_error(self.records, self.dump_records)
        facts["timings"] = self._timings()
        if self.emulator:
            facts["emulator"] = True
        return facts


def _maybe_wrapped(message: str) -> bool:
    """A scheduler summary, KV cache, graph capture or MoE config line that stops before the part the parser
    reads (a wrapped copy of the log)."""
    if message.startswith("max_total_num_tokens="):
        return message.endswith(",") or ("available_gpu_mem=" not in message and "context_len=" not in message)
    if message.startswith(("KV Cache is allocated.", _KV_CACHE_FINAL)):
        return _KV_CACHE_RE.match(message) is None
    if message.startswith("Attention backend not"):
        return _ATTENTION_DEFAULT_RE.match(message) is None
    if message.startswith("The server is fired"):
        return _READY_MARKER not in message
    if message.startswith("Capture ") and _CAPTURE_END_RE.match(message):
        return _CAPTURE_ELAPSED_RE.search(message) is None
    if "MoE" in message and "onfig" in message:
        return not any(entry[0].search(message) for entry in _MOE_PATTERNS)
    return False


def _space_dropped(head: str) -> bool:
    """A word-wrapping tool (textwrap, `fold -s`) broke the line at a space and dropped it: after a scheduler line's
    `key=value,` or before a MoE line's path (`... config from`, `... not found at`). A cut at a fixed width keeps the
    space at the start of the next piece, which is then no continuation."""
    if head.startswith("max_total_num_tokens="):
        return head.endswith(",")
    return head.endswith((" from", " at"))


def _continues_wrapped(message: str) -> bool:
    """The rest of a wrapped line, not a line of its own (traceback, log line, progress bar)."""
    return bool(message) and not message[0].isspace() and not message.startswith(("Traceback", "[", "File "))


def _capture_phase(capture: re.Match[str]) -> str:
    """Timing name of a capture-end line: the target's decode/verify graphs are `cuda_graph_capture`
    (as the one graph of 0.5.11), its prefill graphs `prefill_cuda_graph_capture` (0.5.14+; piecewise
    before), a draft model's graphs `draft_cuda_graph_capture`."""
    if capture.group("what") == "piecewise CUDA graph":
        return "piecewise_cuda_graph_capture"
    if capture.group("role") == "draft":
        return "draft_cuda_graph_capture"
    return "prefill_cuda_graph_capture" if capture.group("phase") == "prefill" else "cuda_graph_capture"


def _seconds_between(begin: str | None, end: str | None) -> float | None:
    begin_time, end_time = _to_datetime(begin), _to_datetime(end)
    if begin_time is None or end_time is None or end_time < begin_time:
        return None
    return (end_time - begin_time).total_seconds()


def parse_startup_log(text: str) -> dict[str, Any]:
    """Parse an SGLang startup log (any supported prefix style) into a facts dict.

    Keys whose fact the log does not state are absent; a value the log states as None is None.
    Always present: `ready`, `moe_configs`, `missing_moe_configs`, `fallback_moe_configs`,
    `warnings`, `error` (None without an error) and `timings` (only derivable phases).
    The result holds only JSON types. Never raises on a str input.
    """
    facts = _StartupFacts()
    for record in _iter_records(text):
        facts.feed(record)
    return facts.result()
