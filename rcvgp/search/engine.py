"""The machinery every search shares: the metered lab, the fitness cache, the GP generation loop,
FreezeEquation, and the final choice on validation data scored once on test data.

A search is a :class:`Run`: it owns the oracle (through a :class:`Lab` that designs trials,
counts points and requests, and enforces the budget), the random generator, the hall of fame
and the stop rules. The methods in :mod:`rcvgp.search.racing` drive it.
"""

from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np
import sympy

from rcvgp.constants import FitResult, Trials, fit_constants, linear_constants
from rcvgp.errors import BudgetExhausted, ConfigError, OracleError
from rcvgp.evaluate import evaluate
from rcvgp.gp import Grammar, crossover, deletions, mutate, random_term, random_tree, tournament
from rcvgp.metrics import regression_metrics, round_floats
from rcvgp.operators import DEFAULT_OPERATORS, resolve_operators
from rcvgp.oracle import DataOracle, OracleSpec, check_reply, design_points, design_trials
from rcvgp.search.base import Candidate, Progress, ProgressCallback, SearchConfig, SearchResult
from rcvgp.timelimit import TimeUp, time_limit
from rcvgp.tree import CONST_TOKEN, Expr, reopened

__all__ = ["Lab", "Individual", "Run", "StopSearch"]

_SCREEN_ITERATIONS = 3
#: Generations the last round goes on after its best tree fits exactly without getting smaller.
_EXACT_PATIENCE = 3
#: A tree with a subtree deleted gets its full fit only if its screen reaches this loss: a
#: deletion that keeps an exact fit exact is near-exact from the parent's constants already.
_PRUNE_SCREEN = 1e-6
#: FreezeEquation's factoring: the trials' curves must be offsets and scales of one curve to
#: within this fraction of their variance (exact fits are ~1e-30; a missing term is ~1e-3).
_AFFINE_TOL = 1e-10


class StopSearch(Exception):
    """Raised inside a run to end it early with the best so far; ``reason`` goes in the result."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class Lab:
    """The search's side of the oracle: designs trials, measures them once per controlled set and
    round, counts points and requests, and keeps the budget.

    ``reserve`` points of the budget are kept for the final fit, validation and test sets, so a
    spent budget still ends with a scored result.
    """

    def __init__(
        self, oracle: DataOracle, config: SearchConfig, rng: np.random.Generator, holds_variables: bool = True
    ) -> None:
        self.oracle = oracle
        self.spec: OracleSpec = oracle.describe()
        self.config = config
        self.rng = rng
        self.points = 0
        self.requests = 0
        self.failed = 0
        self.reserve = config.batch + config.n_validation + config.n_test
        self._trials: dict[frozenset[int], Trials] = {}
        # The first request is one set of trials: a single trial if nothing is ever held.
        first = self.n_trials(holds_variables and self.spec.n_vars > 1)
        if config.max_points is not None and config.max_points < self.reserve + config.batch * first:
            trials = f"one set of {first} trials" if first > 1 else "one trial"
            raise ConfigError(
                f"budget `max_points` = {config.max_points} is too small: a run needs at least "
                f"{self.reserve + config.batch * first} ({trials} of "
                f"{config.batch} points, plus {self.reserve} for the final fit, validation and test)"
            )

    def new_round(self) -> None:
        """Forget this round's trials: the next request for a controlled set measures anew."""
        self._trials.clear()

    def n_trials(self, holding: bool) -> int:
        """Trials per set: K while a variable is held; one with none held, where K trials would
        be K samples of one experiment (one fits about as well in 13-25% less time,
        benchmarks/RESULTS.md)."""
        return self.config.n_trials if holding else 1

    def trials(self, controlled: frozenset[int]) -> Trials:
        """The K trials of this round for a controlled set (one if no variable is held), measured
        on first use."""
        found = self._trials.get(controlled)
        if found is None:
            cfg = self.config
            X = design_trials(self.spec, controlled, self.n_trials(bool(controlled)), cfg.batch, self.rng)
            flat, y = self.measure(X.reshape(-1, self.spec.n_vars))
            found = Trials(flat.reshape(X.shape), y.reshape(X.shape[:2]), controlled)
            self._trials[controlled] = found
        return found

    def cached_trials(self, controlled: frozenset[int]) -> Trials | None:
        return self._trials.get(controlled)

    def fresh_points(self, n: int, reserved: bool = False) -> tuple[np.ndarray, np.ndarray]:
        """``n`` points with no variable held."""
        return self.measure(design_points(self.spec, n, self.rng), reserved=reserved)

    def measure(self, X: np.ndarray, reserved: bool = False) -> tuple[np.ndarray, np.ndarray]:
        """Measure in requests of at most ``max_rows`` rows; return (X reached, y)."""
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
            reached, y = self.oracle.measure_readback(chunk)
            reached = np.asarray(reached, dtype=float)
            if reached.shape != chunk.shape:
                raise OracleError(
                    f"{self.spec.name}: read-back set points have shape {reached.shape}, expected {chunk.shape}"
                )
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

    @property
    def fitness(self) -> float:
        f = self.fit.fitness
        return f if f == f else math.inf

    @property
    def key(self) -> tuple[tuple[str, ...], frozenset[int]]:
        return self.expr.tokens, self.controlled


