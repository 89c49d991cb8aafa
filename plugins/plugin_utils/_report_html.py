# Copyright (c) llmops.sglang contributors
# Apache License 2.0 (see LICENSE)
"""The report's plots (matplotlib, SVG) and report.html: report.md as HTML with the plots inlined, so it works
offline. Output is deterministic: the same run directory gives the same bytes.

Private to the llmops.sglang collection (plugin_utils/run_report.py is the report's interface); controller-side. It
needs matplotlib and markdown, which are controller requirements of the collection (:data:`HAS_REPORT_LIBS`).
"""
from __future__ import annotations

import io
import re
import typing as t

from ansible_collections.llmops.sglang.plugins.plugin_utils._report_search import FRONT_LATENCIES, FRONT_PERCENTILE
from ansible_collections.llmops.sglang.plugins.plugin_utils._report_summary import level_spread, level_values

try:
    import markdown
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import pyplot
    HAS_REPORT_LIBS = True
except ImportError:  # pragma: no cover - reported by the action plugin
    HAS_REPORT_LIBS = False


def render_plot(measurements: list[dict], host: str) -> str:
    """One SVG with throughput, per-request throughput and TTFT p50/p99 against concurrency."""
    pyplot.rcParams["svg.hashsalt"] = "llmops-sglang"  # stable element ids: same run dir, same bytes
    figure, axes = pyplot.subplots(1, 3, figsize=(15, 4.2))
    panels = (("agg_tok_s", None, "Aggregate output tok/s (band: runs' range)"),
              ("per_req_tok_s", None, "Per-request output tok/s (band: runs' range)"),
              ("ttft_ms", "p50", "TTFT ms (p50 solid, p99 dashed)"))
    for axis, (field, percentile, title) in zip(axes, panels):
        for index, measurement in enumerate(m for m in measurements if m["sweep"]):
            color = f"C{index % 10}"
            values = level_values(measurement["sweep"], field, percentile)
            if values:
                levels = sorted(values)
                axis.plot(levels, [values[c] for c in levels], marker="o", color=color, label=measurement["label"])
            spread = level_spread(measurement["sweep"], field) if percentile is None else {}
            if spread:
                levels = sorted(spread)
                axis.fill_between(levels, [spread[c][0] for c in levels], [spread[c][1] for c in levels], color=color,
                                  alpha=0.15, linewidth=0)
            if field == "ttft_ms":
                tail = level_values(measurement["sweep"], field, "p99")
                levels = sorted(tail)
                axis.plot(levels, [tail[c] for c in levels], linestyle="--", color=color)
        axis.set_xscale("log", base=2)
        levels = sorted({c for m in measurements if m["sweep"] for c in level_values(m["sweep"], "agg_tok_s")})
        axis.set_xticks(levels, [str(c) for c in levels])
        axis.minorticks_off()
        axis.set_xlabel("concurrency")
        axis.set_title(title)
        axis.grid(True, alpha=0.3)
    axes[0].legend(fontsize="small")
    figure.suptitle(host)
    figure.tight_layout()
    return _svg(figure)


def render_search_plot(search: dict, host: str) -> str:
    """One SVG with the candidates' goodput against p99 TTFT and against p99 TPOT at their SLO-meeting rate, the
    Pareto front of each highlighted, the SLO's target where it judges that latency at p99."""
    pyplot.rcParams["svg.hashsalt"] = "llmops-sglang"
    figure, axes = pyplot.subplots(1, len(FRONT_LATENCIES), figsize=(11, 4.2))
    for axis, metric in zip(axes, FRONT_LATENCIES):
        _front_panel(axis, search, metric)
    adopted = search["recommendation"]["candidate"]
    figure.suptitle(f"{host}: goodput search" + (f" (star: the adopted candidate {adopted})" if adopted else ""))
    figure.tight_layout()
    return _svg(figure)


def _front_panel(axis: t.Any, search: dict, metric: str) -> None:
    key, front, label = f"{metric}_{FRONT_PERCENTILE}", search["front"][metric], FRONT_LATENCIES[metric]
    measured = [c for c in search["candidates"] if c["boundary"] and c["boundary"][key] is not None]
    for candidate in measured:
        on_front = candidate["name"] in front
        point = (candidate["boundary"][key], candidate["goodput_rps"])
        axis.scatter(*point, s=80 if on_front else 40, color="C3" if on_front else "0.6", zorder=3,
                     marker="*" if candidate["name"] == search["recommendation"]["candidate"] else "o")
        axis.annotate(candidate["name"], point, textcoords="offset points", xytext=(5, 5), fontsize="small")
    points = sorted((c["boundary"][key], c["goodput_rps"]) for c in measured if c["name"] in front)
    if points:
        axis.plot(*zip(*points), color="C3", drawstyle="steps-post", label="Pareto front")
    spec = (search["slo"] or {}).get(metric)
    if spec and spec["percentile"] == 99:
        axis.axvline(spec["target"], color="0.3", linestyle="--", label=f"SLO p99 <= {spec['target']:g} ms")
    axis.set_xlim(left=0)  # from zero: the gaps between candidates at their true size
    axis.set_ylim(0, max((c["goodput_rps"] for c in measured), default=1.0) * 1.15)  # room for the labels on top
    axis.set_xlabel(f"{FRONT_PERCENTILE} {label} ms at the SLO-meeting rate")
    axis.set_ylabel("goodput (req/s)")
    axis.set_title(f"Goodput vs {FRONT_PERCENTILE} {label}")
    axis.grid(True, alpha=0.3)
    axis.legend(fontsize="small")


def _svg(figure: t.Any) -> str:
    buffer = io.StringIO()
    figure.savefig(buffer, format="svg", metadata={"Date": None})
    pyplot.close(figure)
    return buffer.getvalue()


HTML_PAGE = """<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>{title}</title>
<style>body{{font-family:sans-serif;max-width:1200px;margin:2em auto;line-height:1.4}}
table{{border-collapse:collapse;margin:1em 0}}td,th{{border:1px solid #bbb;padding:3px 8px;text-align:right}}
td:first-child,th:first-child{{text-align:left}}pre{{background:#f5f5f5;padding:1em;overflow:auto}}
table{{display:block;max-width:100%;overflow-x:auto}}p,li,td,code{{overflow-wrap:anywhere}}
blockquote{{border-left:6px solid #c60;background:#fff4e5;margin:1em 0;padding:.5em 1em}}
figure{{margin:0}}figure svg{{width:100%;height:auto}}</style></head>
<body>
{body}
</body></html>
"""


def render_html(markdown_text: str, plots: dict[str, str], title: str) -> str:
    """report.md as HTML with each plot's SVG (``plots``: by file name under plots/, without .svg) inlined where the
    Markdown links it (no external file)."""
    body = markdown.markdown(markdown_text, extensions=["tables", "fenced_code"])
    for name, svg in plots.items():
        figure = f"<figure>{svg[svg.index('<svg'):]}</figure>"
        image = re.compile(rf'(<p>)?<img alt="[^"]*" src="plots/{re.escape(name)}\.svg" />(?(1)</p>)')
        body = image.sub(lambda _match, figure=figure: figure, body)
    return HTML_PAGE.format(title=title, body=body)
