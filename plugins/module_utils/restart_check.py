# Copyright (c) llmops.sglang contributors
# Apache License 2.0 (see LICENSE)
"""The restart check: an adoption that a server restart's own noise could explain is measured again on a fresh start.

Note that this module util is private to the llmops.sglang collection; do not use it from other collections.

Every verdict compares two server starts, and a start shifts all of its runs and levels alike (GPU clocks, memory
placement, the CUDA graphs it captured): no number of repeats within one start sees that shift, so a candidate whose
start happened to be fast looks improved. docs/run-directory.md, "Restart check":

* **when** (``plan``): the candidate is about to be adopted and none of its improved levels stays significant once
  the restart noise is counted: for every improved level, the mean log ratio minus z x sqrt(se^2 + 2 s^2) is not
  above 0, where se is the level's standard error from its runs (pooled variance, as the stopping rule's; 0 with one
  run a side, where only the restart spread can be weighed), s the per-start CV (``cv_pct``; two starts differ by
  sqrt(2) s) and z the one-sided normal quantile of the level's share of alpha (alpha / levels, the split every
  verdict uses). A clear improvement (the usual +8 % at 1 % run noise) is adopted at once; only one near the noise
  floor of two starts pays the check.
* **how**: the candidate is restarted as it is (same unit: a new start, nothing else changed) and only those improved
  levels are measured again, ``repeats`` runs each, against the same reference.
* **what it decides** (``judge``): the fresh start alone - the first one is what made the adoption look likely, so it
  is not counted again - must show at least half the level's effect threshold at some checked level: the midpoint
  between "no change" and "a change of the threshold", the test that errs equally towards either at that point.
  Confirmed, the adoption stands; otherwise the candidate is reverted with both starts' numbers as the reason.

Pure functions over the sweep documents of the bench module (docs/bench-schema.md).
"""
from __future__ import annotations

import math
import statistics
import typing as t

from ansible_collections.llmops.sglang.plugins.module_utils.sequential_verdict import log_ratio, pct

DEFAULTS = {"cv_pct": 0.6, "repeats": 3}
# The check's measurement of a candidate: this directory inside the candidate's measurement directory.
DIRECTORY = "restart_check"
# Above this a "restart noise" is no noise: a server whose starts differ by 10 % needs fixing, not averaging.
MAX_CV_PCT = 10.0
MAX_REPEATS = 10
NORMAL = statistics.NormalDist()


def validated(options: t.Any, where: str = "tuning_run_restart_check") -> dict | None:
    """The check's options with defaults filled in, None when it is off; ValueError naming ``<where>.<key>``."""
    if options is None:
        return None
    if not isinstance(options, dict):
        raise ValueError(f"{where} must be a mapping like {DEFAULTS} or null (no restart check), got {options!r}")
    unknown = sorted(set(options) - set(DEFAULTS))
    if unknown:
        raise ValueError(f"{where}: unknown key(s) {', '.join(unknown)}; known: {', '.join(DEFAULTS)}")
    checked = {**DEFAULTS, **{key: value for key, value in options.items() if value is not None}}
    cv_pct, repeats = checked["cv_pct"], checked["repeats"]
    if isinstance(cv_pct, bool) or not isinstance(cv_pct, (int, float)) or not 0 < cv_pct <= MAX_CV_PCT:
        raise ValueError(f"{where}.cv_pct must be a number above 0 and at most {MAX_CV_PCT:g} (the spread of one "
                         f"configuration's throughput between server starts, in %), got {cv_pct!r}")
    if isinstance(repeats, bool) or not isinstance(repeats, int) or not 2 <= repeats <= MAX_REPEATS:
        raise ValueError(f"{where}.repeats must be an integer from 2 to {MAX_REPEATS}, got {repeats!r}")
    return {"cv_pct": float(cv_pct), "repeats": repeats}


def _runs(sweep: dict, concurrency: int, metric: str, name: str) -> list[float]:
    for level in sweep.get("levels") or []:
        if level.get("concurrency") == concurrency:
            values = [run.get(metric) for run in level.get("runs") or []]
            if not values or not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values):
                raise ValueError(f"{name} C={concurrency} has no {metric} in every run")
            return [float(v) for v in values]
    raise ValueError(f"{name} has no level with concurrency {concurrency}")


def _change(reference: list[float], candidate: list[float]) -> tuple[float, float]:
    """The mean log ratio and its standard error; with one run a side there is no run spread to estimate (a
    low-confidence comparison, ``allow_low_confidence``): its standard error counts as 0, so only the restart spread
    is weighed."""
    if len(reference) + len(candidate) < 3:
        return math.log(statistics.fmean(candidate) / statistics.fmean(reference)), 0.0
    estimate, se, _df = log_ratio(reference, candidate)
    return estimate, se


