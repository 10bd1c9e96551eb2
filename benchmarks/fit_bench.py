"""Constant fitting: forward-mode gradients vs finite differences, and the Gauss-Newton start.

Fits a few trees with nonlinear constants on K=5 control-variable trials of 256 points and
prints, per variant, the median wall time per fit, the evaluations used and the median loss.

    python benchmarks/fit_bench.py [--repeats N]
"""

from __future__ import annotations

import argparse
import statistics
import time
import warnings

import numpy as np
import scipy.optimize as opt

from rcvgp.constants import Trials, _Projected, linear_constants  # internals: this measures them
from rcvgp.oracle import OracleSpec, Variable, design_trials
from rcvgp.tree import parse

TREES = [
    "1.1*sin(1.2*x0) + 1.3*cos(x0) + 1.4",
    "1.1*exp(-1.2*x0) + 1.3",
    "1.1*x0/(1.2 + x0) + 1.3*sin(x0)",
    "1.1*tanh(1.2*x0 + 1.3) + 1.4*x0",
]


def truth(X: np.ndarray) -> np.ndarray:
    x0, x1 = X[..., 0], X[..., 1]
    return 0.7 * np.sin(1.9 * x0) + x1 * np.cos(x0) + 0.3 * x1 / (0.8 + x0) + np.tanh(0.5 * x0 - 1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=20)
    args = parser.parse_args()
    spec = OracleSpec((Variable("x0", 0.1, 5.0), Variable("x1", 0.5, 2.0)))
    X = design_trials(spec, [1], 5, 256, np.random.default_rng(0))
    trials = Trials(X, truth(X), frozenset([1]))
    variants = {
        "BFGS, finite differences": dict(jac=False, h0=False),
        "BFGS, forward-mode gradient": dict(jac=True, h0=False),
        "BFGS, gradient + Gauss-Newton start (default)": dict(jac=True, h0=True),
    }
    print(f"{'variant':48s} {'ms/fit':>8s} {'evals':>7s} {'median loss':>12s}")
    for name, v in variants.items():
        times, evals, losses = [], [], []
        for text in TREES:
            tree, _ = parse(text)
            lin = list(linear_constants(tree.tokens))
            nonlin = [k for k in range(tree.n_consts) if k not in lin]
            for _ in range(args.repeats):
                problem = _Projected(tree.tokens, trials, lin, nonlin)
                x0 = np.ones(5 * len(nonlin))
                options: dict[str, object] = {"maxiter": 200}
                if v["h0"]:
                    H0 = problem.gauss_newton_inverse(x0)
                    if H0 is not None:
                        options["hess_inv0"] = H0
                start = time.perf_counter()
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    if v["jac"]:
                        res = opt.minimize(problem.value_grad, x0, jac=True, method="BFGS", options=options)
                    else:
                        res = opt.minimize(problem.value, x0, method="BFGS", options=options)
                times.append(time.perf_counter() - start)
                evals.append(problem.n_evals)
                losses.append(res.fun)
        print(f"{name:48s} {1e3 * statistics.median(times):8.2f} {statistics.median(evals):7.0f} "
              f"{statistics.median(losses):12.3g}")


if __name__ == "__main__":
    main()
