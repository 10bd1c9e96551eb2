"""The DataOracle interface, its description (OracleSpec), the in-process CallableOracle, and the
experiment design: how the search turns "hold these variables, vary those" into set points.

The search builds the set points itself (client-side design) and sees an oracle only through
:class:`DataOracle`; an oracle never sees the search. A rig integrator writes one small subclass
(``describe`` + ``measure``) and can use it in-process or serve it over ZeroMQ.

Points an oracle could not measure come back as NaN: the search drops and counts them. Any other
non-finite value, or a reply of the wrong shape, is an :class:`~rcvgp.errors.OracleError`.
"""

from __future__ import annotations

import dataclasses
import math
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any

import numpy as np

from rcvgp.errors import ConfigError, OracleError, OutOfLimitsError

__all__ = [
    "DISTRIBUTIONS",
    "Variable",
    "Output",
    "OracleSpec",
    "DataOracle",
    "CallableOracle",
    "sample_variable",
    "spread_variable",
    "design_trials",
    "design_points",
    "edge_points",
    "check_limits",
    "check_reply",
]

#: Sampling distributions a variable may declare (semantics in ``oracles/README`` and benchmarks.yaml).
DISTRIBUTIONS = ("uniform", "loguniform", "integer_uniform")


@dataclass(frozen=True)
class Variable:
    """One input of an oracle: its name, unit, limits and how the design samples it.

    ``only_positive=False`` means the support is ``[-high, -low] U [low, high]``: each draw is
    negated with probability 1/2 (the benchmark catalog's sign rule). With ``only_positive=True``
    the support is ``[low, high]``. ``integer_uniform`` draws integers in ``[low, high)``.
    """

    name: str
    low: float
    high: float
    dist: str = "uniform"
    only_positive: bool = True
    unit: str = ""

    def __post_init__(self) -> None:
        if not self.name or not isinstance(self.name, str):
            raise ConfigError(f"variable name must be a non-empty string, got {self.name!r}")
        if self.dist not in DISTRIBUTIONS:
            raise ConfigError(
                f"variable {self.name}: dist {self.dist!r} is not one of {', '.join(DISTRIBUTIONS)}"
            )
        low, high = float(self.low), float(self.high)
        if not (math.isfinite(low) and math.isfinite(high)) or low >= high:
            raise ConfigError(
                f"variable {self.name}: limits must be finite with low < high, got low={self.low}, high={self.high}"
            )
        if self.dist == "loguniform" and low <= 0:
            raise ConfigError(
                f"variable {self.name}: loguniform needs 0 < low < high (magnitudes), got low={self.low}"
            )
        if not self.only_positive and low < 0:
            raise ConfigError(
                f"variable {self.name}: only_positive=false mirrors [low, high] to negative values, "
                f"so low must be >= 0, got low={self.low}"
            )
        object.__setattr__(self, "low", low)
        object.__setattr__(self, "high", high)

    def contains(self, values: np.ndarray) -> np.ndarray:
        """Boolean mask of the values that lie inside this variable's support (limits inclusive)."""
        v = np.asarray(values, dtype=float)
        magnitude = v if self.only_positive else np.abs(v)
        return np.isfinite(v) & (magnitude >= self.low) & (magnitude <= self.high)

    def clip(self, values: np.ndarray) -> np.ndarray:
        """The nearest values inside the support (a value a rounding outside it moves onto its edge)."""
        v = np.asarray(values, dtype=float)
        if self.only_positive:
            return np.clip(v, self.low, self.high)
        return np.where(v < 0, -1.0, 1.0) * np.clip(np.abs(v), self.low, self.high)

    def scaled(self, factor: float) -> Variable:
        """The same variable measured in units ``factor`` times larger: limits divided by it, to
        12 significant digits, so that one range in two units (1e-7/1e-6 and 1e-4/1e-3) gets the
        very same limits, not two that differ in the last bit."""
        return dataclasses.replace(self, low=float(f"{self.low / factor:.12g}"), high=float(f"{self.high / factor:.12g}"))

    def describe_limits(self) -> str:
        """The support as text, e.g. ``[0.1, 10]`` or ``[-10, -0.1] U [0.1, 10]``."""
        if self.only_positive:
            return f"[{self.low:g}, {self.high:g}]"
        return f"[{-self.high:g}, {-self.low:g}] U [{self.low:g}, {self.high:g}]"

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "unit": self.unit,
            "low": self.low,
            "high": self.high,
            "dist": self.dist,
            "only_positive": self.only_positive,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Variable:
        return cls(
            name=str(data["name"]),
            low=float(data["low"]),
            high=float(data["high"]),
            dist=str(data.get("dist", "uniform")),
            only_positive=bool(data.get("only_positive", True)),
            unit=str(data.get("unit", "")),
        )


@dataclass(frozen=True)
class Output:
    """The measured quantity."""

    name: str = "y"
    unit: str = ""


