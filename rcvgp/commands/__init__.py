"""The subcommands of ``rcvgp``, one module each, and the argparse pieces they share."""

from __future__ import annotations

import argparse
from collections.abc import Callable

from rcvgp.errors import ConfigError


def int_at_least(low: int) -> Callable[[str], int]:
    """An argparse ``type`` for integers >= ``low``."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected an integer >= {low}, got {text!r}") from None
        if value < low:
            raise argparse.ArgumentTypeError(f"expected an integer >= {low}, got {text!r}")
        return value

    return parse


def positive_float(text: str) -> float:
    """An argparse ``type`` for finite numbers > 0."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number > 0, got {text!r}") from None
    if not value > 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"expected a finite number > 0, got {text!r}")
    return value


def add_workers_option(parser: argparse.ArgumentParser, default: str) -> None:
    """``--workers N``: processes that fit a search's constants. Read as text and checked by
    :func:`workers_flag`, so that a bad value is one line (exit 2), as it is in a file."""
    parser.add_argument("--workers", metavar="N",
                        help=f"processes that fit the constants of each generation at once (default: {default}); "
                        "a seed gives the same result whatever their number")


def workers_flag(text: str | None) -> int | None:
    """The value of ``--workers`` (None if not given).

    Raises
    ------
    ConfigError
        If it is not an integer >= 1.
    """
    if text is None:
        return None
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise ConfigError(f"--workers: expected a number of processes, an integer >= 1, got {text!r}")
    return value


def add_connection_options(parser: argparse.ArgumentParser) -> None:
    """``--timeout`` and the CurveZMQ keys: how a command that questions a server reaches it."""
    parser.add_argument("--timeout", type=positive_float, default=5.0, metavar="S",
                        help="seconds to wait for each reply (default 5)")
    parser.add_argument("--curve-server-key", metavar="FILE", default=None,
                        help="the server's public key file (NAME.key from `rcvgp keys`), for a server with CURVE")
    parser.add_argument("--curve-client-key", metavar="FILE", default=None,
                        help="this client's key pair (*.key_secret), for a server that admits only some clients")
