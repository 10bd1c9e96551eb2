"""rcvgp: discover governing equations by running controlled experiments (Racing-CVGP)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from rcvgp.errors import (
    BudgetExhausted,
    ConfigError,
    ExpressionError,
    OracleError,
    OracleTimeout,
    OutOfLimitsError,
    ProtocolError,
    RcvgpError,
    RemoteError,
)
from rcvgp.oracle import CallableOracle, DataOracle, OracleSpec, Output, Variable

from rcvgp.search.base import SearchConfig, SearchResult

if TYPE_CHECKING:
    from rcvgp.search.racing import run_search


def __getattr__(name: str) -> object:
    # The engine (and sympy) load on first use, so that `rcvgp --help`, `rcvgp serve` and a
    # rig's server start without them.
    if name == "run_search":
        from rcvgp.search.racing import run_search

        return run_search
    raise AttributeError(f"module 'rcvgp' has no attribute {name!r}")

__version__ = "0.1.0"

__all__ = [
    "BudgetExhausted",
    "CallableOracle",
    "ConfigError",
    "DataOracle",
    "ExpressionError",
    "OracleError",
    "OracleSpec",
    "OracleTimeout",
    "Output",
    "OutOfLimitsError",
    "ProtocolError",
    "RcvgpError",
    "RemoteError",
    "SearchConfig",
    "SearchResult",
    "Variable",
    "__version__",
    "run_search",
]
