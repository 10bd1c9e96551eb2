"""A search's fits over worker processes: the same runs (seed 0, no time cap) with one worker and
with ``--workers`` N, their wall time, their CPU time (this process and its workers), the speed-up,
and a check that both found the same law with the same points and requests. Then a projection for
``--project`` workers by Amdahl's law, from the share of the one-worker runs' wall time spent
outside the fits (the part no worker takes over), and again from the speed-up measured at N.

Wall times depend on what else the machine runs: compare runs made at the same time, and look at
the load average printed first.

    python benchmarks/workers_bench.py --ids livermore2/Vars4-1,sincos-3-2-2/1 --workers 2 --project 16
"""

from __future__ import annotations

import argparse
import os
import resource
import time
from typing import Any

import numpy as np

from rcvgp.search import SearchConfig, SearchResult, run_search
from rcvgp.search.fitting import Fitter
from rcvgp.simulate import SimulatedOracle


def children_cpu() -> float:
    """CPU seconds of this process's ended children (a run's pool ends with the run)."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def timed(bench_id: str, method: str, config: SearchConfig, seed: int) -> dict[str, Any]:
    """One search, with its wall time, CPU time and the wall time spent in the batches of fits
    that workers take (:meth:`Fitter.fit` of two jobs or more; a single fit, as when pruning,
    stays in this process)."""
    fitting = [0.0]
    real = Fitter.fit

    def clocked(self: Fitter, jobs: Any) -> Any:
        start = time.perf_counter()
        try:
            return real(self, jobs)
        finally:
            if len(jobs) > 1:
                fitting[0] += time.perf_counter() - start

    Fitter.fit = clocked  # type: ignore[method-assign]
    oracle = SimulatedOracle.from_benchmark(bench_id, seed=np.random.default_rng([seed, 0x5EED]))  # as rcvgp bench
    wall, cpu, kids = time.perf_counter(), time.process_time(), children_cpu()
    try:
        result = run_search(method, oracle, config, seed)
    finally:
        Fitter.fit = real  # type: ignore[method-assign]
    return {"wall": time.perf_counter() - wall, "cpu": time.process_time() - cpu + children_cpu() - kids,
            "fits": fitting[0], "result": result}


def found(result: SearchResult) -> tuple[Any, ...]:
    return (result.best.expression, result.test_metrics, result.points_measured, result.requests,
            [c.expression for c in result.equations])


def amdahl(serial: float, n: int) -> float:
    """The speed-up of ``n`` workers when a fraction ``serial`` of the time is not shared out."""
    return 1.0 / (serial + (1.0 - serial) / n)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--ids", default="livermore2/Vars4-1,sincos-3-2-2/1", help="catalog ids, comma-separated")
    parser.add_argument("--methods", default="racing", help="searches, comma-separated (default racing)")
    parser.add_argument("--workers", type=int, default=2, help="workers to compare with one (default 2)")
    parser.add_argument("--project", type=int, default=16, help="workers to project the speed-up for (default 16)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--population", type=int, default=SearchConfig().population)
    parser.add_argument("--generations", type=int, default=SearchConfig().generations)
    args = parser.parse_args()
    n = args.workers
    config = SearchConfig(population=args.population, generations=args.generations)
    print(f"{os.cpu_count()} cores; load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    print(f"{'run':32} {'workers':>7} {'wall s':>8} {'CPU s':>8} {'fits s':>8} {'speed-up':>8}  same result")
    totals = {1: [0.0, 0.0, 0.0], n: [0.0, 0.0, 0.0]}
    for bench_id in args.ids.split(","):
        for method in args.methods.split(","):
            one = timed(bench_id, method, config, args.seed)
            many = timed(bench_id, method, config.replace(workers=n), args.seed)
            same = found(one["result"]) == found(many["result"])
            for w, run in ((1, one), (n, many)):
                totals[w] = [t + run[k] for t, k in zip(totals[w], ("wall", "cpu", "fits"))]
            name = f"{bench_id} {method}"
            print(f"{name:32} {1:>7} {one['wall']:8.1f} {one['cpu']:8.1f} {one['fits']:8.1f} {'':>8}")
            print(f"{'':32} {n:>7} {many['wall']:8.1f} {many['cpu']:8.1f} {many['fits']:8.1f} "
                  f"{one['wall'] / many['wall']:7.2f}x  {'yes' if same else 'NO'}")
    wall1, cpu1, fits1 = totals[1]
    walln, cpun, _ = totals[n]
    speedup = wall1 / walln
    serial = 1.0 - fits1 / wall1
    # The serial share that the measured speed-up implies: what the fits lose to sending trees and
    # data, uneven chunks and starting the pool counts as serial here.
    effective = max(0.0, min(1.0, (n / speedup - 1.0) / (n - 1.0))) if n > 1 else serial
    print(f"\nall runs: wall {wall1:.1f} s -> {walln:.1f} s with {n} workers ({speedup:.2f}x); "
          f"CPU {cpu1:.1f} s -> {cpun:.1f} s")
    print(f"fits: {fits1 / wall1:.0%} of the one-worker wall time; serial share {serial:.0%}")
    print(f"Amdahl from the serial share: {amdahl(serial, n):.2f}x at {n}, {amdahl(serial, args.project):.2f}x at "
          f"{args.project} (at most {1 / serial:.1f}x)")
    print(f"from the measured {speedup:.2f}x (serial share {effective:.0%} with the overheads): "
          f"{amdahl(effective, args.project):.2f}x at {args.project}")


if __name__ == "__main__":
    main()
