#!/usr/bin/env python3
# Copyright (c) llmops.sglang contributors
# Apache License 2.0 (see LICENSE)
"""Verdict cost (issue #18, deliverable 6): today's fixed 5-repeat verdict vs the sequential stopping rule.

Run from the repository root with the project venv: ``.venv/bin/python benchmarks/verdict_cost.py [--quick]``.
What it measures and why: benchmarks/README.md ("Verdict cost"). In short, for true effects 0, +-1 %, +-3 %, +-8 %
and +15 % at run-to-run noise CVs of 1 % and 3 %, many seeded trials each:

1. a trial is one candidate configuration measured against a reference (the adopted configuration, 5 repeats),
   both 5-level sweeps (C = 1, 4, 16, 32, 64) whose runs are drawn from the SGLang emulator's noise model: every
   server start draws one factor (the demo profile's ``instance_cv``, shared by all its runs and levels), every run
   one more (the CV under test), both with the emulator's own ``lognormal_factor``; the candidate's true throughput
   is the reference's x (1 + effect) at every level;
2. the fixed policy measures 5 candidate repeats per level and decides with ``compare_sweeps`` + ``decide_trial``
   exactly as the pipeline did before the stopping rule; the sequential policy asks the collection's stopping rule
   (``sweep_stats.sequential_stop_rule``, what the ``bench`` module runs) after every run, through the bench
   client's own ``stop_after_run``/``sweep_order``, then decides the recorded sweep with the same two functions;
   both policies see the same draws (a paired comparison);
3. GPU-minutes per configuration come from a cost model of the design's real case: the emulator's demo profile
   (4 GPUs, its real-GPU startup phases, its performance model of the 1000-in/1000-out baseline sweep) and the
   bench module's default requests and warm-ups per level.

It prints the cost model, one row per effect and noise level, and as its last line
``verdict cost: fixed <X> GPU-min, sequential <Y> GPU-min, ratio <R>x; false-adopt fixed <a>% sequential <b>%;
missed>=3% fixed <c>% sequential <d>%``. Exit code 0 only if every target is met (>= 2x fewer GPU-minutes,
false-adopt no higher than fixed and <= 5 %, no more missed improvements >= 3 %). ``--quick`` runs fewer trials.
``--rule KEY=VALUE`` (repeatable) measures another stopping rule than the role default. Writes every cell to
``.cache/verdict-cost/results[-quick][-KEY_VALUE...].json``.
"""
from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import logging
import os
import random
import statistics
import sys
import time
import typing as t
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
EMULATOR = ROOT / "tests" / "emulator"
for package_root in (ROOT / "collections", EMULATOR / "sglang", EMULATOR / "triton"):
    if str(package_root) not in sys.path:
        sys.path.insert(0, str(package_root))

# pylint: disable=wrong-import-position
from ansible_collections.llmops.sglang.plugins.module_utils._bench_config import BenchConfig  # noqa: E402
from ansible_collections.llmops.sglang.plugins.module_utils._bench_sweep import stop_after_run, sweep_order  # noqa: E402
from ansible_collections.llmops.sglang.plugins.module_utils import restart_check  # noqa: E402
from ansible_collections.llmops.sglang.plugins.module_utils.decisions import decide_trial  # noqa: E402
from ansible_collections.llmops.sglang.plugins.module_utils.drift import drift_check  # noqa: E402
from ansible_collections.llmops.sglang.plugins.module_utils.sequential_verdict import DESIGN_DEFAULTS  # noqa: E402
from ansible_collections.llmops.sglang.plugins.module_utils.sweep_stats import (  # noqa: E402
    compare_sweeps,
    sequential_plan,
    sequential_stop_rule,
)
from sglang._emulator.capacity import plan_memory  # noqa: E402
from sglang._emulator.model_shape import load_model_shape  # noqa: E402
from sglang._emulator.perf import build_perf_model, expected_output_throughput  # noqa: E402
from sglang._emulator.profile import PROFILE_ENV, load_profile  # noqa: E402
from sglang._emulator.scheduler import lognormal_factor  # noqa: E402
from sglang.srt.server_args import prepare_server_args  # noqa: E402

