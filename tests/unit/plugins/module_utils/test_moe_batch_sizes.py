# Copyright (c) llmops.sglang contributors
# Apache License 2.0 (see LICENSE)
"""Unit tests for plugins/module_utils/moe_batch_sizes.py.

Fixtures live in tests/fixtures/moe_configs/ (see its README for the upstream provenance).
"""
from __future__ import annotations

import pytest

from ansible_collections.llmops.sglang.plugins.module_utils.moe_batch_sizes import DEFAULT_BATCH_SIZES, auto_batch_sizes, resolve_batch_sizes


def test_default_batch_sizes_match_the_tuner():
    assert len(DEFAULT_BATCH_SIZES) == 18
    assert DEFAULT_BATCH_SIZES[:6] == (1, 2, 4, 8, 16, 24) and DEFAULT_BATCH_SIZES[-1] == 4096


def test_auto_batch_sizes_speculative_decoding_with_chunked_prefill():
    result = auto_batch_sizes(26, 4, 8192)
    assert result["batch_sizes"] == [1, 2, 4, 8, 16, 24, 32, 48, 64, 96, 104, 128, 256, 512, 1024, 1536, 2048, 3072, 4096, 8192]
    assert "26 running requests x 4 draft tokens" in result["reasoning"]
    assert "= 104 tokens" in result["reasoning"]
    assert "chunked_prefill_size=8192" in result["reasoning"]


def test_auto_batch_sizes_plain_decode_small_chunk():
    result = auto_batch_sizes(48, None, 2048)
    assert result["batch_sizes"] == [1, 2, 4, 8, 16, 24, 32, 48, 64, 96, 128, 256, 512, 1024, 1536, 2048]
    assert "48 running requests x 1 token per step" in result["reasoning"]


def test_auto_batch_sizes_without_chunked_prefill():
    result = auto_batch_sizes(40, None, -1)
    assert result["batch_sizes"] == [1, 2, 4, 8, 16, 24, 32, 40]
    assert "no prefill sizes" in result["reasoning"]


def test_auto_batch_sizes_rejects_nonsense():
    with pytest.raises(ValueError, match="max_running_requests=0"):
        auto_batch_sizes(0, None, 8192)
    with pytest.raises(ValueError, match="speculative_num_draft_tokens=0"):
        auto_batch_sizes(8, 0, 8192)


def test_batch_sizes_default_auto_and_explicit():
    assert resolve_batch_sizes(None) == {"batch_sizes": list(DEFAULT_BATCH_SIZES),
                                         "reason": "SGLang's default batch sizes (get_default_batch_sizes)"}
    auto = resolve_batch_sizes("auto", 48, 4, 8192)
    assert auto["batch_sizes"][-1] == 8192 and 192 in auto["batch_sizes"]
    assert "48 running requests x 4 draft tokens" in auto["reason"]
    assert resolve_batch_sizes(["64", 1, 8, 8]) == {"batch_sizes": [1, 8, 64], "reason": "given explicitly"}


@pytest.mark.parametrize(("value", "message"), [
    ("auto", "max_running_requests: required with batch_sizes=auto"),
    ([], "batch_sizes: [] must be"),
    ([0, 4], "batch_sizes: [0, 4] must be"),
    ("some", "batch_sizes: 'some' must be"),
    (["x"], "batch_sizes: ['x'] must be"),
])
def test_batch_sizes_rejects(value, message):
    with pytest.raises(ValueError, match=f"^{message}".replace("[", r"\[").replace("]", r"\]")):
        resolve_batch_sizes(value)
