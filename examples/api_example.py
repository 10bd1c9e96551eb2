"""Use rcvgp from Python: your own measurement code as an oracle, one search, the result.

    python examples/api_example.py

An oracle is one small class: ``describe()`` says what can be set (names, units, limits) and
``measure(X)`` returns y for each row of set points. The search decides which variables to hold
fixed and which to vary; it never sees how y is produced. The same class could drive a real
instrument, be served to other machines with ``rcvgp.transport.server``, or be journalled with
``rcvgp.journal.JournalingOracle`` so that no measurement is ever lost.

The result holds the law (``law``, ``sympy()``, ``latex()``), the front it was chosen from
(``equations``), and evaluates either on new points (``predict``).
"""

from __future__ import annotations

import numpy as np

from rcvgp import DataOracle, OracleSpec, Variable
from rcvgp.search import SearchConfig, run_search


class Cart(DataOracle):
    """A stand-in for a rig: the kinetic energy of a cart of mass m moving at speed v."""

    def describe(self) -> OracleSpec:
        return OracleSpec(
            variables=(Variable("m", 0.5, 5.0, unit="kg"), Variable("v", 0.1, 3.0, unit="m/s")),
            name="rig:cart",
        )

    def measure(self, X: np.ndarray) -> np.ndarray:
        m, v = X[:, 0], X[:, 1]
        return 0.5 * m * v**2  # on a real rig: set m and v, wait, read the sensor


def main() -> None:
    settings = SearchConfig(operators=("add", "mul", "n2"), population=30, generations=8, batch=64,
                            n_trials=3, max_points=50_000)
    with Cart() as oracle:
        result = run_search("racing", oracle, settings, seed=0)
    print("found:      ", result.law)
    print("LaTeX:      ", result.latex())
    print("test NMSE:  ", f"{result.test_metrics['nmse']:.3g}")
    print("schedule:   ", " -> ".join(",".join(s) or "none held" for s in result.best.schedule))
    print("measured:   ", result.points_measured, "points in", result.requests, "requests")
    # The law evaluated on new points, by name (or by position: an array of columns m, v).
    print("E(2 kg, 1.5 m/s):", result.predict({"m": [2.0], "v": [1.5]})[0], "J")


if __name__ == "__main__":
    main()