DEMO_PROFILE = EMULATOR / "profiles" / "demo.yaml"
MODEL = EMULATOR / "models" / "Qwen3.5-122B-A10B"
# The real case's baseline server (design.md): TP=4, NEXTN speculative decoding.
BASELINE_ARGS = ["--model-path", str(MODEL), "--tp", "4", "--speculative-algorithm", "NEXTN"]
LEVELS = (1, 4, 16, 32, 64)
INPUT_LEN = OUTPUT_LEN = 1000
EFFECTS = (0.0, -0.01, 0.01, -0.03, 0.03, -0.08, 0.08, 0.15)
NOISE_CVS = (0.01, 0.03)
FIXED_REPEATS = 5  # tuning_run_bench.repeats: the reference's count, and every candidate's before the rule
# The pipeline's comparison (roles/tuning_run/defaults: tuning_run_compare) and decision policy (decide_trial's).
COMPARE = {"min_effect_pct": 2.0, "noise_band_pct": 5.0, "alpha": 0.05}
# What the pipeline passes to the bench module's stopping rule from tuning_run_compare (roles/tuning_run/tasks/measure.yml).
COMPARE_BOUND = {"min_effect_pct": COMPARE["min_effect_pct"], "alpha": COMPARE["alpha"]}
COMPARE_METRIC = "agg_tok_s"
# The role default restart check (roles/tuning_run/defaults: tuning_run_restart_check).
RESTART_CHECK = restart_check.validated(restart_check.DEFAULTS)
# The second start's draws come from their own seeded stream (Trial): seed + this.
RESTART_SEED_OFFSET = 7_919
MISSED_FROM_PCT = 3.0
TARGET_RATIO = 2.0
TARGET_FALSE_ADOPT_PCT = 5.0
CACHE = ROOT / ".cache" / "verdict-cost"


@dataclasses.dataclass(frozen=True)
class CostModel:
    """Real-GPU seconds of one candidate measurement: a restart, then per level a warm-up and each timed run.

    Two warm-ups: ``full_warmup_s`` (requests of the full output length: the pipeline before issue 18, the fixed
    policy's) and ``warmup_s`` (of the bench module's ``warmup_output_len`` tokens: the pipeline now)."""

    gpus: int
    restart_s: float
    full_warmup_s: dict[int, float]
    warmup_s: dict[int, float]
    run_s: dict[int, float]
    throughput: dict[int, float]

    def gpu_minutes(self, visits: t.Sequence[tuple[int, int]], *, full_warmups: bool = False,
                    restarts: int = 1) -> float:
        """GPUs x wall minutes of ``restarts`` server starts and the levels measured, ``visits`` (concurrency, runs)
        each with its warm-up (a level not measured costs nothing, a level reopened by the stopping rule or measured
        again by the restart check warms up again)."""
        warmup_s = self.full_warmup_s if full_warmups else self.warmup_s
        seconds = restarts * self.restart_s + sum(warmup_s[c] + runs * self.run_s[c] for c, runs in visits)
        return self.gpus * seconds / 60.0

    def repeat_minutes(self) -> float:
        return sum(self.run_s.values()) / 60.0


@contextlib.contextmanager
def _demo_profile() -> t.Iterator[None]:
    """The emulator's server args read the profile named by the environment and log notes for a starting server;
    both only while the cost model is built, so nothing else in this process sees them."""
    saved, logger = os.environ.get(PROFILE_ENV), logging.getLogger("sglang")
    level = logger.level
    os.environ[PROFILE_ENV] = str(DEMO_PROFILE)
    logger.setLevel(logging.ERROR)
    try:
        yield
    finally:
        logger.setLevel(level)
        if saved is None:
            os.environ.pop(PROFILE_ENV, None)
        else:
            os.environ[PROFILE_ENV] = saved


