"""The client side of protocol v1: :class:`ZmqOracle`, a DataOracle for a remote endpoint.

Requests go through a :class:`Channel`, a DEALER socket used the "lazy pirate" way: every
request has a timeout; when it expires the socket is closed with LINGER 0 (dropping anything
queued, so nothing is replayed when a server returns), a new one is opened, and the *same*
request (same id) is sent again, with a growing timeout, until a total deadline. Replies are
matched by request id, so a late reply can never be taken for the answer to another request.
Because the server answers a repeated ``measure`` id from its reply cache, a retry never
measures twice. Error replies become typed exceptions (:class:`~rcvgp.errors.RemoteError`,
:class:`RemoteOutOfLimits`), no reply within the deadline becomes
:class:`~rcvgp.errors.OracleTimeout`; a changed ``server_session`` is noticed as a restart.

:class:`ZmqOracle` reaches the network only through a :class:`BaseChannel`: :class:`Channel` is
the ZeroMQ one, :class:`MockChannel` answers from a function, so the client's logic is tested
without a socket. Every ``zmq.ZMQError`` is turned into our own errors at one place
(:func:`_zmq_errors`).
"""

from __future__ import annotations

import errno
import json
import logging
import math
import os
import socket
import time
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

import numpy as np
import zmq

from rcvgp.errors import ConfigError, OracleError, OracleTimeout, ProtocolError, RemoteError, RemoteOutOfLimits
from rcvgp.oracle import DataOracle, OracleSpec, check_reply
from rcvgp.transport import codec
from rcvgp.transport.endpoint import check_endpoint

__all__ = ["BaseChannel", "Channel", "MockChannel", "ZmqOracle", "RemoteOutOfLimits", "remote_error", "diagnose"]

log = logging.getLogger("rcvgp.transport.client")


def remote_error(error: Mapping[str, Any]) -> RemoteError:
    """The exception for the ``"error"`` object of an error reply."""
    code = str(error.get("code", "INTERNAL"))
    message = str(error.get("message", ""))
    retryable = bool(error.get("retryable", codec.ERROR_CODES.get(code, False)))
    details = error.get("details") if isinstance(error.get("details"), dict) else {}
    cls = RemoteOutOfLimits if code == "OUT_OF_LIMITS" else RemoteError
    return cls(code, message, retryable, details)


def _load_certificate(path: str | bytes | os.PathLike[str], what: str) -> tuple[bytes, bytes | None]:
    """``(public, secret or None)`` from a ZeroMQ certificate file; a missing or unreadable file
    is a :class:`ConfigError` naming it, not zmq's OSError."""
    import zmq.auth as zauth

    name = os.fsdecode(path)
    try:
        return zauth.load_certificate(name)
    except (OSError, ValueError) as exc:
        reason = "no such file" if not os.path.exists(name) else str(exc)
        raise ConfigError(f"{name}: cannot read {what}: {reason}; make key pairs with `rcvgp keys DIR --name NAME`") from None


def _load_public_key(key: str | bytes | os.PathLike[str]) -> bytes:
    if isinstance(key, bytes) and len(key) == 40:
        return key
    return _load_certificate(key, "the server's public key (NAME.key)")[0]


# A connect() that fails with one of these was given an unusable address (a user mistake).
_ADDRESS_ERRNOS = {errno.EINVAL, errno.EPROTONOSUPPORT, errno.ENODEV, getattr(zmq, "ENOCOMPATPROTO", -1)}


@contextmanager
def _zmq_errors(address: str, action: str) -> Iterator[None]:
    """The one place where a raw ``zmq.ZMQError`` becomes one of ours: :class:`ConfigError` for an
    address that ``connect`` refuses, :class:`OracleError` for anything else."""
    try:
        yield
    except zmq.ZMQError as exc:
        if action == "connect" and exc.errno in _ADDRESS_ERRNOS:
            raise ConfigError(
                f"cannot connect to {address!r}: {zmq.strerror(exc.errno)}; write the endpoint as tcp://HOST:PORT "
                "(e.g. tcp://127.0.0.1:5555) or ipc:///path/to/socket"
            ) from exc
        raise OracleError(f"{address}: {action} failed: {zmq.strerror(exc.errno)}") from exc


