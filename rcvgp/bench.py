"""The benchmark runner behind ``rcvgp bench``: many (equation, method, seed) runs, each in its own
process, summarised per group and method as the paper's tables are.

A :class:`BenchTask` names one run: a catalog entry, a search method, a seed, a time cap, a noise
model, whether the units are rescaled, and search-setting overrides. :func:`run_task` performs it
(a top-level function, so it pickles to any process pool): it builds the entry's
:class:`~rcvgp.simulate.SimulatedOracle` (in random units with ``rescale``: a power of ten per
variable and for y, :meth:`BenchTask.rescale_powers`), runs :func:`~rcvgp.search.run_search` --
which chooses the expression on validation data and scores it once on fresh test points with no
variable held -- and checks exact recovery against the catalog's ground truth (in the run's
units) with :func:`judge_exact`. It returns one flat, JSON-ready record, with the noise floor
(the test NMSE of the truth itself under the run's noise). A run that hits its time cap reports
its best expression so far and is marked ``timed_out``.

:func:`run_benchmark` sends tasks to any :class:`concurrent.futures.Executor` (by default a
process pool; a Dask ``distributed`` client's ``get_executor()`` spreads them over a cluster),
appends each finished record as one JSON line to ``runs.jsonl`` in the output folder -- the resume
state: a task already there is not run again -- appends each run that raised to ``errors.jsonl``
(with its traceback; it runs again next time), and at the end writes ``summary.json``,
``runs.csv`` and ``summary.csv`` atomically. :func:`summarize` and :func:`format_table` turn
records into the per-group table, beside the paper's Racing-CVGP numbers
(:data:`PAPER_RACING_NMSE`).
"""

from __future__ import annotations

import concurrent.futures as cf
import csv
import difflib
import hashlib
import io
import json
import math
import os
import threading
import time
import traceback
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

from rcvgp.errors import BenchmarkInterrupted, ConfigError
from rcvgp.pool import THREAD_ENV_VARS, process_pool, single_threaded_children
from rcvgp.runner import write_atomic
from rcvgp.search.base import METHODS, SearchConfig

__all__ = [
    "RUNS_NAME",
    "ERRORS_NAME",
    "SUMMARY_JSON_NAME",
    "RUNS_CSV_NAME",
    "SUMMARY_CSV_NAME",
    "RECORD_FIELDS",
    "SUMMARY_FIELDS",
    "PAPER_RACING_NMSE",
    "RESCALE_POWERS",
    "THREAD_ENV_VARS",
    "BenchTask",
    "BenchmarkInterrupted",
    "make_tasks",
    "select_benchmarks",
    "run_task",
    "judge_exact",
    "judge_form",
    "judge_within_noise",
    "run_benchmark",
    "pending_tasks",
    "read_records",
    "summarize",
    "environment",
    "format_table",
    "format_record",
]

#: File names inside the output folder.
RUNS_NAME = "runs.jsonl"
ERRORS_NAME = "errors.jsonl"  # the runs of the last call that raised: their error and traceback
SUMMARY_JSON_NAME = "summary.json"
RUNS_CSV_NAME = "runs.csv"
SUMMARY_CSV_NAME = "summary.csv"

#: The fields of a run record, in the order of ``runs.csv``.
RECORD_FIELDS = (
    "id", "group", "method", "seed", "nmse_test", "nmse_floor", "nmse_truth", "exact", "form", "within_noise", "fits_noise", "points",
    "requests", "points_failed",
    "wall_seconds", "cpu_seconds", "stopped", "timed_out", "restarts", "expression", "constants", "schedule", "noise", "rescale",
    "time_cap", "settings", "workers",
)  # fmt: skip

#: The fields of a summary row, in the order of ``summary.csv``.
SUMMARY_FIELDS = (
    "group", "method", "n", "nmse_median", "nmse_q75", "floor_median", "excess_median", "exact_rate", "n_exact", "n_form", "n_within", "wall_median",
    "cpu_median", "points_median", "timed_out", "errors", "paper_median", "paper_q75",
)  # fmt: skip

#: The powers of ten a rescaled run draws from, per variable and for y (``rcvgp bench --rescale``).
RESCALE_POWERS = range(-6, 7)

#: Racing-CVGP's median and 75%-quantile test NMSE per group, as the paper prints them.
PAPER_RACING_NMSE: dict[str, tuple[str, str]] = {
    "sincos-3-2-2": ("<1e-6", "<1e-6"),
    "sincos-4-4-6": ("0.016", "0.021"),
    "sincos-5-5-5": ("0.043", "0.098"),
    "sincos-6-6-10": ("0.069", "0.104"),
    "sincos-8-8-12": ("0.095", "0.286"),
    "livermore2-n4": ("<1e-6", "2.03e-3"),
    "livermore2-n5": ("0.004", "0.047"),
    "livermore2-n6": ("0.001", "0.073"),
    "feynman-n4": ("0.0154", "0.195"),
    "feynman-n5": ("0.577", "0.790"),
}

_TINY = 1e-6  # the paper prints NMSE below this as "<1e-6"
_RESCALE_STREAM = 0x5CA1E  # the rescale powers' random stream, apart from the search's and the noise's
_STOP = threading.Event()  # asks runs in threads of this process to stop (set on Ctrl-C)
_GRACE_SECONDS = 60.0  # how long Ctrl-C waits for running runs to hand back their best so far


