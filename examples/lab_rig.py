"""Connecting a lab apparatus: a rig adapter around an instrument driver, served over ZeroMQ.

The "instrument" here is simulated (a pendulum bench: set the length L and the amplitude theta0,
read the period T), with the things a real driver has: latency per set point, measurement
noise, hard limits it refuses to go beyond, and an occasional failed reading. The adapter
(`PendulumRig`) is the one small class a rig integrator writes: ``describe()`` declares the
variables and limits, ``measure(X)`` drives the instrument row by row and returns NaN for a
reading that failed. ``serve()`` puts it on the wire; ``examples/rig_discover.py`` discovers the
law from another process.

    python examples/lab_rig.py --bind tcp://127.0.0.1:5555
"""

from __future__ import annotations

import argparse
import math
import time

import numpy as np

from rcvgp import DataOracle, OracleError, OracleSpec, Output, Variable
from rcvgp.transport.server import serve


class PendulumDriver:
    """Stand-in for a vendor driver: talks in single set points, slowly, with noise."""

    L_RANGE = (0.2, 2.0)  # metres: the rail's travel
    THETA_RANGE = (0.05, 0.6)  # radians: the release clamp

    def __init__(self, latency: float = 0.0005, noise: float = 1e-4, fail_rate: float = 0.0, seed: int = 0) -> None:
        self.latency = latency
        self.noise = noise
        self.fail_rate = fail_rate
        self.rng = np.random.default_rng(seed)
        self.connected = True

    def set_point(self, length: float, theta0: float) -> None:
        if not (self.L_RANGE[0] <= length <= self.L_RANGE[1] and self.THETA_RANGE[0] <= theta0 <= self.THETA_RANGE[1]):
            raise OracleError(f"driver refused set point L={length}, theta0={theta0}")  # the adapter never lets this happen
        time.sleep(self.latency)
        self._state = (length, theta0)

    def read_period(self) -> float:
        if self.rng.random() < self.fail_rate:
            raise TimeoutError("photogate missed the pendulum")
        length, theta0 = self._state
        # large-amplitude period, to second order: T = 2 pi sqrt(L/g) (1 + theta0^2 / 16)
        period = 2 * math.pi * math.sqrt(length / 9.81) * (1 + theta0**2 / 16)
        return period * (1 + self.noise * self.rng.standard_normal())

    def close(self) -> None:
        self.connected = False


class PendulumRig(DataOracle):
    """The rig adapter: declares the variables and limits, measures row by row."""

    def __init__(self, driver: PendulumDriver | None = None) -> None:
        self.driver = driver or PendulumDriver()

    def describe(self) -> OracleSpec:
        return OracleSpec(
            variables=(
                Variable("L", *PendulumDriver.L_RANGE, unit="m"),
                Variable("theta0", *PendulumDriver.THETA_RANGE, unit="rad"),
            ),
            output=Output("T", "s"),
            max_rows=4096,
            name="rig:pendulum-bench",
            operators=("add", "mul", "div", "sqrt", "n2"),
        )

    def measure(self, X: np.ndarray) -> np.ndarray:
        y = np.empty(len(X))
        for i, (length, theta0) in enumerate(X):
            self.driver.set_point(float(length), float(theta0))
            try:
                y[i] = self.driver.read_period()
            except TimeoutError:
                y[i] = np.nan  # could not measure this point: the search drops it
        return y

    def close(self) -> None:
        self.driver.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bind", default="tcp://127.0.0.1:5555")
    parser.add_argument("--latency", type=float, default=0.0005, help="seconds per set point")
    parser.add_argument("--noise", type=float, default=1e-4, help="relative noise of a reading")
    parser.add_argument("--fail-rate", type=float, default=0.01, help="fraction of readings that fail (NaN)")
    parser.add_argument("--journal", default=None, help="directory for the reply journal (restarts never re-measure)")
    args = parser.parse_args(argv)
    rig = PendulumRig(PendulumDriver(args.latency, args.noise, args.fail_rate))

    def ready(server: object) -> None:
        print(f"pendulum rig on {getattr(server, 'endpoint')}; Ctrl-C stops", flush=True)

    serve(rig, args.bind, on_ready=ready, journal_dir=args.journal, close_oracle=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
