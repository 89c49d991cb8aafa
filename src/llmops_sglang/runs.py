"""Reading run directories (docs/run-directory.md) with the collection's own report code."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from llmops_sglang.collection import run_dir_module, run_report_module
from llmops_sglang.models import Summary, Sweep


@dataclass(frozen=True)
class RunEntry:
    """One run of a runs directory, for listing."""

    summary: Summary
    reported: bool  # summary.json / report.html were written

    @property
    def run_id(self) -> str:
        return self.summary.run_id


def run_file(run_dir: Path, record: str) -> Path:
    """A record of a run directory (``record`` by the name the collection's layout knows it: run, summary,
    report_html, ...), where the collection's run_dir.py puts it."""
    return run_dir_module().path(Path(run_dir), record=record)


def is_run_dir(path: Path) -> bool:
    return run_file(path, "run").is_file()


def read_summary(run_dir: Path) -> Summary:
    """The run's summary: the document summary.json holds, built from the run directory by the report code,
    so a run whose report stage has not run (a subset of stages, a cancelled run) has one as well."""
    return Summary.from_dict(run_report_module().build_summary(Path(run_dir)), Path(run_dir))


def load_sweeps(run_dir: Path, host: str) -> dict[str, Sweep]:
    """Every sweep.json of a host in pipeline order, by label (baseline, "flags: <trial>", moe_tune, verify)."""
    measurements = run_report_module().host_measurements(Path(run_dir), host)
    return {m["label"]: Sweep.from_dict(m["sweep"], m["label"]) for m in measurements if m["sweep"]}


def write_report(run_dir: Path) -> list[Path]:
    """Regenerate summary.json, report.md, report.html and the plots; returns the files that changed."""
    files = run_report_module().report_files(Path(run_dir))
    return run_dir_module().write_files(Path(run_dir), files)


def list_runs(runs_dir: Path) -> list[RunEntry]:
    """The runs under ``runs_dir``, oldest first (the `latest` link is left out)."""
    entries = [RunEntry(summary=read_summary(p), reported=run_file(p, "summary").is_file())
               for p in Path(runs_dir).glob("*") if not p.is_symlink() and is_run_dir(p)]
    return sorted(entries, key=lambda entry: (entry.summary.created_at or "", entry.run_id))
