"""Fitting a batch of trees here or over worker processes: the same fits, the same search for a
seed whatever the number of workers, one fit per distinct tree, and a pool that ends with its run."""

from __future__ import annotations

import concurrent.futures as cf
from collections.abc import Callable, Iterator

import numpy as np
import pytest

import rcvgp.search.fitting as fitting
from rcvgp.constants import FitResult, Trials
from rcvgp.errors import ConfigError, OracleError
from rcvgp.oracle import CallableOracle, OracleSpec, Variable
from rcvgp.search import Progress, SearchConfig, SearchResult, run_search
from rcvgp.search.engine import Run
from rcvgp.search.fitting import FitJob, Fitter

SPEC3 = OracleSpec(tuple(Variable(f"x{i}", 0.1, 10.0, "loguniform") for i in range(3)), name="test:x0x1+sin")
TINY = SearchConfig(operators=("add", "mul", "sin"), population=10, generations=3, batch=32, n_trials=2,
                    hall_of_fame=5, n_validation=64, n_test=64)

C_SIN_CX = ("mul", "c", "sin", "mul", "c", "x0")
SUM = ("add", "mul", "c", "x0", "c")


def law(X: np.ndarray) -> np.ndarray:
    return X[:, 0] * X[:, 1] + np.sin(X[:, 2])


def oracle3() -> CallableOracle:
    return CallableOracle(law, SPEC3)


def outcome(result: SearchResult) -> tuple[object, ...]:
    """All a search says, bar its times."""
    return (result.best.expression, result.best.loss, result.best.nmse_validation, result.test_metrics,
            result.points_measured, result.requests, result.stopped, result.rounds,
            [(c.expression, c.loss, c.nmse_validation, c.schedule) for c in result.equations])


def trials_of(fn: Callable[[np.ndarray], np.ndarray], seed: int) -> Trials:
    X = np.random.default_rng(seed).uniform(-3, 3, size=(2, 40, 1))
    return Trials(X, fn(X[..., 0]))


@pytest.fixture(scope="module")
def jobs() -> list[FitJob]:
    """Jobs on two data sets, interleaved, some screened out by their threshold."""
    a = trials_of(lambda x: 2.0 * np.sin(1.3 * x), 0)
    b = trials_of(lambda x: 0.5 * x + 1.0, 1)
    return [FitJob(C_SIN_CX, a), FitJob(SUM, b), FitJob(C_SIN_CX, b, threshold=0.0), FitJob(SUM, a),
            FitJob(C_SIN_CX, a, init=np.array([2.0, 1.2])), FitJob(C_SIN_CX, b)]


def same_fits(x: list[FitResult], y: list[FitResult]) -> bool:
    return all(np.array_equal(p.losses, q.losses) and np.array_equal(p.constants, q.constants)
               and p.n_evals == q.n_evals and p.floor is q.floor for p, q in zip(x, y, strict=True))


@pytest.mark.parametrize("optimizer", ["LM", "basinhopping"])
def test_fits_in_chunks_on_an_executor_are_the_fits_made_here(jobs: list[FitJob], optimizer: str) -> None:
    seeded = [job._replace(seed=100 + i) for i, job in enumerate(jobs)]
    iterations = 20 if optimizer == "LM" else 4  # basinhopping is slow
    here = Fitter(optimizer, iterations).fit(seeded)
    full = fitting.fit_job(seeded[2]._replace(threshold=np.inf), optimizer, iterations)
    assert here[2].n_evals < full.n_evals  # screened out: no full fit
    for n_workers in (1, 3):
        with cf.ThreadPoolExecutor(n_workers) as pool:
            assert same_fits(Fitter(optimizer, iterations, pool, n_workers).fit(seeded), here)


def test_a_chunk_holds_jobs_on_one_data_set(jobs: list[FitJob]) -> None:
    chunks = Fitter("LM", 20, n_workers=1)._chunks(jobs)  # 3 chunks wanted: 2 jobs each at most
    assert chunks == [[0, 3], [4], [1, 2], [5]]
    assert Fitter("LM", 20, n_workers=4)._chunks(jobs) == [[0], [3], [4], [1], [2], [5]]


