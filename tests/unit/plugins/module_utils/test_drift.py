# Copyright (c) llmops.sglang contributors
# Apache License 2.0 (see LICENSE)
"""The drift check: the same configuration in two starts, and the verdicts a drift of that size could flip."""
from __future__ import annotations

import random

import pytest

from ansible_collections.llmops.sglang.plugins.module_utils.drift import drift_check, verdicts_within_drift
from ansible_collections.llmops.sglang.plugins.module_utils.sweep_stats import compare_sweeps

LEVELS = (1, 16, 64)
BASE = {1: 120.0, 16: 1200.0, 64: 1580.0}


def sweep(factor: float, seed: int, cv: float = 0.005, factors: dict[int, float] | None = None) -> dict:
    """Five runs a level around BASE x factor (x a per-level factor), noise CV ``cv``, seeded."""
    rng = random.Random(seed)
    return {"levels": [{"concurrency": c, "runs": [
        {"agg_tok_s": BASE[c] * factor * (factors or {}).get(c, 1.0) * (1 + rng.gauss(0, cv))} for _ in range(5)]}
        for c in LEVELS]}


def test_the_same_configuration_in_two_quiet_starts_has_not_drifted():
    check = drift_check(sweep(1.0, 1), sweep(1.0, 2), label="moe_tune/gpu1", same_start=True)
    assert check["drifted"] is False and check["moved"] == [] and check["same_start"] is True
    assert set(check["drift_pct"]) == {"1", "16", "64"} and check["largest_pct"] < 1.0
    assert check["summary"].startswith(
        "no drift beyond noise between moe_tune/gpu1 (same server start) and verify (largest difference")
    assert check["comparison"]["verdict"] == "no significant change"


def test_a_slower_second_start_is_drift_named_by_level():
    check = drift_check(sweep(1.0, 1), sweep(1.0, 2, factors={64: 0.95}), label="flags/gpu1/trials/a",
                        same_start=False)
    assert check["drifted"] is True and check["moved"] == [64]
    assert check["largest_concurrency"] == 64 and check["largest_pct"] == pytest.approx(5.0, abs=0.8)
    assert check["earlier"] == "flags/gpu1/trials/a"
    assert "moved beyond noise between flags/gpu1/trials/a (another server start) and verify (largest 5." in check["summary"]
    assert "moved at C=64" in check["summary"]


def test_bad_sweeps_are_named_like_compare_sweeps_names_them():
    with pytest.raises(ValueError, match="baseline"):
        drift_check({"levels": "x"}, sweep(1.0, 2), label="baseline/gpu1", same_start=False)


def decision(label: str, action: str, reference: dict, candidate: dict) -> dict:
    return {"label": label, "action": action, "comparison": compare_sweeps(reference, candidate)}


def test_no_decision_is_listed_when_nothing_drifted():
    quiet = drift_check(sweep(1.0, 1), sweep(1.0, 2), label="baseline/gpu1", same_start=False)
    marginal = decision("flags: a", "adopt", sweep(1.0, 3), sweep(1.03, 4))
    assert verdicts_within_drift(quiet, [marginal]) == []


def test_an_adoption_whose_margin_is_smaller_than_the_drift_is_listed_a_clear_one_is_not():
    drifted = drift_check(sweep(1.0, 1), sweep(0.96, 2), label="moe_tune/gpu1", same_start=False)  # 4% at every level
    marginal = decision("flags: marginal", "adopt", sweep(1.0, 3), sweep(1.03, 4))  # +3%, threshold 2%
    clear = decision("flags: clear", "adopt", sweep(1.0, 5), sweep(1.15, 6))  # +15%
    listed = verdicts_within_drift(drifted, [marginal, clear])
    assert [entry["label"] for entry in listed] == ["flags: marginal"]
    assert "is within 4." in listed[0]["why"] and "of its threshold ±2.0%" in listed[0]["why"]


def test_a_revert_within_noise_that_the_drift_could_have_hidden_is_listed():
    drifted = drift_check(sweep(1.0, 1), sweep(0.96, 2), label="moe_tune/gpu1", same_start=False)
    hidden = decision("flags: hidden", "revert", sweep(1.0, 3), sweep(0.995, 4))
    far = decision("flags: far", "revert", sweep(1.0, 5), sweep(0.80, 6))  # regressed 20%: no drift hides that
    listed = verdicts_within_drift(drifted, [hidden, far])
    assert [entry["label"] for entry in listed] == ["flags: hidden"]
    assert "would pass its threshold" in listed[0]["why"]
