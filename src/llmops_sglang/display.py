"""What the CLI shows: live progress (rich, on a terminal) or plain lines (redirected), and the result tables."""
from __future__ import annotations

import time
import typing as t

from rich import box
from rich.console import Console, Group
from rich.live import Live
from rich.spinner import Spinner
from rich.table import Table
from rich.text import Text

from llmops_sglang.collection import stage_registry
from llmops_sglang.models import ProgressEvent, RunResult, Summary
from llmops_sglang.runs import RunEntry, run_file

PLAIN_WIDTH = 160  # redirected output has no width; this one keeps the tables' rows on one line each


def make_console(terminal: bool) -> Console:
    """A rich console: colors and live updates on a terminal; redirected, no control codes at all."""
    if terminal:
        return Console()
    return Console(force_terminal=False, no_color=True, highlight=False, emoji=False, width=PLAIN_WIDTH)


def stage_title(play: str | None) -> str:
    """Play names read "<Stage> - <what it does>"; the stage is enough to follow along."""
    return (play or "").split(" - ", 1)[0]


def _prefix(event: ProgressEvent) -> str:
    """"[Stage] host " (either may be missing: Ansible's own warnings come before any play)."""
    stage = f"[{stage_title(event.stage)}] " if event.stage else ""
    return f"{stage}{event.host} " if event.host else stage


def event_lines(event: ProgressEvent) -> list[str]:
    """The lines a progress event leaves in the log (empty for host results without a message)."""
    if event.kind == "stage":
        return [f"== {event.stage}"]
    if event.kind == "task":
        return [f"{_prefix(event)}{event.task}"]
    if event.kind == "progress":
        return [f"{_prefix(event)}{event.message}"]
    if event.kind in ("failed", "unreachable"):
        first, *rest = (event.message or event.kind).splitlines() or [event.kind]
        return [f"{_prefix(event)}{event.kind.upper()} {event.task}: {first}"] + [f"    {line}" for line in rest]
    if event.message:
        return [f"{_prefix(event)}{line}" for line in event.message.splitlines()]
    return []


class PlainProgress:
    """One line per stage, task, progress line, failure and message; no control codes."""

    def __init__(self, console: Console) -> None:
        self.console = console

    def __enter__(self) -> PlainProgress:
        return self

    def __exit__(self, *exc_info: object) -> None:
        return None

    def __call__(self, event: ProgressEvent) -> None:
        for line in event_lines(event):
            self.console.out(line, highlight=False)


class _Status:
    """The live line: spinner, stage, task, host, seconds in the task, and the latest progress line."""

    def __init__(self) -> None:
        self.spinner = Spinner("dots")
        self.stage = self.task = self.host = self.progress = ""
        self.task_started = time.monotonic()

    def __rich__(self) -> Group:
        elapsed = int(time.monotonic() - self.task_started)
        line = Text.assemble((self.stage, "bold cyan"), " > ", self.task,
                             (f"  {self.host}" if self.host else "", "magenta"), (f"  {_clock(elapsed)}", "dim"))
        self.spinner.text = line
        return Group(self.spinner, Text(self.progress, style="dim")) if self.progress else Group(self.spinner)


class LiveProgress:
    """rich live view: the current stage/task/host and progress stay on screen, the log scrolls above it."""

    STYLES = {"stage": "bold", "failed": "bold red", "unreachable": "bold red", "progress": "green"}

    def __init__(self, console: Console) -> None:
        self.console = console
        self.status = _Status()
        self.live = Live(self.status, console=console, refresh_per_second=4, transient=True)

    def __enter__(self) -> LiveProgress:
        self.live.__enter__()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.live.__exit__(*exc_info)

    def __call__(self, event: ProgressEvent) -> None:
        if event.kind == "stage":
            self.status.stage, self.status.task, self.status.progress = stage_title(event.stage), "", ""
        elif event.kind == "task":  # progress belongs to the task before
            self.status.task, self.status.host, self.status.progress = event.task or "", "", ""
            self.status.task_started = time.monotonic()
        elif event.kind == "progress":
            self.status.host, self.status.progress = event.host or self.status.host, event.message or ""
        elif event.host:
            self.status.host = event.host
        if event.kind != "task":  # tasks pass by in the live line; everything else stays in the log
            for line in event_lines(event):
                self.console.print(Text(line, style=self.STYLES.get(event.kind, "dim")))
        self.live.refresh()