@dataclass(frozen=True)
class BenchTask:
    """One benchmark run: an equation, a method and a seed, with the settings it runs under.

    Validated on construction, so a typo fails before anything runs.

    Parameters
    ----------
    bench_id : str
        A catalog id such as ``sincos-3-2-2/1`` (a unique case-insensitive match is accepted and
        stored in its catalog spelling).
    method : {'racing', 'cvgp', 'cvgp-all', 'gp'}
    seed : int
        Seeds the search and (as ``rcvgp discover --seed`` does) the oracle's noise.
    time_cap : float or None
        Seconds after which the search stops with its best expression so far (``max_seconds``).
    noise : str
        ``none`` or ``KIND:SCALE`` (:class:`rcvgp.simulate.Noise`); stored normalised.
    rescale : bool
        Run the equation in random units: see :meth:`rescale_powers`.
    settings : mapping or tuple of (name, value) pairs
        Overrides of :class:`~rcvgp.search.SearchConfig` fields (e.g. ``{"population": 20}``);
        stored as sorted pairs so that the task stays hashable.
    workers : int
        Processes that fit the run's constants (the search setting ``workers``). Not part of
        :attr:`key`: it changes the run's times, not its result.
    """

    bench_id: str
    method: str
    seed: int = 0
    time_cap: float | None = 120.0
    noise: str = "none"
    settings: tuple[tuple[str, Any], ...] = ()
    rescale: bool = False
    workers: int = 1

    def __post_init__(self) -> None:
        from rcvgp.benchmarks import get_benchmark
        from rcvgp.simulate import Noise

        object.__setattr__(self, "bench_id", get_benchmark(self.bench_id).id)
        _check_method(self.method)
        if isinstance(self.seed, bool) or not isinstance(self.seed, int) or self.seed < 0:
            raise ConfigError(f"seed must be an integer >= 0, got {self.seed!r}")
        if self.time_cap is not None:
            if isinstance(self.time_cap, bool) or not isinstance(self.time_cap, (int, float)) or not (
                    self.time_cap > 0 and math.isfinite(self.time_cap)):
                raise ConfigError(f"time cap must be a number of seconds > 0, got {self.time_cap!r}")
            object.__setattr__(self, "time_cap", float(self.time_cap))
        object.__setattr__(self, "noise", str(Noise.parse(self.noise)))
        if not isinstance(self.rescale, bool):
            raise ConfigError(f"rescale must be true or false, got {self.rescale!r}")
        pairs = dict(self.settings.items() if isinstance(self.settings, Mapping) else self.settings)
        object.__setattr__(self, "settings", tuple(sorted(pairs.items())))
        self.search_config()  # validates the overrides

    def search_config(self) -> SearchConfig:
        """The search settings of this run: the paper's defaults, the overrides, the time cap.

        Raises
        ------
        ConfigError
            For an unknown or invalid setting, or ``max_seconds`` given as a setting.
        """
        data = dict(self.settings)
        known = [f.name for f in fields(SearchConfig)]
        for name in data:
            if name == "max_seconds":
                raise ConfigError("search setting `max_seconds`: give the run's time cap as `time_cap` instead")
            if name == "workers":
                raise ConfigError("search setting `workers`: give the run's workers as `workers` instead")
            if name not in known:
                close = difflib.get_close_matches(str(name), known, n=1)
                hint = f"; did you mean `{close[0]}`?" if close else f" (known: {', '.join(known)})"
                raise ConfigError(f"search setting `{name}`: unknown setting{hint}")
        return SearchConfig(**data, max_seconds=self.time_cap, workers=self.workers)

    @property
    def key(self) -> str:
        """What identifies the run in ``runs.jsonl``: a run with the same key is not run again."""
        return _key(self.bench_id, self.method, self.seed, self.noise, self.time_cap, dict(self.settings),
                    self.rescale)

    def rescale_powers(self) -> dict[str, int] | None:
        """The units of a rescaled run (None when it is not rescaled): a power of ten per
        variable and one for ``y``, each drawn uniformly from :data:`RESCALE_POWERS`.

        The draw comes from a random stream of its own, derived from the seed and the equation
        id, so it is reproducible and leaves the search's and the noise's streams alone. An
        ``integer_uniform`` variable is a count, with no unit: its power is drawn and set to 0.
        """
        if not self.rescale:
            return None
        import numpy as np

        from rcvgp.benchmarks import get_benchmark

        bench = get_benchmark(self.bench_id)
        equation = int.from_bytes(hashlib.sha256(bench.id.encode()).digest()[:8], "little")
        rng = np.random.default_rng([self.seed, _RESCALE_STREAM, equation])
        drawn = rng.integers(RESCALE_POWERS.start, RESCALE_POWERS.stop, size=len(bench.variables) + 1)
        powers = {v.name: 0 if v.dist == "integer_uniform" else int(p) for v, p in zip(bench.variables, drawn)}
        return powers | {"y": int(drawn[-1])}


def select_benchmarks(groups: Iterable[str] = (), ids: Iterable[str] = ()) -> list[str]:
    """Catalog ids of the given groups (``all`` means every group) and ids, in catalog order,
    without repeats.

    Raises
    ------
    ConfigError
        For an unknown group or id, naming the closest ones.
    """
    from rcvgp.benchmarks import benchmarks_in_group, get_benchmark, list_groups

    chosen: list[str] = []
    for group in groups:
        names = list_groups() if group == "all" else (group,)
        for name in names:
            chosen.extend(b.id for b in benchmarks_in_group(name))
    chosen.extend(get_benchmark(i).id for i in ids)
    return list(dict.fromkeys(chosen))


