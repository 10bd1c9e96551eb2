"""``rcvgp run EXPERIMENT.yaml`` and its short form ``rcvgp discover --oracle ID|ENDPOINT``.

Both run an experiment through :func:`rcvgp.runner.run_experiment`: progress lines on stderr
(unless ``--quiet``), then a readable summary on stdout, or with ``--json`` exactly one JSON
object (the content of ``result.json``); ``--report`` also writes ``report.html``. Results go to the output folder with the journal of
every measurement; ``--resume`` continues an interrupted run from that journal. A bad file or
flag is one line on stderr and exit status 2; Ctrl-C saves the best expression so far and exits
with 130.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path
from typing import Any

from rcvgp.commands import add_workers_option, int_at_least, workers_flag
from rcvgp.errors import OracleError, ProtocolError

__all__ = ["register"]

_EPILOG_RUN = """\
experiment file (YAML), every key but `oracle` optional:
  name: my-law                     # default: the file's name
  oracle:                          # exactly one of catalog / expression / endpoint
    catalog: feynman/I.8.14        # a built-in simulated oracle (`rcvgp oracles list`)
    # expression: x0*x1 + sin(x2)  # or a law of your own, with its variables:
    # variables:
    #   - {name: x0, low: 0.1, high: 10, dist: loguniform}   # dist: uniform|loguniform|integer_uniform
    # endpoint: tcp://127.0.0.1:5555   # or a rig / oracle server, with
    # timeout: 10                  #   seconds per reply before a retry
    # deadline: 60                 #   seconds before a request is given up
    # server_key: server.key       #   CurveZMQ: the server's public key file
    # client_key: client.key_secret  #   and this client's key pair (optional)
    noise: relative:0.01           # simulated only: none | additive:S | relative:S | multiplicative:S
    latency: 0.0                   # simulated only: seconds per request (rehearse a slow rig)
  method: racing                   # racing | cvgp | cvgp-all | gp
  operators: [add, sub, mul, div, sin, cos]   # default: the catalog entry's set
  seed: 0
  search: {population: 100, generations: 100, batch: 256, n_trials: 5, optimizer: LM, workers: 1}
  budget: {points: 1000000, requests: 10000, seconds: 3600}
  output: runs/my-law              # relative to the experiment file's folder

exit status: 0 done, 2 bad file or flag, 3 oracle error, 4 oracle timeout, 130 interrupted
(the best expression so far is saved; continue with --resume)."""

_EPILOG_DISCOVER = """\
examples:
  rcvgp discover --oracle sincos-3-2-2/1 --budget-points 200000
  rcvgp discover --oracle tcp://127.0.0.1:5555 --method cvgp --seed 3 --json

