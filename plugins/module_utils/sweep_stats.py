# Copyright (c) llmops.sglang contributors
# Apache License 2.0 (see LICENSE)
"""Statistics over benchmark sweeps: per-level summaries, operator tables, noise-aware A/B verdicts.

Note that this module util is private to the llmops.sglang collection; do not use it from other collections.

A sweep is the document written by the ``bench`` module (see docs/bench-schema.md). The A/B rule
(docs/run-directory.md, "Decision policy"): a level counts as changed only when the difference is statistically
supported
(two-sided Mann-Whitney U p < alpha, or a bootstrap CI of the median ratio that excludes 1) AND large enough
(|change| >= max(min_effect_pct, 2 x pooled CV)). With fewer than three runs per side no test is meaningful,
so only an explicit noise band decides and the level is flagged ``low_confidence``.

A candidate measured with a stopping rule (the ``bench`` module's ``sequential`` option records it as
``sweep.sequential``) stopped its repeats when a group-sequential test (sequential_verdict.py) decided; a fixed-count
test on such a sample would not hold its error rate, so compare_sweeps judges it by the same rule it was measured
with. That is also the rule's only code path: the module asks compare_sweeps after every run.
"""
from __future__ import annotations

import math
import statistics
import typing as t

from ansible_collections.llmops.sglang.plugins.module_utils.sequential_verdict import (
    DESIGN_DEFAULTS,
    leaves_regression_open,
    look_at_level,
    validated_design,
)

THROUGHPUT_METRICS = ("agg_tok_s", "per_req_tok_s", "steady_agg_tok_s")
SUMMARY_FIELDS = ("agg_tok_s", "per_req_tok_s", "steady_agg_tok_s", "tokens", "wall_s")
LATENCY_FIELDS = ("ttft_ms", "itl_ms", "tpot_ms", "e2e_ms")
MIN_RUNS_FOR_TEST = 3
# n >= 5 runs per arm gives the tests their power; 3 or 4 runs is a smoke test, so say so.
MIN_RUNS_FOR_CONFIDENCE = 5
COMPARE_HEADER = "| Concurrency | Baseline (tok/s) | Candidate (tok/s) | Change | Verdict |"
SEQUENTIAL_COMPARE_HEADER = COMPARE_HEADER + " Repeats (why stopped) |"
# The comparison options a stopping rule is bound to: the sweep it stopped must be judged with the same ones.
SEQUENTIAL_COMPARE_KEYS = ("metric", "min_effect_pct", "alpha")
SWEEP_HEADER = "| C | Agg tok/s | Per-req tok/s | Tokens | Wall(s) | Ok |"


def _median(values: list[float]) -> float | None:
    return statistics.median(values) if values else None


def cv_pct(values: list[float]) -> float | None:
    """Coefficient of variation in percent (sample stdev / mean); None when it cannot be estimated."""
    if len(values) < 2:
        return None
    mean = statistics.fmean(values)
    if mean == 0:
        return None
    return statistics.stdev(values) / mean * 100.0


def _runs_of(level: dict, where: str) -> list[dict]:
    runs = level.get("runs")
    if not isinstance(runs, list):
        raise ValueError(f"{where}.runs must be a list of run objects")
    for index, run in enumerate(runs):
        if not isinstance(run, dict):
            raise ValueError(f"{where}.runs[{index}] must be an object, got {type(run).__name__}")
    return runs


def _metric_values(runs: list[dict], metric: str, where: str, *, required: bool) -> list[float]:
    values: list[float] = []
    for index, run in enumerate(runs):
        value = run.get(metric)
        if value is None and not required:
            continue
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            raise ValueError(f"{where}.runs[{index}].{metric} must be a finite number, got {value!r}")
        values.append(float(value))
    return values


def _percentile_maps(runs: list[dict], field: str, where: str) -> list[dict]:
    maps = []
    for index, run in enumerate(runs):
        value = run.get(field)
        if value is not None and not isinstance(value, dict):
            raise ValueError(f"{where}.runs[{index}].{field} must be an object like {{p50, p90, p99}}, got {value!r}")
        maps.append(value or {})
    return maps


