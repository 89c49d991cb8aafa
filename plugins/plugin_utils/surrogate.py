# Copyright (c) llmops.sglang contributors
# Apache License 2.0 (see LICENSE)
"""A Gaussian-process surrogate of the goodput over the knobs: what the measured candidates say about each other.

Controller-side (plugin_utils): numpy, which optuna (a controller requirement) depends on.

One candidate's capacity is measured with short runs: its estimate scatters by ~5-10 % around the truth, as much
as the gap between the best candidates of a space. Picking the highest measurement then favours a lucky one (the
winner's curse). A candidate's neighbours in knob space are measured independently and, when the goodput is a
smooth function of the knobs, say something about it: the posterior mean of a GP over the measured candidates
weighs a candidate's own measurement against what its neighbours imply, in proportion to how noisy the
measurements are against how much the goodput varies between neighbours.

The model: a constant mean (the measurements' mean), a squared-exponential kernel with one length scale per knob
(a knob's values placed on [0, 1] by their position: the grid's order, or the range, on log axes for a log range)
and i.i.d. measurement noise. Its hyper-parameters (the length scales and the noise as a share of the variance)
are the maximum of the marginal likelihood over a fixed grid, so the result is a deterministic function of the
measurements: no optimiser, no seed.
"""
from __future__ import annotations

import itertools
import math
import typing as t

try:  # a controller requirement through optuna; kept out of import time like optuna in search_strategy.py
    import numpy as np

    HAS_NUMPY = True
except ImportError:  # pragma: no cover - reported when the surrogate is used
    np = None
    HAS_NUMPY = False

LENGTH_SCALES = (0.15, 0.3, 0.6, 1.2)
NOISE_SHARES = (0.01, 0.03, 0.1, 0.3)
JITTER = 1e-9
MAX_PASSES = 3
FULL_GRID_KNOBS = 4  # 4^4 x 4 = 1,024 likelihoods


def _likelihood(distances: np.ndarray, centred: np.ndarray, variance: float, scales: tuple,
                share: float) -> float:
    """The log marginal likelihood (up to a constant) of one choice of hyper-parameters; -inf when singular."""
    exponent = sum(distances[k] / (scale * scale) for k, scale in enumerate(scales))
    matrix = variance * np.exp(-0.5 * exponent) + (share * variance + JITTER) * np.eye(len(centred))
    try:
        lower = np.linalg.cholesky(matrix)
    except np.linalg.LinAlgError:
        return -math.inf
    alpha = np.linalg.solve(lower.T, np.linalg.solve(lower, centred))
    return float(-0.5 * centred @ alpha - np.log(np.diag(lower)).sum())


def _hyper_parameters(distances: np.ndarray, centred: np.ndarray, variance: float) -> tuple[tuple, float]:
    """The length scales and noise share of the highest likelihood on the grid: every combination for up to
    ``FULL_GRID_KNOBS`` knobs, else the best common length scale, then one knob's scale at a time (coordinate
    ascent) until none improves, whose cost grows with the knobs linearly; deterministic either way."""
    knobs = distances.shape[0]
    if knobs <= FULL_GRID_KNOBS:
        return max(((_likelihood(distances, centred, variance, scales, share), scales, share)
                    for scales in itertools.product(LENGTH_SCALES, repeat=knobs) for share in NOISE_SHARES),
                   key=lambda fit: fit[0])[1:]
    best = max(((_likelihood(distances, centred, variance, (scale,) * knobs, share), (scale,) * knobs, share)
                for scale in LENGTH_SCALES for share in NOISE_SHARES), key=lambda fit: fit[0])
    for _pass in range(MAX_PASSES):
        improved = False
        for knob in range(knobs):
            for scale in LENGTH_SCALES:
                for share in NOISE_SHARES:
                    scales = best[1][:knob] + (scale,) + best[1][knob + 1:]
                    likelihood = _likelihood(distances, centred, variance, scales, share)
                    if likelihood > best[0] + 1e-12:
                        best, improved = (likelihood, scales, share), True
        if not improved:
            break
    return best[1], best[2]


def posterior(points: t.Sequence[t.Sequence[float]], values: t.Sequence[float],
              queries: t.Sequence[t.Sequence[float]]) -> tuple[list[float], list[float]]:
    """The GP's posterior mean and standard deviation at ``queries`` given ``values`` measured at ``points``
    (coordinates on [0, 1] per knob). With fewer than 3 points or no variation: the values themselves (a query
    at a measured point) or their mean, and a standard deviation of 0."""
    if not HAS_NUMPY:
        raise RuntimeError("the goodput search's surrogate needs numpy on the controller: install the collection's "
                           "controller requirements (meta/ee-requirements.txt)")
    x, y, q = np.asarray(points, float), np.asarray(values, float), np.asarray(queries, float)
    if len(y) < 3 or float(np.ptp(y)) == 0.0:
        known = {tuple(point): value for point, value in zip(x.tolist(), y.tolist())}
        mean = float(y.mean()) if len(y) else 0.0
        return [known.get(tuple(query), mean) for query in q.tolist()], [0.0] * len(q)
    offset = float(y.mean())
    centred = y - offset
    distances = (x.T[:, :, None] - x.T[:, None, :]) ** 2
    variance = float(centred @ centred) / len(y) or 1.0
    scales, share = _hyper_parameters(distances, centred, variance)
    inverse_scales = 1.0 / np.asarray(scales)

    def kernel(a: np.ndarray, b: np.ndarray) -> np.ndarray:
        diff = (a[:, None, :] - b[None, :, :]) * inverse_scales
        return variance * np.exp(-0.5 * (diff ** 2).sum(-1))

    lower = np.linalg.cholesky(kernel(x, x) + (share * variance + JITTER) * np.eye(len(y)))
    alpha = np.linalg.solve(lower.T, np.linalg.solve(lower, centred))
    cross = kernel(q, x)
    mean = offset + cross @ alpha
    solved = np.linalg.solve(lower, cross.T)
    spread = np.sqrt(np.maximum(variance - (solved ** 2).sum(0), 0.0))
    return [float(value) for value in mean], [float(value) for value in spread]


def expected_improvement(mean: float, spread: float, incumbent: float) -> float:
    """The expected amount by which a value ~ N(mean, spread^2) exceeds ``incumbent``."""
    if spread <= 0:
        return max(mean - incumbent, 0.0)
    z = (mean - incumbent) / spread
    cdf, pdf = 0.5 * math.erfc(-z / math.sqrt(2)), math.exp(-0.5 * z * z) / math.sqrt(2 * math.pi)
    return (mean - incumbent) * cdf + spread * pdf
