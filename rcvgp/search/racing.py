"""The four searches, built from :class:`rcvgp.search.engine.Run`.

- ``racing``: Racing-CVGP (the paper's Algorithm 1). One pool per single free variable; each
  round refits on fresh trials, evolves, keeps the top ``population`` (the race: badly fitting
  schedules die), prunes what exact fits do not need (:meth:`rcvgp.search.engine.Run.pruned`),
  freezes, then frees one more randomly drawn controlled variable per expression, within the
  race's width (about twice as many controlled sets per round as the first round has: see
  :func:`_raced_frees`).
  The summary constants of a frozen tree are expanded only into sub-expressions of the
  variables freed after it was frozen (see :meth:`rcvgp.search.engine.Run.freeze`); a round
  starts by trying, on the best frozen trees, each open constant as the sum of every small such
  sub-expression (kept to those the data need), and as each one alone (frozen with one variable
  held, also each open constant at once as the piece its fitted values over the trials fit
  best) (:meth:`rcvgp.search.engine.Run.expansions`), then evolves.
  With ``restarts`` (2 by default), if no fit with no variable held reaches the noise floor,
  in the search or once the start's front is refitted and pruned as the end will
  (:meth:`rcvgp.search.engine.Run.worth_restarting`), the rounds run again from new random trees
  (:meth:`rcvgp.search.engine.Run.restart`), each start's hall of fame kept: whether GP finds
  a structure depends on its random start.
- ``cvgp``: the fixed schedule ({x1..xn-1}, {x2..xn-1}, ..., {}).
- ``cvgp-all``: every schedule, as a tree that shares common prefixes; data are measured once
  per controlled set and shared by every branch that holds that set.
- ``gp``: plain GP on one data set with no variable held.

The ``generations`` budget is split over the rounds: half to the last round, the only one with
no variable held and the one that yields the answer; the rest evenly over the others (an even
split lost to plain GP on sincos-4-4-6: benchmarks/history.md). A round ends early once its
best fit has sat at the noise floor for a few generations (:meth:`rcvgp.search.engine.Run.evolve`),
and the next round gets the generations it left. Wall time never steers a
search: a time budget only stops it, and the result names the rounds that were not run.
"""

from __future__ import annotations

import concurrent.futures as cf
import math
from collections import Counter
from collections.abc import Callable
from dataclasses import replace

from rcvgp.errors import BudgetExhausted, ConfigError
from rcvgp.oracle import DataOracle
from rcvgp.search.base import METHODS, ProgressCallback, SearchConfig, SearchResult
from rcvgp.search.engine import Individual, Run, StopSearch, _rank
from rcvgp.search.fitting import worker_pool

__all__ = ["run_search", "racing_cvgp", "cvgp", "cvgp_all", "gp"]


#: Controlled sets a round after the first may measure, per variable (the first measures one
#: per variable). Measured (benchmarks/RESULTS.md, session 25): one per variable cut
#: sincos-8-8-12's points by 39% but found 15 of livermore2-n5's 50 runs (two seeds) where one
#: draw per expression found 18; two per variable cut them by 22% and found 16. A narrower race
#: drops schedules that a law of many variables is found on.
RACE_WIDTH = 2


