# Copyright (c) llmops.sglang contributors
# Apache License 2.0 (see LICENSE)
"""The search stage's bookkeeping (playbooks/search.yml through the action llmops.sglang.search_step): its inputs,
the host's search state in ``<run>/search/<host>/search.json`` and every trial's records under ``trials/<NNN>/``.

Controller-side (plugin_utils). The playbook keeps Ansible in charge of the host: it deploys each candidate with the
sglang_server role and runs the bench module once per probe; this module says which candidate and which probe come
next and records what came back. The state is the strategy's history (search_strategy.GoodputSearch, optuna TPE)
plus the probes of the candidate being measured, so a stage that stopped resumes where it was: a finished trial is
never measured again, and the candidate that was interrupted is proposed again (the proposal is a function of the
history) and measured from a fresh start, its earlier records removed.

The re-verification (``verdict``) compares per-run goodput of the best candidate and the adopted configuration at the
candidate's rate with the significance test of compare_sweeps (module_utils/sweep_stats.py ``compare_samples``:
Mann-Whitney U and a bootstrap CI of the median ratio, an effect threshold of ``min_effect_pct`` or twice the runs'
noise); a candidate is adopted only when its goodput improved significantly.
"""
from __future__ import annotations

import json
import math
import shutil
import statistics
import typing as t
from datetime import datetime, timezone
from pathlib import Path

from ansible_collections.llmops.sglang.plugins.module_utils.gpu_cost import Scales, deployment_gpus, part, seconds_between
from ansible_collections.llmops.sglang.plugins.module_utils.run_inputs import Checker
from ansible_collections.llmops.sglang.plugins.module_utils.sweep_stats import compare_samples
from ansible_collections.llmops.sglang.plugins.module_utils.workload import SLO_METRICS
from ansible_collections.llmops.sglang.plugins.plugin_utils import rate_search
from ansible_collections.llmops.sglang.plugins.plugin_utils import run_dir as layout
from ansible_collections.llmops.sglang.plugins.plugin_utils.run_dir import record_name, serialize, write_files
from ansible_collections.llmops.sglang.plugins.plugin_utils.search_space import SearchSpace, parse_space
from ansible_collections.llmops.sglang.plugins.plugin_utils.search_strategy import (
    START_DESIGN_KINDS,
    Budget,
    GoodputSearch,
    parse_budget,
)

VAR = "tuning_run_search"
STATE_FILE = record_name("search")
SCHEMA_VERSION = 1
# Options of the bench module a workload may set (the rest - address, key, files, levels - the stage sets).
WORKLOAD_BENCH_KEYS = ("input_len", "output_len", "endpoint", "model", "requests_per_level", "warmup_requests",
                       "request_timeout_s", "level_timeout_s", "max_failed_share", "seed", "lengths",
                       "shared_prefix", "multi_turn", "max_client_lag_ms")
WORKLOAD_ARRIVAL_KEYS = ("process", "burstiness", "max_concurrency")
# contender_runs: extra runs at the final bracket's ends of a candidate that ranks first or second by the
# surrogate's posterior mean, the two within contender_within_pct of each other (the ranking of the leaders is
# decided by run noise). Off by default: on the goodput benchmark they cost about one start of exploration in 12 and
# gained less in ranking (benchmarks/README.md, "Selection and exploration", "Cutoff and contenders").
# cutoff_below_pct: a candidate's rate search stops once the SLO failed at a rate that far below the leading
# candidate's posterior mean (with a rate that held below it): it cannot lead, and its bracket's estimate is enough
# for the strategy to learn from (0: off). Default 10: on the goodput benchmark's two spaces the same budget then
# pays for 14 starts instead of 12 (70 instead of 52) and no simulated search misses the optimum's region.
RATE_DEFAULTS = {"start_rps": 1.0, "min_rps": 0.01, "resolution": rate_search.DEFAULT_RESOLUTION,
                 "repeats": rate_search.DEFAULT_REPEATS, "max_probes": rate_search.DEFAULT_MAX_PROBES,
                 "contender_runs": 0, "contender_within_pct": 5.0, "cutoff_below_pct": 10.0}