def _rank(pop: Iterable[Individual]) -> list[Individual]:
    """Best first, smaller trees first among equals; one of each (tree, controlled set)."""
    seen: dict[tuple[tuple[str, ...], frozenset[int]], Individual] = {}
    for ind in pop:
        if ind.key not in seen or ind.fitness < seen[ind.key].fitness:
            seen[ind.key] = ind
    return sorted(seen.values(), key=_rank_key)


#: Losses below this are rounding noise (an exact fit gives 1e-30 or so): among them the
#: smaller tree wins, which stops exact expressions from bloating with do-nothing subtrees.
EXACT_LOSS = 1e-14


def _rank_key(ind: Individual) -> tuple[float, int]:
    return max(ind.fitness, EXACT_LOSS), len(ind.expr)


class Run:
    """One search's state and the steps the methods are built from."""

    def __init__(
        self,
        method: str,
        oracle: DataOracle,
        config: SearchConfig,
        seed: int,
        progress: ProgressCallback | None = None,
    ) -> None:
        self.method = method
        self.config = config
        self.seed = seed
        self.rng = np.random.default_rng(seed)
        self.lab = Lab(oracle, config, self.rng, holds_variables=method != "gp")
        self.spec = self.lab.spec
        self.n_vars = self.spec.n_vars
        ops = config.operators or self.spec.operators or DEFAULT_OPERATORS
        self.operators = resolve_operators(ops)
        self.progress = progress
        self.started = time.perf_counter()
        self.hall: dict[tuple[str, ...], Individual] = {}
        self.current: list[Individual] = []
        self.round = 0
        self.n_rounds = self.n_vars
        self._cache: dict[tuple[tuple[str, ...], int], FitResult] = {}
        self._cache_data: dict[int, Trials] = {}  # keeps cached data alive, so ids stay unique
        self.best_seen = math.inf

    # --- fitting -------------------------------------------------------------------------
    def grammar(self, controlled: frozenset[int], settled: frozenset[int] = frozenset()) -> Grammar:
        """New nodes may use the free variables, but not the ones a frozen structure has settled."""
        free = tuple(i for i in range(self.n_vars) if i not in controlled and i not in settled)
        return Grammar(self.operators, free, self.config.max_size, self.config.max_depth)

    def fit(
        self, expr: Expr, trials: Trials, threshold: float = math.inf, init: np.ndarray | None = None
    ) -> FitResult:
        """Fit constants, cached per (tree, data set): identical trees are fitted once.

        Trees with nonlinear constants are screened first with a few optimiser iterations from
        ``init`` (K, n_consts) if given; only those that then beat ``threshold`` (the fitness
        needed to survive) get the full fit. Most offspring are rejected by the screen.
        """
        key = (expr.tokens, id(trials))
        found = self._cache.get(key)
        if found is None:
            cfg = self.config
            self._cache_data[id(trials)] = trials
            screen = min(cfg.fit_iterations, _SCREEN_ITERATIONS)
            found = fit_constants(expr.tokens, trials, cfg.optimizer, self.rng, init=init, maxiter=screen)
            nonlinear = len(linear_constants(expr.tokens)) < expr.n_consts
            if nonlinear and cfg.fit_iterations > screen and found.fitness <= threshold:
                found = fit_constants(
                    expr.tokens, trials, cfg.optimizer, self.rng, init=found.constants, maxiter=cfg.fit_iterations
                )
            self._cache[key] = found
        return found

    def individual(
        self,
        expr: Expr,
        controlled: frozenset[int],
        schedule: tuple[frozenset[int], ...],
        threshold: float = math.inf,
        init: np.ndarray | None = None,
        settled: frozenset[int] = frozenset(),
    ) -> Individual:
        fit = self.fit(expr, self.lab.trials(controlled), threshold, init)
        return Individual(expr, controlled, schedule, fit, settled)

    def refit(self, pop: Sequence[Individual]) -> list[Individual]:
        """Every individual fitted anew on this round's trials of its controlled set, started
        from its last fit (the median over the old trials: new trials hold other values)."""
        out = [
            self.individual(
                ind.expr, ind.controlled, ind.schedule, init=_median_start(ind.fit.constants), settled=ind.settled
            )
            for ind in pop
        ]
        self.current = out
        return out

    def initial_pool(self, controlled: frozenset[int], size: int) -> list[Individual]:
        """Random trees over the free variables: half plain, half ``c * t + c``."""
        g = self.grammar(controlled)
        pool: list[Individual] = []
        attempts = 0
        while len(pool) < size and attempts < 20 * size:
            attempts += 1
            depth = int(self.rng.integers(1, 4))
            if attempts % 2:
                expr = random_tree(g, self.rng, depth)
            else:
                term = random_term(g, self.rng, depth)
                expr = Expr(("add",) + term.tokens + ("c",)) if "add" in g.operators else term
            if not expr.variables or not g.fits(expr):
                continue
            pool.append(self.individual(expr, controlled, (controlled,)))
        pool = _rank(pool)
        self.current = self.current + pool
        return pool

    # --- the generation loop ---------------------------------------------------------------
    def evolve(self, pop: list[Individual], n_generations: int, last: bool = False) -> list[Individual]:
        """(mu + lambda) GP: tournament parents, mating within a controlled set, mutation.

        The population grows back to ``population`` if deduplication shrank it. In the ``last``
        round (no variable held) it ends early once the best tree fits exactly and has not got
        smaller for a few generations: the equation is found. Earlier rounds always run in full,
        since their populations seed the next round's schedules."""
        cfg, rng = self.config, self.rng
        size = max(len(pop), cfg.population)
        settled = 0
        for gen in range(n_generations):
            best_before = _rank_key(pop[0]) if pop else None
            fitness = [max(ind.fitness, EXACT_LOSS) for ind in pop]
            survive = max(fitness) if len(pop) >= size else math.inf
            # Mates share the controlled set and the settled variables, so that a swapped subtree
            # brings in only variables its new tree may use.
            groups: dict[tuple[frozenset[int], frozenset[int]], list[int]] = {}
            for i, ind in enumerate(pop):
                groups.setdefault((ind.controlled, ind.settled), []).append(i)
            offspring: list[Individual] = []
            for _ in range(size):
                parent = pop[tournament(fitness, cfg.tournament, rng)]
                g = self.grammar(parent.controlled, parent.settled)
                child = parent.expr
                if rng.random() < cfg.p_mate:
                    among = groups[parent.controlled, parent.settled]
                    mate = pop[tournament(fitness, cfg.tournament, rng, among=among)]
                    pair = crossover(child, mate.expr, g, rng)
                    if pair is not None:
                        child = pair[0]
                if rng.random() < cfg.p_mutate:
                    child = mutate(child, g, rng) or child
                if child.tokens != parent.expr.tokens:
                    init = inherited_constants(parent.expr, parent.fit.constants, child)
                    offspring.append(
                        self.individual(child, parent.controlled, parent.schedule, survive, init, parent.settled)
                    )
                    self.check_time()
            pop = _rank(pop + offspring)[:size]
            self.current = pop
            self.record(pop)
            self.report(gen + 1, pop)
            exact = last and pop[0].fitness <= EXACT_LOSS
            settled = settled + 1 if exact and _rank_key(pop[0]) == best_before else 0
            if settled >= _EXACT_PATIENCE:
                break
        return pop

    def record(self, pop: Iterable[Individual]) -> None:
        """Keep the best expressions with no variable held in the hall of fame."""
        for ind in pop:
            if ind.controlled or not math.isfinite(ind.fitness):
                continue
            old = self.hall.get(ind.expr.tokens)
            if old is None or ind.fitness < old.fitness:
                self.hall[ind.expr.tokens] = ind
        if len(self.hall) > self.config.hall_of_fame:
            keep = _rank(self.hall.values())[: self.config.hall_of_fame]
            self.hall = {ind.expr.tokens: ind for ind in keep}

    def report(self, generation: int, pop: Sequence[Individual]) -> None:
        if pop:
            self.best_seen = min(self.best_seen, pop[0].fitness)
        elapsed = time.perf_counter() - self.started
        if self.progress is not None:
            stop = self.progress(
                Progress(self.method, self.round, self.n_rounds, generation, self.best_seen,
                         self.lab.points, self.lab.requests, elapsed)
            )
            if stop:
                raise StopSearch("interrupted")
        self.check_time()

    def past_cap(self) -> bool:
        cap = self.config.max_seconds
        return cap is not None and time.perf_counter() - self.started > cap

    def check_time(self) -> None:
        """End the run once the wall-time budget is spent (checked after every fit)."""
        if self.past_cap():
            raise StopSearch("time")

    def short_of_time(self, generations_done: int, generations_left: int) -> bool:
        """Whether the generations left would pass the time cap at twice the pace of those done
        (later rounds fit bigger trees on more free variables, so they are slower). Counted in
        generations, not rounds: the last round has half of them."""
        cap = self.config.max_seconds
        if cap is None:
            return False
        elapsed = time.perf_counter() - self.started
        return elapsed + 2 * elapsed / generations_done * generations_left > cap

    # --- FreezeEquation and the schedule ---------------------------------------------------
    def pruned(self, ind: Individual) -> Individual:
        """An exact individual with every editable subtree its fit does not need made one constant.

        Exact trees carry do-nothing parts (``c*x0*cos(x0)`` fitted to zero, say); once frozen,
        they could never be removed, they slow every later fit and take up the room
        (``max_size``) that the variables freed later need. Others are returned as they are."""
        trials = self.lab.cached_trials(ind.controlled)
        if trials is None or not np.all(ind.fit.losses <= EXACT_LOSS):
            return ind
        shrunk = True
        while shrunk:
            shrunk = False
            for child in deletions(ind.expr):
                init = inherited_constants(ind.expr, ind.fit.constants, child)
                fit = self.fit(child, trials, threshold=_PRUNE_SCREEN, init=init)
                self.check_time()
                if np.all(fit.losses <= EXACT_LOSS):
                    ind, shrunk = dataclasses.replace(ind, expr=child, fit=fit), True
                    break
        return ind

    def freeze(self, ind: Individual) -> Individual:
        """FreezeEquation: if every trial fits within eps_loss, freeze the structure except the
        summary constants (those whose value changes across trials); the standalone constants
        become literals at their median value, which no later fit moves (the final fit, on data
        with no variable held, reopens them). When the fit is exact, a
        summary constant stands for a function of the held variables only, so the frozen tree
        records the variables free now as ``settled``: edits grow from its summary constants with
        the variables freed later.

        When two or more summary constants change together, so that every trial's fitted curve
        is ``a + m * g`` of one curve ``g``, the held variables act on the whole expression as
        one offset and one scale: the tree is frozen whole under ``a + m * tree`` and only
        ``a`` and ``m`` stay open. Otherwise finishing the equation would need each of those
        constants expanded into the same sub-expression, one edit at a time."""
        cfg = self.config
        losses = ind.fit.losses
        if not (np.all(np.isfinite(losses)) and np.all(losses <= cfg.eps_loss)):
            return ind
        # Only an exact fit leaves the summary constants nothing but the held variables to stand
        # for; an approximate one may need the free variables in later edits too.
        exact = bool(np.all(losses <= EXACT_LOSS))
        settled = frozenset(range(self.n_vars)) - ind.controlled if exact else ind.settled
        summary = self._unexplained(ind, summary_constants(ind.fit.constants, cfg.eps_const))
        if summary.sum() >= 2:
            factored = self._factor(ind)
            if factored is not None and factored[0].n_consts < summary.sum():
                return dataclasses.replace(ind, expr=factored[0], fit=factored[1], settled=settled)
        expr = ind.expr.fixed(np.median(ind.fit.constants, axis=0), open_=summary)
        fit = FitResult(ind.fit.losses, ind.fit.constants[:, summary], 0)
        return dataclasses.replace(ind, expr=expr, fit=fit, settled=settled)

    def _unexplained(self, ind: Individual, summary: np.ndarray) -> np.ndarray:
        """The summary constants whose spread over the trials the data need. Each in turn is set
        to its median in every trial and counted standalone if no trial's loss rises by more
        than rounding (EXACT_LOSS): an exact fit leaves such leftovers as ``1e-17*x0``, whose
        values scatter around zero, and an open one is fitted to anything in the next round."""
        trials = self.lab.cached_trials(ind.controlled)
        if trials is None or not summary.any():
            return summary
        theta = ind.fit.constants.copy()
        limit = ind.fit.losses + EXACT_LOSS
        out = summary.copy()
        for k in np.flatnonzero(summary):
            pinned = theta.copy()
            pinned[:, k] = np.median(theta[:, k])
            if np.all(trials.losses(evaluate(ind.expr.tokens, trials.X, pinned)) <= limit):
                theta, out[k] = pinned, False
        return out

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
            g = curves[ref]
            if not np.isfinite(curves).all() or not np.std(g) > 0:
                return None
            basis = np.column_stack([np.ones_like(g), g])
            (a, m), *_ = np.linalg.lstsq(basis, curves.T, rcond=None)
            resid = curves - (basis @ np.vstack([a, m])).T
            spread = np.sum((curves - curves.mean(axis=1, keepdims=True)) ** 2, axis=1)
            if not np.all(np.sum(resid**2, axis=1) <= _AFFINE_TOL * spread):
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
            columns.append(a)
        if scaled:
            head += ("mul", CONST_TOKEN)
            columns.append(m)
        # The tree is fixed at the reference trial's constants: a and m carry the other trials.
        tree = ind.expr.fixed(theta[ref])
        frozen = tuple(t != CONST_TOKEN for t in head) + tree.frozen
        return Expr(head + tree.tokens, frozen), FitResult(ind.fit.losses, np.column_stack(columns), 0)

    # --- the end ---------------------------------------------------------------------------
    def finish(self, stopped: str) -> SearchResult:
        """Refit the best structures on data with no variable held, choose on validation data,
        score the choice once on fresh test data."""
        cfg = self.config
        pool = list(self.hall.values()) or list(self.current)
        # The constants FreezeEquation fixed are fitted again, now on data with no variable held,
        # from their frozen values; trees that differ only in those values are one structure.
        structures: list[tuple[Individual, np.ndarray | None]] = []
        seen: set[tuple[str, ...]] = set()
        for ind in _rank(pool):
            start = _median_start(ind.fit.constants)
            tokens, values = reopened(ind.expr.tokens, np.ones(ind.expr.n_consts) if start is None else start)
            if tokens not in seen:
                seen.add(tokens)
                expr = Expr(tokens, ind.expr.frozen)
                structures.append((dataclasses.replace(ind, expr=expr), np.array(values) if values else None))
            if len(structures) >= cfg.hall_of_fame:
                break
        if not structures:
            raise BudgetExhausted("the search stopped before it could fit a single expression")
        final = self.lab.cached_trials(frozenset())
        if final is not None:
            X_fit = final.X.reshape(-1, self.n_vars)
            y_fit = final.y.reshape(-1)
        else:
            X_fit, y_fit = self.lab.fresh_points(cfg.batch, reserved=True)
        X_val, y_val = self.lab.fresh_points(cfg.n_validation, reserved=True)
        X_test, y_test = self.lab.fresh_points(cfg.n_test, reserved=True)
        fit_data = Trials(X_fit[None], y_fit[None])
        scored: list[tuple[float, int, Individual, np.ndarray]] = []
        for ind, start in structures:
            if scored and self.past_cap():
                break  # best structures first: a capped run scores those it has time for
            # Started from the search's own fit, not from 1.0.
            fit = fit_constants(
                ind.expr.tokens, fit_data, cfg.optimizer, self.rng, init=start, maxiter=10 * cfg.fit_iterations
            )
            consts = fit.constants[0]
            pred = evaluate(ind.expr.tokens, X_val, consts)
            nmse = regression_metrics(y_val, pred)["nmse"]
            scored.append((nmse if nmse == nmse else math.inf, len(ind.expr), ind, consts))
        scored.sort(key=lambda s: (s[0], s[1]))
        # A variable that is positive on its whole support is a positive symbol, so that
        # simplify turns sqrt(x**2) into x rather than Abs(x).
        names = [
            sympy.Symbol(v.name, positive=True) if v.only_positive and v.low > 0 else sympy.Symbol(v.name, real=True)
            for v in self.spec.variables
        ]
        # sympy's simplify is slow: only the chosen expression gets it.
        candidates = [
            self.candidate(ind, consts, nmse, names, X_val if rank == 0 else None)
            for rank, (nmse, _, ind, consts) in enumerate(scored)
        ]
        _, _, best, best_consts = scored[0]
        test_metrics = regression_metrics(y_test, evaluate(best.expr.tokens, X_test, best_consts))
        return SearchResult(
            method=self.method,
            seed=self.seed,
            best=candidates[0],
            hall_of_fame=tuple(candidates),
            test_metrics=test_metrics,
            points_measured=self.lab.points,
            requests=self.lab.requests,
            points_failed=self.lab.failed,
            wall_seconds=time.perf_counter() - self.started,
            stopped=stopped,
            config=cfg,
        )

    def candidate(
        self, ind: Individual, consts: np.ndarray, nmse: float, names: Sequence[sympy.Symbol], X_clean: np.ndarray | None
    ) -> Candidate:
        """The printed forms of a fitted tree; with ``X_clean`` (the chosen one only, since
        sympy is slow) negligible terms are dropped and the rest simplified."""
        raw = ind.expr.to_sympy(consts, names)
        simple = simplify(drop_negligible_terms(raw, names, X_clean)) if X_clean is not None else raw
        schedule = tuple(tuple(str(names[i]) for i in sorted(c)) for c in ind.schedule)
        if not schedule or schedule[-1]:
            schedule = schedule + ((),)
        shown = round_floats(simple, 6)
        return Candidate(
            expression=str(shown),
            latex=sympy.latex(shown),
            sympy_expr=simple,
            schedule=schedule,
            nmse_validation=float(nmse),
            size=len(ind.expr),
        )


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


