# Copyright (c) llmops.sglang contributors
# Apache License 2.0 (see LICENSE)
"""Writing into a tuning run directory on the controller (layout: docs/run-directory.md)."""
from __future__ import annotations

import json
import typing as t
from pathlib import Path

from ansible_collections.llmops.sglang.plugins.module_utils.atomic_write import write_atomically


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
