"""Fitting the constants of a batch of trees: one after another in this process, or in chunks on
a pool of worker processes (or any :class:`concurrent.futures.Executor`), with the same fits
either way.

Every fit a search makes inside GP is a :class:`FitJob` (a tree, its data, the fitness it must
beat to earn a full fit, its starting constants and, for the stochastic optimisers, its own seed)
and goes through :meth:`Fitter.fit`. A fit depends on nothing else, so it does not matter where
or in which order it runs: a seed gives the same search whatever the number of workers. A chunk
holds jobs on one data set, which travels once per chunk, not once per tree.
"""

from __future__ import annotations

import concurrent.futures as cf
import math
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import NamedTuple

import numpy as np

from rcvgp.constants import FitResult, Trials, fit_constants, linear_constants
from rcvgp.pool import process_pool, single_threaded_children

__all__ = ["SCREEN_ITERATIONS", "CHUNKS_PER_WORKER", "FitJob", "Fitter", "fit_job", "worker_pool"]

#: Optimiser iterations of the screen that every tree with nonlinear constants gets first.
SCREEN_ITERATIONS = 3
#: A batch is cut into this many chunks per worker: fits differ in cost (most stop at the
#: screen), and smaller chunks even out the workers' loads, at the cost of sending the data more.
CHUNKS_PER_WORKER = 3

#: What a worker sends back for one job: losses (K,), constants (K, n_consts) and evaluations.
_Fitted = tuple[np.ndarray, np.ndarray, int]


class FitJob(NamedTuple):
    """One tree to fit on one data set.

    ``threshold``: the fitness a screened tree must reach to get its full fit; ``init``: starting
    values (K, n_consts) or (n_consts,), e.g. its parent's, or several (S, K, n_consts); ``seed``:
    the random stream of a stochastic optimiser (None for the others, which draw nothing).
    """

    tokens: tuple[str, ...]
    trials: Trials
    threshold: float = math.inf
    init: np.ndarray | None = None
    seed: int | None = None


def fit_job(job: FitJob, optimizer: str, fit_iterations: int) -> FitResult:
    """Fit one job's constants: trees with nonlinear constants are screened first with a few
    optimiser iterations, and only those that then reach ``job.threshold`` (the fitness needed
    to survive) get ``fit_iterations``. Most offspring are rejected by the screen."""
    rng = None if job.seed is None else np.random.default_rng(job.seed)
    screen = min(fit_iterations, SCREEN_ITERATIONS)
    found = fit_constants(job.tokens, job.trials, optimizer, rng, init=job.init, maxiter=screen)
    nonlinear = len(linear_constants(job.tokens)) < sum(t == "c" for t in job.tokens)
    if nonlinear and fit_iterations > screen and found.fitness <= job.threshold:
        found = fit_constants(job.tokens, job.trials, optimizer, rng, init=found.constants, maxiter=fit_iterations)
    return found


def _fit_chunk(
    trials: Trials,
    jobs: list[tuple[tuple[str, ...], float, np.ndarray | None, int | None]],
    optimizer: str,
    fit_iterations: int,
) -> list[_Fitted]:
    """In a worker: the fits of a chunk of (tokens, threshold, init, seed) on one data set."""
    out = []
    for tokens, threshold, init, seed in jobs:
        fit = fit_job(FitJob(tokens, trials, threshold, init, seed), optimizer, fit_iterations)
        out.append((fit.losses, fit.constants, fit.n_evals))
    return out


class Fitter:
    """Fits batches of jobs with one optimiser setting: here, in order, without an executor;
    in chunks on ``executor`` with one, cut for ``n_workers`` workers.

    Parameters
    ----------
    optimizer : str
        One of :data:`rcvgp.search.OPTIMIZERS`.
    fit_iterations : int
        Optimiser iterations of a full fit (see :func:`fit_job`).
    executor : concurrent.futures.Executor, optional
        Where chunks run; None fits in this process.
    n_workers : int
        How many workers the executor has: a batch is cut into :data:`CHUNKS_PER_WORKER` chunks each.
    """

    def __init__(
        self, optimizer: str, fit_iterations: int, executor: cf.Executor | None = None, n_workers: int = 1
    ) -> None:
        self.optimizer = optimizer
        self.fit_iterations = fit_iterations
        self.executor = executor
        self.n_chunks = CHUNKS_PER_WORKER * max(1, n_workers)

    def fit(self, jobs: Sequence[FitJob]) -> list[FitResult]:
        """The fits of ``jobs``, in their order."""
        if self.executor is None or len(jobs) < 2:  # one fit costs less here than a round trip
            return [fit_job(job, self.optimizer, self.fit_iterations) for job in jobs]
        chunks = self._chunks(jobs)
        futures = [
            self.executor.submit(_fit_chunk, jobs[idx[0]].trials,
                                 [(jobs[i].tokens, jobs[i].threshold, jobs[i].init, jobs[i].seed) for i in idx],
                                 self.optimizer, self.fit_iterations)
            for idx in chunks
        ]
        found: dict[int, FitResult] = {}
        try:
            for idx, future in zip(chunks, futures):
                for i, (losses, constants, n_evals) in zip(idx, future.result(), strict=True):
                    found[i] = FitResult(losses, constants, n_evals, jobs[i].trials.floor)
        except BaseException:
            for future in futures:  # the run ends: what has not started need not
                future.cancel()
            raise
        return [found[i] for i in range(len(jobs))]

    def _chunks(self, jobs: Sequence[FitJob]) -> list[list[int]]:
        """Job indices cut into chunks of one data set each, about ``n_chunks`` in all."""
        size = -(-len(jobs) // self.n_chunks)
        by_data: dict[int, list[int]] = {}
        for i, job in enumerate(jobs):
            by_data.setdefault(id(job.trials), []).append(i)
        return [idx[start : start + size] for idx in by_data.values() for start in range(0, len(idx), size)]


@contextmanager
def worker_pool(n_workers: int, executor: cf.Executor | None = None) -> Iterator[cf.Executor | None]:
    """Where a run's fits go: ``executor`` if given (the caller keeps it open), else, for
    ``n_workers`` > 1, a pool of that many single-threaded processes, shut down when the run
    ends, however it ends; None (this process) for one worker."""
    if executor is not None or n_workers == 1:
        yield executor
        return
    with single_threaded_children():
        pool = process_pool(n_workers)
        try:
            yield pool
        finally:
            pool.shutdown(wait=True, cancel_futures=True)
