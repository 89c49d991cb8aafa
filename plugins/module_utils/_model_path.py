# Copyright (c) llmops.sglang contributors
# Apache License 2.0 (see LICENSE)
"""Whether ``model_path`` is a model directory the server's user can read, not hidden by the unit's sandboxing, or
a hub id.

Private to the llmops.sglang collection. Pure functions over ``os.stat`` results (the stat and ACL readers are
parameters); runs on the managed host with the server module (server_preflight).
"""
from __future__ import annotations

import os
import re
import stat as stat_module
from collections.abc import Callable
from dataclasses import dataclass

from ansible_collections.llmops.sglang.plugins.module_utils._unit_file import unit_setting

_HUB_ID_RE = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]*(?:/[A-Za-z0-9_][A-Za-z0-9_.-]*)?$")


@dataclass
class Identity:
    """Who the server runs as."""
    name: str
    uid: int
    gids: set[int]


def _may(st: os.stat_result, who: Identity, bits: int) -> bool:
    """Whether ``who`` has all of ``bits`` (4 read, 2 write, 1 search) on a file with this stat (mode bits only)."""
    if who.uid == 0:
        return True
    if st.st_uid == who.uid:
        granted = (st.st_mode >> 6) & 7
    elif st.st_gid in who.gids:
        granted = (st.st_mode >> 3) & 7
    else:
        granted = st.st_mode & 7
    return granted & bits == bits


def _has_acl(path: str) -> bool:
    try:
        return "system.posix_acl_access" in os.listxattr(path)
    except (OSError, AttributeError):
        return False


def looks_local(model_path: str) -> bool:
    """A file system path rather than a hub id (absolute, ``./``/``../``/``~`` relative)."""
    return model_path.startswith(("/", "./", "../", "~")) or model_path in (".", "..")


def hidden_by_unit(path: str, unit_text: str | None) -> str | None:
    """The unit setting that hides ``path`` (a real path) from the server: ``ProtectHome=yes|tmpfs`` hides
    /home, /root and /run/user, ``PrivateTmp=yes`` gives it an empty /tmp and /var/tmp."""
    def under(*roots: str) -> bool:
        return any(path == root or path.startswith(root + "/") for root in roots)
    protect_home = (unit_setting(unit_text, "ProtectHome") or "no").lower()
    if protect_home in ("yes", "true", "1", "on", "tmpfs") and under("/home", "/root", "/run/user"):
        return f"ProtectHome={protect_home}"
    if (unit_setting(unit_text, "PrivateTmp") or "no").lower() in ("yes", "true", "1", "on") and under("/tmp", "/var/tmp"):
        return "PrivateTmp=yes"
    return None


def model_path_errors(model_path: str, working_directory: str = "/", who: Identity | None = None,
                      stat: Callable[[str], os.stat_result] = os.stat,
                      has_acl: Callable[[str], bool] = _has_acl, unit_text: str | None = None) -> list[str]:
    """Why the server could not load ``model_path`` (empty when it can, or when it is a hub id).

    A local path (absolute, ``./``-like, or existing relative to the service's working directory)
    must be a directory holding ``config.json`` (or a ``.gguf`` file), readable by ``who`` along the
    whole path (mode bits; a path with a POSIX ACL is given the benefit of the doubt) and not hidden
    by the unit's sandboxing (``unit_text``: ProtectHome=, PrivateTmp=). Anything else must look like
    a hub id (``org/name``).
    """
    path = os.path.join(working_directory or "/", os.path.expanduser(model_path))
    try:
        st = stat(path)
    except FileNotFoundError:
        st = None
    except OSError as exc:
        return [f"model_path: {model_path} cannot be read on the host: {exc.strerror or exc}"]
    if st is None:
        if looks_local(model_path) or not _HUB_ID_RE.match(model_path):
            where = "" if model_path.startswith("/") else f" (relative to working_directory {working_directory})"
            return [f"model_path: {model_path} does not exist on the host{where}"
                    + ("" if looks_local(model_path) else " and is not a hub id (org/name)")]
        return []  # a hub id: SGLang downloads it
    config = config_st = None
    if stat_module.S_ISREG(st.st_mode) and path.endswith(".gguf"):
        pass
    elif not stat_module.S_ISDIR(st.st_mode):
        return [f"model_path: {model_path} is not a directory (a model directory holds config.json)"]
    else:
        config = os.path.join(path, "config.json")
        try:
            config_st = stat(config)
        except OSError:
            return [f"model_path: {model_path} has no config.json; it is not a model directory "
                    f"(point it at the directory holding config.json and the weights)"]
    hidden = hidden_by_unit(os.path.realpath(path), unit_text)
    if hidden:
        return [f"model_path: {model_path} is hidden from the server by the unit's {hidden}; "
                f"put the model elsewhere (e.g. /srv/models)"]
    if who is None:
        return []
    denied = _denied(path, st, config, who, stat, has_acl)
    if denied:
        return [f"model_path: {model_path} is not readable by the server's user {who.name} ({denied})"]
    if config_st is not None and not _may(config_st, who, 4) and not has_acl(config):
        return [f"model_path: {model_path}/config.json is not readable by the server's user {who.name}"]
    return []


def _denied(path: str, st: os.stat_result, config: str | None, who: Identity,
            stat: Callable[[str], os.stat_result], has_acl: Callable[[str], bool]) -> str | None:
    """The first directory of the path ``who`` may not enter (or the model dir it may not list)."""
    real = os.path.realpath(path)
    parts = real.split("/")
    for depth in range(len(parts) - 1 if real != "/" else 0):
        parent = "/".join(parts[:depth + 1]) or "/"
        try:
            parent_st = stat(parent)
        except OSError:
            continue
        if not _may(parent_st, who, 1) and not has_acl(parent):
            return f"no search permission on {parent}"
    if config is not None and not _may(st, who, 5) and not has_acl(path):
        return f"no read+search permission on {path}"
    if config is None and not _may(st, who, 4) and not has_acl(path):
        return f"no read permission on {path}"
    return None


def server_identity(user: str, group: str | None) -> Identity | None:
    """uid and groups the unit's process gets (``User=``, ``Group=`` or the primary group, plus the
    user's supplementary groups); None when the user does not exist (yet) on the host."""
    import grp
    import pwd
    try:
        entry = pwd.getpwnam(user)
    except KeyError:
        return None
    gid = entry.pw_gid
    if group:
        try:
            gid = grp.getgrnam(group).gr_gid
        except KeyError:
            pass
    try:
        gids = set(os.getgrouplist(user, gid))
    except OSError:
        gids = set()
    return Identity(user, entry.pw_uid, gids | {gid})
