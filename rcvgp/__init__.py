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
    RunFolderError,
)
from rcvgp.oracle import CallableOracle, DataOracle, OracleSpec, Output, Variable

from rcvgp.search.base import SearchConfig, SearchResult

if TYPE_CHECKING:
    from rcvgp.config import load_experiment
    from rcvgp.runner import RunReport, load_run, run_experiment
    from rcvgp.search.racing import run_search

# Public names whose modules load on first use, so that `rcvgp --help`, `rcvgp serve` and a
# rig's server start without the engine (and sympy): name -> module.
_LAZY = {
    "run_search": "rcvgp.search.racing",
    "run_experiment": "rcvgp.runner",
    "load_run": "rcvgp.runner",
    "RunReport": "rcvgp.runner",
    "load_experiment": "rcvgp.config",
}


def __getattr__(name: str) -> object:
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
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
    "RunFolderError",
    "RunReport",
    "SearchConfig",
    "SearchResult",
    "Variable",
    "__version__",
    "load_experiment",
    "load_run",
    "run_experiment",
    "run_search",
]
