"""``rcvgp oracles``: browse the benchmark catalog.

``rcvgp oracles list [--group G] [--json]`` prints one row per entry (id, group, number of
variables, operators); ``rcvgp oracles show ID [--reveal] [--json]`` prints an entry's variables
and ranges, and its ground truth only with ``--reveal``. An unknown id or group is a
:class:`~rcvgp.errors.ConfigError` (exit status 2, one line with the closest names).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from rcvgp.benchmarks import Benchmark  # the catalog (and sympy) load when a command needs them

__all__ = ["register"]


def register(subparsers: Any) -> None:
    """Add ``oracles list`` and ``oracles show`` to the ``rcvgp`` parser."""
    parser = subparsers.add_parser(
        "oracles",
        help="list and show the built-in simulated oracles (the paper's benchmark catalog)",
        description="Browse the benchmark catalog: the paper's equations as simulated oracles.",
    )
    sub = parser.add_subparsers(dest="oracles_command", metavar="ACTION")
    sub.required = True

    p_list = sub.add_parser("list", help="one line per catalog entry: id, group, variables, operators")
    p_list.add_argument("--group", metavar="G", help="only this group, e.g. feynman-n4 or sincos-3-2-2")
    p_list.add_argument("--json", action="store_true", help="print a JSON list of objects instead of a table")
    p_list.set_defaults(func=run_list)

    p_show = sub.add_parser("show", help="an entry's variables, ranges and operators")
    p_show.add_argument("id", metavar="ID", help="a catalog id, e.g. feynman/I.8.14 or livermore2/Vars4-1")
    p_show.add_argument("--reveal", action="store_true", help="also print the ground truth and the notes")
    p_show.add_argument("--json", action="store_true", help="print a JSON object instead of text")
    p_show.set_defaults(func=run_show)


def _selected(group: str | None) -> list[Benchmark]:
    from rcvgp.benchmarks import benchmarks_in_group, load_catalog

    if group:
        return list(benchmarks_in_group(group))
    return list(load_catalog().values())


def run_list(args: argparse.Namespace) -> int:
    """Print the catalog (or one group of it); never the equations."""
    benches = _selected(args.group)
    try:
        _print_list(benches, args.json)
    except BrokenPipeError:  # `rcvgp oracles list | head`: the reader left, which is fine
        devnull = open(os.devnull, "w")  # noqa: SIM115 - stdout must stay valid until exit
        os.dup2(devnull.fileno(), sys.stdout.fileno())
    return 0


def _print_list(benches: list[Benchmark], as_json: bool) -> None:
    if as_json:
        rows = [
            {"id": b.id, "group": b.group, "n_vars": b.n_vars, "operators": list(b.operators)} for b in benches
        ]
        json.dump(rows, sys.stdout, indent=1)
        sys.stdout.write("\n")
        return
    width_id = max([len("ID")] + [len(b.id) for b in benches])
    width_group = max([len("GROUP")] + [len(b.group) for b in benches])
    print(f"{'ID':<{width_id}}  {'GROUP':<{width_group}}  VARS  OPERATORS")
    for b in benches:
        print(f"{b.id:<{width_id}}  {b.group:<{width_group}}  {b.n_vars:>4}  {' '.join(b.operators)}")
    sys.stdout.flush()


def _show_dict(bench: Benchmark, reveal: bool) -> dict[str, Any]:
    data = bench.summary()
    if reveal:
        data["expression"] = bench.expression
        if bench.paper_expression:
            data["paper_expression"] = bench.paper_expression
        data["notes"] = list(bench.notes)
        data["source"] = bench.source
    return data


def run_show(args: argparse.Namespace) -> int:
    """Print one entry; the ground truth only with ``--reveal``."""
    from rcvgp.benchmarks import get_benchmark

    bench = get_benchmark(args.id)
    if args.json:
        json.dump(_show_dict(bench, args.reveal), sys.stdout, indent=1)
        sys.stdout.write("\n")
        return 0
    print(f"id:         {bench.id}")
    print(f"group:      {bench.group} (paper Eq. {bench.paper_eq_id})")
    print(f"operators:  {' '.join(bench.operators)}")
    print(f"threshold:  {bench.threshold:g}")
    print(f"variables:  {bench.n_vars}")
    width = max(len(v.name) for v in bench.variables)
    for v in bench.variables:
        print(f"  {v.name:<{width}}  {v.dist:<15}  {v.describe_limits()}")
    if bench.nonfinite_fraction > 0:
        print(
            f"hard case:  the truth is NaN/inf on about {bench.nonfinite_fraction:.1%} of the declared ranges; "
            "the simulated oracle returns NaN for those points"
        )
    if args.reveal:
        print(f"truth:      {bench.expression}")
        if bench.paper_expression:
            print(f"paper:      {bench.paper_expression}")
        if bench.source:
            print(f"source:     {bench.source}")
        for note in bench.notes:
            print(f"note:       {note}")
    else:
        print("truth:      hidden (add --reveal to print it)")
    return 0
