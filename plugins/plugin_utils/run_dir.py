# Copyright (c) llmops.sglang contributors
# Apache License 2.0 (see LICENSE)
"""The owner of a tuning run directory on the controller: its layout (the run, each stage's folder, each host's,
every record's name), the root checks, and reading and writing its records (docs/run-directory.md, "Layout").

Nothing else spells a record's name or joins a run-directory path: Python asks ``path()`` and the names below, YAML the
filter llmops.sglang.run_path, and tests/unit/layout/test_run_layout.py fails naming a product file that does
otherwise. Where a stage keeps its measurements is the stage registry's (module_utils/stages.py, ``measurements``).
"""
from __future__ import annotations

import json
import typing as t
from pathlib import Path

from ansible_collections.llmops.sglang.plugins.module_utils import stages
from ansible_collections.llmops.sglang.plugins.module_utils.atomic_write import write_atomically

# Every record of a run directory by the name the code knows it by (docs/run-directory.md, "Layout").
RECORDS = {
    # the run's own, in the run directory
    "run": "run.json", "summary": "summary.json", "report_md": "report.md", "report_html": "report.html",
    "plots": "plots",
    # a stage's, in <stage>/<host>/
    "stage": "stage.json", "adopted": "adopted.json", "guard_restored": "guard_restored.json",
    # a measurement's (MEASUREMENT), in the folder of the configuration measured
    "requested_args": "requested_args.json", "environment": "environment.json", "unit": "unit.service",
    "startup_log": "startup_log.txt", "deploy": "deploy.json", "cost": "cost.json", "facts": "facts.json",
    "sweep": "sweep.json", "failure_text": "failure.txt", "failure": "failure.json",
    # a verdict's, next to the measurement it judges
    "comparison": "comparison.json", "side_effects": "side_effects.json", "decision": "decision.json",
    "findings": "findings.json", "restart_check": "restart_check.json", "drift": "drift.json",
    # preflight's
    "gpus": "gpus.json", "flag_findings": "flag_findings.json",
    # the search stage's
    "search": "search.json", "trial": "trial.json", "rate_search": "rate_search.json", "goodput": "goodput.json",
    "probes": "probes",
    # the MoE stage's
    "targets": "targets.json", "estimate": "estimate.json", "tune_up": "tune_up.json", "tune_down": "tune_down.json",
    "installed": "installed.json", "kernel_before": "kernel_before.json", "kernel_after": "kernel_after.json",
    "kernel_table": "kernel_table.json", "kernel_benchmark": "kernel_benchmark.json", "configs": "configs",
    "provenance": "provenance.json", "cluster": "cluster.json",
    # rollout's and upgrade's
    "rollout": "rollout.json", "release": "release.json", "carry": "carry.json", "retune": "retune.json",
    "prediction": "prediction.json", "prediction_before": "prediction_before.json",
    "prediction_md": "prediction.md", "canary": "canary.json", "canary_md": "upgrade.md",
}
# What a measured trial records (MEASUREMENT, the verdict on it, its cost), none of which a skipped trial has.
MEASURED_TRIAL = ("requested_args", "environment", "deploy", "startup_log", "facts", "sweep", "unit", "failure_text",
                  "failure", "comparison", "side_effects", "cost", "findings")
# The folders of a stage's host folder besides its measurements: the flag trials, the search's trials and its
# re-verified candidates (``verify/adopted``: the adopted configuration measured again as their reference).
TRIALS, VERIFIED, REFERENCE = "trials", "verify", "adopted"
# The upgrade's measured releases (``canary/old``, ``canary/new``), the registry's ``measurements`` of stage upgrade.
CANARY = "canary"


def record_name(name: str) -> str:
    """The file name of the record ``name`` (a key of RECORDS); ValueError naming the known ones otherwise."""
    try:
        return RECORDS[name]
    except KeyError:
        raise ValueError(f"unknown run record {name!r}; records are {', '.join(sorted(RECORDS))}") from None


def path(run_dir: str | Path, stage: str | None = None, host: str | None = None, *, measurement: str | None = None,
         record: str | None = None) -> Path:
    """A place in the run directory: the run (no stage), a stage's folder, a host's folder of it, the folder of one of
    its measured candidates (``measurement``: a flag trial, a re-verified search candidate, where the stage registry
    says the stage keeps them), and a record there (a key of RECORDS)."""
    place = Path(run_dir)
    if stage is not None:
        stages.get(stage)
        place = place / _part("stage", stage)
    if host is not None:
        place = place / _part("host", host)
    if measurement is not None:
        place = place / _measurements(stage) / _part("measurement", measurement)
    return place if record is None else place / record_name(record)


def _part(what: str, name: str) -> str:
    """``name`` as one folder name: a host or candidate name cannot lead out of the run directory."""
    if not name or "/" in name or name in (".", ".."):
        raise ValueError(f"{what} {name!r} is not a folder name")
    return name


