"""Value objects shared by every search: settings, progress reports, candidates and results."""

from __future__ import annotations

import math
from collections.abc import Callable
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
    budget ends the search cleanly with the best expression so far.
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
    max_size: int = 64  # most nodes in one expression
    max_depth: int = 12
    n_validation: int = 256
    n_test: int = 256
    refit_points: int = 1024  # more points for the final refit when readings are noisy (as the budget allows)
    noise_std: float | None = None  # std of a reading in y's units; None: estimate from replicates
    selection: str = "parsimonious"  # or "accuracy": how the law is chosen from the front
    max_points: int | None = None
    max_requests: int | None = None
    max_seconds: float | None = None

    def __post_init__(self) -> None:
        if self.operators:
            from rcvgp.operators import resolve_operators  # the operator table holds sympy: load it when needed

            object.__setattr__(self, "operators", tuple(resolve_operators(self.operators)))
        positive_ints = ("population", "generations", "tournament", "hall_of_fame", "batch", "n_trials",
                         "max_size", "max_depth", "n_validation", "n_test", "fit_iterations")
        for name in positive_ints:
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ConfigError(f"search setting `{name}` must be an integer >= 1, got {value!r}")
        if isinstance(self.refit_points, bool) or not isinstance(self.refit_points, int) or self.refit_points < 0:
            raise ConfigError(f"search setting `refit_points` must be an integer >= 0, got {self.refit_points!r}")
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
    best_nmse: float  # best validation-free training NMSE seen so far (mean over trials)
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
    loss: float  # NMSE on the data it was fitted to (no variable held)
    nmse_validation: float
    chosen: bool = False  # the law was chosen from this entry of the front

    def to_dict(self) -> dict[str, Any]:
        return {
            "complexity": self.complexity,
            "loss": self.loss,
            "nmse_validation": self.nmse_validation,
            "expression": self.expression,
            "latex": self.latex,
            "schedule": [list(s) for s in self.schedule],
            "chosen": self.chosen,
        }


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
    #: the points ``test_metrics`` were computed on (not in :meth:`to_dict`: arrays, for the report)
    test_points: TestPoints | None = field(default=None, compare=False, repr=False)

    @property
    def rounds_not_run(self) -> list[int]:
        """The rounds (1-based) a stop left out: never started."""
        return rounds_not_run(*self.rounds)

    @property
    def nmse_test(self) -> float:
        return self.test_metrics["nmse"]

    def to_dict(self) -> dict[str, Any]:
        return {
            "method": self.method,
            "seed": self.seed,
            "expression": self.best.expression,
            "latex": self.best.latex,
            "schedule": [list(s) for s in self.best.schedule],
            "nmse_test": self.test_metrics["nmse"],
            "test_metrics": dict(self.test_metrics),
            "points_measured": self.points_measured,
            "requests": self.requests,
            "points_failed": self.points_failed,
            "wall_seconds": self.wall_seconds,
            "stopped": self.stopped,
            "rounds_run": self.rounds[0],
            "rounds_not_run": self.rounds_not_run,
            "noise": self.noise.to_dict(),
            "equations": [c.to_dict() for c in self.equations],
            "config": asdict(self.config),
        }