def _split(total: int, parts: int) -> list[int]:
    """Generations per round: half of ``total`` for the last, the rest evenly over the others."""
    if parts == 1:
        return [total]
    last = max(1, total // 2)
    base, extra = divmod(total - last, parts - 1)
    return [max(1, base + (1 if i < extra else 0)) for i in range(parts - 1)] + [last]


def _guarded(run: Run, body: Callable[[Run], None]) -> SearchResult:
    """Run ``body``; whatever ends it early (budget, time, Ctrl-C, callback), finish with the
    best so far."""
    stopped = "completed"
    try:
        body(run)
    except StopSearch as stop:
        stopped = stop.reason
    except BudgetExhausted:
        stopped = "budget"
    except KeyboardInterrupt:
        stopped = "interrupted"
    run.announce(stopped)
    return run.finish(stopped)


def _schedule_rounds(run: Run, pools: list[frozenset[int]],
                     frees: Callable[[Run, list[Individual]], list[int]]) -> None:
    cfg = run.config
    gens = _split(cfg.generations, run.n_rounds)
    run.round = 0
    pop: list[Individual] = []
    # The first round races the pools against each other within one population.
    pool_size = max(-(-cfg.population // len(pools)), 5 * cfg.tournament)
    for controlled in pools:
        pop += run.initial_pool(controlled, pool_size)
    r = 0
    while True:
        run.round = r + 1
        if r > 0:
            run.lab.new_round()
            pop = run.next_round(pop)
        pop = _rank(run.evolve(pop, gens[r]))[: cfg.population]
        run.current = pop
        if r == run.n_rounds - 1:
            break
        gens[r + 1] += run.spare_generations
        pop = [_moved(run.freeze(run.pruned(ind)), ind.controlled - {freed})
               for ind, freed in zip(pop, frees(run, pop))]
        r += 1


def _moved(ind: Individual, controlled: frozenset[int]) -> Individual:
    """The individual under the next controlled set of its schedule."""
    return replace(ind, controlled=controlled, schedule=ind.schedule + (controlled,))


def _raced_frees(run: Run, pop: list[Individual]) -> list[int]:
    """The variable each expression of ``pop`` (ranked) frees next: one of its held variables
    drawn at random, as the paper has it, within the race's width.

    Every controlled set a round holds costs K fresh trials, and with one draw per expression
    the sets multiply (22 and 25 in rounds 2 and 3 of sincos-8-8-12/1; 12 of round 3's held no
    expression after one generation). So a round measures about :data:`RACE_WIDTH` times as
    many sets as the first did (one per variable): each set of this round may open its share
    of that width by its share of the population (rounded up, so at least one), and an
    expression ranked past that share frees a variable that one ranked above it, from the same
    set, freed."""
    width = RACE_WIDTH * run.n_vars
    share = Counter(ind.controlled for ind in pop)
    opened: dict[frozenset[int], list[int]] = {}
    frees = []
    for ind in pop:
        held = sorted(ind.controlled)
        freed = held[int(run.rng.integers(len(held)))]
        taken = opened.setdefault(ind.controlled, [])
        if freed not in taken:
            if len(taken) < math.ceil(width * share[ind.controlled] / len(pop)):
                taken.append(freed)
            else:
                freed = taken[int(run.rng.integers(len(taken)))]
        frees.append(freed)
    return frees


def _first_held(run: Run, pop: list[Individual]) -> list[int]:
    return [min(ind.controlled) for ind in pop]


def racing_cvgp(run: Run) -> None:
    everything = frozenset(range(run.n_vars))
    pools = [everything - {i} for i in range(run.n_vars)]
    _schedule_rounds(run, pools, _raced_frees)
    while run.restarts < run.config.restarts and run.worth_restarting():
        run.restart()
        _schedule_rounds(run, pools, _raced_frees)


def cvgp(run: Run) -> None:
    _schedule_rounds(run, [frozenset(range(1, run.n_vars))], _first_held)


def cvgp_all(run: Run) -> None:
    cfg = run.config
    gens = _split(cfg.generations, run.n_rounds)

    def branch(pop: list[Individual], depth: int, spare: int) -> None:
        run.round = depth + 1
        pop = _rank(run.evolve(run.next_round(pop), gens[depth] + spare))[: cfg.population]
        if depth == run.n_rounds - 1:
            return
        spare = run.spare_generations
        frozen = [run.freeze(run.pruned(ind)) for ind in pop]  # the same for every branch
        for freed in sorted(pop[0].controlled):
            controlled = pop[0].controlled - {freed}
            branch([_moved(ind, controlled) for ind in frozen], depth + 1, spare)

    everything = frozenset(range(run.n_vars))
    for first in range(run.n_vars):
        branch(run.initial_pool(everything - {first}, cfg.population), 0, 0)


def gp(run: Run) -> None:
    run.n_rounds = 1
    run.round = 1
    pop = run.initial_pool(frozenset(), run.config.population, pieces=False)
    run.evolve(pop, run.config.generations)


_METHODS: dict[str, Callable[[Run], None]] = {
    "racing": racing_cvgp,
    "cvgp": cvgp,
    "cvgp-all": cvgp_all,
    "gp": gp,
}


def run_search(
    method: str,
    oracle: DataOracle,
    config: SearchConfig | None = None,
    seed: int = 0,
    progress: ProgressCallback | None = None,
    executor: cf.Executor | None = None,
) -> SearchResult:
    """Discover an expression for ``oracle`` with one of :data:`METHODS`.

    Reproducible from ``seed`` given the same oracle answers, whatever the number of workers.
    Ends early, with the best expression so far, when a budget in ``config`` is spent, when
    ``progress`` returns True, or on Ctrl-C.

    The constant fits of each generation go to ``executor`` if given (e.g. a Dask
    ``distributed.Client(...).get_executor()``; the caller keeps it open, and ``config.workers``
    says how many workers it has, which sets how finely a generation is cut), else to a pool of
    ``config.workers`` processes that lives as long as the run (none for one worker).
    """
    if method not in _METHODS:
        import difflib

        close = difflib.get_close_matches(method, METHODS, n=1)
        hint = f"; did you mean `{close[0]}`?" if close else ""
        raise ConfigError(f"unknown method {method!r}{hint} (one of {', '.join(METHODS)})")
    if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
        raise ConfigError(f"seed must be an integer >= 0, got {seed!r}")
    config = config or SearchConfig()
    with worker_pool(config.workers, executor) as fits_go_to:
        run = Run(method, oracle, config, seed, progress, fits_go_to)
        return _guarded(run, _METHODS[method])