Results go to runs/<oracle>-<method>-seed<N> under the current folder unless --output says
otherwise. For settings beyond these flags, write an experiment file (`rcvgp run --help`)."""


def register(subparsers: Any) -> None:
    """Add ``run`` and ``discover`` to the ``rcvgp`` parser."""
    from rcvgp.search.base import METHODS

    p_run = subparsers.add_parser(
        "run",
        help="run an experiment file (YAML): discover the law behind an oracle",
        description="Run the experiment described by a YAML file and save its results "
        "(result.json, summary.txt, history.jsonl, test_points.csv, and journal.jsonl with every measurement) "
        "in its output folder.",
        epilog=_EPILOG_RUN,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p_run.add_argument("experiment", metavar="EXPERIMENT.yaml", help="the experiment file")
    p_run.add_argument("--seed", type=int_at_least(0), metavar="N", help="override the file's seed")
    p_run.add_argument("--output", metavar="DIR", help="override the file's output folder (relative to here)")
    _add_common(p_run)
    p_run.set_defaults(func=run_command)

    p_disc = subparsers.add_parser(
        "discover",
        help="short form: discover the law behind a catalog oracle or an endpoint, no file needed",
        description="Discover the law behind a built-in simulated oracle (by catalog id) or an oracle "
        "server (by endpoint) with default settings.",
        epilog=_EPILOG_DISCOVER,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p_disc.add_argument("--oracle", required=True, metavar="ID|ENDPOINT",
                        help="a catalog id (see `rcvgp oracles list`), or an endpoint such as tcp://127.0.0.1:5555")
    p_disc.add_argument("--method", default="racing", choices=METHODS, help="the search (default: racing)")
    p_disc.add_argument("--seed", type=int_at_least(0), default=0, metavar="N", help="random seed (default: 0)")
    p_disc.add_argument("--budget-points", type=int, metavar="N", help="stop after measuring this many points")
    p_disc.add_argument("--budget-requests", type=int, metavar="N", help="stop after this many measure requests")
    p_disc.add_argument("--budget-seconds", type=float, metavar="S", help="stop after this much wall time")
    p_disc.add_argument("--operators", metavar="LIST",
                        help="operator set, comma-separated, e.g. add,sub,mul,sin (default: the oracle's hint)")
    p_disc.add_argument("--noise", metavar="KIND:SCALE",
                        help="simulated oracles: measurement noise, e.g. relative:0.01 (default: none)")
    p_disc.add_argument("--timeout", type=float, metavar="S", help="endpoints: seconds per reply before a retry")
    p_disc.add_argument("--deadline", type=float, metavar="S", help="endpoints: seconds before a request is given up")
    p_disc.add_argument("--output", metavar="DIR", help="output folder (default: runs/<oracle>-<method>-seed<N>)")
    _add_common(p_disc)
    p_disc.set_defaults(func=discover_command)


def _add_common(parser: argparse.ArgumentParser) -> None:
    add_workers_option(parser, "1, or the file's `search.workers`")
    parser.add_argument("--resume", action="store_true",
                        help="continue an interrupted run from the journal in its output folder; "
                        "journalled points are not measured again")
    parser.add_argument("--json", action="store_true",
                        help="print exactly one JSON object (the result) on stdout instead of the summary")
    parser.add_argument("--quiet", "-q", action="store_true", help="no progress lines on stderr")
    parser.add_argument("--report", action="store_true",
                        help='also write report.html, a page of pictures of the run, into its output folder '
                        '(needs matplotlib: pip install "rcvgp[plot]")')


def run_command(args: argparse.Namespace) -> int:
    """``rcvgp run``: load the file, apply the flags, run, report."""
    from rcvgp.config import load_experiment

    overrides: dict[str, Any] = {}
    if args.seed is not None:
        overrides["seed"] = args.seed
    if args.output is not None:
        overrides["output"] = args.output
    workers = workers_flag(args.workers)
    if workers is not None:
        overrides["search.workers"] = workers
    config = load_experiment(args.experiment, overrides=overrides)
    return _run(config, args)


def discover_command(args: argparse.Namespace) -> int:
    """``rcvgp discover``: build the experiment from flags, run, report."""
    from rcvgp.config import experiment_from_dict, is_endpoint

    kind = "endpoint" if is_endpoint(args.oracle) else "catalog"
    oracle: dict[str, Any] = {kind: args.oracle}
    if args.noise is not None:
        oracle["noise"] = args.noise
    if args.timeout is not None:
        oracle["timeout"] = args.timeout
    if args.deadline is not None:
        oracle["deadline"] = args.deadline
    slug = re.sub(r"[^A-Za-z0-9._-]+", "_", args.oracle.split("://")[-1]).strip("_") or "oracle"
    data: dict[str, Any] = {
        "name": slug,
        "oracle": oracle,
        "method": args.method,
        "seed": args.seed,
        "budget": {"points": args.budget_points, "requests": args.budget_requests, "seconds": args.budget_seconds},
        "output": args.output or f"runs/{slug}-{args.method}-seed{args.seed}",
    }
    if args.operators is not None:
        data["operators"] = args.operators
    workers = workers_flag(args.workers)
    if workers is not None:
        data["search"] = {"workers": workers}
    key_names = {
        "oracle": "--oracle", "oracle.catalog": "--oracle", "oracle.endpoint": "--oracle",
        "oracle.noise": "--noise", "oracle.timeout": "--timeout", "oracle.deadline": "--deadline",
        "method": "--method", "seed": "--seed", "operators": "--operators", "output": "--output",
        "budget.points": "--budget-points", "budget.requests": "--budget-requests",
        "budget.seconds": "--budget-seconds",
    }
    config = experiment_from_dict(data, source="rcvgp discover", base_dir=Path.cwd(), key_names=key_names)
    return _run(config, args)


def _identity(path: Path) -> tuple[int, int] | None:
    """Which file is at ``path`` (device and inode), None if none."""
    try:
        st = path.stat()
    except OSError:
        return None
    return st.st_dev, st.st_ino


def _run(config: Any, args: argparse.Namespace) -> int:
    from rcvgp.cli import ExitCode
    from rcvgp.journal import JOURNAL_NAME
    from rcvgp.runner import ProgressPrinter, format_summary, run_experiment

    progress = None if args.quiet else ProgressPrinter(sys.stderr)
    journal = Path(config.output) / JOURNAL_NAME
    before = _identity(journal)
    try:
        report = run_experiment(config, resume=args.resume, progress=progress,
                                notes=None if args.quiet else sys.stderr)
    except (OracleError, ProtocolError):
        # Only a journal this run wrote to can be resumed (an endpoint that never answered
        # leaves nothing, and an earlier run's journal is not this one's).
        if journal.exists() and (args.resume or _identity(journal) != before):
            print(f"rcvgp: every measurement so far is in {journal}; once the oracle is fixed, run the same "
                  f"command again{'' if args.resume else ' with --resume'}", file=sys.stderr)
        raise
    if args.json:
        print(json.dumps(report.result_json, allow_nan=False))
    else:
        print(format_summary(report.result_json))
    sys.stdout.flush()
    if args.report:
        from rcvgp.commands.report import write_run_report

        write_run_report(report.output, quiet=args.quiet)
    return int(ExitCode.INTERRUPTED if report.interrupted else ExitCode.OK)