@dataclass(frozen=True)
class OracleSpec:
    """What an oracle tells about itself: never the equation.

    Parameters
    ----------
    variables : tuple of Variable
        One per input column, in column order.
    output : Output
        The measured quantity.
    max_rows : int
        Most rows one ``measure`` request may carry.
    name : str
        An identity for logs and results (e.g. ``sim:feynman/I.8.14`` or ``rig:furnace-2``).
    operators : tuple of str
        Operator-set hint for the search (empty: no hint).
    capabilities : tuple of str
        Optional features, e.g. ``("readback",)``.
    """

    variables: tuple[Variable, ...]
    output: Output = field(default_factory=Output)
    max_rows: int = 100_000
    name: str = "oracle"
    operators: tuple[str, ...] = ()
    capabilities: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        object.__setattr__(self, "variables", tuple(self.variables))
        object.__setattr__(self, "operators", tuple(self.operators))
        object.__setattr__(self, "capabilities", tuple(self.capabilities))
        if not self.variables:
            raise ConfigError("an oracle needs at least one variable")
        names = [v.name for v in self.variables]
        if len(set(names)) != len(names):
            raise ConfigError(f"variable names must be unique, got {names}")
        if int(self.max_rows) < 1:
            raise ConfigError(f"max_rows must be >= 1, got {self.max_rows}")

    @property
    def n_vars(self) -> int:
        return len(self.variables)

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "variables": [v.to_dict() for v in self.variables],
            "output": {"name": self.output.name, "unit": self.output.unit},
            "max_rows": int(self.max_rows),
            "operators": list(self.operators),
            "capabilities": list(self.capabilities),
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> OracleSpec:
        out = data.get("output") or {}
        return cls(
            variables=tuple(Variable.from_dict(v) for v in data["variables"]),
            output=Output(str(out.get("name", "y")), str(out.get("unit", ""))),
            max_rows=int(data.get("max_rows", 100_000)),
            name=str(data.get("name", "oracle")),
            operators=tuple(str(o) for o in data.get("operators", ())),
            capabilities=tuple(str(c) for c in data.get("capabilities", ())),
        )


