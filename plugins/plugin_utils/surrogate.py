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
measurements: no optimiser, no seed. A measurement may carry its own noise weight (``noise``: its variance
relative to the others', e.g. 1 / its runs): a candidate measured with more runs is trusted more.

``best_probabilities`` is the decision rule's confidence: under the joint posterior of the measured candidates'
true values, how likely each is the highest (seeded samples, so deterministic).
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
                share: float, weights: np.ndarray) -> float:
    """The log marginal likelihood (up to a constant) of one choice of hyper-parameters; -inf when singular."""
    exponent = sum(distances[k] / (scale * scale) for k, scale in enumerate(scales))
    matrix = variance * np.exp(-0.5 * exponent) + np.diag(share * variance * weights + JITTER)
    try:
        lower = np.linalg.cholesky(matrix)
    except np.linalg.LinAlgError:
        return -math.inf
    alpha = np.linalg.solve(lower.T, np.linalg.solve(lower, centred))
    return float(-0.5 * centred @ alpha - np.log(np.diag(lower)).sum())


def _hyper_parameters(distances: np.ndarray, centred: np.ndarray, variance: float,
                      weights: np.ndarray) -> tuple[tuple, float]:
    """The length scales and noise share of the highest likelihood on the grid: every combination for up to
    ``FULL_GRID_KNOBS`` knobs, else the best common length scale, then one knob's scale at a time (coordinate
    ascent) until none improves, whose cost grows with the knobs linearly; deterministic either way."""
    knobs = distances.shape[0]
    if knobs <= FULL_GRID_KNOBS:
        return max(((_likelihood(distances, centred, variance, scales, share, weights), scales, share)
                    for scales in itertools.product(LENGTH_SCALES, repeat=knobs) for share in NOISE_SHARES),
                   key=lambda fit: fit[0])[1:]
    best = max(((_likelihood(distances, centred, variance, (scale,) * knobs, share, weights), (scale,) * knobs, share)
                for scale in LENGTH_SCALES for share in NOISE_SHARES), key=lambda fit: fit[0])
    for _pass in range(MAX_PASSES):
        improved = False
        for knob in range(knobs):
            for scale in LENGTH_SCALES:
                for share in NOISE_SHARES:
                    scales = best[1][:knob] + (scale,) + best[1][knob + 1:]
                    likelihood = _likelihood(distances, centred, variance, scales, share, weights)
                    if likelihood > best[0] + 1e-12:
                        best, improved = (likelihood, scales, share), True
        if not improved:
            break
    return best[1], best[2]


class _Fit:
    """The GP fitted to ``values`` at ``points``: what the posterior at any queries needs."""

    def __init__(self, x: np.ndarray, y: np.ndarray, weights: np.ndarray) -> None:
        self.x, self.offset = x, float(y.mean())
        centred = y - self.offset
        distances = (x.T[:, :, None] - x.T[:, None, :]) ** 2
        self.variance = float(centred @ centred) / len(y) or 1.0
        scales, share = _hyper_parameters(distances, centred, self.variance, weights)
        self.inverse_scales = 1.0 / np.asarray(scales)
        noise = np.diag(share * self.variance * weights + JITTER)
        self.lower = np.linalg.cholesky(self.kernel(x, x) + noise)
        self.alpha = np.linalg.solve(self.lower.T, np.linalg.solve(self.lower, centred))

    def kernel(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        diff = (a[:, None, :] - b[None, :, :]) * self.inverse_scales
        return self.variance * np.exp(-0.5 * (diff ** 2).sum(-1))

    def mean_and_solved(self, q: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        cross = self.kernel(q, self.x)
        return self.offset + cross @ self.alpha, np.linalg.solve(self.lower, cross.T)


def _weights(noise: t.Sequence[float] | None, count: int) -> np.ndarray:
    """The measurements' noise weights, scaled to a mean of 1 (the noise share is fitted on that scale)."""
    if noise is None:
        return np.ones(count)
    weights = np.asarray(noise, float)
    if len(weights) != count or not np.all(weights > 0):
        raise ValueError(f"surrogate: noise needs one weight > 0 per point, got {list(noise)!r}")
    return weights / weights.mean()


def _check_numpy() -> None:
    if not HAS_NUMPY:
        raise RuntimeError("the goodput search's surrogate needs numpy on the controller: install the collection's "
                           "controller requirements (meta/ee-requirements.txt)")


def posterior(points: t.Sequence[t.Sequence[float]], values: t.Sequence[float],
              queries: t.Sequence[t.Sequence[float]],
              noise: t.Sequence[float] | None = None) -> tuple[list[float], list[float]]:
    """The GP's posterior mean and standard deviation at ``queries`` given ``values`` measured at ``points``
    (coordinates on [0, 1] per knob; ``noise``: each measurement's relative noise variance, default equal). With
    fewer than 3 points or no variation: the values themselves (a query at a measured point) or their mean, and a
    standard deviation of 0."""
    _check_numpy()
    x, y, q = np.asarray(points, float), np.asarray(values, float), np.asarray(queries, float)
    if len(y) < 3 or float(np.ptp(y)) == 0.0:
        known = {tuple(point): value for point, value in zip(x.tolist(), y.tolist())}
        mean = float(y.mean()) if len(y) else 0.0
        return [known.get(tuple(query), mean) for query in q.tolist()], [0.0] * len(q)
    fit = _Fit(x, y, _weights(noise, len(y)))
    mean, solved = fit.mean_and_solved(q)
    spread = np.sqrt(np.maximum(fit.variance - (solved ** 2).sum(0), 0.0))
    return [float(value) for value in mean], [float(value) for value in spread]


def best_probabilities(points: t.Sequence[t.Sequence[float]], values: t.Sequence[float],
                       noise: t.Sequence[float] | None = None, samples: int = 4000,
                       seed: int = 0) -> list[float]:
    """For each measured point, the posterior probability that its true value is the highest of them (the share of
    ``samples`` joint posterior draws, seeded). Fewer than 3 points or no variation: 1 for the first highest."""
    _check_numpy()
    x, y = np.asarray(points, float), np.asarray(values, float)
    if len(y) < 3 or float(np.ptp(y)) == 0.0:
        return [float(index == int(np.argmax(y))) for index in range(len(y))]
    fit = _Fit(x, y, _weights(noise, len(y)))
    mean, solved = fit.mean_and_solved(x)
    covariance = fit.kernel(x, x) - solved.T @ solved
    draws = np.random.default_rng(seed).multivariate_normal(mean, covariance, size=samples, method="eigh",
                                                            check_valid="ignore")
    counts = np.bincount(draws.argmax(axis=1), minlength=len(y))
    return [float(count) / samples for count in counts]


def expected_improvement(mean: float, spread: float, incumbent: float) -> float:
    """The expected amount by which a value ~ N(mean, spread^2) exceeds ``incumbent``."""
    if spread <= 0:
        return max(mean - incumbent, 0.0)
    z = (mean - incumbent) / spread
    cdf, pdf = 0.5 * math.erfc(-z / math.sqrt(2)), math.exp(-0.5 * z * z) / math.sqrt(2 * math.pi)
    return (mean - incumbent) * cdf + spread * pdf
