"""Error metrics as the paper defines them, and the exact-recovery check against a known truth.

NMSE = MSE / Var(y), NRMSE = RMSE / std(y), R^2 = 1 - NMSE. A prediction that is not finite
everywhere scores inf (R^2 -inf). Exact recovery is judged on the variables' declared domains
when they are given (:func:`is_exact`, :func:`domain_symbol`).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np
import sympy

from rcvgp.oracle import Variable, sample_variable
from rcvgp.timelimit import TimeUp, call_with_time_limit

__all__ = ["regression_metrics", "is_exact", "domain_symbol", "round_floats", "scaled_moments", "real_values"]


def real_values(values: Any, n: int) -> np.ndarray:
    """A lambdified sympy law's output as ``n`` floats: NaN where it is complex, as sympy can
    make it by writing I into a law, unless the imaginary part cancels to rounding."""
    out = np.asarray(values)
    if np.iscomplexobj(out):
        out = np.where(np.abs(out.imag) <= 1e-12 * np.abs(out.real), out.real, np.nan)
    return np.broadcast_to(out.astype(float, copy=False), (n,))


def scaled_moments(y: np.ndarray, mask: np.ndarray,
                   weight: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per row of ``y`` (..., m), over the points where ``mask`` is true: the largest |y| (1
    where there is none), and the variance and mean square of y divided by it, each point
    weighted by ``weight**2`` if given (weights whose mean square over the mask is 1). Squaring
    y itself overflows from |y| > 1e154 (a Feynman equation reaches 1e252), and an infinite
    variance would make every prediction's NMSE 0."""
    with np.errstate(all="ignore"):
        y = np.where(mask, y, 0.0)
        unit = np.abs(y).max(axis=-1)
        unit = np.where(np.isfinite(unit) & (unit > 0), unit, 1.0)
        u = y / unit[..., None]
        n = np.maximum(mask.sum(axis=-1), 1)
        w2 = np.where(mask, 1.0, 0.0) if weight is None else np.where(mask, np.square(weight), 0.0)
        mean = (w2 * u).sum(axis=-1) / np.maximum(w2.sum(axis=-1), 1e-300)
        var = (w2 * (u - mean[..., None]) ** 2).sum(axis=-1) / n
        power = (w2 * u * u).sum(axis=-1) / n
    return unit, var, power


def regression_metrics(y_true: np.ndarray, y_pred: np.ndarray) -> dict[str, float]:
    """MSE, NMSE, RMSE, NRMSE and R^2 over the points where y_true was measured."""
    y_true = np.asarray(y_true, dtype=float)
    y_pred = np.asarray(y_pred, dtype=float)
    ok = np.isfinite(y_true)
    y_true, y_pred = y_true[ok], y_pred[ok]
    if y_true.size == 0:
        nan = float("nan")
        return {"mse": nan, "nmse": nan, "rmse": nan, "nrmse": nan, "r2": nan}
    unit, var, _ = scaled_moments(y_true, np.ones(y_true.shape, dtype=bool))
    with np.errstate(all="ignore"):
        if not np.isfinite(y_pred).all():
            mse = nmse = math.inf
        else:
            mse = float(np.mean((y_true - y_pred) ** 2))
            scaled = float(np.mean(((y_true - y_pred) / unit) ** 2))
            nmse = scaled / float(var) if var > 0 else (0.0 if scaled == 0 else math.inf)
    if not math.isfinite(nmse):
        nmse = math.inf
    return {
        "mse": mse,
        "nmse": nmse,
        "rmse": math.sqrt(mse),
        "nrmse": math.sqrt(nmse),
        "r2": 1.0 - nmse,
    }


def round_floats(expr: sympy.Expr, digits: int = 3) -> sympy.Expr:
    """Round every float to ``digits`` significant digits; a whole number becomes an Integer,
    so ``sin(1.0001*x0)`` rounds to ``sin(x0)``."""
    expr = sympy.sympify(expr)
    subs = {}
    for f in expr.atoms(sympy.Float):
        v = float(f"{float(f):.{digits - 1}e}")
        subs[f] = sympy.Integer(int(v)) if v.is_integer() and abs(v) < 1e15 else sympy.Float(v)
    return expr.xreplace(subs) if subs else expr


