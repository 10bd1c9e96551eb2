"""``rcvgp ping ENDPOINT``: is the oracle server there, and what does it serve?

Says hello to the server and prints what it answers: its version, the oracle's description
(variables with their limits and units, the output), the server's limits, its session and its
state (``--json``: one JSON object). When nothing answers it prints one line saying why, as far
as ZeroMQ can tell (the same reading of the connection as ``rcvgp run`` and ``rcvgp
conformance``), and exits 4.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import Any

from rcvgp.commands import add_connection_options

__all__ = ["register", "format_hello"]


def register(subparsers: Any) -> None:
    """Add ``ping`` to the ``rcvgp`` parser."""
    p = subparsers.add_parser(
        "ping",
        help="say hello to an oracle server: what it serves, its limits, session and state",
        description="Say hello to an oracle server and print its description (variables, limits, units, "
        "output), its limits, its session and its state. Exit status 0 when it answers, 4 (with one line "
        "saying why) when it cannot be reached.",
    )
    p.add_argument("endpoint", metavar="ENDPOINT", help="e.g. tcp://127.0.0.1:5555 or ipc:///tmp/rig.sock")
    p.add_argument("--json", action="store_true",
                   help="print one JSON object: the hello reply, the status reply, the round trip")
    add_connection_options(p)
    p.set_defaults(func=run_ping)


def run_ping(args: argparse.Namespace) -> int:
    from rcvgp.cli import ExitCode
    from rcvgp.errors import OracleTimeout
    from rcvgp.transport.client import ZmqOracle, diagnose

    keys = {"curve_server_key": args.curve_server_key, "curve_client_key": args.curve_client_key}
    reason = diagnose(args.endpoint, timeout=args.timeout, **keys)
    if reason is not None:
        print(f"rcvgp ping: {args.endpoint} is unreachable: {reason}", file=sys.stderr)
        return ExitCode.TIMEOUT
    remote = ZmqOracle(args.endpoint, timeout=args.timeout, deadline=args.timeout, client_name="rcvgp ping", **keys)
    try:
        hello = remote.hello()
        start = time.perf_counter()
        remote.ping()
        round_trip = time.perf_counter() - start
        status = remote.status()
    except OracleTimeout as exc:  # it answered once, then went quiet
        print(f"rcvgp ping: {exc}", file=sys.stderr)
        return ExitCode.TIMEOUT
    finally:
        remote.close()
    if args.json:
        print(json.dumps({"endpoint": args.endpoint, "round_trip_seconds": round_trip, "hello": hello,
                          "status": status}, allow_nan=False))
    else:
        print(format_hello(args.endpoint, hello, status, round_trip))
    return ExitCode.OK


def format_hello(endpoint: str, hello: dict[str, Any], status: dict[str, Any], round_trip: float) -> str:
    """The text ``rcvgp ping`` prints: a server's hello and status replies, a line per topic."""
    from rcvgp.oracle import OracleSpec

    spec = OracleSpec.from_dict(hello["oracle"])
    lines = [f"{endpoint}: {hello.get('server', 'a server')} speaking protocol "
             f"{', '.join(hello.get('versions') or ['?'])}, round trip {round_trip * 1e3:.1f} ms",
             f"oracle      {spec.name}"]
    width_name = max(len(v.name) for v in spec.variables)
    width_limits = max(len(v.describe_limits()) for v in spec.variables)
    width_unit = max(len(v.unit or "-") for v in spec.variables)
    for i, var in enumerate(spec.variables):
        label = "variables" if i == 0 else ""
        lines.append(f"{label:<12}{var.name:<{width_name}}  {var.describe_limits():<{width_limits}}  "
                     f"{var.unit or '-':<{width_unit}}  {var.dist}")
    lines.append(f"output      {spec.output.name}  {spec.output.unit or '-'}")
    if spec.operators:
        lines.append(f"operators   {' '.join(spec.operators)}")
    limits = hello.get("limits") or {}
    parts = [f"{limits.get('max_rows', spec.max_rows)} rows per measure"]
    if limits.get("max_message_bytes") is not None:
        parts.append(f"messages up to {_size(limits['max_message_bytes'])}")
    if limits.get("max_queue") is not None:
        parts.append(f"{limits['max_queue']} requests queued")
    if limits.get("reply_cache_bytes") is not None:
        parts.append(f"reply cache {_size(limits['reply_cache_bytes'])}")
    if "measure_timeout" in limits:
        timeout = limits["measure_timeout"]
        parts.append("no measure timeout" if timeout is None else f"measure timeout {timeout:g} s")
    lines.append(f"limits      {', '.join(parts)}")
    if hello.get("capabilities"):
        lines.append(f"features    {' '.join(hello['capabilities'])}")
    session = status.get("server_session") or hello.get("server_session")
    uptime = status.get("uptime")
    lines.append(f"session     {session}" + ("" if uptime is None else f", up {_duration(float(uptime))}"))
    lines.append(f"state       {_state(status)}")
    if status.get("fault"):
        lines.append(f"fault       {status['fault']}")
    return "\n".join(lines)


def _state(status: dict[str, Any]) -> str:
    text = str(status.get("state", "unknown"))
    current = status.get("current")
    if isinstance(current, dict):
        running = current.get("running_for")
        text += (f" (request {current.get('id')}, {current.get('rows')} rows"
                 + ("" if running is None else f", for {_duration(float(running))}") + ")")
    if status.get("queue"):
        text += f", {status['queue']} in the queue"
    if "requests" in status:
        text += f"; {status['requests']} requests"
        if "measurements" in status:
            text += f": {status['measurements']} measurements ({status.get('points', '?')} points)"
            text += f", {status.get('cache_hits', 0)} answered from the cache, {status.get('errors', 0)} errors"
    return text


def _size(n: Any) -> str:
    n = int(n)
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n >= scale:
            return f"{n / scale:g} {unit}"
    return f"{n} bytes"


def _duration(seconds: float) -> str:
    if seconds < 60:
        return f"{seconds:.1f} s"
    minutes, secs = divmod(int(seconds), 60)
    if minutes < 60:
        return f"{minutes} min {secs} s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours} h {minutes} min"