def real_case_cost_model() -> CostModel:
    """The design's real case as the emulator models it (demo.yaml: real-GPU numbers, calibrated to it).

    Restart: the profile's startup phases (weights, draft, graphs, ...) plus the old server's shutdown. Levels: the
    perf model's steady-state tok/s of the baseline at 1000/1000, times the bench module's default requests
    (max(2C, 4)) of 1000 output tokens; warm-up requests (max(C, 4)) of 1000 tokens before issue 18 and of the
    bench module's warmup_output_len (32) now, at the perf model's tok/s for 1000-in/32-out (prefill included)."""
    with _demo_profile():
        profile, shape = load_profile(DEMO_PROFILE), load_model_shape(str(MODEL))
        args = prepare_server_args(BASELINE_ARGS)
        perf, memory = build_perf_model(profile, args, shape), plan_memory(args, shape, profile)
        throughput = {c: expected_output_throughput(perf, c, INPUT_LEN, OUTPUT_LEN, memory.max_running_requests)
                      for c in LEVELS}
        bench = BenchConfig(base_url="http://127.0.0.1:30000", concurrency_levels=LEVELS, input_len=INPUT_LEN,
                            output_len=OUTPUT_LEN)
        warmup_tokens = bench.warmup_tokens()
        warmup_throughput = {c: expected_output_throughput(perf, c, INPUT_LEN, warmup_tokens,
                                                           memory.max_running_requests) for c in LEVELS}
    startup = {phase: seconds for phase, seconds in dataclasses.asdict(profile.startup).items() if phase.endswith("_s")}
    return CostModel(
        gpus=profile.gpu.count, restart_s=sum(startup.values()),
        full_warmup_s={c: bench.warmup_for(c) * OUTPUT_LEN / throughput[c] for c in LEVELS},
        warmup_s={c: bench.warmup_for(c) * warmup_tokens / warmup_throughput[c] for c in LEVELS},
        run_s={c: bench.requests_for(c) * OUTPUT_LEN / throughput[c] for c in LEVELS},
        throughput=throughput,
    )


@dataclasses.dataclass(frozen=True)
class Scenario:
    effect: float
    run_cv: float
    instance_cv: float


class Trial:
    """One candidate vs its reference: every random draw made up front, so both policies see the same numbers.

    ``restart_rng`` draws the candidate's second start, the one a restart check measures, apart from ``rng``: the
    draws of the first start are the same with or without a restart check."""

    def __init__(self, rng: random.Random, scenario: Scenario, throughput: dict[int, float], max_repeats: int,
                 restart_rng: random.Random):
        reference_start = lognormal_factor(rng, scenario.instance_cv)
        candidate_start = lognormal_factor(rng, scenario.instance_cv) * (1.0 + scenario.effect)
        self.reference = _sweep({c: [throughput[c] * reference_start * lognormal_factor(rng, scenario.run_cv)
                                     for _repeat in range(FIXED_REPEATS)] for c in LEVELS})
        self.candidate_runs = {c: [throughput[c] * candidate_start * lognormal_factor(rng, scenario.run_cv)
                                   for _repeat in range(max(max_repeats, FIXED_REPEATS))] for c in LEVELS}
        restarted = lognormal_factor(restart_rng, scenario.instance_cv) * (1.0 + scenario.effect)
        self.restarted_runs = {c: [throughput[c] * restarted * lognormal_factor(restart_rng, scenario.run_cv)
                                   for _repeat in range(restart_check.MAX_REPEATS)] for c in LEVELS}


def _sweep(values: dict[int, list[float]]) -> dict:
    return {"levels": [{"concurrency": c, "runs": [{"agg_tok_s": v} for v in runs]} for c, runs in values.items()]}


@dataclasses.dataclass(frozen=True)
class Outcome:
    """What a policy did with one trial: whether it adopted, the levels it measured (concurrency, runs) and how many
    server starts that took."""

    adopted: bool
    visits: list[tuple[int, int]]
    restarts: int = 1


def _adopted(reference: dict, candidate: dict) -> bool:
    return decide_trial(compare_sweeps(reference, candidate, **COMPARE))["adopt"]


def fixed_policy(trial: Trial) -> Outcome:
    candidate = _sweep({c: runs[:FIXED_REPEATS] for c, runs in trial.candidate_runs.items()})
    return Outcome(_adopted(trial.reference, candidate), [(c, FIXED_REPEATS) for c in LEVELS])


