# Copyright (c) llmops.sglang contributors
# Apache License 2.0 (see LICENSE)
"""The knob space of a goodput search: SGLang server args, each with its choices or its int/float range.

Controller-side (plugin_utils), stdlib only. The input is ``search.knobs``, e.g.::

    chunked_prefill_size: {values: [2048, 4096, 8192]}
    max_running_requests: {low: 16, high: 128, step: 16}
    mem_fraction_static: {low: 0.80, high: 0.92, step: 0.02}
    schedule_conservativeness: {low: 0.3, high: 1.5, log: true}

Names are ServerArgs' snake_case; whether the installed SGLang knows a name and takes a value is checked per
candidate with its --help (server_args.validate_server_args), because a range's values only exist when sampled.
Errors name the field and the fix, and come before anything is deployed.
"""
from __future__ import annotations

import math
import re
import typing as t
from dataclasses import dataclass

CHOICE_KEYS = frozenset({"values"})
RANGE_KEYS = frozenset({"low", "high", "step", "log"})
_ARG_NAME = re.compile(r"^[a-z][a-z0-9_]*$")
# Stepped float values are rounded to this many decimals, so 0.8 + 3 * 0.02 is the 0.86 a user wrote.
FLOAT_DECIMALS = 10
# A continuous range's neighbour is this fraction of it away (of its logarithm for a log range).
CONTINUOUS_STEPS = 8


def _is_number(value: t.Any) -> bool:
    return not isinstance(value, bool) and isinstance(value, (int, float)) and math.isfinite(value)


@dataclass(frozen=True)
class Knob:
    """One server arg of the space: ``values`` (choices) or ``low``..``high`` (``integer`` range or float)."""

    name: str
    values: tuple | None = None
    low: float | None = None
    high: float | None = None
    step: float | None = None
    log: bool = False
    integer: bool = False

    @property
    def kind(self) -> str:
        if self.values is not None:
            return "choice"
        return "int" if self.integer else "float"

    def points(self) -> tuple | None:
        """Every value the knob can take, in order; None for a continuous float range (no step)."""
        if self.values is not None:
            return self.values
        if self.integer:
            return tuple(range(int(self.low), int(self.high) + 1, int(self.step or 1)))
        if self.step is None:
            return None
        count = round((self.high - self.low) / self.step) + 1
        return tuple(round(self.low + index * self.step, FLOAT_DECIMALS) for index in range(count))

    def neighbours(self, value: t.Any) -> list:
        """The values one step from ``value``, down then up: the adjacent choices, +-step of a range, and for a
        continuous range an eighth of it (of its logarithm for a log range), within the bounds."""
        if self.values is not None:
            index = self.values.index(value)
            return [self.values[i] for i in (index - 1, index + 1) if 0 <= i < len(self.values)]
        if self.step is not None or self.integer:
            step = self.step or 1
            candidates = [value - step, value + step]
        elif self.log:
            factor = (self.high / self.low) ** (1 / CONTINUOUS_STEPS)
            candidates = [value / factor, value * factor]
        else:
            width = (self.high - self.low) / CONTINUOUS_STEPS
            candidates = [value - width, value + width]
        return [self.canonical(candidate) for candidate in candidates if self.low <= candidate <= self.high]

    def position(self, value: t.Any) -> float:
        """Where ``value`` lies on the knob, 0 to 1: its index among the choices, its place in the range (of the
        logarithms for a log range)."""
        if self.values is not None:
            return self.values.index(value) / (len(self.values) - 1) if len(self.values) > 1 else 0.0
        if self.high == self.low:
            return 0.0
        if self.log:
            return math.log(value / self.low) / math.log(self.high / self.low)
        return (value - self.low) / (self.high - self.low)

    def canonical(self, value: t.Any) -> t.Any:
        """The value as the space lists it (a sampled stepped float carries rounding noise)."""
        if self.kind == "float":
            return round(float(value), FLOAT_DECIMALS)
        return value

    def as_dict(self) -> dict:
        if self.values is not None:
            return {"values": list(self.values)}
        return {"low": self.low, "high": self.high, "step": self.step, "log": self.log}


@dataclass(frozen=True)
class SearchSpace:
    knobs: tuple[Knob, ...]

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(knob.name for knob in self.knobs)

    def grid_size(self) -> int | None:
        """Number of distinct candidates; None when a float range has no step (the space is continuous)."""
        size = 1
        for knob in self.knobs:
            points = knob.points()
            if points is None:
                return None
            size *= len(points)
        return size

    def key(self, params: t.Mapping[str, t.Any]) -> tuple:
        """A candidate's identity, for telling a repeated point from a new one."""
        return tuple(knob.canonical(params[knob.name]) for knob in self.knobs)

    def grid_point(self, index: int) -> dict:
        """The ``index``-th candidate of the grid (mixed-radix over the knobs in order); finite spaces only."""
        params = {}
        for knob in reversed(self.knobs):
            points = knob.points()
            index, digit = divmod(index, len(points))
            params[knob.name] = points[digit]
        return {name: params[name] for name in self.names}

    def as_dict(self) -> dict:
        return {knob.name: knob.as_dict() for knob in self.knobs}


