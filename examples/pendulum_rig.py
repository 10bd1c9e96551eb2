"""A pendulum on a lab bench: set the length L and the release angle theta0, time the period T."""

import numpy as np

from rcvgp import DataOracle, OracleSpec, Output, Variable


class PendulumRig(DataOracle):
    def __init__(self, noise: float = 1e-4, seed: int = 0) -> None:
        self.noise = noise  # relative scatter of a timed period
        self.rng = np.random.default_rng(seed)  # a real rig connects to its instruments here

    def describe(self) -> OracleSpec:
        return OracleSpec(
            variables=(Variable("L", 0.2, 2.0, unit="m"), Variable("theta0", 0.05, 0.6, unit="rad")),
            output=Output("T", "s"),
            name="rig:pendulum",
        )

    def measure(self, X: np.ndarray) -> np.ndarray:
        return np.array([self.swing(length, angle) for length, angle in X])

    def swing(self, length: float, angle: float) -> float:
        # A real rig moves the clamp to (length, angle), releases it and times a swing; this one
        # computes the period to second order in the angle, and adds the stopwatch's scatter.
        period = 2 * np.pi * np.sqrt(length / 9.81) * (1 + angle**2 / 16)
        return float(period * (1 + self.noise * self.rng.standard_normal()))
