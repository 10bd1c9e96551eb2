"""The end of a search as pure functions: the Pareto front of the fitted expressions, the choice
of the law on it, and the law made readable (negligible terms dropped, quotients divided
through, constants snapped to simple values, common factors taken out).

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

import functools
import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import Any, TypeVar

import numpy as np
import sympy

from rcvgp.metrics import real_values, scaled_moments
from rcvgp.noisefloor import not_worse
from rcvgp.search.base import SELECTIONS
from rcvgp.tree import Expr

__all__ = [
    "MAX_DENOMINATOR", "SAME_FIT", "Fitted", "front_of", "pareto_front", "choose", "best_of", "simple_values",
    "Refit", "snap_constants", "refitted", "shortened_series", "as_fractions", "predict", "expanded",
    "drop_negligible_terms", "normalized_quotients", "tidy", "completed_squares", "merged_roots", "collected",
    "merged_logs", "folded_exponentials", "factored_polynomials", "over_common_denominators",
    "shared_coefficients", "summed_angles", "joined_phases", "written_digits", "with_floats_refitted",
    "constant_errors",
]

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


#: A more complex fit joins the front only if it lowers the loss by more than this fraction:
#: less is the same function written with more nodes.
SAME_FIT = 1e-6

T = TypeVar("T")


def front_of(items: Iterable[T], key: Callable[[T], tuple[int, float]]) -> list[T]:
    """The items no simpler item beats, simplest first: ``key(item)`` is (complexity, loss),
    and an item is kept only if its loss is lower than every simpler one's by more than
    :data:`SAME_FIT` of it (ties go to the simpler)."""
    front: list[T] = []
    best = math.inf
    for item in sorted(items, key=key):
        loss = key(item)[1]
        if not front or loss < best * (1 - SAME_FIT):
            front.append(item)
            best = loss
    return front


def pareto_front(fitted: Iterable[Fitted]) -> list[Fitted]:
    """The Pareto front of fits on the validation data (:func:`front_of`)."""
    return front_of(fitted, lambda f: (f.complexity, f.nmse_validation))


def choose(front: Sequence[Fitted], y: np.ndarray, noise_std: np.ndarray, rule: str = "parsimonious",
           weighted: bool = True) -> int:
    """The index of the law on ``front`` (simplest first) by ``rule`` (see the module's text).

    Parameters
    ----------
    front : sequence of Fitted
    y : ndarray of shape (n_validation,)
        The validation readings the fits' ``prediction`` are of.
    noise_std : ndarray of shape (n_validation,)
        The noise standard deviation of each reading.
    rule : {'parsimonious', 'accuracy'}
    weighted : bool
        Whether readings are weighted by their noise (:func:`rcvgp.noisefloor.not_worse`).
    """
    if not front:
        raise ValueError("choose needs at least one fitted expression")
    if rule not in SELECTIONS:
        raise ValueError(f"unknown rule {rule!r} (one of {', '.join(SELECTIONS)})")
    best = best_of(front)
    if rule == "accuracy":
        return best
    for i, f in enumerate(front[:best]):
        if not_worse(y, f.prediction, front[best].prediction, noise_std, weighted):
            return i
    return best


def best_of(front: Sequence[Fitted]) -> int:
    """The index of the lowest validation error."""
    return min(range(len(front)), key=lambda i: front[i].nmse_validation)


_WHOLE_LIMIT = 10**6  # from here on, a simple number is written as a float: 7.25e+22


def simple_values(value: float, max_denominator: int = MAX_DENOMINATOR) -> list[sympy.Number]:
    """The simple numbers ``value`` might be, simplest first: 0, then, in its decade
    (``value = m * 10**k``, 1 <= |m| < 10), the nearest ``m`` of each denominator up to
    ``max_denominator``, kept if the number is a whole one, a fraction of such a denominator
    (1/3, 5/2) or a decimal of two digits (0.3, 0.25, 5e-7). Decades make the candidates the
    same in any units: 5.00003e-7 snaps to 5e-7 as 5.00003 snaps to 5.

    A whole number or a fraction is exact (a sympy Rational), a decimal a Float, which reads as
    a scientist writes it; so is a number of a million or more (7.25e+22, not 725 followed by
    twenty zeros)."""
    out: list[sympy.Number] = [sympy.Integer(0)]
    if not (math.isfinite(value) and value != 0):
        return out
    k = math.floor(math.log10(abs(value)))
    seen: set[Fraction] = set()
    for q in range(1, max_denominator + 1):
        mantissa = Fraction(value / 10.0**k).limit_denominator(q)
        near = mantissa * Fraction(10) ** k
        if near in seen or near == 0:
            continue
        seen.add(near)
        if near.denominator <= max_denominator and abs(near) < _WHOLE_LIMIT:
            out.append(sympy.Rational(near.numerator, near.denominator))
        elif abs(near) >= _WHOLE_LIMIT and (4 * mantissa).denominator == 1:  # 7.25e+22, not 7.3333e+22
            out.append(sympy.Float(float(near)))
        elif (2 * mantissa).denominator == 1:
            out.append(sympy.Float(float(near)))
    return out


#: Fits some constants of a law again: given the law over its constants' symbols, their values
#: and which of them to fit, the values of those fitted to the data (:func:`refitted`).
Refit = Callable[[sympy.Expr, dict[sympy.Symbol, float], list[sympy.Symbol]], dict[sympy.Symbol, float]]


def snap_constants(expr: sympy.Expr, accept: Callable[[sympy.Expr], bool], refit: Refit | None = None) -> sympy.Expr:
    """``expr`` with each float replaced by the simplest of :func:`simple_values` that
    ``accept`` takes and that the data pin down (the largest floats first, each with the others
    as snapped so far).

    A value is pinned down when ``accept`` refuses numbers a quarter of the way to the next
    as simple as it: ``v`` with denominator ``d`` in its decade has no other such fraction
    nearer than ``1/d**2`` of the decade, so ``v`` plus and minus a quarter of that must both be
    refused. Noisy data accept many values near a fitted 2.8: 11/4 is no law's constant unless
    2.734 and 2.766 are ruled out. Data that refuse only the next simple numbers still leave
    room for every number between: a gas constant fitted as 8.3115 +/- 0.0094 accepts 25/3
    and refuses 8.222 and 8.444, yet says no more for 25/3 than for 8.31; refusing numbers a
    quarter of the way keeps such a snap to a chance of about one in two at most, and
    lets a constant the data pin down many times closer snap as before.

    With ``refit``, the floats not snapped yet are fitted again for each snap tried, so that it
    is judged with the others at their best: constants the data tell only together (a charging
    curve's amplitude and rate, fitted to 4.998 and 99.87 at 1% noise) are each refused when
    snapped alone with the other left where the joint fit put it.

    Then each float left is tied to another left within an eighth of it (up to sign), where the
    data take them as one number and refuse a ratio a quarter of the way to the next simple
    one (3/4, 5/4): ``c*log(V2) - c*log(V1)`` fitted as ``8.31688*log(V2) - 8.31484*log(V1)``,
    which then reads as one log."""
    body, values = _over_constants(expr)  # the law over its constants, for every trial
    symbols = list(values)
    Snaps = dict[sympy.Symbol, sympy.Expr]  # a number, or another constant (a tie)
    snapped: Snaps = {}

    def trial(c: sympy.Symbol, value: sympy.Expr) -> tuple[Snaps, dict[sympy.Symbol, float]]:
        """The snaps with ``c`` at ``value`` too, and the values of the floats left."""
        fixed = {**snapped, c: value}
        left = body.xreplace(fixed).free_symbols
        free = [k for k in symbols if k in left]  # in a fixed order: the same fit on every run
        if refit is None or not free:
            return fixed, values
        numbers = {k: float(v) for k, v in fixed.items() if v.is_number}
        ties = {k: v for k, v in fixed.items() if not v.is_number}
        return fixed, {**values, **refit(body.xreplace(ties), {**values, **numbers}, free)}

    def law(fixed: Snaps, at: dict[sympy.Symbol, float]) -> sympy.Expr:
        return body.xreplace(fixed).xreplace({k: sympy.Float(v) for k, v in at.items()})

    phases = {c for f in body.atoms(sympy.sin, sympy.cos) if f.args[0].is_Add for c in f.args[0].args if c in values}
    for c in symbols:
        if c not in body.xreplace(snapped).free_symbols:
            continue  # gone with an earlier snap
        for value, beside in _candidates(values[c], phase=c in phases):
            fixed, at = trial(c, value)
            if accept(law(fixed, at)) and all(not accept(law(*trial(c, v))) for v in beside):
                snapped, values = fixed, at
                break
    left = [c for c in symbols if c in body.xreplace(snapped).free_symbols]
    tied_to: set[sympy.Symbol] = set()
    for i, c in enumerate(left):
        if c in tied_to:
            continue  # the others stand for it now
        for d in left[i + 1:]:
            ratio = values[c] / values[d] if values[d] else math.inf
            if d in snapped or not 7 / 8 < abs(ratio) < 9 / 8:
                continue
            sign = int(math.copysign(1, ratio))
            fixed, at = trial(c, sign * d)
            if accept(law(fixed, at)) and all(not accept(law(*trial(c, k * sign * d))) for k in (0.75, 1.25)):
                snapped, values = fixed, at
                tied_to.add(d)
                break
    return law(snapped, values)


def _over_constants(expr: sympy.Expr) -> tuple[sympy.Expr, dict[sympy.Symbol, float]]:
    """``expr`` with a symbol for each of its floats (the largest first), and their values."""
    floats = sorted(expr.atoms(sympy.Float), key=lambda f: (-abs(float(f)), float(f)))
    symbols = [sympy.Dummy(f"c{i}") for i in range(len(floats))]
    return expr.xreplace(dict(zip(floats, symbols))), {c: float(f) for c, f in zip(symbols, floats)}


def with_floats_refitted(expr: sympy.Expr, refit: Refit) -> sympy.Expr:
    """``expr`` with all its floats fitted again (a form built from another fit's constants)."""
    body, values = _over_constants(expr)
    if not values:
        return expr
    at = {**values, **refit(body, values, list(values))}
    return body.xreplace({k: sympy.Float(v) for k, v in at.items()})


def _candidates(value: float, phase: bool) -> list[tuple[sympy.Expr, list[sympy.Expr]]]:
    """What :func:`snap_constants` tries for a float: each of :func:`simple_values`, with the
    :func:`_neighbours` the data must refuse for it; for the phase of a sine or cosine, the
    nearest multiple of pi/2 too, after 0 (``cos(t + 3*pi/2)`` is ``sin(t)``), with the multiples
    of pi/4 beside it to refuse."""
    out: list[tuple[sympy.Expr, list[sympy.Expr]]] = [(v, _neighbours(v)) for v in simple_values(value)]
    quarter_turns = round(value / (math.pi / 2)) if math.isfinite(value) else 0
    if phase and quarter_turns:
        near = quarter_turns * sympy.pi / 2
        out.insert(1, (near, [near - sympy.pi / 4, near + sympy.pi / 4]))
    return out


def refitted(expr: sympy.Expr, symbols: Sequence[sympy.Symbol], constants: dict[sympy.Symbol, float],
             free: Sequence[sympy.Symbol], X: np.ndarray, y: np.ndarray, sd: np.ndarray) -> dict[sympy.Symbol, float]:
    """The ``free`` of ``constants`` (symbols of ``expr`` beside the variables' ``symbols``),
    the others held, fitted to readings ``y`` at the rows of ``X`` by least squares weighted by
    ``1/sd``, from their values; as given where the fit fails or fits no better."""
    from scipy.optimize import least_squares

    given = {k: constants[k] for k in free}
    keys = list(constants)
    at = [keys.index(k) for k in free]
    ok = np.isfinite(y) & np.isfinite(X).all(axis=1) & (sd > 0)
    if ok.sum() <= len(free):
        return given
    fn = _lambdified(expr, (*symbols, *keys))
    if fn is None:
        return given
    X, y, sd = X[ok], y[ok], sd[ok]
    p = np.array([constants[k] for k in keys], dtype=float)

    def residuals(q: np.ndarray) -> np.ndarray:
        p[at] = q
        with np.errstate(all="ignore"):
            r = (real_values(fn(*X.T, *p), len(y)) - y) / sd
        return np.where(np.isfinite(r), r, 1e100)  # a step into a pole or a branch cut: far off, not an error

    start = p[at].copy()
    try:
        with np.errstate(all="ignore"):  # steps into overflow are part of the search, not news
            before = float(np.sum(residuals(start) ** 2))
            # From values near the optimum (a snap moves one constant by a few standard errors)
            # a few Gauss-Newton steps get there: a fit stopped short only makes the test stricter.
            fit = least_squares(residuals, start, method="lm", x_scale="jac", max_nfev=4 * (len(free) + 1))
    except (TypeError, ValueError, ZeroDivisionError, OverflowError, FloatingPointError, AttributeError):
        return given
    if not (np.isfinite(fit.x).all() and 2 * fit.cost < before):
        return given
    return dict(zip(free, (float(v) for v in fit.x)))


def constant_errors(expr: sympy.Expr, symbols: Sequence[sympy.Symbol], X: np.ndarray,
                    noise_std: np.ndarray) -> tuple[tuple[float, float], ...]:
    """Each float of ``expr`` (a law over the variables' ``symbols``) with its standard error
    from readings at the rows of ``X`` whose noise has standard deviation ``noise_std``, in the order the
    law is written; inf for a float the readings do not pin. Snapped constants (exact numbers)
    are claims, not measurements: they have none."""
    from rcvgp.constants import gauss_newton_errors

    text = str(expr)
    floats = sorted(expr.atoms(sympy.Float), key=lambda f: (text.find(sympy.sstr(f, full_prec=False)), float(f)))
    if not floats:
        return ()
    # Real, as the law's constants are: |u + c| then has the slope sign(u + c), which numpy
    # evaluates, not one through re(c), which it cannot print.
    names = [sympy.Dummy(f"c{i}", real=True) for i in range(len(floats))]
    body = expr.xreplace(dict(zip(floats, names)))
    values = [float(f) for f in floats]
    ok = np.isfinite(X).all(axis=1) & np.isfinite(noise_std)
    if ok.sum() <= len(values):  # readings that all failed (an overflowing law) pin nothing
        return tuple((v, math.inf) for v in values)
    try:
        with np.errstate(all="ignore"):
            columns = [real_values(sympy.lambdify([*symbols, *names], body.diff(c), "numpy")(*X[ok].T, *values),
                                   int(ok.sum())) for c in names]
        errors = gauss_newton_errors(np.column_stack(columns), noise_std[ok], np.array(values))
    except (TypeError, ValueError, NameError, ZeroDivisionError, OverflowError, NotImplementedError,
            np.linalg.LinAlgError):  # NotImplementedError: a function numpy has no name for
        errors = np.full(len(values), np.inf)
    return tuple((v, float(e)) for v, e in zip(values, errors))


@functools.lru_cache(maxsize=4)
def _lambdified(expr: sympy.Expr, symbols: tuple[sympy.Symbol, ...]) -> Callable[..., Any] | None:
    """``expr`` as a numpy function of ``symbols``, made once for the many refits of one law."""
    try:
        return sympy.lambdify(list(symbols), expr, "numpy")
    except (TypeError, ValueError, NameError, SyntaxError, NotImplementedError):
        return None


def shortened_series(expr: sympy.Expr, accept: Callable[[sympy.Expr], bool], max_order: int = 3,
                     refit: Refit | None = None) -> sympy.Expr:
    """``expr`` with each sine, cosine or exponential, and each power of a sum ``1 + u`` (the
    divisors :func:`normalized_quotients` writes), replaced by the first terms of its Taylor
    series about 0 (to at most ``max_order``: ``1 - u**2/2`` for ``cos(u)``, ``1 - u`` for
    ``1/(1 + u)``), multiplied out, where that is smaller and ``accept`` takes it. Under noise a
    function of an argument that stays small over the data can stand in for a power: a fit of
    ``T**4`` came back as ``45569500 - 45569500*cos(4.98904e-8*T**2)``, which reads as the law
    only as its series; livermore2/Vars4-23's ``-2.23*x2*(x1 + 1/sqrt(x3))`` as
    ``86419*x2 - 86419*x2/(1 - 2.58e-5*x1 - 2.58e-5/sqrt(x3))``.

    The two constants of such a pair are fitted apart, a hair from each other (``4264.17828 -
    4264.17820*cos(0.0217*sin(a)/a)`` for ``sin(a)**2/a**2``); the series leaves their
    difference beside the term it cancelled against, which is dropped where ``accept`` takes
    the series without it.

    With ``refit`` (noisy readings), each shortened form is judged with its floats fitted again:
    the terms a series drops were bent to by the others, and as fitted they can be worse than the
    law by more than noise where, refitted, they are not (livermore2/Vars4-24 at 1%, ``-4.81*x0*
    x1*log(x0)`` as ``221270.6267*x0*log(x0) - 221270.6227*x0*log(x0)/(1 - 2.17e-5*x1)``, whose
    leftover ``0.004*x0*log(x0)`` the other terms had taken up)."""
    def accepted(trial: sympy.Expr) -> sympy.Expr | None:
        trial = with_floats_refitted(trial, refit) if refit is not None else trial
        return trial if accept(trial) else None

    def series(node: sympy.Expr, order: int) -> sympy.Expr:
        if isinstance(node, sympy.Pow):  # (1 + u)**e
            u = node.base - 1
            return sympy.Add(*(sympy.binomial(node.exp, k) * u**k for k in range(order + 1)))
        return _taylor(node.func, order).xreplace({_Z: node.args[0]})

    def without_leftovers(trial: sympy.Expr, before: sympy.Expr) -> sympy.Expr:
        terms = set(sympy.Add.make_args(before))
        factors = {t.as_coeff_Mul()[1] for t in terms}
        for term in sympy.Add.make_args(trial):
            if term not in terms and term.as_coeff_Mul()[1] in factors and (lean := accepted(trial - term)) is not None:
                trial = lean
        return trial

    powers = [p for p in expr.atoms(sympy.Pow)
              if p.base.is_Add and p.base.as_coeff_Add()[0] == 1 and not (p.exp.is_Integer and p.exp > 0)]
    for node in sorted([*expr.atoms(sympy.sin, sympy.cos, sympy.exp), *powers], key=sympy.count_ops, reverse=True):
        if not expr.has(node):
            continue  # gone with an earlier replacement
        for order in range(1, max_order + 1):
            trial = without_leftovers(sympy.expand(expr.xreplace({node: series(node, order)})), expr)
            if sympy.count_ops(trial) < sympy.count_ops(expr) and (kept := accepted(trial)) is not None:
                expr = kept
                break
    return expr


def completed_squares(expr: sympy.Expr) -> sympy.Expr:
    """``expr`` with the exponentials of each product merged and each exponent that falls as a
    quadratic in one variable (number coefficients) written about its vertex, the rest a factor,
    and so each divisor that is such a quadratic with no real root: a fitted Gaussian peak
    ``7.45331e-6*exp(50*x/3)*exp(-5.55556*x**2)`` reads ``2.0*exp(-5.55556*(x - 1.5)**2)``, a
    Lorentzian line ``0.002/(1e-4*f**2 - 0.02*f + 1)`` reads ``0.002/(1e-4*(f - 100)**2 + 4e-4)``
    (divided through again by the caller), their height, centre and width where a reader looks
    for them (and where a constant can be snapped). The same function, so ``expr`` as it was if
    no exponent or divisor is such."""

    def quadratic(e: sympy.Expr) -> tuple[sympy.Symbol, sympy.Expr, sympy.Expr, sympy.Expr] | None:
        """x, a, b, k of ``e`` = a*x**2 + b*x + k, if it is one, in one variable x."""
        e = sympy.expand(e)
        if len(e.free_symbols) != 1:
            return None
        (x,) = e.free_symbols
        poly = e.as_poly(x)
        if poly is None or poly.degree() != 2 or not all(q.is_number for q in poly.all_coeffs()):
            return None
        return (x, *poly.all_coeffs())

    def vertex(e: sympy.Expr) -> sympy.Expr:
        q = quadratic(e.args[0])
        if q is None or not q[1].is_negative:
            return e  # a peak's; a rising exponent reads better as fitted
        x, a, b, k = q
        return sympy.exp(a * (x + b / (2 * a)) ** 2) * sympy.exp(k - b**2 / (4 * a))

    def centred(power: sympy.Pow) -> sympy.Expr:
        q = quadratic(power.base)
        if q is None:
            return power
        x, a, b, k = q
        least = k - b**2 / (4 * a)
        if not (a * least).is_positive:
            return power  # it has real roots: no resonance
        return (a * (x + b / (2 * a)) ** 2 + least) ** power.exp

    try:
        merged = sympy.powsimp(expr, combine="exp")
        rewritten = merged.replace(lambda e: isinstance(e, sympy.exp), vertex)
        rewritten = rewritten.replace(lambda e: e.is_Pow and e.base.is_Add and e.exp.is_negative, centred)
    except (TypeError, ValueError, RecursionError, sympy.PolynomialError):
        return expr
    return rewritten if rewritten != merged else expr


#: Stands for any float in an argument, so that arguments fitted apart compare alike.
_ANY_FLOAT = sympy.Dummy("float")


def joined_phases(expr: sympy.Expr, func: type[sympy.Function] = sympy.sin) -> sympy.Expr:
    """``expr``, a sum, with the sine and cosine terms of each argument joined into ``func`` of
    the argument plus a phase, where the two carry the same factors in one ratio: a phase the
    search fitted as a sine and a cosine (``(0.540*a - 0.270)*sin(x) + (0.841*a - 0.421)*cos(x)``,
    multiplied out) reads ``(a - 0.5)*sin(x + 1.0)``, multiplied out, its phase a constant to
    snap. The ratio is the common direction of the pairs of coefficients (least squares on
    both); arguments alike but for their floats (``sin(1.9999*t)``, ``cos(2.0001*t)``, fitted
    apart from noisy readings) join at their mean. The caller judges the result on the data.
    ``expr`` itself if no pair is.

    ``func`` is the form asked for (``sin(x + 1)`` is ``cos(x - 0.5708)``: which one's phase
    snaps, only the data can tell); its phase lies in (-pi/2, pi/2]."""
    def floats(e: sympy.Expr) -> list[sympy.Float]:
        return [a for a in sympy.preorder_traversal(e) if isinstance(a, sympy.Float)]

    terms = list(sympy.Add.make_args(expr))
    # per shape of argument, per function, per argument: each term's other factors -> (its
    # coefficient, its place in ``terms``)
    parts: dict[sympy.Expr, dict[type, dict[sympy.Expr, dict[sympy.Expr, tuple[float, int]]]]] = {}
    for i, t in enumerate(terms):
        trig = [f for f in sympy.Mul.make_args(t) if isinstance(f, (sympy.sin, sympy.cos))]
        if len(trig) != 1:
            continue
        k, rest = (t / trig[0]).as_coeff_Mul()
        if not k.is_Rational and not k.is_Float:
            continue
        u = trig[0].args[0]
        shape = u.xreplace({f: _ANY_FLOAT for f in floats(u)})
        by_func = parts.setdefault(shape, {sympy.sin: {}, sympy.cos: {}})
        by_func[trig[0].func].setdefault(u, {})[rest] = (float(k), i)
    joined_terms: list[sympy.Expr] = []
    for by_func in parts.values():
        if len(by_func[sympy.sin]) != 1 or len(by_func[sympy.cos]) != 1:
            continue
        (u_sin, s), (u_cos, c) = by_func[sympy.sin].popitem(), by_func[sympy.cos].popitem()
        if s.keys() != c.keys():
            continue
        u = u_sin.xreplace({a: sympy.Float((float(a) + float(b)) / 2) for a, b in zip(floats(u_sin), floats(u_cos))})
        factors = list(s)
        pairs = np.array([[s[m][0], c[m][0]] for m in factors])
        # s_m*sin(u) + c_m*cos(u) = a_m*sin(u + phi) with (s_m, c_m) = a_m*(cos(phi), sin(phi)).
        phi = 0.5 * math.atan2(2 * pairs[:, 0] @ pairs[:, 1], pairs[:, 0] @ pairs[:, 0] - pairs[:, 1] @ pairs[:, 1])
        amplitudes = pairs @ np.array([math.cos(phi), math.sin(phi)])
        if func is sympy.cos:  # a*sin(u + phi) = a*cos(u + phi - pi/2), the phase brought back into range
            phi, amplitudes = (phi - math.pi / 2, amplitudes) if phi > 0 else (phi + math.pi / 2, -amplitudes)
        wave = func(u + sympy.Float(phi))
        joined_terms += [sympy.Float(a) * m * wave for a, m in zip(amplitudes, factors)]
        for m in factors:
            terms[s[m][1]] = terms[c[m][1]] = sympy.Integer(0)
    return sympy.Add(*terms, *joined_terms) if joined_terms else expr


def written_digits(expr: sympy.Expr) -> int:
    """The significant digits a reader sees in ``expr``'s floats, as printed (six at most):
    ``cos(3*t + 0.7)`` shows one, ``sin(3*t - 0.870796)`` six."""
    return sum(len(f"{abs(float(f)):.5e}".split("e")[0].replace(".", "").rstrip("0")) for f in expr.atoms(sympy.Float))


def merged_roots(expr: sympy.Expr) -> sympy.Expr:
    """``expr`` with the roots (any one power not whole) of sums in each product taken as one,
    multiplied out: ``1/(sqrt(1 - a*v)*sqrt(1 + a*v))``, as a fit can build a Lorentz factor, is
    ``1/sqrt(1 - a**2*v**2)``. Equal where the sums are positive, which the caller checks on
    the data; ``expr`` itself if no product has two such roots."""

    def merged(product: sympy.Mul) -> sympy.Expr:
        groups: dict[sympy.Expr, list[sympy.Expr]] = {}
        for f in product.args:
            if f.is_Pow and f.base.is_Add and f.exp.is_Rational and not f.exp.is_Integer:
                groups.setdefault(f.exp, []).append(f)
        roots = next((g for g in groups.values() if len(g) > 1), None)
        if roots is None:
            return product
        rest = [f for f in product.args if f not in roots]
        return sympy.Mul(*rest) * sympy.Pow(sympy.expand(sympy.Mul(*(f.base for f in roots))), roots[0].exp)

    try:
        return expr.replace(lambda e: e.is_Mul, merged)
    except (TypeError, ValueError, RecursionError):
        return expr


def collected(expr: sympy.Expr) -> sympy.Expr:
    """``expr`` with the terms that share a function (an exp, sin, cos, log) collected where
    that is shorter: ``T0*exp(-k*t) + Ta - Ta*exp(-k*t)`` is ``Ta + (T0 - Ta)*exp(-k*t)``;
    ``expr`` itself if no such collection is shorter."""
    functions = sorted(expr.atoms(sympy.exp, sympy.sin, sympy.cos, sympy.log), key=sympy.default_sort_key)
    if not functions:
        return expr
    try:
        out = sympy.collect(expr, functions)
    except (TypeError, ValueError, RecursionError):
        return expr
    return out if sympy.count_ops(out) < sympy.count_ops(expr) else expr


def over_common_denominators(expr: sympy.Expr) -> sympy.Expr:
    """``expr`` with the terms of each sum that share a denominator written over it once, their
    common factors taken out, where that is shorter: ``x0/(x1*x3 + x4) + x1/(x1*x3 + x4)`` (as
    multiplied out to snap) is ``(x0 + x1)/(x1*x3 + x4)``; then the numbers and quotients of
    each sum over one denominator, where that is shorter: ``3.2 - 3.2/(2*S + 1)`` is
    ``6.4*S/(2*S + 1)``; ``expr`` itself if no sum is."""

    def denominator(t: sympy.Expr) -> sympy.Expr | None:
        d = sympy.fraction(t)[1]
        return None if d.is_number else d

    def joined(d: sympy.Expr, terms: list[sympy.Expr]) -> sympy.Expr:
        return sympy.factor_terms(sympy.Add(*(sympy.fraction(t)[0] for t in terms))) / d

    def fraction_or_number(t: sympy.Expr) -> sympy.Expr | None:
        return sympy.Integer(1) if t.is_number or denominator(t) is not None else None

    def together(_: sympy.Expr, terms: list[sympy.Expr]) -> sympy.Expr:
        return sympy.factor_terms(sympy.together(sympy.Add(*terms)))

    # Then a number beside them where it cancels: a saturation's 3.2 - 3.2/(2*S + 1) is 6.4*S/(2*S + 1).
    return _merged_in_sums(_merged_in_sums(expr, denominator, joined), fraction_or_number, together)


def shared_coefficients(expr: sympy.Expr) -> sympy.Expr:
    """``expr`` with the terms of each sum that share a number (up to sign) written with it once,
    their common factors taken out too, where that is shorter: ``0.33*x0*x4/(x0**2 + x1) + x1 +
    0.33*x2*x3*x4`` is ``0.33*x4*(x0/(x0**2 + x1) + x2*x3) + x1``; ``expr`` itself if no sum is."""

    def coefficient(t: sympy.Expr) -> sympy.Expr | None:
        k, rest = t.as_coeff_Mul()
        return abs(k) if k.is_Number and abs(k) != 1 and not rest.is_number else None

    return _merged_in_sums(expr, coefficient, lambda _, terms: sympy.factor_terms(sympy.Add(*terms)))


def summed_angles(expr: sympy.Expr) -> sympy.Expr:
    """``expr`` with each pair of products of sines and cosines that is a sine or cosine of a
    sum written as one, where that is shorter: ``sin(4.03*x2)*sin(x3) - cos(4.03*x2)*cos(x3)``
    (as multiplied out to snap, livermore2/Vars5-13) is ``-cos(4.03*x2 + x3)``; ``expr`` itself
    if none is."""
    from sympy.simplify.fu import TR10i

    try:
        out = TR10i(expr)
    except (TypeError, ValueError, RecursionError):
        return expr
    return out if sympy.count_ops(out) < sympy.count_ops(expr) else expr


def merged_logs(expr: sympy.Expr) -> sympy.Expr:
    """``expr`` with the logs in each sum that share a coefficient (up to sign) taken as one
    (with coefficient 1, a number beside them too), where the sum is shorter that way:
    ``log(m0) - log(mf)`` is ``log(m0/mf)``, ``0.0257*log(c1) - 0.0257*log(c2)`` (sympy's
    product of a number and a sum) is ``0.0257*log(c1/c2)``, ``log(100*P + 0.1) + 2.30259`` is
    ``log(1000*P + 1)``; ``expr`` itself if no sum is."""

    def coefficient(t: sympy.Expr) -> sympy.Expr | None:
        if t.is_Number:
            return sympy.Integer(1)  # beside logs of coefficient 1: the log of its exponential
        k, rest = t.as_coeff_Mul()
        return abs(k) if isinstance(rest, sympy.log) and k != 0 else None

    def merged(k: sympy.Expr, terms: list[sympy.Expr]) -> sympy.Expr:
        numbers = [t for t in terms if t.is_Number]
        logs = [t.as_coeff_Mul() for t in terms if not t.is_Number]
        inside = sympy.Mul(*(log.args[0] ** sympy.sign(c) for c, log in logs))
        if numbers:
            inside = sympy.expand(sympy.Float(math.exp(float(sympy.Add(*numbers)))) * inside)
        return k * sympy.log(inside)

    return _merged_in_sums(expr, coefficient, merged)


def _shorter(a: sympy.Expr, b: sympy.Expr) -> bool:
    """Whether ``a`` is shorter than ``b``: fewer operations, or as many and fewer numbers written
    (``6.4*S/(2*S + 1)`` against ``3.2 - 3.2/(2*S + 1)``)."""
    def numbers(e: sympy.Expr) -> int:
        return sum(1 for n in sympy.preorder_traversal(e) if n.is_Number and abs(n) != 1)

    return (sympy.count_ops(a), numbers(a)) < (sympy.count_ops(b), numbers(b))


def _merged_in_sums(expr: sympy.Expr, key: Callable[[sympy.Expr], sympy.Expr | None],
                    merged: Callable[[sympy.Expr, list[sympy.Expr]], sympy.Expr]) -> sympy.Expr:
    """``expr`` with, in each sum, the two or more terms of each ``key`` (None: no key) replaced
    by ``merged(key, terms)`` where the sum is shorter that way."""

    def rewritten(total: sympy.Add) -> sympy.Expr:
        groups: dict[sympy.Expr, list[sympy.Expr]] = {}
        for t in total.args:
            if (k := key(t)) is not None:
                groups.setdefault(k, []).append(t)
        out = total
        for k, terms in groups.items():
            if len(terms) < 2:
                continue
            trial = sympy.Add(*(t for t in out.args if t not in terms), merged(k, terms))
            if _shorter(trial, out):
                out = trial
        return out

    try:
        return expr.replace(lambda e: e.is_Add, rewritten)
    except (TypeError, ValueError, RecursionError):
        return expr


def folded_exponentials(expr: sympy.Expr) -> sympy.Expr:
    """``expr`` with the number in front of each product that holds one exponential taken into
    its exponent: ``2.06115e-9*exp(40*E)`` is ``exp(40*E - 20.0)``, ``-54.6*t*exp(-0.8*t)`` is
    ``-t*exp(4.0 - 0.8*t)``. The same function; the caller snaps both forms and keeps the one
    with fewer floats left: a Fermi function's ``exp(-20)`` and a logistic curve's ``exp(4)``
    (its midpoint) are simple numbers only as exponents, a Gaussian's height ``2`` only in front.
    ``expr`` itself if no product has such a number."""

    def folded(product: sympy.Mul) -> sympy.Expr:
        k, rest = product.as_coeff_Mul()
        factors = sympy.Mul.make_args(rest)
        exps = [f for f in factors if isinstance(f, sympy.exp)]
        if not isinstance(k, sympy.Float) or k == 0 or len(exps) != 1:
            return product
        # Unevaluated: sympy takes a float in an exponent out in front (as a snap that does
        # not take it to a simple number will, when it puts the float back).
        inside = sympy.exp(exps[0].args[0] + sympy.Float(math.log(abs(float(k)))), evaluate=False)
        factors = tuple(inside if f is exps[0] else f for f in factors)
        return sympy.Mul(*([-1] if k < 0 else []), *factors, evaluate=False)

    try:
        return expr.replace(lambda e: e.is_Mul, folded)
    except (TypeError, ValueError, RecursionError):
        return expr


def factored_polynomials(expr: sympy.Expr, max_ops: int = 60) -> sympy.Expr:
    """``expr`` with each sum with exact coefficients factored (as a polynomial in its variables
    and functions) where that is shorter: a resonance's ``x2**4 - 2*x2**2*x3**2 + x3**4`` (as
    multiplied out to snap) is ``(x2 - x3)**2*(x2 + x3)**2``. Fitted floats are left alone: sympy
    factors them only approximately. ``expr`` itself if no sum is shorter factored."""

    def factored(total: sympy.Add) -> sympy.Expr:
        if total.has(sympy.Float) or sympy.count_ops(total) > max_ops:
            return total
        out = sympy.factor(total)
        return out if sympy.count_ops(out) < sympy.count_ops(total) else total

    try:
        return expr.replace(lambda e: e.is_Add, factored)
    except (TypeError, ValueError, RecursionError, sympy.PolynomialError):
        return expr


_Z = sympy.Dummy("z")


@functools.lru_cache(maxsize=None)
def _taylor(func: type[sympy.Function], order: int) -> sympy.Expr:
    """The Taylor polynomial of ``func`` about 0 in :data:`_Z`, to ``order``: sympy's series
    takes some 20 ms, and a law asks for the same few many times."""
    return sympy.series(func(_Z), _Z, 0, order + 1).removeO()


def _neighbours(value: sympy.Number) -> list[sympy.Float]:
    """The two numbers either side of ``value`` a quarter of the way to the next as simple as
    it (:func:`snap_constants`); none for 0, which is judged on its own."""
    v = float(value)
    if v == 0:
        return []
    decade = 10.0 ** math.floor(math.log10(abs(v)))
    denominator = Fraction(v / decade).limit_denominator(1000).denominator
    step = decade / (4 * denominator**2)
    return [sympy.Float(v - step), sympy.Float(v + step)]


def as_fractions(expr: sympy.Expr) -> sympy.Expr:
    """``expr`` with each float that is a whole number or a fraction of :func:`simple_values` to
    rounding written as one: factoring turns the 2/3 a constant snapped to into
    0.666666666666667 when other floats share its term, which reads like a fitted value."""
    swap = {}
    for f in expr.atoms(sympy.Float):
        value = float(f)
        for r in simple_values(value)[1:]:
            if isinstance(r, sympy.Rational) and abs(value - float(r)) <= 1e-12 * abs(value):
                swap[f] = r
                break
    return expr.xreplace(swap) if swap else expr


def predict(expr: sympy.Expr, symbols: Sequence[sympy.Symbol], X: np.ndarray) -> np.ndarray:
    """``expr`` evaluated on the rows of X (n_samples, n_vars), columns in ``symbols``' order;
    NaN everywhere if it cannot be."""
    if expr.has(sympy.zoo, sympy.nan):  # a constant snapped to 0 under a division: no numpy for it
        return np.full(X.shape[0], np.nan)
    try:
        with np.errstate(all="ignore"):
            fn = sympy.lambdify(list(symbols), expr, "numpy")
            return np.array(real_values(fn(*X.T), X.shape[0]))
    except (TypeError, ValueError, NameError, ZeroDivisionError, OverflowError, AttributeError, NotImplementedError):
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
    """Remove the terms of ``expr``'s sums, at any depth, that the law does not need on the
    points X: leftovers such as ``6e-9*x1*x2`` that least squares fits to rounding noise, and the
    ``- 16`` that rounding leaves beside ``v**2`` (up to 4e16) in a numerator once a law's terms
    are put over one denominator. Terms are taken out, smallest first, while the law's values
    move by less than ``rel`` times their spread on X all told: the NMSE changes by at most about
    ``rel**2``."""
    try:
        if sympy.count_ops(expr) > max_ops:
            return expr
        whole = predict(expr, symbols, X)
        if not np.isfinite(whole).all():
            return expr
        unit, var, _ = scaled_moments(whole, np.ones(whole.shape, dtype=bool))  # std of 1e200s overflows
        budget = rel * float(unit * np.sqrt(var))
        if not budget > 0:
            return expr
        while True:
            # A term is a candidate where it never reaches a thousandth of its sum; the whole law
            # is evaluated only for those, and its change decides.
            small = []
            for total in dict.fromkeys(e for e in sympy.preorder_traversal(expr) if e.is_Add):
                size = np.max(np.abs(predict(total, symbols, X)))
                for term in total.args:
                    magnitude = np.max(np.abs(predict(term, symbols, X)))
                    if magnitude < 1e-3 * size:
                        small.append((float(magnitude), sympy.default_sort_key(term), total, term))
            dropped = stale = False
            now: dict[sympy.Expr, sympy.Expr] = {}  # each sum as it is once terms went from it
            for *_, total, term in sorted(small, key=lambda c: c[:2]):
                here = now.get(total, total)
                if not expr.has(here):  # a sum around it changed: the next pass sees it anew
                    stale = True
                    continue
                shrunk = sympy.Add(*(t for t in here.args if t != term))
                candidate = expr.xreplace({here: shrunk})
                if np.max(np.abs(predict(candidate, symbols, X) - whole)) < budget:
                    expr, now[total], dropped = candidate, shrunk, True
            if not (dropped and stale):
                return expr
    except (TypeError, ValueError, NameError, ZeroDivisionError, RecursionError):
        return expr


def normalized_quotients(
    expr: sympy.Expr, symbols: Sequence[sympy.Symbol], X: np.ndarray, rel: float = 1e-6
) -> sympy.Expr:
    """``expr`` with each denominator divided through by one of its coefficients, taken out into
    the numerator: the one most of its terms share (so that most become 1), among equals its
    constant term's, else that of its largest term on the points X. A fit leaves free the scale
    a numerator shares with its denominator: a Michaelis-Menten law came back as
    ``c*Vm/(c*Km/S + c)`` with c = 3.78003 in three floats apart in their last digits, which no
    factoring takes out, a thin lens as ``-10.0036*f*u/(10*f - 10.0034*u)``; divided through,
    the numbers left are the law's own, and can snap. A term that never reaches ``rel`` of its
    denominator's largest term on X (a leftover, ``x1 + 1e-17``) is never the one divided by."""

    def size(e: sympy.Expr) -> float:
        """The largest magnitude of ``e`` on X; nan if it cannot be evaluated or is not finite."""
        values = np.abs(predict(e, symbols, X))
        return float(values.max()) if np.isfinite(values).all() else math.nan

    def divided(power: sympy.Pow) -> sympy.Expr:
        base, exponent = power.args
        terms = base.args
        sizes = [size(t) for t in terms]
        if not all(math.isfinite(v) for v in sizes):
            return power
        coefficients = [float(t.as_coeff_Mul()[0]) for t in terms]
        largest = max(sizes)
        candidates = [i for i, v in enumerate(sizes) if v >= rel * largest and coefficients[i] != 0]
        if not candidates:
            return power

        def shared(i: int) -> int:
            return sum(math.isclose(coefficients[i], c, rel_tol=1e-9) for c in coefficients)

        best = max(candidates, key=lambda i: (shared(i), terms[i].is_number, sizes[i]))
        scale = terms[best].as_coeff_Mul()[0]
        if scale in (0, 1) or (not exponent.is_integer and scale < 0):
            return power
        # The terms divided to 1 have Integer 1s, which read as none and which no refit of the
        # snapping moves (a Float 0.99999999999999989, 0.0183245 times its reciprocal, was refitted
        # along with the numerator, and the scale came back: 2.287/(0.2287 + 12.49*exp(-0.8*t))).
        # Only the coefficients are divided: a square written about its centre stays one.
        split = [t.as_coeff_Mul() for t in terms]
        inner = sympy.Add(*(rest if math.isclose(float(k), float(scale), rel_tol=1e-9) else (k / scale) * rest
                            for k, rest in split))
        return scale**exponent * inner**exponent

    try:
        return expr.replace(lambda e: e.is_Pow and e.base.is_Add and e.exp.is_number and e.exp.is_negative, divided)
    except (TypeError, ValueError, RecursionError):
        return expr


def tidy(expr: sympy.Expr) -> sympy.Expr:
    """The law as a reader wants it: the factors common to all its terms taken out
    (``x0*(x1**2 + x2**2)/2``), and a snapped fraction written as one. Deterministic and quick,
    unlike sympy's simplify, whose heuristics can run for minutes and would need a time limit
    (an answer that depends on the machine)."""
    try:
        factored = sympy.factor_terms(expr)
        # A number alone taken out of a sum (5*(2000*x0*x1 + 1/2)) reads worse than the sum.
        if factored.as_coeff_Mul()[1].is_Add:
            factored = expr
        return as_fractions(factored)
    except (TypeError, ValueError, RecursionError):
        return expr
