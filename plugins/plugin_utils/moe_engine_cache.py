# Copyright (c) llmops.sglang contributors
# Apache License 2.0 (see LICENSE)
"""The controller's cache of MoE engine results (docs/moe-engine.md, "Cache"): one entry per key
(module_utils/moe_engine_key.py), content-addressed by the key's sha256, so a second host, fleet or run asking the
same question installs the tuned configs without starting the engine.

Layout: ``<cache_dir>/<sha[:2]>/<sha>.json``, each entry ``{schema, sha256, key, file: {name, configs}, source}``
(``source``: the engine run that produced it: device, release, GPU-minutes, wall time, when). Entries are written
atomically (a temp file in the entry's directory, fsync, rename): a reader sees a whole entry or none. An entry that
cannot be read, belongs to another key or holds invalid configs is a miss with a warning; the engine's next result
replaces it.
"""
from __future__ import annotations

import json
import os
import typing as t
from datetime import datetime, timezone

from ansible_collections.llmops.sglang.plugins.module_utils.atomic_write import write_atomically
from ansible_collections.llmops.sglang.plugins.module_utils.moe_engine_key import key_sha256
from ansible_collections.llmops.sglang.plugins.module_utils.moe_validation import validate_config

ENTRY_SCHEMA = 1
# Where the cache lives when the task names no cache_dir: the controller user's cache, outside the collection (a
# reinstall replaces that) and outside any one run. The MoE stage passes <tuning_run_root>/cache/moe-engine.
DEFAULT_CACHE_DIR = "~/.cache/llmops-sglang/moe-engine"


class Lookup(t.NamedTuple):
    sha256: str
    path: str
    entry: dict | None  # None: a miss
    warning: str | None  # why an entry that was there could not be used


class EngineCache:
    def __init__(self, root: str) -> None:
        self.root = os.path.abspath(os.path.expanduser(root))

    def path(self, sha256: str) -> str:
        return os.path.join(self.root, sha256[:2], f"{sha256}.json")

    def lookup(self, key: dict) -> Lookup:
        """The entry of ``key``, or a miss; an unusable entry is a miss with the reason as ``warning``."""
        sha = key_sha256(key)
        path = self.path(sha)
        try:
            with open(path, encoding="utf-8") as handle:
                entry = json.load(handle)
        except FileNotFoundError:
            return Lookup(sha, path, None, None)
        except (OSError, ValueError) as exc:
            return Lookup(sha, path, None, _unusable(path, f"unreadable: {exc}"))
        problem = _entry_problem(entry, key, sha)
        if problem:
            return Lookup(sha, path, None, _unusable(path, problem))
        return Lookup(sha, path, entry, None)

    def store(self, key: dict, file: dict, source: dict) -> str:
        """Write the entry of ``key`` (``file``: the SGLang file's ``name`` and ``configs``); its path."""
        sha = key_sha256(key)
        entry = {"schema": ENTRY_SCHEMA, "sha256": sha, "key": key,
                 "file": {"name": file["name"], "configs": file["configs"]},
                 "source": {**source, "stored_at": datetime.now(timezone.utc).isoformat(timespec="seconds")}}
        problem = _entry_problem(entry, key, sha)
        if problem:  # the engine's output is checked by moe_tune before this; never cache what a lookup would refuse
            raise ValueError(f"the engine's {key['kernel']} result is not cached: {problem}")
        path = self.path(sha)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        write_atomically(path, (json.dumps(entry, indent=1, sort_keys=True) + "\n").encode())
        return path


def _entry_problem(entry: t.Any, key: dict, sha: str) -> str | None:
    if not isinstance(entry, dict) or entry.get("schema") != ENTRY_SCHEMA:
        return f"not a cache entry of schema {ENTRY_SCHEMA}"
    if entry.get("sha256") != sha or entry.get("key") != key:
        return "it holds another key"
    configs = (entry.get("file") or {}).get("configs")
    errors = validate_config(configs, kernel=key["kernel"])
    if errors:
        return "invalid configs: " + "; ".join(errors)
    if sorted(configs, key=int) != [str(size) for size in key["batch_sizes"]]:
        return f"it holds batch sizes {sorted(configs, key=int)}, not {key['batch_sizes']}"
    return None


def _unusable(path: str, problem: str) -> str:
    return f"MoE engine cache entry {path} is unusable ({problem}); treated as a miss, the engine's result replaces it"
