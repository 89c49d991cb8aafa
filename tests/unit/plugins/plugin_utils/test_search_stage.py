"""The search stage's bookkeeping (plugin_utils/search_stage.py) driven as playbooks/search.yml drives it, against a
synthetic server: proposals, probes recorded one by one, a failed start learnt as infeasible, refused candidates, the
verdict, and resuming from search.json (an interrupted candidate is proposed again and measured afresh)."""
from __future__ import annotations

import json

import pytest

from ansible_collections.llmops.sglang.plugins.action.search_step import candidate_check
from ansible_collections.llmops.sglang.plugins.plugin_utils import rate_search
from ansible_collections.llmops.sglang.plugins.plugin_utils.search_stage import (
    Inputs,
    SearchInputError,
    Stage,
    check_search,
)

SEARCH = {
    "knobs": {"max_running_requests": {"values": [8, 32]}, "mem_fraction_static": {"values": [0.81, 0.97]}},
    "budget": {"max_restarts": 4},
    "slo": {"ttft_ms": {"target": 300, "percentile": 90}},
    "workload": {"input_len": 1000, "output_len": 32, "requests_per_level": 24, "process": "gamma", "burstiness": 2},
    "rate": {"start_rps": 4, "resolution": 0.1, "repeats": 2, "max_probes": 12},
    "verify": {"repeats": 3, "requests_per_level": 48},
}
ADOPTED = {"tp_size": 4, "max_running_requests": 8}


def capacity(params: dict) -> float:
    return 10.0 if params["max_running_requests"] == 32 else 5.0


def sweep(rate: float, runs: int, cap: float, goodput: float | None = None) -> dict:
    held = rate <= cap
    return {"levels": [{"request_rate": rate, "runs": [
        {"slo_holds": held, "goodput_rps": goodput if goodput is not None else (rate if held else cap / 2),
         "client_limited": False} for _ in range(runs)]}]}


def measure_candidate(stage: Stage, params: dict) -> dict:
    step = stage.probe(None, None, None)
    while not step["done"]:
        assert step["bench"]["arrival"] == {"request_rates": [step["probe"]["rate_rps"]], "process": "gamma",
                                            "burstiness": 2}
        step = stage.probe(sweep(step["probe"]["rate_rps"], step["probe"]["repeats"], capacity(params)),
                           {"server_args": {"tp_size": 4}}, None)
    return step


def run_search(tmp_path, stage: Stage | None = None) -> Stage:
    stage = stage or Stage(tmp_path, Inputs(SEARCH))
    while True:
        candidate = stage.next_candidate(ADOPTED)
        if candidate["done"]:
            return stage
        if candidate["params"]["mem_fraction_static"] == 0.97:
            stage.failed_start({"summary": "SGLang failed to start (oom): CUDA out of memory", "kind": "oom"},
                               None)
        else:
            measure_candidate(stage, candidate["params"])


def test_a_search_records_every_trial_and_its_probes(tmp_path):
    stage = run_search(tmp_path)
    state = json.loads((tmp_path / "search.json").read_text())
    trials = state["strategy"]["trials"]
    assert state["strategy"]["spent"]["restarts"] == 4 and state["current"] is None
    assert sorted(t["state"] for t in trials) == ["complete", "complete", "infeasible", "infeasible"]
    best = stage.search().best(1)[0]
    assert best["params"] == {"max_running_requests": 32, "mem_fraction_static": 0.81}
    assert 9.0 <= best["value"] <= 10.0  # the boundary of the synthetic server, to the resolution
    for trial in trials:
        directory = tmp_path / "trials" / f"{trial['number']:03d}"
        assert json.loads((directory / "trial.json").read_text())["state"] == trial["state"]
        if trial["state"] == "complete":
            result = json.loads((directory / "rate_search.json").read_text())
            assert len(list((directory / "probes").glob("*.json"))) == result["cost"]["probes"]
        else:
            assert trial["reason"].startswith("SGLang failed to start (oom)")