def make_tasks(
    bench_ids: Sequence[str],
    methods: Sequence[str] = METHODS,
    seeds: Iterable[int] = (0,),
    *,
    time_cap: float | None = 120.0,
    noise: str = "none",
    settings: Mapping[str, Any] | None = None,
    rescale: bool = False,
    workers: int = 1,
) -> list[BenchTask]:
    """Every (equation, method, seed) combination as a :class:`BenchTask`, equation-major.

    Raises
    ------
    ConfigError
        For an unknown id or method, or an invalid setting.
    """
    for method in methods:
        _check_method(method)
    seeds = list(seeds)
    pairs = tuple(sorted((settings or {}).items()))
    return [
        BenchTask(bench_id, method, seed, time_cap=time_cap, noise=noise, settings=pairs, rescale=rescale,
                  workers=workers)
        for bench_id in bench_ids
        for method in methods
        for seed in seeds
    ]


def run_task(task: BenchTask) -> dict[str, Any]:
    """Perform one benchmark run and return its record.

    Parameters
    ----------
    task : BenchTask

    Returns
    -------
    dict
        JSON-ready, with the keys of :data:`RECORD_FIELDS`: ``id``, ``group``, ``method``,
        ``seed``, ``nmse_test`` (on fresh test points, no variable held; ``None`` when the
        expression is not finite there, which summaries count as infinite), ``nmse_floor``
        (the test NMSE of the truth itself under the run's noise,
        :meth:`~rcvgp.simulate.SimulatedOracle.noise_floor`, its expected value over the
        declared ranges; 0 without noise), ``nmse_truth`` (the test NMSE the truth scores on
        this run's own test readings: the floor the law is measured against, which for a
        heavy-tailed y can be far from the expected one; ``None`` if not finite), ``exact``
        (against the law in the run's units),
        ``points`` (measured), ``requests``, ``points_failed``, ``wall_seconds`` (of the
        search), ``cpu_seconds`` (the CPU time of the search's thread, plus its fit workers':
        unlike wall time, it does not grow when runs share cores, so it compares runs made under
        different loads),
        ``stopped`` (``completed``, ``budget``, ``time`` or ``interrupted``), ``timed_out``,
        ``expression``, ``constants`` (its measured numbers as ``[value, standard error]``, the
        error ``None`` for a number the readings do not pin; ``None`` without noise), ``form``
        (:func:`judge_form`), ``within_noise`` (:func:`judge_within_noise`), ``schedule`` (the chosen expression's
        held variables round by round; a run stopped early ends without ``[]``), ``noise``, ``rescale`` (the
        powers of ten of a rescaled run, by variable name and ``y``; ``None`` otherwise),
        ``time_cap``, ``settings`` and ``workers``.
    """
    import numpy as np

    from rcvgp.benchmarks import get_benchmark
    from rcvgp.search import run_search
    from rcvgp.simulate import SimulatedOracle

    bench = get_benchmark(task.bench_id)
    powers = task.rescale_powers()
    # As the runner does: the oracle's noise has its own stream, derived from the same seed.
    noise_rng = np.random.default_rng([task.seed, 0x5EED])
    oracle = SimulatedOracle.from_benchmark(bench.id, noise=task.noise, seed=noise_rng,
                                            rescale=_factors(powers))
    floor = oracle.noise_floor()
    with oracle:
        cpu_start, children_start = time.thread_time(), _children_cpu()
        result = run_search(task.method, oracle, task.search_config(), task.seed,
                            progress=lambda _p: _STOP.is_set())
        cpu_seconds = time.thread_time() - cpu_start
        if task.workers > 1:  # its pool has ended, so its processes' time is counted
            cpu_seconds += _children_cpu() - children_start
    exact = judge_exact(result.best.sympy_expr, bench.id, rescale=powers)
    form = exact or judge_form(result.best.sympy_expr, bench.id, rescale=powers)
    within = exact or (form and judge_within_noise(result.best.sympy_expr, result.constants, bench.id, rescale=powers,
                                                   exact=exact))
    nmse = float(result.test_metrics["nmse"])
    truth = _truth_nmse(oracle, result)
    return {
        "id": bench.id,
        "group": bench.group,
        "method": task.method,
        "seed": task.seed,
        "nmse_test": nmse if math.isfinite(nmse) else None,
        "nmse_floor": floor if math.isfinite(floor) else None,
        "nmse_truth": truth,
        "exact": exact,
        "form": form,
        "within_noise": within,
        "fits_noise": result.fits_noise,
        "points": int(result.points_measured),
        "requests": int(result.requests),
        "points_failed": int(result.points_failed),
        "wall_seconds": float(result.wall_seconds),
        "cpu_seconds": cpu_seconds,
        "stopped": result.stopped,
        "timed_out": result.stopped == "time",
        "restarts": result.restarts,
        "expression": result.best.expression,
        "constants": None if result.constants is None else [
            [v, e if math.isfinite(e) else None] for v, e in result.constants],
        "schedule": [list(held) for held in result.best.schedule],
        "noise": task.noise,
        "rescale": powers,
        "time_cap": task.time_cap,
        "settings": dict(task.settings),
        "workers": task.workers,
    }


