"""``rcvgp bench``: run benchmark equations x methods x seeds in parallel processes and print the
paper's table (median and 75% test NMSE, exact-recovery rate, median wall and CPU time and
points per group and method, beside the paper's Racing-CVGP numbers).

The work is :func:`rcvgp.bench.run_benchmark`: results go to ``--out`` (``runs.jsonl``, one line
per finished run, which makes the command resumable: run it again and finished runs are skipped;
then ``summary.json``, ``runs.csv`` and ``summary.csv``; ``errors.jsonl`` for runs that raised).
Progress is one line per finished run on stderr. When every run fails there is no table: one line
on stderr says how many failed and where their errors are, and the exit status is 1. An unknown
group, id or method is one line on stderr and exit status 2; Ctrl-C (or
SIGTERM) stops starting runs, ends the running ones, keeps the finished ones, prints their table
and exits with 130.
"""

from __future__ import annotations

import argparse
import signal
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from rcvgp.commands import add_workers_option, int_at_least, positive_float, workers_flag
from rcvgp.search.base import OPTIMIZERS, SearchConfig

__all__ = ["register"]

_EPILOG = """\
examples:
  rcvgp bench --groups sincos-3-2-2 --methods racing,gp --seeds 5 --jobs 4
  rcvgp bench --groups livermore2-n4,feynman-n4 --time-cap 600 --jobs 8 --out results/paper
  rcvgp bench --ids sincos-3-2-2/1,feynman/I.8.14 --methods racing --noise relative:0.01 --json
  rcvgp bench --groups livermore2-n4 --methods racing --rescale --out results/units

groups: sincos-3-2-2 sincos-4-4-6 sincos-5-5-5 sincos-6-6-10 sincos-8-8-12 livermore2-n4
livermore2-n5 livermore2-n6 feynman-n4 feynman-n5, or `all` (ids: `rcvgp oracles list`).

Each run chooses its expression on validation data, then scores it once on fresh test points
with no variable held. A run that reaches --time-cap reports its best expression so far and is
counted as timed out. With noise, the table gives the median noise floor (the test NMSE of the
true law itself under that noise) and, per run, the test NMSE over the truth's on the same test
readings (its median, / TRUTH). With --rescale, each run measures its equation in other units:
every variable and y times a power of ten from 1e-6 to 1e6, drawn from the seed and the id, and
is judged exact against the law in those units. Run the same command again to continue: finished
runs are skipped (a run is the same when its id, method, seed, noise, --rescale, time cap and
search settings are). To spread the runs over a cluster, call rcvgp.bench.run_benchmark with a
Dask executor (benchmarks/README.md).

A run that fails (raises) is left out of the table, its error and traceback written to
DIR/errors.jsonl; it runs again next time.

exit status: 0 done, 1 every run failed (no table; the errors in DIR/errors.jsonl), 2 bad flag or
unknown group/id/method, 130 interrupted by Ctrl-C or SIGTERM (finished runs kept)."""


def register(subparsers: Any) -> None:
    """Add ``bench`` to the ``rcvgp`` parser."""
    p = subparsers.add_parser(
        "bench",
        help="reproduce the paper's benchmark tables (parallel runs, resumable)",
        description="Run benchmark equations x methods x seeds, each run in its own process, and print per "
        "group and method: median and 75% test NMSE, exact-recovery rate, median wall and CPU time and points.",
        epilog=_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--groups", metavar="G,G,...", type=_names,
                   help="benchmark groups, comma-separated, e.g. sincos-3-2-2,livermore2-n4, or `all`")
    p.add_argument("--ids", metavar="ID,ID,...", type=_names,
                   help="catalog ids, comma-separated, e.g. sincos-3-2-2/1,feynman/I.8.14")
    p.add_argument("--methods", metavar="M,M,...", type=_names, default=["racing", "cvgp", "cvgp-all", "gp"],
                   help="searches, comma-separated, of racing, cvgp, cvgp-all, gp (default: all four)")
    p.add_argument("--seeds", metavar="N", type=int_at_least(1), default=1,
                   help="runs per equation and method, with seeds 0..N-1 (default: 1)")
    p.add_argument("--jobs", "-j", metavar="J", type=int_at_least(1), default=1,
                   help="runs at the same time, each in its own single-threaded process (default: 1)")
    add_workers_option(p, "1, the run's own process; J x N processes in all")
    p.add_argument("--time-cap", metavar="SECONDS", type=positive_float, default=120.0,
                   help="wall time per run; a run that reaches it reports its best so far (default: 120)")
    p.add_argument("--noise", metavar="KIND:SCALE", default="none",
                   help="measurement noise of the simulated oracles, e.g. relative:0.01 (default: none)")
    p.add_argument("--rescale", action="store_true",
                   help="measure each equation in random units: every variable and y times a power of ten "
                   "in 1e-6..1e6, drawn from the seed and the equation id (recorded in each run)")
    p.add_argument("--population", metavar="N", type=int_at_least(1), help="population size (default: 100)")
    p.add_argument("--generations", metavar="N", type=int_at_least(1),
                   help="generations in total, split over the rounds (default: 100)")
    p.add_argument("--batch", metavar="N", type=int_at_least(1),
                   help="points per control-variable trial (default: 256)")
    p.add_argument("--restarts", metavar="N", type=int_at_least(0),
                   help="times Racing-CVGP may start again from new random trees while no fit reaches the "
                   f"noise floor (default: {SearchConfig().restarts})")
    p.add_argument("--optimizer", metavar="NAME", choices=OPTIMIZERS,
                   help=f"constant optimiser, one of {', '.join(OPTIMIZERS)} (default: {SearchConfig().optimizer})")
    p.add_argument("--out", metavar="DIR", default="bench-results",
                   help="output folder; finished runs in it are skipped (default: bench-results/)")
    p.add_argument("--per-equation", action="store_true",
                   help="before the table, print one line per run: NMSE, exact or not, points, wall time")
    p.add_argument("--json", action="store_true",
                   help="print the summary JSON (summary.json) on stdout instead of the table")
    p.add_argument("--quiet", "-q", action="store_true", help="no progress lines on stderr")
    p.set_defaults(func=run_bench)