# requests_per_level: of each verification run (null: the workload's); longer runs than the probes' give steadier
# goodput where the adopted configuration is overloaded and the candidate at its boundary.
VERIFY_DEFAULTS = {"best": 1, "repeats": 5, "min_effect_pct": 2.0, "alpha": 0.05, "requests_per_level": None}
TOP_KEYS = ("knobs", "budget", "slo", "workload", "rate", "verify", "surrogate_starts", "start_design", "seed")
# Without a restart budget the loop of the playbook still needs a length: at most this many candidates.
MAX_CANDIDATES = 100


class SearchInputError(ValueError):
    """Inputs of the search that cannot work; ``errors`` holds one message per problem, each naming the field."""

    def __init__(self, errors: list[str]) -> None:
        super().__init__("; ".join(errors))
        self.errors = errors


def _number(path: str, value: t.Any, errors: list[str], *, low: float = 0.0, high: float | None = None,
            integer: bool = False, inclusive_low: bool = False) -> None:
    ok = not isinstance(value, bool) and isinstance(value, (int, float)) and math.isfinite(value)
    if ok and integer:
        ok = isinstance(value, int) or float(value).is_integer()
    if ok:
        ok = value >= low if inclusive_low else value > low
    if ok and high is not None:
        ok = value <= high
    if not ok:
        kind = "an integer" if integer else "a number"
        bound = f"{'>=' if inclusive_low else '>'} {low:g}" + (f" and <= {high:g}" if high is not None else "")
        errors.append(f"{path}: must be {kind} {bound}, got {value!r}")


def check_search(search: t.Any) -> list[str]:
    """Every problem of ``tuning_run_search``, one message per problem naming the field; empty when it can work."""
    if not isinstance(search, dict):
        return [f"{VAR}: must be a mapping with knobs, budget and slo (and workload, rate, verify, seed), "
                f"got {search!r}"]
    checker = Checker()  # the run inputs' unknown-key check (with its "did you mean")
    errors = checker.errors
    checker.unknown_keys(VAR, search, TOP_KEYS)
    for required in ("knobs", "budget", "slo"):
        if required not in search:
            errors.append(f"{VAR}.{required}: required")
    for name, parse in (("knobs", parse_space), ("budget", parse_budget)):
        if name in search:
            try:
                parse(search[name], f"{VAR}.{name}")
            except ValueError as exc:
                errors.append(str(exc))
    if "slo" in search:
        _check_slo(search["slo"], checker)
    workload = search.get("workload", {})
    if not isinstance(workload, dict):
        errors.append(f"{VAR}.workload: must be a mapping of bench options, got {workload!r}")
    else:
        checker.unknown_keys(f"{VAR}.workload", workload, WORKLOAD_BENCH_KEYS + WORKLOAD_ARRIVAL_KEYS)
        for key in ("input_len", "output_len", "requests_per_level", "warmup_requests"):
            if workload.get(key) is not None:
                _number(f"{VAR}.workload.{key}", workload[key], errors, integer=True,
                        low=0 if key == "warmup_requests" else 1, inclusive_low=True)
    rate = search.get("rate", {})
    if not isinstance(rate, dict):
        errors.append(f"{VAR}.rate: must be a mapping, got {rate!r}")
    else:
        checker.unknown_keys(f"{VAR}.rate", rate, RATE_DEFAULTS)
        for key in ("start_rps", "min_rps", "resolution"):
            if key in rate:
                _number(f"{VAR}.rate.{key}", rate[key], errors)
        for key in ("repeats", "max_probes"):
            if key in rate:
                _number(f"{VAR}.rate.{key}", rate[key], errors, integer=True, low=1, inclusive_low=True)
        if "contender_runs" in rate:
            _number(f"{VAR}.rate.contender_runs", rate["contender_runs"], errors, integer=True, inclusive_low=True)
        for key in ("contender_within_pct", "cutoff_below_pct"):
            if key in rate:
                _number(f"{VAR}.rate.{key}", rate[key], errors, inclusive_low=True, high=100)
        merged = {**RATE_DEFAULTS, **rate}
        if not errors and merged["min_rps"] > merged["start_rps"]:
            errors.append(f"{VAR}.rate.min_rps: must not exceed start_rps ({merged['start_rps']:g}), "
                          f"got {merged['min_rps']!r}")
    verify = search.get("verify", {})
    if not isinstance(verify, dict):
        errors.append(f"{VAR}.verify: must be a mapping, got {verify!r}")
    else:
        checker.unknown_keys(f"{VAR}.verify", verify, VERIFY_DEFAULTS)
        if "best" in verify:
            _number(f"{VAR}.verify.best", verify["best"], errors, integer=True, low=1, inclusive_low=True)
        if "repeats" in verify:
            # the significance test needs three runs per side
            _number(f"{VAR}.verify.repeats", verify["repeats"], errors, integer=True, low=3, inclusive_low=True)
        if verify.get("requests_per_level") is not None:
            _number(f"{VAR}.verify.requests_per_level", verify["requests_per_level"], errors, integer=True, low=1,
                    inclusive_low=True)
        if "min_effect_pct" in verify:
            _number(f"{VAR}.verify.min_effect_pct", verify["min_effect_pct"], errors, inclusive_low=True)
        if "alpha" in verify:
            _number(f"{VAR}.verify.alpha", verify["alpha"], errors, high=0.5)
    if search.get("start_design", "random") not in START_DESIGN_KINDS:
        errors.append(f"{VAR}.start_design: must be one of {', '.join(START_DESIGN_KINDS)}, "
                      f"got {search['start_design']!r}")
    for key in ("surrogate_starts", "seed"):
        if key in search:
            _number(f"{VAR}.{key}", search[key], errors, integer=True, inclusive_low=True)
    return errors


