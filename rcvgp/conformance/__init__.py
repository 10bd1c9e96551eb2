"""The conformance kit: protocol checks runnable against any oracle server.

``check_oracle(address)`` runs the scenarios of ``protocols/conformance.yaml`` and returns a
:class:`ConformanceReport`; ``rcvgp conformance ENDPOINT`` is the same from the shell.
"""

from __future__ import annotations

from rcvgp.conformance.kit import ConformanceReport, ScenarioResult, check_oracle, load_points, scenario_list

__all__ = ["ConformanceReport", "ScenarioResult", "check_oracle", "load_points", "scenario_list"]
