"""Fitting the open constants of a tree on K control-variable trials, one constant vector per trial.

The loss of a trial is its NMSE (mean squared error over the variance of that trial's y), so it
means the same whether y is 1e-25 or 1e84. Constants that enter the tree linearly (terms of a
top-level sum, alone or as a factor) are solved exactly by least squares; only the others go to
an iterative optimiser, which then sees the problem with the linear ones projected out
(variable projection). The K trials are fitted together: one vectorised evaluation per step
serves all of them, and their objectives are independent sums, so the optimum is the same as
fitting each alone. Derivatives come from forward-mode evaluation, not finite differences.
"""

from __future__ import annotations

import inspect
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache

import numpy as np
import scipy.optimize as opt

from rcvgp.errors import ConfigError
from rcvgp.evaluate import compile_tree, evaluate, evaluate_with_grad

__all__ = ["Trials", "FitResult", "fit_constants", "linear_constants", "BAD_LOSS"]

#: Loss given to a prediction that is NaN or infinite anywhere: it never looks good.
BAD_LOSS = float("inf")
_PENALTY = 1e30
_GLOBAL = ("shgo", "dual_annealing", "direct")  # what the optimiser sees instead of inf, so its line search stays finite


class Trials:
    """K control-variable trials: set points, measurements and the mask of measured points.

    Parameters
    ----------
    X : ndarray of shape (K, m, n_vars)
    y : ndarray of shape (K, m); NaN where the oracle could not measure
    controlled : frozenset of int
        The variables held within each trial.
    """

    def __init__(self, X: np.ndarray, y: np.ndarray, controlled: frozenset[int] = frozenset()) -> None:
        self.X = np.asarray(X, dtype=float)
        self.y = np.asarray(y, dtype=float)
        self.controlled = frozenset(controlled)
        self.mask = np.isfinite(self.y)
        self.y0 = np.where(self.mask, self.y, 0.0)
        self.n_valid = self.mask.sum(axis=1)
        n = np.maximum(self.n_valid, 1)
        mean = self.y0.sum(axis=1) / n
        var = np.where(self.mask, (self.y0 - mean[:, None]) ** 2, 0.0).sum(axis=1) / n
        power = (self.y0**2).sum(axis=1) / n
        # A trial whose y does not vary (the free variables do not matter) is judged by the
        # relative error instead, so the denominator never vanishes.
        self.scale = np.where(var > 1e-12 * power, var, np.maximum(power, 1e-300))

    @property
    def n_trials(self) -> int:
        return int(self.X.shape[0])

    def subset(self, k: int) -> Trials:
        """Trial ``k`` alone."""
        return Trials(self.X[k : k + 1], self.y[k : k + 1], self.controlled)

    def losses(self, prediction: np.ndarray) -> np.ndarray:
        """Per-trial NMSE of a prediction of shape (K, m); BAD_LOSS where it is not finite."""
        with np.errstate(all="ignore"):
            r = np.where(self.mask, prediction - self.y0, 0.0)
            mse = (r * r).sum(axis=1) / np.maximum(self.n_valid, 1)
            ok = np.isfinite(np.where(self.mask, prediction, 0.0)).all(axis=1)
            return np.where(ok & np.isfinite(mse), mse / self.scale, BAD_LOSS)


@dataclass(frozen=True)
class FitResult:
    """Outcome of fitting a tree on K trials."""

    losses: np.ndarray  # (K,) NMSE per trial
    constants: np.ndarray  # (K, n_consts)
    n_evals: int  # tree evaluations the fit used

    @property
    def fitness(self) -> float:
        """Mean NMSE over the trials; inf if any trial failed."""
        return float(np.mean(self.losses)) if np.all(np.isfinite(self.losses)) else BAD_LOSS


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


