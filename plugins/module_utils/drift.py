# Copyright (c) llmops.sglang contributors
# Apache License 2.0 (see LICENSE)
"""Drift check: one configuration measured twice in a tuning run, and the verdicts a drift of that size could flip.

Note that this module util is private to the llmops.sglang collection; do not use it from other collections.

Every verdict of a run compares two server starts made at different times: the candidate now against the adopted
configuration measured earlier (the baseline hours ago for the first trial). Whatever moves between the two - GPU
clocks and temperature, another tenant on the node, the placement of a start - goes into the verdict as if the flag
had done it, and repeats within one start cannot see it. The verify stage starts the adopted configuration once more
at the end of the run anyway (to check what is deployed), so comparing that start with the same configuration's
earlier measurement measures the drift at no extra restart: the same configuration, two starts, the run's duration
apart (docs/run-directory.md, "Drift check").
"""
from __future__ import annotations

import typing as t

from ansible_collections.llmops.sglang.plugins.module_utils.sweep_stats import compare_sweeps

MOVED_VERDICTS = ("improved", "regressed")


def _level_drift(comparison: dict) -> dict[int, float]:
    return {level["concurrency"]: abs(level["change_pct"]) for level in comparison["levels"]
            if level.get("change_pct") is not None}


def drift_check(earlier: dict, again: dict, *, label: str, same_start: bool, **compare_options: t.Any) -> dict:
    """Compare ``again`` (the configuration measured at the end of the run) with ``earlier`` (its measurement
    ``label``); ``same_start``: both in one server start (verify found it running and did not restart it), so the
    check sees what moved over time but not the spread between starts.

    ``drifted`` is true when some level moved significantly and beyond the effect threshold, by the same test and
    options every verdict of the run uses, its ``alpha`` split over the levels (one check, not one per level);
    ``drift_pct`` is |change| per level (JSON keys: strings), the size of
    shift that the run's verdicts are compared with in ``verdicts_within_drift``."""
    # Family-wise across the levels (Bonferroni): with the verdicts' alpha at each of 5 levels, one quiet
    # configuration in two starts would be called drifted about 1 time in 6 (benchmarks/verdict_cost.py).
    levels = len(earlier.get("levels") or ()) if isinstance(earlier, dict) else 0
    options = {**compare_options, "alpha": compare_options.get("alpha", 0.05) / max(levels, 1)}
    comparison = compare_sweeps(earlier, again, **options)
    moved = sorted(comparison["improved"] + comparison["regressed"])
    drift = _level_drift(comparison)
    largest = max(drift, key=drift.__getitem__)
    size = f"{drift[largest]:.1f}% at C={largest}"
    where = f"{label} ({'same server start' if same_start else 'another server start'})"
    if moved:
        summary = (f"drift: the adopted configuration moved beyond noise between {where} and verify (largest {size}; "
                   f"moved at C={', '.join(map(str, moved))}); verdicts of this run with a smaller margin may be "
                   "the drift's, not the configuration's")
    else:
        summary = f"no drift beyond noise between {where} and verify (largest difference {size})"
    return {"drifted": bool(moved), "earlier": label, "same_start": same_start, "moved": moved,
            "drift_pct": {str(c): round(v, 2) for c, v in sorted(drift.items())},
            "largest_pct": round(drift[largest], 2), "largest_concurrency": largest,
            "summary": summary, "comparison": comparison}


def _flipped(level: dict, shift: float) -> str | None:
    """How a shift of ``shift`` percent could have changed this level's verdict, or None if it could not."""
    change, threshold = level.get("change_pct"), level.get("threshold_pct")
    if change is None or threshold is None:
        return None
    if level.get("verdict") in MOVED_VERDICTS and abs(change) - shift < threshold:
        return f"C={level['concurrency']} {change:+.1f}% is within {shift:.1f}% of its threshold ±{threshold:.1f}%"
    if level.get("verdict") == "within_noise" and abs(change) + shift >= threshold:
        return (f"C={level['concurrency']} {change:+.1f}% would pass its threshold ±{threshold:.1f}% "
                f"with {shift:.1f}% more")
    return None


def verdicts_within_drift(drift: dict, decisions: t.Iterable[dict]) -> list[dict]:
    """The run's decisions a drift as large as the measured one could have flipped (none when nothing drifted).

    ``decisions``: ``{"label", "action", "comparison"}`` per decided configuration. An adopted one is listed when
    every level that made it improve is within the drift of its threshold; a reverted one when a level within noise
    would have crossed its threshold shifted by the drift."""
    if not drift.get("drifted"):
        return []
    shifts = {int(c): pct for c, pct in drift["drift_pct"].items()}
    fragile = []
    for decision in decisions:
        levels = (decision.get("comparison") or {}).get("levels") or []
        reasons = [(level, _flipped(level, shifts.get(level["concurrency"], drift["largest_pct"]))) for level in levels]
        if decision["action"] == "adopt":
            improved = [(level, why) for level, why in reasons if level.get("verdict") == "improved"]
            listed = [why for _level, why in improved] if improved and all(why for _level, why in improved) else []
        else:
            listed = [why for level, why in reasons if why and level.get("verdict") == "within_noise"]
        if listed:
            fragile.append({"label": decision["label"], "action": decision["action"], "why": "; ".join(listed)})
    return fragile