def test_a_trial_is_ranked_by_the_estimate_its_slo_margins_give(tmp_path):
    stage = Stage(tmp_path, Inputs({**SEARCH, "surrogate_starts": 1}))
    stage.next_candidate(ADOPTED)
    step = stage.probe(None, None, None)
    while not step["done"]:  # TTFT p90 = 300 ms x (rate / 7.7)^4: the SLO's target is met up to 7.7 req/s
        rate, runs = step["probe"]["rate_rps"], step["probe"]["repeats"]
        observed = 300.0 * (rate / 7.7) ** 4
        step = stage.probe({"levels": [{"request_rate": rate, "runs": [
            {"slo_holds": observed <= 300.0, "goodput_rps": rate, "client_limited": False,
             "slo": {"ttft_ms": {"target": 300.0, "percentile": 90.0, "observed": observed}}}] * runs}]}, None, None)
    trial, result = step["trial"], step["result"]
    assert trial["value"] == result["rate_rps"] < 7.7 < result["bracket"][1]
    assert trial["estimate_rps"] == result["estimate_rps"] == pytest.approx(7.7)
    assert json.loads((tmp_path / "search.json").read_text())["strategy"]["surrogate_starts"] == 1


def close_capacity(params: dict) -> float:
    """Two candidates at 10 req/s, one 2 % below them, one at half."""
    if params["max_running_requests"] == 32:
        return 10.0
    return 9.8 if params["mem_fraction_static"] == 0.97 else 5.0


@pytest.mark.parametrize("budget", [{"max_restarts": 4}, {"max_gpu_minutes": 1e6}])
def test_a_candidate_close_to_the_best_gets_contender_runs_at_its_bracket_while_its_server_is_up(tmp_path, budget):
    assert Stage(tmp_path / "off", Inputs(SEARCH)).plan()["max_probes"] == 12  # off by default
    stage = Stage(tmp_path, Inputs({**SEARCH, "budget": budget, "rate": {**SEARCH["rate"], "contender_runs": 4}}))
    assert stage.plan()["max_probes"] == 12 + 4  # the playbook's probe loop has room for them
    closes = []
    for _candidate in range(4):
        params = stage.next_candidate(ADOPTED)["params"]
        step = stage.probe(None, None, {"gpus": 1})
        phases = []
        while not step["done"]:
            phases.append(step["probe"]["phase"])
            step = stage.probe(sweep(step["probe"]["rate_rps"], step["probe"]["repeats"], close_capacity(params)),
                               None, {"gpus": 1})
        contender = [probe for probe in step["result"]["probes"] if probe["phase"] == "contender"]
        search = stage.search()
        smoothed, leaders = search.smoothed(), [trial["number"] for trial in search.best(2)]
        close = len(leaders) == 2 and step["trial"]["number"] in leaders and \
            smoothed[leaders[1]] >= 0.95 * smoothed[leaders[0]]
        closes.append(close)
        # first or second of the ranking, the two within 5 %: 4 more runs, 2 at each end of the final bracket
        assert sum(probe["repeats"] for probe in contender) == (4 if close else 0), (params, phases)
        assert {probe["rate_rps"] for probe in contender} == (set(step["result"]["bracket"]) if close else set())
        assert step["trial"]["estimate_runs"] == step["result"]["estimate_runs"]
        assert ("contender_gpu_minutes" in step["trial"]) == close
    assert True in closes and False in closes  # the first candidate races nobody
    assert stage.search().to_json()["confidence"] is not None


def test_contender_runs_that_would_overrun_the_gpu_minute_budget_are_not_taken(tmp_path):
    stage = Stage(tmp_path, Inputs({**SEARCH, "budget": {"max_gpu_minutes": 130.0},
                                    "rate": {**SEARCH["rate"], "contender_runs": 4}}))
    search = stage.search()
    search.record_result({"max_running_requests": 32, "mem_fraction_static": 0.81}, 10.0, 60.0)
    stage.save(search)
    stage.next_candidate(ADOPTED)
    current = stage.state["current"]
    current["probes"] = [{"rate_rps": 8.0, "phase": "bisect", "repeats": 2}]
    # 30 GPU-minutes for 2 runs: 4 more would cost about 60, past the 130 with the 60 spent
    assert not stage._affords_contender_runs(stage.search(), current, 30.0)
    assert stage._affords_contender_runs(stage.search(), current, 10.0)


def margin_sweep(rate: float, runs: int, cap: float) -> dict:
    """``sweep`` whose runs report their SLO margin: TTFT p90 = 300 ms x (rate / cap)^4."""
    observed = 300.0 * (rate / cap) ** 4
    return {"levels": [{"request_rate": rate, "runs": [
        {"slo_holds": observed <= 300.0, "goodput_rps": rate, "client_limited": False,
         "slo": {"ttft_ms": {"target": 300.0, "percentile": 90.0, "observed": observed}}}] * runs}]}


