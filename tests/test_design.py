"""Where the precision points go: the A-optimal weights, how many points a precision needs, and
the candidates at the ends of the variables' supports."""

from __future__ import annotations

import math

import numpy as np
import pytest

from rcvgp.design import a_optimal_weights, information_rows, points_needed, precision_design
from rcvgp.noisefloor import NoiseModel
from rcvgp.oracle import OracleSpec, Variable, design_points, edge_points

LINE = ("add", "c", "mul", "c", "x0")  # c0 + c1 * x0
NOISE = NoiseModel(0.1)


def _error(tokens: tuple[str, ...], constants: np.ndarray, X: np.ndarray) -> float:
    """The largest relative standard error of the constants fitted on readings at ``X``."""
    rows, ok = information_rows(tokens, X, constants, NOISE)
    return float(np.sqrt(np.max(np.diag(np.linalg.inv(rows[ok].T @ rows[ok])))))


def test_a_line_is_measured_at_the_ends_of_its_range() -> None:
    """The A-optimal design of a line over [0, 1] is at its two ends: the weights reach within
    2% of the best two-end design's summed variance, most of them on the ends."""
    x = np.linspace(0.0, 1.0, 101)[:, None]
    rows, _ = information_rows(LINE, x, np.array([1.0, 2.0]), NOISE)
    weights = a_optimal_weights(rows, np.array([True, True]))

    def summed_variance(w: np.ndarray) -> float:
        return float(np.trace(np.linalg.inv(rows.T @ (w[:, None] * rows))))

    ends = min(summed_variance(np.r_[a, np.zeros(99), 1 - a]) for a in np.linspace(0.01, 0.99, 99))
    assert weights.sum() == pytest.approx(1.0)
    assert summed_variance(weights) < 1.02 * ends < 1.02 * summed_variance(np.full(101, 1 / 101)) / 2
    assert weights[0] + weights[-1] > 0.7 and weights[0] > weights[-1] > 0.2


def test_only_the_constants_told_from_zero_are_designed_for() -> None:
    """A constant the readings do not tell from zero has no relative precision to reach: with
    only the slope to measure, a line through the origin is measured at the far end alone."""
    x = np.linspace(0.0, 1.0, 101)[:, None]
    rows, _ = information_rows(LINE, x, np.array([1.0, 2.0]), NOISE)
    both, slope = a_optimal_weights(rows, np.array([True, True])), a_optimal_weights(rows, np.array([False, True]))
    assert both[0] > 0.2 and slope[0] < both[0]


def test_the_points_needed_bring_the_error_to_the_precision_and_no_fewer_do() -> None:
    """One constant: its variance is 1 / (before + n * per point), so n is the smallest whole
    number with that at most precision squared; ``most`` when even that many fall short."""
    before, per_point, told = np.array([[4.0]]), np.array([[0.5]]), np.array([True])
    n = points_needed(before, per_point, told, 0.01, 10**6)
    assert n == math.ceil((1 / 0.01**2 - 4.0) / 0.5)
    assert points_needed(before, per_point, told, 0.01, 100) == 100
    assert points_needed(before, per_point, told, 0.6, 10**6) == 0  # 1 / sqrt(4) is precise enough
    assert points_needed(before, per_point, told, 0.01, 0) == 0


def test_the_design_reaches_the_precision_with_fewer_points_than_random_draws() -> None:
    """A slope over ten decades of a uniform variable shows at the lower end: the design, half of
    it drawn as random points are, reaches the precision with a fraction of the points random
    draws need, and its points do reach it."""
    spec = OracleSpec((Variable("x0", 1e-10, 1.0),), name="test:log")
    tokens, constants = ("add", "c", "mul", "c", "log", "x0"), np.array([120.0, 4.3])
    rng = np.random.default_rng(0)
    measured = design_points(spec, 200, rng)
    rows, _ = information_rows(tokens, measured, constants, NOISE)
    told = np.array([True, True])
    design = precision_design(tokens, constants, measured, design_points(spec, 2048, rng), edge_points(spec, 2048, rng),
                              NOISE, told, 1e-3, 10**6, rng)
    assert abs(len(design.drawn) - len(design.designed)) <= 1
    X = np.concatenate([design.drawn, design.designed])
    uniform = design_points(spec, 4096, rng)
    random_rows, _ = information_rows(tokens, uniform, constants, NOISE)
    drawn = points_needed(rows.T @ rows, random_rows.T @ random_rows / len(uniform), told, 1e-3, 10**7)
    assert 0 < len(X) < drawn / 20
    assert _error(tokens, constants, np.concatenate([measured, X])) <= 1.2e-3
    enough = precision_design(tokens, constants, np.concatenate([measured, X]), design_points(spec, 2048, rng),
                              edge_points(spec, 2048, rng), NOISE, told, 1.2e-3, 10**6, rng)
    assert enough.drawn.shape == enough.designed.shape == (0, 1)


def test_edge_points_put_each_variable_at_an_end_half_the_time() -> None:
    spec = OracleSpec((Variable("a", 2.0, 5.0), Variable("b", 1e-3, 1.0, dist="loguniform"),
                       Variable("c", 0.5, 2.0, only_positive=False)), name="test:edges")
    X = edge_points(spec, 4000, np.random.default_rng(1))
    def at(x: np.ndarray, low: float, high: float) -> np.ndarray:
        return np.isclose(x, low, rtol=1e-12, atol=0) | np.isclose(x, high, rtol=1e-12, atol=0)

    at_ends = [at(X[:, 0], 2.0, 5.0), at(X[:, 1], 1e-3, 1.0), at(np.abs(X[:, 2]), 0.5, 2.0)]
    for ends in at_ends:
        assert 0.45 < ends.mean() < 0.55
    assert X[:, 0].min() == 2.0 and X[:, 0].max() == pytest.approx(5.0, rel=1e-12) and (X[:, 2] < 0).any()
    assert np.all((np.abs(X[:, 2]) >= 0.5) & (np.abs(X[:, 2]) <= 2.0))


def test_candidates_where_the_law_has_no_value_are_left_out_and_the_others_kept() -> None:
    """A logarithm over [-1, 1] (a signed variable) has no value at half the candidates: the
    design is made of the others, not given up."""
    spec = OracleSpec((Variable("x0", 0.01, 1.0, only_positive=False),), name="test:log of a signed variable")
    tokens, constants = ("add", "c", "mul", "c", "log", "x0"), np.array([2.0, 0.5])
    rng = np.random.default_rng(2)
    measured = np.abs(design_points(spec, 100, rng))
    design = precision_design(tokens, constants, measured, design_points(spec, 2048, rng), edge_points(spec, 2048, rng),
                              NOISE, np.array([True, True]), 1e-3, 10**6, rng)
    X = np.concatenate([design.drawn, design.designed])
    assert len(design.drawn) > 0 and len(design.designed) > 0 and np.all(X > 0)
