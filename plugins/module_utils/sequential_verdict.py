# Copyright (c) llmops.sglang contributors
# Apache License 2.0 (see LICENSE)
"""Group-sequential stopping rule for A/B verdicts: after each candidate repeat, stop or measure one more.

Note that this module util is private to the llmops.sglang collection; do not use it from other collections.

The reference configuration's runs are measured already (a fixed count); the candidate's runs arrive one at a time.
At every look k (min_repeats <= k <= max_repeats candidate runs) a level is judged on the log of its metric with a
pooled-variance t statistic T_k = (mean log candidate - mean log reference) / se_k, where
se_k = s * sqrt(1/n_reference + 1/k). The candidate's mean is a random walk in the information
I_k = 1 / se_k^2 (the reference mean is shared by every look), so the looks have the canonical joint distribution of
group-sequential tests (Jennison & Turnbull, ch. 3) at the information fractions t_k = I_k / I_max.

Two boundaries, each from a Lan-DeMets spending function over those fractions (recursive numerical integration of
the joint distribution, Armitage-McPherson-Rowe), converted look by look to Student-t quantiles with the look's
n_reference + k - 2 degrees of freedom:

* efficacy, two-sided, spending the level's share of ``alpha``: ``improved`` (``regressed``) when T_k crosses the
  upper (lower) boundary AND the change is at least the effect threshold the fixed rule uses
  (max(min_effect_pct, 2 x pooled CV)). A sweep is adopted when any of its L levels improved, so each level spends
  alpha / L (Bonferroni): under no true change the chance that some level of the sweep ever claims a change is at
  most alpha;
* no change, spending ``beta``: ``no_change`` when the change's repeated confidence interval, built from the
  one-sided beta design, lies inside (-threshold, +threshold). (Z_k - theta sqrt(I_k)) has the null distribution
  whatever the true effect theta, so a true change of at least the threshold is stopped as ``no_change`` at some look
  with probability at most beta. The boundary is non-binding: it was computed as if efficacy never stopped, which
  only makes it conservative.

* one-sided stops (``one_sided_stops``, the default): a sweep is adopted when a level improved and none regressed,
  so a level only has to settle the side that can still change that. Before any level of the sweep improved
  (``watch`` ``improvement``) it stops ``not_improved`` as soon as the upper side of that one-sided beta interval
  lies below +threshold (a true improvement at least as large as the threshold stops this way with probability at
  most beta), unless the change is at or beyond -threshold: a likely regression is measured on towards its efficacy
  boundary, which ends the sweep. After a level improved (``watch`` ``regression``) it stops ``not_regressed`` as
  soon as the lower side alone lies above -threshold (a true regression at least as large as the threshold passes at
  most beta). A level that stopped ``not_improved`` before a later level improved has to rule out a regression as
  well (``rules_out_regression``, the same lower side): the bench module measures it on after the improved level
  (``reopens``), and a sweep in which it did not is undecided and not adopted. Crossing an efficacy boundary still
  stops a level ``improved`` or ``regressed``. The levels are judged in the order they were measured (the sweep's),
  so these are the decisions the bench module stopped on.

At max_repeats the last look decides: the efficacy boundary there spends what is left of alpha, and a level that
does not cross it is ``no_change`` (``not_regressed`` while watching for a regression). Pure functions; Student's t
from scipy, which the ``bench`` module's Python on the GPU host (SGLang's venv) has because SGLang requires it.
"""
from __future__ import annotations

import functools
import math
import statistics
import typing as t

SPENDING_FUNCTIONS = ("obrien_fleming", "pocock")
DECISIONS = ("continue", "improved", "regressed", "no_change", "not_improved", "not_regressed")
# What a level watches for under one_sided_stops: the side of its interval that can still change the adoption.
WATCHES = ("improvement", "regression")
# beta 0.2: a change as large as the effect threshold is stopped as "no change" at most 20% of the time (the usual
# 80% power); the fixed 5-repeat rule finds a change of exactly the threshold about half the time.
DESIGN_DEFAULTS = {"min_repeats": 2, "max_repeats": 10, "spending": "obrien_fleming", "futility_spending": "pocock",
                   "beta": 0.2, "stop_on_regression": True, "one_sided_stops": True}