def judge_exact(found: Any, bench_id: str, rescale: Mapping[str, int] | None = None) -> bool:
    """Whether ``found`` (sympy or text) is an exact recovery of the catalog equation ``bench_id``
    (:func:`rcvgp.metrics.is_exact` against its ground truth, on its variables' declared
    domains).

    Parameters
    ----------
    found : sympy expression, str or None
    bench_id : str
    rescale : mapping of str to int, optional
        A rescaled run's powers of ten (its record's ``rescale``): the truth and the domains
        are then those of the run's units.
    """
    from rcvgp.benchmarks import get_benchmark, parse_expression
    from rcvgp.metrics import is_exact
    from rcvgp.simulate import SimulatedOracle

    if found is None:
        return False
    bench = get_benchmark(bench_id)
    oracle = SimulatedOracle.from_benchmark(bench, rescale=_factors(rescale))  # the law in the run's units
    variables = oracle.describe().variables
    truth = parse_expression(oracle.reveal(), [v.name for v in variables])
    return bool(is_exact(found, truth, variables=variables))


def judge_form(found: Any, bench_id: str, rescale: Mapping[str, int] | None = None) -> bool:
    """Whether ``found`` has the form of the catalog equation ``bench_id``: with every number in
    it fitted anew to noise-free readings of the truth, it is an exact recovery
    (:func:`judge_exact`). Under noise a law's constants are only as precise as its readings,
    and SRBench's check compares them to three digits: this says whether the law is right but
    for them. False when the form cannot be written in the operator table (e.g. ``Abs``).
    """
    from rcvgp.tree import to_sympy

    # Up to a constant offset and factor, as judge_exact: a*form + b, from a = 1 and b = 0.
    refitted = _refitted_form(found, bench_id, rescale, offset=True, factor=True)
    if refitted is None:
        return False
    tokens, constants, _, _, names = refitted
    return judge_exact(to_sympy(tokens, constants, names), bench_id, rescale)


def judge_within_noise(found: Any, constants: Sequence[Sequence[float | None]] | None, bench_id: str,
                       rescale: Mapping[str, int] | None = None, *, exact: bool | None = None) -> bool:
    """Whether ``found`` is the catalog equation ``bench_id`` to the precision of its readings:
    it has the truth's form (up to an offset and a factor, as SRBench allows), and each of its
    numbers is the one the truth gives it, a measured one within :data:`~rcvgp.noisefloor.Z` of its
    standard errors (the chance shared among them), a snapped one (an exact number: a claim)
    to rounding. ``constants`` are the run's measured numbers with their standard errors, as
    ``SearchResult.constants`` pairs them. SRBench's check compares constants to three digits,
    which readings at 1% noise often cannot give (0.5117 +/- 0.0002 for 0.5114); this says
    whether the law is as right as they could make it. An exact recovery (:func:`judge_exact`,
    which allows the offset and factor) is within noise; without noise (``constants`` None)
    nothing else is. ``exact``: its verdict, if the caller has it (the check runs sympy in a
    child process: not twice).
    """
    from rcvgp.noisefloor import chance_rise

    def is_exact() -> bool:
        return judge_exact(found, bench_id, rescale) if exact is None else exact

    if constants is None:
        return is_exact()

    def error(value: float) -> float | None:
        """The standard error of the measured number ``value`` (matched to the six digits a
        record's expression keeps, up to the sign the tree may take out); None for an exact number."""
        return next((math.inf if e is None else float(e) for v, e in constants
                     if abs(abs(float(v)) - abs(value)) <= 1e-5 * abs(value)), None)

    # The exact numbers stay as they are: a form that only fits the truth with them moved
    # claims what is not so, and held, they take out the scale a quotient's numbers share.
    # As written first: an offset or a factor the law does not need moves along with its own
    # numbers, and where the fit leaves them on that line is arbitrary.
    refitted = None
    for offset, factor in ((False, False), (True, False), (True, True)):
        refitted = _refitted_form(found, bench_id, rescale, offset, factor, measured=lambda v: error(v) is not None)
        if refitted is not None:
            break
    if refitted is None:
        return is_exact()
    _, _, values, truths, _ = refitted
    errors = [error(v) for v in values]
    allowed = chance_rise(1, max(1, sum(e is not None for e in errors)))
    right = all(e is None or not math.isfinite(e) or ((value - truth) / e) ** 2 <= allowed
                for value, truth, e in zip(values, truths, errors))
    return right or is_exact()