def _choice_knob(name: str, spec: t.Mapping, where: str) -> Knob:
    values = spec["values"]
    if not isinstance(values, list) or len(values) < 2:
        raise ValueError(f"{where}.values: list at least two values to choose from, got {values!r} "
                         "(a fixed value belongs in server_args)")
    seen = []
    for value in values:
        if not (value is None or isinstance(value, (str, bool)) or _is_number(value)):
            raise ValueError(f"{where}.values: each value must be a string, number, boolean or null, got {value!r}")
        if value in seen:
            raise ValueError(f"{where}.values: {value!r} is listed twice")
        seen.append(value)
    return Knob(name=name, values=tuple(values))


def _range_bounds(spec: t.Mapping, where: str) -> tuple[t.Any, t.Any]:
    for bound in ("low", "high"):
        if bound not in spec:
            raise ValueError(f"{where}: a range needs both low and high (or list the choices as values), "
                             f"{bound} is missing")
        if not _is_number(spec[bound]):
            raise ValueError(f"{where}.{bound}: must be a number, got {spec[bound]!r}")
    low, high = spec["low"], spec["high"]
    if low >= high:
        raise ValueError(f"{where}.low: must be below high (got {low:g} >= {high:g})")
    return low, high


def _range_step(spec: t.Mapping, low: t.Any, high: t.Any, integer: bool, where: str) -> t.Any:
    step = spec.get("step")
    if step is None:
        return None
    if not _is_number(step) or step <= 0 or (integer and not isinstance(step, int)):
        kind = "a positive integer (the range's bounds are integers)" if integer else "a positive number"
        raise ValueError(f"{where}.step: must be {kind}, got {step!r}")
    intervals = (high - low) / step
    if abs(intervals - round(intervals)) > 1e-9:
        fitted = low + math.floor(intervals) * step
        raise ValueError(f"{where}.step: high - low ({high - low:g}) must be a multiple of step ({step:g}); "
                         f"set high to {fitted:g} or {fitted + step:g}")
    return step


def _range_knob(name: str, spec: t.Mapping, where: str) -> Knob:
    low, high = _range_bounds(spec, where)
    integer = isinstance(low, int) and isinstance(high, int)
    step = _range_step(spec, low, high, integer, where)
    log = spec.get("log", False)
    if not isinstance(log, bool):
        raise ValueError(f"{where}.log: must be true or false, got {log!r}")
    if log and low <= 0:
        raise ValueError(f"{where}.log: a log range needs low > 0 (got {low:g})")
    if log and step is not None and not (integer and step == 1):
        # optuna's distributions sample a log range without a step (IntDistribution allows step 1 only).
        raise ValueError(f"{where}: log and step cannot be combined; drop step, or drop log and keep the step")
    return Knob(name=name, low=low, high=high, step=step, log=log, integer=integer)


def parse_knob(name: t.Any, spec: t.Any, where: str = "search.knobs") -> Knob:
    """One knob from ``{values: [...]}`` or ``{low, high, step?, log?}``; ValueError naming the field."""
    if not isinstance(name, str) or not _ARG_NAME.match(name):
        fix = f"; write {name.replace('-', '_').lstrip('_')}" if isinstance(name, str) and "-" in name else ""
        raise ValueError(f"{where}: {name!r} is not a server arg name (snake_case as in ServerArgs, "
                         f"e.g. chunked_prefill_size){fix}")
    where = f"{where}.{name}"
    if not isinstance(spec, dict):
        raise ValueError(f"{where}: must be {{values: [...]}} or {{low, high, step, log}}, got {spec!r}")
    unknown = sorted(set(spec) - CHOICE_KEYS - RANGE_KEYS, key=str)
    if unknown:
        raise ValueError(f"{where}: unknown key {unknown[0]!r}; use values, or low, high, step and log")
    if "values" in spec:
        extra = sorted(set(spec) & RANGE_KEYS)
        if extra:
            raise ValueError(f"{where}: values and {extra[0]} cannot be combined; list choices or give a range")
        return _choice_knob(name, spec, where)
    return _range_knob(name, spec, where)


def parse_space(knobs: t.Any, where: str = "search.knobs") -> SearchSpace:
    """The space from ``search.knobs`` (a mapping of server arg to its spec), knobs in the order given."""
    if not isinstance(knobs, dict) or not knobs:
        raise ValueError(f"{where}: must map at least one server arg to {{values: [...]}} or {{low, high}}, "
                         f"got {knobs!r}")
    return SearchSpace(knobs=tuple(parse_knob(name, spec, where) for name, spec in knobs.items()))