def _restart_checked(trial: Trial, sweep: dict, comparison: dict, check: dict | None) -> Outcome | None:
    """The pipeline's restart check of an adoption (plugin_utils/adoption.verdict) whose ``comparison`` adopted:
    None when it decides nothing (no check, or one not needed), else the outcome of measuring the improved levels
    on a second start."""
    if check is None:
        return None
    planned = restart_check.plan(trial.reference, sweep, comparison, check)
    if not planned["needed"]:
        return None
    levels = [level["concurrency"] for level in planned["levels"]]
    restarted = _sweep({c: trial.restarted_runs[c][:check["repeats"]] for c in levels})
    judged = restart_check.judge(trial.reference, restarted, planned, COMPARE_METRIC)
    return Outcome(judged["confirmed"], [(c, check["repeats"]) for c in levels], restarts=1)


def sequential_policy(trial: Trial, options: dict, check: dict | None = None) -> Outcome:
    """The bench module's loop: one run at a time per level, the rule asked after each, a regression ends it, a
    level the rule reopens is measured on (bench_client.sweep_order); then the restart check of ``check``."""
    plan = sequential_plan(trial.reference, LEVELS, {**options, **COMPARE_BOUND})
    stop_rule = sequential_stop_rule(trial.reference, plan)
    sweep: dict[str, t.Any] = {"levels": [], "not_measured": [], "sequential": plan}
    visits: list[tuple[int, int]] = []
    for concurrency, earlier in sweep_order(sweep, LEVELS):
        runs, stopped = list(earlier), None
        while stopped is None and len(runs) < plan["design"]["max_repeats"]:
            runs.append({"agg_tok_s": trial.candidate_runs[concurrency][len(runs)]})
            stopped = stop_after_run(stop_rule, concurrency, runs, _no_progress)
        sweep["levels"].append({"concurrency": concurrency, "runs": runs, "sequential": stopped})
        visits.append((concurrency, len(runs) - len(earlier)))
    comparison = compare_sweeps(trial.reference, sweep, **COMPARE)
    adopted = decide_trial(comparison)["adopt"]
    checked = _restart_checked(trial, sweep, comparison, check) if adopted else None
    if checked is None:
        return Outcome(adopted, visits)
    return Outcome(checked.adopted, visits + checked.visits, restarts=2)


def _no_progress(_event: dict) -> None:
    return None


@dataclasses.dataclass
class Tally:
    """One policy's trials of a cell. ``gpu_minutes`` at the policy's warm-ups (the fixed policy is the pipeline
    before issue 18: full-length warm-ups), ``full_warmup_gpu_minutes`` with full-length warm-ups for every policy
    (what the stopping rule saves alone)."""

    full_warmups: bool
    adopted: int = 0
    gpu_minutes: float = 0.0
    full_warmup_gpu_minutes: float = 0.0
    runs: int = 0
    levels: int = 0
    trials: int = 0

    restart_checks: int = 0

    def add(self, outcome: Outcome, cost: CostModel) -> None:
        self.adopted += outcome.adopted
        self.gpu_minutes += cost.gpu_minutes(outcome.visits, full_warmups=self.full_warmups, restarts=outcome.restarts)
        self.full_warmup_gpu_minutes += cost.gpu_minutes(outcome.visits, full_warmups=True, restarts=outcome.restarts)
        self.runs += sum(runs for _concurrency, runs in outcome.visits)
        self.levels += len({concurrency for concurrency, _runs in outcome.visits})
        self.restart_checks += outcome.restarts > 1
        self.trials += 1

    def as_dict(self) -> dict:
        return {"adopt_pct": 100.0 * self.adopted / self.trials, "gpu_min": self.gpu_minutes / self.trials,
                "full_warmup_gpu_min": self.full_warmup_gpu_minutes / self.trials,
                "repeats_per_level": self.runs / self.levels, "levels_measured": self.levels / self.trials,
                "restart_check_pct": 100.0 * self.restart_checks / self.trials}


POLICIES: dict[str, t.Callable[[Trial, dict, dict | None], Outcome]] = {
    "fixed": lambda trial, _options, _check: fixed_policy(trial), "sequential": sequential_policy,
}


