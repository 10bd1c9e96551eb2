"""The end of a search as pure functions: the Pareto front of the fitted expressions, the choice
of the law on it, and the law made readable (negligible terms dropped, constants snapped to
simple values, simplified).

The rule (``parsimonious``, the default): among the front, from simplest to most complex, the
first whose validation error is not distinguishably worse than the lowest on the front
(:func:`rcvgp.noisefloor.not_worse`: the rise in mean squared error is within three standard
errors of what the measurement noise makes of the two expressions' difference, or within
rounding when there is no noise). Like PySR's "best" score and BIC it trades error against
complexity, but the exchange rate is the noise the experiment measured, not a tuned constant:
with noiseless data the exact law wins over any near-fit; with noisy data a simpler law that
fits as well as the data can tell wins over one that also fits the noise. ``accuracy`` picks the
lowest validation error.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from fractions import Fraction

import numpy as np
import sympy

from rcvgp.noisefloor import not_worse
from rcvgp.timelimit import TimeUp, time_limit
from rcvgp.tree import Expr

__all__ = [
    "RULES", "Fitted", "pareto_front", "choose", "simple_values", "snap_constants", "as_fractions", "predict",
    "expanded",
    "drop_negligible_terms", "simplify",
]

#: How :func:`choose` picks the law from the front.
RULES = ("parsimonious", "accuracy")
#: Largest denominator of the fractions a constant may snap to: halves, thirds and quarters are
#: the fractions laws hold; with more, nearly every noisy constant is close to one of them.
MAX_DENOMINATOR = 4


@dataclass(frozen=True)
class Fitted:
    """A structure fitted on the final data (no variable held), in the search's units.

    ``loss`` is its NMSE on the data it was fitted to, ``prediction`` its values on the
    validation points and ``nmse_validation`` its NMSE there.
    """

    expr: Expr
    constants: np.ndarray  # (n_consts,)
    schedule: tuple[frozenset[int], ...]
    loss: float
    prediction: np.ndarray
    nmse_validation: float

    @property
    def complexity(self) -> int:
        """Nodes in the tree."""
        return len(self.expr)


#: A more complex fit joins the front only if it lowers the validation NMSE by more than this
#: fraction: less is the same function written with more nodes.
SAME_FIT = 1e-6


def pareto_front(fitted: Iterable[Fitted]) -> list[Fitted]:
    """The fits no simpler fit beats, simplest first: each kept only if its validation NMSE is
    lower than that of every simpler one (by more than :data:`SAME_FIT` of it; ties go to the
    simpler)."""
    front: list[Fitted] = []
    for f in sorted(fitted, key=lambda f: (f.complexity, f.nmse_validation)):
        if not front or f.nmse_validation < front[-1].nmse_validation * (1 - SAME_FIT):
            front.append(f)
    return front


def choose(front: Sequence[Fitted], y: np.ndarray, noise_var: np.ndarray, rule: str = "parsimonious") -> int:
    """The index of the law on ``front`` (simplest first) by ``rule`` (see the module's text).

    Parameters
    ----------
    front : sequence of Fitted
    y : ndarray of shape (n_validation,)
        The validation readings the fits' ``prediction`` are of.
    noise_var : ndarray of shape (n_validation,)
        The noise variance of each reading.
    rule : {'parsimonious', 'accuracy'}
    """
    if not front:
        raise ValueError("choose needs at least one fitted expression")
    if rule not in RULES:
        raise ValueError(f"unknown rule {rule!r} (one of {', '.join(RULES)})")
    best = min(range(len(front)), key=lambda i: front[i].nmse_validation)
    if rule == "accuracy":
        return best
    for i, f in enumerate(front[:best]):
        if not_worse(y, f.prediction, front[best].prediction, noise_var):
            return i
    return best


def simple_values(value: float, max_denominator: int = MAX_DENOMINATOR) -> list[sympy.Rational]:
    """The simple numbers ``value`` might be, simplest first: 0, the nearest integer, then the
    nearest fraction of each denominator up to ``max_denominator``."""
    out: list[sympy.Rational] = [sympy.Integer(0)]
    if not np.isfinite(value):
        return out
    for q in range(1, max_denominator + 1):
        near = Fraction(value).limit_denominator(q)
        r = sympy.Rational(near.numerator, near.denominator)
        if r not in out:
            out.append(r)
    return out


def snap_constants(expr: sympy.Expr, accept: Callable[[sympy.Expr], bool]) -> sympy.Expr:
    """``expr`` with each float replaced by the simplest of :func:`simple_values` that
    ``accept`` takes (the largest floats first, each with the others as snapped so far)."""
    floats = sorted(expr.atoms(sympy.Float), key=lambda f: (-abs(float(f)), float(f)))
    for f in floats:
        if f not in expr.atoms(sympy.Float):
            continue  # gone with an earlier snap
        for value in simple_values(float(f)):
            trial = expr.xreplace({f: value})
            if accept(trial):
                expr = trial
                break
    return expr


def as_fractions(expr: sympy.Expr) -> sympy.Expr:
    """``expr`` with each float that is one of its :func:`simple_values` to rounding written as
    that fraction: simplify turns the 2/3 a constant snapped to into 0.666666666666667 when
    other floats share its sum, which reads like a fitted value."""
    swap = {}
    for f in expr.atoms(sympy.Float):
        value = float(f)
        for r in simple_values(value)[1:]:
            if abs(value - float(r)) <= 1e-12 * abs(value):
                swap[f] = r
                break
    return expr.xreplace(swap) if swap else expr


def predict(expr: sympy.Expr, symbols: Sequence[sympy.Symbol], X: np.ndarray) -> np.ndarray:
    """``expr`` evaluated on the rows of X (n_samples, n_vars), columns in ``symbols``' order;
    NaN everywhere if it cannot be."""
    try:
        with np.errstate(all="ignore"):
            fn = sympy.lambdify(list(symbols), expr, "numpy")
            out = np.asarray(fn(*X.T), dtype=float)
        return np.array(np.broadcast_to(out, X.shape[:1]))
    except (TypeError, ValueError, NameError, ZeroDivisionError, OverflowError, AttributeError):
        return np.full(X.shape[0], np.nan)


def expanded(expr: sympy.Expr, max_ops: int = 200) -> sympy.Expr:
    """``expr`` multiplied out, with numbers such as sqrt(2) (from ``sqrt(x + x)``) as floats, so
    that the numbers of a product merge into one coefficient per term; ``expr`` itself if that
    would make it much bigger (a power of a long sum, say)."""
    try:
        ops = sympy.count_ops(expr)
        if ops > max_ops:
            return expr
        expr = expr.replace(lambda e: e.is_number and not e.is_Rational and not e.is_Float,
                            lambda e: sympy.Float(e.evalf()))
        # A phase, cos(x0 + 1.5704), is a sum of sin(x0) and cos(x0) terms whose coefficients
        # can then merge with the others, and snap: -cos(x0 - 11.63) + 0.80*cos(x0 + 1.57) is
        # -0.59*cos(x0) + 0.002*sin(x0).
        expr = expr.replace(_phase_shifted, sympy.expand_trig)
        out = sympy.expand(expr)
        return out if sympy.count_ops(out) <= 1.5 * ops + 10 else expr
    except (TypeError, ValueError, RecursionError):
        return expr


def _phase_shifted(e: sympy.Basic) -> bool:
    """A sine or cosine of a sum with a number in it."""
    return isinstance(e, (sympy.sin, sympy.cos)) and e.args[0].is_Add and any(a.is_number for a in e.args[0].args)


def drop_negligible_terms(
    expr: sympy.Expr, symbols: Sequence[sympy.Symbol], X: np.ndarray, rel: float = 1e-6, max_ops: int = 200
) -> sympy.Expr:
    """Remove the terms of the expanded expression that never exceed ``rel`` times the spread
    of the whole on the points X: leftovers such as ``6e-9*x1*x2`` that least squares fits
    to rounding noise. Dropping them changes the NMSE by at most about ``rel**2``."""
    try:
        if sympy.count_ops(expr) > max_ops:
            return expr
        expanded = sympy.expand(expr)
        if not isinstance(expanded, sympy.Add):
            return expr
        columns = [X[:, i] for i in range(X.shape[1])]
        with np.errstate(all="ignore"):
            values = [np.broadcast_to(sympy.lambdify(symbols, t, "numpy")(*columns), X.shape[:1]) for t in expanded.args]
            scale = float(np.std(np.sum(values, axis=0)))
            keep = [t for t, v in zip(expanded.args, values) if not np.max(np.abs(v)) < rel * scale]
    except (TypeError, ValueError, NameError, ZeroDivisionError, RecursionError):
        return expr
    if len(keep) == len(expanded.args) or not keep:
        return expr
    return sympy.Add(*keep)


#: Wall seconds sympy's simplify may take on the chosen expression before it is shown as found.
SIMPLIFY_SECONDS = 5.0


def simplify(expr: sympy.Expr, max_ops: int = 60, seconds: float = SIMPLIFY_SECONDS) -> sympy.Expr:
    """sympy's simplify for small expressions, given up after ``seconds`` (24 operations of
    trigonometry took it 17 s, doing nothing); a cheap expansion for big ones."""
    try:
        if sympy.count_ops(expr) <= max_ops:
            with time_limit(seconds):
                return sympy.simplify(expr)
        return sympy.expand(expr)
    except (TypeError, ValueError, RecursionError, TimeUp):
        return expr