def measure(stage: Stage, cap: float) -> dict:
    step = stage.probe(None, None, None)
    while not step["done"]:
        step = stage.probe(margin_sweep(step["probe"]["rate_rps"], step["probe"]["repeats"], cap), None, None)
    return step


@pytest.mark.parametrize("cutoff", [0, 10])
def test_a_candidate_that_cannot_lead_is_cut_off_once_it_failed_below_the_leader(tmp_path, cutoff):
    stage = Stage(tmp_path, Inputs({**SEARCH, "rate": {**SEARCH["rate"], "cutoff_below_pct": cutoff}}))
    stage.next_candidate(ADOPTED)
    leader = measure(stage, 10.0)
    assert "stopped" not in leader["result"]["reason"]  # nobody led before it
    stage.next_candidate(ADOPTED)
    step = measure(stage, 5.0)  # brackets down from the leader's rate: fails at 9.x, holds at 4.x
    result, trial = step["result"], step["trial"]
    lower, upper = result["bracket"]
    if cutoff:
        # held at a rate, failed more than 10 % below the leader's ~10: stopped there, estimated in its bracket
        assert upper < 0.9 * leader["trial"]["estimate_rps"] and lower < 5.0 < upper
        assert result["reason"].startswith(f"stopped: the SLO failed at {upper:g} req/s, more than 10% below")
        assert trial["estimate_rps"] == pytest.approx(5.0, rel=1e-6) and trial["value"] in (0.0, lower)
        assert result["cost"]["runs"] < 5  # two bracket runs and one bisection of 2 runs at most
    else:
        assert result["converged"] and result["cost"]["runs"] >= 5 and trial["value"] == result["rate_rps"]
    assert json.loads((tmp_path / "trials" / "001" / "rate_search.json").read_text())["reason"] == result["reason"]


def test_the_stepped_rate_search_is_find_max_rate():
    options = {"start_rate": 4, "resolution": 0.1, "repeats": 2}
    stepped, log = None, []
    while (step := rate_search.next_probe(log, **options)) is not None:
        log = rate_search.add_probe(log, step["rate_rps"], step["phase"],
                                    sweep(step["rate_rps"], step["repeats"], 10.0)["levels"][0]["runs"])
    stepped = rate_search.rate_result(log, **options)
    whole = rate_search.find_max_rate(lambda rate, n: sweep(rate, n, 10.0)["levels"][0]["runs"], **options)
    assert stepped == whole and stepped["converged"]


def test_an_interrupted_candidate_is_proposed_again_and_measured_afresh(tmp_path):
    stage = Stage(tmp_path, Inputs(SEARCH))
    first = stage.next_candidate(ADOPTED)
    while first["params"]["mem_fraction_static"] == 0.97:
        stage.failed_start({"summary": "oom"}, None)
        first = stage.next_candidate(ADOPTED)
    step = stage.probe(None, None, None)
    stage.probe(sweep(step["probe"]["rate_rps"], 1, 10.0), None, None)  # one probe, then the controller died
    assert (tmp_path / "trials" / first["name"] / "probes" / "01.json").is_file()
    resumed = Stage(tmp_path, Inputs(SEARCH))
    again = resumed.next_candidate(ADOPTED)
    assert (again["name"], again["params"]) == (first["name"], first["params"])
    assert not (tmp_path / "trials" / first["name"]).exists()
    uninterrupted = run_search(tmp_path / "other")
    run_search(tmp_path, resumed)
    ours = json.loads((tmp_path / "search.json").read_text())["strategy"]["trials"]
    theirs = json.loads((tmp_path / "other" / "search.json").read_text())["strategy"]["trials"]
    assert [t["params"] for t in ours] == [t["params"] for t in theirs]


def test_a_finished_search_proposes_nothing(tmp_path):
    run_search(tmp_path)
    before = (tmp_path / "search.json").read_text()
    again = Stage(tmp_path, Inputs(SEARCH)).next_candidate(ADOPTED)
    assert again["done"] and again["reason"] == "budget spent: 4 of 4 restarts"
    assert json.loads((tmp_path / "search.json").read_text())["strategy"] == json.loads(before)["strategy"]