def progress_view(console: Console) -> t.Union[PlainProgress, LiveProgress]:
    return LiveProgress(console) if console.is_terminal else PlainProgress(console)


def _clock(seconds: float) -> str:
    return f"{int(seconds) // 60}:{int(seconds) % 60:02d}"


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{value:+.1f}%"


def _tok_s(values: t.Mapping[int, float], level: int | None) -> str:
    return "-" if level is None or level not in values else f"{values[level]:,.1f}"


def outcome_table(summary: Summary) -> Table:
    title = f"Run {summary.run_id}" + (" (emulated: no GPU measured these numbers)" if summary.emulated_hosts else "")
    table = Table(title=title, box=box.SIMPLE_HEAD, title_justify="left")
    for column in ("Host", "Stages done", "Adopted from", "C", "Baseline tok/s", "Final tok/s", "Change",
                   "max_running_requests"):
        table.add_column(column, justify="left" if column in ("Host", "Stages done", "Adopted from") else "right")
    for name, host in summary.hosts.items():
        numbers, key = host.numbers, host.numbers.key_concurrency
        table.add_row(f"{name} (emulated)" if host.emulated else name, " ".join(host.stages_done()) or "-", host.adopted.stage if host.adopted else "-",
                      "-" if key is None else str(key), _tok_s(numbers.baseline_agg_tok_s, key),
                      _tok_s(numbers.final_agg_tok_s, key), _pct(numbers.key_change_pct),
                      f"{numbers.baseline_max_running_requests or '-'} -> {numbers.final_max_running_requests or '-'}")
    return table


def decisions_table(summary: Summary) -> Table:
    table = Table(title="Decisions", box=box.SIMPLE_HEAD, title_justify="left")
    for column in ("Host", "Candidate", "Action", "Why"):
        table.add_column(column)
    for name, host in summary.hosts.items():
        for decision in host.decisions:
            table.add_row(name, decision.label, Text(decision.action, style="green" if decision.adopted else "yellow"),
                          decision.summary)
    return table


def _minutes(value: float | None) -> str:
    return "-" if value is None else f"{value:,.1f}"


def cost_table(summary: Summary) -> Table:
    """GPU-minutes per host: each stage, the total, what skipped candidates saved, the MoE estimate vs actual."""
    emulated = any(host.cost.emulated for host in summary.hosts.values())
    title = f"GPU-minutes (total {summary.gpu_minutes:,.1f}" + (", real-GPU equivalent of the emulated run)" if emulated
                                                                 else ")")
    table = Table(title=title, box=box.SIMPLE_HEAD, title_justify="left")
    registry = stage_registry()
    # the stages that record GPU-minutes; one a run does not select by default (the search) when a host ran it
    measuring = [stage for stage in registry.RECORDED if stage in getattr(registry, "DEFAULT", registry.RECORDED)
                 or any(stage in host.stages for host in summary.hosts.values())]
    for column in ("Host", *measuring, "Total", "Saved by skips", "MoE estimate / actual"):
        table.add_column(column, justify="left" if column == "Host" else "right")
    for name, host in summary.hosts.items():
        stages = [_minutes(host.stages[stage].cost.gpu_minutes) if stage in host.stages and host.stages[stage].cost
                  else "-" for stage in measuring]
        moe = host.cost.moe
        table.add_row(name, *stages, _minutes(host.cost.gpu_minutes), _minutes(host.cost.saved_gpu_minutes or None),
                      f"{_minutes(moe.estimate_gpu_minutes)} / {_minutes(moe.actual_gpu_minutes)}" if moe else "-")
    return table