def _latency_summary(runs: list[dict], where: str) -> dict[str, dict[str, float | None]]:
    """Median over runs of each run's latency percentiles (never averaged: the mean of p99s is no p99)."""
    summary: dict[str, dict[str, float | None]] = {}
    for field in LATENCY_FIELDS:
        maps = _percentile_maps(runs, field, where)
        quantiles = sorted({key for percentiles in maps for key in percentiles})
        summary[field] = {q: _median([m[q] for m in maps if m.get(q) is not None]) for q in quantiles}
    return summary


def summarize_level(runs: list[dict], *, where: str = "level") -> dict:
    """Summary of one concurrency level: medians over runs, totals of ok/failed, spread of agg tok/s.

    ``where`` names the level in error messages (ValueError) about malformed runs.
    """
    runs = _runs_of({"runs": runs}, where)
    summary: dict[str, t.Any] = {"n_runs": len(runs)}
    for field in SUMMARY_FIELDS:
        summary[field] = _median(_metric_values(runs, field, where, required=False))
    agg = _metric_values(runs, "agg_tok_s", where, required=False)
    summary["agg_tok_s_cv_pct"] = cv_pct(agg)
    summary["agg_tok_s_min"] = min(agg) if agg else None
    summary["agg_tok_s_max"] = max(agg) if agg else None
    for field in ("ok", "failed", "token_mismatch"):
        summary[field] = int(sum(_metric_values(runs, field, where, required=False)))
    summary.update(_latency_summary(runs, where))
    return summary


def _levels_of(sweep: t.Any, name: str) -> list[dict]:
    if not isinstance(sweep, dict):
        raise ValueError(f"{name} must be a sweep object with a 'levels' list, got {type(sweep).__name__}")
    levels = sweep.get("levels")
    if not isinstance(levels, list):
        raise ValueError(f"{name}.levels must be a list")
    for index, level in enumerate(levels):
        where = f"{name}.levels[{index}]"
        if not isinstance(level, dict):
            raise ValueError(f"{where} must be an object")
        concurrency = level.get("concurrency")
        if isinstance(concurrency, bool) or not isinstance(concurrency, int) or concurrency <= 0:
            raise ValueError(f"{where}.concurrency must be a positive integer, got {concurrency!r}")
        _runs_of(level, where)
    return levels


def _format_number(value: float | None, digits: int = 1) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def _markdown_table(header: str, rows: list[list[str]], *, text_columns: int = 0) -> str:
    """Pipe table with numeric columns right-aligned; the last ``text_columns`` columns stay left-aligned."""
    columns = header.count("|") - 1
    separator = "|" + "|".join(["---:"] * (columns - text_columns) + ["---"] * text_columns) + "|"
    lines = [header, separator] + ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines)


def sweep_table(sweep: dict) -> str:
    """Operators' Markdown table of a sweep: one row per level, medians over repeats; Ok = ok/attempted, all repeats."""
    rows = []
    # by concurrency: a level the stopping rule reopened is listed after the level that reopened it
    for index, level in sorted(enumerate(_levels_of(sweep, "sweep")), key=lambda item: item[1]["concurrency"]):
        summary = summarize_level(level["runs"], where=f"sweep.levels[{index}]")
        attempted = summary["ok"] + summary["failed"]
        rows.append([
            str(level["concurrency"]),
            _format_number(summary["agg_tok_s"]),
            _format_number(summary["per_req_tok_s"]),
            _format_number(summary["tokens"], 0),
            _format_number(summary["wall_s"], 2),
            f"{summary['ok']}/{attempted}",
        ])
    return _markdown_table(SWEEP_HEADER, rows)


def _change_pct(baseline: float | None, candidate: float | None) -> float | None:
    if baseline is None or candidate is None or baseline == 0:
        return None
    return (candidate / baseline - 1.0) * 100.0


