# Copyright (c) llmops.sglang contributors
# Apache License 2.0 (see LICENSE)
"""The adopt-or-revert decision of a tuning trial, with the reasons an operator would write down.

Note that this module util is private to the llmops.sglang collection; do not use it from other collections.

Policy (docs/run-directory.md, "Decision policy"): a candidate is adopted only when the overall comparison
(``compare_sweeps``) says ``improved`` and no level regressed. Capacity the server lost by itself is always
reported, and with ``max_capacity_loss_pct`` set it also blocks adoption. A candidate measured with a stopping rule
(``comparison.sequential``) is confident once the rule decided every level, and its decision says how many repeats
each level needed and why it stopped.
"""
from __future__ import annotations

import typing as t

DEFAULT_POLICY = {"require_verdict": "improved", "max_capacity_loss_pct": None, "allow_low_confidence": False}
# Concurrent requests are what operators size fleets by; KV tokens follow from them.
CAPACITY_ORDER = ("max_running_requests", "max_total_num_tokens", "kv_cache_tokens")


def _levels_text(levels: list[int]) -> str:
    return ",".join(str(level) for level in levels)


def _change_range(comparison: dict) -> str:
    changes = [level["change_pct"] for level in comparison.get("levels", []) if level.get("change_pct") is not None]
    if not changes:
        return ""
    low, high = min(changes), max(changes)
    return f" ({low:+.1f}% .. {high:+.1f}% across levels)" if low != high else f" ({low:+.1f}%)"


def throughput_reason(comparison: dict) -> str:
    verdict = comparison["verdict"]
    if verdict == "improved":
        best = max(comparison["levels"], key=lambda level: level.get("change_pct") or 0)
        return f"improved at C={_levels_text(comparison['improved'])} (best {best['change_pct']:+.1f}% at C={best['concurrency']})"
    if verdict == "regressed":
        return f"regressed at C={_levels_text(comparison['regressed'])}{_change_range(comparison)}"
    if verdict == "mixed":
        return (f"mixed: improved at C={_levels_text(comparison['improved'])}, "
                f"regressed at C={_levels_text(comparison['regressed'])}")
    low_confidence = ""
    if comparison.get("low_confidence"):
        low_confidence = (" (undecided by the stopping rule)" if comparison.get("sequential")
                          else " (low confidence: fewer than 5 runs per side)")
    return f"within noise{_change_range(comparison)}{low_confidence}"


def capacity_losses(side_effects: dict | None) -> list[dict]:
    """Capacity metrics that went down, requests first; KV tokens once (the log states them twice)."""
    changes = (side_effects or {}).get("capacity") or []
    losses = {change["metric"]: change for change in changes if (change.get("change_pct") or 0) < 0}
    kv_total, kv_pool = losses.get("max_total_num_tokens"), losses.get("kv_cache_tokens")
    if kv_total and kv_pool and kv_total["change_pct"] == kv_pool["change_pct"]:
        del losses["kv_cache_tokens"]
    return [losses[metric] for metric in CAPACITY_ORDER if metric in losses]


def _capacity_reason(loss: dict, gained: bool) -> str:
    tail = "" if gained else " with no throughput gain"
    return (f"capacity dropped {abs(loss['change_pct']):.0f}% "
            f"({loss['metric']} {loss['baseline']} -> {loss['candidate']}){tail}")


def _new_adjustments(side_effects: dict | None) -> list[dict]:
    """Args the server set differently than requested AND differently than in the reference deploy:
    an adjustment the reference had too (NEXTN -> EAGLE) is not the candidate's doing."""
    return [entry for entry in (side_effects or {}).get("auto_adjusted", [])
            if entry.get("effective") != entry.get("baseline")]


def _adjustment_reason(entry: dict) -> str:
    if entry.get("requested") is None:
        return f"{entry['arg']} set by the server, not requested"
    return f"{entry['arg']} requested {entry['requested']!r} but the server used {entry['effective']!r}"


def _unconfident_reason(comparison: dict) -> str:
    if comparison.get("sequential"):
        return ("not adopted: the stopping rule left a level undecided (its sweep ended before a boundary decided it, "
                "or it stopped not improved and a later level's improvement needs the regression it did not rule out)")
    return "too few runs to adopt (low confidence: fewer than 5 per side); measure with repeats >= 5"


def decide_trial(comparison: dict, side_effects: dict | None = None, policy: dict | None = None,
                 failure: str | None = None) -> dict[str, t.Any]:
    """Adopt or revert a candidate given its sweep comparison and the side effects the server showed.

    ``failure`` (the candidate did not start or could not be measured) always reverts. Returns ``adopt``,
    ``action`` (``adopt``/``revert``), ``reasons`` (throughput first, then every capacity loss and every
    arg the server changed by itself), ``summary`` (one line: ``revert: within noise; capacity dropped 46%
    (max_running_requests 48 -> 26) with no throughput gain``) and the ``policy`` applied.
    """
    applied = {**DEFAULT_POLICY, **(policy or {})}
    unknown = sorted(set(applied) - set(DEFAULT_POLICY))
    if unknown:
        raise ValueError(f"unknown decision policy key(s) {unknown}; known: {sorted(DEFAULT_POLICY)}")
    if failure:
        reasons = [f"failed: {failure}"]
        return {"adopt": False, "action": "revert", "reasons": reasons, "summary": "revert: " + reasons[0],
                "policy": applied}
    if not isinstance(comparison, dict) or "verdict" not in comparison:
        raise ValueError("comparison must be the result of compare_sweeps (a mapping with 'verdict')")
    gained = comparison["verdict"] == "improved" and not comparison.get("regressed")
    reasons = [throughput_reason(comparison)]
    losses = capacity_losses(side_effects)
    reasons += [_capacity_reason(loss, gained) for loss in losses]
    reasons += [_adjustment_reason(entry) for entry in _new_adjustments(side_effects)]
    limit = applied["max_capacity_loss_pct"]
    over_limit = limit is not None and any(abs(loss["change_pct"]) > limit for loss in losses)
    # compare_sweeps flags levels with fewer than 5 runs per side: 3 runs cannot reach p < 0.05 in a rank test,
    # and a bootstrap over 3 values is fooled by one slow run.
    unconfident = gained and comparison.get("low_confidence") and not applied["allow_low_confidence"]
    adopt = gained and comparison["verdict"] == applied["require_verdict"] and not over_limit and not unconfident
    if over_limit:
        reasons.append(f"capacity loss above the policy limit of {limit}%")
    if unconfident:
        reasons.append(_unconfident_reason(comparison))
    if comparison.get("sequential"):
        reasons.append(comparison["sequential"]["summary"])
    action = "adopt" if adopt else "revert"
    return {"adopt": adopt, "action": action, "reasons": reasons, "summary": f"{action}: " + "; ".join(reasons),
            "policy": applied}