class DataOracle(ABC):
    """Something that measures y at set points X: a simulator, a rig, or a remote server.

    Subclasses implement :meth:`describe` and :meth:`measure`; a rig that reads back the values
    it actually reached overrides :meth:`measure_readback` too.
    """

    @abstractmethod
    def describe(self) -> OracleSpec:
        """The variables, output and limits; never the ground truth."""

    @abstractmethod
    def measure(self, X: np.ndarray) -> np.ndarray:
        """Measure y at the set points.

        Parameters
        ----------
        X : ndarray of shape (n_samples, n_vars)

        Returns
        -------
        y : ndarray of shape (n_samples,)
            NaN where a point could not be measured.
        """

    def measure_readback(self, X: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Measure and return ``(X_reached, y)``; the default reached X exactly."""
        return np.asarray(X, dtype=float), self.measure(X)

    def close(self) -> None:
        """Release whatever the oracle holds (sockets, instruments)."""

    def __enter__(self) -> DataOracle:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


class CallableOracle(DataOracle):
    """An in-process oracle around a Python callable ``fn(X) -> y``.

    Set points are checked against the spec's limits before ``fn`` sees them, as a server would.
    """

    def __init__(self, fn: Callable[[np.ndarray], Any], spec: OracleSpec) -> None:
        if not callable(fn):
            raise ConfigError(f"CallableOracle needs a callable, got {type(fn).__name__}")
        self._fn = fn
        self._spec = spec

    def describe(self) -> OracleSpec:
        return self._spec

    def measure(self, X: np.ndarray) -> np.ndarray:
        X = check_limits(self._spec, X)
        y = self._fn(X)
        return check_reply(y, X.shape[0], self._spec.name)

    def __repr__(self) -> str:
        return f"CallableOracle(name={self._spec.name!r}, n_vars={self._spec.n_vars})"


def check_limits(spec: OracleSpec, X: Any) -> np.ndarray:
    """Validate set points against a spec; return X as a float64 C-contiguous array.

    Raises
    ------
    OutOfLimitsError
        Naming the first offending variable, its value and its limits.
    OracleError
        For a wrong shape, too many rows or non-finite set points.
    """
    X = np.ascontiguousarray(X, dtype=np.float64)
    if X.ndim != 2 or X.shape[1] != spec.n_vars:
        raise OracleError(
            f"{spec.name}: set points must have shape (n_samples, {spec.n_vars}), got {X.shape}"
        )
    if X.shape[0] > spec.max_rows:
        raise OracleError(f"{spec.name}: {X.shape[0]} rows exceed the limit of {spec.max_rows} per request")
    for j, var in enumerate(spec.variables):
        bad = ~var.contains(X[:, j])
        if bad.any():
            i = int(np.flatnonzero(bad)[0])
            raise OutOfLimitsError(
                f"{spec.name}: variable {var.name} = {float(X[i, j])!r} (row {i}) is outside its limits "
                f"{var.describe_limits()}"
            )
    return X


def check_reply(y: Any, n_rows: int, who: str = "oracle") -> np.ndarray:
    """Validate an oracle's reply: shape (n_rows,), float; NaN allowed (unmeasured), inf not."""
    try:
        y = np.asarray(y, dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise OracleError(f"{who}: measure returned something that is not numeric: {exc}") from exc
    if y.ndim == 2 and y.shape[1] == 1:
        y = y[:, 0]
    if y.shape != (n_rows,):
        raise OracleError(f"{who}: measure returned shape {y.shape}, expected ({n_rows},)")
    if np.isinf(y).any():
        raise OracleError(
            f"{who}: measure returned {int(np.isinf(y).sum())} infinite value(s); "
            "report a point that could not be measured as NaN"
        )
    return y


def sample_variable(var: Variable, size: int | tuple[int, ...], rng: np.random.Generator) -> np.ndarray:
    """Draw values of one variable from its declared distribution."""
    return _signed(var, _at_quantiles(var, rng.random(size=size)), rng)


def spread_variable(var: Variable, n: int, rng: np.random.Generator) -> np.ndarray:
    """``n`` values of one variable for ``n`` trials, in random order: the two ends of its
    declared support and, between them, one value from each of ``n - 2`` equally likely parts
    of its distribution (one random value when ``n`` is 1). Held values then span the support:
    a law's form shows where a variable's effect is strongest, often at an end (a thin lens's
    pole, as the object nears the focus), and random draws reach there rarely; a set of trials
    that saw only the middle could not tell the law from a smooth near-fit under noise."""
    if n == 1:
        u = rng.random(1)
    else:
        u = np.concatenate([[0.0, np.nextafter(1.0, 0.0)], (rng.permutation(n - 2) + rng.random(n - 2)) / (n - 2)])
    return _signed(var, _at_quantiles(var, rng.permutation(u)), rng)


def _at_quantiles(var: Variable, u: np.ndarray) -> np.ndarray:
    """The magnitudes at quantiles ``u`` (in [0, 1)) of the variable's distribution."""
    if var.dist == "loguniform":
        lo, hi = math.log10(var.low), math.log10(var.high)
        return np.asarray(10.0 ** (lo + (hi - lo) * u), dtype=float)
    if var.dist == "integer_uniform":
        lo, hi = math.ceil(var.low), math.ceil(var.high)
        return np.asarray(lo + np.floor((hi - lo) * u), dtype=float)
    return np.asarray(var.low + (var.high - var.low) * u, dtype=float)


def _signed(var: Variable, mag: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """``mag`` with each value negated with probability 1/2 if the variable may be negative."""
    if var.only_positive:
        return mag
    return np.where(rng.random(size=mag.shape) < 0.5, -mag, mag)


def design_trials(
    spec: OracleSpec,
    controlled: Iterable[int],
    n_trials: int,
    n_points: int,
    rng: np.random.Generator,
) -> np.ndarray:
    """Set points for K control-variable trials.

    Each trial holds every controlled variable at a value of its own (the K values spread over
    the support: :func:`spread_variable`) for its ``n_points`` rows, and draws fresh values for
    every free variable.

    Returns
    -------
    X : ndarray of shape (n_trials, n_points, n_vars)
    """
    held = sorted(set(int(i) for i in controlled))
    if any(i < 0 or i >= spec.n_vars for i in held):
        raise ConfigError(f"controlled variables {held} out of range for {spec.n_vars} variables")
    X = np.empty((n_trials, n_points, spec.n_vars))
    for j, var in enumerate(spec.variables):
        if j in held:
            X[:, :, j] = spread_variable(var, n_trials, rng)[:, None]
        else:
            X[:, :, j] = sample_variable(var, (n_trials, n_points), rng)
    return X


def design_points(spec: OracleSpec, n_points: int, rng: np.random.Generator) -> np.ndarray:
    """``n_points`` set points with no variable held, shape (n_points, n_vars)."""
    return design_trials(spec, (), 1, n_points, rng)[0]


def edge_points(spec: OracleSpec, n_points: int, rng: np.random.Generator) -> np.ndarray:
    """``n_points`` set points, shape (n_points, n_vars), with each variable at one end of its
    support half the time (either end alike) and drawn from its distribution otherwise: where a
    law's constants often show most (a logarithm over ten decades of a uniform variable shows
    its slope at the lower end, which uniform draws almost never reach)."""
    X = design_points(spec, n_points, rng)
    for j, var in enumerate(spec.variables):
        u = rng.random(n_points)
        ends = _signed(var, _at_quantiles(var, np.where(u < 0.25, 0.0, np.nextafter(1.0, 0.0))), rng)
        X[:, j] = np.where((u < 0.25) | (u >= 0.75), ends, X[:, j])
    return X