class BaseChannel:
    """What :class:`ZmqOracle` needs from the network: one request's frames out, the frames of
    the reply with the same id back, within a deadline.

    Subclasses implement :meth:`exchange` (and :meth:`close` if they hold resources).
    """

    address: str = ""

    def exchange(
        self,
        frames: Sequence[Any],
        request_id: str | None,
        *,
        timeout: float,
        deadline: float | None,
        backoff: float = 1.5,
        max_timeout: float = 60.0,
    ) -> list[bytes]:
        """Send ``frames`` and return the reply's frames; see :meth:`Channel.exchange`.

        Raises
        ------
        OracleTimeout
            No matching reply before the deadline.
        """
        raise NotImplementedError

    def diagnosis(self) -> tuple[str, str]:
        """``(kind, text)``: why the last request got no reply, as far as the channel can tell."""
        return "unknown", "no reply"

    def close(self) -> None:
        """Release what the channel holds; it cannot be used afterwards."""

    def __enter__(self) -> BaseChannel:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class MockChannel(BaseChannel):
    """A channel that answers from a function instead of a server (tests, notebooks).

    Parameters
    ----------
    handler : callable
        ``handler(request) -> frames``: given the decoded request (a :class:`~rcvgp.transport.codec.Message`),
        the frames of the reply (e.g. from :func:`~rcvgp.transport.codec.make_reply`), or None for a
        reply that never comes (the exchange then raises :class:`~rcvgp.errors.OracleTimeout` at
        once, as a real channel would at its deadline).
    address : str
        Shown in messages.

    Attributes
    ----------
    requests : list of dict
        The header of every request exchanged, in order.
    """

    def __init__(self, handler: Callable[[codec.Message], Sequence[Any] | None], address: str = "mock://") -> None:
        self.handler = handler
        self.address = address
        self.requests: list[dict[str, Any]] = []
        self.closed = False

    def exchange(
        self,
        frames: Sequence[Any],
        request_id: str | None,
        *,
        timeout: float,
        deadline: float | None,
        backoff: float = 1.5,
        max_timeout: float = 60.0,
    ) -> list[bytes]:
        if self.closed:
            raise OracleError(f"the connection to {self.address} is closed")
        request = codec.decode([bytes(f) for f in frames])
        self.requests.append(request.header)
        reply = self.handler(request)
        if reply is None:
            raise OracleTimeout(f"no reply from {self.address} (request id {request_id})")
        return [bytes(f) for f in reply]

    def close(self) -> None:
        self.closed = True


