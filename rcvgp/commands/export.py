"""``rcvgp export RUN_DIR``: every measurement of a run as a table (CSV) or numpy arrays (NPZ).

The measurements come from the run's journal, so an interrupted or killed run exports what it
measured as well as a finished one. A missing folder or journal is one line on stderr and exit
status 2.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

__all__ = ["register"]

_EPILOG = """\
columns (csv): request, then each variable and y as `name [unit]`, then `name_set [unit]` for
the set points asked when a rig read back others; one row per point, in the order measured.
npz: the arrays X, X_set, y, request, variables, units, output, output_unit (numpy.load).

examples:
  rcvgp export runs/my-law                      # runs/my-law/measurements.csv
  rcvgp export runs/my-law --format npz         # runs/my-law/measurements.npz
  rcvgp export runs/my-law --output points.csv"""


def register(subparsers: Any) -> None:
    """Add ``export`` to the ``rcvgp`` parser."""
    p = subparsers.add_parser(
        "export",
        help="write a run's measurements (with names, units and requests) as CSV or NPZ",
        description="Write every measurement of a run (from its journal: finished, interrupted or killed) "
        "with the variables' names and units and the request each point came from.",
        epilog=_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("run_dir", metavar="RUN_DIR", help="the run's output folder (holds journal.jsonl)")
    p.add_argument("--format", choices=("csv", "npz"),
                   help="csv (default) or npz; by default the --output file's suffix decides")
    p.add_argument("--output", "-o", metavar="FILE",
                   help="where to write (default: RUN_DIR/measurements.csv or .npz; a folder: that file name in it)")
    p.set_defaults(func=export_command)


def export_command(args: argparse.Namespace) -> int:
    """``rcvgp export``: read the journal, write the table, say where."""
    from rcvgp.errors import ConfigError, RunFolderError
    from rcvgp.journal import JOURNAL_NAME, read_measurements
    from rcvgp.runner import EXPORT_FORMATS, MEASUREMENTS_NAME, write_measurements

    folder = Path(args.run_dir)
    journal = folder / JOURNAL_NAME
    if not folder.is_dir():
        what = "not a folder" if folder.exists() else "no such folder"
        raise RunFolderError(f"{args.run_dir}: {what}; give a run's output folder (the `output` of its experiment)")
    if not journal.exists():
        raise RunFolderError(f"{args.run_dir}: no {JOURNAL_NAME}; not a run's output folder, or the run never "
                             "measured anything")
    suffix = Path(args.output).suffix.lstrip(".").lower() if args.output else ""
    fmt = args.format or (suffix if suffix in EXPORT_FORMATS else "csv")
    target = Path(args.output) if args.output else folder / f"{MEASUREMENTS_NAME}.{fmt}"
    if target.is_dir():
        target = target / f"{MEASUREMENTS_NAME}.{fmt}"
    if not target.parent.is_dir():
        raise ConfigError(f"--output: no such folder {str(target.parent)!r}; create it or give another path")
    measurements = read_measurements(journal)
    try:
        write_measurements(measurements, target, fmt)
    except OSError as exc:
        raise ConfigError(f"--output: cannot write {target}: {exc.strerror or exc}") from None
    print(f"wrote {len(measurements):,} points from {measurements.n_requests:,} requests "
          f"({', '.join(measurements.labels)}) to {target}")
    return 0