def plan(reference: dict, candidate: dict, comparison: dict, options: dict) -> dict:
    """Whether an adopted ``comparison`` (compare_sweeps of ``candidate`` against ``reference``) needs the check.

    Returns ``needed``, ``levels`` (each improved level: ``concurrency``, ``estimate_pct``, ``lower_pct`` - the
    one-sided bound with the restart noise counted -, ``threshold_pct`` and ``needed_pct``, half the threshold),
    ``cv_pct``, ``repeats``, ``z`` and a one-line ``reason``."""
    metric = comparison["parameters"]["metric"]
    compared = comparison["levels"] + [level for level in comparison.get("skipped") or [] if level.get("not_measured")]
    z = NORMAL.inv_cdf(1.0 - comparison["parameters"]["alpha"] / len(compared))
    restart_var = 2.0 * math.log1p(options["cv_pct"] / 100.0) ** 2
    levels = []
    for level in comparison["levels"]:
        if level["verdict"] != "improved":
            continue
        concurrency = level["concurrency"]
        estimate, se = _change(_runs(reference, concurrency, metric, "reference"),
                               _runs(candidate, concurrency, metric, "candidate"))
        threshold = math.log1p(level["threshold_pct"] / 100.0)
        levels.append({"concurrency": concurrency, "estimate_pct": pct(estimate),
                       "lower_pct": pct(estimate - z * math.sqrt(se * se + restart_var)),
                       "threshold_pct": level["threshold_pct"], "needed_pct": pct(threshold / 2.0)})
    robust = [level for level in levels if level["lower_pct"] > 0]
    result = {"needed": bool(levels) and not robust, "levels": levels, **options, "z": z}
    if robust:
        best = max(robust, key=lambda level: level["lower_pct"])
        result["reason"] = (f"not needed: C={best['concurrency']}'s {best['estimate_pct']:+.1f}% stays above 0 with "
                            f"{options['cv_pct']:g}% restart noise counted (lower bound {best['lower_pct']:+.1f}%)")
    elif levels:
        shown = ", ".join(f"C={level['concurrency']} {level['estimate_pct']:+.1f}% (lower bound "
                          f"{level['lower_pct']:+.1f}%)" for level in levels)
        result["reason"] = (f"needed: no improved level stays above 0 with {options['cv_pct']:g}% restart noise "
                            f"counted ({shown}); measuring {_levels_text(levels)} again on a fresh start")
    else:
        result["reason"] = "not needed: no level improved"
    return result


def _levels_text(levels: list[dict]) -> str:
    return "C=" + ",".join(str(level["concurrency"]) for level in levels)


def judge(reference: dict, check_sweep: dict, planned: dict, metric: str) -> dict:
    """The fresh start's verdict on a ``planned`` check: ``confirmed`` when some checked level's change on the fresh
    start alone is at least its ``needed_pct``; the plan with each level's ``check_pct`` and ``passed``, and a
    ``summary`` line."""
    levels = []
    for level in planned["levels"]:
        estimate, _se = _change(_runs(reference, level["concurrency"], metric, "reference"),
                                _runs(check_sweep, level["concurrency"], metric, "restart check sweep"))
        levels.append({**level, "check_pct": pct(estimate), "passed": pct(estimate) >= level["needed_pct"]})
    confirmed = any(level["passed"] for level in levels)
    shown = ", ".join(f"C={level['concurrency']} {level['estimate_pct']:+.1f}% then {level['check_pct']:+.1f}% "
                      f"(needed {level['needed_pct']:+.1f}%)" for level in levels)
    summary = (f"restart check {'confirmed' if confirmed else 'not confirmed'} on a fresh start: {shown}"
               + ("" if confirmed else "; the improvement came with the first start, not with the candidate"))
    return {**planned, "levels": levels, "confirmed": confirmed, "summary": summary}


def pending_decision(decision: dict, planned: dict) -> dict:
    """The decision while the check is to be made: not adopted yet, and why."""
    reasons = decision["reasons"] + [f"restart check {planned['reason']}"]
    return {**decision, "adopt": False, "action": "restart_check", "reasons": reasons,
            "summary": "restart check: " + "; ".join(reasons)}


def checked_decision(decision: dict, judged: dict | None, failure: str | None) -> dict:
    """The decision after the check: adopted as before when it confirmed, reverted (with both starts' numbers, or the
    fresh start's failure) when it did not."""
    if failure:
        reason = f"restart check failed: {failure}"
    else:
        reason = judged["summary"]
    adopt = decision["adopt"] and not failure and judged["confirmed"]
    action = "adopt" if adopt else "revert"
    reasons = decision["reasons"] + [reason]
    return {**decision, "adopt": adopt, "action": action, "reasons": reasons,
            "summary": f"{action}: " + "; ".join(reasons)}
