"""Starts for constants with none known: how often a fit reaches a peaked law from them.

Fits pieces the search grows (a Lorentzian line ``c/(c + (c + x)**2)``, a Gaussian line
``c*exp(c*(c + x)**2)``, a wave with a phase ``c*sin(c + c*x)``) to noiseless lines at 13 centres
from 0.3 to 30, of widths 1, 3 and 10% of the centre, on 64 random points over +-15% of it, for
four data seeds, every constant started unknown (NaN: scanned for); prints per piece how many of
the 156 fits reach an NMSE below 1e-12, and the CPU time of all of them. Run it on two trees
(``PYTHONPATH=<tree> python benchmarks/starts_bench.py``) to compare their scans.

    python benchmarks/starts_bench.py
"""

from __future__ import annotations

import time
from collections.abc import Callable

import numpy as np

from rcvgp.constants import Trials, fit_constants

PIECES: dict[str, tuple[str, Callable[[np.ndarray, float, float], np.ndarray]]] = {
    "Lorentzian": ("div c add c n2 add c x0", lambda x, a, w: 5 / (1 + ((x - a) / w) ** 2)),
    "Gaussian": ("mul c exp mul c n2 add c x0", lambda x, a, w: 2 * np.exp(-(((x - a) / w) ** 2))),
    "phase": ("mul c sin add c mul c x0", lambda x, a, w: 2 * np.sin((x - a) / w)),
}


def main() -> None:
    found = dict.fromkeys(PIECES, 0)
    runs = 0
    started = time.process_time()
    for seed in range(4):
        rng = np.random.default_rng(seed)
        for centre in np.geomspace(0.3, 30.0, 13):
            for rel in (0.01, 0.03, 0.1):
                runs += 1
                for name, (tokens, law) in PIECES.items():
                    X = rng.uniform(0.85 * centre, 1.15 * centre, size=(1, 64, 1))
                    split = tuple(tokens.split())
                    fit = fit_constants(split, Trials(X, law(X[..., 0], centre, rel * centre)),
                                        init=np.full((1, split.count("c")), np.nan))
                    found[name] += bool(fit.losses[0] < 1e-12)
    print(f"{'piece':12s} found of {runs}")
    for name, n in found.items():
        print(f"{name:12s} {n:5d}")
    print(f"CPU {time.process_time() - started:.1f} s")


if __name__ == "__main__":
    main()
