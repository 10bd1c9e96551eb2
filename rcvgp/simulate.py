"""Simulated oracles: a ground-truth expression plus a noise model, served as a :class:`DataOracle`.

:class:`SimulatedOracle` evaluates a catalog entry (:meth:`SimulatedOracle.from_benchmark`) or any
expression a user gives with variable ranges (:meth:`SimulatedOracle.from_expression`). It
behaves like a rig: set points are checked against the declared limits first; a point where the
truth is NaN or infinite (outside the function's domain, or an overflow) comes back as NaN --
the oracle's rule for "could not measure" -- and is counted in :attr:`points_failed`; optional
random point failures and a latency per request let a slow or flaky rig be rehearsed.

Noise is off by default (as in the paper). :class:`Noise` describes it: Gaussian additive with an
absolute standard deviation, Gaussian additive relative to the std of y over the declared ranges,
or multiplicative. Every random draw comes from one ``numpy.random.Generator`` seeded at
construction, so a run is reproducible from its seed. :meth:`SimulatedOracle.noise_floor` is the
test NMSE the truth itself scores under that noise.

Units are arbitrary: ``rescale`` gives the same oracle in other units (every variable and y times
a factor, e.g. a power of ten), to check that what a search finds does not depend on them.

The ground truth never leaves the oracle through the interface: :meth:`describe`, the repr, the
pickled state's printed form and every error message hold no trace of it. :meth:`reveal` gives it
on purpose (``rcvgp oracles show --reveal``, the runner's exact-recovery check).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import sympy

from rcvgp.benchmarks import Benchmark, get_benchmark, parse_expression
from rcvgp.errors import ConfigError, ExpressionError
from rcvgp.metrics import scaled_moments
from rcvgp.operators import resolve_operators
from rcvgp.oracle import DataOracle, OracleSpec, Output, Variable, check_limits, check_reply, design_points

__all__ = ["NOISE_KINDS", "Noise", "SimulatedOracle", "REFERENCE_POINTS", "REFERENCE_SEED"]

#: Noise models a simulated oracle knows.
NOISE_KINDS = ("none", "additive", "relative", "multiplicative")

#: Size and seed of the fixed sample of the declared ranges on which the std of y (for
#: ``relative`` noise) and the noise floor are estimated. Fixed, so the noise level is a property
#: of the equation and its ranges, not of the user's seed or of what a batch happens to hold.
REFERENCE_POINTS = 4096
REFERENCE_SEED = 20230817


@dataclass(frozen=True)
class Noise:
    """A measurement-noise model; ``z`` below is a standard normal draw per point.

    - ``none``: ``y`` (``scale`` must be 0)
    - ``additive``: ``y + scale * z`` (absolute std)
    - ``relative``: ``y + scale * std(y) * z``, where ``std(y)`` is the std of the truth over the
      declared ranges (estimated once on a fixed sample; see :data:`REFERENCE_POINTS`)
    - ``multiplicative``: ``y * (1 + scale * z)``

    Parameters
    ----------
    kind : {'none', 'additive', 'relative', 'multiplicative'}
    scale : float
        Non-negative and finite.
    """

    kind: str = "none"
    scale: float = 0.0

    def __post_init__(self) -> None:
        if self.kind not in NOISE_KINDS:
            import difflib

            close = difflib.get_close_matches(str(self.kind), NOISE_KINDS, n=1)
            hint = f"; did you mean `{close[0]}`?" if close else ""
            raise ConfigError(f"noise kind {self.kind!r} is not one of {', '.join(NOISE_KINDS)}{hint}")
        if isinstance(self.scale, bool) or not isinstance(self.scale, (int, float, np.floating, np.integer)):
            raise ConfigError(f"noise scale must be a number, got {self.scale!r}")
        scale = float(self.scale)
        if not math.isfinite(scale) or scale < 0:
            raise ConfigError(f"noise scale must be finite and >= 0, got {self.scale!r}")
        if self.kind == "none" and scale != 0:
            raise ConfigError(f"noise kind 'none' takes scale 0, got {scale:g}; did you mean `additive:{scale:g}`?")
        object.__setattr__(self, "scale", scale)

    @classmethod
    def parse(cls, spec: Noise | str | Mapping[str, Any] | None) -> Noise:
        """A :class:`Noise` from ``None``, ``"none"``, ``"relative:0.01"`` or ``{"kind": ..., "scale": ...}``."""
        if spec is None:
            return cls()
        if isinstance(spec, Noise):
            return spec
        if isinstance(spec, str):
            kind, sep, scale = spec.strip().partition(":")
            if not sep:
                if kind == "none":
                    return cls()
                raise ConfigError(f"noise {spec!r}: write KIND:SCALE, e.g. `relative:0.01`, or `none`")
            try:
                value = float(scale)
            except ValueError:
                raise ConfigError(f"noise {spec!r}: scale {scale!r} is not a number") from None
            return cls(kind.strip(), value)
        if isinstance(spec, Mapping):
            unknown = set(spec) - {"kind", "scale"}
            if unknown:
                raise ConfigError(f"noise: unknown key(s) {', '.join(sorted(map(str, unknown)))} (known: kind, scale)")
            return cls(str(spec.get("kind", "none")), spec.get("scale", 0.0))
        raise ConfigError(f"noise must be None, a Noise, 'KIND:SCALE' or a mapping, got {type(spec).__name__}")

    def apply(self, y: np.ndarray, rng: np.random.Generator, y_std: float = 1.0) -> np.ndarray:
        """Noisy copy of ``y``; draws ``len(y)`` normals unless the kind is ``none``.

        Parameters
        ----------
        y : ndarray of shape (n_samples,)
        rng : numpy.random.Generator
        y_std : float
            The std of y over the declared ranges (used by ``relative``).
        """
        if self.kind == "none":
            return y
        z = rng.standard_normal(y.shape[0])
        if self.kind == "additive":
            return y + self.scale * z
        if self.kind == "relative":
            return y + (self.scale * y_std) * z
        return y * (1.0 + self.scale * z)

    def __str__(self) -> str:
        return "none" if self.kind == "none" else f"{self.kind}:{self.scale!r}"  # round-trips via parse


def _coerce_variables(variables: Any) -> tuple[Variable, ...]:
    """Variables from Variable objects, dicts, or a mapping ``name -> (low, high)`` / dict."""
    out: list[Variable] = []
    if isinstance(variables, Mapping):
        for name, spec in variables.items():
            if isinstance(spec, Variable):
                out.append(spec)
            elif isinstance(spec, Mapping):
                out.append(Variable.from_dict({"name": name, **spec}))
            elif isinstance(spec, Sequence) and len(spec) == 2:
                out.append(Variable(str(name), float(spec[0]), float(spec[1])))
            else:
                raise ConfigError(f"variable {name}: expected (low, high) or a mapping, got {spec!r}")
    elif isinstance(variables, Sequence) and not isinstance(variables, str):
        for i, v in enumerate(variables):
            if isinstance(v, Variable):
                out.append(v)
            elif isinstance(v, Mapping):
                try:
                    out.append(Variable.from_dict(v))
                except KeyError as exc:
                    raise ConfigError(f"variables[{i}]: missing key {exc.args[0]!r}") from None
            else:
                raise ConfigError(f"variables[{i}]: expected a Variable or a mapping, got {type(v).__name__}")
    else:
        raise ConfigError(f"variables must be a list or a mapping of name -> range, got {type(variables).__name__}")
    if not out:
        raise ConfigError("an oracle needs at least one variable")
    return tuple(out)


def _rescale_factors(
    rescale: Mapping[str, float] | None, variables: Sequence[Variable], output: Output
) -> tuple[list[float], float]:
    """The factor of each variable, in column order, and y's, from ``rescale`` (validated)."""
    names = [v.name for v in variables]
    if rescale is None:
        return [1.0] * len(names), 1.0
    if not isinstance(rescale, Mapping):
        raise ConfigError(f"rescale must map names to factors, got {type(rescale).__name__}")
    if rescale and output.name in names:
        raise ConfigError(f"rescale: a variable is named like the output ({output.name!r}), so its factor is "
                          "ambiguous; give the output another name")
    known = [*names, output.name]
    factors: dict[str, float] = {}
    for key, value in rescale.items():
        if key not in known:
            import difflib

            close = difflib.get_close_matches(str(key), known, n=1)
            hint = f"; did you mean `{close[0]}`?" if close else f" (known: {', '.join(known)})"
            raise ConfigError(f"rescale: {key!r} is neither a variable nor the output{hint}")
        if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)) or not (
                math.isfinite(value) and value > 0):
            raise ConfigError(f"rescale.{key}: a factor must be a finite number > 0, got {value!r}")
        factors[str(key)] = float(value)
    for var in variables:
        if var.dist == "integer_uniform" and factors.get(var.name, 1.0) != 1.0:
            raise ConfigError(f"rescale.{var.name}: an integer_uniform variable is a count, with no unit to "
                              "change; leave it out of rescale")
    return [factors.get(n, 1.0) for n in names], factors.get(output.name, 1.0)


