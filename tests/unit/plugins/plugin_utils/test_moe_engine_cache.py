# Copyright (c) llmops.sglang contributors
# Apache License 2.0 (see LICENSE)
"""The controller's MoE engine cache on a real directory: content-addressed entries, atomic writes, hits, misses,
and entries that cannot be used (corrupt, foreign, invalid) read as misses with a warning."""
from __future__ import annotations

import json
import os

import pytest

from ansible_collections.llmops.sglang.plugins.module_utils.moe_engine_key import key_sha256
from ansible_collections.llmops.sglang.plugins.plugin_utils import moe_engine_cache
from ansible_collections.llmops.sglang.plugins.plugin_utils.moe_engine_cache import EngineCache

ENTRY = {"BLOCK_SIZE_M": 16, "BLOCK_SIZE_N": 64, "BLOCK_SIZE_K": 128, "GROUP_SIZE_M": 1, "num_warps": 4,
         "num_stages": 4}
KEY = {"schema": 1, "engine_version": 1, "gpu_name": "NVIDIA H100 80GB HBM3", "gpu_capability": "9.0",
       "triton": "3.6.0", "kernel_source_sha256": "ab" * 32,
       "shape": {"E": 256, "N": 256, "hidden": 3072, "topk": 8, "dtype": "bf16"},
       "quantisation": {"dtype": "auto", "per_channel_quant": False, "block_shape": None}, "kernel": "up",
       "batch_sizes": [1, 8], "search_space": {"mode": "pruned", "sha256": "cd" * 32}}
FILE = {"name": "E=256,N=256,device_name=NVIDIA_H100_80GB_HBM3.json", "configs": {"1": ENTRY, "8": ENTRY}}
SOURCE = {"host": "gpu1", "gpu_minutes": 3.9, "wall_s": 234.8}


@pytest.fixture
def cache(tmp_path) -> EngineCache:
    return EngineCache(str(tmp_path / "cache"))


def test_a_stored_entry_is_a_hit_at_its_content_address(cache, tmp_path):
    assert cache.lookup(KEY).entry is None and cache.lookup(KEY).warning is None  # empty: a plain miss
    path = cache.store(KEY, FILE, SOURCE)
    sha = key_sha256(KEY)
    assert path == str(tmp_path / "cache" / sha[:2] / f"{sha}.json")
    hit = cache.lookup(dict(reversed(list(KEY.items()))))  # the same key in another order
    assert hit.sha256 == sha and hit.path == path and hit.warning is None
    assert hit.entry["file"] == FILE and hit.entry["key"] == KEY
    assert hit.entry["source"]["gpu_minutes"] == 3.9 and hit.entry["source"]["stored_at"]


@pytest.mark.parametrize("changes", [{"kernel": "down"}, {"batch_sizes": [1, 8, 64]}, {"triton": "3.5.1"}])
def test_another_key_is_a_miss(cache, changes):
    cache.store(KEY, FILE, SOURCE)
    lookup = cache.lookup({**KEY, **changes})
    assert lookup.entry is None and lookup.warning is None


def test_the_store_is_atomic_no_temp_file_stays_and_a_failed_write_keeps_the_old_entry(cache, monkeypatch):
    path = cache.store(KEY, FILE, SOURCE)
    assert os.listdir(os.path.dirname(path)) == [os.path.basename(path)]
    before = open(path, encoding="utf-8").read()

    def no_rename(src, dst):
        raise OSError("disk full")

    monkeypatch.setattr(os, "replace", no_rename)
    with pytest.raises(OSError, match="disk full"):
        cache.store(KEY, {**FILE, "configs": {"1": {**ENTRY, "num_warps": 8}, "8": ENTRY}}, SOURCE)
    assert open(path, encoding="utf-8").read() == before
    assert os.listdir(os.path.dirname(path)) == [os.path.basename(path)]


@pytest.mark.parametrize("content, problem", [
    ('{"schema": 1, "sha256": "', "unreadable"),
    ("[]", "not a cache entry of schema 1"),
    (None, "it holds another key"),
])
def test_an_unusable_entry_is_a_miss_with_a_warning_and_the_next_store_replaces_it(cache, content, problem):
    path = cache.store(KEY, FILE, SOURCE)
    if content is None:  # an entry of another key at this address
        entry = json.loads(open(path, encoding="utf-8").read())
        content = json.dumps({**entry, "key": {**KEY, "kernel": "down"}})
    with open(path, "w", encoding="utf-8") as handle:
        handle.write(content)
    lookup = cache.lookup(KEY)
    assert lookup.entry is None
    assert lookup.warning.startswith(f"MoE engine cache entry {path} is unusable (") and problem in lookup.warning
    assert lookup.warning.endswith("treated as a miss, the engine's result replaces it")
    cache.store(KEY, FILE, SOURCE)
    assert cache.lookup(KEY).entry is not None


def test_invalid_configs_are_neither_stored_nor_served(cache):
    with pytest.raises(ValueError, match="the engine's up result is not cached: invalid configs"):
        cache.store(KEY, {**FILE, "configs": {"1": {"BLOCK_SIZE_M": 16}, "8": ENTRY}}, SOURCE)
    with pytest.raises(ValueError, match=r"it holds batch sizes \['1'\], not \[1, 8\]"):
        cache.store(KEY, {**FILE, "configs": {"1": ENTRY}}, SOURCE)
    assert cache.lookup(KEY).entry is None and not os.path.exists(cache.lookup(KEY).path)
    path = cache.store(KEY, FILE, SOURCE)
    entry = json.loads(open(path, encoding="utf-8").read())
    entry["file"]["configs"]["8"]["num_warps"] = "many"
    with open(path, "w", encoding="utf-8") as handle:
        json.dump(entry, handle)
    assert "invalid configs" in cache.lookup(KEY).warning


def test_the_default_directory_is_the_users_cache_outside_the_collection():
    assert moe_engine_cache.DEFAULT_CACHE_DIR == "~/.cache/llmops-sglang/moe-engine"
    root = EngineCache(moe_engine_cache.DEFAULT_CACHE_DIR).root
    assert root == os.path.expanduser("~/.cache/llmops-sglang/moe-engine")
