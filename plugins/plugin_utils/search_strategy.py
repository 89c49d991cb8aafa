# Copyright (c) llmops.sglang contributors
# Apache License 2.0 (see LICENSE)
"""Which server configuration a goodput search starts next, under a budget of restarts and GPU-minutes.

Controller-side (plugin_utils): needs optuna, a controller requirement of the collection.

Why TPE (optuna's TPESampler) and not successive halving: the expensive unit is a server restart (minutes of
model loading and CUDA-graph capture before the first request), and every candidate needs its own. Successive
halving saves by stopping many cheap partial evaluations early, but a configuration has no cheap partial
evaluation: its first probe already paid the start. TPE spends each start where the results so far point.

Each trial is a restart Ansible drives, so the study is used through ask/tell, never ``study.optimize``. The
history of trials is the whole state: the study is rebuilt from it (``add_trials``) with a sampler seeded by
``seed`` and the history's length, so a proposal is a function of (space, seed, history). A stage that stopped
resumes from the JSON of its history with the proposal an uninterrupted search would have made.

Outcomes: ``complete`` (the start worked; the value is the highest rate meeting the SLO, 0 when none did),
``infeasible`` (the start failed: OOM, config error) and ``invalid`` (the caller's check rejected the candidate:
flag rules or the installed version; no start, no budget). Both of the last are told to optuna as a COMPLETE trial
of value 0 with a violated constraint, not as FAIL: TPESampler reads only COMPLETE and PRUNED trials (optuna 5.0.0
samplers/_tpe/sampler.py ``_sample_relative``), so a FAIL would teach it nothing about the region, while an
infeasible trial is ranked below every feasible one and TPE samples less around it. On the synthetic space of
tests/unit/plugins/plugin_utils/test_search_strategy.py (16 of 100 points OOM, next to the optimum; 20 restarts;
seeds 0-29) FAIL lost 6.4 restarts per search to OOM and reached 97% of the optimum in 23 searches, the constraint
lost 3.5 and reached it in 28 (random picks would lose 3.2 and reach it in about 11: the optimum borders the corner).
No point of the history is proposed again: optuna repeats points on small discrete spaces, so a repeat
is told its recorded outcome and asked again, and after ``MAX_ASKS`` repeats an unseen grid point is taken.

A candidate's objective is its rate search's ``estimate_rps`` (the capacity interpolated inside the final bracket,
rate_search.py), its ``value`` the rate it promises; without an estimate the value is the objective.

The winner's curse: a candidate's estimate comes from short runs and scatters by 5-10 % around its capacity (runs
of 480 / 120 requests on the benchmark's grid), as much as the gap between the best candidates of a
space, so the highest estimate is often a neighbour of the optimum that was measured lucky. ``best`` therefore
ranks the measured candidates by the posterior mean of a Gaussian-process surrogate of their estimates over the
knobs (plugin_utils/surrogate.py: a candidate's own measurement weighed against what its neighbours imply, the
weights from the measurements' own spread and each estimate's runs: ``estimate_runs``, more for a contender of
the search stage), not by the raw estimate; TPE still learns from the raw estimates. ``confidence`` is the
posterior probability that the first of that ranking is the best measured candidate, reported in the state.

The last ``surrogate_starts`` starts of the budget go to the untried candidate with the highest expected
improvement under that surrogate (over the measured candidates' best posterior mean), times the surrogate's
probability that it starts (the same model over started / failed): TPE models each knob on its own (its default,
univariate), so around a best point it keeps sampling combinations of individually good values and may never try
the combination next to it that the measurements point at. The candidates weighed are every untried point of a
finite grid of at most ``MAX_SURROGATE_CANDIDATES``, else the untried one-step neighbours of the best candidate
and ``RANDOM_CANDIDATES`` points drawn at random (seeded like the sampler). On the emulator's grid of
benchmarks/goodput_search.py (60 candidates, 2 within 3 % of the optimum, a budget of about 12 starts;
``--simulate 40``: 40 seeded searches on the emulator's model) both together raised the searches that ended within
3 % of the optimum from 18 (3 starts to random untried neighbours of the highest estimate) to 24 of 40 and the mean
from 95.3 to 97.2 % of the optimum (seeds 40-79: from 4 to 18 of 40); the same starts ranked by the raw estimates
reached 20 of 40. Those searches ran 120-request runs; with the benchmark's 480 (steadier estimates) the surrogate
starts raise it from 19 to 31 of 40, and the raw ranking with them reaches 32: the smoothing matters less the
steadier the estimates. When no candidate is left, TPE proposes.
"""
from __future__ import annotations

