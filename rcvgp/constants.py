"""Fitting the open constants of a tree on K control-variable trials, one constant vector per trial.

The loss of a trial is its NMSE (mean squared error over the variance of that trial's y), so it
means the same whether y is 1e-25 or 1e84; under noise that is not alike on every reading, each
error is weighted by the inverse of its reading's noise (:func:`rcvgp.noisefloor.reading_weights`).
Constants that enter the tree linearly (terms of a top-level sum, alone or as a factor) are
solved exactly by least squares; only the others go to an iterative optimiser, which then sees
the problem with the linear ones projected out (variable projection). The K trials are fitted
together: one vectorised evaluation per step serves all of them, and their objectives are
independent sums, so the optimum is the same as fitting each alone. Derivatives come from the
tree's generated code (reverse mode), not finite differences.
"""

from __future__ import annotations

import inspect
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property, lru_cache
from typing import NamedTuple

import numpy as np

from rcvgp.errors import ConfigError
from rcvgp.evaluate import compile_tree, evaluate, evaluate_with_grad
from rcvgp.metrics import scaled_moments
from rcvgp.noisefloor import EXACT_LOSS, Floor, floor_levels, reading_weights

__all__ = ["Trials", "FitResult", "fit_constants", "linear_constants", "standard_errors", "gauss_newton_errors",
           "relative_sensitivities", "BAD_LOSS", "STOCHASTIC_OPTIMIZERS"]

#: Loss given to a prediction that is NaN or infinite anywhere: it never looks good.
BAD_LOSS = float("inf")
_PENALTY = 1e30
_GLOBAL = ("shgo", "dual_annealing", "direct")  # what the optimiser sees instead of inf, so its line search stays finite
#: The optimisers that draw random numbers (from ``rng``); the others give the same fit every time.
STOCHASTIC_OPTIMIZERS = ("basinhopping", "dual_annealing")


