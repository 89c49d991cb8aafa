# Copyright (c) llmops.sglang contributors
# Apache License 2.0 (see LICENSE)
"""Writing into a tuning run directory on the controller (layout: docs/run-directory.md)."""
from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path


def serialize(content: object) -> str:
    """JSON for mappings and lists (stable: keys sorted), text as is."""
    if isinstance(content, (dict, list)):
        return json.dumps(content, indent=2, sort_keys=True, default=str) + "\n"
    return str(content)


def _write_atomically(path: Path, text: str) -> None:
    # A crashed run must never leave a half-written record that a resumed run would trust.
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, temporary = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
        os.chmod(temporary, 0o644)  # mkstemp makes 0600; reports are meant to be read and shared
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise


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
            _write_atomically(path, planned[path])
    return changed
