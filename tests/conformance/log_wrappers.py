# Copyright (c) llmops.sglang contributors
# Apache License 2.0 (see LICENSE)
"""The tools users pass SGLang's log through (issue #38 item 9), each as a function of the log's lines that returns the
text the tool shows: every line re-prefixed, HTML-escaped, re-wrapped. Origin of each format beside it. Used by
tests/unit/plugins/module_utils/test_startup_log_wrappers.py and tests/conformance/test_log_wrappers_conformance.py.
"""
from __future__ import annotations

import html
import re


def _each_line(prefix: str, *, strip: bool = False):
    return lambda lines: "".join(prefix + (line.strip() if strip else line) + "\n" for line in lines)


WRAPPERS = {
    # a supervisor's Python logging relaying the server's output line by line (logging's default format
    # "%(asctime)s - %(name)s - %(levelname)s - %(message)s")
    "python_logging": _each_line("2026-11-30 10:00:02,345 - supervisor.sglang - INFO - "),
    "python_basic_config": _each_line("INFO:root:"),
    # xinference before 2026: "%(asctime)s %(name)-12s %(process)d %(levelname)-8s %(message)s" (deploy/utils.py)
    "xinference": _each_line("2026-11-30 10:00:02,345 xinference.core.worker 12345 INFO     "),
    # xinference 2026 TextFileFormatter (xinference/deploy/utils.py) with StreamToLogger, which strips each line
    "xinference_text": _each_line("2026-11-30T10:00:02.345Z INFO xinference.stdout pid:12345 role:worker "
                                  "address:10.0.0.2:30001 node:gpu01 ", strip=True),
    # Ray's prefix of an actor's / a worker's output
    "ray_actor": _each_line("(SGLangEngine pid=48213, ip=10.0.0.2) "),
    "ray_worker": _each_line("(pid=48213) "),
    # per-GPU launchers
    "gpu_label": _each_line("[GPU 0] "),
    "mpirun_tag_output": _each_line("[1,0]<stdout>:"),
    "srun_label": _each_line("0: "),
    # a web page: HTML-escaped (html.escape, quote=True) with `<br>` for the newlines
    "html_br": lambda lines: "".join(html.escape(line) + "<br>\n" for line in lines),
    # xinference re-wrapping the server's lines at 100 characters, each piece with its own prefix
    "xinference_rewrapped": lambda lines: "".join(
        "2026-11-30 10:00:02,345 xinference.core.worker 12345 INFO     " + line[start:start + 100].strip() + "\n"
        for line in lines for start in range(0, len(line), 100)),
}

_SGLANG_PREFIX_RE = re.compile(r"\[\d{4}-\d\d-\d\d \d\d:\d\d:\d\d(?:\.\d+)?(?: [A-Z_]+\d+)*\] ")


def _records_formatted_by(prefix: str):
    """SGLang run inside the tool's process (xinference runs sglang.Engine in its model actor): the tool's logging
    formats SGLang's records instead of SGLang's configure_logger; a record's further lines (a traceback in the
    message) keep no prefix."""
    def formatted(lines):
        out = []
        for line in lines:
            match = _SGLANG_PREFIX_RE.match(line)
            out.append(line if match is None else prefix + line[match.end():])
        return "".join(f"{line}\n" for line in out)
    return formatted


IN_PROCESS = {
    "python_logging": _records_formatted_by("2026-11-30 10:00:02,345 - sglang.srt.entrypoints.engine - INFO - "),
    "python_basic_config": _records_formatted_by("INFO:sglang.srt.entrypoints.engine:"),
    "xinference": _records_formatted_by("2026-11-30 10:00:02,345 sglang.srt.entrypoints.engine 12345 INFO     "),
    "xinference_text": _records_formatted_by("2026-11-30T10:00:02.345Z INFO sglang.srt.entrypoints.engine pid:12345 "
                                             "role:worker address:10.0.0.2:30001 node:gpu01 "),
}