class Trials:
    """K control-variable trials: set points, measurements and the mask of measured points.

    Parameters
    ----------
    X : ndarray of shape (K, m, n_vars)
    y : ndarray of shape (K, m); NaN where the oracle could not measure
    controlled : frozenset of int
        The variables held within each trial.
    noise_std : ndarray of shape (K, m), optional
        The noise standard deviation of each reading (None: noiseless), and
    uncertainty : float
        its relative uncertainty: together they set :attr:`floor`.
    weighted : bool
        Whether each reading is weighted by the inverse of its noise where that is not alike
        on every reading (:func:`rcvgp.noisefloor.reading_weights`).
    """

    def __init__(
        self,
        X: np.ndarray,
        y: np.ndarray,
        controlled: frozenset[int] = frozenset(),
        noise_std: np.ndarray | None = None,
        uncertainty: float = 0.0,
        weighted: bool = True,
    ) -> None:
        self.X = np.asarray(X, dtype=float)
        self.controlled = frozenset(controlled)
        self.uncertainty = float(uncertainty)
        self.weighted = weighted
        #: (K, m) the readings measured a second time already, and those the second reading
        #: replaced (:meth:`rcvgp.search.engine.Lab.second_readings`)
        self.checked = np.zeros(np.shape(y), dtype=bool)
        self.replaced = np.zeros(np.shape(y), dtype=bool)
        #: tree -> constants of the fits that have named suspects among these readings: the
        #: same fit again names none (:meth:`rcvgp.search.engine.Run.fit_all`)
        self.checked_fits: dict[tuple[str, ...], np.ndarray] = {}
        self._read(np.asarray(y, dtype=float), noise_std)

    def reread(self, y: np.ndarray, noise_std: np.ndarray | None) -> None:
        """Take readings ``y`` at the same set points in place of these (wild readings read
        again), with their noise: every number made from the readings is made again, and
        whoever holds these trials sees the new ones."""
        self.__dict__.pop("scan_copies", None)
        self.checked_fits = {}
        self._read(np.asarray(y, dtype=float), noise_std)

    def _read(self, y: np.ndarray, noise_std: np.ndarray | None) -> None:
        self.y = y
        self.noise_std = None if noise_std is None else np.broadcast_to(np.asarray(noise_std, dtype=float), self.y.shape)
        self.mask = np.isfinite(self.y)
        #: (K, m) each reading's weight in the loss, from its noise; None: all alike
        self.weight = reading_weights(self.noise_std, self.mask) if self.weighted else None
        self.y0 = np.where(self.mask, self.y, 0.0)
        self.complete = bool(self.mask.all())  # the fits skip masking when every point was measured
        self.n_valid = self.mask.sum(axis=1)
        unit, var, power = scaled_moments(self.y, self.mask, self.weight)
        # A trial whose y does not vary (the free variables do not matter) is judged by the
        # relative error instead, so the denominator never vanishes.
        #: (K,) what a trial's errors are measured in: its NMSE is the mean square of error / spread
        #: (both weighted, where readings are: a prediction of the weighted mean scores 1).
        self.spread = unit * np.sqrt(np.where(var > 1e-12 * power, var, np.maximum(power, 1e-300)))
        #: what the noise lets a fit reach on each trial (see :func:`rcvgp.noisefloor.floor_levels`)
        # Weighted, each reading's noise is the same in the loss: the weights' typical noise.
        floor_noise = self.noise_std if self.weight is None else self.noise_std * self.weight
        self.floor: Floor = floor_levels(floor_noise, self.mask, self.spread, self.uncertainty)

    @property
    def n_trials(self) -> int:
        return int(self.X.shape[0])

    @cached_property
    def scan_copies(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """X, y0, mask and each point's weight (its reading's :attr:`weight` / (sqrt(n) *
        spread)) of a sample of every trial's points, repeated once per value of
        :data:`SCAN_VALUES` (value-major): what one evaluation of a tree at all those values
        needs, made once per data set."""
        S, (K, m, n) = len(SCAN_VALUES), self.X.shape
        # Every trial's first points are as random as any: enough to tell a good start from a bad.
        m = min(m, _SCAN_POINTS)
        X = np.broadcast_to(self.X[:, :m], (S, K, m, n)).reshape(S * K, m, n)
        weight = 1.0 / (np.sqrt(np.maximum(self.mask[:, :m].sum(axis=1), 1)) * self.spread)[:, None]
        weight = weight * (1.0 if self.weight is None else self.weight[:, :m])
        return (X, np.tile(self.y0[:, :m], (S, 1)), np.tile(self.mask[:, :m], (S, 1)),
                np.tile(np.broadcast_to(weight, (K, m)), (S, 1)))

    def __getstate__(self) -> dict[str, object]:
        # The scan's copies are remade where they are needed, not sent to a worker.
        state = self.__dict__.copy()
        state.pop("scan_copies", None)
        return state

    def subset(self, k: int) -> Trials:
        """Trial ``k`` alone."""
        noise = None if self.noise_std is None else self.noise_std[k : k + 1]
        return Trials(self.X[k : k + 1], self.y[k : k + 1], self.controlled, noise, self.uncertainty, self.weighted)

    def losses(self, prediction: np.ndarray) -> np.ndarray:
        """Per-trial NMSE of a prediction of shape (K, m), weighted (:attr:`weight`); BAD_LOSS
        where it is not finite."""
        with np.errstate(all="ignore"):
            r = np.where(self.mask, (prediction - self.y0) / self.spread[:, None], 0.0)
            if self.weight is not None:
                r = r * self.weight
            nmse = (r * r).sum(axis=1) / np.maximum(self.n_valid, 1)
            ok = np.isfinite(np.where(self.mask, prediction, 0.0)).all(axis=1)
            return np.where(ok & np.isfinite(nmse), nmse, BAD_LOSS)


#: The floor of noiseless trials.
_NO_NOISE = floor_levels(None, np.ones((1, 1), dtype=bool), np.ones(1), 0.0)


@dataclass(frozen=True)
class FitResult:
    """Outcome of fitting a tree on K trials, with the floor of those trials."""

    losses: np.ndarray  # (K,) NMSE per trial
    constants: np.ndarray  # (K, n_consts)
    n_evals: int  # tree evaluations the fit used
    floor: Floor = _NO_NOISE

    @cached_property  # ranking a generation asks for it tens of thousands of times a run
    def fitness(self) -> float:
        """Mean NMSE over the trials; inf if any trial failed."""
        return float(np.mean(self.losses)) if np.all(np.isfinite(self.losses)) else BAD_LOSS

    @property
    def score(self) -> float:
        """What ranks fits: 0 when they are :attr:`at_floor`, else the mean loss's excess over
        what the noise alone gives (comparable across trials with other floors), at least
        rounding's."""
        if self.at_floor:
            return 0.0
        return max(self.fitness - self.floor.mean_expected, EXACT_LOSS)

    @property
    def at_floor(self) -> bool:
        """Whether every trial's fit is as good as its data can tell."""
        return bool(np.all(self.losses <= self.floor.level))


@lru_cache(maxsize=65536)
def linear_constants(tokens: tuple[str, ...]) -> tuple[int, ...]:
    """Indices of the constants the tree is jointly linear in.

    A constant is linear when the path from the root to it passes only through sums, negations,
    numerators and products whose other factors hold no linear constant.
    """
    node = compile_tree(tokens)

    def lin(n: tuple) -> list[int]:  # type: ignore[type-arg]
        head = n[0]
        if head == "c":
            return [n[1]]
        if head in ("x", "k"):
            return []
        name = head.name
        if name in ("add", "sub"):
            return lin(n[1]) + lin(n[2])
        if name == "neg":
            return lin(n[1])
        if name == "mul":
            # Linear in one factor's constants; the other factor's become nonlinear.
            return lin(n[1]) or lin(n[2])
        if name == "div":
            return lin(n[1])
        return []

    return tuple(sorted(lin(node)))


def _kwarg_for_seed(fn: object) -> str:
    params = inspect.signature(fn).parameters  # type: ignore[arg-type]
    return "rng" if "rng" in params else "seed"


def fit_constants(
    tokens: tuple[str, ...],
    trials: Trials,
    optimizer: str = "LM",
    rng: np.random.Generator | None = None,
    init: np.ndarray | None = None,
    maxiter: int = 200,
) -> FitResult:
    """Fit the constants of ``tokens`` on every trial.

    Parameters
    ----------
    tokens : tuple of str
        The tree in prefix order.
    trials : Trials
    optimizer : str
        ``LM`` (Levenberg-Marquardt, default), ``BFGS`` (the paper's), ``CG``, ``L-BFGS-B``,
        ``Nelder-Mead``, ``basinhopping``, ``shgo``, ``dual_annealing`` or ``direct``; used
        only for constants that do not enter linearly.
    rng : numpy.random.Generator, optional
        For the stochastic optimisers.
    init : ndarray of shape (n_consts,) or (K, n_consts), or (S, K, n_consts), optional
        Starting values of the nonlinear constants, e.g. an earlier fit's; NaN (and the default,
        None) for those with no start known, which start where a scan of values finds the least
        loss (1.0 if nothing does better, see :data:`SCAN_VALUES`). With S starts, the fit runs
        from each and keeps the better per trial.
    """
    tokens = tuple(tokens)
    n_consts = sum(t == "c" for t in tokens)
    K = trials.n_trials
    if n_consts == 0:
        pred = evaluate(tokens, trials.X)
        return FitResult(trials.losses(pred), np.zeros((K, 0)), 1, trials.floor)
    lin = list(linear_constants(tokens))
    nonlin = [k for k in range(n_consts) if k not in set(lin)]
    given = np.full(n_consts, np.nan) if init is None else np.asarray(init, dtype=float)
    # (Indexed by a list: each a copy of its own, which the optimisers may write to.)
    thetas = [np.broadcast_to(one, (K, n_consts))[:, nonlin] for one in (given if given.ndim == 3 else [given])]
    problem = _Projected(tokens, trials, lin, nonlin)
    if not nonlin:
        # The tree is affine in its constants: one evaluation solves them.
        end = problem.point(thetas[0], np.zeros((K, len(lin))))
        return FitResult(end.losses, _joined(thetas[0], end.linear, nonlin, lin), problem.n_evals, trials.floor)
    n_evals = 0

    def optimised(theta: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        nonlocal n_evals
        if optimizer == "LM":
            return _levenberg_marquardt(problem, theta, maxiter)
        if optimizer in _GLOBAL:
            # Global optimisers scale badly with dimension: one search per trial.
            for k in range(K):
                one = _Projected(tokens, trials.subset(k), lin, nonlin)
                theta[k] = _minimise(one, theta[k], optimizer, rng, maxiter)
                n_evals += one.n_evals
        else:
            theta = _minimise(problem, theta.ravel(), optimizer, rng, maxiter).reshape(K, len(nonlin))
        end = problem.solved(theta)
        return theta, end.losses, end.linear

    # From each start given; where one has no value, from where a scan finds the least loss,
    # and a shift of a variable from a second start too (:meth:`_Projected.starts`); the better
    # fit kept per trial.
    starts = [s for theta in thetas for s in (problem.starts(theta) if np.isnan(theta).any() else [theta])]
    theta, losses, linear = optimised(starts[0])
    for start in starts[1:]:
        other, other_losses, other_linear = optimised(start)
        better = other_losses < losses
        theta, linear = np.where(better[:, None], other, theta), np.where(better[:, None], other_linear, linear)
        losses = np.where(better, other_losses, losses)
    return FitResult(losses, _joined(theta, linear, nonlin, lin), n_evals + problem.n_evals, trials.floor)


def _joined(theta: np.ndarray, linear: np.ndarray, nonlin: list[int], lin: list[int]) -> np.ndarray:
    """The constants (K, n_consts) from the nonlinear ones (K, P) and the linear ones (K, p)."""
    consts = np.empty((len(theta), len(nonlin) + len(lin)))
    consts[:, nonlin] = theta
    consts[:, lin] = linear
    return consts


def standard_errors(tokens: tuple[str, ...], trials: Trials, constants: np.ndarray) -> np.ndarray:
    """The standard error of each constant of a tree fitted on one trial of noisy readings.

    From the Gauss-Newton covariance ``(J' W J)^-1`` at ``constants`` (n_consts,), with J the
    tree's derivatives w.r.t. its constants at the measured points and W the inverse noise
    variance of each reading. A constant the data do not pin (it trades off against others, or
    the tree does not depend on it there) gets inf; with noiseless readings every error is 0.
    """
    consts = np.asarray(constants, dtype=float).ravel()
    if trials.noise_std is None or not len(consts):
        return np.zeros(len(consts))
    mask = trials.mask[0]
    _, grads = evaluate_with_grad(tuple(tokens), trials.X[0], consts, range(len(consts)))
    return gauss_newton_errors(np.column_stack([g[mask] for g in grads]), trials.noise_std[0][mask], consts)


def relative_sensitivities(jacobian: np.ndarray, noise_std: np.ndarray, constants: np.ndarray) -> np.ndarray:
    """The model's derivatives w.r.t. its constants at each reading (``jacobian``, (n_points,
    n_consts)) per relative change of each constant (per unit change of a constant at 0) and per
    standard deviation of the reading's noise: J' J is then the information the readings hold
    on the constants' relative values."""
    consts = np.asarray(constants, dtype=float).ravel()
    std = np.asarray(noise_std, dtype=float)
    # A reading of zero under purely relative noise has no noise: weigh it as the least noisy others.
    std = np.maximum(std, 1e-6 * float(std.mean()) or np.finfo(float).tiny)
    with np.errstate(over="ignore", invalid="ignore"):
        return np.asarray(jacobian, dtype=float) * np.where(consts != 0, np.abs(consts), 1.0) / std[:, None]


def gauss_newton_errors(jacobian: np.ndarray, noise_std: np.ndarray, constants: np.ndarray) -> np.ndarray:
    """The standard errors of ``constants`` from the model's derivatives w.r.t. them at each
    reading (``jacobian``, (n_points, n_consts)) and each reading's noise standard deviation:
    the square roots of the diagonal of ``(J' W J)^-1``, W the inverse noise variances; inf for
    a constant the readings do not pin."""
    consts = np.asarray(constants, dtype=float).ravel()
    # Columns per relative change of each constant, so that "not pinned" does not depend on
    # their scales (1e-4 * 2e4 * x0 trades its two constants off whatever their sizes).
    scale = np.where(consts != 0, np.abs(consts), 1.0)
    J = relative_sensitivities(jacobian, noise_std, consts)
    if not np.isfinite(J).all():
        return np.full(len(consts), np.inf)
    _, s, vt = np.linalg.svd(J, full_matrices=False)
    pinned = s > 1e-10 * s.max() if s.size and s.max() > 0 else np.zeros(s.shape, dtype=bool)
    with np.errstate(divide="ignore"):
        inverse = np.where(pinned, 1.0 / np.where(pinned, s, 1.0) ** 2, np.inf)
    # A constant with any weight on a direction the data do not pin is not pinned itself.
    weights = vt**2
    loose = (weights[~pinned] > 1e-12).any(axis=0)
    se = np.sqrt((weights[pinned] * inverse[pinned, None]).sum(axis=0)) * scale
    return np.where(loose, np.inf, se)


class _LeastSquares:
    """Per-trial least squares on the rows of G (K, p, m), zero at masked points: fits a target
    by G's rows and projects other rows onto what G cannot express, from one factorisation.

    Normal equations on unit-norm rows (so wildly different scales do not look rank-deficient),
    a tiny ridge for duplicated terms, and one step of iterative refinement to win back the
    precision the normal equations lose.
    """

    def __init__(self, G: np.ndarray) -> None:
        # Each row by its largest entry first: a linear constant carrying y ~ 1e250 has a row
        # ~ 1e-250 once weighted, and its squares would vanish.
        big = np.abs(G).max(axis=-1)
        big[~(np.isfinite(big) & (big > 0))] = 1.0
        G = G / big[..., None]
        norms = np.sqrt(np.einsum("kpm,kpm->kp", G, G))
        norms[~(np.isfinite(norms) & (norms > 0))] = 1.0
        self.norms = big * norms
        self.G = G / norms[..., None]
        self.GT = self.G.transpose(0, 2, 1)
        A = self.G @ self.GT
        A += 1e-12 * np.eye(A.shape[-1])
        self.inverse = np.linalg.inv(A)

    def fit(self, target: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Coefficients (K, p) of the best fit of target (K, m) by G's rows, and the residual (K, m)."""
        left = target[..., None]
        coef = np.zeros((*self.norms.shape, 1))
        for _ in range(2):
            more = self.inverse @ (self.G @ left)
            coef += more
            left = left - self.GT @ more
        return coef[..., 0] / self.norms, left[..., 0]

    def project(self, J: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """J (K, P, m) minus its least-squares fit by G's rows, and the coefficients (K, P, p) of that fit."""
        coef = (J @ self.GT) @ self.inverse
        return J - coef @ self.G, coef / self.norms[:, None, :]


class _Point(NamedTuple):
    """The projected problem at one point, per trial: NMSE (K,) (inf where the tree or its
    derivatives are not finite), Gauss-Newton matrix J'J (K, P, P) and gradient J'r (K, P) of the
    nonlinear constants with the linear ones projected out, the linear constants solved (K, p), and
    how they move with the nonlinear ones to first order (K, P, p)."""

    losses: np.ndarray
    A: np.ndarray
    g: np.ndarray
    linear: np.ndarray
    slope: np.ndarray


def _furthest_from_median(x: np.ndarray, y: np.ndarray, mask: np.ndarray) -> np.ndarray:
    """Per row of x, y, mask (K, m): x where y (its valid points) is furthest from its median;
    any x of a row with none."""
    valid = mask & np.isfinite(y)
    with np.errstate(all="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # a row with no valid reading has no median
        median = np.nanmedian(np.where(valid, y, np.nan), axis=1, keepdims=True)
        far = np.where(valid, np.abs(y - median), -1.0)
    return x[np.arange(len(x)), np.argmax(far, axis=1)]


class _Projected:
    """The objective over the nonlinear constants of all K trials, linear ones projected out.

    Residuals and derivatives are weighted so that a trial's sum of squares is its NMSE, and laid
    out (K, constants, m): every reduction runs along the contiguous last axis.
    """

    def __init__(self, tokens: tuple[str, ...], trials: Trials, lin: list[int], nonlin: list[int]) -> None:
        self.tokens, self.trials, self.lin, self.nonlin = tokens, trials, lin, nonlin
        self.every = tuple(lin + nonlin)  # one program, so one compile, serves every evaluation
        self.consts = np.zeros((trials.n_trials, len(self.every)))
        self.root = (1.0 / (np.sqrt(np.maximum(trials.n_valid, 1)) * trials.spread))[:, None, None]
        if trials.weight is not None:
            self.root = self.root * trials.weight[:, None, :]
        self.n_evals = 0

    def point(self, theta: np.ndarray, linear: np.ndarray) -> _Point:
        """One evaluation at nonlinear constants ``theta`` (K, P) and linear ones ``linear`` (K, p).

        The tree is affine in its linear constants, so this one evaluation gives their
        regressors, and so their solution and the loss there, exactly; only the Jacobian is taken
        at ``linear`` rather than at the solution (exact when they coincide, see ``solved``).
        """
        trials, consts, p = self.trials, self.consts, len(self.lin)
        consts[:, self.nonlin] = theta
        consts[:, self.lin] = linear
        pred, grads = evaluate_with_grad(self.tokens, trials.X, consts, self.every)
        self.n_evals += 1
        with np.errstate(all="ignore"):
            M = np.stack([*grads, pred - trials.y0], axis=1)
            if not trials.complete:
                M = np.where(trials.mask[:, None, :], M, 0.0)
            M *= self.root
            ok = np.isfinite(M).all(axis=(1, 2)) & np.isfinite(consts).all(axis=1)
            if not ok.all():
                M[~ok] = 0.0  # so the failed trials cannot spoil the others' linear algebra
            G, J, r = M[:, :p], M[:, p:-1], M[:, -1]
            linear = np.array(linear, dtype=float)
            slope = np.zeros((len(theta), theta.shape[1], p))
            if p:
                try:
                    solver = _LeastSquares(G)
                except np.linalg.LinAlgError:
                    ok[:] = False
                else:
                    coef, r = solver.fit(r)
                    linear -= coef
                    J, fitted = solver.project(J)
                    slope = -fitted  # the linear constants move to cancel what G's rows absorb of a step
            A = J @ J.transpose(0, 2, 1)
            g = (J @ r[..., None])[..., 0]
            losses = np.einsum("km,km->k", r, r)
            ok &= np.isfinite(losses) & np.isfinite(A).all(axis=(1, 2)) & np.isfinite(linear).all(axis=1)
        return _Point(np.where(ok, losses, np.inf), A, g, linear, slope)

    def starts(self, theta: np.ndarray) -> list[np.ndarray]:
        """Starts for ``theta`` (K, P) with each NaN column set by a scan (:meth:`scan`); where a
        NaN column shifts a variable (``c + x``), a second start with it where the readings
        depart furthest from their median (a peak's centre) while the others are scanned, then
        scanned itself. Seen with the width at 1.0, a line 2% of the range wide has no centre
        to find, and its width then fits a pole; and from the centre, a width below the scan's
        values may fit worse at the start than such a pole, and better at the end."""
        starts = [self.scan(theta)]
        shifts = [j for j in self._shifts if np.isnan(theta[:, j]).any()]
        if shifts:
            K = theta.shape[0]
            X, y0, mask, _ = self.trials.scan_copies
            centred = theta.copy()
            for j in shifts:
                v, sign = self._shifts[j]
                centre = sign * _furthest_from_median(X[:K, :, v], y0[:K], mask[:K])
                centred[:, j] = np.where(np.isnan(theta[:, j]), centre, theta[:, j])
            others = [j for j in self._scanned(theta) if j not in shifts]
            starts.append(self._scanned_columns(self._scanned_columns(centred, others, theta), shifts, theta))
        return starts

    def scan(self, theta: np.ndarray) -> np.ndarray:
        """``theta`` (K, P) with each NaN column, in turn from the last, set per trial to the
        value of :data:`SCAN_VALUES` where the loss (on a sample of each trial's points, the
        other columns held, NaN ones at 1.0) is least. One evaluation per column covers every
        value. The last first: in prefix order that is the innermost, whose value the outer ones
        depend on (an offset beside exp(c*t) means nothing until the rate is known)."""
        return self._scanned_columns(theta, self._scanned(theta), theta)

    @staticmethod
    def _scanned(theta: np.ndarray) -> list[int]:
        """The columns of ``theta`` with a NaN, in the order a scan takes them: the last first."""
        return list(np.flatnonzero(np.isnan(theta).any(axis=0))[::-1])

    def _scanned_columns(self, theta: np.ndarray, columns: Sequence[int], began: np.ndarray) -> np.ndarray:
        """``theta`` with each of ``columns`` in turn set where ``began`` (the theta the scan
        began with) is NaN to the value that fits best, per trial, among :data:`SCAN_VALUES`
        and the value it has (if any), the others held (NaN ones at 1.0)."""
        K, P = theta.shape
        S = len(SCAN_VALUES)
        X, y0, mask, weight = self.trials.scan_copies
        theta = theta.copy()
        for j in columns:
            todo = np.isnan(began[:, j])
            candidates = np.where(np.isnan(theta), 1.0, theta)[None].repeat(S, axis=0)
            candidates[:, todo, j] = SCAN_VALUES[:, None]
            if not np.isnan(theta[:, j]).any():
                candidates[0, :, j] = theta[:, j]  # the value it has (in place of 1.0) stays a candidate
            losses = self._scan_losses(candidates.reshape(S * K, P), X, y0, mask, weight).reshape(S, K)
            best = np.argmin(losses, axis=0)
            values = candidates[best, np.arange(K), j]
            theta[todo, j] = np.where(np.isfinite(losses[best, np.arange(K)]), values, 1.0)[todo]
        return theta

    @cached_property
    def _shifts(self) -> dict[int, tuple[int, float]]:
        """The columns of theta that shift a variable (``c + x``, ``x - c``, ...): column ->
        (the variable's index, the sign that makes the shift's value the variable's at a zero)."""
        tokens, out = self.tokens, {}
        positions = [i for i, t in enumerate(tokens) if t == "c"]
        column = {positions[k]: j for j, k in enumerate(self.nonlin)}
        for i, t in enumerate(tokens[:-2]):
            if t not in ("add", "sub"):
                continue
            a, b = i + 1, i + 2
            if a in column and tokens[b].startswith("x"):  # c + x is 0 at x = -c, c - x at x = c
                out[column[a]] = (int(tokens[b][1:]), -1.0 if t == "add" else 1.0)
            elif tokens[a].startswith("x") and b in column:  # x + c at x = -c, x - c at x = c
                out[column[b]] = (int(tokens[a][1:]), -1.0 if t == "add" else 1.0)
        return out

    def _scan_losses(self, theta: np.ndarray, X: np.ndarray, y0: np.ndarray, mask: np.ndarray,
                     weight: np.ndarray) -> np.ndarray:
        """The loss of each row of ``theta`` (R, P) on the scan sample's rows X (R, m, n), the
        linear constants solved; inf where not finite."""
        consts = np.zeros((len(theta), len(self.lin) + theta.shape[1]))
        consts[:, self.nonlin] = theta
        # The optimiser's program (derivatives for every constant): a new one would cost a compile.
        pred, grads = evaluate_with_grad(self.tokens, X, consts, self.every)
        self.n_evals += 1
        with np.errstate(all="ignore"):
            M = np.stack([*grads[: len(self.lin)], pred - y0], axis=1)
            M = np.where(mask[:, None, :], M, 0.0) * weight[:, None, :]
            ok = np.isfinite(M).all(axis=(1, 2))
            M[~ok] = 0.0
            r = M[:, -1]
            if self.lin:
                try:
                    r = _LeastSquares(M[:, :-1]).fit(r)[1]
                except np.linalg.LinAlgError:
                    ok[:] = False
            return np.where(ok, np.einsum("km,km->k", r, r), np.inf)

    def solved(self, theta: np.ndarray) -> _Point:
        """The exact point at ``theta`` (K, P): linear constants solved, Jacobian taken there."""
        start = np.zeros((len(theta), len(self.lin)))
        if not self.lin:
            return self.point(theta, start)
        return self.point(theta, self.point(theta, start).linear)

    def value_grad(self, theta_flat: np.ndarray) -> tuple[float, np.ndarray]:
        here = self.solved(theta_flat.reshape(self.trials.n_trials, len(self.nonlin)))
        loss = float(here.losses.sum())
        if not np.isfinite(loss) or not np.isfinite(here.g).all():
            return _PENALTY, np.zeros_like(theta_flat)
        return loss, 2.0 * here.g.ravel()

    def gauss_newton_inverse(self, theta_flat: np.ndarray) -> np.ndarray | None:
        """Inverse of the Gauss-Newton Hessian of the projected objective at ``theta_flat``
        (block diagonal over trials): BFGS started from it takes Gauss-Newton steps at once
        instead of feeling out the scale with identity steps."""
        here = self.solved(theta_flat.reshape(self.trials.n_trials, len(self.nonlin)))
        if not np.isfinite(here.losses).all():
            return None
        with np.errstate(all="ignore"):
            H = 2.0 * here.A
            P = H.shape[-1]
            H += (1e-8 * np.trace(H, axis1=1, axis2=2)[:, None, None] + 1e-300) * np.eye(P)
            try:
                blocks = np.linalg.inv(H)
            except np.linalg.LinAlgError:
                return None
        if not np.isfinite(blocks).all():
            return None
        blocks = 0.5 * (blocks + blocks.transpose(0, 2, 1))
        try:
            np.linalg.cholesky(blocks)  # scipy insists on positive definite
        except np.linalg.LinAlgError:
            return None
        K = len(blocks)
        out = np.zeros((K * P, K * P))
        for k in range(K):
            out[k * P : (k + 1) * P, k * P : (k + 1) * P] = blocks[k]
        return out

    def value(self, theta_flat: np.ndarray) -> float:
        return self.value_grad(theta_flat)[0]

    def grad(self, theta_flat: np.ndarray) -> np.ndarray:
        return self.value_grad(theta_flat)[1]


#: Where a nonlinear constant with no start known is looked for before the optimiser starts:
#: 1.0 first (the start of old, kept on ties), then both signs of 24 values a decade from 0.01
#: to 100. A local optimiser finds the minimum nearest its start: a frequency's loss has one
#: every period (LM reaches the 2 of ``sin(2/x)``, x in 0.1..10, only from 1.49..2.44), and a rate
#: far from 1 lies across flat ground (``exp(-40*t)`` seen from ``exp(t)``). Values 10% apart
#: start ``cos(w*t)``, w*t up to 25 radians, in its basin; 47% apart (six a decade) missed
#: half of them (a damped wave's frequency, t held at 2.5..4).
SCAN_VALUES = np.concatenate([[1.0], np.geomspace(0.01, 100.0, 97), -np.geomspace(0.01, 100.0, 97)])
#: Points per trial the scan judges a start on.
_SCAN_POINTS = 32

#: A trial whose NMSE falls below this is fitted as well as doubles allow.
_CONVERGED = 1e-30
#: A trial stops once a successful step gains less than this fraction of its loss: the rest is
#: noise for ranking trees (measured on 600 recorded fits: 25% fewer evaluations, none lost exactness).
_STALL = 1e-4


def _levenberg_marquardt(
    problem: _Projected, theta: np.ndarray, maxiter: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Levenberg-Marquardt on the projected problem, every trial its own damped least-squares
    problem (K, P), all advanced together: one evaluation per iteration serves every trial.
    Returns the nonlinear constants (K, P), each trial's loss there (inf where the tree or its
    derivatives are not finite) and the linear constants (K, p) solved there.

    Sum-of-squares losses that can reach zero are what it is made for: near the optimum it takes
    Gauss-Newton steps (quadratic convergence, where BFGS crawls along the flat directions that
    redundant constants make), far from it the damping keeps steps safe. A trial point is
    evaluated at the current linear constants moved by their first-order slope, not at its own
    solved ones (one evaluation per step instead of two): its loss is exact, only its Jacobian is
    taken slightly off the solution, which matters less and less as the constants settle.
    """
    losses, A, g, linear, slope = problem.solved(theta)
    P = theta.shape[1]
    damping = np.full(len(theta), 1e-3)
    growth = np.full(len(theta), 2.0)
    # Marquardt's scaling by the largest curvature seen per constant, as MINPACK does: steady
    # along valleys where one column of J fades.
    scale = np.full(theta.shape, 1e-300)
    done = ~np.isfinite(losses) | (losses <= _CONVERGED)
    for _ in range(maxiter):
        if done.all():
            break
        with np.errstate(all="ignore"):
            scale = np.maximum(scale, np.diagonal(A, axis1=1, axis2=2))
            D = damping[:, None] * scale
            try:
                step = np.linalg.solve(A + D[..., None] * np.eye(P), -g[..., None])[..., 0]
            except np.linalg.LinAlgError:
                step = -g / D
            predicted = (step * (D * step - g)).sum(axis=1)
            step[done | ~np.isfinite(step).all(axis=1)] = 0.0
            # Where these overflow, the trial point is not finite and fails.
            moved, guess = theta + step, linear + np.einsum("kqp,kq->kp", slope, step)
        new = problem.point(moved, guess)
        better = (new.losses < losses) & ~done
        with np.errstate(all="ignore"):
            ratio = np.where(better, (losses - new.losses) / np.maximum(predicted, 1e-300), 0.0)
            gain = np.where(better, (losses - new.losses) / np.maximum(losses, 1e-300), 0.0)
        # Nielsen's damping update: shrink by up to 10x after a step the model predicted well,
        # grow ever faster after failed steps.
        shrink = np.maximum(1 / 10, 1 - (2 * np.minimum(ratio, 1.0) - 1) ** 3)
        with np.errstate(over="ignore"):  # a trial that fails every step: its damping goes to inf, its steps to 0
            damping = np.where(better, damping * shrink, damping * growth)
            growth = np.where(better, 2.0, growth * 2.0)
        if better.any():
            theta = np.where(better[:, None], moved, theta)
            linear = np.where(better[:, None], new.linear, linear)
            A = np.where(better[:, None, None], new.A, A)
            g = np.where(better[:, None], new.g, g)
            slope = np.where(better[:, None, None], new.slope, slope)
            losses = np.where(better, new.losses, losses)
        done |= (losses <= _CONVERGED) | (better & (gain < _STALL)) | (damping > 1e12)
    return theta, losses, linear


def _minimise(
    problem: _Projected, x0: np.ndarray, optimizer: str, rng: np.random.Generator | None, maxiter: int
) -> np.ndarray:
    """The nonlinear constants a scipy optimiser finds from ``x0``; ``x0`` where it fails."""
    # Loaded here: LM, the default, needs none of it, and a fit worker starts a second sooner.
    import scipy.optimize as opt

    rng = rng if rng is not None else np.random.default_rng(0)
    bound = float(max(10.0, 10.0 * np.max(np.abs(x0))))
    bounds = [(-bound, bound)] * len(x0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # scipy warns on non-convergence; the loss says it all
        if optimizer == "BFGS":
            options: dict[str, object] = {"maxiter": maxiter}
            H0 = problem.gauss_newton_inverse(x0)
            if H0 is not None:
                options["hess_inv0"] = H0
            res = opt.minimize(problem.value_grad, x0, jac=True, method="BFGS", options=options)
        elif optimizer in ("CG", "L-BFGS-B"):
            res = opt.minimize(problem.value_grad, x0, jac=True, method=optimizer, options={"maxiter": maxiter})
        elif optimizer == "Nelder-Mead":
            res = opt.minimize(problem.value, x0, method="Nelder-Mead", options={"maxiter": maxiter * len(x0)})
        elif optimizer == "basinhopping":
            seed = {_kwarg_for_seed(opt.basinhopping): int(rng.integers(2**31))}
            res = opt.basinhopping(
                problem.value_grad, x0, niter=5,
                minimizer_kwargs={"method": "BFGS", "jac": True, "options": {"maxiter": maxiter}}, **seed,
            )
        elif optimizer == "shgo":
            res = opt.shgo(
                problem.value, bounds, n=32, iters=1, sampling_method="sobol",
                minimizer_kwargs={"method": "L-BFGS-B", "jac": problem.grad, "options": {"maxiter": maxiter}},
            )
        elif optimizer == "dual_annealing":
            seed = {_kwarg_for_seed(opt.dual_annealing): int(rng.integers(2**31))}
            res = opt.dual_annealing(problem.value, bounds, maxfun=maxiter * 10, x0=np.clip(x0, -bound, bound), **seed)
        elif optimizer == "direct":
            res = opt.direct(problem.value, bounds, maxfun=maxiter * 10)
        else:
            raise ConfigError(f"unknown optimizer {optimizer!r}")
    x = np.asarray(res.x, dtype=float)
    if not np.isfinite(x).all():
        x = x0
    return x
