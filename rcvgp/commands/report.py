"""``rcvgp report RUN_DIR``: write ``report.html``, the run's page of pictures, into its folder.

The page needs matplotlib, an optional extra; without it the command says how to get it in one
line and exits 2. matplotlib, sympy and the search load only when the command runs.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

__all__ = ["register", "report_command", "write_run_report"]

_EPILOG = """\
The page is one self-contained file (images embedded, no network needed to open it): the law
found, rendered as mathematics; the key numbers; the Pareto front; the race of the schedules,
round by round; the law against the test points and its residuals against each variable; and
the points measured over time. It reads only the run folder: result.json, history.jsonl and
test_points.csv. `rcvgp run ... --report` writes it at the end of a run.

needs matplotlib: pip install "rcvgp[plot]"

exit status: 0 written, 2 not a run folder or matplotlib missing."""


def register(subparsers: Any) -> None:
    """Add ``report`` to the ``rcvgp`` parser."""
    p = subparsers.add_parser(
        "report",
        help="write report.html, a page of pictures of a finished run, into its folder",
        description="Write RUN_DIR/report.html: the law, the Pareto front, the race, the fit on the test "
        "points and the measurements over time of a finished run.",
        epilog=_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("run_dir", metavar="RUN_DIR", help="the output folder of a run (it holds result.json)")
    p.set_defaults(func=report_command)


def report_command(args: argparse.Namespace) -> int:
    """``rcvgp report``: write the page, print where it is."""
    from rcvgp.report import write_report

    path = write_report(args.run_dir)
    print(path)
    return 0


def write_run_report(run_dir: Any, quiet: bool = False) -> None:
    """After ``rcvgp run --report``: write the page, or say on stderr why it was not written
    (the run itself is saved either way)."""
    from rcvgp.errors import MissingExtra
    from rcvgp.report import write_report

    try:
        path = write_report(run_dir)
    except MissingExtra as exc:
        print(f"rcvgp: the report was not written: {exc}; then `rcvgp report {run_dir}`", file=sys.stderr)
        return
    if not quiet:
        print(f"rcvgp: report written to {path}", file=sys.stderr)