def _check_slo(slo: t.Any, checker: Checker) -> None:
    path, errors = f"{VAR}.slo", checker.errors
    if not isinstance(slo, dict) or not slo:
        errors.append(f"{path}: must map at least one of {', '.join(SLO_METRICS)} to {{target, percentile}}, "
                      f"got {slo!r}")
        return
    for metric, target in slo.items():
        if metric not in SLO_METRICS:
            errors.append(f"{path}.{metric}: unknown latency (known: {', '.join(SLO_METRICS)})")
            continue
        if not isinstance(target, dict) or "target" not in target:
            errors.append(f"{path}.{metric}: must be {{target: <ms>, percentile: <0-100>}}, got {target!r}")
            continue
        checker.unknown_keys(f"{path}.{metric}", target, ("target", "percentile"))
        _number(f"{path}.{metric}.target", target["target"], errors)
        if "percentile" in target:
            _number(f"{path}.{metric}.percentile", target["percentile"], errors, high=100)


class Inputs:
    """``tuning_run_search`` checked, with its defaults."""

    def __init__(self, search: t.Any) -> None:
        errors = check_search(search)
        if errors:
            raise SearchInputError(errors)
        self.raw = search
        self.space: SearchSpace = parse_space(search["knobs"], f"{VAR}.knobs")
        self.budget: Budget = parse_budget(search["budget"], f"{VAR}.budget")
        self.slo = search["slo"]
        self.workload = dict(search.get("workload") or {})
        self.rate = {**RATE_DEFAULTS, **(search.get("rate") or {})}
        self.verify = {**VERIFY_DEFAULTS, **(search.get("verify") or {})}
        self.seed = int(search.get("seed", 0))
        self.surrogate_starts = int(search.get("surrogate_starts", 0))
        self.start_design = search.get("start_design", "random")

    def max_candidates(self) -> int:
        """How many candidates the stage may start: the restart budget, else the grid (capped)."""
        if self.budget.max_restarts is not None:
            return self.budget.max_restarts
        return min(self.space.grid_size() or MAX_CANDIDATES, MAX_CANDIDATES)

    def bench(self, rate: float, repeats: int, requests_per_level: int | None = None) -> dict:
        """The bench module's options of one probe: the workload at one open-loop request rate, under the SLO."""
        options = {key: self.workload[key] for key in WORKLOAD_BENCH_KEYS if self.workload.get(key) is not None}
        if requests_per_level is not None:
            options["requests_per_level"] = int(requests_per_level)
        arrival = {key: self.workload[key] for key in WORKLOAD_ARRIVAL_KEYS if self.workload.get(key) is not None}
        arrival = {"request_rates": [rate], **arrival}
        return {**options, "arrival": arrival, "slo": self.slo, "repeats": int(repeats)}

    def rate_options(self, start_rate: float) -> dict:
        return {"start_rate": max(start_rate, self.rate["min_rps"]), "min_rate": self.rate["min_rps"],
                "resolution": self.rate["resolution"], "repeats": int(self.rate["repeats"])}