class _Link:
    """What a socket monitor saw of the connection since the last reply: enough to tell why a
    server does not answer (nothing listening, a CURVE key refused, a silent server...)."""

    # libzmq >= 4.3 reports handshake failures; older ones only connects and disconnects.
    _FAILED_AUTH = getattr(zmq, "EVENT_HANDSHAKE_FAILED_AUTH", 0)
    _FAILED_PROTOCOL = getattr(zmq, "EVENT_HANDSHAKE_FAILED_PROTOCOL", 0)
    _FAILED_NO_DETAIL = getattr(zmq, "EVENT_HANDSHAKE_FAILED_NO_DETAIL", 0)
    _SUCCEEDED = getattr(zmq, "EVENT_HANDSHAKE_SUCCEEDED", 0)
    _MISMATCH = getattr(zmq, "PROTOCOL_ERROR_ZMTP_MECHANISM_MISMATCH", -1)

    def __init__(self, curve: bool) -> None:
        self.curve = curve
        self.seen: set[str] = set()
        self.up = False  # the current socket has a connection that passed the handshake
        self.answered = False  # a reply has come through this channel

    def observe(self, event: int, value: int) -> None:
        if event == zmq.EVENT_CONNECT_RETRIED:
            self.seen.add("retried")
        elif event == zmq.EVENT_CONNECTED:
            self.seen.add("connected")
        elif event == zmq.EVENT_DISCONNECTED:
            self.up = False
        elif event == self._SUCCEEDED and event:
            self.seen.add("ready")
            self.up = True
        elif event == self._FAILED_AUTH and event:
            self.seen.add("client-refused")
        elif event == self._FAILED_PROTOCOL and event:
            self.seen.add("mechanism" if value == self._MISMATCH else "not-zmq")
        elif event == self._FAILED_NO_DETAIL and event:
            self.seen.add("bad-server-key" if self.curve else "handshake")

    def diagnosis(self) -> tuple[str, str]:
        """``(kind, text)``: the likeliest reason for no reply, from what was seen."""
        seen = self.seen
        if "client-refused" in seen:
            return "client-refused", "the server refused this client's CURVE key (not in its allow-list, --curve-clients)"
        if "mechanism" in seen:
            if self.curve:
                return "no-curve", "the server does not use CurveZMQ encryption, but this client was given a server key"
            return "needs-curve", "the server wants CurveZMQ encryption and this client has no server key"
        if "bad-server-key" in seen:
            return "bad-server-key", ("the CurveZMQ handshake failed: the server key this client has is not the "
                                      "server's public key")
        if "not-zmq" in seen:
            return "not-zmq", "something listens there, but it does not speak ZeroMQ"
        if "handshake" in seen:
            return "handshake", "the connection opens but the ZeroMQ handshake fails"
        if "ready" in seen or self.up:
            return "silent", "connected, but the server has not answered (a long measurement, or a busy or hung server?)"
        if "connected" in seen:
            return "handshake", "the connection opens but the ZeroMQ handshake does not complete"
        if "retried" in seen:
            return "refused", "nothing is listening there (connection refused)"
        return "unreachable", "no connection yet (is the host reachable, or does a firewall drop the packets?)"


def _peer_mechanism(address: str, timeout: float = 1.0) -> str | None:
    """The security mechanism (``"NULL"``, ``"CURVE"``, ...) a ZeroMQ server at a ``tcp://``
    address announces in its ZMTP 3 greeting, read over a plain TCP connection; None if it cannot
    be read (another transport, nothing there, not ZMTP 3)."""
    if not address.startswith("tcp://"):
        return None
    host, _, port = address[len("tcp://"):].rpartition(":")
    # A ZMTP 3 greeting is a signature (0xFF, 8 bytes, 0x7F), the version (3, minor), the
    # mechanism (20 bytes), an as-server flag and filler: 64 bytes. Given the signature and the
    # major version, a server sends the rest of its greeting; given all of ours at once, it may
    # find the mismatch and hang up before it sends its own.
    data = b""
    try:
        with socket.create_connection((host.strip("[]"), int(port)), timeout=timeout) as conn:
            conn.sendall(b"\xff" + bytes(8) + b"\x7f" + b"\x03")
            while len(data) < 32:
                chunk = conn.recv(64 - len(data))
                if not chunk:
                    break
                data += chunk
    except (OSError, ValueError):
        return None
    if len(data) < 32 or data[0] != 0xFF or data[9] != 0x7F or data[10] < 3:
        return None
    return data[12:32].rstrip(b"\x00").decode("ascii", "replace")


