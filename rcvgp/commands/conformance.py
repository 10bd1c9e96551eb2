"""``rcvgp conformance ENDPOINT``: check any oracle server against protocol v1.

Prints a pass/fail line per scenario (or ``--json``); exit status 0 when all pass, 1 when any
fails. When nothing answers at the endpoint it prints one line saying why, as far as ZeroMQ can
tell (connection refused, a server that wants CURVE keys, a refused key), and exits 4.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from rcvgp.commands import add_connection_options

__all__ = ["register"]


def register(subparsers: Any) -> None:
    """Add ``conformance`` to the ``rcvgp`` parser."""
    p = subparsers.add_parser(
        "conformance",
        help="check an oracle server against the wire protocol (pass/fail report)",
        description="Run the scenarios of protocols/conformance.yaml against a server: handshake, versions, "
        "measure, large batches, limits, malformed input, unknown operations, duplicate ids, oversize messages.",
    )
    p.add_argument("endpoint", metavar="ENDPOINT", help="e.g. tcp://127.0.0.1:5555 or ipc:///tmp/rig.sock")
    p.add_argument("--json", action="store_true", help="print the report as JSON")
    p.add_argument("--points", metavar="FILE", default=None,
                   help="YAML with in_limits and out_of_limits sample rows (and large_rows) for your rig")
    add_connection_options(p)
    p.add_argument("--only", action="append", default=None, metavar="ID", help="run only this scenario (repeatable)")
    p.set_defaults(func=run_conformance)


def run_conformance(args: argparse.Namespace) -> int:
    from rcvgp.cli import ExitCode
    from rcvgp.conformance import check_oracle
    from rcvgp.errors import OracleTimeout

    def show(result: Any) -> None:
        if not args.json:
            mark = "SKIP" if result.skipped else ("PASS" if result.passed else "FAIL")
            line = f"  {mark}  {result.id:<34} {result.title}"
            if result.message and (not result.passed or result.skipped):
                line += f"\n        {result.message}"
            print(line, flush=True)

    def first(result: Any) -> None:
        if not args.json and not shown:
            print(f"conformance of {args.endpoint}")
            shown.append(True)
        show(result)

    shown: list[bool] = []
    try:
        report = check_oracle(
            args.endpoint,
            points=args.points,
            timeout=args.timeout,
            curve_server_key=args.curve_server_key,
            curve_client_key=args.curve_client_key,
            only=args.only,
            progress=first,
        )
    except OracleTimeout as exc:  # not a verdict on the protocol: one line, "did not answer in time"
        print(f"rcvgp conformance: {exc}", file=sys.stderr)
        return ExitCode.TIMEOUT
    if args.json:
        print(json.dumps(report.to_dict(), indent=2))
    else:
        n_fail = len(report.failures)
        print(f"{len(report.results) - n_fail} passed, {n_fail} failed: {'CONFORMS' if report.passed else 'DOES NOT CONFORM'}")
    return 0 if report.passed else 1
