"""llmops-sglang: run the tuning pipeline with live progress, regenerate a report, list runs.

    llmops-sglang tune -i inventory/prod/ [--run-id ID] [--stages flags,verify] [-e key=value] [--limit gpu1] [--check]
    llmops-sglang stage verify -i inventory/prod/ --run-id 20261130T200107Z [-vv]
    llmops-sglang report 20261130T200107Z [--runs-dir runs/]
    llmops-sglang runs [--runs-dir runs/]
    llmops-sglang --version

Exit status: 0 when the run succeeded on at least one host (report/runs: found what was asked; --version: found the
collection), 1 otherwise, 130 when interrupted, 2 for a wrong command line.
"""
from __future__ import annotations

import argparse
import asyncio
import importlib.metadata
import platform
import sys
import time
import typing as t
from datetime import datetime, timezone
from pathlib import Path

import yaml
from ansible.release import __version__ as ansible_core_version
from rich.console import Console

from llmops_sglang import api
from llmops_sglang.collection import CollectionNotFound, default_runs_dir, find_collection, stages
from llmops_sglang.display import make_console, print_result, print_summary, progress_view, runs_table
from llmops_sglang.runs import is_run_dir, list_runs, read_summary, run_file, write_report

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


def version_text() -> tuple[str, bool]:
    """What --version prints: this package, the collection runs would use and where it is, ansible-core, Python;
    and whether the collection was found."""
    lines = [f"llmops-sglang {importlib.metadata.version('llmops-sglang')}"]
    try:
        collection = find_collection()
    except CollectionNotFound as exc:
        lines.append(f"llmops.sglang: not found: {exc}")
        found = False
    else:
        linked = collection.path.resolve()
        where = str(collection.path) if linked == collection.path else f"{collection.path} -> {linked}"
        lines.append(f"llmops.sglang {collection.version or '(no version)'} at {where}")
        if collection.config is not None:
            lines.append(f"ansible.cfg: {collection.config} (development install)")
        found = True
    lines.append(f"ansible-core {ansible_core_version}, Python {platform.python_version()}")
    return "\n".join(lines), found


class _Version(argparse.Action):
    """--version: looks for the collection only when asked (argparse's own version action formats a fixed text)."""

    def __init__(self, option_strings: list[str], dest: str = argparse.SUPPRESS, **kwargs: t.Any) -> None:
        super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS, **kwargs)

    def __call__(self, command: argparse.ArgumentParser, *args: t.Any) -> t.NoReturn:
        text, found = version_text()
        print(text)  # on stdout, as argparse's version action prints
        command.exit(EXIT_OK if found else EXIT_FAILED)


RUNS_DIR_HELP = ("directory that holds the runs (the pipeline's tuning_run_root); default: the tuning_run role's, "
                 "runs/ in the current directory")


def parser() -> argparse.ArgumentParser:
    root = argparse.ArgumentParser(prog="llmops-sglang", description=__doc__.split("\n", 1)[0])
    root.add_argument("--version", action=_Version,
                      help="show this package's version, the llmops.sglang collection runs use (version, path), "
                           "ansible-core's and Python's; exit 1 when the collection is not found")
    commands = root.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def playbook_options(command: argparse.ArgumentParser, run_id_required: bool) -> None:
        command.add_argument("-i", "--inventory", required=True, help="inventory file or directory")
        new_run = "" if run_id_required else " (default: a new run named by the UTC time)"
        command.add_argument("--run-id", required=run_id_required, help=f"run to resume{new_run}")
        command.add_argument("-e", "--extra-vars", type=extra_var, action="append", default=[], metavar="KEY=VALUE",
                             help="extra variable (value read as YAML) or @file; repeatable")
        command.add_argument("--force", help="stages to run again although the run finished them (comma-separated)")
        command.add_argument("--runs-dir", type=Path, help=RUNS_DIR_HELP)
        command.add_argument("-l", "--limit", metavar="SUBSET",
                             help="only these hosts or groups (ansible-playbook --limit pattern)")
        command.add_argument("-C", "--check", action="store_true",
                             help="check mode (ansible-playbook --check): what would be deployed; changes and "
                                  "records nothing")
        command.add_argument("-D", "--diff", action="store_true",
                             help="show the changes of files such as the unit (ansible-playbook --diff)")
        command.add_argument("-v", "--verbose", action="count", default=0,
                             help="more of ansible-playbook's output (-v .. -vvvvvv); its lines show as progress lines")
        command.add_argument("--timeout", type=float, help="stop the run after this many seconds")

    try:
        stage_names = stages()  # the collection's stage registry
    except CollectionNotFound:
        stage_names = ()  # --version says why; tune and stage fail naming it before anything runs
    unknown = "the collection's stages"
    tune = commands.add_parser("tune", help="run the pipeline (all stages, or --stages)")
    playbook_options(tune, run_id_required=False)
    tune.add_argument("--stages", help=f"stages to run, comma-separated, from {','.join(stage_names) or unknown}")
    stage = commands.add_parser("stage", help="run one stage of a run")
    stage.add_argument("name", choices=stage_names or None, metavar="STAGE",
                       help=f"the stage: {', '.join(stage_names) or unknown}")
    playbook_options(stage, run_id_required=True)
    report = commands.add_parser("report", help="regenerate summary.json, report.md and report.html of a run")
    report.add_argument("run_id", metavar="RUN_ID", help="the run (a directory under the runs directory)")
    report.add_argument("--runs-dir", type=Path, help=RUNS_DIR_HELP)
    runs = commands.add_parser("runs", help="list the runs with their date, stages done and outcome")
    runs.add_argument("--runs-dir", type=Path, help=RUNS_DIR_HELP)
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
    except (CollectionNotFound, api.InventoryNotFound) as exc:
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
                force=arguments.force, runs_dir=arguments.runs_dir, limit=arguments.limit, check=arguments.check,
                diff=arguments.diff, verbosity=arguments.verbose, timeout=arguments.timeout))
        except KeyboardInterrupt:
            result = None
    if result is None:
        console.print(f"interrupted: the playbook was stopped; resume with --run-id {run_id}", highlight=False)
        return EXIT_INTERRUPTED
    print_result(console, result, time.monotonic() - started)
    return EXIT_OK if result.succeeded else EXIT_FAILED


def report(run_dir: Path, console: Console) -> int:
    if not is_run_dir(run_dir):
        console.print(f"no run {run_dir.name} in {run_dir.parent} (no {run_file(run_dir, 'run').name} there)",
                      highlight=False)
        return EXIT_FAILED
    write_report(run_dir)
    print_summary(console, read_summary(run_dir))
    console.print(f"report: {run_file(run_dir.resolve(), 'report_html')}", highlight=False)
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