def simulate_cell(scenario: Scenario, trials: int, seed: int, cost: CostModel, options: dict,
                  policies: t.Sequence[str] = tuple(POLICIES), check: dict | None = None) -> dict:
    """``trials`` seeded trials of one scenario under each policy (same draws); ``options`` is the stopping rule,
    ``check`` the restart check's options (None: none)."""
    rng, restart_rng = random.Random(seed), random.Random(seed + RESTART_SEED_OFFSET)
    tallies = {policy: Tally(full_warmups=policy == "fixed") for policy in policies}
    max_repeats = options.get("max_repeats", DESIGN_DEFAULTS["max_repeats"])
    for _trial in range(trials):
        trial = Trial(rng, scenario, cost.throughput, max_repeats, restart_rng)
        for policy, tally in tallies.items():
            tally.add(POLICIES[policy](trial, options, check), cost)
    return {"effect_pct": 100.0 * scenario.effect, "run_cv_pct": 100.0 * scenario.run_cv,
            "instance_cv_pct": 100.0 * scenario.instance_cv, "trials": trials,
            **{policy: tally.as_dict() for policy, tally in tallies.items()}}


def simulate(trials: int, seed: int, cost: CostModel, instance_cv: float, options: dict | None = None,
             effects: t.Sequence[float] = EFFECTS, noise_cvs: t.Sequence[float] = NOISE_CVS,
             check: dict | None = None) -> list[dict]:
    """One cell per (noise CV, effect), each with its own seed derived from ``seed``."""
    cells = []
    for cv_index, run_cv in enumerate(noise_cvs):
        for effect_index, effect in enumerate(effects):
            cell_seed = seed * 1000 + cv_index * 100 + effect_index
            cells.append(simulate_cell(Scenario(effect, run_cv, instance_cv), trials, cell_seed, cost, options or {},
                                       check=check))
    return cells


DRIFTS = (0.0, 0.02, 0.03, 0.05)


def _drift_flagged(rng: random.Random, throughput: dict[int, float], run_cv: float, instance_cv: float, drift: float,
                   same_start: bool) -> bool:
    first = lognormal_factor(rng, instance_cv)
    second = (first if same_start else lognormal_factor(rng, instance_cv)) * (1.0 - drift)
    earlier, again = (_sweep({c: [throughput[c] * start * lognormal_factor(rng, run_cv)
                                  for _repeat in range(FIXED_REPEATS)] for c in LEVELS}) for start in (first, second))
    return drift_check(earlier, again, label="stage", same_start=same_start, **COMPARE)["drifted"]


def drift_check_rates(trials: int, seed: int, throughput: dict[int, float], instance_cv: float) -> list[dict]:
    """How often verify's drift check flags the adopted configuration (5 runs a level in its stage, 5 in verify) when
    it truly moved by 0, 2, 3 or 5 % in between, at each run CV, in the same server start and in another one: the
    false-alarm rate (the per-start noise alone, for another start) and the power against real drift."""
    rows = []
    for start_index, same_start in enumerate((True, False)):
        for cv_index, run_cv in enumerate(NOISE_CVS):
            for drift_index, drift in enumerate(DRIFTS):
                rng = random.Random(seed * 1000 + 500 + start_index * 50 + cv_index * 10 + drift_index)
                flagged = sum(_drift_flagged(rng, throughput, run_cv, instance_cv, drift, same_start)
                              for _trial in range(trials))
                rows.append({"same_start": same_start, "run_cv_pct": 100.0 * run_cv, "drift_pct": 100.0 * drift,
                             "trials": trials, "flagged_pct": 100.0 * flagged / trials})
    return rows


def drift_lines(rows: list[dict]) -> list[str]:
    groups: dict[tuple[bool, float], list[dict]] = {}
    for row in rows:
        groups.setdefault((row["same_start"], row["run_cv_pct"]), []).append(row)
    return [f"drift check flagged ({'same' if same else 'another'} start, run CV {cv:.0f}%, {cells[0]['trials']} "
            "trials a cell): " + ", ".join(f"drift {r['drift_pct']:.0f}% -> {r['flagged_pct']:.1f}%" for r in cells)
            for (same, cv), cells in groups.items()]


def _pooled(cells: list[dict], policy: str, key: str, select: t.Callable[[dict], bool]) -> float:
    chosen = [cell for cell in cells if select(cell)]
    return sum(cell[policy][key] * cell["trials"] for cell in chosen) / sum(cell["trials"] for cell in chosen)