def _as_sympy(e: Any, names: Iterable[str] = ()) -> sympy.Expr:
    """``e`` itself if sympy, else its text parsed with ``names`` as plain symbols (a variable
    called ``S``, ``E``, ``I`` or ``beta`` is the variable, not sympy's object of that name)."""
    if isinstance(e, sympy.Basic):
        return e
    return sympy.sympify(str(e), locals={n: sympy.Symbol(n) for n in names})


#: Wall seconds the symbolic checks of :func:`is_exact` may take.
EXACT_SECONDS = 20.0


def is_exact(
    found: Any,
    truth: Any,
    digits: int = 3,
    rel: float = 1e-4,
    seconds: float = EXACT_SECONDS,
    *,
    variables: Sequence[Variable] | None = None,
) -> bool:
    """SRBench's "symbolic solution": found - truth or found / truth simplifies to a constant
    once constants are compared at ``digits`` significant digits (symbols matched by name).

    Rounding alone misjudges a constant on a rounding boundary (0.31849999 vs 0.3185) and keeps
    fitted leftovers such as ``cos(x1 - 1.3e-6)``; so floats of ``found`` smaller than ``rel``
    times the truth's smallest constant count as 0, and a difference whose expanded
    coefficients are all that small counts as none. sympy's simplify can run for hours on some
    expressions (factoring inside trigsimp): the symbolic checks run in a child process, killed
    after ``seconds`` (:mod:`rcvgp.timelimit`), and what they could not show equal in that time
    is judged not exact.

    Parameters
    ----------
    found, truth : sympy expression or str
        Text is read with the names of ``variables`` as plain symbols.
    digits : int
        Significant digits at which constants are compared.
    rel : float
        Relative size below which a fitted float or coefficient counts as a leftover.
    seconds : float
        Wall-time limit of the symbolic checks.
    variables : sequence of Variable, optional
        The variables' declared domains, matched to the symbols by name. Two forms are then
        compared where the variables live: a variable whose whole support is positive (or
        negative) is a positive (negative) symbol, so ``sqrt(x5)/sqrt(x2)`` equals
        ``sqrt(x5/x2)`` there, and the numerical pre-check draws its points from the declared
        supports (:func:`rcvgp.oracle.sample_variable`). Without them -- and for a symbol
        that is not among them -- symbols carry no assumption and points come from [0.5, 2].
    """
    domains = {v.name: v for v in variables or ()}
    f, t = _unify(_as_sympy(found, domains), domains), _unify(_as_sympy(truth, domains), domains)
    scale = min((abs(float(c)) for c in t.atoms(sympy.Float) if float(c) != 0), default=1.0)
    tiny = rel * min(scale, 1.0)
    zeroed = _without_tiny(f, tiny)
    try:
        # Settle most wrong expressions by evaluating them, before any symbolic work. The floats
        # a symbolic check may drop as leftovers stay in: a float tiny by itself need not be
        # tiny where the variables live (1e-5*x0**3 with x0 near 1e3).
        if _numerically_unlike(f, t, domains):
            return False
        # Tiny floats are leftovers only if the law does without them: a ratio of two tiny
        # numbers (0/0 without them) or a product of the truth's constants in small units
        # (6.6743e-11/x3 for 6.6743e-7*1e-4/x3) is the law.
        symbolic = f if _undefined(zeroed) or _numerically_unlike(zeroed, t, domains) else zeroed
        return call_with_time_limit(seconds, _symbolically_equal, symbolic, t, digits, tiny, rel, domains)
    except (TypeError, ValueError, RecursionError, ZeroDivisionError, TimeUp, ChildProcessError):
        return False


