# Copyright (c) llmops.sglang contributors
# Apache License 2.0 (see LICENSE)
"""summary.json, report.md and report.html of a tuning run, built only from its run directory: the report's interface,
what the report action, the Python API (src/llmops_sglang/runs.py) and ``make demo-slo`` import.

Controller-side (plugin_utils): needs matplotlib and markdown, which are controller requirements of the
collection. The run directory layout is documented in docs/run-directory.md. The parts, one concern each:
_report_summary (summary.json), _report_search (the goodput search's part of it), _report_upgrade (the upgrade's
part of summary.json and report.md), _report_markdown (report.md and the lines printed at the end of the playbook),
_report_html (the plots and report.html).
"""
from __future__ import annotations

import json
from pathlib import Path

from ansible_collections.llmops.sglang.plugins.plugin_utils._report_html import (
    HAS_REPORT_LIBS, render_html, render_plot, render_search_plot)
from ansible_collections.llmops.sglang.plugins.plugin_utils._report_markdown import (
    render_markdown, report_title, search_lines, summary_text)
from ansible_collections.llmops.sglang.plugins.plugin_utils._report_summary import (
    STAGES, build_summary, host_measurements, measured_hosts)
from ansible_collections.llmops.sglang.plugins.plugin_utils.run_dir import record_name

__all__ = ["HAS_REPORT_LIBS", "STAGES", "build_summary", "host_measurements", "measured_hosts", "render_markdown",
           "report_files", "search_lines", "summary_text"]


def report_files(run_dir: Path) -> dict[str, str]:
    """Relative path -> content of everything the report consists of."""
    measured = measured_hosts(run_dir)
    summary = build_summary(run_dir, measured)
    markdown_text = render_markdown(run_dir, summary, measured)
    plots = {host: render_plot(measured[host], host + (" (emulated)" if data["emulated"] else ""))
             for host, data in summary["hosts"].items()}
    plots.update({f"{host}-search": render_search_plot(data["search"], host) for host, data in summary["hosts"].items()
                  if data["search"] and any(data["search"]["front"].values())})
    files = {record_name("summary"): json.dumps(summary, indent=2, sort_keys=True) + "\n",
             record_name("report_md"): markdown_text,
             record_name("report_html"): render_html(markdown_text, plots, report_title(summary))}
    files.update({f"{record_name('plots')}/{host}.svg": svg for host, svg in plots.items()})
    return files