def headline(cells: list[dict]) -> dict:
    """GPU-minutes per configuration over every cell; false-adopt at effect 0; missed among effects >= 3 %."""
    numbers = {}
    for policy in ("fixed", "sequential"):
        numbers[policy] = {
            "gpu_min": _pooled(cells, policy, "gpu_min", lambda cell: True),
            "false_adopt_pct": _pooled(cells, policy, "adopt_pct", lambda cell: cell["effect_pct"] == 0),
            "missed_pct": 100.0 - _pooled(cells, policy, "adopt_pct",
                                          lambda cell: cell["effect_pct"] >= MISSED_FROM_PCT - 1e-9),
        }
    numbers["ratio"] = numbers["fixed"]["gpu_min"] / numbers["sequential"]["gpu_min"]
    # the stopping rule alone, both policies with full-length warm-ups
    numbers["rule_ratio"] = numbers["fixed"]["gpu_min"] / _pooled(cells, "sequential", "full_warmup_gpu_min",
                                                                  lambda cell: True)
    return numbers


def target_failures(numbers: dict) -> list[str]:
    fixed, sequential = numbers["fixed"], numbers["sequential"]
    problems = []
    if numbers["ratio"] < TARGET_RATIO:
        problems.append(f"GPU-minutes ratio {numbers['ratio']:.2f}x is below {TARGET_RATIO:g}x")
    if sequential["false_adopt_pct"] > min(fixed["false_adopt_pct"], TARGET_FALSE_ADOPT_PCT):
        problems.append(f"false-adopt {sequential['false_adopt_pct']:.1f}% is above min(fixed "
                        f"{fixed['false_adopt_pct']:.1f}%, {TARGET_FALSE_ADOPT_PCT:g}%)")
    if sequential["missed_pct"] > fixed["missed_pct"]:
        problems.append(f"missed>=3% {sequential['missed_pct']:.1f}% is above fixed {fixed['missed_pct']:.1f}%")
    return problems


def last_line(numbers: dict) -> str:
    fixed, sequential = numbers["fixed"], numbers["sequential"]
    return (f"verdict cost: fixed {fixed['gpu_min']:.1f} GPU-min, sequential {sequential['gpu_min']:.1f} GPU-min, "
            f"ratio {numbers['ratio']:.2f}x; false-adopt fixed {fixed['false_adopt_pct']:.1f}% sequential "
            f"{sequential['false_adopt_pct']:.1f}%; missed>=3% fixed {fixed['missed_pct']:.1f}% sequential "
            f"{sequential['missed_pct']:.1f}%")


def cost_lines(cost: CostModel, instance_cv: float) -> list[str]:
    levels = ", ".join(f"C={c}: {cost.throughput[c]:.0f} tok/s, warm-up {cost.full_warmup_s[c]:.0f} -> "
                       f"{cost.warmup_s[c]:.0f} s, "
                       f"run {cost.run_s[c]:.0f} s" for c in LEVELS)
    fixed = cost.gpu_minutes([(c, FIXED_REPEATS) for c in LEVELS], full_warmups=True)
    return [
        f"cost model (demo profile, real-GPU seconds): {cost.gpus} GPUs; restart {cost.restart_s:.0f} s (startup "
        "phases + shutdown); one repeat of the 1000/1000 sweep "
        f"{cost.repeat_minutes():.1f} min; a fixed 5-repeat configuration {fixed:.1f} GPU-min",
        f"levels: {levels}",
        "warm-ups: fixed policy (the pipeline before issue 18) full-length, "
        f"{sum(cost.full_warmup_s.values()):.0f} s a sweep; sequential (now) of warmup_output_len tokens, "
        f"{sum(cost.warmup_s.values()):.0f} s a sweep",
        f"noise: run CV as in the rows, per server start instance CV {100 * instance_cv:.1f}% (demo profile)",
    ]


