"""The ``rcvgp`` command: argparse subcommands, each registered by a module of ``rcvgp.commands``.

``main(argv) -> int`` never lets a user mistake escape as a traceback: an :class:`RcvgpError`
becomes one line on stderr and an exit status from :class:`ExitCode`.
"""

from __future__ import annotations

import argparse
import enum
import importlib
import sys
from collections.abc import Sequence

from rcvgp.errors import (
    ConfigError, ExpressionError, MissingExtra, OracleError, OracleTimeout, ProtocolError, RcvgpError,
)

__all__ = ["ExitCode", "main", "build_parser", "version_line"]

# Each module defines ``register(subparsers)``, adding its subcommand(s) with
# ``set_defaults(func=handler)`` where ``handler(args) -> int``.
COMMAND_MODULES = (
    "rcvgp.commands.run",
    "rcvgp.commands.oracles",
    "rcvgp.commands.serve",
    "rcvgp.commands.ping",
    "rcvgp.commands.conformance",
    "rcvgp.commands.bench",
    "rcvgp.commands.export",
    "rcvgp.commands.report",
)


class ExitCode(enum.IntEnum):
    """Exit statuses of the ``rcvgp`` command."""

    OK = 0
    FAILED = 1  # the command ran but its outcome is a failure (e.g. a conformance check failed)
    USAGE = 2  # a user mistake: bad argument, bad file, unknown id (argparse uses 2 as well)
    ORACLE = 3  # the oracle failed or refused
    TIMEOUT = 4  # the oracle did not answer in time
    INTERRUPTED = 130  # Ctrl-C


def version_line() -> str:
    """``rcvgp X.Y.Z (protocol rcvgp-oracle A.B)``: what ``rcvgp --version`` prints."""
    from rcvgp import __version__
    from rcvgp.transport.codec import PROTOCOL, VERSION

    return f"rcvgp {__version__} (protocol {PROTOCOL} {VERSION})"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="rcvgp",
        description="Discover governing equations by running controlled experiments (Racing-CVGP).",
    )
    parser.add_argument("--version", action="version", version=version_line(),
                        help="print the version of rcvgp and of the wire protocol it speaks, and exit")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    for name in COMMAND_MODULES:
        try:
            module = importlib.import_module(name)
        except ModuleNotFoundError as exc:
            if exc.name == name:  # that command is not built yet
                continue
            raise
        module.register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return int(args.func(args))
    except KeyboardInterrupt:
        print("rcvgp: interrupted", file=sys.stderr)
        return ExitCode.INTERRUPTED
    except (ConfigError, ExpressionError) as exc:
        print(f"rcvgp: error: {exc}", file=sys.stderr)
        return ExitCode.USAGE
    except MissingExtra as exc:
        print(f"rcvgp: {exc}", file=sys.stderr)
        return ExitCode.USAGE
    except OracleTimeout as exc:
        print(f"rcvgp: oracle timeout: {exc}", file=sys.stderr)
        return ExitCode.TIMEOUT
    except (OracleError, ProtocolError) as exc:  # a reply that breaks the protocol is the oracle failing
        print(f"rcvgp: oracle error: {exc}", file=sys.stderr)
        return ExitCode.ORACLE
    except RcvgpError as exc:
        print(f"rcvgp: error: {exc}", file=sys.stderr)
        return ExitCode.FAILED


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
