# Copyright (c) llmops.sglang contributors
# Apache License 2.0 (see LICENSE)
"""The knob space of the goodput search (issue 19 deliverable 2): parsing, the errors a wrong space gets before
anything runs, and the grid size the budget and "% of grid" are measured against."""
from __future__ import annotations

import pytest

from ansible_collections.llmops.sglang.plugins.plugin_utils.search_space import parse_knob, parse_space

KNOBS = {
    "max_running_requests": {"low": 16, "high": 128, "step": 16},
    "chunked_prefill_size": {"values": [2048, 4096, 8192]},
    "schedule_policy": {"values": ["fcfs", "lpm"]},
    "mem_fraction_static": {"low": 0.80, "high": 0.92, "step": 0.02},
}


def test_a_space_of_choices_and_stepped_ranges_has_the_product_of_their_sizes_as_grid():
    space = parse_space(KNOBS)
    assert space.names == tuple(KNOBS)
    assert [knob.kind for knob in space.knobs] == ["int", "choice", "choice", "float"]
    assert space.knobs[0].points() == (16, 32, 48, 64, 80, 96, 112, 128)
    assert space.knobs[3].points() == (0.8, 0.82, 0.84, 0.86, 0.88, 0.9, 0.92)
    assert space.grid_size() == 8 * 3 * 2 * 7


def test_grid_points_enumerate_every_candidate_once():
    space = parse_space({"page_size": {"values": [1, 16]}, "speculative_num_steps": {"low": 1, "high": 3}})
    points = [space.grid_point(index) for index in range(space.grid_size())]
    assert len({space.key(point) for point in points}) == 6
    assert points[0] == {"page_size": 1, "speculative_num_steps": 1}


def test_a_float_range_without_step_is_continuous_so_the_grid_has_no_size():
    space = parse_space({"schedule_conservativeness": {"low": 0.3, "high": 1.5, "log": True}})
    assert space.grid_size() is None
    assert space.knobs[0].log


@pytest.mark.parametrize(("spec", "value", "neighbours"), [
    ({"values": [8, 16, 32]}, 16, [8, 32]),
    ({"values": ["fcfs", "lpm"]}, "fcfs", ["lpm"]),
    ({"low": 16, "high": 128, "step": 16}, 128, [112]),
    ({"low": 1, "high": 8}, 1, [2]),
    ({"low": 0.80, "high": 0.88, "step": 0.02}, 0.84, [0.82, 0.86]),
    ({"low": 0.0, "high": 0.8}, 0.05, [0.15]),
    ({"low": 0.25, "high": 64.0, "log": True}, 1.0, [0.5, 2.0]),
])
def test_a_knobs_neighbours_are_one_step_away_within_its_bounds(spec, value, neighbours):
    expected = neighbours if isinstance(neighbours[0], str) else pytest.approx(neighbours)
    assert parse_knob("knob", spec).neighbours(value) == expected


def test_sampled_stepped_floats_are_the_values_the_user_wrote():
    knob = parse_space({"mem_fraction_static": {"low": 0.8, "high": 0.9, "step": 0.02}}).knobs[0]
    assert knob.canonical(0.8 + 3 * 0.02) == 0.86 != 0.8 + 3 * 0.02


@pytest.mark.parametrize(("knobs", "message"), [
    ({"chunked_prefill_size": {"low": 8192, "high": 4096}},
     "search.knobs.chunked_prefill_size.low: must be below high (got 8192 >= 4096)"),
    ({"chunked_prefill_size": {"low": 1024}}, "search.knobs.chunked_prefill_size: a range needs both low and high"),
    ({"chunked_prefill_size": {"low": "1k", "high": 4096}}, "search.knobs.chunked_prefill_size.low: must be a number"),
    ({"max_running_requests": {"low": 16, "high": 100, "step": 16}},
     "must be a multiple of step (16); set high to 96 or 112"),
    ({"max_running_requests": {"low": 16, "high": 128, "step": 0.5}}, "step: must be a positive integer"),
    ({"mem_fraction_static": {"low": 0.8, "high": 0.9, "step": -0.1}}, "step: must be a positive number"),
    ({"schedule_conservativeness": {"low": 0, "high": 2.0, "log": True}}, "a log range needs low > 0 (got 0)"),
    ({"schedule_conservativeness": {"low": 0.5, "high": 2.0, "step": 0.5, "log": True}},
     "log and step cannot be combined"),
    ({"cuda_graph_max_bs": {"low": 8, "high": 64, "log": "yes"}}, "cuda_graph_max_bs.log: must be true or false"),
    ({"schedule_policy": {"values": ["lpm"]}}, "schedule_policy.values: list at least two values"),
    ({"schedule_policy": {"values": ["lpm", "fcfs", "lpm"]}}, "schedule_policy.values: 'lpm' is listed twice"),
    ({"schedule_policy": {"values": ["lpm", {"x": 1}]}}, "must be a string, number, boolean or null"),
    ({"page_size": {"values": [1, 16], "low": 1}}, "page_size: values and low cannot be combined"),
    ({"page_size": {"choices": [1, 16]}}, "page_size: unknown key 'choices'; use values, or low, high"),
    ({"page_size": [1, 16]}, "search.knobs.page_size: must be {values: [...]} or {low, high, step, log}"),
    ({"chunked-prefill-size": {"values": [1, 2]}}, "snake_case as in ServerArgs, e.g. chunked_prefill_size); "
                                                   "write chunked_prefill_size"),
    ({"--page-size": {"values": [1, 2]}}, "write page_size"),
    ({}, "search.knobs: must map at least one server arg"),
])
def test_a_wrong_space_fails_naming_the_field_and_the_fix(knobs, message):
    with pytest.raises(ValueError) as error:
        parse_space(knobs)
    assert message in str(error.value)


def test_a_knob_places_its_values_on_zero_to_one_for_the_surrogate():
    space = parse_space({"max_running_requests": {"values": [8, 16, 32]},
                         "mem_fraction_static": {"low": 0.8, "high": 0.9},
                         "schedule_conservativeness": {"low": 0.1, "high": 10.0, "log": True}})
    running, memory, conservativeness = space.knobs
    assert [running.position(value) for value in (8, 16, 32)] == [0.0, 0.5, 1.0]
    assert memory.position(0.85) == pytest.approx(0.5)
    assert conservativeness.position(1.0) == pytest.approx(0.5)
