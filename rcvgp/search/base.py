"""Value objects shared by every search: settings, progress reports, candidates and results.

A :class:`SearchResult` is also the answer to work with: its law (or any entry of its front) as
sympy, as LaTeX, and evaluated on new points with :meth:`SearchResult.predict`; it is rebuilt from
a ``result.json`` by :meth:`SearchResult.from_dict`.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from rcvgp.errors import ConfigError
from rcvgp.noisefloor import NoiseModel

__all__ = [
    "METHODS", "OPTIMIZERS", "SELECTIONS", "SearchConfig", "Progress", "ScheduleStats", "Candidate", "SearchResult",
    "ProgressCallback", "TestPoints", "rounds_not_run",
]

#: The searches, by the names experiment files and the CLI use.
METHODS = ("racing", "cvgp", "cvgp-all", "gp")

#: Constant optimisers, by the names settings use (scipy.optimize under the hood).
OPTIMIZERS = ("LM", "BFGS", "CG", "Nelder-Mead", "L-BFGS-B", "basinhopping", "shgo", "dual_annealing", "direct")

#: How the law is chosen from the Pareto front (:mod:`rcvgp.search.choice`).
SELECTIONS = ("parsimonious", "accuracy")


@dataclass(frozen=True)
class SearchConfig:
    """Settings of a search; the defaults are the paper's, except the optimiser (LM, not BFGS).

    ``operators`` empty means "the oracle's hint, else the default set". ``noise_std`` is the
    standard deviation of a reading in y's units if known (0: noiseless); ``None`` has the search
    estimate it from one batch of replicate readings. Budgets of ``None`` are unlimited; a spent
    budget ends the search cleanly with the best expression so far. ``workers`` > 1 fits the
    constants of each generation's trees in that many processes; a seed gives the same result
    whatever their number.
    """

    operators: tuple[str, ...] = ()
    population: int = 100
    generations: int = 100  # in total: half to the last round, the rest evenly over the others
    tournament: int = 2
    hall_of_fame: int = 25
    batch: int = 256  # m: points per control-variable trial
    n_trials: int = 5  # K, per controlled set; one trial when no variable is held
    p_mutate: float = 0.5
    p_mate: float = 0.5
    eps_loss: float = 1e-3  # FreezeEquation: every trial's NMSE <= this (or the noise floor) freezes it
    eps_const: float = 1e-3  # a constant whose relative spread over trials is <= this is standalone
    optimizer: str = "LM"  # the paper's is BFGS; LM fits exact trees to rounding (benchmarks/fit_bench.py)
    fit_iterations: int = 20  # optimiser iterations per fit inside GP; the final refit gets 10x
    max_size: int = 64  # most nodes GP's edits build (with max_depth); the expansions' sums may outgrow both
    max_depth: int = 12
    n_validation: int = 256
    n_test: int = 256
    refit_points: int = 1024  # more points for the final refit when readings are noisy (as the budget allows)
    precision: float = 1e-4  # noisy readings: the law's constants are measured to this relative standard error,
    precision_points: int = 32768  # with at most this many more points (as the budget allows)
    noise_std: float | None = None  # std of a reading in y's units; None: estimate from replicates
    selection: str = "parsimonious"  # or "accuracy": how the law is chosen from the front
    workers: int = 1  # processes that fit a generation's constants at once (1: this one alone); same result
    restarts: int = 2  # racing: times the rounds may start again from new random trees while no fit reaches the floor
    max_points: int | None = None
    max_requests: int | None = None
    max_seconds: float | None = None

    def __post_init__(self) -> None:
        if self.operators:
            from rcvgp.operators import resolve_operators  # the operator table holds sympy: load it when needed

            object.__setattr__(self, "operators", tuple(resolve_operators(self.operators)))
        positive_ints = ("population", "generations", "tournament", "hall_of_fame", "batch", "n_trials",
                         "max_size", "max_depth", "n_validation", "n_test", "fit_iterations", "workers")
        for name in positive_ints:
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ConfigError(f"search setting `{name}` must be an integer >= 1, got {value!r}")
        for name in ("refit_points", "precision_points", "restarts"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise ConfigError(f"search setting `{name}` must be an integer >= 0, got {value!r}")
        if isinstance(self.precision, bool) or not isinstance(self.precision, (int, float)) or not (
                0 < self.precision < math.inf):
            raise ConfigError(f"search setting `precision` must be a relative standard error > 0, e.g. 1e-3; "
                              f"got {self.precision!r}")
        for name in ("p_mutate", "p_mate"):
            value = getattr(self, name)
            if not isinstance(value, (int, float)) or not 0.0 <= value <= 1.0:
                raise ConfigError(f"search setting `{name}` must be a probability in [0, 1], got {value!r}")
        for name in ("eps_loss", "eps_const"):
            value = getattr(self, name)
            if not isinstance(value, (int, float)) or not value >= 0 or not math.isfinite(value):
                raise ConfigError(f"search setting `{name}` must be a finite number >= 0, got {value!r}")
        if self.noise_std is not None and (
            isinstance(self.noise_std, bool) or not isinstance(self.noise_std, (int, float))
            or not math.isfinite(self.noise_std) or self.noise_std < 0
        ):
            raise ConfigError(
                f"search setting `noise_std` must be a standard deviation >= 0 in y's units, or `auto` "
                f"to estimate it from replicate readings; got {self.noise_std!r}"
            )
        if self.selection not in SELECTIONS:
            raise ConfigError(f"search setting `selection`: {self.selection!r} is not one of {', '.join(SELECTIONS)}")
        if self.optimizer not in OPTIMIZERS:
            import difflib

            close = difflib.get_close_matches(self.optimizer, OPTIMIZERS, n=1)
            hint = f"; did you mean `{close[0]}`?" if close else ""
            raise ConfigError(
                f"search setting `optimizer`: unknown optimizer {self.optimizer!r}{hint} "
                f"(one of {', '.join(OPTIMIZERS)})"
            )
        for name in ("max_points", "max_requests"):
            value = getattr(self, name)
            if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
                raise ConfigError(f"budget `{name}` must be an integer >= 1 or unset, got {value!r}")
        if self.max_seconds is not None and not (
            isinstance(self.max_seconds, (int, float)) and self.max_seconds > 0
        ):
            raise ConfigError(f"budget `max_seconds` must be > 0 or unset, got {self.max_seconds!r}")

    def replace(self, **changes: Any) -> SearchConfig:
        """A copy with some settings changed (validated again)."""
        data = asdict(self)
        data.update(changes)
        return SearchConfig(**data)


def rounds_not_run(started: int, planned: int) -> list[int]:
    """The rounds (1-based) after the last one started: those a stop left out. For cvgp-all,
    whose branches run the rounds again and again, the rounds of the branch it was in."""
    return list(range(started + 1, planned + 1))


@dataclass(frozen=True)
class ScheduleStats:
    """The part of a population that came by one schedule, after a generation: the race as it
    stands."""

    schedule: tuple[tuple[str, ...], ...]  # the held variables of each round so far, by name
    population: int  # expressions of the population with this schedule
    best_loss: float  # the lowest training NMSE among them (mean over trials)


@dataclass(frozen=True)
class Progress:
    """A report the search makes as it goes (after each generation)."""

    method: str
    round: int  # 1-based; 0 while building the initial pools
    n_rounds: int
    generation: int
    best_nmse: float  # best training NMSE so far in this round (mean over its trials)
    points: int
    requests: int
    elapsed: float
    message: str = ""  # a note to show with this report, e.g. why the search stops
    #: the population by schedule after this generation, in the order of their held sets
    #: (empty on a report that carries a message)
    schedules: tuple[ScheduleStats, ...] = ()


#: Called with each Progress; returning True asks the search to stop with the best so far.
ProgressCallback = Callable[[Progress], "bool | None"]


@dataclass(frozen=True)
class Candidate:
    """One discovered expression in the oracle's units, with the schedule of controlled sets
    that led to it."""

    expression: str  # plain text
    latex: str
    sympy_expr: Any  # a sympy.Expr over the oracle's variable names
    schedule: tuple[tuple[str, ...], ...]  # controlled variable names per round, last is ()
    complexity: int  # nodes in its tree
    loss: float  # NMSE on the data it was fitted to (no variable held), weighted as the search weighs it
    nmse_validation: float
    chosen: bool = False  # the law was chosen from this entry of the front

    def to_dict(self) -> dict[str, Any]:
        """The candidate as JSON-ready data; ``sympy`` is its expression in full precision
        (``sympy.srepr``), where ``expression`` and ``latex`` round constants to 6 digits."""
        return {
            "complexity": self.complexity,
            "loss": self.loss,
            "nmse_validation": self.nmse_validation,
            "expression": self.expression,
            "latex": self.latex,
            "sympy": _srepr(self.sympy_expr),
            "schedule": [list(s) for s in self.schedule],
            "chosen": self.chosen,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], variables: Sequence[str] = ()) -> Candidate:
        """A candidate from :meth:`to_dict`'s data; its sympy form is read from ``sympy``, else
        from ``expression`` over ``variables``.

        Reading an expression evaluates its text (as ``sympy.sympify`` does): read only results
        you trust.
        """
        return cls(
            expression=str(data["expression"]),
            latex=str(data.get("latex") or ""),
            sympy_expr=_read_sympy(data.get("sympy"), str(data["expression"]), variables),
            schedule=tuple(tuple(str(v) for v in held) for held in data.get("schedule") or ()),
            complexity=int(data.get("complexity") or 0),
            loss=_float(data.get("loss")),
            nmse_validation=_float(data.get("nmse_validation")),
            chosen=bool(data.get("chosen", False)),
        )


@dataclass(frozen=True)
class TestPoints:
    """The fresh test points the law was scored on, in the oracle's units.

    Attributes
    ----------
    X : ndarray of shape (n_test, n_vars)
        The set points reached.
    y : ndarray of shape (n_test,)
        The readings (NaN where one failed).
    predicted : ndarray of shape (n_test,)
        The law's value at ``X``.
    """

    X: np.ndarray
    y: np.ndarray
    predicted: np.ndarray


@dataclass(frozen=True)
class SearchResult:
    """What a search returns: the law, chosen from the Pareto front and made readable, scored
    once on fresh test data; the front itself, simplest first."""

    method: str
    seed: int
    best: Candidate
    equations: tuple[Candidate, ...]
    test_metrics: dict[str, float]  # mse, nmse, rmse, nrmse, r2 on n_test fresh points
    points_measured: int
    requests: int
    points_failed: int  # points the oracle returned as NaN
    wall_seconds: float
    stopped: str  # "completed", "budget", "time", "interrupted"
    config: SearchConfig = field(default_factory=SearchConfig)
    noise: NoiseModel = field(default_factory=NoiseModel)  # in y's units
    rounds: tuple[int, int] = (0, 0)  # rounds started (the last may have been cut short), planned
    restarts: int = 0  # times the rounds started again because no fit reached the noise floor
    #: the points ``test_metrics`` were computed on (not in :meth:`to_dict`: arrays, for the report)
    test_points: TestPoints | None = field(default=None, compare=False, repr=False)
    variables: tuple[str, ...] = ()  # the oracle's variable names: the columns of X, in order
    points_replaced: int = 0  # wild readings replaced by a second reading at their set points
    #: the largest relative standard error of the law's constants as fitted, from the noise (None
    #: without noise, or when the law has no constant the data tell from zero)
    constants_error: float | None = None
    #: each float of the law as written, with its standard error from the noise (inf where the
    #: readings do not pin it); None without noise
    constants: tuple[tuple[float, float], ...] | None = None
    #: whether the law fits fresh (validation) readings as well as their noise lets any law fit
    #: them -- noiseless, to rounding; False: an approximation, or a law short of a term the
    #: readings show; None: not judged (a result of an older version)
    fits_noise: bool | None = None

    @property
    def rounds_not_run(self) -> list[int]:
        """The rounds (1-based) a stop left out: never started."""
        return rounds_not_run(*self.rounds)

    @property
    def nmse_test(self) -> float:
        return self.test_metrics["nmse"]

    @property
    def law(self) -> str:
        """The law, as text (constants rounded to 6 digits; :meth:`sympy` has them in full)."""
        return self.best.expression

    def sympy(self, index: int | None = None) -> Any:
        """The law as a sympy expression over the variables' names, or with ``index`` the entry
        of :attr:`equations` (the front, simplest first) of that index."""
        return self._entry(index).sympy_expr

    def latex(self, index: int | None = None) -> str:
        """The law (or the front's entry ``index``) in LaTeX."""
        return self._entry(index).latex

    def predict(self, X: Any, index: int | None = None) -> np.ndarray:
        """The law (or the front's entry ``index``) evaluated on new points.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_vars), or mapping of name to array-like
            The variables by position (the columns in :attr:`variables`' order), or by name (a
            dict, a numpy structured array or a pandas DataFrame, one entry per variable; the
            arrays broadcast together, e.g. the grids of ``numpy.meshgrid``).
        index : int, optional
            An entry of :attr:`equations` instead of the law.

        Returns
        -------
        y : ndarray of shape (n_samples,), or the arrays' broadcast shape for a mapping
            NaN where the expression is undefined.

        Raises
        ------
        ConfigError
            For a wrong number of columns, an unknown or a missing name, or an index out of range.
        """
        import sympy

        from rcvgp.search.choice import predict

        expr = self._entry(index).sympy_expr
        # The expression's own symbols: they carry assumptions (positive=True), and lambdify
        # matches symbols exactly, not by name.
        own = {str(s): s for s in getattr(expr, "free_symbols", ())}
        names = self.variables or tuple(sorted(own))
        columns, shape = _columns(X, names)
        symbols = [own.get(name, sympy.Symbol(name)) for name in names]
        return predict(expr, symbols, columns).reshape(shape)

    def _entry(self, index: int | None) -> Candidate:
        if index is None:
            return self.best
        n = len(self.equations)
        if isinstance(index, bool) or not isinstance(index, (int, np.integer)) or not -n <= index < n:
            raise ConfigError(f"index {index!r}: the front has {n} equations (0 to {n - 1}, simplest first); "
                              "leave it out for the law")
        return self.equations[int(index)]

    def to_dict(self) -> dict[str, Any]:
        return {
            "method": self.method,
            "seed": self.seed,
            "expression": self.best.expression,
            "latex": self.best.latex,
            "schedule": [list(s) for s in self.best.schedule],
            "complexity": self.best.complexity,
            "loss": self.best.loss,
            "nmse_validation": self.best.nmse_validation,
            "variables": list(self.variables),
            "nmse_test": self.test_metrics["nmse"],
            "test_metrics": dict(self.test_metrics),
            "points_measured": self.points_measured,
            "requests": self.requests,
            "points_failed": self.points_failed,
            "points_replaced": self.points_replaced,
            "wall_seconds": self.wall_seconds,
            "stopped": self.stopped,
            "rounds_run": self.rounds[0],
            "rounds_not_run": self.rounds_not_run,
            "restarts": self.restarts,
            "noise": self.noise.to_dict(),
            "fits_noise": self.fits_noise,
            "constants_error": self.constants_error,
            "constants": None if self.constants is None else [
                {"value": v, "standard_error": e if math.isfinite(e) else None} for v, e in self.constants],
            "equations": [c.to_dict() for c in self.equations],
            "config": asdict(self.config),
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> SearchResult:
        """The result :meth:`to_dict` described (as ``result.json`` holds it, where ``sympy`` is
        the law in full precision); keys it does not know are left out.

        Reading expressions evaluates their text (as ``sympy.sympify`` does): read only results
        you trust.

        Raises
        ------
        ConfigError
            When a key it needs is missing or does not hold what it should.
        """
        try:
            names = tuple(str(v) for v in data.get("variables") or ())
            law = {k: data.get(k) for k in ("latex", "sympy", "schedule", "complexity", "loss", "nmse_validation")}
            best = Candidate.from_dict({"expression": data["expression"], "chosen": True, **law}, names)
            equations = tuple(Candidate.from_dict(e, names) for e in data.get("equations") or ())
            known = {f.name for f in dataclasses.fields(SearchConfig)}
            settings: dict[str, Any] = {k: tuple(v) if k == "operators" else v
                                        for k, v in (data.get("config") or {}).items() if k in known}
            done = int(data.get("rounds_run") or 0)
            return cls(
                method=str(data["method"]),
                seed=int(data["seed"]),
                best=best,
                equations=equations,
                test_metrics={str(k): _float(v) for k, v in (data.get("test_metrics") or {}).items()},
                points_measured=int(data.get("points_measured") or 0),
                requests=int(data.get("requests") or 0),
                points_failed=int(data.get("points_failed") or 0),
                points_replaced=int(data.get("points_replaced") or 0),
                wall_seconds=_float(data.get("wall_seconds")),
                stopped=str(data.get("stopped")),
                config=SearchConfig(**settings),
                noise=NoiseModel.from_dict(data.get("noise") or {}),
                rounds=(done, done + len(data.get("rounds_not_run") or ())),
                restarts=int(data.get("restarts") or 0),
                variables=names,
                fits_noise=None if data.get("fits_noise") is None else bool(data["fits_noise"]),
                constants_error=None if data.get("constants_error") is None else float(data["constants_error"]),
                constants=None if data.get("constants") is None else tuple(
                    (float(c["value"]), math.inf if c.get("standard_error") is None else float(c["standard_error"]))
                    for c in data["constants"]),
            )
        except KeyError as exc:
            raise ConfigError(f"`{exc.args[0]}` is missing") from None
        except (TypeError, ValueError, AttributeError) as exc:
            if isinstance(exc, ConfigError):
                raise
            raise ConfigError(f"not a search result: {exc}") from exc


def _float(value: Any) -> float:
    """A number from JSON, where a non-finite one was written as null."""
    return math.nan if value is None else float(value)


def _srepr(expr: Any) -> str | None:
    if expr is None:
        return None
    import sympy

    return str(sympy.srepr(expr))


def _read_sympy(srepr: Any, text: str, variables: Sequence[str]) -> Any:
    """An expression from its ``srepr`` (exact, with the symbols' assumptions), else from its
    text over ``variables`` (names such as ``E``, ``I`` or ``gamma`` stay variables)."""
    import sympy

    try:
        if srepr:
            return sympy.sympify(str(srepr))
        return sympy.sympify(text, locals={name: sympy.Symbol(name) for name in variables})
    except (sympy.SympifyError, SyntaxError, TypeError, ValueError) as exc:
        raise ConfigError(f"cannot read the expression {str(srepr or text)[:80]!r}: {exc}") from exc


def _columns(X: Any, names: Sequence[str]) -> tuple[np.ndarray, tuple[int, ...]]:
    """``X`` as one column per variable, in ``names``' order, and the shape of the answer."""
    n = len(names)
    listed = ", ".join(names)
    fields = getattr(getattr(X, "dtype", None), "names", None)
    if isinstance(X, Mapping) or fields or hasattr(X, "columns"):
        keys = [str(k) for k in (fields or (X.columns if hasattr(X, "columns") else X.keys()))]
        unknown = [k for k in keys if k not in names]
        if unknown:
            raise ConfigError(f"predict: unknown variable {unknown[0]!r}; the variables are {listed}")
        missing = [k for k in names if k not in keys]
        if missing:
            raise ConfigError(f"predict: variable {missing[0]!r} is missing; give each of {listed}")
        try:
            values = np.broadcast_arrays(*(np.asarray(X[k], dtype=float) for k in names))
        except (TypeError, ValueError) as exc:
            raise ConfigError(f"predict: the values of {listed} must be numbers of shapes that broadcast "
                              f"together ({exc})") from None
        shape = values[0].shape
        return np.stack([v.reshape(-1) for v in values], axis=1), shape
    try:
        arr = np.asarray(X, dtype=float)
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"predict: X must hold numbers ({exc})") from None
    if arr.ndim == 1 and n == 1:
        arr = arr[:, None]
    if arr.ndim != 2:
        raise ConfigError(f"predict: X must be 2-D, of shape (n_samples, {n}) with columns {listed}, or a mapping "
                          f"of variable name to values; got shape {arr.shape}")
    if arr.shape[1] != n:
        raise ConfigError(f"predict: X has {arr.shape[1]} column{'s' if arr.shape[1] != 1 else ''}; the "
                          f"variables are {n}: {listed}")
    return arr, arr.shape[:1]
