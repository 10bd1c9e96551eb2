"""The machinery every search shares: the metered lab, the fitness cache, the GP generation loop,
FreezeEquation, and the final choice on validation data scored once on test data.

A search is a :class:`Run`: it owns the oracle (through a :class:`Lab` that designs trials,
counts points and requests, and enforces the budget), the random generator, the hall of fame
and the stop rules. The methods in :mod:`rcvgp.search.racing` drive it.
"""

from __future__ import annotations

import concurrent.futures as cf
import dataclasses
import itertools
import math
import sys
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np
import sympy

from rcvgp.constants import (
    STOCHASTIC_OPTIMIZERS, FitResult, Trials, fit_constants, linear_constants, standard_errors,
)
from rcvgp.design import Design, precision_design
from rcvgp.errors import BudgetExhausted, ConfigError, OracleError
from rcvgp.evaluate import evaluate, evaluate_with_grad
from rcvgp.gp import (
    Grammar, crossover, deletions, hoists, mutate, random_term, random_tree, simplify_tree, tournament,
)
from rcvgp.metrics import domain_symbol, regression_metrics, round_floats
from rcvgp.noisefloor import (
    EXACT_LOSS, Z, NoiseModel, chance_rise, consistent, estimate_noise, not_worse, suspects, unlikely_sets, wild,
)
from rcvgp.operators import DEFAULT_OPERATORS, resolve_operators
from rcvgp.oracle import DataOracle, OracleSpec, Variable, check_reply, design_points, design_trials, edge_points
from rcvgp.search.base import (
    Candidate, Progress, ProgressCallback, ScheduleStats, SearchConfig, SearchResult, TestPoints, rounds_not_run,
)
from rcvgp.search.choice import (
    SAME_FIT, Fitted, best_of, choose, collected, completed_squares, constant_errors, drop_negligible_terms, expanded,
    factored_polynomials, folded_exponentials, front_of, joined_phases, merged_logs, merged_roots, normalized_quotients,
    over_common_denominators, pareto_front, predict, refitted, shared_coefficients, shortened_series, snap_constants,
    summed_angles, tidy, with_floats_refitted, written_digits,
)
from rcvgp.search.fitting import FitJob, Fitter
from rcvgp.tree import CONST_TOKEN, Expr, arity, is_var, reopened, subtree_end

__all__ = ["REPEATS", "Lab", "Individual", "Run", "StopSearch", "unit_scale"]

#: Generations a round goes on after its best tree fits to the noise floor without getting smaller.
_FLOOR_PATIENCE = 3
#: How many of a round's best frozen trees :meth:`Run.expansions` grows (and of the best kinds of
#: piece, grown again), and in at most how many steps.
_EXPANDED = 3
_EXPANSION_STEPS = 2
#: The NMSE below which fits of a piece to an open constant's samples are all exact (rounding).
_READ_EXACT = 1e-12
#: A round's expansions join its population up to one in this many of its size.
_EXPANSION_SHARE = 10
#: Pieces a sum chosen by projection (:func:`_pursued`) may hold per open constant: a law's
#: coefficient has a few; eight of them fitted Shannon's log(1000*P + 1) to 1e-14 as a series.
_PURSUED = 2
#: Terms the law's final readings may show it lacks (:meth:`Run._with_terms`): a few; more would
#: be a series.
_TERMS = 3
#: Times the final data are read again where a fit freed of wild readings shows more.
_REREADS = 3
#: Candidate set points (of each kind) the precision points are chosen from; more for a law of
#: many constants, 64 a constant.
_CANDIDATES = 2048
#: Seeds the replicate readings' own random stream, beside the run's seed.
_REPLICATE_STREAM = 0x4E015E
#: A tree with a subtree deleted gets its full fit only if its screen reaches this loss (or
#: twice the noise floor): a deletion that keeps an exact fit exact is near-exact from the
#: parent's constants already.
_PRUNE_SCREEN = 1e-6
#: FreezeEquation's factoring: the trials' curves must be offsets and scales of one curve to
#: within this fraction of their variance (exact fits are ~1e-30; a missing term is ~1e-3).
_AFFINE_TOL = 1e-10


class StopSearch(Exception):
    """Raised inside a run to end it early with the best so far; ``reason`` goes in the result."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


#: Replicate readings per set point when the search estimates the noise, at batch / REPEATS
#: set points (two at least): the estimate costs about one batch of points.
REPEATS = 8


def unit_scale(magnitude: float) -> float:
    """The power of ten nearest ``magnitude`` on a log scale (1 for zero or non-finite): the
    search works in quantities divided by it, so that what it finds does not depend on their
    units. A power of ten, so that a quantity rescaled by one gets the same numbers, and catalog
    ranges such as [0.1, 10] are left as they are; half-decades round up, whatever the rounding
    of the logarithm (3.16 and 3162 must both round up, or both down)."""
    if not (math.isfinite(magnitude) and magnitude > 0):
        return 1.0
    return 10.0 ** math.floor(math.log10(magnitude) + 0.5 + 1e-9)


def _typical(var: Variable) -> float:
    """A variable's typical magnitude: the geometric mean of its limits' magnitudes, or half the
    upper one when the lower is 0 (an angle in [0, 2 pi] stays in radians)."""
    return 10.0 ** ((math.log10(var.low) + math.log10(var.high)) / 2) if var.low > 0 else var.high / 2


class Lab:
    """The search's side of the oracle: designs trials, measures them once per controlled set and
    round, counts points and requests, and keeps the budget.

    It also knows the measurement noise (estimated from one batch of replicate readings before
    anything else is measured, unless the config declares it), and its trials carry the noise
    floor. The search sees every variable divided by :func:`unit_scale` of its typical magnitude
    (``x_scale``): a law in other units of its variables is the same search. y is left in its
    units: the constants that scale it are fitted by least squares whatever its scale, and
    dividing it by a power of ten cost exact recoveries of laws whose terms have coefficient 1
    (livermore2-n4, seed 0: 9 instead of 14 of 25; benchmarks/history.md, "The noise-aware engine").

    ``reserve`` points of the budget are kept for the final fit, validation and test sets, so a
    spent budget still ends with a scored result.
    """

    def __init__(
        self,
        oracle: DataOracle,
        config: SearchConfig,
        rng: np.random.Generator,
        holds_variables: bool = True,
        replicate_rng: np.random.Generator | None = None,
    ) -> None:
        self.oracle = oracle
        self.spec: OracleSpec = oracle.describe()
        self.config = config
        self.rng = rng
        # Replicates come from a stream of their own, so that the search's own draws are the same
        # whether the noise is estimated or declared.
        self.replicate_rng = replicate_rng if replicate_rng is not None else np.random.default_rng(0)
        self.points = 0
        self.requests = 0
        self.failed = 0
        self.replaced = 0  # readings a second reading showed wild
        self.revision = 0  # how many times readings of trials measured already were replaced
        self.reserve = config.batch + config.n_validation + config.n_test
        # A count (integer_uniform) has no unit to change.
        self.x_scale = np.array([1.0 if v.dist == "integer_uniform" else unit_scale(_typical(v))
                                 for v in self.spec.variables])
        # Set points are drawn in the search's units and sent in the oracle's: a law in other
        # units then gets the very same numbers.
        self.design = dataclasses.replace(
            self.spec, variables=tuple(v.scaled(s) for v, s in zip(self.spec.variables, self.x_scale))
        )
        #: the noise, once known (from the config, or after the replicate readings)
        self.noise: NoiseModel | None = None if config.noise_std is None else NoiseModel(float(config.noise_std))
        self._trials: dict[frozenset[int], Trials] = {}
        # The first request is one set of trials: a single trial if nothing is ever held.
        first = self.n_trials(holds_variables and self.spec.n_vars > 1)
        needed = self.reserve + config.batch * first + self.n_replicates
        requests = math.ceil(self.n_replicates / self.spec.max_rows) + math.ceil(config.batch * first / self.spec.max_rows)
        if config.max_requests is not None and config.max_requests < requests:
            raise ConfigError(
                f"budget `max_requests` = {config.max_requests} is too small: a run needs at least {requests} "
                f"(the noise estimate's replicate readings and the first set of trials, in requests of at most "
                f"{self.spec.max_rows} rows; the final fit, validation and test do not count)"
            )
        if config.max_points is not None and config.max_points < needed:
            trials = f"one set of {first} trials" if first > 1 else "one trial"
            replicates = f", {self.n_replicates} replicate readings to estimate the noise" if self.n_replicates else ""
            raise ConfigError(
                f"budget `max_points` = {config.max_points} is too small: a run needs at least "
                f"{needed} ({trials} of {config.batch} points{replicates}, plus {self.reserve} for the "
                f"final fit, validation and test)"
            )

    @property
    def n_replicates(self) -> int:
        """Readings the noise estimate takes (0 when the config declares the noise)."""
        return 0 if self.config.noise_std is not None else max(2, self.config.batch // REPEATS) * REPEATS

    def _start(self) -> None:
        """Before the first measurement the search uses: estimate the noise from replicate
        readings, unless declared."""
        if self.noise is None:
            sets = self.n_replicates // REPEATS
            X = np.repeat(design_points(self.design, sets, self.replicate_rng), REPEATS, axis=0)
            _, y = self.measure(X)
            y = y.reshape(sets, REPEATS)
            self.noise = estimate_noise(y)
            # A set point whose readings scatter far beyond the others' holds a wild reading (a
            # loose contact), which would inflate the noise a hundredfold: it is read again.
            for _ in range(3):  # a set read again may hold a wild reading too
                again = unlikely_sets(y, self.noise)
                if not again.any() or again.sum() * REPEATS > self.room():
                    break
                X_again = X.reshape(sets, REPEATS, -1)[again].reshape(-1, X.shape[1])
                y[again] = self.measure(X_again)[1].reshape(-1, REPEATS)
                self.replaced += int(again.sum()) * REPEATS
                self.noise = estimate_noise(y)
            if not self.noise.dof:
                raise OracleError(
                    f"{self.spec.name}: no set point of the noise estimate gave two readings "
                    f"({np.isnan(y).sum()} of {len(y)} readings failed); check the rig, or declare the "
                    "noise with the search setting `noise_std`"
                )

    def _with_noise(self, X: np.ndarray, y: np.ndarray, controlled: frozenset[int] = frozenset()) -> Trials:
        """Trials (or one trial, for X of shape (m, n_vars)) carrying the noise of their readings."""
        assert self.noise is not None  # _start has measured it
        if X.ndim == 2:
            X, y = X[None], y[None]
        return Trials(X, y, controlled, self._noise_std(y), self.noise.uncertainty, self.weighted)

    def _noise_std(self, y: np.ndarray) -> np.ndarray | None:
        """The noise of each of readings ``y``; None without noise."""
        assert self.noise is not None  # _start has measured it
        return None if self.noise.zero else self.noise.std(y)

    @property
    def weighted(self) -> bool:
        """Whether fits weigh each reading by the inverse of its noise: where the noise has a part
        proportional to the reading. A deterministic rig's rounding alone is not weighted: its
        steps are finest on readings near zero, which then outweigh the rest a millionfold and
        leave no fit of a zero-crossing law in reach (a damped oscillator read to four digits
        came back as a function of its damping alone, NMSE 1)."""
        return self.noise is not None and self.noise.relative > 0

    def new_round(self) -> None:
        """Forget this round's trials: the next request for a controlled set measures anew."""
        self._trials.clear()

    def n_trials(self, holding: bool) -> int:
        """Trials per set: K while a variable is held; one with none held, where K trials would
        be K samples of one experiment (one fits about as well in 13-25% less time,
        benchmarks/history.md)."""
        return self.config.n_trials if holding else 1

    def trials(self, controlled: frozenset[int]) -> Trials:
        """The K trials of this round for a controlled set (one if no variable is held), measured
        on first use, in the search's units."""
        found = self._trials.get(controlled)
        if found is None:
            self._start()
            cfg = self.config
            X = design_trials(self.design, controlled, self.n_trials(bool(controlled)), cfg.batch, self.rng)
            flat, y = self.measure(X.reshape(-1, self.spec.n_vars))
            found = self._with_noise(flat.reshape(X.shape), y.reshape(X.shape[:2]), controlled)
            self._trials[controlled] = found
        return found

    def cached_trials(self, controlled: frozenset[int]) -> Trials | None:
        """This round's trials of a controlled set if they were measured, else None."""
        return self._trials.get(controlled)

    def fresh_points(self, n: int, reserved: bool = False, rng: np.random.Generator | None = None) -> Trials:
        """``n`` points with no variable held, as one trial in the search's units, drawn with
        ``rng`` (the lab's own if None)."""
        self._start()
        X, y = self.measure(design_points(self.design, n, rng or self.rng), reserved=reserved)
        return self._with_noise(X, y)

    def with_more_points(self, trials: Trials, n: int, where: np.ndarray | None = None) -> Trials:
        """``trials`` (one trial, no variable held) with up to ``n`` points added, as many as the
        budget leaves: the first rows of set points ``where`` (in the search's units), or fresh
        ones from the declared distributions; unchanged when readings are noiseless, where more
        points would not make a constant more precise."""
        assert self.noise is not None  # measured with the first trials
        n = min(n, self.room())
        if self.noise.zero or n <= 0:
            return trials
        more = self.fresh_points(n) if where is None else self._with_noise(*self.measure(where[:n]))
        out = self._with_noise(np.concatenate([trials.X[0], more.X[0]]), np.concatenate([trials.y[0], more.y[0]]))
        out.checked[0, : trials.X.shape[1]] = trials.checked[0]
        out.replaced[0, : trials.X.shape[1]] = trials.replaced[0]
        return out

    def second_readings(self, trials: Trials, prediction: np.ndarray) -> bool:
        """Measure again the readings of ``trials`` that a fit's ``prediction`` (K, m) nominates
        as wild (:func:`~rcvgp.noisefloor.suspects`), and put the repeat in place of each it
        contradicts (:func:`~rcvgp.noisefloor.wild`), in ``trials`` itself; whether any was.

        Least squares takes every reading at its word: one reading of a loose contact among 256
        keeps every fit of its trial off the noise floor, so the round neither freezes nor ends.
        """
        if trials.noise_std is None:
            return False
        nominated = suspects(trials.y - prediction, trials.noise_std, trials.mask, trials.checked, trials.replaced)
        n = int(nominated.sum())
        if not n or n > self.room():
            return False
        trials.checked |= nominated
        reached, again = self.measure(trials.X[nominated])
        again = np.where((reached == trials.X[nominated]).all(axis=1), again, np.nan)  # the same set points only
        replaced = wild(trials.y[nominated], again, trials.noise_std[nominated])
        if not replaced.any():
            return False
        self.replaced += int(replaced.sum())
        self.revision += 1
        y = trials.y.copy()
        y[nominated] = np.where(replaced, again, y[nominated])
        trials.replaced[nominated] = replaced
        trials.reread(y, self._noise_std(y))
        return True

    def reweighted(self, trials: Trials, prediction: np.ndarray) -> Trials:
        """``trials`` with each reading's noise taken at a law's ``prediction`` (K, m) where it
        is finite, not at the reading itself; unchanged unless fits are :attr:`weighted`.

        Where the noise grows with the reading, a weight from the noisy reading favours the
        readings that came out low, and pulls a law's scale down by about ``2 * relative**2``
        (-2e-4 at 1% of each reading): two standard errors of a constant measured to 1e-4.
        """
        if not self.weighted:
            return trials
        assert self.noise is not None  # weighted only once measured
        at = np.where(np.isfinite(prediction), prediction, trials.y)
        out = Trials(trials.X, trials.y, trials.controlled, self.noise.std(at), self.noise.uncertainty, True)
        out.checked[:], out.replaced[:] = trials.checked, trials.replaced
        return out

    def room(self) -> int:
        """Points the budgets leave outside the reserve (a large number if none is set)."""
        cfg, left = self.config, [sys.maxsize]
        if cfg.max_points is not None:
            left.append(cfg.max_points - self.reserve - self.points)
        if cfg.max_requests is not None:
            left.append((cfg.max_requests - self.requests) * self.spec.max_rows)
        return min(left)

    def measure(self, X: np.ndarray, reserved: bool = False) -> tuple[np.ndarray, np.ndarray]:
        """Measure set points X given in the search's units, in requests of at most ``max_rows``
        rows; return (X reached, in the search's units: X itself where the oracle reached it,
        y in the oracle's units)."""
        cfg = self.config
        limit = cfg.max_points
        if limit is not None and not reserved:
            limit -= self.reserve
        if limit is not None and self.points + len(X) > limit:
            raise BudgetExhausted(f"the budget of {cfg.max_points} points is spent ({self.points} measured)")
        n_requests = math.ceil(len(X) / self.spec.max_rows)
        if cfg.max_requests is not None and not reserved and self.requests + n_requests > cfg.max_requests:
            raise BudgetExhausted(f"the budget of {cfg.max_requests} requests is spent")
        xs, ys = [], []
        for start in range(0, len(X), self.spec.max_rows):
            chunk = X[start : start + self.spec.max_rows]
            sent = np.column_stack([v.clip(chunk[:, j] * s) for j, (v, s) in enumerate(zip(self.spec.variables,
                                                                                             self.x_scale))])
            reached, y = self.oracle.measure_readback(sent)
            reached = np.asarray(reached, dtype=float)
            if reached.shape != chunk.shape:
                raise OracleError(
                    f"{self.spec.name}: read-back set points have shape {reached.shape}, expected {chunk.shape}"
                )
            reached = np.where(reached == sent, chunk, reached / self.x_scale)
            y = check_reply(y, len(chunk), self.spec.name)
            self.requests += 1
            self.points += len(chunk)
            self.failed += int(np.isnan(y).sum())
            xs.append(reached)
            ys.append(y)
        return np.concatenate(xs), np.concatenate(ys)


