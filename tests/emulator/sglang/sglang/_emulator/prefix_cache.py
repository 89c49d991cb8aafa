# Copyright (c) llmops.sglang contributors
# Apache License 2.0 (see LICENSE)
"""Prefix (radix) cache stand-in: which leading tokens of a prompt already have KV in the pool.

SGLang keeps the KV of every prefilled and finished sequence in a radix tree keyed by token ids in pages of
`page_size` tokens (sglang 0.5.23 sglang/srt/mem_cache/radix_cache.py: `match_prefix` walks page-aligned keys,
`insert` adds a sequence, `evict` frees least-recently-used leaves when the pool needs room; sglang 0.5.11
radix_cache.py inserts the prompt after its prefill, `cache_unfinished_req`, and prompt + output at the finish,
`cache_finished_req`). The emulator keys each full page by a hash
chained over every page before it, so a key stands for the whole prefix up to that page, as a tree node does:
equal keys mean equal leading tokens. A matched path is touched leaf first, so its root stays more recent than
its leaves and LRU eviction frees leaves first, as the tree does.
"""
from __future__ import annotations

from collections import OrderedDict
from typing import Hashable, Sequence


def page_keys(units: Sequence[Hashable], page_size: int) -> list[int]:
    """One key per full page: the hash of the page's tokens chained to the key of the page before."""
    keys, previous = [], 0
    for start in range(0, len(units) - page_size + 1, page_size):
        previous = hash((previous, tuple(units[start:start + page_size])))
        keys.append(previous)
    return keys


class PrefixCache:
    def __init__(self, page_size: int) -> None:
        self.page_size = page_size
        self._pages: OrderedDict[int, None] = OrderedDict()

    @property
    def cached_tokens(self) -> int:
        return len(self._pages) * self.page_size

    def match(self, keys: Sequence[int], input_len: int) -> int:
        """Cached leading tokens of a prompt, at most input_len - 1: the last token is always computed, its
        logits give the first output token (0.5.23 managers/schedule_batch.py `_compute_max_prefix_len`)."""
        usable = keys[:(input_len - 1) // self.page_size]
        matched = 0
        while matched < len(usable) and usable[matched] in self._pages:
            matched += 1
        for key in reversed(usable[:matched]):
            self._pages.move_to_end(key)
        return matched * self.page_size

    def insert(self, keys: Sequence[int]) -> None:
        for key in reversed(keys):
            self._pages[key] = None
            self._pages.move_to_end(key)

    def evict_to(self, capacity_tokens: int) -> None:
        """Drop least-recently-used pages until the cache fits `capacity_tokens`."""
        while self._pages and self.cached_tokens > max(capacity_tokens, 0):
            self._pages.popitem(last=False)
