"""llmops-sglang: run the tuning pipeline with live progress, regenerate a report, list runs.

    llmops-sglang tune -i inventory/prod/ [--run-id ID] [--stages flags,verify] [-e key=value]
    llmops-sglang stage verify -i inventory/prod/ --run-id 20261130T200107Z
    llmops-sglang report 20261130T200107Z [--runs-dir runs/]
    llmops-sglang runs [--runs-dir runs/]

Exit status: 0 when the run succeeded on at least one host (report/runs: found what was asked), 1 otherwise,
130 when interrupted, 2 for a wrong command line.
"""
from __future__ import annotations

import argparse
import asyncio
import sys
import time
import typing as t
from datetime import datetime, timezone
from pathlib import Path

import yaml
from rich.console import Console

from llmops_sglang import api
from llmops_sglang.collection import STAGES, CollectionNotFound, default_runs_dir
from llmops_sglang.display import make_console, print_result, print_summary, progress_view, runs_table
from llmops_sglang.runs import is_run_dir, list_runs, read_summary, write_report

EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_INTERRUPTED = 0, 1, 2, 130


def extra_var(text: str) -> dict[str, t.Any]:
    """``key=value`` (value read as YAML: numbers, booleans, lists, mappings) or ``@file`` (a YAML/JSON mapping)."""
    if text.startswith("@"):
        try:
            loaded = yaml.safe_load(Path(text[1:]).read_text(encoding="utf-8"))
        except (OSError, yaml.YAMLError) as exc:
            raise argparse.ArgumentTypeError(f"cannot read {text[1:]}: {exc}") from exc
        if not isinstance(loaded, dict):
            raise argparse.ArgumentTypeError(f"{text[1:]} must hold a mapping of variables")
        return loaded
    key, separator, value = text.partition("=")
    if not separator or not key.isidentifier():
        raise argparse.ArgumentTypeError(f"{text!r} is not key=value or @file (e.g. -e stages=flags,verify)")
    try:
        return {key: yaml.safe_load(value) if value else ""}
    except yaml.YAMLError as exc:
        raise argparse.ArgumentTypeError(f"{key}: {value!r} is not a valid YAML value: {exc}") from exc


def new_run_id() -> str:
    """A run id the way the pipeline makes one (UTC time), chosen here so a cancelled run can be resumed."""
    return datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ")


def parser() -> argparse.ArgumentParser:
    root = argparse.ArgumentParser(prog="llmops-sglang", description=__doc__.split("\n", 1)[0])
    commands = root.add_subparsers(dest="command", required=True)

    def playbook_options(command: argparse.ArgumentParser, run_id_required: bool) -> None:
        command.add_argument("-i", "--inventory", required=True, help="inventory file or directory")
        new_run = "" if run_id_required else " (default: a new run named by the UTC time)"
        command.add_argument("--run-id", required=run_id_required, help=f"run to resume{new_run}")
        command.add_argument("-e", "--extra-vars", type=extra_var, action="append", default=[], metavar="KEY=VALUE",
                             help="extra variable (value read as YAML) or @file; repeatable")
        command.add_argument("--force", help="stages to run again although the run finished them (comma-separated)")
        command.add_argument("--runs-dir", type=Path,
                             help="where runs live (tuning_run_root; default: runs/ of the collection)")
        command.add_argument("--timeout", type=float, help="stop the run after this many seconds")

    tune = commands.add_parser("tune", help="run the pipeline (all stages, or --stages)")
    playbook_options(tune, run_id_required=False)
    tune.add_argument("--stages", help=f"stages to run, comma-separated, from {','.join(STAGES)}")
    stage = commands.add_parser("stage", help="run one stage of a run")
    stage.add_argument("name", choices=STAGES)
    playbook_options(stage, run_id_required=True)
    report = commands.add_parser("report", help="regenerate summary.json, report.md and report.html of a run")
    report.add_argument("run_id")
    report.add_argument("--runs-dir", type=Path)
    runs = commands.add_parser("runs", help="list the runs with their date, stages done and outcome")
    runs.add_argument("--runs-dir", type=Path)
    return root


def main(argv: list[str] | None = None) -> int:
    arguments = parser().parse_args(argv)
    console = make_console(sys.stdout.isatty())
    try:
        if arguments.command in ("tune", "stage"):
            return run_playbook(arguments, console)
        runs_dir = arguments.runs_dir or default_runs_dir()
        if arguments.command == "report":
            return report(runs_dir / arguments.run_id, console)
        return list_all(runs_dir, console)
    except CollectionNotFound as exc:
        console.print(f"llmops-sglang: {exc}", style="red", highlight=False)
        return EXIT_FAILED


def run_playbook(arguments: argparse.Namespace, console: Console) -> int:
    extravars = {key: value for mapping in arguments.extra_vars for key, value in mapping.items()}
    run_id = arguments.run_id or new_run_id()
    target = "tune" if arguments.command == "tune" else arguments.name
    started = time.monotonic()
    with progress_view(console) as on_event:
        try:
            result = asyncio.run(api.run_async(
                target, arguments.inventory, extravars, run_id, on_event, stages=getattr(arguments, "stages", None),
                force=arguments.force, runs_dir=arguments.runs_dir, timeout=arguments.timeout))
        except KeyboardInterrupt:
            result = None
    if result is None:
        console.print(f"interrupted: the playbook was stopped; resume with --run-id {run_id}", highlight=False)
        return EXIT_INTERRUPTED
    print_result(console, result, time.monotonic() - started)
    return EXIT_OK if result.succeeded and result.hosts else EXIT_FAILED


def report(run_dir: Path, console: Console) -> int:
    if not is_run_dir(run_dir):
        console.print(f"no run {run_dir.name} in {run_dir.parent} (no run.json there)", highlight=False)
        return EXIT_FAILED
    write_report(run_dir)
    print_summary(console, read_summary(run_dir))
    console.print(f"report: {run_dir.resolve() / 'report.html'}", highlight=False)
    return EXIT_OK


def list_all(runs_dir: Path, console: Console) -> int:
    entries = list_runs(runs_dir)
    if not entries:
        console.print(f"no runs in {runs_dir}", highlight=False)
        return EXIT_FAILED
    console.print(runs_table(entries))
    return EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