def inherited_constants(parent: Expr, constants: np.ndarray, child: Expr) -> np.ndarray:
    """Starting values (K, n_child) for a child's constants: those in the tokens it shares with
    its parent at either end (all but the edited subtree, for a mutation or crossover) keep the
    parent's fitted values, the others start at 1. A child started where its parent ended
    needs a few iterations, not twenty, and a short screen no longer rejects it for being
    fitted from scratch."""
    a, b = parent.tokens, child.tokens
    shortest = min(len(a), len(b))
    head = 0
    while head < shortest and a[head] == b[head]:
        head += 1
    tail = 0
    while tail < shortest - head and a[-1 - tail] == b[-1 - tail]:
        tail += 1
    start = np.ones((len(constants), child.n_consts))
    n_head = sum(t == CONST_TOKEN for t in b[:head])
    n_tail = sum(t == CONST_TOKEN for t in b[len(b) - tail :])
    start[:, :n_head] = constants[:, :n_head]
    if n_tail:
        start[:, child.n_consts - n_tail :] = constants[:, parent.n_consts - n_tail :]
    return np.where(np.isfinite(start), start, 1.0)


def _median_start(constants: np.ndarray) -> np.ndarray | None:
    """One starting vector from a fit on K trials (None if there is nothing finite to start from)."""
    if not constants.size:
        return None
    start = np.median(constants, axis=0)
    return start if np.isfinite(start).all() else None


def summary_constants(constants: np.ndarray, eps: float) -> np.ndarray:
    """Which constants are summary constants: their fitted values over the K trials spread by
    more than ``eps`` relative to their mean (std / |mean|); the others are standalone."""
    c = np.asarray(constants, dtype=float)
    if c.size == 0:
        return np.zeros(c.shape[-1] if c.ndim == 2 else 0, dtype=bool)
    with np.errstate(over="ignore", invalid="ignore"):  # constants of 1e200 do occur: inf spread, summary
        spread = c.std(axis=0)
        scale = np.abs(c.mean(axis=0))
    return ~(spread <= eps * np.maximum(scale, 1e-300))


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