class _LeastSquares:
    """Per-trial least squares on regressors G (K, m, p), masked: solves for coefficients and
    projects other columns onto what G cannot express, from one factorisation.

    Normal equations on unit-norm columns (so wildly different scales do not look
    rank-deficient), a tiny ridge for duplicated terms, and one step of iterative refinement
    to win back the precision the normal equations lose.
    """

    def __init__(self, G: np.ndarray, mask: np.ndarray) -> None:
        self.mask = None if mask.all() else mask  # checked once: solve runs every LM iteration
        if self.mask is not None:
            G = np.where(mask[..., None], G, 0.0)
        norms = np.sqrt((G * G).sum(axis=1))
        norms[~(np.isfinite(norms) & (norms > 0))] = 1.0
        self.norms = norms
        self.G = G / norms[:, None, :]
        self.GT = self.G.transpose(0, 2, 1)
        A = self.GT @ self.G
        A += 1e-12 * np.eye(A.shape[-1])
        self.inverse = np.linalg.inv(A)

    def solve(self, target: np.ndarray) -> np.ndarray:
        """Coefficients (K, p) that fit target (K, m) best."""
        if self.mask is not None:
            target = np.where(self.mask, target, 0.0)
        t = target[..., None]
        coef = self.inverse @ (self.GT @ t)
        coef += self.inverse @ (self.GT @ (t - self.G @ coef))
        return coef[..., 0] / self.norms

    def project(self, J: np.ndarray) -> np.ndarray:
        """J (K, m, P) minus its least-squares fit by G's columns."""
        return J - self.G @ (self.inverse @ (self.GT @ J))


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
    init : ndarray of shape (n_consts,) or (K, n_consts), optional
        Starting values of the nonlinear constants (default 1.0), e.g. an earlier fit's.
    """
    tokens = tuple(tokens)
    n_consts = sum(t == "c" for t in tokens)
    K = trials.n_trials
    if n_consts == 0:
        pred = evaluate(tokens, trials.X)
        return FitResult(trials.losses(pred), np.zeros((K, 0)), 1)
    lin = list(linear_constants(tokens))
    nonlin = [k for k in range(n_consts) if k not in set(lin)]
    consts = np.zeros((K, n_consts))
    if nonlin:
        if init is None:
            consts[:, nonlin] = 1.0
        else:
            consts[:, nonlin] = np.broadcast_to(np.asarray(init, dtype=float), consts.shape)[:, nonlin]
        if optimizer == "LM":
            problem = _Projected(tokens, trials, lin, nonlin)
            theta, losses, linear = _levenberg_marquardt(problem, consts[:, nonlin].copy(), maxiter)
            consts[:, nonlin] = theta
            if np.isfinite(losses).all():
                # LM's last accepted point is the fit: evaluating it again was a sixth of a
                # search's tree evaluations.
                consts[:, lin] = linear
                return FitResult(losses, consts, problem.n_evals)
            n_evals = problem.n_evals
        elif optimizer in _GLOBAL:
            # Global optimisers scale badly with dimension: one search per trial.
            n_evals = 0
            for k in range(K):
                one = trials.subset(k)
                problem = _Projected(tokens, one, lin, nonlin)
                theta, used = _minimise(problem, consts[k, nonlin], optimizer, rng, maxiter)
                consts[k, nonlin] = theta
                n_evals += used
        else:
            problem = _Projected(tokens, trials, lin, nonlin)
            theta, n_evals = _minimise(problem, consts[:, nonlin].ravel(), optimizer, rng, maxiter)
            consts[:, nonlin] = theta.reshape(K, len(nonlin))
    else:
        n_evals = 0
    if lin:
        consts[:, lin] = _linear_part(tokens, trials, consts, lin)[0]
        n_evals += 1
    # The program with derivatives w.r.t. the linear (else nonlinear) constants is compiled
    # already; compiling one for the value alone would cost more than those derivatives.
    pred, _ = evaluate_with_grad(tokens, trials.X, consts, lin or nonlin)
    return FitResult(trials.losses(pred), consts, n_evals + 1)


def _linear_part(
    tokens: tuple[str, ...], trials: Trials, consts: np.ndarray, lin: Sequence[int]
) -> tuple[np.ndarray, _LeastSquares | None]:
    """The least-squares values of the linear constants (K, p), and the solver of their
    regressors (None when the tree is not finite on the data)."""
    base = consts.copy()
    base[:, lin] = 0.0
    h, grads = evaluate_with_grad(tokens, trials.X, base, lin)
    G = np.stack(grads, axis=-1)
    with np.errstate(all="ignore"):
        if not (np.isfinite(np.where(trials.mask, h, 0.0)).all() and np.isfinite(G).all()):
            return np.zeros((trials.n_trials, len(lin))), None
        try:
            solver = _LeastSquares(G, trials.mask)
        except np.linalg.LinAlgError:
            return np.zeros((trials.n_trials, len(lin))), None
        return solver.solve(trials.y0 - h), solver


class _Projected:
    """The objective over the nonlinear constants of all K trials, linear ones projected out."""

    def __init__(self, tokens: tuple[str, ...], trials: Trials, lin: list[int], nonlin: list[int]) -> None:
        self.tokens, self.trials, self.lin, self.nonlin = tokens, trials, lin, nonlin
        K = trials.n_trials
        self.consts = np.zeros((K, len(lin) + len(nonlin)))
        self.n_evals = 0
        self.weights = 1.0 / (np.maximum(trials.n_valid, 1) * trials.scale)  # (K,): losses are NMSEs
        self.last: tuple[np.ndarray, _LeastSquares | None, np.ndarray] | None = None

    def _residuals(self, theta: np.ndarray) -> tuple[np.ndarray, np.ndarray, _LeastSquares | None]:
        """At ``theta`` (K, P), the linear constants solved: residuals (K, m) and Jacobian
        w.r.t. the nonlinear constants (K, m, P), both masked, and the linear constants' solver."""
        trials = self.trials
        consts = self.consts
        consts[:, self.nonlin] = theta
        solver = None
        if self.lin:
            consts[:, self.lin], solver = _linear_part(self.tokens, trials, consts, self.lin)
            self.n_evals += 1
        pred, grads = evaluate_with_grad(self.tokens, trials.X, consts, self.nonlin)
        self.n_evals += 1
        with np.errstate(all="ignore"):
            r = np.where(trials.mask, pred - trials.y0, 0.0)
            J = np.where(trials.mask[..., None], np.stack(grads, axis=-1), 0.0)
        return r, J, solver

    def value_grad(self, theta_flat: np.ndarray) -> tuple[float, np.ndarray]:
        trials, K = self.trials, self.trials.n_trials
        r, J, solver = self._residuals(theta_flat.reshape(K, len(self.nonlin)))
        w = self.weights
        with np.errstate(all="ignore"):
            loss = float(((r * r).sum(axis=1) * w).sum())
            g = 2.0 * np.einsum("km,kmp->kp", r, J) * w[:, None]
        if not np.isfinite(loss) or not np.isfinite(g).all():
            return _PENALTY, np.zeros_like(theta_flat)
        self.last = (J, solver, w)
        return loss, g.ravel()

    def projected_jacobian(self) -> np.ndarray:
        """The Jacobian (K, m, P) of the last ``value_grad`` point with what the linear constants
        can absorb projected out (Kaufman's variable projection), masked and unweighted."""
        assert self.last is not None
        J, solver, _ = self.last
        if solver is None:
            return J
        with np.errstate(all="ignore"):
            return solver.project(J)

    def gauss_newton_inverse(self, theta_flat: np.ndarray) -> np.ndarray | None:
        """Inverse of the Gauss-Newton Hessian of the projected objective at ``theta_flat``
        (block diagonal over trials): BFGS started from it takes Gauss-Newton steps at once
        instead of feeling out the scale with identity steps."""
        self.last = None
        self.value_grad(theta_flat)
        if self.last is None:
            return None
        J = self.projected_jacobian()
        w = self.last[2]
        with np.errstate(all="ignore"):
            H = 2.0 * w[:, None, None] * (J.transpose(0, 2, 1) @ J)
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

    def trial_losses(self, theta: np.ndarray) -> tuple[np.ndarray, np.ndarray | None, np.ndarray | None]:
        """Per-trial loss (K,) at ``theta`` (K, P), with the weighted residuals (K, m) and the
        weighted projected Jacobian (K, m, P). A trial that is not finite there has loss inf
        and zeros in the arrays; if no trial is finite, the arrays are None."""
        K = self.trials.n_trials
        r, J, solver = self._residuals(theta)
        w = self.weights
        with np.errstate(all="ignore"):
            root = np.sqrt(w)[:, None]
            r = r * root
            losses = (r * r).sum(axis=1)
            ok = np.isfinite(losses) & np.isfinite(J).all(axis=(1, 2)) & np.isfinite(self.consts).all(axis=1)
        if not ok.any():
            return np.full(K, np.inf), None, None
        self.last = (J, solver, w)
        J = np.where(ok[:, None, None], self.projected_jacobian() * root[..., None], 0.0)
        return np.where(ok, losses, np.inf), np.where(ok[:, None], r, 0.0), J

    def linear_values(self) -> np.ndarray:
        """The linear constants (K, p) solved at the last point evaluated."""
        return self.consts[:, self.lin].copy()

    def value(self, theta_flat: np.ndarray) -> float:
        return self.value_grad(theta_flat)[0]

    def grad(self, theta_flat: np.ndarray) -> np.ndarray:
        return self.value_grad(theta_flat)[1]


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
    redundant constants make), far from it the damping keeps steps safe.
    """
    losses, r, J = problem.trial_losses(theta)
    linear = problem.linear_values()
    if r is None or J is None:
        return theta, losses, linear
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
            JT = J.transpose(0, 2, 1)
            g = (JT @ r[..., None])[..., 0]
            A = JT @ J
            scale = np.maximum(scale, np.diagonal(A, axis1=1, axis2=2))
            A = A + (damping[:, None] * scale)[..., None] * np.eye(P)
            try:
                step = np.linalg.solve(A, -g[..., None])[..., 0]
            except np.linalg.LinAlgError:
                step = -g / (damping[:, None] * scale)
            predicted = (step * (damping[:, None] * scale * step - g)).sum(axis=1)
        step[done | ~np.isfinite(step).all(axis=1)] = 0.0
        new_losses, new_r, new_J = problem.trial_losses(theta + step)
        better = (new_losses < losses) & ~done
        with np.errstate(all="ignore"):
            ratio = np.where(better, (losses - new_losses) / np.maximum(predicted, 1e-300), 0.0)
            gain = np.where(better, (losses - new_losses) / np.maximum(losses, 1e-300), 0.0)
        # Nielsen's damping update: shrink by up to 10x after a step the model predicted well,
        # grow ever faster after failed steps.
        shrink = np.maximum(1 / 10, 1 - (2 * np.minimum(ratio, 1.0) - 1) ** 3)
        damping = np.where(better, damping * shrink, damping * growth)
        growth = np.where(better, 2.0, growth * 2.0)
        if new_r is not None and new_J is not None and better.any():
            theta = np.where(better[:, None], theta + step, theta)
            linear = np.where(better[:, None], problem.linear_values(), linear)
            r = np.where(better[:, None], new_r, r)
            J = np.where(better[:, None, None], new_J, J)
            losses = np.where(better, new_losses, losses)
        done |= (losses <= _CONVERGED) | (better & (gain < _STALL)) | (damping > 1e12)
    return theta, losses, linear



def _minimise(
    problem: _Projected, x0: np.ndarray, optimizer: str, rng: np.random.Generator | None, maxiter: int
) -> tuple[np.ndarray, int]:
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
    return x, problem.n_evals