def _scaled_variable(var: Variable, factor: float) -> Variable:
    """``var`` with its limits in units ``factor`` times smaller."""
    return var if factor == 1 else replace(var, low=var.low * factor, high=var.high * factor)


class SimulatedOracle(DataOracle):
    """An in-process oracle that evaluates a hidden ground-truth expression.

    Prefer the constructors :meth:`from_benchmark` and :meth:`from_expression`.

    Parameters
    ----------
    expression : str
        The ground truth over the variables' names (syntax: :func:`rcvgp.benchmarks.parse_expression`).
    variables : sequence of Variable
        Inputs in column order, with limits and sampling distributions.
    operators : sequence of str
        Operator-set hint passed on in :meth:`describe` (validated; ``const`` allowed).
    name : str
        The identity in :meth:`describe` and errors. Never put the expression in it.
    noise : Noise, str, mapping or None
        See :class:`Noise`; off by default.
    seed : int, numpy.random.Generator or None
        Seeds every random draw (noise, simulated failures).
    latency : float
        Seconds each ``measure`` request sleeps, to rehearse a slow rig.
    latency_per_point : float
        Extra seconds per measured row.
    fail_rate : float
        Probability in [0, 1) that a point fails at random (comes back NaN), as on a real rig.
    max_rows : int
        Most rows per request.
    output : Output
        The measured quantity's name and unit.
    rescale : mapping of str to float, optional
        The same oracle in other units: a factor per variable name, and for y under the
        output's name (``"y"`` by default); a name left out keeps factor 1. A variable's
        declared limits are multiplied by its factor; the oracle evaluates the truth at the set
        points divided by the factors and returns y times y's factor, so :meth:`reveal` is the
        law in the new units. The noise is the unscaled oracle's, in the new units (an
        ``additive`` std is in the unscaled y's units; ``relative`` noise stays relative to the
        std of y). Factors are finite and > 0; an ``integer_uniform`` variable (a count) has
        no unit and keeps factor 1.

    Attributes
    ----------
    requests, points_measured, points_failed : int
        Counters over the oracle's life; ``points_failed`` counts the NaN points returned
        (outside the truth's domain, overflow, or simulated failure).
    last_failed : int
        NaN points in the last reply.
    y_std : float or None
        The std of the truth on the declared ranges, in the oracle's units (computed for
        ``relative`` noise only).
    """

    def __init__(
        self,
        expression: str,
        variables: Sequence[Variable],
        *,
        operators: Sequence[str] = (),
        name: str = "sim:expression",
        noise: Noise | str | Mapping[str, Any] | None = None,
        seed: int | np.random.Generator | None = None,
        latency: float = 0.0,
        latency_per_point: float = 0.0,
        fail_rate: float = 0.0,
        max_rows: int = 100_000,
        output: Output | None = None,
        rescale: Mapping[str, float] | None = None,
    ) -> None:
        variables = _coerce_variables(variables)
        operators = tuple(str(o) for o in operators)
        if operators:
            resolve_operators(operators)
        output = output or Output()
        x_factors, self._y_factor = _rescale_factors(rescale, variables, output)
        self._x_factors = np.array(x_factors)
        self._base_variables = variables
        self._spec = OracleSpec(
            variables=tuple(_scaled_variable(v, f) for v, f in zip(variables, x_factors)),
            output=output,
            max_rows=int(max_rows),
            name=str(name),
            operators=operators,
        )
        self._expression = str(expression)
        self._fn = self._compile(self._expression, self._spec.variables)
        self.noise = Noise.parse(noise)
        for label, value in (("latency", latency), ("latency_per_point", latency_per_point)):
            if not (isinstance(value, (int, float)) and math.isfinite(value) and value >= 0):
                raise ConfigError(f"{label} must be a finite number of seconds >= 0, got {value!r}")
        if not (isinstance(fail_rate, (int, float)) and 0.0 <= fail_rate < 1.0):
            raise ConfigError(f"fail_rate must be a probability in [0, 1), got {fail_rate!r}")
        self.latency = float(latency)
        self.latency_per_point = float(latency_per_point)
        self.fail_rate = float(fail_rate)
        self.seed = int(seed) if isinstance(seed, (int, np.integer)) else None
        self._seed_text = "<Generator>" if isinstance(seed, np.random.Generator) else repr(self.seed)
        self._rng = seed if isinstance(seed, np.random.Generator) else np.random.default_rng(seed)
        self.requests = 0
        self.points_measured = 0
        self.points_failed = 0
        self.last_failed = 0
        # The std of y in the unscaled units: the noise is drawn there, then rescaled with y.
        self._base_std = self._reference_std() if self.noise.kind == "relative" else None
        self.y_std: float | None = None if self._base_std is None else self._base_std * self._y_factor

    # -- constructors --------------------------------------------------------------------------

    @classmethod
    def from_benchmark(
        cls,
        bench_or_id: Benchmark | str,
        *,
        noise: Noise | str | Mapping[str, Any] | None = None,
        seed: int | np.random.Generator | None = None,
        latency: float = 0.0,
        latency_per_point: float = 0.0,
        fail_rate: float = 0.0,
        max_rows: int = 100_000,
        rescale: Mapping[str, float] | None = None,
    ) -> SimulatedOracle:
        """The simulated oracle of a catalog entry, named ``sim:<id>``.

        Parameters
        ----------
        bench_or_id : Benchmark or str
            A :class:`~rcvgp.benchmarks.Benchmark` or a catalog id such as ``feynman/I.8.14``.

        Other parameters are those of :class:`SimulatedOracle`.

        Raises
        ------
        ConfigError
            For an unknown id (with the closest ids) or bad options.
        """
        bench = bench_or_id if isinstance(bench_or_id, Benchmark) else get_benchmark(str(bench_or_id))
        return cls(
            bench.expression,
            bench.variables,
            operators=bench.operators,
            name=f"sim:{bench.id}",
            noise=noise,
            seed=seed,
            latency=latency,
            latency_per_point=latency_per_point,
            fail_rate=fail_rate,
            max_rows=max_rows,
            rescale=rescale,
        )

    @classmethod
    def from_expression(
        cls,
        expression: str,
        variables: Sequence[Variable] | Sequence[Mapping[str, Any]] | Mapping[str, Any],
        *,
        operators: Sequence[str] = (),
        name: str = "sim:expression",
        noise: Noise | str | Mapping[str, Any] | None = None,
        seed: int | np.random.Generator | None = None,
        latency: float = 0.0,
        latency_per_point: float = 0.0,
        fail_rate: float = 0.0,
        max_rows: int = 100_000,
        output: Output | None = None,
        rescale: Mapping[str, float] | None = None,
    ) -> SimulatedOracle:
        """A simulated oracle for a user's expression and variable ranges.

        Parameters
        ----------
        expression : str
            E.g. ``"x0*sin(x1) + 2.5"`` or, with named variables, ``"m*g*h"``.
        variables : sequence of Variable or dict, or mapping of name to (low, high) or dict
            The inputs in column order, e.g. ``{"x0": (0.1, 10), "x1": {"low": 1, "high": 2,
            "dist": "loguniform"}}``.

        Other parameters are those of :class:`SimulatedOracle`.

        Raises
        ------
        ExpressionError
            If the expression does not parse or uses a name that is not a variable.
        ConfigError
            For bad variables (e.g. low >= high) or options.
        """
        return cls(
            expression,
            _coerce_variables(variables),
            operators=operators,
            name=name,
            noise=noise,
            seed=seed,
            latency=latency,
            latency_per_point=latency_per_point,
            fail_rate=fail_rate,
            max_rows=max_rows,
            output=output,
            rescale=rescale,
        )

    # -- the DataOracle interface ------------------------------------------------------------

    def describe(self) -> OracleSpec:
        """Variables, limits, distributions, output and operator hint; never the equation."""
        return self._spec

    def measure(self, X: np.ndarray) -> np.ndarray:
        """Evaluate the truth at the set points, add noise, return NaN where it could not measure.

        Parameters
        ----------
        X : ndarray of shape (n_samples, n_vars)

        Returns
        -------
        y : ndarray of shape (n_samples,)
            NaN at points where the truth is NaN/inf (or the noisy value overflows) and at
            simulated failures; their number is in :attr:`last_failed`.

        Raises
        ------
        OutOfLimitsError
            For a set point outside the declared limits (nothing is measured).
        OracleError
            For a wrong shape, too many rows or non-finite set points.
        """
        X = check_limits(self._spec, X)
        n = X.shape[0]
        delay = self.latency + self.latency_per_point * n
        if delay > 0:
            time.sleep(delay)
        with np.errstate(all="ignore"):
            y = self._evaluate(X / self._x_factors)
            y = self.noise.apply(y, self._rng, self._base_std if self._base_std is not None else 1.0)
            y = y * self._y_factor
            if self.fail_rate > 0:
                y = np.where(self._rng.random(n) < self.fail_rate, np.nan, y)
        y = np.where(np.isfinite(y), y, np.nan)
        failed = int(np.isnan(y).sum())
        self.requests += 1
        self.points_measured += n
        self.points_failed += failed
        self.last_failed = failed
        return check_reply(y, n, self._spec.name)

    # -- the truth, on purpose only ------------------------------------------------------------

    def reveal(self) -> str:
        """The ground-truth expression (for ``--reveal`` and exact-recovery checks only), in the
        oracle's units: ``y_factor * f(x0 / factor0, ...)`` when it is rescaled."""
        if not self._rescaled:
            return self._expression
        names = [v.name for v in self._spec.variables]
        expr = parse_expression(self._expression, names)
        # Floats, not exact rationals: is_exact sizes the leftovers it may drop by the truth's floats.
        new = {sympy.Symbol(n): sympy.Symbol(n) / sympy.Float(f) for n, f in zip(names, self._x_factors) if f != 1}
        return str(sympy.Float(self._y_factor) * expr.xreplace(new))

    def noise_floor(self) -> float:
        """The test NMSE that the truth itself scores under this oracle's noise: the expected
        noise variance over the variance of the noisy y, on the declared ranges.

        Estimated on the fixed reference sample (:data:`REFERENCE_POINTS`, :data:`REFERENCE_SEED`)
        where the truth is finite; with ``Var`` the variance and ``E`` the mean over it,
        ``additive:s`` gives ``s**2 / (Var(y) + s**2)``, ``relative:s`` gives ``s**2 / (1 +
        s**2)``, ``multiplicative:s`` gives ``s**2 E(y**2) / (Var(y) + s**2 E(y**2))``, and
        ``none`` 0. Rescaling the units does not change it. NaN when fewer than two reference
        points are finite.
        """
        s2 = self.noise.scale**2
        if self.noise.kind == "none" or s2 == 0:
            return 0.0
        y = self._reference_y()
        if y.size < 2:
            return math.nan
        unit, var, power = (float(v) for v in scaled_moments(y, np.ones(y.shape, dtype=bool)))
        # s2 / unit / unit, not s2 / unit**2: readings near 1e300 (exp(700)) make the square
        # overflow, which Python raises; the quotient underflows to 0 instead.
        noise = {"additive": s2 / unit / unit, "relative": s2 * var, "multiplicative": s2 * power}[self.noise.kind]
        total = var + noise
        return noise / total if total > 0 else math.nan

    def truth(self, X: np.ndarray) -> np.ndarray:
        """The noiseless truth at X, NaN where it is not finite; no limits check, no counters.

        For tests and for scoring a result; a search must use :meth:`measure`.
        """
        X = np.ascontiguousarray(X, dtype=np.float64)
        if X.ndim != 2 or X.shape[1] != self._spec.n_vars:
            raise ConfigError(f"{self._spec.name}: X must have shape (n_samples, {self._spec.n_vars}), got {X.shape}")
        with np.errstate(all="ignore"):
            y = self._evaluate(X / self._x_factors) * self._y_factor
        return np.where(np.isfinite(y), y, np.nan)

    # -- internals -----------------------------------------------------------------------------

    @staticmethod
    def _compile(expression: str, variables: Sequence[Variable]) -> Callable[..., Any]:
        names = [v.name for v in variables]
        expr = parse_expression(expression, names)
        unknown = sorted(str(s) for s in expr.free_symbols if str(s) not in names)
        if unknown:  # parse_expression already refuses these; kept as a guard
            raise ExpressionError(f"the expression uses undeclared variable(s) {', '.join(unknown)}")
        symbols = [sympy.Symbol(n) for n in names]
        return sympy.lambdify(symbols, expr, modules="numpy")  # type: ignore[no-any-return]

    def _evaluate(self, X: np.ndarray) -> np.ndarray:
        out = self._fn(*(X[:, j] for j in range(X.shape[1])))
        y = np.asarray(out)
        if np.iscomplexobj(y):  # not expected with numpy functions; treat as not measurable
            y = np.where(np.imag(y) == 0, np.real(y), np.nan)
        y = np.asarray(y, dtype=np.float64)
        return np.array(np.broadcast_to(y, (X.shape[0],)), dtype=np.float64)

    @property
    def _rescaled(self) -> bool:
        return self._y_factor != 1 or bool(np.any(self._x_factors != 1))

    def _reference_y(self) -> np.ndarray:
        """The truth, in the unscaled units, where it is finite on the fixed reference sample of
        the unscaled ranges (so that rescaling changes nothing but the unit)."""
        base = OracleSpec(variables=self._base_variables, name=self._spec.name)
        X = design_points(base, REFERENCE_POINTS, np.random.default_rng(REFERENCE_SEED))
        with np.errstate(all="ignore"):
            y = self._evaluate(X)
        return np.asarray(y[np.isfinite(y)])

    def _reference_std(self) -> float:
        y = self._reference_y()
        if y.size < 2:
            raise ConfigError(
                f"{self._spec.name}: relative noise needs finite outputs on the declared ranges; use additive noise"
            )
        peak = float(np.max(np.abs(y)))
        std = peak * float(np.std(y / peak)) if peak > 0 else 0.0  # scaled: no overflow near 1e308
        if not (std > 0 and math.isfinite(std)):
            raise ConfigError(
                f"{self._spec.name}: relative noise needs y to vary on the declared ranges; use additive noise"
            )
        return std

    def __repr__(self) -> str:
        return (
            f"SimulatedOracle(name={self._spec.name!r}, n_vars={self._spec.n_vars}, "
            f"noise={str(self.noise)!r}, seed={self._seed_text})"
        )

    __str__ = __repr__

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        del state["_fn"]  # a lambdified function does not pickle; rebuilt from the expression
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._fn = self._compile(self._expression, self._spec.variables)
