"""rcvgp: discover governing equations by running controlled experiments (Racing-CVGP)."""

from __future__ import annotations

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
from rcvgp.search import SearchConfig, SearchResult, run_search

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
