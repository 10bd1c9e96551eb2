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
    "Variable",
    "__version__",
]