def _measurements(stage: str | None) -> str:
    folder = stages.get(stage).measurements if stage is not None else None
    if folder is None:
        raise ValueError(f"stage {stage} keeps its one measurement in its host folder, not one per candidate")
    return folder


def measurement_dirs(run_dir: Path, stage: str, host: str) -> list[tuple[str | None, Path]]:
    """The measured configurations of ``stage`` on ``host`` in the order they were tried, each ``(candidate name,
    folder)``; the name is None for a stage whose host folder is its one measurement. Flag trials come in the order
    stage.json lists them (the folders' names when the stage did not finish), re-verified search candidates by name."""
    host_dir = path(run_dir, stage, host)
    folder = stages.get(stage).measurements
    if folder is None:
        return [(None, host_dir)]
    found = sorted(p.name for p in (host_dir / folder).glob("*")
                   if p.is_dir() and not (folder == VERIFIED and p.name == REFERENCE))
    order = (read_json(host_dir / RECORDS["stage"]) or {}).get("trials") if folder == TRIALS else None
    return [(name, host_dir / folder / name) for name in order or found]


def hosts(run_dir: Path, stage_names: t.Iterable[str]) -> list[str]:
    """The hosts with a folder in any of the stages ``stage_names``."""
    return sorted({p.name for stage in stage_names for p in path(run_dir, stage).glob("*") if p.is_dir()})


def skipped_trial(decision: dict) -> dict[str, t.Any]:
    """The records of a trial that is not measured, for record_files(): its decision, and none of those a measurement
    of it by an earlier attempt left (a folder never mixes two attempts)."""
    return {**{RECORDS[name]: None for name in MEASURED_TRIAL}, RECORDS["decision"]: decision}


def read_record(run_dir: str | Path, stage: str | None = None, host: str | None = None, *,
                measurement: str | None = None, record: str) -> t.Any:
    """A JSON record of the run directory, or None when it is not there."""
    return read_json(path(run_dir, stage, host, measurement=measurement, record=record))


def run_directory(root: str | Path, run_id: str) -> Path:
    """``<root>/<run_id>`` resolved (links followed); ValueError when it is not a directory right under the resolved
    root (a run id with a path in it, or a link in the runs root pointing elsewhere): nothing of a run may be written
    outside its root."""
    resolved_root = Path(root).expanduser().resolve()
    run_dir = (resolved_root / run_id).resolve()
    if run_dir.parent != resolved_root or run_dir.name in ("", ".", ".."):
        raise ValueError(f"run_id: {run_id!r} resolves to {str(run_dir)!r}, which is not a run directory right under "
                         f"the runs root {str(resolved_root)!r}; name the run with letters, digits, '.', '_' or '-'")
    return run_dir


def read_json(path: Path) -> t.Any:
    """A JSON record of the run directory, or None when it is not there."""
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (FileNotFoundError, NotADirectoryError):
        return None


def serialize(content: object) -> str:
    """JSON for mappings and lists (stable: keys sorted), text as is."""
    if isinstance(content, (dict, list)):
        return json.dumps(content, indent=2, sort_keys=True, default=str) + "\n"
    return str(content)


def relative_path(directory: Path, name: str) -> Path:
    """``directory / name``; raises ValueError for names that would leave ``directory``."""
    if not name or Path(name).is_absolute() or ".." in Path(name).parts:
        raise ValueError(f"{name!r} must be a relative file name without '..'")
    return directory / name


def write_files(directory: Path, files: dict[str, str], *, check_mode: bool = False) -> list[Path]:
    """Write the files whose content differs; returns those paths (nothing is written in check mode)."""
    planned = {relative_path(directory, name): text for name, text in files.items()}
    changed = [path for path, text in planned.items()
               if not path.is_file() or path.read_text(encoding="utf-8") != text]
    if not check_mode:
        for path in changed:
            # A crashed run must never leave a half-written record that a resumed run would trust.
            path.parent.mkdir(parents=True, exist_ok=True)
            write_atomically(str(path), planned[path].encode("utf-8"))
    return changed


def remove_files(directory: Path, names: t.Iterable[str], *, check_mode: bool = False) -> list[Path]:
    """Remove the records ``names`` that exist (a stale failure.txt once the same measurement succeeded, a stale
    sweep.json once it failed); returns those paths (nothing is removed in check mode)."""
    present = [path for path in (relative_path(directory, name) for name in names) if path.is_file()]
    if not check_mode:
        for path in present:
            path.unlink()
    return present


def record_files(directory: Path, files: dict[str, object], *, check_mode: bool = False) -> tuple[list[Path], list[Path]]:
    """Write each record as JSON (mappings, lists) or text; a null content means "no such record", and one an earlier
    attempt of the same measurement left is removed, so a directory never mixes two attempts. Returns the paths
    written and removed (nothing changes in check mode)."""
    written = write_files(directory, {name: serialize(content) for name, content in files.items() if content is not None},
                          check_mode=check_mode)
    removed = remove_files(directory, [name for name, content in files.items() if content is None],
                           check_mode=check_mode)
    return written, removed