import math
import random
import typing as t
from dataclasses import dataclass

from ansible_collections.llmops.sglang.plugins.plugin_utils import surrogate
from ansible_collections.llmops.sglang.plugins.plugin_utils.search_space import Knob, SearchSpace

try:
    import optuna
    from optuna.distributions import CategoricalDistribution, FloatDistribution, IntDistribution
    from optuna.trial import TrialState, create_trial

    optuna.logging.set_verbosity(optuna.logging.WARNING)  # one INFO line per trial would flood the stage's output
    HAS_OPTUNA = True
except ImportError:  # pragma: no cover - reported when a search is built
    HAS_OPTUNA = False

SCHEMA_VERSION = 1
STATES = ("complete", "infeasible", "invalid")
# Random starts before TPE models the history: few, because each is a restart the budget pays for.
DEFAULT_STARTUP_TRIALS = 5
MAX_ASKS = 20
# Consecutive rejected candidates after which the search stops: the check refuses the whole space (a knob the
# installed SGLang does not have), and a continuous space would otherwise be sampled forever.
MAX_REJECTED_IN_A_ROW = 200
INFEASIBLE_CONSTRAINT = "starts"  # > 0: the server did not start
# The surrogate starts weigh every untried point of a grid up to this size, else neighbours and random points.
MAX_SURROGATE_CANDIDATES = 4096
RANDOM_CANDIDATES = 256
# start_design latin_hypercube: of this many seeded Latin hypercubes, the one whose two closest points are farthest
# apart.
START_DESIGNS = 32
START_DESIGN_KINDS = ("random", "latin_hypercube")


@dataclass(frozen=True)
class Budget:
    """What the search may spend: server restarts and/or GPU-minutes (at least one)."""

    max_restarts: int | None = None
    max_gpu_minutes: float | None = None

    def as_dict(self) -> dict:
        return {"max_restarts": self.max_restarts, "max_gpu_minutes": self.max_gpu_minutes}


def parse_budget(budget: t.Any, where: str = "search.budget") -> Budget:
    if not isinstance(budget, dict) or not set(budget) & {"max_restarts", "max_gpu_minutes"}:
        raise ValueError(f"{where}: set max_restarts and/or max_gpu_minutes, got {budget!r}")
    unknown = sorted(set(budget) - {"max_restarts", "max_gpu_minutes"})
    if unknown:
        raise ValueError(f"{where}: unknown key {unknown[0]!r}; use max_restarts and/or max_gpu_minutes")
    restarts, minutes = budget.get("max_restarts"), budget.get("max_gpu_minutes")
    if restarts is not None and (isinstance(restarts, bool) or not isinstance(restarts, int) or restarts < 1):
        raise ValueError(f"{where}.max_restarts: must be an integer >= 1, got {restarts!r}")
    if minutes is not None and (isinstance(minutes, bool) or not isinstance(minutes, (int, float))
                                or not math.isfinite(minutes) or minutes <= 0):
        raise ValueError(f"{where}.max_gpu_minutes: must be a number > 0, got {minutes!r}")
    return Budget(max_restarts=restarts, max_gpu_minutes=None if minutes is None else float(minutes))


def objective(trial: dict) -> float:
    """What a completed trial is ranked by: its capacity estimate (a trial recorded before estimates: its rate)."""
    estimate = trial.get("estimate_rps")
    return float(trial["value"] if estimate is None else estimate)


def _distribution(knob: Knob) -> t.Any:
    if knob.kind == "choice":
        return CategoricalDistribution(list(knob.values))
    if knob.kind == "int":
        return IntDistribution(int(knob.low), int(knob.high), step=int(knob.step or 1), log=knob.log)
    return FloatDistribution(knob.low, knob.high, step=knob.step, log=knob.log)


