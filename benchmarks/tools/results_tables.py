"""Print the tables of `benchmarks/RESULTS.md` from the `runs.jsonl` of a `rcvgp bench` run.

    python benchmarks/tools/results_tables.py bench-results/runs.jsonl   (or the directory itself)

Prints the summary table of `rcvgp bench` and one Markdown row per equation with every method's
test NMSE, exact or not, and wall time side by side. "Exact" is judged again with the current
`rcvgp.metrics.is_exact`, so records written before a fix of the check read the same as new ones.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from rcvgp.bench import format_table, judge_exact, read_records, summarize
from rcvgp.search.base import METHODS


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("runs", type=Path, help="a runs.jsonl written by `rcvgp bench`, or its directory")
    args = parser.parse_args()
    runs = args.runs / "runs.jsonl" if args.runs.is_dir() else args.runs
    if not runs.is_file():
        parser.error(f"no such file: {runs}")
    records = [r for r in read_records(runs) if "error" not in r]
    for r in records:
        r["exact"] = judge_exact(r["expression"], r["id"])
    print("```")
    print(format_table(summarize(records)))
    print("```\n")
    methods = [m for m in METHODS if any(r["method"] == m for r in records)]
    by_id: dict[str, dict[str, dict]] = {}
    for r in records:
        by_id.setdefault(r["id"], {})[r["method"]] = r
    print("| equation | " + " | ".join(methods) + " |")
    print("| --- |" + " --- |" * len(methods))
    for bench_id, runs in by_id.items():
        cells = []
        for m in methods:
            r = runs.get(m)
            if r is None:
                cells.append("-")
                continue
            nmse = "inf" if r.get("nmse_test") is None else f"{r['nmse_test']:.2g}"
            mark = " exact" if r["exact"] else ""
            capped = " (cap)" if r.get("timed_out") else ""
            cells.append(f"{nmse}{mark}, {r['wall_seconds']:.0f} s{capped}")
        print(f"| `{bench_id}` | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