@dataclass
class Individual:
    """An expression with the controlled set it is fitted under and the schedule that led there."""

    expr: Expr
    controlled: frozenset[int]
    schedule: tuple[frozenset[int], ...]
    fit: FitResult
    #: The variables that were free when the structure was last frozen: it accounts for them,
    #: so edits (which grow only from summary constants) bring in only the variables freed since.
    settled: frozenset[int] = frozenset()
    #: Frozen by an exact fit with one variable held: its open constants sampled as functions of it.
    samples: _Samples | None = None

    @property
    def fitness(self) -> float:
        f = self.fit.fitness
        return f if f == f else math.inf

    @property
    def score(self) -> float:
        """What selection minimises (in the last round, :func:`_scores` tells the fits at the
        floor apart further): 0 at the noise floor (see :attr:`FitResult.score`), to ten
        significant digits: beyond them two fits differ by rounding alone (one function written
        two ways, or the same readings in other units), which must not decide their order."""
        s = self.fit.score
        return float(f"{s:.10g}") if s == s else math.inf

    @property
    def key(self) -> tuple[tuple[str, ...], frozenset[int]]:
        return self.expr.tokens, self.controlled


class _Samples(NamedTuple):
    """The open constants of a tree an exact fit froze with one variable held: each is then a
    function of that variable alone, and its fitted values over the trials are samples of it."""

    var: int
    at: np.ndarray  # (K,) the variable's held value in each trial
    values: np.ndarray  # (K, n_open) each open constant's fitted value in each trial


class _Growth(NamedTuple):
    """A tree :meth:`Run._grown` made: the piece it grew (and its kind) if grown at one place."""

    ind: Individual
    kind: str | None
    piece: Expr | None
    better: bool  # than the tree it was grown from: only a piece that explains more seeds a step


class _Draft(NamedTuple):
    """An individual before its fit: its tree and place, the data to fit it on, the fitness it
    must reach to get a full fit, and its starting constants."""

    expr: Expr
    controlled: frozenset[int]
    schedule: tuple[frozenset[int], ...]
    trials: Trials
    threshold: float = math.inf
    init: np.ndarray | None = None
    settled: frozenset[int] = frozenset()


#: A tree to refit at the end: its structure, the constants to start from, its schedule.
_Structure = tuple[Expr, "np.ndarray | None", tuple[frozenset[int], ...]]


def _as_structures(pool: Iterable[Individual], seen: set[tuple[str, ...]]) -> list[_Structure]:
    """``pool``'s trees to refit, but those in ``seen`` (which gains the others).

    The constants FreezeEquation fixed are fitted again, now on data with no variable held,
    from their frozen values; trees that differ only in those values are one structure, and
    every node is open to the final cleaning."""
    out: list[_Structure] = []
    for ind in pool:
        start = _median_start(ind.fit.constants)
        tokens, values = reopened(ind.expr.tokens, np.ones(ind.expr.n_consts) if start is None else start)
        if tokens not in seen:
            seen.add(tokens)
            out.append((Expr(tokens), np.array(values) if values else None, ind.schedule))
    return out


def _rank(pop: Iterable[Individual]) -> list[Individual]:
    """Best first, smaller trees first among equals; one of each (tree, controlled set)."""
    seen: dict[tuple[tuple[str, ...], frozenset[int]], Individual] = {}
    for ind in pop:
        if ind.key not in seen or ind.fitness < seen[ind.key].fitness:
            seen[ind.key] = ind
    inds = list(seen.values())
    keys = {id(ind): _rank_key(ind, score) for ind, score in zip(inds, _scores(inds))}
    return sorted(inds, key=lambda ind: keys[id(ind)])


def _scores(pop: Sequence[Individual]) -> list[float]:
    """Each individual's score (:attr:`Individual.score`) among the others fitted to the same
    trials: in the round with no variable held, a fit at the noise floor that the trials tell
    worse than the best of them, each charged for its constants (:class:`rcvgp.noisefloor.Floor`'s
    ``distinct`` and ``per_constant``), is not at the floor, its score the difference.

    The floor's level has to allow for what is not known of the noise (its size, from a few
    hundred replicates; how its sum of squares over a trial scatters), and a term worth a fifth
    of the noise's variance passes under it (livermore2/Vars4-19's x3/x2 at 1%, 1.4 times the
    noise's NMSE on the last round's 256 points). Two fits of the same readings share their
    noise, and neither matters to their difference, which shows the term. Earlier rounds keep
    the floor alone: there a better fit is not a tree that grows better, and ranking by it
    bloated trees that their later rounds could not mend (feynman/bonus.3 and I.50.26 at 1%)."""
    merit = [ind.fitness + ind.expr.n_consts * ind.fit.floor.per_constant for ind in pop]
    best: dict[frozenset[int], float] = {}
    for ind, m in zip(pop, merit):
        best[ind.controlled] = min(best.get(ind.controlled, math.inf), m)
    out = []
    for ind, m in zip(pop, merit):
        rise = m - best[ind.controlled]
        told = not ind.controlled and ind.score == 0 and rise > ind.fit.floor.distinct
        out.append(float(f"{rise:.10g}") if told else ind.score)
    return out


def _rank_key(ind: Individual, score: float | None = None) -> tuple[float, int, int, float]:
    """Lowest score first (``score``, :attr:`Individual.score` unless given); among fits at the
    noise floor (or rounding, with no noise: score 0) the smaller tree, which stops expressions
    from bloating with parts that fit only the noise; among trees as small, :func:`_tie_break`."""
    return ind.score if score is None else score, len(ind.expr), *_tie_break(ind)


def _tie_break(ind: Individual) -> tuple[int, float]:
    """What orders fits as good and trees as small: under noise, fewer constants, then the
    better fit (a thin lens's pole c*x/(c + x) over c + c*exp(c*x), both at the floor at 1%; a
    pendulum's c + c*theta**2 over c + c*cos(c*theta), which fits the noise with its third
    constant); exact fits tie, so that rounding, which differs with the units, decides nothing."""
    if not ind.fitness > EXACT_LOSS:
        return 0, EXACT_LOSS
    return ind.expr.n_consts, ind.fitness


