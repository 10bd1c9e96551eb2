"""The searches: GP, CVGP, CVGP over all schedules and Racing-CVGP, all over a DataOracle.

Entry point: :func:`run_search`. This package sees oracles only through
:class:`rcvgp.oracle.DataOracle`; it never imports zmq, yaml or the transport.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from rcvgp.search.base import (
    METHODS, OPTIMIZERS, Candidate, Progress, ProgressCallback, ScheduleStats, SearchConfig, SearchResult, TestPoints,
)

if TYPE_CHECKING:
    from rcvgp.search.racing import run_search


def __getattr__(name: str) -> object:
    # The engine (and sympy) load on first use: settings and results are light to import.
    if name == "run_search":
        from rcvgp.search.racing import run_search

        return run_search
    raise AttributeError(f"module 'rcvgp.search' has no attribute {name!r}")

__all__ = [
    "METHODS",
    "OPTIMIZERS",
    "Candidate",
    "Progress",
    "ProgressCallback",
    "ScheduleStats",
    "SearchConfig",
    "SearchResult",
    "TestPoints",
    "run_search",
]