def _stats_libraries() -> tuple[t.Any, t.Any]:
    # scipy (and numpy, which it requires) are controller dependencies; keep them out of import time.
    try:
        import numpy
        from scipy.stats import mannwhitneyu
    except ImportError as exc:
        raise RuntimeError(
            "compare_sweeps needs scipy (with numpy) on the controller to test levels with >= 3 runs per side; "
            f"install scipy into the controller's Python ({exc})"
        ) from exc
    return numpy, mannwhitneyu


def _mann_whitney_p(baseline: list[float], candidate: list[float]) -> float:
    _numpy, mannwhitneyu = _stats_libraries()
    has_ties = len(set(baseline + candidate)) < len(baseline) + len(candidate)
    # The exact null distribution is cheap and correct for small, tie-free samples; ties need the normal approximation.
    method = "exact" if not has_ties and min(len(baseline), len(candidate)) <= 8 else "asymptotic"
    p_value = float(mannwhitneyu(candidate, baseline, alternative="two-sided", method=method).pvalue)
    return 1.0 if math.isnan(p_value) else p_value


def _bootstrap_ci_pct(baseline: list[float], candidate: list[float], *, alpha: float, n_boot: int,
                      seed: int) -> tuple[float, float]:
    """Percentile bootstrap CI of median(candidate)/median(baseline), expressed as percent change."""
    numpy, _mannwhitneyu = _stats_libraries()
    rng = numpy.random.default_rng(seed)
    base = numpy.asarray(baseline, dtype=float)
    cand = numpy.asarray(candidate, dtype=float)
    base_medians = numpy.median(rng.choice(base, size=(n_boot, base.size), replace=True), axis=1)
    cand_medians = numpy.median(rng.choice(cand, size=(n_boot, cand.size), replace=True), axis=1)
    ratios = cand_medians / base_medians
    low, high = numpy.percentile(ratios, [100.0 * alpha / 2.0, 100.0 * (1.0 - alpha / 2.0)])
    return (float(low) - 1.0) * 100.0, (float(high) - 1.0) * 100.0


def _pooled_cv(baseline: list[float], candidate: list[float]) -> float:
    """Both sides' CVs pooled by their degrees of freedom, as a pooled variance is (the stopping rule's standard
    error pools them so too): a candidate's 2 runs do not weigh as much as the reference's 5."""
    parts = [(len(values) - 1, cv_pct(values)) for values in (baseline, candidate)]
    parts = [(df, cv) for df, cv in parts if cv is not None]
    df = sum(df for df, _cv in parts)
    return math.sqrt(sum(df * cv * cv for df, cv in parts) / df) if parts else 0.0


def _direction(change: float, threshold: float) -> str:
    if change >= threshold:
        return "improved"
    if change <= -threshold:
        return "regressed"
    return "within_noise"


def _effect_threshold(baseline: list[float], candidate: list[float], options: dict) -> float:
    """Smallest change that counts: the configured floor, or twice the pooled run-to-run noise."""
    return max(options["min_effect_pct"], 2.0 * _pooled_cv(baseline, candidate))


def _tested_verdict(baseline: list[float], candidate: list[float], change: float, options: dict) -> dict:
    threshold = _effect_threshold(baseline, candidate, options)
    p_value = _mann_whitney_p(baseline, candidate)
    ci_low, ci_high = _bootstrap_ci_pct(baseline, candidate, alpha=options["alpha"], n_boot=options["n_boot"],
                                        seed=options["seed"])
    significant = p_value < options["alpha"] or ci_low > 0.0 or ci_high < 0.0
    verdict = _direction(change, threshold) if significant else "within_noise"
    confidence = round(100 * (1 - options["alpha"]))
    evidence = (f"change {change:+.2f}% [{confidence}% CI {ci_low:+.2f}, {ci_high:+.2f}], p = {p_value:.3g}, "
                f"threshold ±{threshold:.2f}%: {'significant' if significant else 'not significant'}")
    return {
        "verdict": verdict, "method": "mann_whitney+bootstrap", "p_value": p_value, "ci_low_pct": ci_low,
        "ci_high_pct": ci_high, "threshold_pct": threshold, "significant": significant, "evidence": evidence,
        "low_confidence": min(len(baseline), len(candidate)) < MIN_RUNS_FOR_CONFIDENCE,
    }