# Past 50 repeats a sweep costs hours of GPU time per configuration; the boundary recursion is quadratic in looks.
MAX_REPEATS_LIMIT = 50
# Grid of the recursive integration: 201 Simpson points per look keep boundaries within 1e-3 of published tables.
GRID_POINTS = 201
# Densities beyond 8 standard deviations carry less than 1e-15 probability.
GRID_HALF_WIDTH_SD = 8.0
NORMAL = statistics.NormalDist()


# ---- spending functions -------------------------------------------------------------------------------------

def spent(fraction: float, total: float, spending: str) -> float:
    """One-sided error spent by information fraction ``fraction`` (Lan & DeMets 1983; Kim & DeMets 1987).

    ``obrien_fleming``: 2 - 2 Phi(z_{1-total/2} / sqrt(t)), almost nothing early, nearly all at the end (the last
    look is close to a fixed-sample test). ``pocock``: total * ln(1 + (e - 1) t), spread evenly over the looks.
    A two-sided design spends alpha/2 this way on each side (gsDesign's convention, so the boundaries match the
    published tables).
    """
    if fraction <= 0:
        return 0.0
    fraction = min(fraction, 1.0)
    if spending == "obrien_fleming":
        return 2.0 - 2.0 * NORMAL.cdf(NORMAL.inv_cdf(1.0 - total / 2.0) / math.sqrt(fraction))
    return total * math.log(1.0 + (math.e - 1.0) * fraction)


# ---- Student t ----------------------------------------------------------------------------------------------

def _student_t() -> t.Any:
    """scipy.stats.t, imported when a look is made: every SGLang release requires scipy (Requires-Dist: scipy in the
    METADATA of sglang 0.5.11 to 0.5.23), so the GPU host's Python has it, and the controller needs it anyway."""
    try:
        from scipy import stats
    except ImportError as exc:
        raise RuntimeError("the sequential verdict needs scipy in the Python that runs it (SGLang's venv on the GPU "
                           "host, the controller's for reports); install scipy there") from exc
    return stats.t


def t_upper_tail(value: float, df: float) -> float:
    """P(T > value) for Student's t with ``df`` degrees of freedom."""
    return float(_student_t().sf(value, df))


def t_quantile_upper(tail: float, df: float) -> float:
    """The value with P(T > value) = ``tail`` (0 < tail <= 0.5); infinity for a tail too small to matter."""
    if tail <= 1e-300:
        return math.inf
    return float(_student_t().isf(tail, df))


# ---- boundaries by recursive integration -------------------------------------------------------------------

def _simpson_weights(points: int, step: float) -> list[float]:
    return [step / 3.0 * (1 if i in (0, points - 1) else 4 if i % 2 else 2) for i in range(points)]


def _grid(low: float, high: float) -> tuple[list[float], list[float]]:
    step = (high - low) / (GRID_POINTS - 1)
    return [low + i * step for i in range(GRID_POINTS)], _simpson_weights(GRID_POINTS, step)


def _continuation_range(z_bound: float, fraction: float, two_sided: bool) -> tuple[float, float]:
    """Where paths continue after a look, on the score scale B = Z sqrt(t) (variance t), truncated at 8 sd."""
    edge = GRID_HALF_WIDTH_SD * math.sqrt(fraction)
    bound = min(z_bound * math.sqrt(fraction), edge)
    return (-bound, bound) if two_sided else (-bound, edge)


def _exit_probability(nodes: list[tuple[float, float]], bound: float, sd: float, two_sided: bool) -> float:
    """P(the next look crosses ``bound``) from continuing paths given as (score, weight x density) nodes."""
    total = 0.0
    for score, mass in nodes:
        below = NORMAL.cdf((-bound - score) / sd)
        above = NORMAL.cdf((score - bound) / sd) if two_sided else 0.0
        total += mass * (below + above)
    return total


