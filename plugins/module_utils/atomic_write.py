# Copyright (c) llmops.sglang contributors
# Apache License 2.0 (see LICENSE)
"""Atomic file replacement: readers see the old content or the new one, never a part.

Private to the llmops.sglang collection. Pure stdlib.
"""
from __future__ import annotations

import os
import tempfile


def write_atomically(path: str, data: bytes, mode: int = 0o644) -> None:
    """Write ``data`` to a temp file in the target's directory, fsync it, then ``os.replace`` it over ``path``.

    The temp file lives in the same directory so the rename never crosses a filesystem.
    """
    directory = os.path.dirname(path) or "."
    fd, tmp = tempfile.mkstemp(dir=directory, prefix=f".{os.path.basename(path)}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
