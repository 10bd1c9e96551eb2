"""Benchmark script (a script, not a test): the paper's table for chosen groups and methods.

The same as ``rcvgp bench`` (every argument is passed on): one line per finished run on stderr
(equation, method, seed, test NMSE, exact recovery or not, points measured, wall time), then the
table per group and method. ``--per-equation`` also prints the per-run lines on stdout.

    python benchmarks/run_bench.py --groups sincos-3-2-2 --methods racing,gp --seeds 3 --jobs 4
    python benchmarks/run_bench.py --help
"""

from __future__ import annotations

import sys

from rcvgp.cli import main

if __name__ == "__main__":
    sys.exit(main(["bench", *sys.argv[1:]]))
