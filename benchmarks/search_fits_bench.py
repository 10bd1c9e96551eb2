"""The fits a search really makes, timed: records every ``fit_constants`` call of racing runs on
a few benchmark equations (seed 0), then fits the same trees on the same data again. Prints the
first pass (which compiles every tree, as the search does), the best of ``--repeats`` passes
(warm: compiled code cached), the tree evaluations, and how many fits end below 1e-10, 1e-6
and 1e-3. A whole search is no measure of fitting speed: any change in rounding, or in time
under a cap, sends it down another path. To compare two checkouts, record once and replay the
same file in both:

    python benchmarks/search_fits_bench.py --calls fits.npz --fits a.npz                # records, times
    python benchmarks/search_fits_bench.py --calls fits.npz --fits b.npz --against a.npz  # other checkout
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np

import rcvgp.search.engine as engine
import rcvgp.search.fitting as fitting
from rcvgp.constants import Trials, fit_constants
from rcvgp.search import SearchConfig, run_search
from rcvgp.simulate import SimulatedOracle

#: One recorded fit: tokens, data, optimiser, starting constants, iterations.
Call = tuple[tuple[str, ...], Trials, str, "np.ndarray | None", int]


def record(ids: list[str], seconds: float) -> list[Call]:
    """The arguments of every fit the racing runs (seed 0, ``seconds`` each) made."""
    calls: list[Call] = []

    def recording(tokens, trials, optimizer="LM", rng=None, init=None, maxiter=200):  # type: ignore[no-untyped-def]
        calls.append((tuple(tokens), trials, optimizer, None if init is None else np.array(init), maxiter))
        return fit_constants(tokens, trials, optimizer, rng, init, maxiter)

    engine.fit_constants = fitting.fit_constants = recording  # the final refit's, and those inside GP
    try:
        for bench_id in ids:
            run_search("racing", SimulatedOracle.from_benchmark(bench_id), SearchConfig(max_seconds=seconds), seed=0)
    finally:
        engine.fit_constants = fitting.fit_constants = fit_constants
    return calls


def save(path: Path, calls: list[Call]) -> None:
    """Arrays and JSON in one ``.npz`` (no pickle): each data set once, each call by reference."""
    index: dict[int, int] = {}
    arrays: dict[str, np.ndarray] = {}
    rows = []
    for tokens, trials, optimizer, init, maxiter in calls:
        k = index.setdefault(id(trials), len(index))
        arrays.setdefault(f"X{k}", trials.X)
        arrays.setdefault(f"y{k}", trials.y)
        arrays.setdefault(f"held{k}", np.array(sorted(trials.controlled), dtype=int))
        rows.append([list(tokens), k, optimizer, None if init is None else init.tolist(), maxiter])
    np.savez_compressed(path, calls=np.array(json.dumps(rows)), **arrays)


def load(path: Path) -> list[Call]:
    with np.load(path, allow_pickle=False) as f:
        trials: dict[int, Trials] = {}
        calls: list[Call] = []
        for tokens, k, optimizer, init, maxiter in json.loads(str(f["calls"])):
            if k not in trials:
                trials[k] = Trials(f[f"X{k}"], f[f"y{k}"], frozenset(int(i) for i in f[f"held{k}"]))
            calls.append((tuple(tokens), trials[k], optimizer, None if init is None else np.array(init), maxiter))
    return calls


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--ids", default="sincos-4-4-6/3,livermore2/Vars4-8")
    parser.add_argument("--seconds", type=float, default=60.0, help="time cap of each recorded run")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--calls", type=Path, help="replay the fits in this file; record them into it if it does not exist")
    parser.add_argument("--fits", type=Path, help="save each fit's fitness and evaluations (first pass) into this .npz")
    parser.add_argument("--against", type=Path, help="compare each fit with those saved by --fits in another checkout")
    args = parser.parse_args()
    if args.calls is not None and args.calls.exists():
        calls = load(args.calls)
    else:
        calls = record(args.ids.split(","), args.seconds)
        if args.calls is not None:
            save(args.calls, calls)
    before = None
    if args.against is not None:
        with np.load(args.against) as other:
            before = other["fitness"]
        if len(before) != len(calls):
            raise SystemExit(f"{args.against} holds {len(before)} fits, not {len(calls)}: another --calls file")
    times = []
    fitness, evals = np.empty(len(calls)), np.empty(len(calls), dtype=int)
    for _ in range(max(args.repeats, 1)):
        start = time.perf_counter()
        for i, (tokens, trials, optimizer, init, maxiter) in enumerate(calls):
            fit = fit_constants(tokens, trials, optimizer, np.random.default_rng(0), init, maxiter)
            fitness[i], evals[i] = fit.fitness, fit.n_evals
        times.append(time.perf_counter() - start)
    print(f"{len(calls)} fits, {evals.sum()} tree evaluations: first pass {times[0]:.2f} s "
          f"(compiles every tree, as the search does), best of {len(times)} {min(times):.2f} s "
          f"({min(times) / len(calls) * 1e3:.3f} ms per fit)")
    print(_quality(fitness))
    if args.fits is not None:
        np.savez(args.fits, fitness=fitness, evals=evals)
    if before is not None:
        print(f"against {args.against}: {_quality(before)}; better by more than 10% in "
              f"{int(np.sum(fitness < 0.9 * before))} fits, worse in {int(np.sum(fitness > 1.1 * before))}")


def _quality(fitness: np.ndarray) -> str:
    return "fits below " + ", ".join(f"{t:g}: {int(np.sum(fitness < t))}" for t in (1e-10, 1e-6, 1e-3))


if __name__ == "__main__":
    main()
