# Copyright (c) llmops.sglang contributors
# Apache License 2.0 (see LICENSE)
"""Fixtures shared by the plugins' unit tests."""
from __future__ import annotations

import os

import pytest


@pytest.fixture
def modes_seen(monkeypatch):
    """The mode of every file as it was just before each chmod and each rename (what another user could open)."""
    seen: list[tuple[str, int]] = []
    chmod, replace = os.chmod, os.replace

    def spy_chmod(path, mode, *args, **kwargs):
        if isinstance(path, (str, os.PathLike)) and os.path.exists(path):
            seen.append((os.fspath(path), os.stat(path).st_mode & 0o777))
        return chmod(path, mode, *args, **kwargs)

    def spy_replace(source, target, *args, **kwargs):
        seen.append((os.fspath(target), os.stat(source).st_mode & 0o777))
        return replace(source, target, *args, **kwargs)
    monkeypatch.setattr(os, "chmod", spy_chmod)
    monkeypatch.setattr(os, "replace", spy_replace)
    old_umask = os.umask(0o022)  # a root shell's umask, as Ansible's modules inherit it
    yield seen
    os.umask(old_umask)