class Run:
    """One search's state and the steps the methods are built from."""

    def __init__(
        self,
        method: str,
        oracle: DataOracle,
        config: SearchConfig,
        seed: int,
        progress: ProgressCallback | None = None,
        executor: cf.Executor | None = None,
    ) -> None:
        self.method = method
        self.config = config
        self.seed = seed
        self.rng = np.random.default_rng(seed)
        self.lab = Lab(oracle, config, self.rng, holds_variables=method != "gp",
                       replicate_rng=np.random.default_rng([seed, _REPLICATE_STREAM]))
        self.spec = self.lab.spec
        self.n_vars = self.spec.n_vars
        ops = config.operators or self.spec.operators or DEFAULT_OPERATORS
        self.operators = resolve_operators(ops)
        self.progress = progress
        self.started = time.perf_counter()
        #: the best expression with no variable held per size (complexity): the Pareto front's source
        self.hall: dict[int, Individual] = {}
        #: the halls of the starts before a restart: each start's front is refitted at the end,
        #: not only the trees that fitted closest in the search (a tree's fit in the search is
        #: short of what the final refit makes of it)
        self.past_halls: list[dict[int, Individual]] = []
        self.current: list[Individual] = []
        self.round = 0
        self.n_rounds = self.n_vars
        self.restarts = 0  # times the rounds started again (racing: :meth:`restart`)
        #: generations the last :meth:`evolve` left unrun, its fits at the noise floor: the
        #: methods give them to the next round
        self.spare_generations = 0
        #: fits the constants, here or on ``executor`` (see :mod:`rcvgp.search.fitting`)
        self.fitter = Fitter(config.optimizer, config.fit_iterations, executor, config.workers)
        self._cache: dict[tuple[tuple[str, ...], int], FitResult] = {}
        self._cache_data: dict[int, Trials] = {}  # keeps cached data alive, so ids stay unique
        self._revision = 0  # the lab's revision of the readings when the population was last fitted
        # The best training NMSE of the round under way, and that round: fits of different rounds
        # are to different trials (a round that holds three variables fits a slice of the law),
        # so the best of the whole run would report round 1's 1e-13 beside a law of 0.02.
        self.best_seen, self._best_round = math.inf, 0

    # --- fitting -------------------------------------------------------------------------
    def grammar(self, controlled: frozenset[int], settled: frozenset[int] = frozenset()) -> Grammar:
        """New nodes may use the free variables, but not the ones a frozen structure has settled."""
        free = tuple(i for i in range(self.n_vars) if i not in controlled and i not in settled)
        return Grammar(self.operators, free, self.config.max_size, self.config.max_depth)

    def fit_all(self, jobs: Sequence[FitJob]) -> list[FitResult]:
        """The fits of many trees at once (:meth:`rcvgp.search.fitting.Fitter.fit`: here, or
        spread over the workers), cached per (tree, data set): identical trees are fitted once,
        the first job of a tree in the batch deciding its threshold and start.

        A stochastic optimiser gets a seed per fit, drawn here in the jobs' order, so that where
        the fits run changes nothing."""
        stochastic = self.config.optimizer in STOCHASTIC_OPTIMIZERS
        keys = [(job.tokens, id(job.trials)) for job in jobs]
        todo: dict[tuple[tuple[str, ...], int], FitJob] = {}
        for key, job in zip(keys, jobs):
            if key not in self._cache and key not in todo:
                self._cache_data[id(job.trials)] = job.trials
                todo[key] = job._replace(seed=int(self.rng.integers(2**63)) if stochastic else None)
        self._cache.update(zip(todo, self.fitter.fit(list(todo.values()))))
        fits = [self._cache[key] for key in keys]
        if self._reread(jobs, fits):
            return self.fit_all(jobs)  # on the readings that replaced the wild ones
        return fits

    def _reread(self, jobs: Sequence[FitJob], fits: Sequence[FitResult]) -> bool:
        """Whether the best fit of any data set among ``jobs`` showed wild readings of it, read
        again and replaced (:meth:`Lab.second_readings`); every fit on that data set is then
        forgotten, and the individuals fitted on it before are fitted again in :meth:`evolve`.
        The best fit of a batch nominates: a tree that fits to the floor but for a few readings."""
        best: dict[int, int] = {}
        for i, (job, fit) in enumerate(zip(jobs, fits)):
            j = best.setdefault(id(job.trials), i)
            if fit.fitness < fits[j].fitness:
                best[id(job.trials)] = i
        changed = set()
        for i in best.values():
            job, fit = jobs[i], fits[i]
            trials = job.trials
            if trials.noise_std is None or not math.isfinite(fit.fitness):
                continue
            # A fit that named its suspects already names none again: those it named are
            # checked, and the allowance it stopped at is no larger now.
            if np.array_equal(trials.checked_fits.get(job.tokens), fit.constants):
                continue
            trials.checked_fits[job.tokens] = fit.constants
            if self.lab.second_readings(trials, evaluate(job.tokens, trials.X, fit.constants)):
                changed.add(id(trials))
        if changed:
            self._cache = {key: fit for key, fit in self._cache.items() if key[1] not in changed}
        return bool(changed)

    def fit(
        self, expr: Expr, trials: Trials, threshold: float = math.inf, init: np.ndarray | None = None
    ) -> FitResult:
        """Fit constants, cached per (tree, data set) (see :meth:`fit_all`).

        Trees with nonlinear constants are screened first with a few optimiser iterations from
        ``init`` (K, n_consts) if given; only those that then beat ``threshold`` (the fitness
        needed to survive) get the full fit. Most offspring are rejected by the screen.
        """
        return self.fit_all([FitJob(expr.tokens, trials, threshold, init)])[0]

    def individual(
        self,
        expr: Expr,
        controlled: frozenset[int],
        schedule: tuple[frozenset[int], ...],
        threshold: float = math.inf,
        init: np.ndarray | None = None,
        settled: frozenset[int] = frozenset(),
    ) -> Individual:
        """A tree fitted on this round's trials of its controlled set (see :meth:`fit`)."""
        trials = self.lab.trials(controlled)
        return self.individuals([_Draft(expr, controlled, schedule, trials, threshold, init, settled)])[0]

    def individuals(self, drafts: Sequence[_Draft]) -> list[Individual]:
        """The drafts fitted together (:meth:`fit_all`), as individuals."""
        fits = self.fit_all([FitJob(d.expr.tokens, d.trials, d.threshold, d.init) for d in drafts])
        return [Individual(d.expr, d.controlled, d.schedule, fit, d.settled) for d, fit in zip(drafts, fits)]

    def refit(self, pop: Sequence[Individual]) -> list[Individual]:
        """Every individual fitted anew on this round's trials of its controlled set, started
        from its last fit (the median over the old trials: new trials hold other values); what
        its freeze sampled stays with it."""
        out = self.individuals([
            _Draft(ind.expr, ind.controlled, ind.schedule, self.lab.trials(ind.controlled),
                   init=_median_start(ind.fit.constants), settled=ind.settled)
            for ind in pop
        ])
        out = [dataclasses.replace(new, samples=old.samples) for new, old in zip(out, pop)]
        self.current = out
        self._revision = self.lab.revision
        return out

    def next_round(self, pop: Sequence[Individual]) -> list[Individual]:
        """The population that starts a round after the first: refitted on the round's trials,
        and beside it the best :meth:`expansions` of its best frozen trees (a tenth of the
        population at most), so that this round runs with that many more."""
        pop = self.refit(pop)  # in the last round's order: the expansions grow its best
        out = self._beside(pop, self.expansions(pop))
        self.current = out
        return out

    def _beside(self, pop: Sequence[Individual], grown: Sequence[Individual]) -> list[Individual]:
        """``pop`` and the best of ``grown`` (a tenth of the population at most), ranked: beside
        its trees, not in their places, which would push out whole schedules (the few trees of
        one that has yet to grow)."""
        return _rank(list(pop) + _rank(grown)[: self.config.population // _EXPANSION_SHARE])

    def initial_pool(self, controlled: frozenset[int], size: int, pieces: bool = True) -> list[Individual]:
        """Random trees over the free variables: half plain, half ``c * t + c``; and, with
        ``pieces``, a constant grown as :meth:`expansions` grows one, into the small functions of
        the free variables (and their sums) that fit to the noise floor."""
        g = self.grammar(controlled)
        drafts: list[_Draft] = []
        attempts = 0
        while len(drafts) < size and attempts < 20 * size:
            attempts += 1
            depth = int(self.rng.integers(1, 4))
            if attempts % 2:
                expr = random_tree(g, self.rng, depth)
            else:
                term = random_term(g, self.rng, depth)
                expr = Expr(("add",) + term.tokens + ("c",)) if "add" in g.operators else term
            if not expr.variables or not g.fits(expr):
                continue
            # The trials are measured at the first tree, as the search has always done: the
            # random draws then come in the same order.
            # From 1.0, as every random tree (a scan for each would cost more than it finds).
            start = np.ones(expr.n_consts)
            drafts.append(_Draft(expr, controlled, (controlled,), self.lab.trials(controlled), init=start))
        pool = _rank(self.individuals(drafts))
        if pieces:
            # Beside them, as at the start of every later round: under noise a random tree can
            # reach the floor first with a near-fit that the next round cannot grow into the law
            # (an exp for a thin lens's pole); a law of one variable, which has a single round,
            # may be such a piece (a charging curve c + c*exp(c*t)) or two (T**4). Not for
            # plain GP, the baseline.
            seed = self.individual(Expr((CONST_TOKEN,)), controlled, (controlled,))
            pool = self._beside(pool, self._expanded([seed], {ind.expr.tokens for ind in pool}))
        self.current = self.current + pool
        return pool

    def expansions(self, pop: Sequence[Individual]) -> list[Individual]:
        """The best frozen trees of ``pop`` (the last round's order) with their open constants
        grown into functions of the variables freed since, those that fit to the noise floor.

        Two ways, both returned where they fit to the noise floor: every open constant they are
        linear in (open phases first made coefficients), at once, into the sum of every piece
        (:meth:`_summed`: one least-squares fit, then only the pieces the data need); and each
        open constant, one at a time and all at once, into each small function of each variable
        freed since the freeze: ``c*u(c*x)``, ``c + c*u(c*x)``, ``c*u(c/x)`` and ``c + c*u(c/x)``
        for every unary operator u and u(v) = v (for a power or root u, ``c*u(x)`` and
        ``c/u(x)``), the pole ``c/(c + x)`` and the saturation ``c*x/(c + x)``, each also with
        ``c +``. If no single piece fits to the floor, the best of
        a few kinds (each unary operator, none, the pole), and of every kind those that fit best
        for their number of constants, are grown once more the same way (a damped wave needs
        ``exp(c*t)`` and ``cos(c*t)``), and the best tree of each piece without an offset has its
        variable made a piece of it in turn (:func:`_inner_pieces`: a power ``c*exp(c*log(x))``, a
        distance ``c*sqrt(c + x**2)``, a logistic curve ``c/(c + exp(c*t))``). A piece that fits
        only part of the change is not returned: such trees fit better at once and took the round
        over, in a structure that could not grow into the law (sincos-3-2-2/1: a coefficient
        standing for ``0.66/cos(x1)``).

        An open constant of an exact fit stands for a function of the variables held then
        (:meth:`freeze`); the round that frees one of them has to find that function. Most laws
        are built of such small pieces (a rate ``exp(-a/R)``, a frequency ``sin(w*t)``, a term
        ``b*x``), and trying each at once finds them in a few hundred fits, where random edits
        must first happen on exactly the right tree, operator and variable. These fits (unlike
        the offspring's, which are too many) scan for the new constants' starts, so a piece
        whose constant is far from 1 fits too.

        A tree frozen with one variable held knows more: each open constant is a function of
        that variable alone, sampled at its held values (:class:`_Samples`). Each piece is then
        also fitted to those samples first, and started where that fit ends, beside the scan's
        start: a frequency ``c*exp(c*x1)`` inside a cosine has a basin no scan finds. And each
        open constant is grown at once into the pieces its samples fit best, each its own (a
        velocity addition's ``c + c/(c + u)`` needs three functions of v)."""
        # Frozen whole, so that its open constants are its summary ones (every constant of a tree
        # grown since is open: growing each would be hundreds of fits to no purpose); those
        # frozen by an exact fit in the last round, one variable freed since, first. In the last
        # round's order: on the new data, trees with spare nonlinear constants rank above the
        # clean law that needs its pieces (sincos-4-4-6/3).
        frozen = [ind for ind in pop if ind.settled and _frozen_but_constants(ind.expr)]
        seeds = sorted(frozen, key=lambda ind: self.n_vars - len(ind.controlled | ind.settled))[:_EXPANDED]
        # The sums compete with the single pieces, not in their place: under noise a sum of
        # unit-argument pieces can reach the floor as a series for a law with a scale or a power
        # of its own (1%: seven pieces of t for exp(-t/RC), five of T for T**4, which single
        # pieces reach in two steps); ranked at the floor, the smaller tree wins.
        return self._expanded(seeds, {ind.expr.tokens for ind in pop})

    def _expanded(self, seeds: Sequence[Individual], seen: set[tuple[str, ...]]) -> list[Individual]:
        """The trees of :meth:`expansions` grown from ``seeds``, those not in ``seen``."""
        if "mul" not in self.operators:
            return []
        summed = self._summed(seeds)
        composed: list[Individual] = []
        for _ in range(_EXPANSION_STEPS):
            grown = self._grown(seeds, seen, composed)
            exact = [g.ind for g in grown if g.better and g.ind.fit.at_floor]
            if exact or not any(g.better for g in grown):
                return summed + exact
            # The seeds of the next step: the best tree of each kind of piece (the best few trees
            # are mostly one piece a few ways, c*exp(c*T), c + c*exp(c*T), ..., and two exp's
            # stood in for T**4 where n2(T)*n2(T) was the law); of those, the best few kinds,
            # and beside them each kind that fits best for its number of constants (the best
            # fits are the pieces with the most: at 1% an exp of a pole stood in for T**4;
            # growing every kind took twice a round's fits).
            best: dict[str, Individual] = {}
            # And for a function of a piece, the best tree of each piece without an offset of
            # its own (the offset of c + u(c*x) is the same with u of a piece in it), whether or
            # not it fits better: c/sqrt(v) does not, c/sqrt(c + v**2) is a Lorentz factor.
            by_piece: dict[tuple[str, ...], Individual] = {}
            for g in sorted(grown, key=lambda g: _rank_key(g.ind)):
                if g.kind is not None and g.piece is not None:
                    if g.better:
                        best.setdefault(g.kind, g.ind)
                    if g.piece.tokens[0] != "add":
                        by_piece.setdefault(g.piece.tokens, g.ind)
            seeds = list(best.values())[:_EXPANDED]
            seeds += [ind for ind in front_of(best.values(), key=lambda ind: (ind.expr.n_consts, ind.fitness))
                      if all(ind is not seed for seed in seeds)]
            composed = list(by_piece.values())
        return summed

    def _summed(self, seeds: Sequence[Individual]) -> list[Individual]:
        """Each seed with every open constant it is linear in made the sum of every piece of the
        variables freed since (``c + c*x + c*u(x) + ... + c/x``, :func:`_terms`; first made
        coefficients where they ride on one another, :func:`_linearized`): still linear in
        its constants, so one least-squares fit tells whether those pieces explain the change.
        If that fits to the noise floor, each piece is taken out in turn where the fit stays at
        the floor and as good as with them all (one pass, each judged against the whole sum, so
        that small losses cannot add up); the coefficient's constant part is such a piece too.
        A coefficient that the freed variable changes through several terms (``0.92*x3 +
        0.86*cos(x3) + ...``) is then found in one step, where single pieces (:meth:`_grown`)
        need one step per term. Where these pieces do not reach the floor, those of a function
        of a function too (``cos(sqrt(x))/x``), a few chosen by projection (:func:`_pursued`).

        The sums may outgrow ``max_size``, which bounds what GP's random edits build: a sum
        holds only pieces the data need, and a law of six variables has more terms than 64
        nodes hold (sincos-6-6-10/1: 81 in the engine's form)."""
        out: list[Individual] = []
        for ind in seeds:
            trials = self.lab.trials(ind.controlled)
            g = self.grammar(ind.controlled, ind.settled)
            if {"sin", "cos"} <= set(g.unary) and (unphased := _unphased(ind.expr)) is not None:
                # The same tree, its open phases made coefficients: each can become a sum.
                init = inherited_constants(ind.expr, ind.fit.constants, unphased)
                ind = self.individuals([_Draft(unphased, ind.controlled, ind.schedule, trials, init=init,
                                               settled=ind.settled)])[0]
            if (rewritten := _linearized(ind.expr, ind.fit.constants)) is not None:
                # The same tree, its open coefficients made free of one another: each can become a sum.
                ind = self.individuals([_Draft(rewritten[0], ind.controlled, ind.schedule, trials,
                                               init=rewritten[1], settled=ind.settled)])[0]
            linear = set(linear_constants(ind.expr.tokens))
            open_ = [k for k, i in enumerate(ind.expr.const_positions) if k in linear and not ind.expr.frozen[i]]
            if not open_:
                continue

            def fitted(kept: dict[int, list[tuple[str, ...]]]) -> Individual:
                expr, columns = ind.expr, []
                for k in reversed(range(ind.expr.n_consts)):  # from the end: the positions before stay put
                    if k in kept:
                        total = Expr(_sum_of(kept[k]))
                        expr = expr.replace(expr.const_positions[k], total)
                        columns.append(np.ones((trials.n_trials, total.n_consts)))  # linear: any start does
                    else:
                        columns.append(ind.fit.constants[:, [k]])
                init = np.hstack(columns[::-1])
                return self.individuals([_Draft(expr, ind.controlled, ind.schedule, trials, init=init,
                                                settled=ind.settled)])[0]

            points = trials.X[trials.mask]
            terms = _terms(g, points)
            if not terms:
                continue
            kept = {k: [(CONST_TOKEN,)] + terms for k in open_}
            whole = fitted(kept)
            self.check_time()
            if not whole.fit.at_floor:
                # A function of a function, where the plain pieces do not reach the floor
                # (4.53*x + 1 - cos(sqrt(x))/x came back as a series in x fitted to 1e-15:
                # livermore2/Vars5-19). The few that explain most of what they leave, not all
                # of them: several times as many columns, they would cost the fit its precision.
                found = _pursued(ind, trials, open_, _terms(g, points, nested=True), _PURSUED * len(open_))
                if not found:
                    continue
                kept = {k: [(CONST_TOKEN,)] + [p for j, p in found if j == k] for k in open_}
                whole = fitted(kept)
                self.check_time()
                if not whole.fit.at_floor:
                    continue
            best, reference = whole, evaluate(whole.expr.tokens, trials.X, whole.fit.constants)
            for k in open_:
                for piece in list(kept[k]):
                    if len(kept[k]) == 1:
                        break  # the coefficient was not 0 before the variable was freed
                    trial = {j: [p for p in pieces if j != k or p != piece] for j, pieces in kept.items()}
                    child = fitted(trial)
                    self.check_time()
                    if child.fit.at_floor and _as_good(trials, evaluate(child.expr.tokens, trials.X,
                                                                         child.fit.constants), reference):
                        kept, best = trial, child
            out.append(best)  # bounded by the pieces the data need, not by GP's max_size
        return out

    def _grown(self, seeds: Sequence[Individual], seen: set[tuple[str, ...]],
               composed: Sequence[Individual] = ()) -> list[_Growth]:
        """One step of :meth:`expansions`: each open constant of each seed (and all of them at
        once) grown into each piece, and each freed variable in a piece of each of ``composed``
        made an inner piece of itself (:func:`_inner_pieces`); the trees not in ``seen`` fitted
        (and added to it), each with the kind of its piece and the piece (:func:`_pieces`), and
        whether it fits better than its seed (only those are fitted in full); no kind or piece
        for one grown at several places or composed: no seed for a next step, which would carry
        its piece where the law has none (an offset that stays)."""
        drafts: list[_Draft] = []
        pieces_of: list[tuple[str, Expr] | None] = []

        def add(ind: Individual, g: Grammar, child: Expr, piece: tuple[str, Expr] | None,
                anew: bool = False, read: np.ndarray | None = None, scan: bool = True) -> None:
            grown = child
            child = simplify_tree(child)
            if child.tokens in seen or not g.fits(child):
                return
            seen.add(child.tokens)
            init = inherited_constants(ind.expr, ind.fit.constants, child, fresh=np.nan)
            if anew:
                # The piece's constants scanned for anew, not kept from its fit: the offset
                # of a pole c/(c + t) is not that of c/(c + exp(c*t)).
                init[:, _open_subtree_consts(child)] = np.nan
            if read is not None:
                # The start read from the samples, beside (or, without ``scan``, instead of) the scan's.
                read = inherited_constants(grown, read, child, fresh=np.nan) if child.tokens != grown.tokens else read
                init = np.stack([init, read]) if scan else read
            drafts.append(_Draft(child, ind.controlled, ind.schedule, self.lab.trials(ind.controlled),
                                 ind.fitness, init, ind.settled))
            pieces_of.append(piece)

        for ind in seeds:
            g = self.grammar(ind.controlled, ind.settled)
            pieces = _pieces(g)
            open_ = [i for i in ind.expr.const_positions if not ind.expr.frozen[i]]
            read = self._read(ind, [piece for piece, _ in pieces])

            def grown_at(assigned: dict[int, Expr]) -> tuple[Expr, np.ndarray | None]:
                """The seed with its j-th open constant made ``assigned[j]``, and the start the
                samples give it (None if they do not give one for every piece)."""
                child = ind.expr
                for j in sorted(assigned, reverse=True):  # from the end: the positions before stay put
                    child = child.replace(open_[j], assigned[j])
                found = {j: read.get((j, piece.tokens)) for j, piece in assigned.items()}
                if any(f is None for f in found.values()):
                    return child, None
                K = len(ind.fit.constants)
                return child, np.hstack([np.broadcast_to(f[1], (K, len(f[1]))) if (f := found.get(j)) is not None
                                         else ind.fit.constants[:, [j]] for j in range(len(open_))])

            # Each open constant alone, and all of them at once: the variable freed may change
            # several (c/(x2 + c) of a Michaelis-Menten law has S in both), which one at a time
            # does not show, since neither alone fits better.
            for where in [[j] for j in range(len(open_))] + ([list(range(len(open_)))] if len(open_) > 1 else []):
                for piece, kind in pieces:
                    child, start = grown_at({j: piece for j in where})
                    add(ind, g, child, (kind, piece) if len(where) == 1 else None, read=start)
            if read and len(open_) > 1:
                # Each open constant its own piece at once, the one its samples fit best (two
                # for three constants or fewer), started where those fits end: a law whose
                # variable enters several constants in different ways (c + c/(c + u) of a
                # velocity addition, each constant a function of v of its own) is one step away,
                # which neither one piece at a time nor the same piece everywhere reaches.
                best = [sorted((piece for piece, _ in pieces if (j, piece.tokens) in read),
                               key=lambda piece: read[j, piece.tokens][0])[: 2 if len(open_) <= 3 else 1]
                        for j in range(len(open_))]
                for combo in itertools.product(*best):
                    child, start = grown_at(dict(enumerate(combo)))
                    add(ind, g, child, None, read=start, scan=False)
        for ind in composed:
            # A function of a piece (c*exp(c*log(V)) for a power V**-1.4, c*sqrt(c + x**2) for a
            # distance, c/(c + exp(c*t)) for a logistic curve, a saturation of a power for a Hill
            # curve): pieces in place of constants only multiply and add them.
            g = self.grammar(ind.controlled, ind.settled)
            for v, inner in _inner_pieces(g).items():
                where = [i for i, t in enumerate(ind.expr.tokens) if t == f"x{v}" and not ind.expr.frozen[i]]
                for piece in inner if where else ():
                    child = ind.expr
                    for i in reversed(where):
                        child = child.replace(i, piece)
                    add(ind, g, child, None, anew=True)
        fitted = self.individuals(drafts)
        self.check_time()
        return [_Growth(child, *(piece or (None, None)), child.fitness < draft.threshold)
                for draft, child, piece in zip(drafts, fitted, pieces_of)]

    def _read(self, ind: Individual, pieces: Sequence[Expr]) -> dict[tuple[int, tuple[str, ...]], tuple[float, np.ndarray]]:
        """Each of ``pieces`` that holds the variable ``ind`` was frozen with held, fitted to
        the samples of each of its open constants (:class:`_Samples`): (j, the piece's tokens)
        -> (score, its constants). The score is Akaike's on the samples, the fit's NMSE taken no
        lower than rounding, so that among exact fits the one with fewer constants wins."""
        samples = ind.samples
        if samples is None or samples.values.shape[1] != ind.expr.n_consts:
            return {}
        x = f"x{samples.var}"
        X = np.ones((1, len(samples.at), self.n_vars))
        X[0, :, samples.var] = samples.at
        out: dict[tuple[int, tuple[str, ...]], tuple[float, np.ndarray]] = {}
        for j in range(samples.values.shape[1]):
            trials = Trials(X, samples.values[None, :, j])
            for piece in pieces:
                if x not in piece.tokens:
                    continue
                fit = fit_constants(piece.tokens, trials)
                if math.isfinite(fit.fitness):
                    score = len(samples.at) * math.log(max(fit.fitness, _READ_EXACT)) + 2 * piece.n_consts
                    out[j, piece.tokens] = score, fit.constants[0]
        return out

    # --- the generation loop ---------------------------------------------------------------
    def evolve(self, pop: list[Individual], n_generations: int) -> list[Individual]:
        """(mu + lambda) GP: tournament parents, mating within a controlled set, mutation.

        Each generation makes ``population`` children, so a population that deduplication shrank
        grows back, but for children that repeat a tree already in it. A round ends early once
        its best tree fits to the noise floor and has not changed for a few generations: what
        its trials can tell is told. :attr:`spare_generations` says how many it left unrun.

        With noisy readings a round with variables held runs in full: there an approximation
        can sit at the floor (a critically damped ``A*(1 + w*t)*exp(-w*t)`` at 1%, met by a
        sine in round 2 after three generations), and the generations left are where the law
        replaces it before the round's population seeds the next. Noiseless, the floor is
        rounding: a fit there is exact."""
        cfg, rng = self.config, self.rng
        size = max(len(pop), cfg.population)
        steady = 0
        noiseless = self.lab.noise is not None and self.lab.noise.zero  # measured before any round
        self.spare_generations = 0
        score = _scores(pop)
        for gen in range(n_generations):
            if self.lab.revision != self._revision:  # readings were replaced since pop was fitted
                pop = _rank(self.refit(pop))
                score = _scores(pop)
            best_before = _rank_key(pop[0], score[0]) if pop else None
            survive = max(ind.fitness for ind in pop) if len(pop) >= size else math.inf
            # Mates share the controlled set and the settled variables, so that a swapped subtree
            # brings in only variables its new tree may use.
            groups: dict[tuple[frozenset[int], frozenset[int]], list[int]] = {}
            for i, ind in enumerate(pop):
                groups.setdefault((ind.controlled, ind.settled), []).append(i)
            # The children are made first, then fitted together: the fits draw nothing from
            # ``rng`` (a stochastic optimiser's seeds are drawn after), so the children are the
            # same as if each were fitted as it came.
            drafts: list[_Draft] = []
            for _ in range(size):
                parent = pop[tournament(score, cfg.tournament, rng)]
                g = self.grammar(parent.controlled, parent.settled)
                child = parent.expr
                if rng.random() < cfg.p_mate:
                    among = groups[parent.controlled, parent.settled]
                    mate = pop[tournament(score, cfg.tournament, rng, among=among)]
                    pair = crossover(child, mate.expr, g, rng)
                    if pair is not None:
                        child = pair[0]
                if rng.random() < cfg.p_mutate:
                    child = mutate(child, g, rng) or child
                if child.tokens != parent.expr.tokens:
                    init = inherited_constants(parent.expr, parent.fit.constants, child)
                    trials = self.lab.trials(parent.controlled)
                    drafts.append(
                        _Draft(child, parent.controlled, parent.schedule, trials, survive, init, parent.settled)
                    )
            offspring = self.individuals(drafts)
            self.check_time()
            pop = _rank(pop + offspring)[:size]
            self.current = pop
            self.record(pop)
            self.report(gen + 1, pop)
            score = _scores(pop)
            best = _rank_key(pop[0], score[0])
            settled = best[0] == 0 and (noiseless or not pop[0].controlled)
            steady = steady + 1 if settled and best == best_before else 0
            if steady >= _FLOOR_PATIENCE:
                self.spare_generations = n_generations - gen - 1
                if self.spare_generations:
                    later = ", the rest to the next round" if pop[0].controlled else ""
                    self._tell(f"at the noise floor: round {self.round} ends after {gen + 1} of "
                               f"{n_generations} generations{later}", round_=self.round)
                break
        return pop

    def worth_restarting(self) -> bool:
        """Whether this start has left a new one something to find: no fit with no variable held
        reaches the noise floor, in the search or once the start's front is refitted and pruned
        as :meth:`finish` will (Planck's law shows only in a tree of 60 nodes pruned), and the
        budget has room for the validation points that judging this takes."""
        if any(ind.score == 0 for ind in self.hall.values()):
            return False
        data = self.lab.cached_trials(frozenset())
        if data is None or not self.hall:
            return True
        if self.lab.room() < self.config.n_validation:
            return False
        # Drawn from a stream of their own: whether to restart must not move the search's path.
        val = self.lab.fresh_points(self.config.n_validation, rng=np.random.default_rng([self.seed, self.restarts]))
        front = self._front([_as_structures(self._hall_front(self.hall), set())], data, val)
        return not any(self._fits_to_floor(f, val) for f in front)

    def restart(self) -> None:
        """Start the rounds again from new random trees, on new trials, keeping the hall of fame:
        whether GP finds a law's structure at all depends on its random start ((sin(a)/a)**2,
        noiseless: found from one seed's start of four, from seed 0's first restart), and a run
        that ends short of the floor has only an approximation to show for its budget."""
        self.restarts += 1
        self.lab.new_round()
        self.current = []
        self.past_halls.append(self.hall)
        self.hall = {}
        self._tell(f"no fit reached the noise floor: restart {self.restarts} of {self.config.restarts}, "
                   f"from new random trees", round_=0)
        self.best_seen, self._best_round = math.inf, 0

    def record(self, pop: Iterable[Individual]) -> None:
        """Keep the best expression with no variable held of each size in the hall of fame."""
        for ind in pop:
            if ind.controlled or not math.isfinite(ind.fitness):
                continue
            size = len(ind.expr)
            old = self.hall.get(size)
            if old is None or (ind.score, *_tie_break(ind)) < (old.score, *_tie_break(old)):
                self.hall[size] = ind

    def announce(self, stopped: str) -> None:
        """Tell the progress callback why the search stopped early, naming the rounds it left out."""
        if self.progress is None or stopped == "completed":
            return
        left = rounds_not_run(self.round, self.n_rounds)
        reason = {"budget": "measurement budget spent", "time": "time budget spent"}.get(stopped, stopped)
        if left:
            where = f"round {self.round} of {self.n_rounds}" if self.round else "the first pools"
            where = f"restart {self.restarts}, {where}" if self.restarts else where
            rounds = f"round {left[0]}" if len(left) == 1 else f"rounds {left[0]}-{left[-1]}"
            reason += f" in {where}: {rounds} not run"
        self._tell(reason, round_=self.round)

    def _tell(self, message: str, round_: int) -> None:
        """Report ``message`` to the progress callback, if there is one, as of ``round_``."""
        if self.progress is not None:
            self.progress(Progress(self.method, round_, self.n_rounds, 0, self.best_seen, self.lab.points,
                                   self.lab.requests, time.perf_counter() - self.started, message=message))

    def report(self, generation: int, pop: Sequence[Individual]) -> None:
        if self._best_round != self.round:
            self.best_seen, self._best_round = math.inf, self.round
        if pop:
            self.best_seen = min(self.best_seen, min(ind.fitness for ind in pop))
        elapsed = time.perf_counter() - self.started
        if self.progress is not None:
            stop = self.progress(
                Progress(self.method, self.round, self.n_rounds, generation, self.best_seen,
                         self.lab.points, self.lab.requests, elapsed, schedules=self.race(pop))
            )
            if stop:
                raise StopSearch("interrupted")
        self.check_time()

    def race(self, pop: Sequence[Individual]) -> tuple[ScheduleStats, ...]:
        """The population by schedule: how many expressions each holds and its best loss."""
        groups: dict[tuple[frozenset[int], ...], list[float]] = {}
        for ind in pop:
            groups.setdefault(ind.schedule, []).append(ind.fitness)
        names = [v.name for v in self.spec.variables]
        out = [
            ScheduleStats(tuple(tuple(names[i] for i in sorted(held)) for held in schedule), len(losses), min(losses))
            for schedule, losses in groups.items()
        ]
        return tuple(sorted(out, key=lambda s: s.schedule))

    def check_time(self) -> None:
        """End the run once the wall-time budget is spent (checked after every batch of fits).
        Time only ever stops a run: nothing the search does depends on it, so a seed gives the
        same answer on a slow machine or a busy one unless the budget runs out."""
        cap = self.config.max_seconds
        if cap is not None and time.perf_counter() - self.started > cap:
            raise StopSearch("time")

    # --- FreezeEquation and the schedule ---------------------------------------------------
    def pruned(self, ind: Individual) -> Individual:
        """An individual that fits to the noise floor, with every editable subtree its fit does
        not need (the tree without it fits the trials as well, as far as the noise can tell: see
        :func:`rcvgp.noisefloor.not_worse`) made one constant.

        Such trees carry do-nothing parts (``c*x0*cos(x0)`` fitted to zero, say); once frozen,
        they could never be removed, they slow every later fit and take up the room
        (``max_size``) that the variables freed later need. Others are returned as they are."""
        trials = self.lab.cached_trials(ind.controlled)
        if trials is None or not ind.fit.at_floor:
            return ind
        screen = max(_PRUNE_SCREEN, 2 * float(trials.floor.level.max()))
        shrunk = True
        while shrunk:
            shrunk = False
            before = evaluate(ind.expr.tokens, trials.X, ind.fit.constants)
            for child in deletions(ind.expr):
                init = inherited_constants(ind.expr, ind.fit.constants, child)
                fit = self.fit(child, trials, threshold=screen, init=init)
                self.check_time()
                if fit.at_floor and _as_good(trials, evaluate(child.tokens, trials.X, fit.constants), before):
                    ind, shrunk = dataclasses.replace(ind, expr=child, fit=fit), True
                    break
        return ind

    def freeze(self, ind: Individual) -> Individual:
        """FreezeEquation: if every trial fits within eps_loss (or to the noise floor, if that is
        higher), freeze the structure except the summary constants (those whose value changes
        across trials); the standalone constants become literals at their median value, which no
        later fit moves (the final fit, on data with no variable held, reopens them). When the fit
        is exact (to the noise floor), a summary constant stands for a function of the held
        variables only, so the frozen tree records the variables free now as ``settled``: edits
        grow from its summary constants with the variables freed later.

        When two or more summary constants change together, so that every trial's fitted curve
        is ``a + m * g`` of one curve ``g``, the held variables act on the whole expression as
        one offset and one scale: the tree is frozen whole under ``a + m * tree`` and only
        ``a`` and ``m`` stay open. Otherwise finishing the equation would need each of those
        constants expanded into the same sub-expression, one edit at a time. So is a lone
        summary constant that only scales or shifts the curve but enters it nonlinearly
        (``sqrt(c*L)``, ``x/c``): the next round then grows the scale itself, not the constant
        inside the root."""
        cfg = self.config
        losses = ind.fit.losses
        if not (np.all(np.isfinite(losses)) and np.all(losses <= np.maximum(cfg.eps_loss, ind.fit.floor.level))):
            return ind
        # Only an exact fit leaves the summary constants nothing but the held variables to stand
        # for; an approximate one may need the free variables in later edits too.
        exact = ind.fit.at_floor
        settled = frozenset(range(self.n_vars)) - ind.controlled if exact else ind.settled
        summary = self._unexplained(ind, summary_constants(ind.fit.constants, cfg.eps_const))
        expr, fit = ind.expr.fixed(np.median(ind.fit.constants, axis=0), open_=summary), ind.fit
        fit = dataclasses.replace(fit, constants=fit.constants[:, summary], n_evals=0)
        n_open = int(summary.sum())
        if n_open >= 2 or (n_open == 1 and not self._affine_in(ind, int(np.argmax(summary)))):
            factored = self._factor(ind)
            # several open constants: kept only if fewer stay open; a lone one: only its scale
            if factored is not None and factored[0].n_consts < max(n_open, 2):
                expr, fit = factored
        trials = self.lab.cached_trials(ind.controlled)
        samples = None
        if exact and len(ind.controlled) == 1 and trials is not None:
            (var,) = ind.controlled
            samples = _Samples(var, trials.X[:, 0, var], fit.constants)
        return dataclasses.replace(ind, expr=expr, fit=fit, settled=settled, samples=samples)

    def _unexplained(self, ind: Individual, summary: np.ndarray) -> np.ndarray:
        """The summary constants whose spread over the trials the data need. Each in turn is set
        to its median in every trial and counted standalone if no trial fits distinguishably
        worse for it (:func:`rcvgp.noisefloor.not_worse`; with no noise, worse than rounding): an
        exact fit leaves such leftovers as ``1e-17*x0``, whose values scatter around zero, a
        noisy one scatters every constant, and an open one is fitted to anything in the next
        round."""
        trials = self.lab.cached_trials(ind.controlled)
        if trials is None or not summary.any():
            return summary
        theta = ind.fit.constants.copy()
        fitted = evaluate(ind.expr.tokens, trials.X, theta)
        out = summary.copy()
        for k in np.flatnonzero(summary):
            pinned = theta.copy()
            pinned[:, k] = np.median(theta[:, k])
            if _as_good(trials, evaluate(ind.expr.tokens, trials.X, pinned), fitted):
                theta, out[k] = pinned, False
        return out

    def _affine_in(self, ind: Individual, k: int) -> bool:
        """Whether the curve is ``a + c * b`` in constant ``k`` (``c*x``, ``c + x``): such a
        constant already is the curve's scale or offset, and freezing it as ``m * tree`` would
        only add nodes."""
        trials = self.lab.cached_trials(ind.controlled)
        if trials is None:
            return True
        ref = int(np.argmin(ind.fit.losses))
        probes = np.tile(ind.fit.constants[ref], (3, 1))
        c = probes[0, k]
        # c, 2c and 3c keep the constant's sign, so a root or a logarithm of it stays defined.
        probes[:, k] = c * np.arange(1, 4) if c != 0 else np.arange(3)
        with np.errstate(all="ignore"):
            f = np.stack([evaluate(ind.expr.tokens, trials.X[ref], p) for p in probes])
            if not np.isfinite(f).all():
                return False
            bend = f[2] - 2 * f[1] + f[0]
            return bool(np.mean(bend**2) <= _AFFINE_TOL * np.mean(f**2))

    def _factor(self, ind: Individual) -> tuple[Expr, FitResult] | None:
        """``a + m * tree`` with the tree frozen whole, if every trial's fitted curve is an
        offset and a scale of one curve (see :meth:`freeze`); None if it is not."""
        trials = self.lab.cached_trials(ind.controlled)
        theta = ind.fit.constants
        if trials is None or len(theta) < 2:
            return None
        ref = int(np.argmin(ind.fit.losses))
        # The tree holds only free variables, so the curves of all trials can share one set of points.
        X = trials.X[ref]
        with np.errstate(all="ignore"):
            curves = np.stack([evaluate(ind.expr.tokens, X, theta[k]) for k in range(len(theta))])
            if not np.isfinite(curves).all():
                return None
            # In units of the largest value: squares of curves of 1e-200 vanish, of 1e200 overflow.
            unit = float(np.abs(curves).max()) or 1.0
            curves = curves / unit
            g = curves[ref]
            if not np.std(g) > 0:
                return None
            basis = np.column_stack([np.ones_like(g), g])
            (a, m), *_ = np.linalg.lstsq(basis, curves.T, rcond=None)
            misfit = np.mean((curves - (basis @ np.vstack([a, m])).T) ** 2, axis=1)
            # Within rounding of the curves' own spread, or as good a fit of every trial as far
            # as the noise can tell.
            if not np.all(misfit <= _AFFINE_TOL * np.var(curves, axis=1)):
                shared = evaluate(ind.expr.tokens, trials.X, np.broadcast_to(theta[ref], theta.shape))
                factored = a[:, None] * unit + m[:, None] * shared
                if not _as_good(trials, factored, evaluate(ind.expr.tokens, trials.X, theta)):
                    return None
            eps = self.config.eps_const
            scaled = bool(np.any(np.abs(m - 1.0) > eps))
            shifted = bool(np.any(np.abs(a) > eps * np.abs(m) * np.std(g)))
        if not (scaled or shifted):
            return None
        head: tuple[str, ...] = ()
        columns: list[np.ndarray] = []
        if shifted:
            head += ("add", CONST_TOKEN)
            columns.append(a * unit)
        if scaled:
            head += ("mul", CONST_TOKEN)
            columns.append(m)
        # The tree is fixed at the reference trial's constants: a and m carry the other trials.
        tree = ind.expr.fixed(theta[ref])
        frozen = tuple(t != CONST_TOKEN for t in head) + tree.frozen
        return Expr(head + tree.tokens, frozen), dataclasses.replace(ind.fit, constants=np.column_stack(columns), n_evals=0)

    # --- the end ---------------------------------------------------------------------------
    def finish(self, stopped: str) -> SearchResult:
        """Refit the hall of fame's Pareto front on data with no variable held, choose the law on
        validation data (:func:`rcvgp.search.choice.choose`), make it readable, and score it
        once on fresh test data, in the oracle's units."""
        cfg, lab = self.config, self.lab
        structures = self._structures()
        if not any(structures):
            raise BudgetExhausted("the search stopped before it could fit a single expression")
        fit_data = lab.cached_trials(frozenset()) or lab.fresh_points(cfg.batch, reserved=True)
        # Noise limits a constant's precision to about noise / sqrt(points): the law's constants
        # are fitted on more points than a round's, so they carry more right digits.
        fit_data = lab.with_more_points(fit_data, cfg.refit_points)
        val = lab.fresh_points(cfg.n_validation, reserved=True)
        test = lab.fresh_points(cfg.n_test, reserved=True)
        assert lab.noise is not None  # measured with the first trials
        # Each start's front apart (after restarts): a start's tree may hold a law that only
        # pruning shows (Planck's law in a tree of 60 nodes), which another start's closer fits
        # of its size would push off one front of them all.
        front = self._front(structures, fit_data, val)
        noise = lab.noise.std(val.y[0])
        index, most_accurate = choose(front, val.y[0], noise, cfg.selection, lab.weighted), best_of(front)
        # The choice is made; if it is a law (it fits the validation data to the noise floor: an
        # approximation's constants are no law's, and not worth the rig's time; nor is the mean
        # of readings that show no variable's effect), its constants (and those of the most
        # accurate, which its cleaning is judged against) are then measured to the precision
        # asked for.
        chosen = front[index]
        is_law = bool(chosen.expr.variables) and self._fits_to_floor(chosen, val)
        if chosen.expr.variables and not is_law and not lab.noise.zero:
            # An offset too small for a round's readings to show can be all a law lacks: its
            # other constants bend to make up for it, and it misses the floor (2*x0 + x3 + x2/x1
            # - 0.01 at 0.1% came back as 1.9983*x0 + x3 + 0.999743*x2/x1).
            shifted = self._with_offset(chosen, fit_data, val)
            if shifted is not chosen and self._fits_to_floor(shifted, val):
                front[index] = chosen = shifted
                is_law = True
        # Terms too small for a round's readings to show may show in these, or in the many more
        # that measure the law's constants; a law that gains some has theirs measured too.
        added, spent = 0, 0

        def refitted_on(data: Trials) -> list[Fitted]:
            """The front with the law and the most accurate fit (what its cleaning is judged
            against) fitted again on ``data``."""
            return [self._fitted(f.expr, f.constants, f.schedule, data, val) if i in (index, most_accurate)
                    else f for i, f in enumerate(front)]

        if chosen.expr.variables and not lab.noise.zero:
            if (grown := self._with_terms(chosen, fit_data, val, _TERMS)) is not chosen:
                added += len(grown.constants) - len(chosen.constants)  # its terms (and an offset kept with them)
                front[index] = chosen = grown
                is_law = True
        while is_law:
            more = self._precision_points(chosen, fit_data, cfg.precision_points - spent)
            if more is not None and len(more.drawn) + len(more.designed):
                spent += len(more.drawn) + len(more.designed)

                def fitted_on(data: Trials) -> list[Fitted]:
                    lab.second_readings(data, evaluate(chosen.expr.tokens, data.X, chosen.constants))
                    return refitted_on(data)

                drawn = lab.with_more_points(fit_data, len(more.drawn), more.drawn)
                fit_data = lab.with_more_points(drawn, len(more.designed), more.designed)
                front_now = fitted_on(fit_data)
                if not self._fits_to_floor(front_now[index], val):
                    # The designed readings, many at the ends of the variables' ranges, show the law
                    # to be an approximation there: its constants are then those that fit readings
                    # where the declared distributions put them, as the test's are.
                    fit_data = drawn
                    front_now = fitted_on(fit_data)
                front, chosen = front_now, front_now[index]
            if lab.noise.zero or added >= _TERMS:
                break
            if (grown := self._with_terms(chosen, fit_data, val, _TERMS - added)) is chosen:
                break
            added += len(grown.constants) - len(chosen.constants)
            front[index] = chosen = grown
        if is_law and lab.weighted:
            # The law's constants and every judgement of it from here on weigh each reading by
            # the noise at the law's value (see Lab.reweighted).
            fit_data = lab.reweighted(fit_data, evaluate(chosen.expr.tokens, fit_data.X, chosen.constants))
            val = lab.reweighted(val, chosen.prediction[None])
            noise = val.noise_std[0]
            front = refitted_on(fit_data)
        if is_law and not lab.noise.zero:
            front[index] = self._with_offset(front[index], fit_data, val)
        law = front[index]
        # From here on, the oracle's units.
        names = self.symbols()
        X_val, y_val = val.X[0] * lab.x_scale, val.y[0]
        X_fit, y_fit = fit_data.X[0] * lab.x_scale, fit_data.y[0]
        best = front[most_accurate]  # snapping must leave the law as good as this, on all the evidence
        best_on_fit = predict(self.in_units(best.expr.to_sympy(best.constants, names)), names, X_fit)
        noise_fit = lab.noise.std(y_fit) if fit_data.noise_std is None else fit_data.noise_std[0]

        def acceptable(e: sympy.Expr, restrictions: int | None = None) -> bool:
            on_fit = predict(e, names, X_fit)
            if not (not_worse(y_val, predict(e, names, X_val), best.prediction, noise, lab.weighted)
                    and not_worse(y_fit, on_fit, best_on_fit, noise_fit, lab.weighted)):
                return False
            # A snap (``restrictions`` constants set to simple values) is a claim about the law's
            # constants, so beyond not being worse, the readings the law was fitted to must be
            # consistent with it: no constant moved by more than a few of its standard errors
            # (2.86 is not 3 because 3 fits nearly as well).
            return restrictions is None or consistent(y_fit, on_fit, raw_on_fit, noise_fit, restrictions)

        # Noisy readings pin some constants down only together: each snap (and each shortened
        # series) is judged with the others fitted again (none to fit with noiseless ones, which
        # pin each alone).
        refit = (lambda e, at, free: refitted(e, names, at, free, X_fit, y_fit, noise_fit)) if np.all(noise_fit > 0) else None
        # Constants are snapped in the expanded form, where each term has one coefficient (a
        # factored 10*x1*(0.1001*x2 + ...) hides the 1.001 to snap); only those of a law that
        # fits to the noise floor, since an approximation's constants are no law's, and simple
        # values would make it look like one.
        raw = drop_negligible_terms(expanded(self.in_units(law.expr.to_sympy(law.constants, names))), names, X_val)
        raw = shortened_series(normalized_quotients(raw, names, X_val), acceptable, refit=refit)
        if (peaked := completed_squares(raw)) is not raw:
            peaked = normalized_quotients(peaked, names, X_val)  # a divisor about its centre: 1 + a*(x - x0)**2
            if acceptable(peaked):
                raw = peaked
        raw_on_fit, n_floats = predict(raw, names, X_fit), len(raw.atoms(sympy.Float))

        def snappable(e: sympy.Expr) -> bool:
            return acceptable(e, restrictions=n_floats - len(e.atoms(sympy.Float)))

        at_floor = self._fits_to_floor(law, val)
        snapped = snap_constants(raw, snappable, refit) if at_floor else raw
        if at_floor:
            # A phase the search fitted as a sine and a cosine: joined, as a sine or as a cosine,
            # whichever snaps to fewer digits, if fewer than the two halves leave.
            for func in (sympy.sin, sympy.cos):
                if (joined := joined_phases(raw, func)) is raw:
                    continue
                joined = with_floats_refitted(joined, refit) if refit else joined
                if snappable(joined):
                    shorter = snap_constants(joined, snappable, refit)
                    if written_digits(shorter) < written_digits(snapped):
                        snapped = shorter
        if at_floor and (folded := folded_exponentials(snapped)) is not snapped:
            # An exponential's factor that is no simple number may be e to a simple power:
            # whichever form leaves fewer floats (a Fermi function's exp(40*E - 20)).
            refolded = snap_constants(folded, snappable, refit)
            if len(refolded.atoms(sympy.Float)) < len(snapped.atoms(sympy.Float)):
                snapped = refolded
        readable = tidy(snapped)
        if not acceptable(readable):
            readable = raw  # a form that evaluates differently (a branch cut, say)
        rewrites = (merged_roots, merged_logs, collected, factored_polynomials, over_common_denominators, shared_coefficients,
                    summed_angles)
        for rewrite in rewrites:
            if (merged := rewrite(readable)) is not readable and acceptable(merged):  # equal where the data are
                readable = merged
        # Over one denominator, rounding can leave a leftover in a numerator (u*v + v**2 - 16
        # for v*(u + v), v up to 2e8): taken out, the factor cancels.
        if (trimmed := drop_negligible_terms(readable, names, X_val)) is not readable and acceptable(tidy(trimmed)):
            readable = tidy(trimmed)
        on_val = predict(readable, names, X_val)
        nmse = regression_metrics(val.y[0], on_val)["nmse"]
        shown = dataclasses.replace(law, prediction=on_val, nmse_validation=nmse if nmse == nmse else math.inf,
                                    loss=float(fit_data.losses(predict(readable, names, X_fit)[None])[0]))
        X_test = test.X[0] * lab.x_scale
        on_test = predict(readable, names, X_test)
        # The score is of the law, not of the rig's faults: test readings that the law names
        # wild and a second reading contradicts are replaced, as in the validation data.
        lab.second_readings(test, on_test[None])
        test_metrics = regression_metrics(test.y[0], on_test)
        equations = tuple(
            self.candidate(f, expanded(self.in_units(f.expr.to_sympy(f.constants, names))), names, chosen=i == index)
            for i, f in enumerate(front)
        )
        return SearchResult(
            method=self.method,
            seed=self.seed,
            best=self.candidate(shown, readable, names, chosen=True),
            equations=equations,
            test_metrics=test_metrics,
            points_measured=lab.points,
            requests=lab.requests,
            points_failed=lab.failed,
            points_replaced=lab.replaced,
            wall_seconds=time.perf_counter() - self.started,
            stopped=stopped,
            config=cfg,
            noise=lab.noise,
            rounds=(self.round, self.n_rounds),
            restarts=self.restarts,
            test_points=TestPoints(X_test, test.y[0].copy(), np.asarray(on_test, dtype=float)),
            variables=tuple(v.name for v in self.spec.variables),
            fits_noise=self._fits_to_floor(shown, val),
            constants_error=self._constants_error(law, fit_data),
            constants=None if lab.noise.zero else constant_errors(readable, names, X_fit, noise_fit),
        )

    def _front(self, structures: list[list[_Structure]], data: Trials, val: Trials) -> list[Fitted]:
        """The Pareto front of ``structures`` refitted on ``data`` (each group's front apart:
        see :meth:`finish`), each entry without the parts the validation data do not need, so
        that the choice weighs the laws' own sizes, not those of the trees they came in."""
        fitted = [f for group in structures
                  for f in pareto_front(self._fitted(expr, start, schedule, data, val)
                                        for expr, start, schedule in group)]
        fitted = self._without_wild(fitted, data, val)
        assert self.lab.noise is not None  # measured with the first trials
        noise = self.lab.noise.std(val.y[0])
        return pareto_front(self._pruned_law(f, data, val, noise) for f in fitted)

    def _without_wild(self, fitted: list[Fitted], data: Trials, val: Trials) -> list[Fitted]:
        """``fitted``, fitted anew for as long as the most accurate of them shows wild readings
        of the final fit's or validation data, read again and replaced (:meth:`Lab.second_readings`;
        a fit freed of one wild reading shows the next)."""
        for _ in range(_REREADS):
            best = fitted[best_of(fitted)]
            replaced = self.lab.second_readings(data, evaluate(best.expr.tokens, data.X, best.constants))
            if not (self.lab.second_readings(val, best.prediction[None]) or replaced):
                break
            fitted = pareto_front(self._fitted(f.expr, f.constants, f.schedule, data, val) for f in fitted)
        return fitted

    @staticmethod
    def _fits_to_floor(law: Fitted, val: Trials) -> bool:
        """Whether ``law`` fits the validation data as well as the noise lets anything fit them."""
        return bool(val.losses(law.prediction[None])[0] <= val.floor.level[0])

    def _relative_errors(self, law: Fitted, data: Trials) -> np.ndarray | None:
        """The relative standard error of each constant of ``law`` fitted on ``data``, inf for
        those the data do not tell from zero (a constant within noise of 0 has no relative
        precision: the cleaning drops or snaps it); None without noise or constants."""
        assert self.lab.noise is not None
        if self.lab.noise.zero or not len(law.constants):
            return None
        value = np.abs(law.constants)
        se = standard_errors(law.expr.tokens, data, law.constants)
        return np.where(value > Z * se, se / np.where(value > 0, value, 1.0), np.inf)

    def _constants_error(self, law: Fitted, data: Trials) -> float | None:
        """The largest relative standard error of the constants of ``law`` fitted on ``data``,
        over those the data tell from zero; None without noise or such constants."""
        return _largest_told(self._relative_errors(law, data))

    def _with_offset(self, law: Fitted, data: Trials, val: Trials) -> Fitted:
        """``law`` plus a constant where ``data`` rule out its readings having none: an
        instrument's zero, or a term too small for a round's noisy readings to show, which the
        law's other constants would otherwise absorb (``0.401*cos(x0)`` for ``0.3979*cos(x0) +
        0.0068`` at 1% noise). A law that holds an offset already gains nothing from another.
        Noiseless readings need no such test: the search sees any offset itself."""
        shifted = self._fitted(Expr(("add", CONST_TOKEN) + law.expr.tokens), np.r_[0.0, law.constants],
                               law.schedule, data, val)
        X, y = data.X[0], data.y[0]
        assert self.lab.noise is not None
        noise = self.lab.noise.std(y)
        without = evaluate(law.expr.tokens, X, law.constants)
        with_ = evaluate(shifted.expr.tokens, X, shifted.constants)
        return law if consistent(y, without, with_, noise, restrictions=1) else shifted

    def _with_terms(self, law: Fitted, data: Trials, val: Trials, limit: int) -> Fitted:
        """``law`` plus the terms its final readings, many more than a round's, show it lacks: a
        term too small beside the law's others for a round's noisy readings to show (``2*x0 -
        x1*x2 - x3`` beside ``x1*exp(x0)``, up to 2e5, at 1% noise: livermore2/Vars4-22) is plain
        in thousands. Chosen one at a time among the pieces of one variable (:func:`_terms`) and
        the products and ratios of two, each the one that explains most of what the law leaves
        with its own constants and an offset free to move, while the readings rule out its
        absence beyond what chance gives the best of so many (:func:`chance_rise`). The law with
        them is then fitted whole, and kept if the readings still rule out their absence and it
        fits the validation data to the floor; with an offset only where they rule out its
        absence too (:meth:`_with_offset`'s test: left free, an offset missing from the law is
        not taken for a term, 0.000561*x0 for sincos-3-2-2/4's 0.0068)."""
        assert self.lab.noise is not None
        if not {"add", "mul"} <= set(self.operators):
            return law
        on = data.mask[0]
        X, y = data.X[0][on], data.y[0][on]
        w = 1.0 / self.lab.noise.std(y)
        pieces = _terms(self.grammar(frozenset()), X) + _products(self.operators, self.n_vars)
        if not (np.all(np.isfinite(w)) and len(y) > len(law.constants) + len(pieces) + 1):
            return law
        with np.errstate(all="ignore"):
            on_law, grads = evaluate_with_grad(law.expr.tokens, X[None], law.constants[None], range(len(law.constants)))
            values = np.stack([evaluate(p, X, np.ones(1)) for p in pieces], axis=1)
        left = (y - on_law[0]) * w  # in noise standard deviations: its squares are chi-square
        # The law's constants and an offset move with any term: what they explain is no term's.
        slopes, slope_scale = _unit_columns(np.stack([np.ones(len(y))] + [g[0] for g in grads], axis=1), w)
        columns, scale = _unit_columns(values, w)
        usable, told = np.isfinite(scale) & (scale > 0), np.isfinite(slope_scale) & (slope_scale > 0)
        if not (np.isfinite(left).all() and usable.any()):
            return law
        pieces, columns, scale = [p for p, ok in zip(pieces, usable) if ok], columns[:, usable], scale[usable]
        slopes, slope_scale = slopes[:, told], slope_scale[told]  # a constant the readings do not move: none
        unit = columns.copy()
        u, sv, _ = np.linalg.svd(slopes, full_matrices=False)
        basis = u[:, sv > 1e-10 * sv[0]]
        left = left - basis @ (basis.T @ left)
        columns = columns - basis @ (basis.T @ columns)
        chance = chance_rise(1, len(pieces))
        chosen: list[int] = []
        for _ in range(limit):
            size = np.einsum("mc,mc->c", columns, columns)
            gain = np.where(size > 1e-12, (left @ columns) ** 2 / np.where(size > 0, size, 1.0), 0.0)
            gain[chosen] = 0.0
            best = int(np.argmax(gain))
            if not gain[best] > chance:
                break
            chosen.append(best)
            q = columns[:, best] / math.sqrt(size[best])
            left = left - (left @ q) * q
            columns = columns - np.outer(q, q @ columns)
        if not chosen:
            return law
        # Started where least squares puts the offset and the terms beside the law's constants.
        step = np.linalg.lstsq(np.hstack([slopes, unit[:, chosen]]), (y - on_law[0]) * w, rcond=None)[0]
        moved = np.zeros(1 + len(law.constants))
        moved[told] = step[: told.sum()] / slope_scale
        body = ("add",) + law.expr.tokens + _sum_of([pieces[i] for i in chosen])
        start = np.r_[moved[0], law.constants + moved[1:], step[told.sum():] / scale[chosen]]
        base = self._fitted(Expr(("add", CONST_TOKEN) + law.expr.tokens), np.r_[moved[0], law.constants],
                            law.schedule, data, val)
        grown = self._fitted(Expr(("add", CONST_TOKEN) + body), start, law.schedule, data, val)
        with np.errstate(all="ignore"):
            on_base, on_grown = (evaluate(f.expr.tokens, X, f.constants) for f in (base, grown))
        if consistent(y, on_base, on_grown, 1.0 / w, len(chosen), len(pieces)) or not self._fits_to_floor(grown, val):
            return law
        bare = self._fitted(Expr(body), grown.constants[1:], law.schedule, data, val)
        with np.errstate(all="ignore"):
            on_bare = evaluate(bare.expr.tokens, X, bare.constants)
        return bare if consistent(y, on_bare, on_grown, 1.0 / w) and self._fits_to_floor(bare, val) else grown

    def _precision_points(self, law: Fitted, data: Trials, cap: int) -> Design | None:
        """Set points (in the search's units) whose readings bring the law's constants to
        ``precision`` (relative standard error), at most ``cap`` of them and as the budget
        allows, half placed where they tell the constants most
        (:func:`rcvgp.design.precision_design`); None if the constants are precise enough.
        Only an active search can choose where to measure."""
        cfg, lab = self.config, self.lab
        errors = self._relative_errors(law, data)
        largest = _largest_told(errors)
        if errors is None or largest is None or largest <= cfg.precision or cap <= 0:
            return None
        assert lab.noise is not None
        n = max(_CANDIDATES, 64 * len(law.constants))
        return precision_design(law.expr.tokens, law.constants, data.X[0][data.mask[0]],
                                design_points(lab.design, n, self.rng), edge_points(lab.design, n, self.rng),
                                lab.noise, np.isfinite(errors), cfg.precision, min(cap, lab.room()),
                                self.rng)

    def _structures(self) -> list[list[_Structure]]:
        """The structures to refit at the end, one list per start (one without restarts): each
        start's :meth:`_hall_front`, or, if the run stopped before any variable was free of
        control, its best individuals. A tree two starts share is refitted once."""
        halls = [hall for hall in self.past_halls + [self.hall] if hall]
        pools = [self._hall_front(hall) for hall in halls] or [_rank(self.current)[: self.config.hall_of_fame]]
        seen: set[tuple[str, ...]] = set()
        return [_as_structures(pool, seen) for pool in pools]

    def _hall_front(self, hall: dict[int, Individual]) -> list[Individual]:
        """The best fit of each size, kept if it beats every smaller one (the ``hall_of_fame``
        most accurate if there are more)."""
        return front_of(hall.values(), lambda ind: (len(ind.expr), ind.fitness))[-self.config.hall_of_fame:]

    def _fitted(
        self, expr: Expr, start: np.ndarray | None, schedule: tuple[frozenset[int], ...], data: Trials, val: Trials
    ) -> Fitted:
        """A structure fitted on ``data`` (started from the search's own fit, not from 1.0) and
        predicted on the validation points."""
        cfg = self.config
        fit = fit_constants(expr.tokens, data, cfg.optimizer, self.rng, init=start, maxiter=10 * cfg.fit_iterations)
        consts = fit.constants[0]
        pred = evaluate(expr.tokens, val.X[0], consts)
        nmse = regression_metrics(val.y[0], pred)["nmse"]
        return Fitted(expr, consts, schedule, float(fit.losses[0]), pred, nmse if nmse == nmse else math.inf)

    def _pruned_law(self, entry: Fitted, data: Trials, val: Trials, noise: np.ndarray) -> Fitted:
        """The fit with every subtree made one constant, and every operator replaced by one of
        its children, where that leaves it not distinguishably worse on the validation points
        (biggest subtrees first, each compared with the fit as it came, so that small losses
        cannot add up), or where the subtree did nothing: the tree without it fits ``data`` as
        well (:data:`~rcvgp.search.choice.SAME_FIT`) and is not distinguishably worse on all
        the readings.

        Far from the noise floor, two fits of an approximation differ on the validation points
        by which of them happens to suit those points: ``(exp(c) + c)*sqrt(L)``, two constants
        of 1e12 cancelling that no refit can move, read a little better there than ``c*sqrt(L)``
        refitted. Fitting as well alone is not enough: an exponential fitted where it is small
        can fit its data to rounding and read 1e58 at a validation point."""
        assert self.lab.noise is not None
        y = np.concatenate([data.y[0], val.y[0]])
        every_noise = np.concatenate([self.lab.noise.std(data.y[0]), noise])

        def everywhere(fit: Fitted) -> np.ndarray:
            return np.concatenate([evaluate(fit.expr.tokens, data.X[0], fit.constants), fit.prediction])

        on_all, weighted = everywhere(entry), self.lab.weighted
        law, shrunk = entry, True
        while shrunk:
            shrunk = False
            for child in deletions(law.expr) + hoists(law.expr):
                init = inherited_constants(law.expr, law.constants[None], child)
                fitted = self._fitted(child, init[0], law.schedule, data, val)
                if (not_worse(val.y[0], fitted.prediction, entry.prediction, noise, weighted)
                        or (fitted.loss <= entry.loss * (1 + SAME_FIT)
                            and not_worse(y, everywhere(fitted), on_all, every_noise, weighted))):
                    law, shrunk = fitted, True
                    break
        return law

    def symbols(self) -> list[sympy.Symbol]:
        """The oracle's variables as sympy symbols that know their declared support, so that
        sqrt(x**2) is x (not Abs(x)) where x is positive."""
        return [domain_symbol(v) for v in self.spec.variables]

    def in_units(self, expr: sympy.Expr) -> sympy.Expr:
        """An expression of the search's units in the oracle's: each variable divided by its scale."""
        names = self.symbols()
        swap = {names[j]: names[j] / _power(s) for j, s in enumerate(self.lab.x_scale) if s != 1}
        return expr.xreplace(swap) if swap else expr

    def candidate(self, fitted: Fitted, expr: sympy.Expr, names: Sequence[sympy.Symbol], chosen: bool) -> Candidate:
        """The printed forms of a fitted tree (``expr``: its sympy form in the oracle's units)."""
        schedule = tuple(tuple(str(names[i]) for i in sorted(c)) for c in fitted.schedule)
        if not schedule or schedule[-1]:
            schedule = schedule + ((),)
        shown = round_floats(expr, 6)
        return Candidate(
            expression=str(shown),
            latex=sympy.latex(shown),
            sympy_expr=expr,
            schedule=schedule,
            complexity=fitted.complexity,
            loss=fitted.loss,
            nmse_validation=fitted.nmse_validation,
            chosen=chosen,
        )


def _power(scale: float) -> sympy.Expr:
    """A scale as a float, so that it merges into the law's constants (an exact 10**-3 would
    stay apart as a factor: ``x/1000``)."""
    return sympy.Float(scale)


def _frozen_but_constants(expr: Expr) -> bool:
    """Whether every node but some constants is frozen, and one constant is not."""
    open_ = [t for t, f in zip(expr.tokens, expr.frozen) if not f]
    return bool(open_) and all(t == CONST_TOKEN for t in open_)


#: Unary operators whose argument's scale factors out: u(c*x) = u(c)*u(x).
_HOMOGENEOUS = frozenset({"n2", "n3", "n4", "n5", "sqrt", "inv"})


def _pieces(g: Grammar) -> list[tuple[Expr, str]]:
    """The small functions :meth:`Run.expansions` grows an open constant into, over ``g``'s
    free variables and operators (see there), each with its kind: the unary operator in it,
    "pole" for a pole or a saturation, "" for neither."""
    c = (CONST_TOKEN,)
    out: list[tuple[Expr, str]] = []
    for v in g.free_vars:
        x = (f"x{v}",)
        inner = [("mul",) + c + x] + ([("div",) + c + x] if "div" in g.operators else [])
        for arg in inner:
            for u in ((),) + tuple((op,) for op in g.unary):
                # A power's inner scale is its coefficient's (c*(c*x)**2 is c*x**2, c*(c/x)**2 is
                # c/x**2): a constant fewer, which at the floor ranks it above a curve as small (a
                # pendulum's c + c*theta**2 over the pole c + c/(c + theta)), and no two that
                # only their product pins (LM stalled on c*sqrt(c/v), NMSE 5.6).
                kind = u[0] if u else ""
                if not u:
                    term = arg
                elif kind in _HOMOGENEOUS:
                    term = ("mul",) + c + u + arg[2:] if arg[0] == "mul" else ("div",) + c + u + arg[2:]
                else:
                    term = ("mul",) + c + u + arg
                out.append((Expr(term), kind))
                if "add" in g.operators:
                    out.append((Expr(("add",) + c + term), kind))
        if {"add", "div"} <= set(g.operators):
            # A pole c/(c + x) and a saturation c*x/(c + x): the commonest laws no unit-argument
            # piece or sum of them holds; under noise a sum of them fits one as a series
            # (Michaelis-Menten came back as nine terms of S and Km). Written to end in x: a
            # piece ending in c would inherit the value of the constant it replaces there
            # (:func:`inherited_constants` matches the tokens at either end), not scan for it.
            for term in (("div",) + c + ("add",) + c + x, ("div", "mul") + c + x + ("add",) + c + x):
                out += [(Expr(term), "pole"), (Expr(("add",) + c + term), "pole")]
    return out


def _open_subtree_consts(expr: Expr) -> list[int]:
    """Indices of the constants in ``expr``'s first largest subtree with a variable and no
    frozen node: the piece a step grew."""
    for start in range(len(expr)):
        end = subtree_end(expr.tokens, start)
        if not any(expr.frozen[start:end]) and any(is_var(t) for t in expr.tokens[start:end]):
            before = sum(t == CONST_TOKEN for t in expr.tokens[:start])
            return list(range(before, before + sum(t == CONST_TOKEN for t in expr.tokens[start:end])))
    return []


def _inner_pieces(g: Grammar) -> dict[int, list[Expr]]:
    """For each of ``g``'s free variables x, what :meth:`Run._grown` puts in place of x in a
    piece for a function of a piece: ``c + x`` and each unary operator of it, ``u(c*x)``,
    ``c + u(c*x)`` and ``u(c + c*x)`` (a Fermi function's ``c/(c + exp(c + c*x))``, whose offset
    ``exp(-20)`` no scan reaches); where the inner scale factors out (a power, a log), ``u(x)``,
    ``c + u(x)``, ``c - u(x)``, ``u(c + x)`` and ``u(c - x)`` (the Gaussian's
    ``exp(c*(c + x)**2)``); and a power ``exp(c*log(x))``."""
    c = (CONST_TOKEN,)
    out: dict[int, list[Expr]] = {}
    for v in g.free_vars:
        x = (f"x{v}",)
        forms = [("add",) + c + x, ("exp", "mul") + c + ("log",) + x]  # and a power of its own
        for u in g.unary:
            if u in _HOMOGENEOUS or u == "log":
                # Both signs: the scale that would give one goes outside only when positive
                # (sqrt(c - v**2) of a Lorentz factor).
                forms += [(u,) + x] + [(op,) + c + (u,) + x for op in ("add", "sub")]
                forms += [(u, op) + c + x for op in ("add", "sub")]
            else:
                forms += [(u, "mul") + c + x, ("add",) + c + (u, "mul") + c + x, (u, "add") + c + ("mul",) + c + x]
        out[v] = [Expr(f) for f in forms if all(arity(t) == 0 or t in g.operators for t in f)]
    return out


def _largest_told(errors: np.ndarray | None) -> float | None:
    """The largest of relative standard ``errors`` (inf for a constant not told from zero) over
    the constants told; None if there is none."""
    told = np.empty(0) if errors is None else errors[np.isfinite(errors)]
    return float(told.max()) if told.size else None


def _pursued(ind: Individual, trials: Trials, open_: Sequence[int], pieces: Sequence[tuple[str, ...]],
             limit: int) -> list[tuple[int, tuple[str, ...]]]:
    """The sums of ``pieces`` (each beside a constant) that ``ind``'s open constants ``open_``
    (jointly linear) may become to fit ``trials`` to the noise floor, with at most ``limit``
    pieces in all, as (constant, piece) pairs; empty where none is found. Chosen one piece at a
    time, each the one that explains most of what those before it leave, every trial at once
    (orthogonal matching pursuit), and judged by projection alone: precise where one
    least-squares fit of every piece would not be (tens of nearly dependent columns)."""
    fit, X, K = ind.fit, trials.X, trials.n_trials
    on = trials.mask
    weight = on / trials.spread[:, None] * (1.0 if trials.weight is None else trials.weight)
    with np.errstate(all="ignore"):
        _, slopes = evaluate_with_grad(ind.expr.tokens, X, fit.constants, open_)
        # Jointly linear: the tree is what its open constants do not touch plus each times its slope.
        rest = evaluate(ind.expr.tokens, X, fit.constants) - sum(
            fit.constants[:, [k]] * slope for k, slope in zip(open_, slopes))
        flat = X.reshape(-1, X.shape[-1])
        pool = [(k, p) for k in open_ for p in [(CONST_TOKEN,), *pieces]]
        columns = np.stack([slopes[open_.index(k)] * evaluate(p, flat, np.ones(1)).reshape(K, -1)
                            for k, p in pool], axis=-1)
        columns = np.where(on[..., None], columns, 0.0) * weight[..., None]
        left = np.where(on, trials.y0 - rest, 0.0) * weight
    if not (np.isfinite(columns).all() and np.isfinite(left).all()):
        return []
    scale = np.einsum("kmc,kmc->kc", columns, columns)
    n_valid = np.maximum(trials.n_valid, 1)
    chosen: list[int] = []
    for i in range(len(open_) + limit):
        if i < len(open_):
            best = i * (len(pieces) + 1)  # each open constant's own constant first
        else:
            size = np.einsum("kmc,kmc->kc", columns, columns)
            gain = np.where(size > 1e-12 * scale, np.einsum("km,kmc->kc", left, columns) ** 2
                            / np.where(size > 0, size, 1.0), 0.0).sum(axis=0)
            gain[chosen] = 0.0
            best = int(np.argmax(gain))
            if not gain[best] > 0:
                return []
        chosen.append(best)
        q = columns[..., best] / np.sqrt(np.maximum(np.einsum("km,km->k", columns[..., best], columns[..., best]),
                                                    1e-300))[:, None]
        left = left - np.einsum("km,km->k", left, q)[:, None] * q
        columns = columns - q[..., None] * np.einsum("km,kmc->kc", q, columns)[:, None, :]
        if i >= len(open_) and np.all(np.einsum("km,km->k", left, left) / n_valid <= trials.floor.level):
            return [pool[j] for j in chosen[len(open_):]]
    return []


def _terms(g: Grammar, points: np.ndarray, nested: bool = False) -> list[tuple[str, ...]]:
    """Every piece of ``g``'s free variables with a coefficient in front, for a sum
    (:meth:`Run._summed`): ``c*x``, ``c*u(x)`` for each unary operator u, ``c/x`` and
    ``c*u(x)/x``, and with ``nested`` then ``c*u(w(x))`` and ``c*u(w(x))/x`` for each pair of
    them; only those finite at every one of ``points`` (n, n_vars) and not a multiple of one
    before them there (``n2(x)/x`` is ``x``, ``exp(log(x))`` too), and none without add and mul.
    Unit arguments: the pieces with a scale of their own are :func:`_pieces`."""
    if not {"add", "mul"} <= set(g.operators) or not len(points):
        return []  # no sum to build, or no reading to judge a piece by (every one failed)
    c = CONST_TOKEN
    over = "div" in g.operators
    out: list[tuple[str, ...]] = []
    for v in g.free_vars:
        x = f"x{v}"
        pieces = [("mul", c, x)] + [("mul", c, u, x) for u in g.unary]
        if over:
            # A piece over its variable too: sin(x)/x, exp(x)/x are as common in laws as their
            # parts, and with them a coefficient such as 1 - sin(x2)/x2 is one sum, not a series.
            pieces += [("div", c, x)] + [("div", "mul", c, u, x, x) for u in g.unary]
        if nested:
            twice = [(u, w, x) for u in g.unary for w in g.unary]
            pieces += [("mul", c, *f) for f in twice] + ([("div", "mul", c, *f, x) for f in twice] if over else [])
        # The sum's own constant first: sqrt(x**2)/x is not a piece.
        directions = [np.full(len(points), 1 / math.sqrt(len(points)))]
        for p in pieces:
            with np.errstate(all="ignore"):
                column = evaluate(p, points, np.ones(1))
            largest = np.max(np.abs(column))
            if not (np.isfinite(column).all() and largest > 0):
                continue
            direction = column / largest  # first, so that the norm of exp(x) near 700 stays finite
            direction *= np.sign(direction[np.flatnonzero(direction)[0]]) / np.linalg.norm(direction)
            if not any(np.allclose(direction, d, rtol=0, atol=1e-12) for d in directions):
                directions.append(direction)
                out.append(p)
    return out


def _unphased(expr: Expr) -> Expr | None:
    """``expr`` with every ``u(A + c)`` (u sin or cos, c an open constant, A any subtree; ``A - c``
    and ``c +- A`` too) and the open coefficient in front of it, if any, rewritten as
    ``c*sin(A) + c*cos(A)``: the same family, linear in the new constants where the phase was
    not. An amplitude and a phase that both change with a freed variable
    (``0.61*x1*sin(x0) - 0.59*cos(x0)`` as ``a(x1)*sin(x0 + p(x1))``) are then two coefficients
    a sum of pieces can each stand for. None if ``expr`` has no open phase."""
    tokens, frozen = expr.tokens, expr.frozen

    def is_open(start: int) -> bool:
        return tokens[start] == CONST_TOKEN and not frozen[start]

    def phase_argument(start: int) -> tuple[int, int] | None:
        """The span of A if ``start`` is ``u(A +- c)`` or ``u(c +- A)`` with c open."""
        if tokens[start] not in ("sin", "cos") or tokens[start + 1] not in ("add", "sub"):
            return None
        left = start + 2
        right = subtree_end(tokens, left)
        if is_open(right):
            return left, right
        if is_open(left):
            return right, subtree_end(tokens, right)
        return None

    # In prefix order a product comes before its factors: a wave with an open coefficient is
    # rewritten with it.
    for start in range(len(tokens)):
        if tokens[start] == "mul" and is_open(start + 1):
            wave = start + 2
        elif tokens[start] == "mul" and is_open(subtree_end(tokens, start + 1)):
            wave = start + 1
        else:
            wave = start
        span = phase_argument(wave)
        if span is None:
            continue
        a, a_frozen = tokens[span[0]:span[1]], frozen[span[0]:span[1]]
        both = Expr(("add", "mul", CONST_TOKEN, "sin") + a + ("mul", CONST_TOKEN, "cos") + a,
                    (True, True, False, True) + a_frozen + (True, False, True) + a_frozen)
        rewritten = expr.replace(start, both)
        return _unphased(rewritten) or rewritten
    return None


class _Node(NamedTuple):
    """A tree node for :func:`_linearized`; ``values`` (K,) are an open constant's, per trial."""

    token: str
    frozen: bool
    kids: tuple[_Node, ...] = ()
    values: np.ndarray | None = None


def _linearized(expr: Expr, constants: np.ndarray) -> tuple[Expr, np.ndarray] | None:
    """``expr`` (frozen but some open constants, fitted to ``constants`` (K, n_consts)) rewritten
    so that more of its open constants are coefficients a sum of pieces can stand for, with
    their values; None if there is nothing to rewrite. A subtree of open constants without a
    variable becomes one (``c*sin(c)``, which GP makes for a plain constant), an open
    coefficient of a sum is multiplied into its terms (``c*(x1 + c*sin(x1))`` becomes
    ``c*x1 + c*sin(x1)``), and two open factors of a product become one. The new tree fits at
    least what the old one fits: its coefficients are free where the old ones were products."""
    K = len(constants)
    columns = iter(constants.T)

    def nest(i: int) -> tuple[_Node, int]:
        t, j, kids = expr.tokens[i], i + 1, []
        for _ in range(arity(t)):
            kid, j = nest(j)
            kids.append(kid)
        values = next(columns) if t == CONST_TOKEN else None
        return _Node(t, expr.frozen[i], tuple(kids), values), j

    def flat(n: _Node) -> tuple[tuple[str, ...], tuple[bool, ...], list[np.ndarray]]:
        tokens, frozen, values = [n.token], [n.frozen], [] if n.values is None else [n.values]
        for kid in n.kids:
            t, f, v = flat(kid)
            tokens += t
            frozen += f
            values += v
        return tuple(tokens), tuple(frozen), values

    def is_open(n: _Node) -> bool:
        return n.values is not None and not n.frozen

    def has(n: _Node, test: Callable[[_Node], bool]) -> bool:
        return test(n) or any(has(k, test) for k in n.kids)

    def linear(n: _Node) -> bool:
        """Whether ``n`` is linear in one of its open constants (fixed ones are literals)."""
        return bool(linear_constants(flat(n)[0]))

    def opened(values: np.ndarray) -> _Node:
        return _Node(CONST_TOKEN, False, (), values)

    def product(k: _Node, other: _Node) -> _Node | None:
        """``k * other``, k an open constant, folded or multiplied into a sum; None if it is
        neither."""
        if is_open(other):
            return opened(k.values * other.values)
        if other.token == "mul" and any(is_open(f) for f in other.kids):
            a, b = other.kids if is_open(other.kids[0]) else other.kids[::-1]
            return times(opened(k.values * a.values), b)
        if other.token == "neg":
            return times(opened(-k.values), other.kids[0])
        if other.token in ("add", "sub") and any(linear(part) for part in other.kids):
            return _Node(other.token, True, tuple(times(k, part) for part in other.kids))
        return None

    def times(k: _Node, other: _Node) -> _Node:
        return product(k, other) or _Node("mul", True, (k, other))

    def rewrite(n: _Node) -> _Node:
        n = n._replace(kids=tuple(rewrite(k) for k in n.kids))
        if n.kids and not has(n, lambda m: is_var(m.token)) and has(n, is_open):
            tokens, _, values = flat(n)
            with np.errstate(all="ignore"):
                return opened(evaluate(tokens, np.zeros((K, 1, 1)), np.column_stack(values))[:, 0])
        if n.token == "mul" and any(is_open(k) for k in n.kids):
            a, b = n.kids if is_open(n.kids[0]) else n.kids[::-1]
            return product(a, b) or n
        if n.token == "div" and is_open(n.kids[1]):
            with np.errstate(all="ignore"):
                return times(opened(1.0 / n.kids[1].values), n.kids[0])
        if n.token == "neg" and n.kids[0].token == "mul" and any(is_open(k) for k in n.kids[0].kids):
            return times(opened(-np.ones(K)), n.kids[0])
        return n

    tokens, frozen, values = flat(rewrite(nest(0)[0]))
    if tokens == expr.tokens or not all(np.isfinite(v).all() for v in values):
        return None
    return Expr(tokens, frozen), np.column_stack(values) if values else np.empty((K, 0))


def _unit_columns(values: np.ndarray, weight: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Each column of ``values`` (m, c) times ``weight`` (m,) and made of unit length, with what
    it was divided by (not finite, or 0, for a column that is); without squaring numbers that
    overflow (readings in units of 1e-200 weigh 1e201 each)."""
    with np.errstate(all="ignore"):
        peak, heaviest = np.max(np.abs(values), axis=0), np.max(weight)
        out = values / peak * (weight / heaviest)[:, None]
        length = np.linalg.norm(out, axis=0)
        return out / length, peak * heaviest * length


def _products(operators: Sequence[str], n_vars: int) -> list[tuple[str, ...]]:
    """``c*x*v`` for each pair of variables and, with div, ``c*x/v`` for each ordered pair."""
    pairs = [("mul", CONST_TOKEN, "mul", f"x{i}", f"x{j}") for i, j in itertools.combinations(range(n_vars), 2)]
    if "div" in operators:
        pairs += [("mul", CONST_TOKEN, "div", f"x{i}", f"x{j}") for i, j in itertools.permutations(range(n_vars), 2)]
    return pairs


def _sum_of(pieces: Sequence[tuple[str, ...]]) -> tuple[str, ...]:
    """``p1 + p2 + ...`` as prefix tokens."""
    tokens = pieces[-1]
    for piece in reversed(pieces[:-1]):
        tokens = ("add",) + piece + tokens
    return tokens


def inherited_constants(parent: Expr, constants: np.ndarray, child: Expr, fresh: float = 1.0) -> np.ndarray:
    """Starting values (K, n_child) for a child's constants: those in the tokens it shares with
    its parent at either end (all but the edited subtree, for a mutation or crossover) keep the
    parent's fitted values, the others (and any not finite) start at ``fresh``: 1, as every fit
    from scratch does, or NaN, which has the fit scan for a start
    (:func:`rcvgp.constants.fit_constants`). A child started where its parent ended needs a few
    iterations, not twenty, and a short screen no longer rejects it for being fitted from
    scratch."""
    a, b = parent.tokens, child.tokens
    shortest = min(len(a), len(b))
    head = 0
    while head < shortest and a[head] == b[head]:
        head += 1
    tail = 0
    while tail < shortest - head and a[-1 - tail] == b[-1 - tail]:
        tail += 1
    start = np.full((len(constants), child.n_consts), fresh)
    n_head = sum(t == CONST_TOKEN for t in b[:head])
    n_tail = sum(t == CONST_TOKEN for t in b[len(b) - tail :])
    start[:, :n_head] = constants[:, :n_head]
    if n_tail:
        start[:, child.n_consts - n_tail :] = constants[:, parent.n_consts - n_tail :]
    return np.where(np.isfinite(start), start, fresh)


def _as_good(trials: Trials, new: np.ndarray, old: np.ndarray) -> bool:
    """Whether predictions ``new`` (K, m) fit every trial as well as ``old``, as far as the
    noise can tell (:func:`rcvgp.noisefloor.not_worse`; rounding, with no noise)."""
    noise = trials.noise_std if trials.noise_std is not None else np.zeros_like(trials.y)
    return all(not_worse(trials.y[k], new[k], old[k], noise[k], trials.weighted) for k in range(trials.n_trials))


def _median_start(constants: np.ndarray) -> np.ndarray | None:
    """One starting vector from a fit on K trials: NaN (no start known) where it is not finite;
    None if the tree has no constants."""
    if not constants.size:
        return None
    start = np.median(constants, axis=0)
    return np.where(np.isfinite(start), start, np.nan)


def summary_constants(constants: np.ndarray, eps: float) -> np.ndarray:
    """Which constants are summary constants: their fitted values over the K trials spread by
    more than ``eps`` relative to their mean (std / |mean|); the others are standalone."""
    c = np.asarray(constants, dtype=float)
    if c.size == 0:
        return np.zeros(c.shape[-1] if c.ndim == 2 else 0, dtype=bool)
    with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
        # In units of each constant's largest value: squares of constants of 1e-200 (as fitted
        # to readings of 1e-200) vanish, and of 1e200 overflow.
        unit = np.abs(c).max(axis=0)
        u = c / np.where(unit > 0, unit, 1.0)
        spread = u.std(axis=0)
        scale = np.abs(u.mean(axis=0))
    return ~(spread <= eps * np.maximum(scale, 1e-300))