def compare_samples(baseline: list[float], candidate: list[float], *, min_effect_pct: float = 2.0,
                    alpha: float = 0.05, n_boot: int = 2000, seed: int = 0) -> dict:
    """The verdict of compare_sweeps for two samples of one higher-is-better metric (per-run values): ``verdict``
    (improved, regressed, within_noise), ``change_pct`` (of the medians), the test's ``p_value``, CI and threshold,
    ``evidence``. Fewer than MIN_RUNS_FOR_TEST runs on a side are judged against the effect threshold only."""
    options = _validated_options("agg_tok_s", min_effect_pct, min_effect_pct, alpha, n_boot, seed)
    change = _change_pct(_median(baseline), _median(candidate))
    if change is None:
        return {"verdict": "within_noise", "change_pct": None, "method": None, "p_value": None, "significant": None,
                "threshold_pct": options["min_effect_pct"],
                "evidence": "no change measurable (a median is missing or the baseline's is 0)"}
    if min(len(baseline), len(candidate)) < MIN_RUNS_FOR_TEST:
        verdict = _noise_band_verdict(change, options)
    else:
        verdict = _tested_verdict(baseline, candidate, change, options)
    return {"change_pct": change, **verdict}


def _noise_band_verdict(change: float, options: dict) -> dict:
    threshold = max(options["noise_band_pct"], options["min_effect_pct"])
    verdict = _direction(change, threshold)
    evidence = (f"change {change:+.2f}% vs noise band ±{threshold:.2f}% "
                f"(fewer than {MIN_RUNS_FOR_TEST} runs per side: no significance test possible)")
    return {
        "verdict": verdict, "method": "noise_band", "p_value": None, "ci_low_pct": None, "ci_high_pct": None,
        "threshold_pct": threshold, "significant": None, "evidence": evidence, "low_confidence": True,
    }


def _sequential_verdict(baseline: list[float], candidate: list[float], options: dict, design: dict,
                        watch: str | None = None) -> dict:
    """The stopping rule's look at this level; confident once a boundary decided it (the design bounds the errors,
    not a run count), low confidence while it would still measure more. ``watch``: the one side the level has to
    settle (sequential_verdict.look_at_level; ``not_improved`` and ``not_regressed`` are within noise)."""
    threshold = _effect_threshold(baseline, candidate, options)
    look = look_at_level(baseline, candidate, threshold, design, watch)
    boundary = look["boundary"]
    verdict = look["decision"] if look["decision"] in ("improved", "regressed") else "within_noise"
    return {
        "verdict": verdict, "method": "group_sequential", "p_value": look.get("p_value"),
        "ci_low_pct": look.get("ci_low_pct"), "ci_high_pct": look.get("ci_high_pct"), "threshold_pct": threshold,
        "significant": boundary in ("efficacy_upper", "efficacy_lower") if "p_value" in look else None,
        "evidence": look["reason"], "low_confidence": look["decision"] == "continue", "sequential": look,
    }


