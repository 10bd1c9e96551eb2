"""ZeroMQ endpoints as a user writes them: what a tcp:// endpoint binds or connects to, whether
it stays on this machine, and the mistakes ZeroMQ would not report (a port past 65535 is taken
modulo 65536, so ``tcp://127.0.0.1:99999`` silently means port 34463)."""

from __future__ import annotations

import ipaddress

from rcvgp.errors import ConfigError


def tcp_host_port(address: str) -> tuple[str, str]:
    """``(host, port)`` of a ``tcp://`` endpoint, as written. A source before a ``;``
    (``tcp://SOURCE;HOST:PORT``) is dropped: ZeroMQ binds or connects to what follows it."""
    rest = address.partition("://")[2].rpartition(";")[2]
    host, _, port = rest.rpartition(":")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    return host, port


def check_endpoint(address: object) -> str:
    """``address`` if it is an endpoint ZeroMQ will take at its word, else :class:`ConfigError`
    saying how to write it."""
    example = "tcp://HOST:PORT (e.g. tcp://127.0.0.1:5555) or ipc:///path/to/socket"
    if not isinstance(address, str) or "://" not in address:
        raise ConfigError(f"{address!r} is not a ZeroMQ endpoint; write it as {example}")
    if address.startswith("tcp://"):
        port = tcp_host_port(address)[1]
        if port != "*" and not (port.isascii() and port.isdigit() and int(port) <= 65535):
            raise ConfigError(f"{address}: the port must be a number from 0 to 65535 (or * to bind any); "
                              f"write the endpoint as {example}")
    return address


def is_loopback(address: str) -> bool:
    """True for ipc://, inproc:// and tcp:// on 127.0.0.0/8, ::1 or localhost.

    A tcp address is judged on what follows a source (:func:`tcp_host_port`). The server also
    judges the endpoint ZeroMQ reports after binding, which settles names and wildcards.
    """
    scheme = address.partition("://")[0]
    if scheme in ("ipc", "inproc"):
        return True
    if scheme != "tcp":
        return False
    host = tcp_host_port(address)[0]
    if host == "localhost":
        return True
    try:
        ip = ipaddress.ip_address(host)
    except ValueError:
        return False  # an interface name or a wildcard: not provably loopback
    mapped = getattr(ip, "ipv4_mapped", None)
    return bool(ip.is_loopback or (mapped is not None and mapped.is_loopback))
