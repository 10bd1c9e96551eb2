"""Laws outside the catalog, as a lab would declare them: variables in SI units over their
rigs' ranges, noiseless and with noise, each searched by Racing-CVGP with the default settings.
Prints one line per run (law, noise, the law found, exact or not, test NMSE, CPU, points) and a
count per noise level.

Noise follows SRBench: Gaussian, standard deviation ``level`` x std(y) over the variables'
ranges (estimated once per law from 100,000 uniform points).

    python benchmarks/rigs_bench.py --noise 0,0.01 --seeds 1 --jobs 2
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from typing import Any

import numpy as np

from rcvgp import CallableOracle, OracleSpec, Output, SearchConfig, Variable, run_search
from rcvgp.metrics import is_exact

V = Variable

#: name: (the law as text, its variables, the law as a function of their columns)
LAWS: dict[str, tuple[str, tuple[Variable, ...], Callable[..., np.ndarray]]] = {
    "ideal gas": ("8.314*n*T/V", (V("n", 0.1, 10.0, unit="mol"), V("T", 200.0, 400.0, unit="K"),
                                  V("V", 1e-3, 1e-1, unit="m^3")),
                  lambda n, T, Vol: 8.314 * n * T / Vol),
    "Coulomb": ("8.99e9*q1*q2/r**2", (V("q1", 1e-9, 1e-6, unit="C"), V("q2", 1e-9, 1e-6, unit="C"),
                                      V("r", 0.01, 1.0, unit="m")),
                lambda q1, q2, r: 8.99e9 * q1 * q2 / r**2),
    "RC discharge": ("V0*exp(-t/(R*C))", (V("V0", 1.0, 10.0, unit="V"), V("t", 0.0, 0.5, unit="s"),
                                          V("R", 1e3, 1e4, unit="ohm"), V("C", 1e-5, 1e-4, unit="F")),
                     lambda V0, t, R, C: V0 * np.exp(-t / (R * C))),
    "damped oscillator": ("A*exp(-b*t)*cos(w*t)", (V("A", 0.5, 2.0, unit="m"), V("b", 0.1, 1.0, unit="1/s"),
                                                   V("w", 1.0, 5.0, unit="rad/s"), V("t", 0.0, 5.0, unit="s")),
                          lambda A, b, w, t: A * np.exp(-b * t) * np.cos(w * t)),
    "energy": ("0.5*m*v**2 + 9.81*m*h", (V("m", 0.1, 10.0, unit="kg"), V("v", 0.0, 10.0, unit="m/s"),
                                         V("h", 0.0, 10.0, unit="m")),
               lambda m, v, h: 0.5 * m * v**2 + 9.81 * m * h),
    "Stefan-Boltzmann": ("5.67e-8*A*T**4", (V("A", 0.01, 1.0, unit="m^2"), V("T", 300.0, 1000.0, unit="K")),
                         lambda A, T: 5.67e-8 * A * T**4),
    "projectile range": ("v**2*sin(2*th)/9.81", (V("v", 1.0, 30.0, unit="m/s"), V("th", 0.1, 1.4, unit="rad")),
                         lambda v, th: v**2 * np.sin(2 * th) / 9.81),
    "thin lens": ("1/(1/f - 1/u)", (V("f", 0.05, 0.2, unit="m"), V("u", 0.3, 2.0, unit="m")),
                  lambda f, u: 1 / (1 / f - 1 / u)),
}


def run_one(name: str, level: float, seed: int) -> dict[str, Any]:
    truth, variables, law = LAWS[name]
    spec = OracleSpec(variables=variables, output=Output("y", ""), name=f"rig:{name}")
    lo, hi = np.array([v.low for v in variables]), np.array([v.high for v in variables])
    spread = np.std(law(*(lo + (hi - lo) * np.random.default_rng(1).random((100_000, len(variables)))).T))
    noise = np.random.default_rng([seed, 17])

    def measure(X: np.ndarray) -> np.ndarray:
        return law(*X.T) + level * spread * noise.standard_normal(len(X))

    start = time.process_time()
    result = run_search("racing", CallableOracle(measure, spec), SearchConfig(), seed=seed)
    cpu = time.process_time() - start
    return {"law": name, "noise": level, "seed": seed, "found": result.best.expression,
            "exact": is_exact(result.best.sympy_expr, truth, variables=variables),
            "nmse": result.nmse_test, "cpu": cpu, "points": result.points_measured}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--noise", default="0,0.01", help="noise levels, comma-separated (default 0,0.01)")
    parser.add_argument("--seeds", type=int, default=1)
    parser.add_argument("--laws", default="", help="names from LAWS, comma-separated (default: all)")
    parser.add_argument("--jobs", type=int, default=1, help="runs at a time")
    args = parser.parse_args()
    names = [n.strip() for n in args.laws.split(",") if n.strip()] or list(LAWS)
    unknown = [n for n in names if n not in LAWS]
    if unknown:
        parser.error(f"unknown law(s) {', '.join(unknown)}; known: {', '.join(LAWS)}")
    levels = [float(x) for x in args.noise.split(",")]
    runs = [(n, level, seed) for level in levels for n in names for seed in range(args.seeds)]
    exact: dict[float, int] = {level: 0 for level in levels}
    with ProcessPoolExecutor(args.jobs) as pool:
        for out in pool.map(run_one, *zip(*runs)):
            exact[out["noise"]] += out["exact"]
            print(f"{out['law']:18s} noise {out['noise']:<5g} seed {out['seed']}  "
                  f"{'exact' if out['exact'] else 'not exact':9s}  NMSE {out['nmse']:.2g}  "
                  f"CPU {out['cpu']:5.1f} s  points {out['points']:,}  {out['found']}", flush=True)
    for level in levels:
        print(f"noise {level:g}: {exact[level]} of {len(names) * args.seeds} exact")


if __name__ == "__main__":
    main()