def _solve_bound(nodes: list[tuple[float, float]], target: float, fraction: float, sd: float,
                 two_sided: bool) -> float:
    """The z boundary whose crossing probability at this look is ``target`` (bisection; crossing falls with z)."""
    low, high = 0.0, GRID_HALF_WIDTH_SD + 4.0
    if _exit_probability(nodes, high * math.sqrt(fraction), sd, two_sided) >= target:
        return high
    for _step in range(60):
        middle = (low + high) / 2.0
        if _exit_probability(nodes, middle * math.sqrt(fraction), sd, two_sided) > target:
            low = middle
        else:
            high = middle
    return (low + high) / 2.0


def _propagate(nodes: list[tuple[float, float]], grid: tuple[list[float], list[float]],
               sd: float) -> list[tuple[float, float]]:
    """Density of continuing paths at the next look's grid points (Gaussian increments of variance sd^2)."""
    scale = 1.0 / (sd * math.sqrt(2.0 * math.pi))
    points, weights = grid
    propagated = []
    for point, weight in zip(points, weights):
        density = sum(mass * math.exp(-0.5 * ((point - score) / sd) ** 2) for score, mass in nodes) * scale
        propagated.append((point, weight * density))
    return propagated


@functools.lru_cache(maxsize=64)
def crossing_boundaries(fractions: tuple[float, ...], per_side: float, spending: str,
                        two_sided: bool) -> tuple[float, ...]:
    """z boundaries of a group-sequential design: under no drift, the probability of first crossing a side at look
    j is spent(t_j) - spent(t_{j-1}) of ``per_side``; ``two_sided`` crosses |Z| >= c, otherwise Z <= -c."""
    sides = 2.0 if two_sided else 1.0
    bounds = [NORMAL.inv_cdf(1.0 - spent(fractions[0], per_side, spending))]
    nodes = _first_look_nodes(bounds[0], fractions[0], two_sided)
    for previous, fraction in zip(fractions, fractions[1:]):
        sd = math.sqrt(fraction - previous)
        target = sides * (spent(fraction, per_side, spending) - spent(previous, per_side, spending))
        bounds.append(_solve_bound(nodes, target, fraction, sd, two_sided))
        nodes = _propagate(nodes, _grid(*_continuation_range(bounds[-1], fraction, two_sided)), sd)
    return tuple(bounds)


def _first_look_nodes(z_bound: float, fraction: float, two_sided: bool) -> list[tuple[float, float]]:
    points, weights = _grid(*_continuation_range(z_bound, fraction, two_sided))
    sd = math.sqrt(fraction)
    return [(point, weight * NORMAL.pdf(point / sd) / sd) for point, weight in zip(points, weights)]


# ---- the design of one level --------------------------------------------------------------------------------

def information_fractions(n_reference: int, min_repeats: int, max_repeats: int) -> tuple[float, ...]:
    """t_k = I_k / I_max for k = min..max candidate runs against ``n_reference`` fixed reference runs."""
    final = 1.0 / n_reference + 1.0 / max_repeats
    return tuple(final / (1.0 / n_reference + 1.0 / k) for k in range(min_repeats, max_repeats + 1))