def _compare_level(concurrency: int, baseline_runs: list[dict], candidate_runs: list[dict], where: tuple[str, str],
                   options: dict, design: dict | None, watch: str | None = None) -> dict:
    metric = options["metric"]
    baseline = _metric_values(baseline_runs, metric, where[0], required=True)
    candidate = _metric_values(candidate_runs, metric, where[1], required=True)
    skip_reason = _skip_reason(baseline, candidate, metric)
    if skip_reason:
        return {"concurrency": concurrency, "reason": skip_reason}
    baseline_per_req = _median(_metric_values(baseline_runs, "per_req_tok_s", where[0], required=False))
    candidate_per_req = _median(_metric_values(candidate_runs, "per_req_tok_s", where[1], required=False))
    result = {
        "concurrency": concurrency,
        "baseline_median": _median(baseline), "candidate_median": _median(candidate),
        "baseline_per_req_median": baseline_per_req, "candidate_per_req_median": candidate_per_req,
        "per_req_change_pct": _change_pct(baseline_per_req, candidate_per_req),
        "n_baseline": len(baseline), "n_candidate": len(candidate),
        "cv_baseline_pct": cv_pct(baseline), "cv_candidate_pct": cv_pct(candidate),
    }
    change = _change_pct(result["baseline_median"], result["candidate_median"])
    result["change_pct"] = change
    if design is not None:
        result.update(_sequential_verdict(baseline, candidate, options, design, watch))
        # The rule decides on the mean of the log ratio: the change shown is the one it held against the threshold
        # (the medians' ratio can sit on the other side of it), the medians' change is kept beside it.
        result["median_change_pct"] = change
        result["change_pct"] = result["sequential"].get("estimate_pct", change)
    elif min(len(baseline), len(candidate)) >= MIN_RUNS_FOR_TEST:
        result.update(_tested_verdict(baseline, candidate, change, options))
    else:
        result.update(_noise_band_verdict(change, options))
    return result


def _skip_reason(baseline: list[float], candidate: list[float], metric: str) -> str | None:
    if not baseline or not candidate:
        missing = "both sides" if not (baseline or candidate) else "baseline" if not baseline else "candidate"
        return f"no runs on {missing}"
    if statistics.median(baseline) == 0:
        return f"baseline median {metric} is 0 (every baseline run failed)"
    return None


def _overall_verdict(levels: list[dict]) -> str:
    verdicts = {level["verdict"] for level in levels}
    if "improved" in verdicts and "regressed" in verdicts:
        return "mixed"
    if "improved" in verdicts:
        return "improved"
    if "regressed" in verdicts:
        return "regressed"
    return "no significant change"


def _stop_cell(level: dict) -> str:
    look = level["sequential"]
    return f"{look['repeats']} ({(look['boundary'] or 'undecided').replace('_', ' ')})"


def _compare_table(levels: list[dict], sequential: bool) -> str:
    rows = []
    for level in levels:
        verdict = level["verdict"] + (" (low confidence)" if level["low_confidence"] else "")
        rows.append([
            str(level["concurrency"]), _format_number(level["baseline_median"]),
            _format_number(level["candidate_median"]), f"{level['change_pct']:+.1f}%", verdict,
        ] + ([_stop_cell(level)] if sequential else []))
    header = SEQUENTIAL_COMPARE_HEADER if sequential else COMPARE_HEADER
    return _markdown_table(header, rows, text_columns=2 if sequential else 1)


def _validated_options(metric: str, min_effect_pct: float, noise_band_pct: float, alpha: float, n_boot: int,
                       seed: int) -> dict:
    if metric not in THROUGHPUT_METRICS:
        raise ValueError(f"metric must be one of {', '.join(THROUGHPUT_METRICS)} (higher is better), got {metric!r}")
    if min_effect_pct < 0 or noise_band_pct < 0:
        raise ValueError("min_effect_pct and noise_band_pct must be >= 0")
    if not 0 < alpha < 1:
        raise ValueError(f"alpha must be between 0 and 1, got {alpha!r}")
    if n_boot < 100:
        raise ValueError(f"n_boot must be >= 100 for a usable bootstrap CI, got {n_boot!r}")
    return {"metric": metric, "min_effect_pct": float(min_effect_pct), "noise_band_pct": float(noise_band_pct),
            "alpha": float(alpha), "n_boot": int(n_boot), "seed": int(seed)}


# ---- sequential sweeps ---------------------------------------------------------------------------------------

