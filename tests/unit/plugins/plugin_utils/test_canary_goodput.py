# Copyright (c) llmops.sglang contributors
# Apache License 2.0 (see LICENSE)
"""The upgrade canary's goodput under the run's SLO (issue #37 item 4): the serving release's highest rate that meets
the SLO by the search stage's rate search, the new release held to it less max_goodput_loss_pct in one probe, each
probe recorded in the measurement's folder."""
from __future__ import annotations

import json

import pytest
from ansible.errors import AnsibleActionFail

from ansible_collections.llmops.sglang.plugins.action.canary_goodput import ActionModule

from ansible_collections.llmops.sglang.plugins.plugin_utils.canary_goodput import Goodput
from ansible_collections.llmops.sglang.plugins.plugin_utils.search_stage import SearchInputError
from tests.unit.plugins.plugin_utils.test_search_stage import SEARCH, margin_sweep
from tests.unit.plugins.action.controller import run_controller_action


def measure(goodput: Goodput, cap: float, limited: bool = False) -> tuple[dict, int]:
    """Steps ``goodput`` to its answer against a server of capacity ``cap`` req/s; the answer and the probes taken."""
    step, probes = goodput.step(None), 0
    while not step["done"]:
        assert step["bench"]["slo"] == SEARCH["slo"] and step["bench"]["repeats"] == step["probe"]["repeats"]
        assert step["bench"]["arrival"]["request_rates"] == [step["probe"]["rate_rps"]]
        sweep = margin_sweep(step["probe"]["rate_rps"], step["probe"]["repeats"], cap)
        for run in sweep["levels"][0]["runs"]:
            run["client_limited"] = limited
        step, probes = goodput.step(sweep), probes + 1
    return step["result"], probes


def test_the_serving_release_is_rate_searched_and_the_new_one_holds_its_rate_in_one_probe(tmp_path):
    old, probes = measure(Goodput(tmp_path / "old", SEARCH, "old"), cap=10.0)
    assert 9.0 <= old["rate_rps"] <= 10.0 and probes > 2, old
    assert old["slo"] == SEARCH["slo"] and old["converged"]
    new, probes = measure(Goodput(tmp_path / "new", SEARCH, "new", reference=old), cap=9.8)
    assert probes == 1 and new["held"] is True and new["runs"] == SEARCH["rate"]["repeats"] == 2
    assert new["rate_rps"] == pytest.approx(old["rate_rps"] * 0.95) and new["max_loss_pct"] == 5.0
    recorded = json.loads((tmp_path / "new" / "goodput.json").read_text())
    assert recorded["result"] == new and recorded["phase"] == "new"
    assert sorted(p.name for p in (tmp_path / "old" / "probes").iterdir())[0] == "01.json"


def test_a_new_release_below_the_serving_rate_less_the_loss_misses_and_says_in_how_many_runs(tmp_path):
    old, _ = measure(Goodput(tmp_path / "old", SEARCH, "old"), cap=10.0)
    new, _ = measure(Goodput(tmp_path / "new", SEARCH, "new", reference=old), cap=7.0)
    assert new["held"] is False and new["failed_runs"] == new["runs"] == 2
    tolerant, _ = measure(Goodput(tmp_path / "tolerant", SEARCH, "new", reference=old,
                                  policy={"max_goodput_loss_pct": 40}), cap=7.0)
    assert tolerant["held"] is True


def test_nothing_is_compared_when_the_serving_release_met_the_slo_nowhere_or_the_client_could_not_drive_it(tmp_path):
    never = {"rate_rps": None, "reason": "no rate meets the SLO: it failed at 0.01 req/s and min_rate is 0.01"}
    new, probes = measure(Goodput(tmp_path / "new", SEARCH, "new", reference=never), cap=10.0)
    assert probes == 0 and new["held"] is None and "met the SLO at no rate its search tried (no rate meets" in new["reason"]
    limited, _ = measure(Goodput(tmp_path / "limited", SEARCH, "new", reference={"rate_rps": 8.0}), cap=10.0,
                         limited=True)
    assert limited["held"] is None and limited["reason"] == "the benchmark client could not drive 7.6 req/s"


def test_a_first_step_starts_over_and_check_mode_writes_nothing(tmp_path):
    measure(Goodput(tmp_path, SEARCH, "old"), cap=10.0)
    first = Goodput(tmp_path, SEARCH, "old").step(None)
    assert json.loads((tmp_path / "goodput.json").read_text())["log"] == [] and not first["done"]
    assert not (tmp_path / "probes").exists(), "an earlier attempt's probes are gone"
    dry = Goodput(tmp_path / "dry", SEARCH, "old", check_mode=True)
    dry.step(None)
    assert dry.written == [str(tmp_path / "dry" / "goodput.json")] and not (tmp_path / "dry").exists()


@pytest.mark.parametrize("kwargs, error, message", [
    ({"search": {**SEARCH, "slo": {"ttft": {"target": 1}}}}, SearchInputError, "tuning_run_search.slo.ttft: unknown latency"),
    ({"policy": {"max_goodput_loss_pct": 100}}, ValueError, "upgrade_canary_policy.max_goodput_loss_pct: a number >= 0 and < 100"),
    ({"phase": "new"}, ValueError, "reference: the serving release's goodput result"),
    ({"phase": "both"}, ValueError, "phase: one of old, new, not 'both'"),
], ids=["slo", "policy", "reference", "phase"])
def test_bad_inputs_name_the_field(tmp_path, kwargs, error, message):
    options = {"search": SEARCH, "phase": "old", **kwargs}
    with pytest.raises(error, match=message.replace("(", r"\(")):
        Goodput(tmp_path, options.pop("search"), options.pop("phase"), **options)
    assert not any(tmp_path.iterdir())


def run_action(monkeypatch, args: dict) -> dict:
    """The action's run with these arguments, the options it is not given at their documented defaults."""
    options = {"policy": {}, "reference": None, "sweep": None, **args}
    return run_controller_action(monkeypatch, ActionModule, options)


def test_the_action_names_the_search_input_that_is_wrong_and_says_how_many_probes_it_may_take(tmp_path, monkeypatch):
    with pytest.raises(AnsibleActionFail, match=r"tuning_run_search \(the SLO the canary's goodput is measured under\)"):
        run_action(monkeypatch, {"phase": "old", "dir": str(tmp_path), "search": {**SEARCH, "slo": {}}})
    answer = run_action(monkeypatch, {"phase": "old", "dir": str(tmp_path), "search": SEARCH})
    assert answer["done"] is False and answer["max_probes"] == 12 and answer["changed"]
    with pytest.raises(AnsibleActionFail, match="canary_goodput new: reference"):
        run_action(monkeypatch, {"phase": "new", "dir": str(tmp_path), "search": SEARCH})
