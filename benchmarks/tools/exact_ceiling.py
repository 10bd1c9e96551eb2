"""How many exact recoveries noise leaves possible: each catalog law's own form, its constants
fitted to noisy readings, judged by the exact check.

    python benchmarks/tools/exact_ceiling.py --groups sincos-3-2-2,livermore2-n4,feynman-n4 \
        --noise relative:0.01 --points 1280,8192,32768 --repeats 5

Under noise a constant is only as precise as the readings allow, and the exact check (SRBench's,
`rcvgp.metrics.is_exact`) compares constants to three significant digits. This tool asks what a
search could score at best: it takes the true form (`rcvgp.tree.from_sympy` of the catalog's
expression), fits its constants from their true values on N noisy points drawn over the declared
ranges (`rcvgp.constants.fit_constants`, as the search's final refit does), and judges the result
with `rcvgp.bench.judge_exact`. It prints, per group and N, the mean count of exact laws over the
repeats. A run of the search refits its law on about 1,280 points with no variable held (the
last round's trial and `search.refit_points`), so that column is the ceiling of the bench's
"exact" count at that noise; "form" (`rcvgp.bench.judge_form`) has none.
"""

from __future__ import annotations

import argparse

import numpy as np
import sympy

from rcvgp.bench import judge_exact
from rcvgp.benchmarks import benchmarks_in_group
from rcvgp.constants import Trials, fit_constants
from rcvgp.oracle import design_points
from rcvgp.simulate import SimulatedOracle
from rcvgp.tree import from_sympy, to_sympy


def exact_fits(bench_id: str, expression: str, noise: str, n_points: int, repeats: int, seed: int) -> int:
    """Of ``repeats`` fits of the law's own form to ``n_points`` noisy readings, how many the
    exact check passes."""
    oracle = SimulatedOracle.from_benchmark(bench_id, noise=noise, seed=seed)
    spec = oracle.describe()
    names = [v.name for v in spec.variables]
    tree, values = from_sympy(sympy.sympify(expression, locals={n: sympy.Symbol(n) for n in names}), names)
    rng = np.random.default_rng(seed)
    passed = 0
    with oracle:
        for _ in range(repeats):
            X = design_points(spec, n_points, rng)
            y = oracle.measure(X)
            fit = fit_constants(tree.tokens, Trials(X[None], y[None]), init=np.array(values), maxiter=500)
            passed += bool(judge_exact(to_sympy(tree.tokens, fit.constants[0], names), bench_id))
    return passed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--groups", default="sincos-3-2-2,livermore2-n4,feynman-n4")
    parser.add_argument("--noise", default="relative:0.01")
    parser.add_argument("--points", default="1280,8192,32768", help="points per fit, comma-separated")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    sizes = [int(n) for n in args.points.split(",")]
    print(f"noise {args.noise}, {args.repeats} fits per law and size; mean exact laws per group")
    print("| group | laws | " + " | ".join(f"{n:,} points" for n in sizes) + " |")
    print("| --- | --- | " + " | ".join("---" for _ in sizes) + " |")
    for group in args.groups.split(","):
        laws = benchmarks_in_group(group)
        counts = [sum(exact_fits(b.id, b.expression, args.noise, n, args.repeats, args.seed) for b in laws)
                  / args.repeats for n in sizes]
        print(f"| {group} | {len(laws)} | " + " | ".join(f"{c:.1f}" for c in counts) + " |")


if __name__ == "__main__":
    main()