def _recorded_design(candidate: dict, options: dict) -> dict | None:
    """The stopping rule a candidate sweep was measured with (``sweep.sequential``), checked against ``options``."""
    block = candidate.get("sequential")
    if block is None:
        return None
    if not isinstance(block, dict) or not isinstance(block.get("design"), dict):
        raise ValueError("candidate.sequential must be the object the bench module records ({design, reference_runs})")
    recorded = block["design"]
    for key in SEQUENTIAL_COMPARE_KEYS:
        if recorded.get(key) != options[key]:
            raise ValueError(f"candidate.sequential.design.{key} is {recorded.get(key)!r} but this comparison uses "
                             f"{options[key]!r}: a sweep whose repeats a stopping rule ended is judged by that rule")
    # A design recorded before one_sided_stops existed settled both sides of every level: judge it that way.
    rule = {"one_sided_stops": False, **{key: recorded[key] for key in DESIGN_DEFAULTS if key in recorded}}
    design = validated_design(rule, alpha=options["alpha"], levels=recorded.get("levels"),
                              where="candidate.sequential.design")
    return {**design, "metric": options["metric"], "min_effect_pct": options["min_effect_pct"]}


def _check_reference_runs(candidate: dict, concurrency: int, n_baseline: int) -> None:
    expected = (candidate["sequential"].get("reference_runs") or {}).get(str(concurrency))
    if expected is not None and expected != n_baseline:
        raise ValueError(f"candidate.sequential.reference_runs: C={concurrency} was measured against {expected} "
                         f"reference runs but this baseline has {n_baseline}; compare the sweep with the reference "
                         "it was measured against")


def _why_stopped(look: dict) -> str:
    boundary = look["boundary"]
    if boundary in ("efficacy_upper", "efficacy_lower"):
        side = "upper" if boundary == "efficacy_upper" else "lower"
        return f"{look['decision']}, t = {look['statistic']:+.1f} crossed the {side} boundary"
    if boundary == "no_change":
        return f"no change, inside ±{look['threshold_pct']:.1f}%"
    if boundary == "no_improvement" and look.get("open_regression"):
        return (f"not improved, below +{look['threshold_pct']:.1f}%, but a regression is not ruled out and "
                f"C={look['open_regression']} improved after it")
    if boundary == "no_improvement":
        return f"not improved, below +{look['threshold_pct']:.1f}% (no level before it improved)"
    if boundary == "no_regression":
        return f"not regressed, above -{look['threshold_pct']:.1f}% (a level before it improved)"
    if boundary == "max_repeats" and look["decision"] == "not_regressed":
        return "not regressed, max_repeats reached (a level before it improved)"
    if boundary == "max_repeats":
        return "no change, max_repeats reached"
    return "undecided"


def _sequential_summary(compared: list[dict], skipped: list[dict], design: dict) -> dict:
    repeats = {level["concurrency"]: level["sequential"]["repeats"] for level in compared}
    parts = [f"C={level['concurrency']} {level['sequential']['repeats']} ({_why_stopped(level['sequential'])})"
             for level in compared]
    left_out = [level for level in skipped if level.get("not_measured")]
    not_measured = [level["concurrency"] for level in left_out]
    if left_out:
        parts.append(f"C={','.join(map(str, not_measured))} not measured ({left_out[0]['reason']})")
    summary = (f"repeats needed (sequential, {design['min_repeats']}-{design['max_repeats']} per level): "
               + "; ".join(parts))
    return {"design": design, "repeats": repeats, "total_runs": sum(repeats.values()),
            "decided": all(not level["low_confidence"] for level in compared), "not_measured": not_measured,
            "summary": summary}


def _skipped_level(candidate: dict, concurrency: int, side: str) -> dict:
    """A level only one side has; the candidate's own record says why a stopping rule left it out."""
    for entry in candidate.get("not_measured") or []:
        if isinstance(entry, dict) and entry.get("concurrency") == concurrency:
            return {"concurrency": concurrency, "reason": str(entry.get("reason")), "not_measured": True}
    return {"concurrency": concurrency, "reason": f"level missing from the {side} sweep"}


def _watch(design: dict | None, earlier: list[dict]) -> str | None:
    """What the next level has to settle under one_sided_stops (None: both sides, or no stopping rule)."""
    if design is None or not design["one_sided_stops"]:
        return None
    return "regression" if any(level["verdict"] == "improved" for level in earlier) else "improvement"