def table_lines(cells: list[dict]) -> list[str]:
    header = ("| run CV | effect | adopted fixed | adopted seq | repeats/level fixed | repeats/level seq | "
              "levels seq | restart checks seq | GPU-min fixed | GPU-min seq | ratio |")
    lines = [header, "|" + "---:|" * (header.count("|") - 1)]
    for cell in cells:
        fixed, sequential = cell["fixed"], cell["sequential"]
        lines.append(
            f"| {cell['run_cv_pct']:.0f}% | {cell['effect_pct']:+.0f}% | {fixed['adopt_pct']:.1f}% | "
            f"{sequential['adopt_pct']:.1f}% | {fixed['repeats_per_level']:.1f} | {sequential['repeats_per_level']:.2f} | "
            f"{sequential['levels_measured']:.2f} | {sequential['restart_check_pct']:.1f}% | {fixed['gpu_min']:.1f} | "
            f"{sequential['gpu_min']:.1f} | "
            f"{fixed['gpu_min'] / sequential['gpu_min']:.2f}x |")
    return lines


def rule_options(pairs: list[str]) -> dict:
    """``["min_repeats=3", "spending=pocock"]`` -> options of the stopping rule (numbers and booleans as such)."""
    options: dict[str, t.Any] = {}
    for pair in pairs:
        key, _sep, text = pair.partition("=")
        value: t.Any = {"true": True, "false": False}.get(text.lower(), text)
        if isinstance(value, str):
            with contextlib.suppress(ValueError):
                value = float(text) if "." in text else int(text)
        options[key] = value
    return options


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="150 trials per cell instead of 2000 (< 2 min)")
    parser.add_argument("--trials", type=int, help="trials per (effect, noise) cell")
    parser.add_argument("--seed", type=int, default=18)
    parser.add_argument("--rule", action="append", default=[], metavar="KEY=VALUE",
                        help="a stopping-rule option other than the role default (min_repeats=3, spending=pocock, ...)")
    parser.add_argument("--restart-check", action="append", default=[], metavar="KEY=VALUE",
                        help="a restart-check option other than the role default (cv_pct=1.0, repeats=3)")
    parser.add_argument("--no-restart-check", action="store_true", help="the sequential policy without the restart "
                        "check (the pipeline before it)")
    args = parser.parse_args(argv)
    trials = args.trials or (150 if args.quick else 2000)
    started = time.monotonic()
    cost = real_case_cost_model()
    instance_cv = load_profile(DEMO_PROFILE).instance_cv
    options = rule_options(args.rule)
    check = None if args.no_restart_check else restart_check.validated({**RESTART_CHECK,
                                                                        **rule_options(args.restart_check)})
    cells = simulate(trials, args.seed, cost, instance_cv, options, check=check)
    numbers = headline(cells)
    rule = {**DESIGN_DEFAULTS, **options}
    print("stopping rule: " + ", ".join(f"{key} {value}" for key, value in rule.items()) + " (role default"
          + (f" with {', '.join(args.rule)})" if args.rule else ")"))
    print("restart check: " + (", ".join(f"{key} {value}" for key, value in check.items()) if check else "none"))
    for line in cost_lines(cost, instance_cv) + [""] + table_lines(cells):
        print(line)
    drift_rows = drift_check_rates(max(50, trials // 10), args.seed, cost.throughput, instance_cv)
    print()
    for line in drift_lines(drift_rows):
        print(line)
    problems = target_failures(numbers)
    print(f"\nthe stopping rule alone (sequential with full-length warm-ups): ratio {numbers['rule_ratio']:.2f}x")
    print(f"\n{trials} trials per cell, seed {args.seed}, {time.monotonic() - started:.0f} s; targets: "
          + ("all met" if not problems else "NOT MET: " + "; ".join(problems)))
    CACHE.mkdir(parents=True, exist_ok=True)
    name = "-".join(["results"] + (["quick"] if args.quick else []) + [pair.replace("=", "_") for pair in args.rule]
                    + ["restart_check_" + pair.replace("=", "_") for pair in args.restart_check]
                    + (["no_restart_check"] if args.no_restart_check else []))
    (CACHE / f"{name}.json").write_text(json.dumps(
        {"trials": trials, "seed": args.seed, "rule": options, "restart_check": check, "cost_model": dataclasses.asdict(cost), "cells": cells,
         "drift_check": drift_rows, "headline": numbers}, indent=2) + "\n")
    print(last_line(numbers))
    return 0 if not problems else 1


if __name__ == "__main__":
    sys.exit(main())