class Channel(BaseChannel):
    """A lazy-pirate request channel to one endpoint (frames in, frames out, no interpretation).

    Parameters
    ----------
    address : str
        The server's endpoint, e.g. ``tcp://127.0.0.1:5555``.
    curve_server_key : path or bytes, optional
        The server's public key (``server.key`` file or its 40-character Z85 text).
    curve_client_key : path, optional
        This client's key pair file (``*.key_secret``); a fresh key pair is made when omitted
        and ``curve_server_key`` is given (fine when the server accepts any client).
    on_wait : callable, optional
        Called with a line of text while no reply comes and the server was never heard or the
        connection is down (first after ``first_note`` seconds, then every ``note_every``): what
        the socket monitor tells of the connection, and when the channel gives up.

    Attributes
    ----------
    reconnects : int
        Sockets replaced after a timeout.
    """

    first_note = 2.0
    note_every = 10.0

    def __init__(
        self,
        address: str,
        *,
        curve_server_key: str | bytes | os.PathLike[str] | None = None,
        curve_client_key: str | os.PathLike[str] | None = None,
        on_wait: Callable[[str], None] | None = None,
    ) -> None:
        check_endpoint(address)
        self.address = address
        self._curve: tuple[bytes, bytes, bytes] | None = None
        if curve_server_key is not None:
            server_pub = _load_public_key(curve_server_key)
            if curve_client_key is not None:
                pub, sec = _load_certificate(curve_client_key, "this client's key pair (NAME.key_secret)")
                if sec is None:
                    raise ConfigError(f"{curve_client_key}: no secret key in this file; give the client's *.key_secret file")
            else:
                pub, sec = zmq.curve_keypair()
            self._curve = (server_pub, pub, sec)
        elif curve_client_key is not None:
            raise ConfigError("curve_client_key needs curve_server_key (the server's public key)")
        self._ctx: zmq.Context[Any] | None = zmq.Context()
        self._sock: zmq.Socket[Any] | None = None
        self._monitor: zmq.Socket[Any] | None = None
        self._link = _Link(self._curve is not None)
        self.on_wait = on_wait
        self.reconnects = 0

    def _open(self) -> zmq.Socket[Any]:
        if self._ctx is None:
            raise OracleError(f"the connection to {self.address} is closed")
        with _zmq_errors(self.address, "socket"):
            sock = self._ctx.socket(zmq.DEALER)
            sock.setsockopt(zmq.LINGER, 0)
            sock.setsockopt(zmq.RECONNECT_IVL, 100)
            sock.setsockopt(zmq.RECONNECT_IVL_MAX, 2000)
            if self._curve is not None:
                sock.curve_serverkey, sock.curve_publickey, sock.curve_secretkey = self._curve
        try:
            with _zmq_errors(self.address, "monitor"):
                self._monitor = sock.get_monitor_socket()
            with _zmq_errors(self.address, "connect"):
                sock.connect(self.address)
        except BaseException:
            self._sock = sock
            self._close_socket()
            raise
        return sock

    def _close_socket(self) -> None:
        if self._sock is None:
            return
        self._watch()
        if self._monitor is not None:
            try:
                self._sock.disable_monitor()
            except zmq.ZMQError:  # pragma: no cover - already stopped
                pass
            self._monitor.close(0)
            self._monitor = None
        self._sock.close(0)
        self._sock = None
        self._link.up = False

    def _reset(self) -> None:
        if self._sock is not None:
            self._close_socket()
            self.reconnects += 1

    def _watch(self) -> None:
        """Read the monitor's events that are waiting."""
        from zmq.utils.monitor import recv_monitor_message

        while self._monitor is not None and self._monitor.poll(0):
            try:
                event = recv_monitor_message(self._monitor, zmq.NOBLOCK)
            except zmq.ZMQError:  # pragma: no cover - raced with a close
                return
            self._link.observe(int(event["event"]), int(event["value"]))

    def diagnosis(self) -> tuple[str, str]:
        """``(kind, text)``: why the last request got no reply, as far as the socket monitor tells.

        ``kind`` is one of ``refused`` (nothing listening), ``unreachable``, ``needs-curve``,
        ``no-curve``, ``bad-server-key``, ``client-refused``, ``not-zmq``, ``handshake``,
        ``silent`` (connected, no answer).
        """
        self._watch()
        kind, why = self._link.diagnosis()
        if kind in ("handshake", "bad-server-key"):
            # The monitor reports a mechanism mismatch only when this side sees it first; when
            # the server hangs up first it is a handshake failed "with no detail". The server's
            # greeting names its mechanism: read it.
            mechanism = _peer_mechanism(self.address)
            if mechanism in ("CURVE", "NULL") and (mechanism == "CURVE") != self._link.curve:
                self._link.seen.add("mechanism")
                return self._link.diagnosis()
        return kind, why

    def exchange(
        self,
        frames: Sequence[Any],
        request_id: str | None,
        *,
        timeout: float,
        deadline: float | None,
        backoff: float = 1.5,
        max_timeout: float = 60.0,
    ) -> list[bytes]:
        """Send ``frames`` and return the reply's frames (the envelope removed).

        A reply is accepted only if its header's ``"id"`` equals ``request_id`` (any reply when
        ``request_id`` is None). On each timeout the socket is replaced and the same frames are
        sent again, the wait growing by ``backoff`` up to ``max_timeout``, until ``deadline``
        seconds have passed (None: no total deadline, retry for ever).

        Raises
        ------
        OracleTimeout
            No matching reply before the deadline.
        """
        start = time.monotonic()
        wait = float(timeout)
        attempt = 0
        self._link.seen.clear()
        next_note = start + self.first_note

        def note() -> float:
            """Say why we wait, when it is time and worth it; seconds until the next note."""
            nonlocal next_note
            now = time.monotonic()
            if now < next_note:
                return next_note - now
            next_note = now + self.note_every
            left = math.inf if deadline is None else deadline - (now - start)
            if self.on_wait is not None and not (self._link.answered and self._link.up) and left >= 1:
                until = "" if deadline is None else f", giving up in {math.ceil(left)} s"
                self.on_wait(f"waiting for {self.address}: {self.diagnosis()[1]} (no answer yet{until})")
            return self.note_every

        while True:
            attempt += 1
            if self._sock is None:
                self._sock = self._open()
            with _zmq_errors(self.address, "send"):
                self._sock.send_multipart([b"", *frames], copy=False)
            remaining = None if deadline is None else deadline - (time.monotonic() - start)
            this_wait = wait if remaining is None else max(0.0, min(wait, remaining))
            reply = self._receive(request_id, this_wait, note)
            if reply is not None:
                self._link.answered = True
                return reply
            kind, why = self.diagnosis()
            self._reset()  # lazy pirate: a lost reply leaves nothing behind
            elapsed = time.monotonic() - start
            if deadline is not None and elapsed >= deadline - 1e-3:
                raise OracleTimeout(
                    f"no reply from {self.address} within {elapsed:.1f} s ({attempt} attempt(s), "
                    f"request id {request_id}): {why}"
                )
            log.info("no reply from %s in %.1f s (attempt %d: %s); retrying with request id %s", self.address,
                     this_wait, attempt, kind, request_id)
            wait = min(wait * backoff, max_timeout)

    def _receive(self, request_id: str | None, wait: float, note: Callable[[], float]) -> list[bytes] | None:
        assert self._sock is not None
        poller = zmq.Poller()
        poller.register(self._sock, zmq.POLLIN)
        if self._monitor is not None:
            poller.register(self._monitor, zmq.POLLIN)
        end = time.monotonic() + wait
        while True:
            left = end - time.monotonic()
            if left <= 0:
                return None
            with _zmq_errors(self.address, "receive"):
                ready = dict(poller.poll(max(1, int(min(left, note()) * 1000))))
                if self._monitor is not None and self._monitor in ready:
                    self._watch()
                if self._sock not in ready:
                    continue
                msg = self._sock.recv_multipart()
            body = msg[1:] if msg and msg[0] == b"" else msg
            if request_id is None:
                return body
            try:
                rid = json.loads(bytes(body[0])).get("id") if body else None
            except (ValueError, AttributeError):
                return body  # unparsable: let the caller report it rather than wait
            if rid == request_id or rid is None:  # None: the server could not read our request
                return body
            log.debug("discarding a late reply (id %r, expected %r)", rid, request_id)

    def close(self) -> None:
        """Close the socket (LINGER 0: never hangs) and the context."""
        self._close_socket()
        if self._ctx is not None:
            self._ctx.term()
            self._ctx = None

    def __enter__(self) -> Channel:
        return self