def _now() -> str:
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def trial_name(number: int) -> str:
    return f"{number:03d}"


def trial_dir(stage_dir: Path, number: int) -> Path:
    """Where trial ``number`` of the search on a host (its stage folder ``stage_dir``) keeps its records."""
    return Path(stage_dir) / layout.TRIALS / trial_name(number)


def open_loop_runs(sweep: dict) -> list[dict]:
    """The runs of the one level of an open-loop bench sweep (what the rate search judges)."""
    levels = (sweep or {}).get("levels") or []
    if len(levels) != 1 or "request_rate" not in levels[0]:
        raise ValueError("search_step: the probe's sweep must have exactly one open-loop level (bench with "
                         "arrival.request_rates of one rate)")
    return levels[0]["runs"]


class Stage:
    """The search of one host: its state file in ``stage_dir`` and the records of its trials."""

    def __init__(self, stage_dir: str | Path, inputs: Inputs, *, rejects: t.Callable[[dict], str | None] | None = None,
                 check_mode: bool = False) -> None:
        self.dir = Path(stage_dir)
        self.inputs = inputs
        self.rejects = rejects
        self.check_mode = check_mode
        self.state = self._load()
        self.written: list[str] = []

    # -- state --------------------------------------------------------------------------------------------------
    def _load(self) -> dict:
        path = self.dir / STATE_FILE
        if not path.is_file():
            return {"schema_version": SCHEMA_VERSION, "created_at": _now(), "strategy": None, "current": None,
                    "verification": None}
        state = json.loads(path.read_text(encoding="utf-8"))
        if state.get("schema_version") != SCHEMA_VERSION:
            raise ValueError(f"{path}: schema_version {state.get('schema_version')!r} is not {SCHEMA_VERSION}")
        return state

    def search(self) -> GoodputSearch:
        strategy = self.state.get("strategy")
        options = {"surrogate_starts": self.inputs.surrogate_starts, "start_design": self.inputs.start_design}
        if strategy is None:
            return GoodputSearch(self.inputs.space, self.inputs.budget, seed=self.inputs.seed, rejects=self.rejects,
                                 **options)
        return GoodputSearch.from_json(strategy, self.inputs.space, self.inputs.budget, rejects=self.rejects,
                                       **options)

    def _write(self, directory: Path, files: dict[str, t.Any]) -> None:
        texts = {name: serialize(content) for name, content in files.items()}
        self.written += [str(path) for path in write_files(directory, texts, check_mode=self.check_mode)]

    def save(self, search: GoodputSearch | None = None) -> None:
        if search is not None:
            self.state["strategy"] = search.to_json()
        self.state["updated_at"] = _now()
        self._write(self.dir, {STATE_FILE: self.state})

    def trial_dir(self, number: int) -> Path:
        return trial_dir(self.dir, number)

    # -- candidates ---------------------------------------------------------------------------------------------
    def plan(self) -> dict:
        """What the playbook's loops need before the first step, and where an earlier attempt left the search."""
        search = self.search()
        # the playbook's probe loop: the rate search's probes and each contender run in a probe of its own at most
        max_probes = int(self.inputs.rate["max_probes"]) + int(self.inputs.rate["contender_runs"])
        return {"max_candidates": self.inputs.max_candidates(), "max_probes": max_probes,
                "trials": len(search.trials), "spent": search.spent(), "stop_reason": search.stop_reason(),
                "interrupted": (self.state.get("current") or {}).get("name")}

    def next_candidate(self, adopted_args: dict) -> dict:
        """The next candidate to deploy, or ``done`` with the reason. An interrupted candidate's records go."""
        search = self.search()
        before = len(search.trials)
        current = self.state.get("current")
        if current is not None and not self.check_mode:
            # interrupted while measured: proposed again below (same history, same proposal), measured afresh
            shutil.rmtree(self.trial_dir(current["number"]), ignore_errors=True)
        params = search.next_candidate()
        for trial in search.trials[before:]:  # the candidates the flag rules or the installed SGLang refused
            self._write(self.trial_dir(trial["number"]), {
                record_name("trial"): trial,
                record_name("decision"): {"adopt": False, "action": "skip", "reasons": [trial["reason"]],
                                          "summary": f"invalid, not started: {trial['reason']}"}})
        if params is None:
            self.state["current"] = None
            self.save(search)
            return {"done": True, "reason": search.stop_reason() or "no further candidate", "spent": search.spent()}
        number = len(search.trials)
        self.state["current"] = {"number": number, "name": trial_name(number), "params": params,
                                 "args": {**adopted_args, **params}, "started_at": _now(), "probes": []}
        self.save(search)
        return {"done": False, "number": number, "name": trial_name(number), "params": params,
                "args": {**adopted_args, **params}, "dir": str(self.trial_dir(number)), "spent": search.spent()}

    def _current(self) -> dict:
        current = self.state.get("current")
        if current is None:
            raise ValueError("search_step: no candidate is being measured; ask for the next candidate first")
        return current

    def _gpu_minutes(self, current: dict, facts: dict | None, environment: dict | None, scales: Scales) -> float:
        """GPUs x the candidate's time so far; for an emulator in real-GPU time, its start (the server's log to
        ready) at the startup scale and the rest at the serving scale."""
        wall = seconds_between(current["started_at"], _now()) or 0.0
        start = min(float(((facts or {}).get("timings") or {}).get("total") or 0.0), wall)
        real = part(start, start, scales.startup)["real_s"] + part(wall - start, wall - start, scales.serving)["real_s"]
        gpus, _source = deployment_gpus(facts, current.get("args") or current["params"], environment)
        return round((gpus or 1) * real / 60.0, 3)

    def _start_rate(self, search: GoodputSearch) -> float:
        """The best rate so far (the capacity of a similar candidate saves bracket probes), else rate.start_rps."""
        best = search.best(1)
        if best and best[0]["value"] > 0:
            return best[0]["value"]
        return float(self.inputs.rate["start_rps"])

    def probe(self, sweep: dict | None, facts: dict | None, environment: dict | None,
              scales: Scales = Scales()) -> dict:
        """Record the probe just measured (``sweep``, if any) and say the next one; once none is left, record the
        candidate's rate in the strategy and return ``done`` with the rate search's result."""
        current = self._current()
        search = self.search()
        options = self.inputs.rate_options(current.setdefault("start_rate", self._start_rate(search)))
        if sweep is not None:
            planned = current.get("planned") or {}
            runs = open_loop_runs(sweep)
            current["probes"] = rate_search.add_probe(current["probes"], sweep["levels"][0]["request_rate"],
                                                      planned.get("phase", "probe"), runs)
            self._write(self.trial_dir(current["number"]) / record_name("probes"),
                        {f"{len(current['probes']):02d}.json": sweep})
        step = rate_search.next_probe(current["probes"], max_probes=int(self.inputs.rate["max_probes"]), **options)
        if step is not None and self._cut_off(search, current, options):
            step = None
        contending = step is None and int(self.inputs.rate["contender_runs"]) > 0 and not current.get("cut_off")
        if contending and self._contender(search, current, options):
            spent = self._gpu_minutes(current, facts, environment, scales)
            if self._affords_contender_runs(search, current, spent):
                current.setdefault("gpu_minutes_before_contender", spent)
                step = rate_search.contender_probe(current["probes"], int(self.inputs.rate["contender_runs"]),
                                                   repeats=options["repeats"], resolution=options["resolution"])
        if step is not None:
            current["planned"] = step
            self.save()
            return {"done": False, "probe": step, "bench": self.inputs.bench(step["rate_rps"], step["repeats"]),
                    "number": len(current["probes"]) + 1}
        result = rate_search.rate_result(current["probes"], **options)
        if current.get("cut_off"):
            result["reason"] = current["cut_off"]
        gpu_minutes = self._gpu_minutes(current, facts, environment, scales)
        trial = search.record_result(current["params"], result["rate_rps"], gpu_minutes, result["estimate_rps"],
                                     result["estimate_runs"])
        trial["goodput_rps"] = result["goodput_rps"]
        if "gpu_minutes_before_contender" in current:
            # what its contender runs cost: the budget rule's costliest start leaves them out (search_strategy.py)
            trial["contender_gpu_minutes"] = round(max(gpu_minutes - current["gpu_minutes_before_contender"], 0.0), 3)
        self._write(self.trial_dir(current["number"]), {record_name("rate_search"): result, record_name("trial"): trial})
        self.state["current"] = None
        self.save(search)
        return {"done": True, "result": result, "trial": trial, "spent": search.spent()}

    def _cut_off(self, search: GoodputSearch, current: dict, options: dict) -> bool:
        """Whether the candidate's rate search stops here (``rate.cutoff_below_pct``): a rate held and the SLO
        failed at a rate more than that share below the leading candidate's posterior mean when this candidate
        started, so it cannot lead; its bracket's estimate is what the strategy learns. A candidate that held no
        rate yet is bracketed on (its estimate would be none)."""
        share = float(self.inputs.rate["cutoff_below_pct"]) / 100.0
        if not share:
            return False
        if "lead_rps" not in current:
            smoothed, best = search.smoothed(), search.best(1)
            current["lead_rps"] = smoothed[best[0]["number"]] if best else None
        lower, upper = rate_search.rate_result(current["probes"], **options)["bracket"]
        if current["lead_rps"] is None or lower is None or upper is None or upper >= current["lead_rps"] * (1 - share):
            return False
        current["cut_off"] = (f"stopped: the SLO failed at {upper:g} req/s, more than {share:.0%} below the leading "
                              f"candidate's {current['lead_rps']:.4g} req/s (it cannot lead); it held at {lower:g}")
        return True

    def _contender(self, search: GoodputSearch, current: dict, options: dict) -> bool:
        """Whether the ranking of the leading candidates is close with this candidate's estimate: ranked by the
        surrogate's posterior mean with it, it is first or second and the two are within ``contender_within_pct``
        of each other, where a few per cent of run noise decides which is recommended. The first candidate races
        nobody."""
        result = rate_search.rate_result(current["probes"], **options)
        if result["estimate_rps"] is None or not any(trial["state"] == "complete" for trial in search.trials):
            return False
        race = GoodputSearch(search.space, search.budget, seed=search.seed, trials=search.trials)
        trial = race.record_result(current["params"], result["rate_rps"], 0.0, result["estimate_rps"],
                                   result["estimate_runs"])
        smoothed, leaders = race.smoothed(), race.best(2)
        if trial["number"] not in [leader["number"] for leader in leaders] or len(leaders) < 2:
            return False
        first, second = (smoothed[leader["number"]] for leader in leaders)
        return second >= first * (1.0 - float(self.inputs.rate["contender_within_pct"]) / 100.0)

    def _affords_contender_runs(self, search: GoodputSearch, current: dict, gpu_minutes: float) -> bool:
        """Whether the GPU-minute budget still holds the candidate with its contender runs, each costing as much as
        its runs so far did on average (start included: an overestimate, so the budget stays a limit)."""
        limit = search.budget.max_gpu_minutes
        if limit is None:
            return True
        runs = sum(entry["repeats"] for entry in current["probes"] if entry["phase"] != "contender")
        extra = gpu_minutes * int(self.inputs.rate["contender_runs"]) / max(runs, 1)
        return search.spent()["gpu_minutes"] + gpu_minutes + extra <= limit

    def failed_start(self, failure: dict, environment: dict | None, scales: Scales = Scales()) -> dict:
        """The candidate did not start (the server module rolled it back): an infeasible point of the space."""
        current = self._current()
        search = self.search()
        reason = failure.get("summary") or failure.get("message") or "the server did not start"
        trial = search.record_failed_start(current["params"], reason,
                                           self._gpu_minutes(current, None, environment, scales))
        trial["failure_kind"] = failure.get("kind")
        self._write(self.trial_dir(current["number"]), {record_name("trial"): trial})
        self.state["current"] = None
        self.save(search)
        return {"done": True, "trial": trial, "spent": search.spent()}

    # -- re-verification ----------------------------------------------------------------------------------------
    def best(self, adopted_args: dict) -> dict:
        """The candidates to re-verify (the ``verify.best`` ranked highest, a rate above 0) and the rate they are
        compared at (the best one's)."""
        search = self.search()
        best = [trial for trial in search.best(int(self.inputs.verify["best"])) if trial["value"] > 0]
        rate = best[0]["value"] if best else None
        candidates = [{"number": trial["number"], "name": trial_name(trial["number"]), "params": trial["params"],
                       "rate_rps": trial["value"], "args": {**adopted_args, **trial["params"]}} for trial in best]
        reason = None if best else "no candidate met the SLO at any rate; the adopted configuration stays"
        bench = self.inputs.bench(rate, int(self.inputs.verify["repeats"]), self.inputs.verify["requests_per_level"]) \
            if rate else None
        return {"candidates": candidates, "rate_rps": rate, "reason": reason, "stop_reason": search.stop_reason(),
                "spent": search.spent(), "bench": bench}

    def verdict(self, reference_sweep: dict, candidate_sweeps: dict[str, dict]) -> dict:
        """Whether one of the re-verified candidates is adopted: the one with the highest median goodput among those
        whose goodput (requests per second that met the SLO) improved significantly over the adopted configuration's
        at the same rate. Whether the SLO held in every run is reported, not required: the rate is the candidate's
        boundary, where a run of several may just miss the percentile, and goodput already counts only the requests
        that met it."""
        reference = [run.get("goodput_rps") or 0.0 for run in open_loop_runs(reference_sweep)]
        verify = self.inputs.verify
        comparisons = {}
        for name, sweep in candidate_sweeps.items():
            runs = open_loop_runs(sweep)
            values = [run.get("goodput_rps") or 0.0 for run in runs]
            test = compare_samples(reference, values, min_effect_pct=float(verify["min_effect_pct"]),
                                   alpha=float(verify["alpha"]))
            if test["change_pct"] is None and reference and not any(reference) and values and min(values) > 0:
                # goodput 0: every request of the adopted configuration missed the SLO there, every run here met it
                test = {**test, "verdict": "improved", "significant": True,
                        "evidence": "the adopted configuration had no goodput at this rate, the candidate had some "
                                    "in every run"}
            held = all(run.get("slo_holds") for run in runs)
            comparisons[name] = {**test, "slo_held_in_every_run": held, "runs": len(runs),
                                 "reference_goodput_rps": reference, "goodput_rps": values,
                                 "improved": test["verdict"] == "improved"}
        winners = sorted((name for name, comparison in comparisons.items() if comparison["improved"]),
                         key=lambda name: -statistics.median(comparisons[name]["goodput_rps"]))
        reasons = []
        for name, comparison in comparisons.items():
            why = ("the SLO held in every run" if comparison["slo_held_in_every_run"]
                   else "the SLO missed its percentile in a run (reported; goodput counts the requests that met it)")
            reasons.append(f"candidate {name}: goodput {comparison['verdict']} ({comparison['evidence']}); {why}")
        winner = winners[0] if winners else None
        summary = (f"adopt candidate {winner}: significantly higher goodput than the adopted configuration at "
                   f"{self._verify_rate(reference_sweep):g} req/s" if winner else
                   "keep the adopted configuration: no candidate's goodput was significantly higher at "
                   f"{self._verify_rate(reference_sweep):g} req/s")
        decision = {"adopt": winner is not None, "action": "adopt" if winner else "keep", "candidate": winner,
                    "reasons": reasons, "summary": summary, "comparisons": comparisons}
        for name, comparison in comparisons.items():
            adopted = name == winner
            self._write(self.dir / layout.VERIFIED / name, {record_name("decision"): {
                "adopt": adopted, "action": "adopt" if adopted else "revert",
                "reasons": [reason for reason in reasons if reason.startswith(f"candidate {name}:")],
                "summary": (f"{'adopt' if adopted else 'revert'}: goodput {comparison['verdict']} against the adopted "
                            f"configuration at {self._verify_rate(reference_sweep):g} req/s ({comparison['evidence']})"
                            + ("" if comparison["slo_held_in_every_run"] else "; the SLO failed in a run"))}})
        self.state["verification"] = {"decision": {key: decision[key] for key in ("adopt", "candidate", "summary")},
                                      "at": _now()}
        self._write(self.dir / layout.VERIFIED, {record_name("decision"): decision})
        self.save()
        return decision

    @staticmethod
    def _verify_rate(sweep: dict) -> float:
        return float(sweep["levels"][0]["request_rate"])