def trial_cost_table(summary: Summary) -> Table:
    table = Table(title="GPU-minutes per configuration", box=box.SIMPLE_HEAD, title_justify="left")
    for column in ("Host", "Configuration", "GPU-min", "Note"):
        table.add_column(column, justify="right" if column == "GPU-min" else "left")
    for name, host in summary.hosts.items():
        for trial in host.cost.trials:
            note = (f"skipped (preflight), saved ~{_minutes(trial.saved_gpu_minutes)}" if trial.skipped
                    else f"forced: {trial.forced_by}" if trial.forced_by else "")
            table.add_row(name, trial.label, _minutes(trial.gpu_minutes), note)
    return table


def print_summary(console: Console, summary: Summary) -> None:
    console.print(outcome_table(summary))
    if any(host.decisions for host in summary.hosts.values()):
        console.print(decisions_table(summary))
    if any(host.cost.trials or host.cost.gpu_minutes for host in summary.hosts.values()):
        console.print(cost_table(summary))
        console.print(trial_cost_table(summary))


def print_result(console: Console, result: RunResult, elapsed_s: float) -> None:
    """The end of a tune/stage command: per-host recap, the run's tables, failures, where the report is."""
    title = f"{result.playbook}: {result.status} (rc {result.rc}) in {_clock(elapsed_s)}"
    recap = Table(box=box.SIMPLE_HEAD, title=title, title_justify="left")
    for column in ("Host", "ok", "changed", "failed", "unreachable", "rescued"):
        recap.add_column(column, justify="left" if column == "Host" else "right")
    for name, stats in result.hosts.items():
        recap.add_row(name, str(stats.ok), str(stats.changed), str(stats.failures), str(stats.unreachable),
                      str(stats.rescued))
    console.print(recap)
    if result.reason is not None:
        console.print(Text(result.reason, style="red"))
    if result.summary is not None:
        print_summary(console, result.summary)
    if not result.succeeded:
        for failure in (f for f in result.failures if not f.ignored):
            console.print(Text(f"{failure.host}: {stage_title(failure.stage)} / {failure.task}: {failure.message}",
                               style="red"))
    if result.run_dir is not None:
        report = run_file(result.run_dir, "report_html")
        console.print(f"run directory: {result.run_dir}" + (f"\nreport: {report}" if report.is_file() else ""),
                      highlight=False)


def runs_table(entries: list[RunEntry]) -> Table:
    table = Table(box=box.SIMPLE_HEAD)
    for column in ("Run", "Created (UTC)", "Hosts", "Stages done", "Outcome"):
        table.add_column(column)
    for entry in entries:
        summary = entry.summary
        table.add_row(entry.run_id, (summary.created_at or "-").replace("T", " ").removesuffix("Z"),
                      " ".join(summary.hosts) or "-", _stages_done(entry), _outcome(summary))
    return table


def _stages_done(entry: RunEntry) -> str:
    """Stages every host finished (plus `report` when the report was written)."""
    hosts = list(entry.summary.hosts.values())
    done = [stage for stage in (hosts[0].stages_done() if hosts else [])
            if all(stage in host.stages_done() for host in hosts)]
    return " ".join(done + (["report"] if entry.reported else [])) or "-"


def _outcome(summary: Summary) -> str:
    outcomes = []
    for name, host in summary.hosts.items():
        change = host.numbers.key_change_pct
        adopted = host.adopted.stage if host.adopted else None
        if change is not None:
            outcomes.append(f"{name}: {_pct(change)} at C={host.numbers.key_concurrency}, adopted {adopted}")
        else:
            outcomes.append(f"{name}: not verified" + (f", adopted {adopted} so far" if adopted else ""))
    return "; ".join(outcomes) or "no host started"