def run_bench(args: argparse.Namespace) -> int:
    """Build the tasks (every name checked first), run them, print the table."""
    from rcvgp.bench import (
        ERRORS_NAME, SUMMARY_JSON_NAME, BenchmarkInterrupted, format_record, format_table, make_tasks,
        pending_tasks, run_benchmark, select_benchmarks, summarize,
    )  # fmt: skip
    from rcvgp.benchmarks import list_groups
    from rcvgp.cli import ExitCode
    from rcvgp.errors import ConfigError

    if not args.groups and not args.ids:
        raise ConfigError(f"give --groups or --ids (groups: {', '.join(list_groups())}, or `all`)")
    workers = workers_flag(args.workers) or 1
    settings = {name: getattr(args, name) for name in ("population", "generations", "batch", "restarts", "optimizer")
                if getattr(args, name) is not None}
    tasks = make_tasks(select_benchmarks(args.groups or (), args.ids or ()), args.methods, range(args.seeds),
                       time_cap=args.time_cap, noise=args.noise, settings=settings, rescale=args.rescale,
                       workers=workers)
    out = Path(args.out)
    started = time.monotonic()
    failed = 0

    def show(record: dict[str, Any], n_done: int, n_total: int) -> None:
        nonlocal failed
        failed += "error" in record
        if not args.quiet:
            elapsed = time.monotonic() - started
            print(f"{format_record(record, n_done, n_total)}   [{elapsed:.0f} s]", file=sys.stderr, flush=True)

    if not args.quiet:
        earlier = len(tasks) - len(pending_tasks(tasks, out))
        print(f"rcvgp bench: {len(tasks)} run(s)" + (f", {earlier} finished earlier (skipped)" if earlier else "")
              + f"; {args.jobs} at a time" + (f", {workers} workers each" if workers > 1 else "")
              + f", at most {args.time_cap:g} s each; results in {out}",
              file=sys.stderr, flush=True)
    interrupted = False
    try:
        with _terminate_as_interrupt():
            records = run_benchmark(tasks, None, out, show, jobs=args.jobs)
    except BenchmarkInterrupted as stop:
        records, interrupted = stop.records, True
    if args.per_equation and not args.json:
        for record in records:
            print(format_record(record))
        print()
    every_run_failed = failed > 0 and not records
    if args.json:
        print((out / SUMMARY_JSON_NAME).read_text(encoding="utf-8"), end="")
    elif not every_run_failed:  # a table of headers alone would say nothing
        print(format_table(summarize(records)))
    sys.stdout.flush()
    errors = out / ERRORS_NAME
    if every_run_failed and not interrupted:
        print(f"rcvgp bench: every run failed ({failed} of {len(tasks)}), so there is no table; their errors "
              f"are in {errors} (one line per run, with its traceback)", file=sys.stderr)
        return int(ExitCode.FAILED)
    if not args.quiet:
        print(f"rcvgp bench: {len(records)} of {len(tasks)} run(s) finished; "
              f"{out / 'summary.json'}, runs.csv, summary.csv, runs.jsonl", file=sys.stderr)
    if failed:
        print(f"rcvgp bench: {failed} run(s) failed and are not in the table; their errors are in {errors} "
              "(they run again next time)", file=sys.stderr)
    if interrupted:
        print("rcvgp bench: interrupted; run the same command again to continue", file=sys.stderr)
        return int(ExitCode.INTERRUPTED)
    return int(ExitCode.OK)


@contextmanager
def _terminate_as_interrupt() -> Iterator[None]:
    """SIGTERM (``kill``, ``timeout``, a batch scheduler) stops the benchmark as Ctrl-C does.
    By default it would end this process alone: the workers would go on with their searches,
    unseen, and the table of the finished runs would not be written."""
    if not hasattr(signal, "SIGTERM") or threading.current_thread() is not threading.main_thread():
        yield
        return

    def interrupt(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGTERM, interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def _names(text: str) -> list[str]:
    names = [part.strip() for part in text.split(",") if part.strip()]
    if not names:
        raise argparse.ArgumentTypeError(f"expected comma-separated names, got {text!r}")
    return names