def domain_symbol(variable: Variable) -> sympy.Symbol:
    """The sympy symbol of a variable, with what its declared support tells: positive where
    the whole support is positive (so ``sqrt(x**2)`` is ``x``), negative where it is negative,
    nonnegative or nonpositive where it reaches 0 from one side, real otherwise (a support
    ``[-high, -low] U [low, high]``, or an interval across 0)."""
    low, high = variable.low, variable.high
    if not variable.only_positive:
        sign = {"nonzero": True} if low > 0 else {}
    elif low > 0:
        sign = {"positive": True}
    elif high < 0:
        sign = {"negative": True}
    elif low == 0:
        sign = {"nonnegative": True}
    elif high == 0:
        sign = {"nonpositive": True}
    else:
        sign = {}
    return sympy.Symbol(variable.name, real=True, **sign)


def _symbolically_equal(f: sympy.Expr, t: sympy.Expr, digits: int, tiny: float, rel: float,
                        domains: dict[str, Variable]) -> bool:
    """The symbolic checks of :func:`is_exact`, cheapest first; only small expressions are
    simplified, big ones only expanded."""
    if _constant(_without_tiny(_expand(f - t), tiny)):
        return True
    if sympy.count_ops(f) > _MAX_SIMPLIFY_OPS:
        return False
    if _same_terms(f, t, rel, domains) or _same_cross_products(f, t, rel, domains):
        return True
    if _constant(sympy.simplify(round_floats(f, digits) - round_floats(t, digits))):
        return True
    # Rounded as written, a constant that a simplification moved rounds apart from the truth's
    # (m*(19.6174*h + v**2)/2 for 0.5*m*v**2 + 9.81*m*h: 19.6 against 9.81); expanded first, it
    # is rounded where the truth has it.
    if _constant(_expand(round_floats(_expand(f), digits) - round_floats(_expand(t), digits))):
        return True
    if t == 0:
        return False
    ratio = sympy.simplify(round_floats(f, digits) / round_floats(t, digits))
    return _constant(ratio) and ratio != 0


_MAX_SIMPLIFY_OPS = 80


def _without_tiny(expr: sympy.Expr, tiny: float) -> sympy.Expr:
    """``expr`` with every float smaller than ``tiny`` in magnitude set to 0."""
    return expr.xreplace({c: sympy.Integer(0) for c in expr.atoms(sympy.Float) if abs(float(c)) < tiny})


def _numerically_unlike(
    f: sympy.Expr, t: sympy.Expr, domains: dict[str, Variable] | None = None, rel: float = 0.05
) -> bool:
    """True when both f - t and f / t vary, over random points of the variables' declared
    supports (``domains``; [0.5, 2] for a symbol without one), by more than ``rel`` of the
    truth's spread: then no constant offset or factor (even after rounding constants to a few
    digits) makes them equal. False when the points cannot tell."""
    symbols = sorted(f.free_symbols | t.free_symbols, key=lambda s: s.name)
    if not symbols:
        return False
    X = _points(symbols, domains)
    try:
        with np.errstate(all="ignore"):
            fv = real_values(sympy.lambdify(symbols, f, "numpy")(*X.T), 64)
            tv = real_values(sympy.lambdify(symbols, t, "numpy")(*X.T), 64)
    except (TypeError, ValueError, NameError, ZeroDivisionError, OverflowError, NotImplementedError):
        return False
    ok = np.isfinite(fv) & np.isfinite(tv) & (tv != 0)
    if ok.sum() < 16:
        return False
    unit = np.abs(tv[ok]).max()  # the comparisons are scale-free; the squares in std are not
    fv, tv = fv[ok] / unit, tv[ok] / unit
    if not np.std(tv) > 0:
        return False
    ratio = fv / tv
    with np.errstate(all="ignore"):  # fv can still be huge where the truth is not
        return bool(np.std(fv - tv) > rel * np.std(tv) and np.std(ratio) > rel * abs(np.mean(ratio)))


def _points(symbols: Sequence[sympy.Symbol], domains: dict[str, Variable] | None) -> np.ndarray:
    """64 random points (64, n_symbols) of the symbols' declared supports; [0.5, 2] for a
    symbol without one."""
    domains = domains or {}
    rng = np.random.default_rng(0)
    X = np.empty((64, len(symbols)))
    for j, s in enumerate(symbols):
        var = domains.get(s.name)
        X[:, j] = sample_variable(var, 64, rng) if var is not None else rng.uniform(0.5, 2.0, size=64)
    return X