def test_identical_trees_of_a_batch_are_fitted_once(jobs: list[FitJob], monkeypatch: pytest.MonkeyPatch) -> None:
    run = Run("gp", oracle3(), TINY, seed=0)
    sent: list[list[FitJob]] = []
    real = run.fitter.fit
    monkeypatch.setattr(run.fitter, "fit", lambda batch: sent.append(list(batch)) or real(batch))
    first = run.fit_all([jobs[0], jobs[1], jobs[0], jobs[1]._replace(init=np.array([3.0, 3.0]))])
    assert [len(batch) for batch in sent] == [2]
    assert first[0] is first[2] and first[1] is first[3]
    again = run.fit_all([jobs[0], jobs[3]])  # one is in the cache already
    assert [len(batch) for batch in sent] == [2, 1] and again[0] is first[0]


def test_a_stochastic_optimiser_gets_a_seed_per_fit_drawn_in_order(jobs: list[FitJob]) -> None:
    def seeds(optimizer: str) -> list[int | None]:
        run = Run("gp", oracle3(), TINY.replace(optimizer=optimizer), seed=0)
        sent: list[FitJob] = []
        run.fitter.fit = lambda batch: sent.extend(batch) or [FitResult(np.zeros(2), np.ones((2, 2)), 1)] * len(batch)
        run.fit_all(jobs[:3])
        run.fit_all(jobs[3:])
        return [job.seed for job in sent]

    stream = np.random.default_rng(0)  # the run's, with seed 0
    drawn = [int(stream.integers(2**63)) for _ in range(4)]  # 6 jobs, 4 distinct fits
    assert seeds("basinhopping") == seeds("dual_annealing") == drawn
    assert seeds("LM") == [None] * 4  # a deterministic optimiser draws nothing from the run's stream


@pytest.fixture(scope="module")
def two_workers() -> Iterator[cf.Executor | None]:
    """A pool of two worker processes, made as a run makes its own, shared by tests to save starts."""
    with fitting.worker_pool(2) as pool:
        yield pool


@pytest.mark.parametrize("method", ["racing", "gp"])
def test_two_workers_find_what_one_finds(method: str, two_workers: cf.Executor) -> None:
    alone = run_search(method, oracle3(), TINY, seed=0)
    shared = run_search(method, oracle3(), TINY.replace(workers=2), seed=0, executor=two_workers)
    assert outcome(shared) == outcome(alone)
    assert shared.config.workers == 2


def test_the_seeds_of_a_stochastic_optimiser_do_not_depend_on_the_workers() -> None:
    config = TINY.replace(optimizer="basinhopping", generations=2)
    alone = run_search("gp", oracle3(), config, seed=0)
    with cf.ThreadPoolExecutor(3) as pool:
        shared = run_search("gp", oracle3(), config.replace(workers=3), seed=0, executor=pool)
        assert outcome(shared) == outcome(alone)
        pool.submit(int).result()  # the caller's executor is left open


def test_a_run_s_own_pool_ends_with_it_however_it_ends(monkeypatch: pytest.MonkeyPatch) -> None:
    pools: list[cf.ProcessPoolExecutor] = []
    real = fitting.process_pool
    monkeypatch.setattr(fitting, "process_pool", lambda n: pools.append(real(n)) or pools[-1])
    run_search("gp", oracle3(), TINY.replace(generations=1), seed=0)
    assert pools == []  # one worker: no pool at all

    def stop(p: Progress) -> bool:
        return p.generation >= 1  # after the first generation's fits, made by the pool

    stopped = run_search("racing", oracle3(), TINY.replace(workers=2), seed=0, progress=stop)
    assert stopped.stopped == "interrupted" and len(pools) == 1

    requests: list[int] = []

    def breaks(X: np.ndarray) -> np.ndarray:
        requests.append(len(X))  # the noise's replicates, then a reply of the wrong shape
        return law(X) if len(requests) == 1 else X[:, :2]

    with pytest.raises(OracleError, match="shape"):
        run_search("racing", CallableOracle(breaks, SPEC3), TINY.replace(workers=2), seed=0)
    assert len(pools) == 2
    for pool in pools:
        with pytest.raises(RuntimeError, match="shutdown"):
            pool.submit(int)


@pytest.mark.parametrize("bad", [0, -1, "two", True, 1.5])
def test_workers_must_be_a_positive_integer(bad: object) -> None:
    with pytest.raises(ConfigError, match=r"^search setting `workers` must be an integer >= 1, got "):
        SearchConfig(workers=bad)  # type: ignore[arg-type]