class ZmqOracle(DataOracle):
    """A :class:`~rcvgp.oracle.DataOracle` served by a remote endpoint (protocol v1).

    Parameters
    ----------
    address : str
        The server's endpoint.
    timeout : float
        Seconds to wait for one reply before re-sending (it grows by ``backoff`` per attempt).
        A measurement that lasts longer than this is fine: the re-sent request is matched to
        the one running, and answered once it completes.
    deadline : float or None
        Total seconds one call may take, retries included; None retries for ever (an
        experiment that must survive a long server outage).
    backoff, max_timeout : float
        Growth of the per-attempt wait and its cap.
    session : str, optional
        Client session id (default: random). Giving the same session and the same request ids
        after a client restart lets a journalling server answer from its journal.
    curve_server_key, curve_client_key
        CurveZMQ keys, see :class:`Channel`.
    client_name : str
        Sent in ``hello``, shown in server logs.
    channel : BaseChannel, optional
        Carry the requests through this channel instead of a :class:`Channel` to ``address``
        (e.g. a :class:`MockChannel` in tests); the oracle closes it.
    on_wait : callable, optional
        Called with a line of text while a request waits for a server that never answered or
        whose connection is down (see :class:`Channel`); e.g. to print it.

    Attributes
    ----------
    server_session : str or None
        The server's session id from the last reply.
    restarts : int
        How many times the server was seen to restart (its session id changed).
    requests : int
        Requests made (retries not counted).
    """

    def __init__(
        self,
        address: str,
        *,
        timeout: float = 10.0,
        deadline: float | None = 120.0,
        backoff: float = 1.5,
        max_timeout: float = 60.0,
        session: str | None = None,
        curve_server_key: str | bytes | os.PathLike[str] | None = None,
        curve_client_key: str | os.PathLike[str] | None = None,
        client_name: str = "rcvgp.ZmqOracle",
        channel: BaseChannel | None = None,
        on_wait: Callable[[str], None] | None = None,
    ) -> None:
        if not timeout > 0:
            raise ConfigError(f"`timeout` must be > 0 seconds, got {timeout!r}")
        if deadline is not None and not deadline > 0:
            raise ConfigError(f"`deadline` must be > 0 seconds or None, got {deadline!r}")
        self.address = address
        self.timeout = float(timeout)
        self.deadline = deadline
        self.backoff = float(backoff)
        self.max_timeout = float(max_timeout)
        self.session = session or uuid.uuid4().hex
        self.client_name = client_name
        self._channel: BaseChannel = channel if channel is not None else Channel(
            address, curve_server_key=curve_server_key, curve_client_key=curve_client_key, on_wait=on_wait
        )
        self._counter = 0
        self._spec: OracleSpec | None = None
        self.server_info: dict[str, Any] = {}
        self.server_session: str | None = None
        self.restarts = 0
        self.requests = 0
        self._in_hello = False

    # ---------------------------------------------------------------- requests
    def next_id(self) -> str:
        self._counter += 1
        return str(self._counter)

    def request(
        self,
        op: str,
        params: Mapping[str, Any] | None = None,
        arrays: Mapping[str, np.ndarray] | None = None,
        *,
        request_id: str | None = None,
        timeout: float | None = None,
        deadline: float | None | str = "default",
    ) -> codec.Message:
        """Send one request (retrying as described) and return the decoded success reply.

        Raises
        ------
        RemoteError
            The server replied with an error (``RemoteOutOfLimits`` for OUT_OF_LIMITS). BUSY is
            retried with the same id until the deadline first.
        OracleTimeout
            No reply before the deadline.
        ProtocolError
            The reply breaks the protocol.
        """
        rid = request_id or self.next_id()
        dl = self.deadline if deadline == "default" else deadline
        # A measure this client has given up on must not reach the rig later (protocol 1.1).
        expires_in = float(dl) if op == "measure" and dl is not None else None  # type: ignore[arg-type]
        frames = codec.make_request(op, rid, self.session, params, arrays, expires_in=expires_in)
        start = time.monotonic()
        self.requests += 1
        pause = 0.05
        while True:
            left = None if dl is None else float(dl) - (time.monotonic() - start)  # type: ignore[arg-type]
            if left is not None and left <= 0:
                raise OracleTimeout(f"{op} request {rid} to {self.address}: deadline of {dl} s spent while the server was busy")
            reply = self._channel.exchange(
                frames, rid, timeout=timeout or self.timeout, deadline=left, backoff=self.backoff, max_timeout=self.max_timeout
            )
            message = self._decode_reply(reply, op)
            header = message.header
            if header.get("ok") is True:
                return message
            error = header.get("error")
            if not isinstance(error, dict):
                raise ProtocolError(f"{self.address}: error reply without an \"error\" object: {header!r}")
            exc = remote_error(error)
            if exc.code == "BUSY" and exc.retryable:
                time.sleep(pause)
                pause = min(pause * 2, 2.0)
                continue
            raise exc

    def _decode_reply(self, frames: list[bytes], op: str) -> codec.Message:
        try:
            message = codec.decode(frames, dtypes=None)
        except codec.WireError as exc:
            raise ProtocolError(f"{self.address}: malformed reply to {op}: {exc.message}") from None
        header = message.header
        try:
            major, minor = codec.parse_version(header.get("v"))
        except codec.WireError:
            raise ProtocolError(f"{self.address}: reply has no valid \"v\" version field: {header.get('v')!r}") from None
        if major != codec.PROTOCOL_VERSION[0]:
            raise RemoteError(
                "UNSUPPORTED_VERSION",
                codec.version_mismatch_message((major, minor), we_are="client"),
                False,
                {"server_version": header.get("v"), "client_version": codec.VERSION},
            )
        session = header.get("server_session")
        if isinstance(session, str) and session:
            if self.server_session is not None and session != self.server_session:
                self.restarts += 1
                log.warning("server at %s restarted (session %s -> %s)", self.address, self.server_session, session)
                self.server_session = session
                if not self._in_hello and self._spec is not None:
                    self._check_same_oracle()
            self.server_session = session
        return message

    def _check_same_oracle(self) -> None:
        old = self._spec
        self._spec = None
        new = self.describe()
        if old is not None and new.to_dict() != old.to_dict():
            raise ProtocolError(
                f"the server at {self.address} restarted with a different oracle "
                f"({old.name!r} -> {new.name!r}); its measurements cannot be mixed with earlier ones"
            )

    # ---------------------------------------------------------------- operations
    def hello(self) -> dict[str, Any]:
        """Handshake: check the protocol version and fetch the server's limits and oracle spec."""
        self._in_hello = True
        try:
            message = self.request("hello", {"client": self.client_name, "versions": [codec.VERSION]})
        finally:
            self._in_hello = False
        result = dict(message.header.get("result") or {})
        try:
            self._spec = OracleSpec.from_dict(result["oracle"])
        except Exception as exc:  # noqa: BLE001
            raise ProtocolError(f"{self.address}: hello reply has no valid \"oracle\" description: {exc}") from None
        self.server_info = result
        return result

    def describe(self) -> OracleSpec:
        if self._spec is None:
            self.hello()
        assert self._spec is not None
        return self._spec

    def _points(self, X: Any) -> np.ndarray:
        spec = self.describe()
        X = np.ascontiguousarray(X, dtype="<f8")
        if X.ndim != 2 or X.shape[1] != spec.n_vars:
            raise OracleError(f"{spec.name}: set points must have shape (n_samples, {spec.n_vars}), got {X.shape}")
        return X

    def measure(self, X: np.ndarray) -> np.ndarray:
        return self.measure_with_id(X, None)[1]

    def measure_readback(self, X: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        return self.measure_with_id(X, None, readback=True)

    def measure_with_id(
        self, X: np.ndarray, request_id: str | None, *, readback: bool = False
    ) -> tuple[np.ndarray, np.ndarray]:
        """Measure under a request id the caller chose; returns (X reached, y).

        The server answers a ``measure`` whose (session, id) it has seen from its reply cache, so
        a caller that keeps :attr:`session` and the id of a request in flight when it was killed
        gets that request's answer on retry, without measuring again (the run journal does).
        Without ``readback`` the X returned is a copy of the X asked.
        """
        X = self._points(X)
        message = self.request("measure", {"readback": True} if readback else {}, {"X": X}, request_id=request_id)
        y = self._y(message, X.shape[0])
        Xr = message.arrays.get("X_reached") if readback else None
        if Xr is None:
            return X.copy(), y
        Xr = np.array(Xr, dtype=np.float64)
        if Xr.shape != X.shape:
            raise ProtocolError(f"{self.address}: X_reached has shape {Xr.shape}, expected {X.shape}")
        return Xr, y

    def _y(self, message: codec.Message, n: int) -> np.ndarray:
        y = message.arrays.get("y")
        if y is None:
            raise ProtocolError(f"{self.address}: measure reply has no array \"y\"")
        return check_reply(np.array(y, dtype=np.float64), n, self.describe().name)

    def ping(self, timeout: float | None = None, deadline: float | None | str = "default") -> dict[str, Any]:
        """Round trip to the server; returns its result (``server_session``, ``time``)."""
        return dict(self.request("ping", timeout=timeout, deadline=deadline).header.get("result") or {})

    def status(self) -> dict[str, Any]:
        """The server's state (idle or measuring) and counters."""
        return dict(self.request("status").header.get("result") or {})

    def diagnosis(self) -> tuple[str, str]:
        """``(kind, text)``: why the last request got no reply (see :meth:`Channel.diagnosis`)."""
        return self._channel.diagnosis()

    def close(self) -> None:
        self._channel.close()

    def __repr__(self) -> str:
        return f"ZmqOracle({self.address!r}, session={self.session!r})"


#: What a socket monitor can tell for sure: no need to wait for a reply any longer.
_DEFINITE = {"refused", "client-refused", "needs-curve", "no-curve", "bad-server-key", "not-zmq"}


def diagnose(
    address: str,
    *,
    curve_server_key: str | bytes | os.PathLike[str] | None = None,
    curve_client_key: str | os.PathLike[str] | None = None,
    timeout: float = 5.0,
) -> str | None:
    """Why nothing answers at ``address``, or None when a ``ping`` gets a reply.

    Sends one ``ping`` on a :class:`Channel` and reads its socket monitor (the same reading of
    ZeroMQ's events as :meth:`Channel.diagnosis`), returning as soon as the events settle it (a
    refused connection, a server that wants CURVE keys or refuses this client's) and after
    ``timeout`` seconds at the latest.
    """
    with Channel(address, curve_server_key=curve_server_key, curve_client_key=curve_client_key) as channel:
        sock = channel._sock = channel._open()
        rid = "diagnose-" + uuid.uuid4().hex[:8]
        with _zmq_errors(address, "send"):
            sock.send_multipart([b"", *codec.make_request("ping", rid, "diagnose-" + uuid.uuid4().hex)], copy=False)
        poller = zmq.Poller()
        poller.register(sock, zmq.POLLIN)
        assert channel._monitor is not None
        poller.register(channel._monitor, zmq.POLLIN)
        end = time.monotonic() + timeout
        while (left := end - time.monotonic()) > 0:
            with _zmq_errors(address, "receive"):
                ready = dict(poller.poll(max(1, int(left * 1000))))
                if sock in ready:
                    sock.recv_multipart()
                    return None
            kind, why = channel.diagnosis()
            if kind in _DEFINITE:
                return why
        return channel.diagnosis()[1]

