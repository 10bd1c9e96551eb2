"""Constant fitting: analytic gradients vs finite differences, the Gauss-Newton start, and
Levenberg-Marquardt vs BFGS.

Fits a few trees with nonlinear constants on K=5 control-variable trials of 256 points and
prints, per variant, the median wall time per fit, the evaluations used and the loss reached on
each tree. The last tree is exact but has a redundant constant, as GP trees often do: an
optimiser that fits it only to 1e-6 makes the search rank a wrong tree above it.

    python benchmarks/fit_bench.py [--repeats N]
"""

from __future__ import annotations

import argparse
import statistics
import time
import warnings

import numpy as np
import scipy.optimize as opt

from rcvgp.constants import Trials, _levenberg_marquardt, _Projected, linear_constants  # internals: this measures them
from rcvgp.oracle import OracleSpec, Variable, design_trials
from rcvgp.tree import parse

def truth(X: np.ndarray) -> np.ndarray:
    x0, x1 = X[..., 0], X[..., 1]
    return 0.7 * np.sin(1.9 * x0) + x1 * np.cos(x0) + 0.3 * x1 / (0.8 + x0) + np.tanh(0.5 * x0 - 1)


def redundant_truth(X: np.ndarray) -> np.ndarray:
    return 1.0 / (X[..., 0] + 2.08) + 0.5 * X[..., 1]


#: (tree, what it is fitted to): four partial fits of ``truth``, then an exact tree with a
#: redundant constant (c/(c + c*x0): numerator and denominator scale together).
CASES = [
    ("1.1*sin(1.2*x0) + 1.3*cos(x0) + 1.4", truth),
    ("1.1*exp(-1.2*x0) + 1.3", truth),
    ("1.1*x0/(1.2 + x0) + 1.3*sin(x0)", truth),
    ("1.1*tanh(1.2*x0 + 1.3) + 1.4*x0", truth),
    ("1.1/(1.2 + 1.3*x0) + 1.4*x1", redundant_truth),
]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=20)
    args = parser.parse_args()
    spec = OracleSpec((Variable("x0", 0.1, 5.0), Variable("x1", 0.5, 2.0)))
    X = design_trials(spec, [1], 5, 256, np.random.default_rng(0))
    variants = {
        "BFGS, finite differences": dict(jac=False, h0=False),
        "BFGS, analytic gradient": dict(jac=True, h0=False),
        "BFGS, gradient + Gauss-Newton start": dict(jac=True, h0=True),
        "Levenberg-Marquardt (LM, default)": dict(lm=True),
    }
    print("loss: sum over the 5 trials of the NMSE, per tree (the last one fits exactly)")
    losses_header = " ".join(f"{f'loss {i + 1}':>9s}" for i in range(len(CASES)))
    print(f"{'variant':40s} {'ms/fit':>7s} {'evals':>6s}  {losses_header}")
    for name, v in variants.items():
        times, evals, losses = [], [], []
        for text, fn in CASES:
            trials = Trials(X, fn(X), frozenset([1]))
            tree, _ = parse(text)
            lin = list(linear_constants(tree.tokens))
            nonlin = [k for k in range(tree.n_consts) if k not in lin]
            for _ in range(args.repeats):
                problem = _Projected(tree.tokens, trials, lin, nonlin)
                x0 = np.ones(5 * len(nonlin))
                options: dict[str, object] = {"maxiter": 200}
                start = time.perf_counter()
                if v.get("h0"):
                    H0 = problem.gauss_newton_inverse(x0)
                    if H0 is not None:
                        options["hess_inv0"] = H0
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    if v.get("lm"):
                        theta, _, _ = _levenberg_marquardt(problem, x0.reshape(5, -1), 200)
                        loss = problem.value(theta.ravel())
                    elif v["jac"]:
                        loss = opt.minimize(problem.value_grad, x0, jac=True, method="BFGS", options=options).fun
                    else:
                        loss = opt.minimize(problem.value, x0, method="BFGS", options=options).fun
                times.append(time.perf_counter() - start)
                evals.append(problem.n_evals)
            losses.append(loss)
        print(f"{name:40s} {1e3 * statistics.median(times):7.2f} {statistics.median(evals):6.0f}  "
              + " ".join(f"{loss:9.2g}" for loss in losses))


if __name__ == "__main__":
    main()
