"""The searches: GP, CVGP, CVGP over all schedules and Racing-CVGP, all over a DataOracle.

Entry point: :func:`run_search`. This package sees oracles only through
:class:`rcvgp.oracle.DataOracle`; it never imports zmq, yaml or the transport.
"""

from __future__ import annotations

from rcvgp.search.base import METHODS, OPTIMIZERS, Candidate, Progress, ProgressCallback, SearchConfig, SearchResult
from rcvgp.search.racing import run_search

__all__ = [
    "METHODS",
    "OPTIMIZERS",
    "Candidate",
    "Progress",
    "ProgressCallback",
    "SearchConfig",
    "SearchResult",
    "run_search",
]