def _sizes(coefficients: dict[sympy.Expr, complex], domains: dict[str, Variable]) -> dict[sympy.Expr, float]:
    """Each term's size where the variables live: its coefficient times the mean magnitude of
    the term over :func:`_points`. A coefficient alone depends on the units: in units where x0
    is 1e5 and x2 1e-2, 1.3e-21*x1*x2**2 is a float leftover beside 1e-19*x0**2*x1."""
    terms = list(coefficients)
    symbols = sorted(set().union(*(k.free_symbols for k in terms)), key=lambda s: s.name)
    X = _points(symbols, domains)
    out = {}
    for k in terms:
        try:
            with np.errstate(all="ignore"):
                values = np.broadcast_to(np.asarray(sympy.lambdify(symbols, k, "numpy")(*X.T), dtype=complex), (64,))
            m = float(np.mean(np.abs(values)))
        except (TypeError, ValueError, NameError, ZeroDivisionError, OverflowError, NotImplementedError):
            m = math.nan
        out[k] = abs(coefficients[k]) * (m if math.isfinite(m) and m > 0 else 1.0)
    return out


def _same_terms(f: sympy.Expr, t: sympy.Expr, rel: float, domains: dict[str, Variable] | None = None) -> bool:
    """Whether the expanded forms (trigonometric sums split too) have the same terms with
    coefficients equal to ``rel``, up to a constant offset or a constant factor. Rounding each
    constant alone cannot judge a truth whose coefficients are products of constants
    (feynman/bonus.19: ``-1.87e9*(8.08e33*x0/x1**2 + ...)/pi`` against a fitted
    ``-4.81545e42*x0/x1**2 + ...``), nor a phase of 1.5708 for pi/2 (sincos-3-2-2/4)."""
    fd = {k: complex(v) for k, v in _expand(sympy.expand_trig(f)).as_coefficients_dict().items() if v != 0}
    td = {k: complex(v) for k, v in _expand(sympy.expand_trig(t)).as_coefficients_dict().items() if v != 0}
    terms = td.keys() - {1}
    if not terms:
        return False
    # A term the truth lacks, far smaller than all of the truth's, is a fitted leftover
    # (sin(x0 - 1.5708) expands to -cos(x0) plus 3.7e-6*sin(x0)).
    size = _sizes({**fd, **td}, domains or {})
    leftover = rel * min(size[k] for k in terms)
    fd = {k: v for k, v in fd.items() if k in td or k == 1 or size[k] >= leftover}
    if fd.keys() - {1} != terms:
        return False
    if all(abs(fd[k] - td[k]) <= rel * abs(td[k]) for k in terms):
        return True  # the same up to the constant term
    if fd.keys() != td.keys():
        return False
    ratios = [fd[k] / td[k] for k in td]
    return ratios[0] != 0 and all(abs(r - ratios[0]) <= rel * abs(ratios[0]) for r in ratios)


def _same_cross_products(f: sympy.Expr, t: sympy.Expr, rel: float, domains: dict[str, Variable] | None = None) -> bool:
    """Whether f = Nf/Df equals t = Nt/Dt as Nf*Dt = Nt*Df, term by term to ``rel``: a fraction
    can match the truth only once put over one denominator (livermore2/Vars4-20's
    ``(-0.480769*x2*(x3 + 1) + D*(x0 + x1 + 6.69))/D`` is ``x0 + x1 + 6.21 + 1/D``)."""
    nf, df = sympy.fraction(sympy.together(f))
    nt, dt = sympy.fraction(sympy.together(t))
    if df == 1 and dt == 1:
        return False  # no fraction: the expanded comparisons have judged it
    a = {k: complex(v) for k, v in _expand(nf * dt).as_coefficients_dict().items() if v != 0}
    b = {k: complex(v) for k, v in _expand(nt * df).as_coefficients_dict().items() if v != 0}
    if not b:
        return False
    # as in _same_terms: a term on one side only must be far below every term of the truth's side
    size = _sizes({**a, **b}, domains or {})
    leftover = rel * min(size[k] for k in b)
    if any(abs(a.get(k, 0) - b.get(k, 0)) > rel * abs(b[k]) for k in b):
        return False
    return all(size[k] <= leftover for k in a if k not in b)