def _value_at(knob: Knob, share: float) -> t.Any:
    """The knob's value at ``share`` (0 to 1) of its range: the grid value of that stratum, else the range's point
    (on log axes for a log range)."""
    values = knob.points()
    if values is not None:
        return values[min(int(share * len(values)), len(values) - 1)]
    if knob.log:
        return knob.canonical(knob.low * (knob.high / knob.low) ** share)
    return knob.canonical(knob.low + (knob.high - knob.low) * share)


class GoodputSearch:
    """Proposes candidates (``next_candidate``) and learns their outcomes (``record_result``,
    ``record_failed_start``); ``rejects(params)`` returns why a candidate cannot run, or None."""

    def __init__(self, space: SearchSpace, budget: Budget, *, seed: int = 0,
                 rejects: t.Callable[[dict], str | None] | None = None,
                 startup_trials: int = DEFAULT_STARTUP_TRIALS, surrogate_starts: int = 0,
                 start_design: str = "random", trials: t.Iterable[dict] = ()) -> None:
        if not HAS_OPTUNA:
            raise RuntimeError("the goodput search needs optuna on the controller: install the collection's "
                               "controller requirements (meta/ee-requirements.txt)")
        self.space, self.budget, self.seed = space, budget, seed
        self.rejects, self.startup_trials, self.surrogate_starts = rejects, startup_trials, surrogate_starts
        if start_design not in START_DESIGN_KINDS:
            raise ValueError(f"start_design: one of {', '.join(START_DESIGN_KINDS)}, got {start_design!r}")
        self.start_design = start_design
        self.distributions = {knob.name: _distribution(knob) for knob in space.knobs}
        self.trials: list[dict] = [dict(trial) for trial in trials]

    # -- outcomes -----------------------------------------------------------------------------------------------
    def record_result(self, params: t.Mapping, rate_rps: float | None, gpu_minutes: float,
                      estimate_rps: float | None = None, estimate_runs: int | None = None) -> dict:
        """The candidate started and was measured: ``rate_rps`` is its highest rate meeting the SLO (None: none),
        ``estimate_rps`` its capacity as the rate search estimates it (ranks the candidates; default the rate),
        ``estimate_runs`` the runs that estimate rests on (its weight in the surrogate; default 1)."""
        trial = self._record(params, "complete", value=float(rate_rps or 0.0), gpu_minutes=gpu_minutes)
        trial["estimate_rps"] = float(estimate_rps) if estimate_rps is not None else trial["value"]
        if estimate_runs:
            trial["estimate_runs"] = int(estimate_runs)
        return trial

    def record_failed_start(self, params: t.Mapping, reason: str, gpu_minutes: float) -> dict:
        """The candidate did not start (OOM, config error): an infeasible point, never proposed again."""
        return self._record(params, "infeasible", reason=reason, gpu_minutes=gpu_minutes)

    def _record(self, params: t.Mapping, state: str, *, value: float | None = None, reason: str | None = None,
                gpu_minutes: float = 0.0) -> dict:
        canonical = self._canonical(params)
        if self._outcome(self.space.key(canonical)) is not None:
            raise ValueError(f"candidate {canonical} is already recorded; each candidate is measured once")
        trial = {"number": len(self.trials), "params": canonical, "state": state, "value": value,
                 "reason": reason, "gpu_minutes": float(gpu_minutes)}
        self.trials.append(trial)
        return trial

    def _canonical(self, params: t.Mapping) -> dict:
        missing = [name for name in self.space.names if name not in params]
        if missing:
            raise ValueError(f"candidate {dict(params)} lacks the knob {missing[0]}")
        return {knob.name: knob.canonical(params[knob.name]) for knob in self.space.knobs}

    def _outcome(self, key: tuple) -> dict | None:
        return next((trial for trial in self.trials if self.space.key(trial["params"]) == key), None)

    # -- budget -------------------------------------------------------------------------------------------------
    def spent(self) -> dict:
        started = [trial for trial in self.trials if trial["state"] != "invalid"]
        return {"restarts": len(started), "gpu_minutes": round(sum(trial["gpu_minutes"] for trial in started), 3)}

    def _budget_reason(self, reserved_starts: int = 0) -> str | None:
        """Why the budget allows no start beyond ``reserved_starts`` more, or None. A GPU-minute budget stops
        before a start that would overrun it if it cost as much as the costliest so far: a start's cost is known
        only afterwards, and a low-capacity candidate's rate search (slow runs at low rates) costs more than the
        typical one (up to 1.4x the median in benchmarks/goodput_search.py), so a median would let the last start
        overrun a budget operators set as a limit. A contender's extra runs (search_stage.py) are left out of that
        cost: they are taken only where the budget still holds them, and would otherwise keep a start back."""
        spent = self.spent()
        if self.budget.max_restarts is not None and spent["restarts"] + reserved_starts >= self.budget.max_restarts:
            return f"budget spent: {spent['restarts']} of {self.budget.max_restarts} restarts"
        # a contender's extra runs are no part of what a start costs: the stage affords them on their own
        costs = [trial["gpu_minutes"] - trial.get("contender_gpu_minutes", 0.0) for trial in self.trials
                 if trial["state"] != "invalid"]
        expected = max(costs, default=0.0)
        if self.budget.max_gpu_minutes is not None and \
                spent["gpu_minutes"] + expected * (1 + reserved_starts) > self.budget.max_gpu_minutes:
            return (f"budget spent: {spent['gpu_minutes']:g} of {self.budget.max_gpu_minutes:g} GPU-minutes "
                    f"(a start costs up to {expected:g})")
        return None

    def stop_reason(self) -> str | None:
        """Why no further candidate is started, or None."""
        budget = self._budget_reason()
        if budget is not None:
            return budget
        rejected = self._rejected_in_a_row()
        if rejected >= MAX_REJECTED_IN_A_ROW:
            return (f"the last {rejected} candidates were all rejected (the latest: {self.trials[-1]['reason']}); "
                    "fix search.knobs")
        if len(self.trials) == self.space.grid_size():
            return f"space exhausted: all {len(self.trials)} candidates tried or rejected"
        return None

    def _rejected_in_a_row(self) -> int:
        count = 0
        for trial in reversed(self.trials):
            if trial["state"] != "invalid":
                break
            count += 1
        return count

    # -- proposals ----------------------------------------------------------------------------------------------
    def next_candidate(self) -> dict | None:
        """The next candidate to start (server args of the knobs), or None (``stop_reason`` says why). Candidates
        ``rejects`` refuses are recorded as invalid and the next is proposed; until an outcome is recorded, the
        same candidate is proposed again."""
        while self.stop_reason() is None:
            params = self._propose()
            if params is None:
                return None
            reason = self.rejects(params) if self.rejects else None
            if reason is None:
                return params
            self._record(params, "invalid", reason=reason)
        return None

    def _propose(self) -> dict | None:
        if self.surrogate_starts and self._budget_reason(self.surrogate_starts) is not None:
            candidates = self._untried_candidates()
            if candidates:
                return self._most_promising(candidates)
        for point in self._start_design() if self.start_design == "latin_hypercube" else ():
            if self._outcome(self.space.key(point)) is None:
                return point
        study = self._study()
        for _ask in range(MAX_ASKS):
            trial = study.ask(self.distributions)
            params = self._canonical(trial.params)
            known = self._outcome(self.space.key(params))
            if known is None:
                return params
            self._tell_again(study, trial, known)
        return self._unseen_grid_point()

    def _start_design(self) -> list[dict]:
        """The first ``startup_trials`` candidates of ``start_design: latin_hypercube``: a maximin Latin hypercube
        over the knobs' positions (seeded), each knob's range cut in as many strata as starts and every stratum taken
        once, so each knob's low, middle and high values are all measured before TPE models them. TPE's own start-up
        draws at random: 5 random points of the benchmark's 60 missed its best region (max_running_requests 24-48)
        in 2 of 20 simulated searches (benchmarks/README.md)."""
        rng = random.Random(f"{self.seed}:start")
        count, best, widest = self.startup_trials, [], -1.0
        for _design in range(START_DESIGNS if count > 1 else 1):
            columns = []
            for knob in self.space.knobs:
                strata = list(range(count))
                rng.shuffle(strata)
                columns.append([_value_at(knob, (stratum + rng.random()) / count) for stratum in strata])
            points = [dict(zip(self.space.names, row)) for row in zip(*columns)]
            closest = min((math.dist(self._coordinates(a), self._coordinates(b))
                           for index, a in enumerate(points) for b in points[index + 1:]), default=0.0)
            if closest > widest:
                best, widest = points, closest
        return best

    def _study(self) -> t.Any:
        sampler = optuna.samplers.TPESampler(seed=self.seed + len(self.trials),
                                             n_startup_trials=self.startup_trials)
        study = optuna.create_study(direction="maximize", sampler=sampler)
        study.add_trials(self._frozen(trial) for trial in self.trials)
        return study

    def _frozen(self, trial: dict) -> t.Any:
        """The optuna trial of one recorded outcome (a failed or refused start: infeasible, value 0)."""
        common = {"params": trial["params"], "distributions": self.distributions}
        if trial["state"] == "complete":
            return create_trial(state=TrialState.COMPLETE, value=objective(trial), **common)
        return create_trial(state=TrialState.COMPLETE, value=0.0, constraints={INFEASIBLE_CONSTRAINT: 1.0}, **common)

    @staticmethod
    def _tell_again(study: t.Any, trial: t.Any, known: dict) -> None:
        if known["state"] != "complete":
            trial.set_constraint(INFEASIBLE_CONSTRAINT, 1.0)
        study.tell(trial, objective(known) if known["state"] == "complete" else 0.0)

    # -- the surrogate ------------------------------------------------------------------------------------------
    def _coordinates(self, params: t.Mapping) -> list[float]:
        return [knob.position(params[knob.name]) for knob in self.space.knobs]

    def _completed(self) -> list[dict]:
        return [trial for trial in self.trials if trial["state"] == "complete"]

    @staticmethod
    def _noise(completed: list[dict]) -> list[float]:
        """Each estimate's relative noise variance: 1 / the runs it rests on (a contender's extra runs weigh)."""
        return [1.0 / trial.get("estimate_runs", 1) for trial in completed]

    def smoothed(self) -> dict[int, float]:
        """Each completed trial's number -> the surrogate's posterior mean of its objective (what ``best`` ranks by;
        with fewer than 3 completed trials, their objectives)."""
        completed = self._completed()
        points = [self._coordinates(trial["params"]) for trial in completed]
        means, _spreads = surrogate.posterior(points, [objective(trial) for trial in completed], points,
                                              self._noise(completed))
        return {trial["number"]: mean for trial, mean in zip(completed, means)}

    def confidence(self, number: int | None = None) -> float | None:
        """The surrogate's posterior probability that trial ``number`` (default: ``best(1)``'s) is truly the best of
        the measured candidates (None before any was measured): the recommendation's confidence."""
        completed = self._completed()
        if not completed:
            return None
        points = [self._coordinates(trial["params"]) for trial in completed]
        chances = surrogate.best_probabilities(points, [objective(trial) for trial in completed],
                                               self._noise(completed), seed=self.seed)
        number = self.best(1)[0]["number"] if number is None else number
        return next(chance for trial, chance in zip(completed, chances) if trial["number"] == number)

    def _most_promising(self, candidates: list[dict]) -> dict:
        """The candidate of the highest expected improvement over the best posterior mean, times its probability
        of starting (the surrogate of started 1 / failed 0; 1 while none failed); the first of equals."""
        completed = self._completed()
        points = [self._coordinates(trial["params"]) for trial in completed]
        queries = [self._coordinates(candidate) for candidate in candidates]
        means, spreads = surrogate.posterior(points, [objective(trial) for trial in completed], queries + points,
                                             self._noise(completed))
        incumbent = max(means[len(queries):], default=0.0)
        started = [trial for trial in self.trials if trial["state"] != "invalid"]
        odds, _spreads = surrogate.posterior([self._coordinates(trial["params"]) for trial in started],
                                             [float(trial["state"] == "complete") for trial in started], queries)
        scores = [surrogate.expected_improvement(mean, spread, incumbent) * min(max(odd, 0.0), 1.0)
                  for mean, spread, odd in zip(means, spreads, odds)]
        return candidates[max(range(len(candidates)), key=lambda index: (scores[index], -index))]

    def _untried_candidates(self) -> list[dict]:
        """What the surrogate starts choose from: the grid's untried points, or for a large or continuous space the
        untried neighbours of the best and random points (none without a measured candidate)."""
        if not self._completed():
            return []
        seen = {self.space.key(trial["params"]) for trial in self.trials}
        size = self.space.grid_size()
        if size is not None and size <= MAX_SURROGATE_CANDIDATES:
            points = (self.space.grid_point(index) for index in range(size))
        else:
            rng = random.Random(self.seed + len(self.trials))
            points = [*self._neighbours(self.best(1)[0]["params"]),
                      *(self._random_point(rng) for _point in range(RANDOM_CANDIDATES))]
        untried, keys = [], set(seen)
        for point in points:
            if self.space.key(point) not in keys:
                keys.add(self.space.key(point))
                untried.append(point)
        return untried

    def _neighbours(self, params: dict) -> list[dict]:
        """The candidates one knob step away from ``params``."""
        return [{**params, knob.name: value} for knob in self.space.knobs
                for value in knob.neighbours(params[knob.name])]

    def _random_point(self, rng: random.Random) -> dict:
        point = {}
        for knob in self.space.knobs:
            values = knob.points()
            if values is not None:
                point[knob.name] = rng.choice(values)
            elif knob.log:
                point[knob.name] = knob.canonical(knob.low * (knob.high / knob.low) ** rng.random())
            else:
                point[knob.name] = knob.canonical(knob.low + (knob.high - knob.low) * rng.random())
        return point

    def _unseen_grid_point(self) -> dict | None:
        """A random candidate of a finite grid not in the history (seeded like the sampler); None if none."""
        size = self.space.grid_size()
        if size is None:
            return None
        seen = {self.space.key(trial["params"]) for trial in self.trials}
        unseen = [index for index in range(size) if self.space.key(self.space.grid_point(index)) not in seen]
        if not unseen:
            return None
        return self.space.grid_point(random.Random(self.seed + len(self.trials)).choice(unseen))

    # -- results and state --------------------------------------------------------------------------------------
    def best(self, count: int = 1) -> list[dict]:
        """The ``count`` completed trials of the highest posterior mean (``smoothed``; the ones to re-verify before
        adopting)."""
        smoothed = self.smoothed()
        return sorted(self._completed(), key=lambda trial: (-smoothed[trial["number"]], trial["number"]))[:count]

    def to_json(self) -> dict:
        smoothed = self.smoothed()
        ranking = sorted(self._completed(), key=lambda trial: (-smoothed[trial["number"]], trial["number"]))
        return {"schema_version": SCHEMA_VERSION, "seed": self.seed, "startup_trials": self.startup_trials,
                "surrogate_starts": self.surrogate_starts, "start_design": self.start_design,
                "space": self.space.as_dict(), "budget": self.budget.as_dict(), "spent": self.spent(),
                "stop_reason": self.stop_reason(), "trials": self.trials,
                # the ranking best() makes, highest first: number and posterior mean (run_report's best candidate)
                "ranking": [{"number": trial["number"], "smoothed_rps": round(smoothed[trial["number"]], 6)}
                            for trial in ranking],
                # how likely the first of the ranking is the best measured (the surrogate's posterior)
                "confidence": self._rounded(self.confidence(ranking[0]["number"]) if ranking else None)}

    @staticmethod
    def _rounded(value: float | None) -> float | None:
        return None if value is None else round(value, 3)

    @classmethod
    def from_json(cls, state: dict, space: SearchSpace, budget: Budget,
                  rejects: t.Callable[[dict], str | None] | None = None,
                  surrogate_starts: int = 0, start_design: str = "random") -> "GoodputSearch":
        """Resume from ``to_json()``; the space must be the one it was made for (the budget and the surrogate
        starts may have changed)."""
        if state.get("schema_version") != SCHEMA_VERSION:
            raise ValueError(f"search state: schema_version {state.get('schema_version')!r} is not "
                             f"{SCHEMA_VERSION}; start a new search")
        if state.get("space") != space.as_dict():
            raise ValueError("search state: it was made for other knobs (search.knobs changed); start a new "
                             "search or restore the knobs it was made for")
        for trial in state["trials"]:
            if trial.get("state") not in STATES:
                raise ValueError(f"search state: trial {trial.get('number')} has state {trial.get('state')!r}, "
                                 f"not one of {', '.join(STATES)}")
        return cls(space, budget, seed=state["seed"], rejects=rejects, startup_trials=state["startup_trials"],
                   surrogate_starts=surrogate_starts, start_design=start_design, trials=state["trials"])
