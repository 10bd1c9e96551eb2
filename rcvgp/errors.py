"""Every exception rcvgp raises on purpose, as one small tree.

::

    RcvgpError
    ├── ConfigError(ValueError)        a bad experiment file, setting or argument
    │   └── RunFolderError             a run folder that cannot be read (missing, unfinished, damaged)
    ├── ExpressionError(ValueError)    an expression that does not parse or uses an unknown operator
    ├── MissingExtra(ImportError)      an optional extra a command needs is not installed
    ├── OracleError                    an oracle misbehaved or refused a request
    │   ├── OutOfLimitsError(ValueError)  a set point outside the described limits
    │   ├── BudgetExhausted            the measurement budget is spent
    │   ├── OracleTimeout(TimeoutError) no reply within the deadline
    │   └── RemoteError                a server replied with an error code
    │       └── RemoteOutOfLimits(OutOfLimitsError)  ... code OUT_OF_LIMITS
    └── ProtocolError                  a message that breaks the wire protocol
        └── WireError                  ... with the error code a server answers it with

    BenchmarkInterrupted(KeyboardInterrupt)  Ctrl-C in `rcvgp bench`, after saving what finished

A user mistake is one of these, with a message that names the problem; anything else is a bug.
"""

from __future__ import annotations

from typing import Any

__all__ = [
    "RcvgpError",
    "ConfigError",
    "RunFolderError",
    "ExpressionError",
    "MissingExtra",
    "OracleError",
    "OutOfLimitsError",
    "BudgetExhausted",
    "OracleTimeout",
    "RemoteError",
    "RemoteOutOfLimits",
    "ProtocolError",
    "WireError",
    "BenchmarkInterrupted",
]


class RcvgpError(Exception):
    """Base of every error rcvgp raises on purpose."""


class ConfigError(RcvgpError, ValueError):
    """A bad experiment file, setting or command-line argument."""


class RunFolderError(ConfigError):
    """A run folder that cannot be read: missing, without the file asked for, or damaged."""


class ExpressionError(RcvgpError, ValueError):
    """An expression that does not parse, or uses an operator not in the table."""


class MissingExtra(RcvgpError, ImportError):
    """An optional extra a command needs is not installed; the message says how to get it."""


class OracleError(RcvgpError):
    """An oracle misbehaved (wrong shape, inf) or refused a request."""


class OutOfLimitsError(OracleError, ValueError):
    """A set point lies outside the limits the oracle described."""


class BudgetExhausted(OracleError):
    """The measurement budget (points or requests) is spent."""


class OracleTimeout(OracleError, TimeoutError):
    """No reply from an oracle within the deadline."""


class RemoteError(OracleError):
    """A server answered with an error reply.

    Parameters
    ----------
    code : str
        The protocol's stable error code, e.g. ``OUT_OF_LIMITS``.
    message : str
        The server's human-readable message.
    retryable : bool
        Whether the same request may succeed if sent again.
    details : dict
        Machine-readable details given by the server.
    """

    def __init__(
        self, code: str, message: str, retryable: bool = False, details: dict[str, Any] | None = None
    ) -> None:
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message
        self.retryable = retryable
        self.details = dict(details or {})


class ProtocolError(RcvgpError):
    """A message that breaks the wire protocol (framing, header, version)."""


class RemoteOutOfLimits(RemoteError, OutOfLimitsError):
    """The server refused a set point outside the limits (code OUT_OF_LIMITS); nothing was measured."""


class WireError(ProtocolError):
    """A message that breaks the protocol, with the error code a server must answer it with."""

    def __init__(self, code: str, message: str, details: dict[str, Any] | None = None) -> None:
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message
        self.details = dict(details or {})


class BenchmarkInterrupted(KeyboardInterrupt):
    """Ctrl-C during :func:`rcvgp.bench.run_benchmark`, raised after the finished runs are saved.

    Attributes
    ----------
    records : list of dict
        The records of the tasks that finished (this call's and earlier ones').
    """

    def __init__(self, records: list[dict[str, Any]]) -> None:
        super().__init__(f"benchmark interrupted after {len(records)} finished run(s)")
        self.records = records