def _expand(e: sympy.Expr) -> sympy.Expr:
    """Expanded, logs of products and powers split (``log(x2/x0**a)`` is ``log(x2) - a*log(x0)``,
    which simplify leaves alone unless it knows the symbols are positive), numbers such as
    ``log(10)`` evaluated, so a term that cancels numerically cancels."""
    return sympy.expand(sympy.expand(sympy.expand_log(e, force=True)).evalf())


def _constant(e: sympy.Expr) -> bool:
    e = sympy.sympify(e)
    return not e.free_symbols and not _undefined(e)


def _undefined(e: sympy.Expr) -> bool:
    """Whether a nan or an infinity appears: the expression is no function to compare."""
    return bool(e.has(sympy.nan, sympy.zoo, sympy.oo, -sympy.oo))


def _whole(value: float) -> bool:
    """Whether ``value`` is a whole number up to floating-point rounding. Near 0 only 0 is: a
    law's constants can be as small as 3.3e-57 (feynman/bonus.1)."""
    if value == 0:
        return True
    if not abs(value) < 1e15:  # nan and inf included
        return False
    nearest = round(value)
    return nearest != 0 and abs(value - nearest) <= 1e-12 * abs(value)


def _unify(e: sympy.Expr, domains: dict[str, Variable] | None = None) -> sympy.Expr:
    """Symbols by name, so x0 (real) in one expression equals x0 in the other: the symbol of
    the declared domain (:func:`domain_symbol`) where ``domains`` has the name, a plain one
    otherwise; numbers such as sqrt(2) or pi as floats, so a fitted 1.41421 can cancel against
    them; whole-number floats, to rounding, as integers; and a fraction no decimal writes out
    (1/30, 1/3) as a float, so a fitted 0.0333333 rounds as it does (``exp(-t/30)``)."""
    domains = domains or {}
    e = e.xreplace({
        s: domain_symbol(domains[s.name]) if s.name in domains else sympy.Symbol(s.name) for s in e.free_symbols
    })
    # A whole-number float is that integer, so cos(1.0*x2 + 1.5708) expands over sin(x2)
    # like the truth's terms (a found expression of sincos-3-2-2/5 carried that 1.0); so is one
    # a few roundings off it (a fit of sincos-3-2-2/1 left sin(0.99999999999999978*x0 - 1.5708)).
    e = e.xreplace({f: sympy.Integer(round(float(f))) for f in e.atoms(sympy.Float) if _whole(float(f))})
    e = e.replace(
        lambda s: s.is_number and not s.is_Rational and not isinstance(s, sympy.Float),
        lambda s: sympy.Float(s.evalf()),
    )
    e = e.xreplace({q: sympy.Float(q) for q in e.atoms(sympy.Rational) if not _terminating(q)})
    return e.replace(lambda p: p.is_Pow and p.base.is_Add and not (p.exp.is_Integer and p.exp > 0), _leading_one)


def _terminating(q: sympy.Rational) -> bool:
    """Whether ``q`` has a finite decimal expansion: its denominator has no prime but 2 and 5."""
    d = int(q.q)
    for p in (2, 5):
        while d % p == 0:
            d //= p
    return d == 1


def _leading_one(power: sympy.Pow) -> sympy.Expr:
    """A power of a sum with the size of the sum's first term taken out, so that its first
    coefficient is 1 or -1: the same sum in other units is then the same power times a number
    (``10*sqrt(1e-4*x1**2 + 1e10*x3**2)`` and ``1000*sqrt(1e-8*x1**2 + 1e6*x3**2)`` are both
    ``0.1*sqrt(x1**2 + 1e14*x3**2)``). A positive number out of a sum is exact for any exponent."""
    base, exponent = power.args
    first = min(base.args, key=sympy.default_sort_key)
    k = abs(first.as_coeff_Mul()[0])
    if not k.is_Number or k == 0 or k == 1:
        return power
    return k**exponent * sympy.Pow(sympy.expand(base / k), exponent)