def _open_regressions(levels: list[dict]) -> None:
    """A level that stopped ``not_improved`` settled only its upper side; once a level after it improved, it decides
    the adoption by whether it regressed, so unless its interval also ruled that out, it is left undecided."""
    first = next((index for index, level in enumerate(levels) if level["verdict"] == "improved"), None)
    if first is None:
        return
    later = levels[first]["concurrency"]
    for level in levels[:first]:
        look = level.get("sequential") or {}
        if leaves_regression_open(look):
            look["open_regression"] = later
            level["low_confidence"] = True
            level["evidence"] += (f"; C={later} improved after it and this level's interval does not rule out a "
                                  f"regression beyond -{look['threshold_pct']:.2f}%: undecided")


def compare_sweeps(baseline: dict, candidate: dict, *, metric: str = "agg_tok_s", min_effect_pct: float = 2.0,
                   noise_band_pct: float = 5.0, alpha: float = 0.05, n_boot: int = 2000, seed: int = 0) -> dict:
    """Compare two sweeps level by level (matched by concurrency) and give an honest overall verdict.

    A candidate measured with a stopping rule (``candidate.sequential``) is judged by that rule: each level's
    verdict is the rule's decision at its last run, and the result gets ``sequential`` (repeats per level, whether
    every level was decided, a one-line ``summary``). Raises ValueError naming the offending field when an input is
    malformed or no level can be compared.
    """
    options = _validated_options(metric, min_effect_pct, noise_band_pct, alpha, n_boot, seed)
    baseline_levels = {level["concurrency"]: (i, level) for i, level in enumerate(_levels_of(baseline, "baseline"))}
    candidate_levels = {level["concurrency"]: (i, level) for i, level in enumerate(_levels_of(candidate, "candidate"))}
    design = _recorded_design(candidate, options)
    compared: list[dict] = []
    skipped: list[dict] = []
    # A sequential candidate's levels are judged in the order they were measured (the sweep's), since with
    # one_sided_stops what a level has to settle depends on whether a level before it improved.
    order = sorted(baseline_levels.keys() | candidate_levels.keys())
    if design is not None:
        order = sorted(order, key=lambda c: candidate_levels[c][0] if c in candidate_levels else len(candidate_levels))
    for concurrency in order:
        if concurrency not in baseline_levels or concurrency not in candidate_levels:
            side = "baseline" if concurrency not in baseline_levels else "candidate"
            skipped.append(_skipped_level(candidate, concurrency, side))
            continue
        (b_index, b_level), (c_index, c_level) = baseline_levels[concurrency], candidate_levels[concurrency]
        where = (f"baseline.levels[{b_index}]", f"candidate.levels[{c_index}]")
        if design is not None:
            _check_reference_runs(candidate, concurrency, len(b_level["runs"]))
        level = _compare_level(concurrency, b_level["runs"], c_level["runs"], where, options, design,
                               _watch(design, compared))
        (skipped if "reason" in level else compared).append(level)
    _open_regressions(compared)
    compared.sort(key=lambda level: level["concurrency"])
    skipped.sort(key=lambda level: level["concurrency"])
    if not compared:
        raise ValueError("baseline.levels and candidate.levels have no concurrency level with runs on both sides")
    result = {
        "metric": metric,
        "verdict": _overall_verdict(compared),
        "improved": [level["concurrency"] for level in compared if level["verdict"] == "improved"],
        "regressed": [level["concurrency"] for level in compared if level["verdict"] == "regressed"],
        "low_confidence": any(level["low_confidence"] for level in compared),
        "levels": compared,
        "skipped": skipped,
        "parameters": options,
        "table": _compare_table(compared, design is not None),
    }
    if design is not None:
        result["sequential"] = _sequential_summary(compared, skipped, design)
    return result