def test_refused_candidates_are_invalid_and_cost_no_restart(tmp_path):
    rules = [{"id": "no-big-batches", "flag": "max_running_requests", "requires": {"sm_in": ["sm90"]},
              "reason": "it needs SM90 here", "source": "test"}]
    rejects = candidate_check(ADOPTED, None, rules, {"sm": "sm120"}, True)
    assert rejects({"max_running_requests": 32}).startswith("ineffective here: max_running_requests will not")
    help_text = "  --max-running-requests MAX_RUNNING_REQUESTS\n  --tp-size TP_SIZE\n"
    refused = candidate_check(ADOPTED, help_text, None, None, True)({"mem_fraction_static": 0.8})
    assert refused.startswith("the installed SGLang refuses it:")
    stage = Stage(tmp_path, Inputs(SEARCH), rejects=lambda params: "refused" if params["mem_fraction_static"] == 0.97
                  else None)
    run_search(tmp_path, stage)
    trials = json.loads((tmp_path / "search.json").read_text())["strategy"]["trials"]
    invalid = [t for t in trials if t["state"] == "invalid"]
    assert len(invalid) == 2 and all(t["params"]["mem_fraction_static"] == 0.97 for t in invalid)
    decision = json.loads((tmp_path / "trials" / f"{invalid[0]['number']:03d}" / "decision.json").read_text())
    assert decision["action"] == "skip" and decision["reasons"] == ["refused"]


def test_the_verdict_adopts_only_a_significant_goodput_gain(tmp_path):
    stage = run_search(tmp_path)
    best = stage.best(ADOPTED)
    assert [c["params"]["max_running_requests"] for c in best["candidates"]] == [32]
    assert best["bench"]["requests_per_level"] == 48 and best["bench"]["repeats"] == 3
    rate = best["rate_rps"]
    reference = {"levels": [{"request_rate": rate, "runs": [{"goodput_rps": g, "slo_holds": False}
                                                            for g in (4.8, 5.0, 5.2)]}]}
    better = {"levels": [{"request_rate": rate, "runs": [{"goodput_rps": g, "slo_holds": True}
                                                         for g in (9.1, 9.3, 9.2)]}]}
    name = best["candidates"][0]["name"]
    decision = stage.verdict(reference, {name: better})
    assert decision["adopt"] and decision["candidate"] == name
    assert json.loads((tmp_path / "verify" / name / "decision.json").read_text())["action"] == "adopt"
    same = {"levels": [{"request_rate": rate, "runs": [{"goodput_rps": g, "slo_holds": True}
                                                       for g in (5.1, 4.9, 5.0)]}]}
    assert not stage.verdict(reference, {name: same})["adopt"]


@pytest.mark.parametrize(("change", "message"), [
    ({"budget": {}}, "tuning_run_search.budget: set max_restarts and/or max_gpu_minutes"),
    ({"slo": {"ttft": {"target": 1}}}, "tuning_run_search.slo.ttft: unknown latency"),
    ({"rate": {"repeats": 0}}, "tuning_run_search.rate.repeats: must be an integer >= 1, got 0"),
    ({"rate": {"contender_runs": -2}}, "tuning_run_search.rate.contender_runs: must be an integer >= 0, got -2"),
    ({"rate": {"cutoff_below_pct": 150}}, "tuning_run_search.rate.cutoff_below_pct: must be a number >= 0 and <= 100, "
                                          "got 150"),
    ({"verify": {"repeats": 2}}, "tuning_run_search.verify.repeats: must be an integer >= 3, got 2"),
    ({"workload": {"arrival": {}}}, "tuning_run_search.workload.arrival: unknown key"),
    ({"surrogate_starts": -1}, "tuning_run_search.surrogate_starts: must be an integer >= 0, got -1"),
    ({"start_design": "grid"}, "tuning_run_search.start_design: must be one of random, latin_hypercube, got 'grid'"),
    ({"knobs": {"max-running-requests": {"values": [1, 2]}}}, "tuning_run_search.knobs: 'max-running-requests' is "
                                                               "not a server arg name"),
], ids=["budget", "slo", "rate", "contender_runs", "cutoff_below_pct", "verify", "workload", "surrogate_starts", "start_design",
                                 "knobs"])
def test_input_errors_name_the_field(change, message):
    errors = check_search({**SEARCH, **change})
    assert any(error.startswith(message) for error in errors), errors
    with pytest.raises(SearchInputError):
        Inputs({**SEARCH, **change})