@functools.lru_cache(maxsize=64)
def look_table(n_reference: int, min_repeats: int, max_repeats: int, alpha: float, beta: float, spending: str,
               futility_spending: str) -> tuple[dict, ...]:
    """Per look (k = min..max): information fraction, error spent so far, and both boundaries as t quantiles."""
    fractions = information_fractions(n_reference, min_repeats, max_repeats)
    efficacy = crossing_boundaries(fractions, alpha / 2.0, spending, True)
    no_change = crossing_boundaries(fractions, beta, futility_spending, False)
    looks = []
    for index, repeats in enumerate(range(min_repeats, max_repeats + 1)):
        df = n_reference + repeats - 2
        looks.append({
            "repeats": repeats, "fraction": fractions[index], "df": df,
            "alpha_spent": 2.0 * spent(fractions[index], alpha / 2.0, spending),
            "beta_spent": spent(fractions[index], beta, futility_spending),
            "efficacy_z": efficacy[index], "no_change_z": no_change[index],
            # Same nominal tail as the z boundary, at the look's degrees of freedom (the variance is estimated).
            "efficacy_t": t_quantile_upper(1.0 - NORMAL.cdf(efficacy[index]), df),
            "no_change_t": t_quantile_upper(1.0 - NORMAL.cdf(no_change[index]), df),
        })
    return tuple(looks)