def sequential_plan(reference: dict, concurrency_levels: t.Sequence[int], options: dict) -> dict:
    """Check a stopping rule for measuring ``concurrency_levels`` against ``reference`` before anything is sent.

    ``options`` holds the rule (sequential_verdict.DESIGN_DEFAULTS' keys) and the comparison it is bound to
    (``metric``, ``min_effect_pct``, ``alpha``). Returns what a sequential sweep records as ``sweep.sequential``:
    ``{design, reference_runs: {concurrency: runs}}``. ValueError names the field (``sequential.<key>`` or
    ``reference_sweep...``).
    """
    compare = {key: options[key] for key in SEQUENTIAL_COMPARE_KEYS if options.get(key) is not None}
    try:
        checked = _validated_options(compare.get("metric", "agg_tok_s"), compare.get("min_effect_pct", 2.0), 0.0,
                                     compare.get("alpha", 0.05), 2000, 0)
    except ValueError as exc:
        raise ValueError(f"sequential.{exc}") from exc
    rule = {key: value for key, value in options.items() if key not in SEQUENTIAL_COMPARE_KEYS}
    design = validated_design(rule, alpha=checked["alpha"], levels=len(concurrency_levels))
    design.update(metric=checked["metric"], min_effect_pct=checked["min_effect_pct"])
    return {"design": design, "reference_runs": _reference_runs(reference, concurrency_levels, checked["metric"])}


def _reference_runs(reference: dict, concurrency_levels: t.Sequence[int], metric: str) -> dict[str, int]:
    levels = {level["concurrency"]: (i, level) for i, level in enumerate(_levels_of(reference, "reference_sweep"))}
    runs: dict[str, int] = {}
    for concurrency in concurrency_levels:
        if concurrency not in levels:
            raise ValueError(f"reference_sweep has no level with concurrency {concurrency} (it has "
                             f"{sorted(levels)}); measure the reference at every level of concurrency_levels")
        index, level = levels[concurrency]
        where = f"reference_sweep.levels[{index}]"
        count = len(_metric_values(level["runs"], metric, where, required=True))
        if count < 2:
            raise ValueError(f"{where} (concurrency {concurrency}) has {count} run(s); a sequential verdict needs at "
                             "least 2 reference runs per level (measure the reference with repeats >= 2)")
        runs[str(concurrency)] = count
    return runs


def sequential_stop_rule(reference: dict, plan: dict) -> t.Callable[[int, list[dict]], dict | None]:
    """For the bench clients: after each run of a level, None to measure another, or the look that stops the level
    (``ends_sweep`` set when it regressed and the rule stops the sweep there: that candidate cannot be adopted).

    Each look is compare_sweeps on that level, after the first level that stopped improved (if any: with
    ``one_sided_stops`` the look then only asks whether this level regressed, before one whether it improved), so the
    module stops exactly where the final verdict decides. The look at the first improved level lists in ``reopens``
    the levels before it that stopped ``not_improved`` without ruling out a regression: the adoption now depends on
    that, so the bench clients measure them again (``sweep_order``), this time watching for a regression."""
    design = plan["design"]
    improved: list[dict] = []
    unsettled: list[int] = []

    def look(concurrency: int, runs: list[dict]) -> dict | None:
        earlier = [level for level in improved if level["concurrency"] != concurrency][:1]
        partial = {"levels": earlier + [{"concurrency": concurrency, "runs": runs}], "sequential": plan}
        result = compare_sweeps(reference, partial, metric=design["metric"], min_effect_pct=design["min_effect_pct"],
                                alpha=design["alpha"])
        decided = next(level for level in result["levels"] if level["concurrency"] == concurrency)["sequential"]
        if decided["decision"] == "continue":
            return None
        stopped = {**decided, "ends_sweep": decided["decision"] == "regressed" and design["stop_on_regression"]}
        if leaves_regression_open(decided):
            unsettled.append(concurrency)
        if decided["decision"] == "improved" and not earlier:
            improved.append({"concurrency": concurrency, "runs": list(runs)})
            stopped["reopens"] = unsettled[:]
        return stopped
    return look
