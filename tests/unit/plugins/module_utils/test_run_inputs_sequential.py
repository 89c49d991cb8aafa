# Copyright (c) llmops.sglang contributors
# Apache License 2.0 (see LICENSE)
"""tuning_run_sequential, the candidates' stopping rule, is checked with the run's other inputs (issue #18)."""
from __future__ import annotations

import pytest

from ansible_collections.llmops.sglang.plugins.module_utils.run_inputs import validate_run_inputs
from tests.unit.plugins.module_utils.test_run_inputs import DEFAULTS, good_inputs


def errors_with_rule(**changes) -> list[str]:
    inputs = good_inputs()
    inputs["sequential"] = {**DEFAULTS["tuning_run_sequential"], **changes}
    return validate_run_inputs(inputs)


def test_the_role_default_rule_can_work_and_null_is_not_checked() -> None:
    assert errors_with_rule() == []
    assert validate_run_inputs({**good_inputs(), "sequential": None}) == []


@pytest.mark.parametrize(("changes", "message"), [
    ({"min_repeats": 1}, "tuning_run_sequential.min_repeats: must be an integer >= 2 (an adopted candidate is the "
                         "next candidate's reference, which needs 2 runs per level), got 1"),
    ({"min_repeats": 6, "max_repeats": 5}, "tuning_run_sequential.min_repeats: 6 is more than max_repeats 5"),
    ({"max_repeats": 60}, "tuning_run_sequential.max_repeats: must be at most 50, got 60"),
    ({"max_repeats": "ten"}, "tuning_run_sequential.max_repeats: must be a positive integer, got 'ten'"),
    ({"spending": "pocok"}, "tuning_run_sequential.spending: must be one of obrien_fleming, pocock, got 'pocok'; did "
                            "you mean 'pocock'?"),
    ({"beta": 0.5}, "tuning_run_sequential.beta: must be below 0.5, got 0.5"),
    ({"beta": 0}, "tuning_run_sequential.beta: must be a number between 0 and 0.5, got 0"),
    ({"stop_on_regression": "maybe"}, "tuning_run_sequential.stop_on_regression: must be true or false, got 'maybe'"),
    ({"one_sided_stops": "yes please"},
     "tuning_run_sequential.one_sided_stops: must be true or false, got 'yes please'"),
    ({"max_repeat": 8}, "tuning_run_sequential.max_repeat: unknown key; did you mean 'max_repeats'?"),
])
def test_each_problem_names_the_key(changes: dict, message: str) -> None:
    errors = errors_with_rule(**changes)
    assert any(error.startswith(message) for error in errors), errors


def test_a_single_baseline_run_cannot_be_a_reference() -> None:
    inputs = {**good_inputs(), "sequential": DEFAULTS["tuning_run_sequential"]}
    inputs["bench"] = {**inputs["bench"], "repeats": "1"}
    assert validate_run_inputs(inputs) == [
        "tuning_run_bench.repeats: the baseline is the first reference of tuning_run_sequential and needs at least 2 "
        "runs per level, got 1 (or set tuning_run_sequential: null)"]
    inputs["sequential"] = None
    assert validate_run_inputs(inputs) == []