def _require_int(name: str, value: t.Any, minimum: int, maximum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not minimum <= value <= maximum:
        raise ValueError(f"{name} must be an integer from {minimum} to {maximum}, got {value!r}")
    return value


def _require_share(name: str, value: t.Any, maximum: float) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value < maximum:
        raise ValueError(f"{name} must be a number above 0 and below {maximum:g}, got {value!r}")
    return float(value)


def validated_design(options: dict, *, alpha: float, levels: int, where: str = "sequential") -> dict:
    """The design with defaults filled in; ValueError naming ``<where>.<field>`` for anything unusable.

    ``alpha`` is the comparison's two-sided significance level for the whole sweep of ``levels`` levels; each level
    spends ``level_alpha`` = alpha / levels over its looks."""
    unknown = sorted(set(options) - set(DESIGN_DEFAULTS))
    if unknown:
        raise ValueError(f"{where}: unknown option(s) {', '.join(unknown)}; known: {', '.join(DESIGN_DEFAULTS)}")
    design = {**DESIGN_DEFAULTS, **{key: value for key, value in options.items() if value is not None}}
    maximum = _require_int(f"{where}.max_repeats", design["max_repeats"], 1, MAX_REPEATS_LIMIT)
    _require_int(f"{where}.min_repeats", design["min_repeats"], 1, maximum)
    for key in ("spending", "futility_spending"):
        if design[key] not in SPENDING_FUNCTIONS:
            raise ValueError(f"{where}.{key} must be one of {', '.join(SPENDING_FUNCTIONS)}, got {design[key]!r}")
    design["beta"] = _require_share(f"{where}.beta", design["beta"], 0.5)
    for key in ("stop_on_regression", "one_sided_stops"):
        if not isinstance(design[key], bool):
            raise ValueError(f"{where}.{key} must be true or false, got {design[key]!r}")
    design["alpha"] = _require_share("alpha", alpha, 1.0)
    design["levels"] = _require_int("levels", levels, 1, 1000)
    design["level_alpha"] = design["alpha"] / design["levels"]
    return design


# ---- one look at one level ----------------------------------------------------------------------------------

def _log_values(values: list[float], side: str) -> list[float]:
    for index, value in enumerate(values):
        if value <= 0:
            raise ValueError(f"{side} run {index + 1} is {value!r}: a sequential verdict needs positive values")
    return [math.log(value) for value in values]


def log_ratio(reference: list[float], candidate: list[float]) -> tuple[float, float, int]:
    """Mean log ratio (candidate / reference), its standard error from the pooled variance, and that variance's
    degrees of freedom; ValueError for a run that is not positive."""
    ref, cand = _log_values(reference, "reference"), _log_values(candidate, "candidate")
    squares = sum((v - statistics.fmean(ref)) ** 2 for v in ref)
    if len(cand) > 1:
        squares += sum((v - statistics.fmean(cand)) ** 2 for v in cand)
    df = len(ref) + len(cand) - 2
    se = math.sqrt(squares / df) * math.sqrt(1.0 / len(ref) + 1.0 / len(cand))
    return statistics.fmean(cand) - statistics.fmean(ref), se, df


def pct(log_value: float) -> float:
    """A log ratio as a change in percent."""
    return math.expm1(log_value) * 100.0


def _t_statistic(estimate: float, se: float) -> float:
    # Identical runs on both sides leave no variance: any difference is then infinitely significant.
    if se > 0:
        return estimate / se
    return math.copysign(math.inf, estimate) if estimate else 0.0


def _decide(estimate: float, se: float, statistic: float, look: dict, threshold: float,
            last: bool, watch: str | None = None) -> tuple[str, str | None]:
    """Decision and the boundary that made it, on the log scale (``threshold`` = log(1 + threshold_pct/100)).

    ``watch`` (one_sided_stops): ``improvement`` before any level of the sweep improved, ``regression`` after one;
    None settles both sides (the two-sided no-change interval)."""
    if statistic >= look["efficacy_t"] and estimate >= threshold:
        return "improved", "efficacy_upper"
    if statistic <= -look["efficacy_t"] and estimate <= -threshold:
        return "regressed", "efficacy_lower"
    below_upper = estimate + look["no_change_t"] * se < threshold
    above_lower = _rules_out_regression(estimate, se, look, threshold)
    if watch == "regression":
        if above_lower:
            return "not_regressed", "no_regression"
        return ("not_regressed", "max_repeats") if last else ("continue", None)
    if watch == "improvement" and below_upper and estimate > -threshold:
        return "not_improved", "no_improvement"
    if below_upper and above_lower:
        return "no_change", "no_change"
    if last:
        return "no_change", "max_repeats"
    return "continue", None


def _rules_out_regression(estimate: float, se: float, look: dict, threshold: float) -> bool:
    """The lower side of the look's one-sided beta interval lies above -threshold (log scale)."""
    return estimate - look["no_change_t"] * se > -threshold


def leaves_regression_open(look: dict) -> bool:
    """A level's stop settled only its upper side (``not_improved``) and not its lower one: once a later level of the
    sweep improves, it has to be measured on (``reopens``) or the sweep is undecided."""
    return look.get("decision") == "not_improved" and not look["rules_out_regression"]


def _reason(decision: str, boundary: str | None, record: dict) -> str:
    k, bound = record["repeats"], record["efficacy_bound"]
    if boundary == "efficacy_upper" or boundary == "efficacy_lower":
        side = "upper" if boundary == "efficacy_upper" else "lower"
        return (f"{decision}: t = {record['statistic']:+.2f} crossed the {side} boundary ±{bound:.2f} at repeat {k} "
                f"(alpha spent {record['alpha_spent']:.4f} of {record['level_alpha']:.4g}) and the change "
                f"{record['estimate_pct']:+.2f}% is beyond ±{record['threshold_pct']:.2f}%")
    if boundary == "no_change":
        return (f"no change: the change {record['estimate_pct']:+.2f}% ± {record['no_change_bound']:.2f} se lies "
                f"inside ±{record['threshold_pct']:.2f}% at repeat {k} (beta spent {record['beta_spent']:.4f} of "
                f"{record['beta']:g})")
    if boundary == "no_improvement":
        return (f"not improved: the change {record['estimate_pct']:+.2f}% + {record['no_change_bound']:.2f} se lies "
                f"below +{record['threshold_pct']:.2f}% at repeat {k} (no level before it improved, so only an "
                f"improvement could change the verdict; beta spent {record['beta_spent']:.4f} of {record['beta']:g})")
    if boundary == "no_regression":
        return (f"not regressed: the change {record['estimate_pct']:+.2f}% - {record['no_change_bound']:.2f} se lies "
                f"above -{record['threshold_pct']:.2f}% at repeat {k} (a level before it improved, so only a "
                f"regression could change the verdict; beta spent {record['beta_spent']:.4f} of {record['beta']:g})")
    if boundary == "max_repeats" and decision == "not_regressed":
        return (f"not regressed: max_repeats {k} reached without crossing a boundary (t = {record['statistic']:+.2f}, "
                f"final boundary ±{bound:.2f}, change {record['estimate_pct']:+.2f}%)")
    if boundary == "max_repeats":
        return (f"no change: max_repeats {k} reached without crossing a boundary (t = {record['statistic']:+.2f}, "
                f"final boundary ±{bound:.2f}, change {record['estimate_pct']:+.2f}%)")
    return f"continue: undecided at repeat {k} (t = {record['statistic']:+.2f}, boundary ±{bound:.2f})"


def _early(reference: list[float], candidate: list[float], design: dict) -> dict:
    k = len(candidate)
    return {"decision": "continue", "boundary": None, "repeats": k, "n_reference": len(reference),
            "min_repeats": design["min_repeats"], "max_repeats": design["max_repeats"],
            "reason": f"continue: {k} of at least {design['min_repeats']} repeats"}


def look_at_level(reference: list[float], candidate: list[float], threshold_pct: float, design: dict,
                  watch: str | None = None) -> dict:
    """The sequential decision for one level after ``len(candidate)`` candidate runs.

    ``watch`` (with the design's ``one_sided_stops``): ``improvement`` while no level of the sweep measured before
    this one improved, ``regression`` after one did: the one side of the interval the level has to settle.

    Returns the record of the look: ``decision`` (continue | improved | regressed | no_change | not_improved |
    not_regressed), ``boundary`` (what stopped it: efficacy_upper | efficacy_lower | no_change | no_improvement |
    no_regression | max_repeats, or None), ``rules_out_regression`` (the lower side of the interval above
    -threshold), ``statistic`` (t), the boundaries at this look, the error spent so far, the estimate with its
    repeated confidence interval, and ``reason``."""
    if len(reference) < 2:
        raise ValueError(f"a sequential verdict needs at least 2 reference runs, got {len(reference)}")
    if len(candidate) > design["max_repeats"]:
        raise ValueError(f"{len(candidate)} candidate runs exceed the design's max_repeats {design['max_repeats']}")
    if len(candidate) < design["min_repeats"]:
        return _early(reference, candidate, design)
    looks = look_table(len(reference), design["min_repeats"], design["max_repeats"], design["level_alpha"],
                       design["beta"], design["spending"], design["futility_spending"])
    look = looks[len(candidate) - design["min_repeats"]]
    estimate, se, df = log_ratio(reference, candidate)
    threshold = math.log1p(threshold_pct / 100.0)
    statistic = _t_statistic(estimate, se)
    if watch is not None and watch not in WATCHES:
        raise ValueError(f"watch must be one of {', '.join(WATCHES)} or None, got {watch!r}")
    decision, boundary = _decide(estimate, se, statistic, look, threshold, len(candidate) == design["max_repeats"],
                                 watch)
    half_width = look["efficacy_t"] * se if se > 0 else 0.0
    record = {
        "decision": decision, "boundary": boundary, "repeats": len(candidate), "n_reference": len(reference),
        "min_repeats": design["min_repeats"], "max_repeats": design["max_repeats"], "df": df, "watch": watch,
        "statistic": statistic, "efficacy_bound": look["efficacy_t"], "no_change_bound": look["no_change_t"],
        "information_fraction": look["fraction"], "level_alpha": design["level_alpha"],
        "alpha_spent": look["alpha_spent"],
        "beta": design["beta"], "beta_spent": look["beta_spent"], "threshold_pct": threshold_pct,
        "estimate_pct": pct(estimate), "se_log": se,
        "rules_out_regression": _rules_out_regression(estimate, se, look, threshold),
        "p_value": 2.0 * t_upper_tail(abs(statistic), df),
        # The repeated confidence interval: it covers the true change at every look at once with 1 - level_alpha.
        "ci_low_pct": pct(estimate - half_width), "ci_high_pct": pct(estimate + half_width),
    }
    record["reason"] = _reason(decision, boundary, record)
    return record