def _refitted_form(found: Any, bench_id: str, rescale: Mapping[str, int] | None, offset: bool, factor: bool,
                   measured: Callable[[float], bool] | None = None
                   ) -> tuple[tuple[str, ...], Any, list[float], list[float], list[str]] | None:
    """``found`` as a tree (with a factor and an offset around it, if asked: the first and the last
    constants) whose constants are its numbers (only those ``measured`` says are, if given: the
    others are literals), those constants fitted anew to noise-free readings of the truth, its
    numbers and their values in that fit, and the variables' names; None when the form cannot
    be written in the operator table or does not fit those readings exactly."""
    import numpy as np
    import sympy

    from rcvgp.benchmarks import get_benchmark
    from rcvgp.constants import Trials, fit_constants
    from rcvgp.errors import ExpressionError
    from rcvgp.oracle import design_points
    from rcvgp.simulate import SimulatedOracle
    from rcvgp.tree import from_sympy

    if found is None:
        return None
    oracle = SimulatedOracle.from_benchmark(get_benchmark(bench_id), rescale=_factors(rescale))
    spec = oracle.describe()
    names = [v.name for v in spec.variables]
    try:
        expr = sympy.sympify(str(found), locals={n: sympy.Symbol(n) for n in names})
        tree, values = from_sympy(expr, names)
    except (ExpressionError, sympy.SympifyError, TypeError, ValueError):
        return None
    free = [True if measured is None else measured(v) for v in values]
    tokens, start = tree.fixed(values, free).tokens, [v for v, f in zip(values, free) if f]
    if factor:
        tokens, start = ("mul", "c") + tokens, [1.0, *start]
    if offset:
        tokens, start = ("add",) + tokens + ("c",), [*start, 0.0]
    X = design_points(spec, 1024, np.random.default_rng(0))
    with oracle:
        y = oracle.measure(X)
    fit = fit_constants(tokens, Trials(X[None], y[None]), init=np.array(start), maxiter=500)
    if not np.all(fit.losses < 1e-20):
        return None
    fitted = iter(fit.constants[0][int(factor):len(start) - int(offset)])
    truths = [float(next(fitted)) if f else v for v, f in zip(values, free)]
    return tokens, fit.constants[0], values, truths, names


def run_benchmark(
    tasks: Sequence[BenchTask],
    executor: cf.Executor | None = None,
    out_dir: str | Path = "bench-results",
    progress: Callable[[dict[str, Any], int, int], Any] | None = None,
    *,
    jobs: int = 1,
) -> list[dict[str, Any]]:
    """Run the tasks not yet in ``out_dir/runs.jsonl`` and save every result.

    Parameters
    ----------
    tasks : sequence of BenchTask
    executor : concurrent.futures.Executor, optional
        Where runs execute; the caller keeps ownership (it is not shut down). By default a
        process pool of ``jobs`` workers, each single-threaded (:data:`THREAD_ENV_VARS` = 1).
        A Dask ``distributed.Client(...).get_executor()`` runs them on a cluster.
    out_dir : str or Path
        The output folder (created if needed): ``runs.jsonl`` (one line per finished run,
        flushed as each run ends), ``errors.jsonl`` (one line per run of this call that raised:
        ``id``, ``group``, ``method``, ``seed``, ``error`` and ``traceback``; no file when none
        did), then ``summary.json`` (with the count of runs that ``failed``), ``runs.csv`` and
        ``summary.csv``.
    progress : callable, optional
        Called in this process as ``progress(record, n_done, n_total)`` for each run that
        finishes here (a record with an ``error`` key is a run that raised).
    jobs : int
        Workers of the default process pool.

    Returns
    -------
    list of dict
        The records of ``tasks`` in task order: read back from ``runs.jsonl`` for runs finished
        earlier, new for the others. Runs that raised are printed through ``progress`` and
        logged in ``errors.jsonl``, but neither saved in ``runs.jsonl`` nor returned, so that a
        later call retries them.

    Raises
    ------
    BenchmarkInterrupted
        On Ctrl-C: no further run starts, running ones are asked to stop and discarded, the
        files are written from the finished runs, then this is raised with their records.
    """
    if isinstance(jobs, bool) or not isinstance(jobs, int) or jobs < 1:
        raise ConfigError(f"jobs must be an integer >= 1, got {jobs!r}")
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    runs_path = out / RUNS_NAME
    tasks = list(dict.fromkeys(tasks))
    done = {_record_key(r): r for r in read_records(runs_path)}
    todo = [t for t in tasks if t.key not in done]  # as pending_tasks()
    n_total, n_done, n_failed = len(todo), 0, 0
    (out / ERRORS_NAME).unlink(missing_ok=True)  # an earlier call's failures run again now
    _STOP.clear()
    interrupted = False
    with single_threaded_children() if executor is None else nullcontext():
        pool: cf.Executor
        own_pool: cf.ProcessPoolExecutor | None = None
        if executor is None:
            pool = own_pool = process_pool(jobs)
        else:
            pool = executor
        futures: dict[cf.Future[dict[str, Any]], BenchTask] = {}
        handled: set[cf.Future[dict[str, Any]]] = set()
        try:
            with _append_lines(runs_path) as append:
                try:
                    for task in todo:
                        futures[pool.submit(run_task, task)] = task
                    for future in cf.as_completed(futures):
                        handled.add(future)
                        record = _outcome(future, futures[future])
                        if record is None:
                            continue
                        n_done += 1
                        if "error" not in record:
                            append(record)
                            done[_record_key(record)] = record
                        else:
                            n_failed += 1
                            _log_error(out / ERRORS_NAME, record)
                        if progress is not None:
                            progress(record, n_done, n_total)
                except KeyboardInterrupt:
                    interrupted = True
                    unhandled = {f: t for f, t in futures.items() if f not in handled}
                    for record in _wind_down(unhandled, own_pool):
                        append(record)
                        done[_record_key(record)] = record
        finally:
            if own_pool is not None:
                own_pool.shutdown(wait=not interrupted, cancel_futures=True)
    records = [done[t.key] for t in tasks if t.key in done]
    _write_tables(out, records, interrupted=interrupted, n_tasks=len(tasks), failed=n_failed)
    if interrupted:
        raise BenchmarkInterrupted(records)
    return records


