"""Where to measure so that a law's constants are pinned down with the fewest readings.

A reading tells a constant most where the law is most sensitive to it, relative to the noise
there. Set points drawn from the declared distributions spend most readings where it is not: the
slope of a logarithm over ten decades of a uniform variable shows at the lower end, which
uniform draws reach about once in 100,000. :func:`precision_design` places the points that bring
a law's constants to a precision by an A-optimal design (the relative variances of the constants
the readings tell from zero, summed, made least) over candidate set points, found with the
multiplicative algorithm of Silvey, Titterington and Torsney (1978), and mixed half and half
with draws from the declared distributions, so that a law slightly wrong between the design's
points still meets readings there.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from rcvgp.constants import relative_sensitivities
from rcvgp.evaluate import evaluate_with_grad
from rcvgp.noisefloor import NoiseModel

__all__ = ["Design", "a_optimal_weights", "information_rows", "points_needed", "precision_design"]

#: Rounds of the multiplicative algorithm: by 100 a line's summed variance is within 1% of
#: the optimum (tests/test_design.py), though its weights still move.
ITERATIONS = 100


def information_rows(tokens: tuple[str, ...], X: np.ndarray, constants: np.ndarray,
                     noise: NoiseModel) -> tuple[np.ndarray, np.ndarray]:
    """The law's :func:`~rcvgp.constants.relative_sensitivities` at set points ``X`` (m, n_vars),
    with the noise at its own values, and which rows are finite; ``rows.T @ rows`` over a set of
    readings is the information they hold on the constants."""
    consts = np.asarray(constants, dtype=float)
    y, grads = evaluate_with_grad(tuple(tokens), X, consts, range(len(consts)))
    ok = np.isfinite(y)
    # Where the law has no value its noise has none either: one NaN would spoil every row.
    rows = relative_sensitivities(np.column_stack(grads), noise.std(np.where(ok, y, 0.0)), consts)
    ok &= np.isfinite(rows).all(axis=1)
    return np.where(ok[:, None], rows, 0.0), ok


def a_optimal_weights(rows: np.ndarray, told: np.ndarray, iterations: int = ITERATIONS) -> np.ndarray:
    """Weights over the candidates of ``rows`` (m, p) that make the summed variance of the
    ``told`` constants least, per reading: each weight grows with the square root of how much
    its candidate would cut that sum (a multiplicative algorithm whose sum only falls)."""
    weights = np.full(len(rows), 1.0 / len(rows))
    chosen = np.diag(told.astype(float))
    for _ in range(iterations):
        inverse = np.linalg.pinv(rows.T @ (weights[:, None] * rows))
        gain = np.einsum("ij,jk,ik->i", rows, inverse @ chosen @ inverse, rows)
        weights = weights * np.sqrt(np.maximum(gain, 0.0))
        total = weights.sum()
        if not (np.isfinite(total) and total > 0):
            return np.full(len(rows), 1.0 / len(rows))
        weights /= total
    return weights


def points_needed(before: np.ndarray, per_point: np.ndarray, told: np.ndarray, precision: float, most: int) -> int:
    """The fewest readings, each adding ``per_point`` (p, p) to the information ``before``
    (p, p), that bring every ``told`` constant's relative standard error to ``precision``;
    ``most`` if that many do not."""

    def error(n: int) -> float:
        variance = np.diag(np.linalg.pinv(before + n * per_point))[told]
        return float(np.sqrt(np.max(variance))) if variance.size else 0.0

    if most <= 0 or error(0) <= precision:
        return 0
    if error(most) > precision:
        return most
    low, high = 0, most  # error(low) > precision >= error(high)
    while high - low > 1:
        middle = (low + high) // 2
        low, high = (middle, high) if error(middle) > precision else (low, middle)
    return high


class Design(NamedTuple):
    """Set points to measure, each of shape (n, n_vars)."""

    drawn: np.ndarray  #: as the declared distributions give them
    designed: np.ndarray  #: where they tell the constants most


def precision_design(tokens: tuple[str, ...], constants: np.ndarray, measured: np.ndarray, declared: np.ndarray,
                     edges: np.ndarray, noise: NoiseModel, told: np.ndarray, precision: float, most: int,
                     rng: np.random.Generator) -> Design:
    """The set points to measure, at most ``most``, that bring the ``told`` constants of a law
    (``tokens`` at ``constants``), already fitted on readings at ``measured``, to ``precision``
    (relative standard error): half drawn from ``declared`` (candidates from the declared
    distributions), half from the A-optimal weights over those and ``edges``
    (:func:`rcvgp.oracle.edge_points`); none where the readings at hand suffice."""
    before, _ = information_rows(tokens, measured, constants, noise)  # rows without a value are 0
    pool = np.concatenate([declared, edges])
    rows, usable = information_rows(tokens, pool, constants, noise)
    if not usable[: len(declared)].any():
        return Design(pool[:0], pool[:0])
    optimal = np.zeros(len(pool))
    optimal[usable] = a_optimal_weights(rows[usable], told)
    spread = np.flatnonzero(usable[: len(declared)])
    per_point = 0.5 * rows.T @ (optimal[:, None] * rows) + 0.5 * rows[spread].T @ rows[spread] / len(spread)
    n = points_needed(before.T @ before, per_point, told, precision, most)
    # The design's half in whole readings per candidate, as near its weights as they go: drawn
    # at random, the few hundred readings a precision may need fall well short of it.
    designed = _apportioned(optimal, n // 2)
    return Design(pool[rng.choice(spread, size=n - len(designed))], pool[designed])


def _apportioned(weights: np.ndarray, n: int) -> np.ndarray:
    """``n`` indices of ``weights``, each repeated in proportion to its weight (largest
    remainders first)."""
    quota = weights * n
    counts = np.floor(quota).astype(int)
    counts[np.argsort(counts - quota, kind="stable")[: n - counts.sum()]] += 1
    return np.repeat(np.arange(len(weights)), counts)