def pending_tasks(tasks: Iterable[BenchTask], out_dir: str | Path) -> list[BenchTask]:
    """The tasks that :func:`run_benchmark` would run: those without a record in
    ``out_dir/runs.jsonl``."""
    done = {_record_key(r) for r in read_records(Path(out_dir) / RUNS_NAME)}
    return [t for t in dict.fromkeys(tasks) if t.key not in done]


def read_records(path: str | Path) -> list[dict[str, Any]]:
    """The run records of a ``runs.jsonl`` file (none if it does not exist; a line cut short by
    a crash is skipped)."""
    path = Path(path)
    if not path.exists():
        return []
    records = []
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            record = json.loads(line)
        except json.JSONDecodeError:
            continue
        if isinstance(record, dict) and {"id", "method", "seed"} <= set(record):
            records.append(record)
    return records


def summarize(records: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """One row per group and method (catalog order, then :data:`METHODS` order).

    Parameters
    ----------
    records : iterable of dict
        Run records (:func:`run_task`); a ``nmse_test`` of ``None`` counts as infinite, and a
        record with an ``error`` key counts only in ``errors``.

    Returns
    -------
    list of dict
        With the keys of :data:`SUMMARY_FIELDS`: ``n`` runs, ``nmse_median`` and ``nmse_q75``
        (the 75% quantile, linear interpolation as numpy's default), ``floor_median`` (of the
        runs' noise floors; ``None`` when no record has one), ``excess_median`` (the median over
        noisy runs of the test NMSE over the truth's on the same readings, 1.0 for a law as good
        as the truth; ``None`` when no record has ``nmse_truth`` or the median is infinite), ``exact_rate`` and
        ``n_exact``, ``wall_median`` and ``cpu_median`` (seconds; ``None`` for CPU when no record
        has it: records written before it was kept), ``points_median``, ``timed_out`` and ``errors``
        (counts), and the paper's Racing-CVGP ``paper_median`` / ``paper_q75`` for the group
        (``None`` when the paper has none).
    """
    from rcvgp.benchmarks import list_groups

    cells: dict[tuple[str, str], list[Mapping[str, Any]]] = {}
    for r in records:
        cells.setdefault((str(r["group"]), str(r["method"])), []).append(r)
    group_order = {g: i for i, g in enumerate(list_groups())}
    method_order = {m: i for i, m in enumerate(METHODS)}
    rows = []
    for (group, method) in sorted(cells, key=lambda k: (group_order.get(k[0], len(group_order)), k[0],
                                                        method_order.get(k[1], len(METHODS)), k[1])):
        ok = [r for r in cells[(group, method)] if "error" not in r]
        nmse = [math.inf if r.get("nmse_test") is None else float(r["nmse_test"]) for r in ok]
        n_exact = sum(bool(r.get("exact")) for r in ok)
        forms = [bool(r["form"]) for r in ok if r.get("form") is not None]
        withins = [bool(r["within_noise"]) for r in ok if r.get("within_noise") is not None]
        paper = PAPER_RACING_NMSE.get(group, (None, None))
        rows.append({
            "group": group,
            "method": method,
            "n": len(ok),
            "nmse_median": _finite_or_none(_quantile(nmse, 0.5)),
            "nmse_q75": _finite_or_none(_quantile(nmse, 0.75)),
            "floor_median": _quantile([float(r["nmse_floor"]) for r in ok if r.get("nmse_floor") is not None], 0.5),
            "excess_median": _finite_or_none(_quantile([_excess(r) for r in ok if r.get("nmse_truth")], 0.5)),
            "exact_rate": n_exact / len(ok) if ok else None,
            "n_exact": n_exact,
            "n_form": sum(forms) if forms else None,
            "n_within": sum(withins) if withins else None,
            "wall_median": _quantile([float(r["wall_seconds"]) for r in ok], 0.5),
            "cpu_median": _quantile([float(r["cpu_seconds"]) for r in ok if r.get("cpu_seconds") is not None],
                                    0.5),
            "points_median": _quantile([float(r["points"]) for r in ok], 0.5),
            "timed_out": sum(bool(r.get("timed_out")) for r in ok),
            "errors": len(cells[(group, method)]) - len(ok),
            "paper_median": paper[0],
            "paper_q75": paper[1],
        })
    return rows


def _excess(record: Mapping[str, Any]) -> float:
    """A noisy run's test NMSE over the truth's on the same test readings (inf if not finite)."""
    nmse = record.get("nmse_test")
    return math.inf if nmse is None else float(nmse) / float(record["nmse_truth"])


def format_table(rows: Sequence[Mapping[str, Any]]) -> str:
    """The summary rows as an aligned text table (NMSE below 1e-6 printed ``<1e-6``, as the
    paper does), with the paper's Racing-CVGP median / 75% for the group in the last column.
    When some run had noise, three more columns: the median noise floor and the median of each
    run's test NMSE over the truth's on the same readings after the NMSE's, and after EXACT the
    runs whose law has the right form (:func:`judge_form`)."""
    noisy = any(row.get("floor_median") for row in rows)

    def rate(row: Mapping[str, Any], key: str) -> str:
        n, k = int(row["n"]), row.get(key)
        return f"{k}/{n} ({k / n:.0%})" if n and k is not None else "-"

    # (header, cell, right-aligned, shown)
    columns: list[tuple[str, Callable[[Mapping[str, Any]], str], bool, bool]] = [
        ("GROUP", lambda r: str(r["group"]), False, True),
        ("METHOD", lambda r: str(r["method"]), False, True),
        ("RUNS", lambda r: str(r["n"]) + (f" (+{r['errors']} failed)" if r.get("errors") else ""), True, True),
        ("NMSE MEDIAN", lambda r: _nmse_text(r.get("nmse_median"), int(r["n"])), True, True),
        ("NMSE 75%", lambda r: _nmse_text(r.get("nmse_q75"), int(r["n"])), True, True),
        ("NMSE FLOOR", lambda r: "-" if r.get("floor_median") is None else f"{r['floor_median']:.3g}", True, noisy),
        ("/ TRUTH", lambda r: "-" if r.get("excess_median") is None else f"{r['excess_median']:.2f}x", True, noisy),
        ("EXACT", lambda r: rate(r, "n_exact"), False, True),
        ("FORM", lambda r: rate(r, "n_form"), False, noisy),
        ("WITHIN NOISE", lambda r: rate(r, "n_within"), False, noisy),
        ("WALL MEDIAN", lambda r: _seconds(r.get("wall_median")), True, True),
        ("CPU MEDIAN", lambda r: _seconds(r.get("cpu_median")), True, True),
        ("POINTS MEDIAN", lambda r: "-" if r.get("points_median") is None else f"{r['points_median']:,.0f}", True, True),
        ("TIMED OUT", lambda r: str(r["timed_out"]), True, True),
        ("PAPER RACING-CVGP MEDIAN / 75%",
         lambda r: f"{r['paper_median']} / {r['paper_q75']}" if r.get("paper_median") else "-", False, True),
    ]
    shown = [c for c in columns if c[3]]
    table = [[c[0] for c in shown]] + [[c[1](row) for c in shown] for row in rows]
    widths = [max(len(line[i]) for line in table) for i in range(len(shown))]
    return "\n".join(
        "  ".join(cell.rjust(w) if c[2] else cell.ljust(w) for cell, w, c in zip(line, widths, shown)).rstrip()
        for line in table
    )


def format_record(record: Mapping[str, Any], n_done: int | None = None, n_total: int | None = None) -> str:
    """One line for a finished run: id, method, seed, test NMSE, exact or not, points, wall time."""
    count = f"[{n_done}/{n_total}] " if n_done is not None and n_total is not None else ""
    head = f"{count}{record['id']} {record['method']} seed {record['seed']}"
    if "error" in record:
        return f"{head}: failed: {record['error']}"
    nmse = record.get("nmse_test")
    nmse_text = "inf" if nmse is None else f"{nmse:.3g}"
    floor = f" (floor {record['nmse_floor']:.3g})" if record.get("nmse_floor") else ""
    exact = "yes" if record.get("exact") else "no"
    stopped = " (timed out: best so far)" if record.get("timed_out") else ""
    return (f"{head}: NMSE {nmse_text}{floor}  exact {exact}  points {record['points']:,}  "
            f"{record['wall_seconds']:.1f} s{stopped}")


# -- internals ------------------------------------------------------------------------------------


def _check_method(method: str) -> None:
    if method not in METHODS:
        close = difflib.get_close_matches(str(method), METHODS, n=1)
        hint = f"; did you mean `{close[0]}`?" if close else ""
        raise ConfigError(f"unknown method {method!r}{hint} (one of {', '.join(METHODS)})")


def _key(bench_id: str, method: str, seed: int, noise: str, time_cap: float | None,
         settings: Mapping[str, Any], rescale: bool) -> str:
    cap = None if time_cap is None else float(time_cap)
    key: list[Any] = [bench_id, method, int(seed), str(noise), cap, sorted(settings.items())]
    # Only a rescaled run's key says so: a plain run keeps the key of records written before.
    return json.dumps(key + ["rescale"] if rescale else key)


def _record_key(record: Mapping[str, Any]) -> str:
    return _key(record["id"], record["method"], record["seed"], record.get("noise", "none"),
                record.get("time_cap"), record.get("settings") or {}, record.get("rescale") is not None)


def _truth_nmse(oracle: Any, result: Any) -> float | None:
    """The test NMSE of the truth itself on the run's test readings (0 without noise)."""
    from rcvgp.metrics import regression_metrics

    if result.test_points is None:
        return None
    points = result.test_points
    nmse = float(regression_metrics(points.y, oracle.truth(points.X))["nmse"])
    return nmse if math.isfinite(nmse) else None


def _factors(powers: Mapping[str, int] | None) -> dict[str, float] | None:
    """The factors of a rescaled run's powers of ten."""
    return None if powers is None else {name: 10.0 ** int(p) for name, p in powers.items()}


def _outcome(future: cf.Future[dict[str, Any]], task: BenchTask) -> dict[str, Any] | None:
    """A finished future's record; an error record if the run raised; None if it was stopped."""
    if future.cancelled():
        return None
    try:
        record = future.result()
    except KeyboardInterrupt:
        return None
    except Exception as exc:  # noqa: BLE001 - one failed run must not end the benchmark
        from rcvgp.benchmarks import get_benchmark

        return {"id": task.bench_id, "group": get_benchmark(task.bench_id).group, "method": task.method,
                "seed": task.seed, "error": f"{type(exc).__name__}: {exc}",
                "traceback": "".join(traceback.format_exception(exc))}  # a worker's own is in its cause
    if record.get("stopped") == "interrupted":  # stopped before its end: not a finished run
        return {"id": record["id"], "group": record["group"], "method": record["method"], "seed": record["seed"],
                "error": "stopped by an interrupt before it finished; not saved (it runs again next time)"}
    return record


def _wind_down(futures: Mapping[cf.Future[dict[str, Any]], BenchTask],
               own_pool: cf.ProcessPoolExecutor | None) -> list[dict[str, Any]]:
    """After Ctrl-C: start nothing more, stop what runs, and keep any run that finished in the
    meantime. A run stopped early is not a finished run, so our own workers are simply ended
    (their runs are discarded either way); runs in threads of this process stop at their next
    generation; an outside executor's running tasks get a grace period."""
    for future in futures:
        future.cancel()
    _STOP.set()
    if own_pool is not None:
        for process in list((getattr(own_pool, "_processes", None) or {}).values()):  # ours to end
            process.terminate()
    finished = []
    try:
        cf.wait(list(futures), timeout=0.0 if own_pool is not None else _GRACE_SECONDS)
    except KeyboardInterrupt:  # a second Ctrl-C: do not wait any more
        pass
    for future, task in futures.items():
        if future.done():
            record = _outcome(future, task)
            if record is not None and "error" not in record:
                finished.append(record)
    return finished


def environment() -> dict[str, Any]:
    """What a bench ran on: the libraries whose floating point decides a search's path (a seed
    gives the same answer on one machine; another BLAS or numpy can part a run's path, as a
    different operating point would), the Python, the platform and the cores."""
    import platform
    from importlib.metadata import PackageNotFoundError, version

    from rcvgp import __version__

    libraries = {}
    for name in ("numpy", "scipy", "sympy", "pyzmq"):
        try:
            libraries[name] = version(name)
        except PackageNotFoundError:  # an environment without pip's metadata
            libraries[name] = None
    return {"rcvgp": __version__, "python": platform.python_version(), **libraries,
            "platform": platform.platform(), "cores": os.cpu_count()}


def _write_tables(out: Path, records: list[dict[str, Any]], *, interrupted: bool, n_tasks: int,
                  failed: int = 0) -> None:
    from rcvgp import __version__

    rows = summarize(records)
    summary = {"rcvgp_version": __version__, "environment": environment(), "tasks": n_tasks,
               "finished": len(records), "failed": failed, "interrupted": interrupted, "summary": rows,
               "runs": records}
    write_atomic(out / SUMMARY_JSON_NAME, json.dumps(summary, indent=1, allow_nan=False) + "\n")
    write_atomic(out / RUNS_CSV_NAME, _csv(records, RECORD_FIELDS))
    write_atomic(out / SUMMARY_CSV_NAME, _csv(rows, SUMMARY_FIELDS))


def _csv(rows: Iterable[Mapping[str, Any]], columns: Sequence[str]) -> str:
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(columns)
    for row in rows:
        writer.writerow(["" if row.get(c) is None else
                         json.dumps(row[c], sort_keys=True) if isinstance(row.get(c), (dict, list)) else row[c]
                         for c in columns])
    return buffer.getvalue()


def _log_error(path: Path, record: Mapping[str, Any]) -> None:
    """Add a failed run's record to ``errors.jsonl``, on disk before the next run ends."""
    with open(path, "a", encoding="utf-8") as fh:
        fh.write(json.dumps({k: record.get(k) for k in ("id", "group", "method", "seed", "error", "traceback")},
                            default=str) + "\n")
        fh.flush()
        os.fsync(fh.fileno())


@contextmanager
def _append_lines(path: Path) -> Iterator[Callable[[Mapping[str, Any]], None]]:
    """Append JSON lines to ``path``, each flushed and synced to disk before the next."""
    with open(path, "a+", encoding="utf-8") as fh:
        if fh.tell() > 0:  # a line cut short by a crash must not swallow the next one
            fh.seek(fh.tell() - 1)
            last = fh.read(1)
            fh.seek(0, os.SEEK_END)
            if last != "\n":
                fh.write("\n")

        def append(record: Mapping[str, Any]) -> None:
            fh.write(json.dumps(record, allow_nan=False) + "\n")
            fh.flush()
            os.fsync(fh.fileno())

        yield append


def _quantile(values: Sequence[float], q: float) -> float | None:
    """The q-quantile with linear interpolation (numpy's default), exact with infinities."""
    if not values:
        return None
    ordered = sorted(values)
    position = q * (len(ordered) - 1)
    low = math.floor(position)
    high = min(low + 1, len(ordered) - 1)
    fraction = position - low
    a, b = ordered[low], ordered[high]
    if fraction == 0 or a == b:
        return a
    if math.isinf(b):
        return b
    return a + (b - a) * fraction


def _children_cpu() -> float:
    """CPU seconds of this process's ended child processes (0 where the OS does not say)."""
    try:
        import resource
    except ImportError:  # Windows
        return 0.0
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _finite_or_none(value: float | None) -> float | None:
    return value if value is not None and math.isfinite(value) else None


def _seconds(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f} s"


def _nmse_text(value: float | None, n: int) -> str:
    if n == 0:
        return "-"
    if value is None:
        return "inf"
    return "<1e-6" if value < _TINY else f"{value:.3g}"
