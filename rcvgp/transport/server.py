"""Serve any :class:`~rcvgp.oracle.DataOracle` over ZeroMQ (protocol v1, ``protocols/v1.md``).

One I/O thread owns a ROUTER socket: it validates every request (framing, header, version,
dtype, shape, rows, message size, every set point against the declared limits) before the
oracle sees it, answers ``hello``/``describe``/``ping``/``status`` at once, and hands ``measure``
jobs to a single worker thread, so ``ping`` and ``status`` are answered while a long measurement
runs. Completed ``measure`` replies are kept in a cache keyed by (client session, request id),
bounded in bytes, and, optionally, in an on-disk journal: a retried request is answered from
there and never measured twice. A bad request never stops the server; every request gets a reply.

Python cannot stop a thread stuck in a rig driver. A measurement that runs longer than
``measure_timeout`` is answered ``RIG_TIMEOUT``; until the driver returns, the server is
"stuck": new ``measure`` requests are refused at once with ``RIG_TIMEOUT`` (none is queued behind
it) and ``status`` says so. A request may carry ``expires_in``: if it has not started by then,
it is answered ``EXPIRED`` and never reaches the rig.

``serve(oracle, address)`` blocks until SIGINT/SIGTERM; :class:`OracleServer` with
``start()``/``stop()`` runs in a background thread (tests, notebooks).
"""

from __future__ import annotations

import hashlib
import logging
import os
import signal
import socket
import struct
import threading
import time
import traceback
import uuid
from collections import OrderedDict, deque
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import numpy as np
import zmq

from rcvgp.errors import ConfigError, OracleError, OutOfLimitsError
from rcvgp.oracle import DataOracle, OracleSpec, check_reply
from rcvgp.transport import codec
from rcvgp.transport.codec import WireError
from rcvgp.transport.endpoint import check_endpoint, is_loopback

__all__ = ["DEFAULT_ADDRESS", "DEFAULT_MEASURE_TIMEOUT", "DEFAULT_REPLY_CACHE_BYTES", "MAX_SESSIONS", "OracleServer", "serve",
           "is_loopback"]

log = logging.getLogger("rcvgp.transport.server")

#: Where a server binds when not told otherwise: loopback only.
DEFAULT_ADDRESS = "tcp://127.0.0.1:5555"
#: Default bound of the reply cache, in bytes.
DEFAULT_REPLY_CACHE_BYTES = 64 * 2**20
#: Default longest measurement, in seconds, before it is answered RIG_TIMEOUT.
DEFAULT_MEASURE_TIMEOUT = 600.0
#: Sessions whose counters ``status`` keeps (the most recently active ones).
MAX_SESSIONS = 1024
# What a cache entry costs beside its reply bytes (the key, the digest, the containers).
_ENTRY_OVERHEAD = 512
# Most envelopes waiting on one job (every lazy-pirate retry comes from a new socket).
_MAX_WAITERS = 16
_JOURNAL_MAGIC = b"RCVGPJ1\n"


def _package_version() -> str:
    try:
        from rcvgp import __version__

        return str(__version__)
    except Exception:  # pragma: no cover
        return "unknown"


class _Request:
    """One request as the handlers see it: who sent it (envelope), its header, params and arrays."""

    __slots__ = ("envelope", "body", "header", "params", "message")

    def __init__(self, envelope: list[bytes], body: list[bytes], header: dict[str, Any], params: dict[str, Any], message: codec.Message) -> None:
        self.envelope = envelope
        self.body = body
        self.header = header
        self.params = params
        self.message = message

    @property
    def key(self) -> tuple[str, str]:
        """(client session, request id): the reply cache's key."""
        return (self.header["session"], self.header["id"])


class _Job:
    """A measure request from its acceptance to its reply.

    ``state`` goes ``queued`` -> ``running`` -> ``finishing`` -> ``done``; or ``queued`` ->
    ``expired`` (its ``expires_in`` passed) or ``dropped`` (the rig got stuck); or ``running`` ->
    ``timed_out`` (over the measure timeout; the driver has not returned). It changes only
    under the server's lock.
    """

    __slots__ = ("key", "digest", "header", "X", "readback", "envelopes", "expires_in", "expires_at", "started",
                 "started_wall", "state")

    def __init__(self, key: tuple[str, str], digest: str, header: dict[str, Any], X: np.ndarray, readback: bool,
                 expires_in: float | None) -> None:
        self.key = key
        self.digest = digest
        self.header = header
        self.X = X
        self.readback = readback
        self.envelopes: list[list[bytes]] = []
        self.expires_in = expires_in
        self.expires_at = None if expires_in is None else time.monotonic() + expires_in
        self.started: float | None = None  # time.monotonic() when the rig got it
        self.started_wall: float | None = None
        self.state = "queued"

    def running_for(self) -> float:
        return 0.0 if self.started is None else time.monotonic() - self.started


class OracleServer:
    """A protocol-v1 server for one oracle.

    Parameters
    ----------
    oracle : DataOracle
        What to serve. ``describe()`` is called once, at construction.
    address : str
        ZeroMQ endpoint to bind, e.g. ``tcp://127.0.0.1:5555``, ``tcp://127.0.0.1:*`` (a free
        port, see :attr:`endpoint`) or ``ipc:///tmp/rig.sock``.
    max_rows : int, optional
        Most rows per ``measure``; defaults to the oracle's ``max_rows`` (never more).
    max_message_bytes : int
        Larger requests get TOO_LARGE.
    max_queue : int
        Most ``measure`` requests waiting or running; more get BUSY (retryable).
    reply_cache_bytes : int
        Bound, in bytes, of the completed ``measure`` replies kept in memory for retries (each
        counted as its frames plus 512 bytes); the oldest go first, the newest is always kept.
    measure_timeout : float or None
        Seconds a measurement may run; a longer one is answered ``RIG_TIMEOUT`` and, until the
        rig returns, every new ``measure`` too (``status`` says ``stuck``). None: no limit.
    journal_dir : path, optional
        Also store every completed ``measure`` reply there, before sending it, so that a request
        retried after a server restart is still answered without measuring again.
    curve_secret_key : path, optional
        The server's CURVE key pair file (``*.key_secret``, as ``rcvgp keys`` writes). Enables
        CurveZMQ encryption and authentication.
    curve_clients_dir : path, optional
        Directory of allowed client public keys (``*.key``). Without it any client that knows
        the server's public key is accepted. Delete a file and call :meth:`reload_keys` (or send
        SIGHUP to ``rcvgp serve``) to revoke a client.
    insecure : bool
        Allow a non-loopback bind without CURVE. Without it, both the address given and the
        endpoint ZeroMQ actually bound must be loopback (or ipc://); otherwise the socket is
        closed before it serves anyone and :class:`ConfigError` is raised.
    close_oracle : bool
        Call ``oracle.close()`` when the server stops.
    """

    def __init__(
        self,
        oracle: DataOracle,
        address: str = DEFAULT_ADDRESS,
        *,
        max_rows: int | None = None,
        max_message_bytes: int = 64 * 2**20,
        max_queue: int = 8,
        reply_cache_bytes: int = DEFAULT_REPLY_CACHE_BYTES,
        measure_timeout: float | None = DEFAULT_MEASURE_TIMEOUT,
        journal_dir: str | os.PathLike[str] | None = None,
        curve_secret_key: str | os.PathLike[str] | None = None,
        curve_clients_dir: str | os.PathLike[str] | None = None,
        insecure: bool = False,
        close_oracle: bool = False,
    ) -> None:
        if not isinstance(oracle, DataOracle):
            raise ConfigError(f"OracleServer serves a DataOracle, got {type(oracle).__name__}")
        check_endpoint(address)
        self.insecure = bool(insecure)
        if not is_loopback(address) and curve_secret_key is None and not insecure:
            raise ConfigError(self._not_loopback_message(address))
        if curve_clients_dir is not None and curve_secret_key is None:
            raise ConfigError("curve_clients_dir needs curve_secret_key (the server's key pair)")
        if curve_clients_dir is not None and not Path(curve_clients_dir).is_dir():
            # ZeroMQ's authenticator would log once and then refuse every client, silently.
            raise ConfigError(f"--curve-clients {os.fspath(curve_clients_dir)}: not a folder; give the folder of "
                              "allowed client public keys (*.key, see `rcvgp keys`)")
        self.oracle = oracle
        self.address = address
        spec = oracle.describe()
        if not isinstance(spec, OracleSpec):
            raise ConfigError(f"oracle.describe() must return an OracleSpec, got {type(spec).__name__}")
        self.spec = spec
        self.max_rows = int(min(spec.max_rows, max_rows or spec.max_rows))
        self.max_message_bytes = int(max_message_bytes)
        self.max_queue = int(max_queue)
        if isinstance(reply_cache_bytes, bool) or not isinstance(reply_cache_bytes, int) or reply_cache_bytes < 0:
            raise ConfigError(f"--reply-cache-bytes must be an integer >= 0, got {reply_cache_bytes!r}")
        self.reply_cache_bytes = reply_cache_bytes
        if measure_timeout is not None and not (isinstance(measure_timeout, (int, float)) and 0 < measure_timeout < float("inf")):
            raise ConfigError(f"--measure-timeout must be a number of seconds > 0 (or none), got {measure_timeout!r}")
        self.measure_timeout = None if measure_timeout is None else float(measure_timeout)
        self.journal_dir = Path(journal_dir) if journal_dir is not None else None
        if self.journal_dir is not None:
            self.journal_dir.mkdir(parents=True, exist_ok=True)
        self._curve_secret_key = curve_secret_key
        self._curve_clients_dir = curve_clients_dir
        if curve_secret_key is not None:
            if not zmq.has("curve"):
                raise ConfigError("this libzmq has no CURVE support")
            import zmq.auth as zauth

            pub, sec = zauth.load_certificate(os.fspath(curve_secret_key))
            if sec is None:
                raise ConfigError(f"{curve_secret_key}: no secret key in this file; give the *.key_secret file")
            self._curve_keys = (pub, sec)
        self.close_oracle = close_oracle
        self.server_session = uuid.uuid4().hex
        self.endpoint: str | None = None
        self._spec_dict = dict(spec.to_dict(), max_rows=self.max_rows)
        self._stop = threading.Event()
        self._reload = threading.Event()
        self._reloaded = threading.Event()
        self._ready = threading.Event()
        self._start_error: BaseException | None = None
        self._thread: threading.Thread | None = None
        # Shared by the I/O thread and the worker, under _lock: the queue, the job running, the
        # job stuck in the driver, finished results, the per-session counters.
        self._lock = threading.Lock()
        self._wake = threading.Condition(self._lock)
        self._queue: deque[_Job] = deque()
        self._current: _Job | None = None
        self._stuck: _Job | None = None
        self._done: list[tuple[_Job, list[Any]]] = []
        self._sessions: OrderedDict[str, dict[str, int]] = OrderedDict()
        # The I/O thread's alone: jobs accepted and not yet answered, and the reply cache.
        self._pending: dict[tuple[str, str], _Job] = {}
        self._cache: OrderedDict[tuple[str, str], tuple[str, list[bytes]]] = OrderedDict()
        self._cache_bytes = 0
        self._started_at = time.time()
        self.counters = {
            "requests": 0,
            "errors": 0,
            "measurements": 0,
            "points": 0,
            "cache_hits": 0,
        }
        self._handlers: dict[str, Callable[[_Request], list[Any] | None]] = {
            "hello": self._op_hello,
            "describe": self._op_describe,
            "measure": self._op_measure,
            "ping": self._op_ping,
            "status": self._op_status,
        }

    @staticmethod
    def _not_loopback_message(what: str) -> str:
        return (f"refusing to bind {what}: not loopback, and without CURVE anyone on the network could "
                "drive the rig. Give a server key (--curve-secret FILE, see `rcvgp keys`) or pass --insecure")

    # ---------------------------------------------------------------- lifecycle
    def start(self, timeout: float = 10.0) -> OracleServer:
        """Bind and serve in a background thread; returns once bound (raises if binding failed)."""
        self._thread = threading.Thread(target=self._run, name="rcvgp-oracle-server", daemon=True)
        self._thread.start()
        if not self._ready.wait(timeout):
            raise OracleError(f"server did not bind {self.address} within {timeout} s")
        if self._start_error is not None:
            self._thread.join()
            raise self._start_error
        return self

    def serve_forever(self, on_ready: Callable[[OracleServer], None] | None = None) -> None:
        """Bind and serve in this thread until :meth:`stop` (or a signal handler calling it)."""
        self._run(on_ready)
        if self._start_error is not None:
            raise self._start_error

    def stop(self, timeout: float = 5.0) -> None:
        """Stop serving and release the socket; a measurement still running is abandoned."""
        self._stop.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout)

    def reload_keys(self, timeout: float = 5.0) -> None:
        """Re-read the CURVE client allow-list (after adding or deleting a key file).

        New connections are judged by the new list once this returns; connections already
        authenticated stay open until they close.
        """
        self._reloaded.clear()
        self._reload.set()
        running = self._thread is not None and self._thread.is_alive() and self._thread is not threading.current_thread()
        if running:
            self._reloaded.wait(timeout)

    def __enter__(self) -> OracleServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # ---------------------------------------------------------------- main loop
    def _run(self, on_ready: Callable[[OracleServer], None] | None = None) -> None:
        ctx = zmq.Context()
        sock = auth = worker = None
        rsock, wsock = socket.socketpair()
        rsock.setblocking(False)
        try:
            try:
                sock, auth = self._bind(ctx)
            except zmq.ZMQError as exc:
                self._start_error = ConfigError(f"cannot bind {self.address}: {exc}")
                return
            except Exception as exc:  # noqa: BLE001  reported by start() / serve_forever()
                self._start_error = exc
                return
            worker = threading.Thread(target=self._work, args=(wsock,), name="rcvgp-oracle-worker", daemon=True)
            worker.start()
            self._started_at = time.time()
            self._ready.set()
            log.info("serving %s on %s (server session %s)", self.spec.name, self.endpoint, self.server_session)
            if on_ready is not None:
                on_ready(self)
            self._poll(sock, rsock, auth)
        finally:
            self._ready.set()
            self._stop.set()
            with self._wake:
                self._wake.notify_all()
            if worker is not None:
                worker.join(0.5)
            if sock is not None:
                sock.close(0)
            if auth is not None:
                auth.stop()
            ctx.term()
            rsock.close()
            wsock.close()
            if self.close_oracle:
                try:
                    self.oracle.close()
                except Exception:  # noqa: BLE001
                    log.exception("oracle.close() failed")
            log.info("server %s stopped", self.server_session)

    def _bind(self, ctx: zmq.Context[Any]) -> tuple[zmq.Socket[Any], Any]:
        """The bound ROUTER socket (and the CURVE authenticator, if any); sets :attr:`endpoint`."""
        sock = ctx.socket(zmq.ROUTER)
        auth = None
        try:
            sock.setsockopt(zmq.LINGER, 0)
            sock.setsockopt(zmq.MAXMSGSIZE, 2 * self.max_message_bytes + 2**20)
            sock.setsockopt(zmq.SNDHWM, 10000)
            sock.setsockopt(zmq.RCVHWM, 10000)
            if self._curve_secret_key is not None:
                auth = self._start_auth(ctx)
                sock.curve_publickey, sock.curve_secretkey = self._curve_keys
                sock.curve_server = True
            sock.bind(self.address)
            self.endpoint = sock.getsockopt_string(zmq.LAST_ENDPOINT)
            if not is_loopback(self.endpoint) and self._curve_secret_key is None and not self.insecure:
                sock.unbind(self.endpoint)
                raise ConfigError(self._not_loopback_message(f"{self.address} (ZeroMQ bound {self.endpoint})"))
        except BaseException:
            sock.close(0)
            if auth is not None:
                auth.stop()
            raise
        return sock, auth

    def _poll(self, sock: zmq.Socket[Any], rsock: socket.socket, auth: Any) -> None:
        """Serve until :meth:`stop`: read requests, send the worker's results, reload keys."""
        poller = zmq.Poller()
        poller.register(sock, zmq.POLLIN)
        poller.register(rsock.fileno(), zmq.POLLIN)
        while not self._stop.is_set():
            try:
                events = dict(poller.poll(100))
            except zmq.ZMQError as exc:  # EINTR from a signal
                if exc.errno == zmq.EINTR:
                    continue
                raise
            if self._reload.is_set():
                self._reload.clear()
                if auth is not None:
                    self._configure_clients(auth)
                    log.info("CURVE client allow-list reloaded")
                self._reloaded.set()
            if rsock.fileno() in events:
                self._drain_results(sock, rsock)
            self._check_clock(sock)
            if sock in events:
                for _ in range(256):  # then look at results and the stop flag again
                    try:
                        msg = sock.recv_multipart(zmq.NOBLOCK)
                    except zmq.Again:
                        break
                    self._on_message(sock, msg)

    def _start_auth(self, ctx: zmq.Context[Any]) -> Any:
        from zmq.auth.thread import ThreadAuthenticator

        auth = ThreadAuthenticator(ctx, log=logging.getLogger("rcvgp.transport.auth"))
        auth.start()
        self._configure_clients(auth)
        return auth

    def _configure_clients(self, auth: Any) -> None:
        import zmq.auth as zauth

        if self._curve_clients_dir is None:
            auth.configure_curve(domain="*", location=zauth.CURVE_ALLOW_ANY)
        else:
            folder = Path(self._curve_clients_dir)
            if not any(folder.glob("*.key")):
                log.warning("%s holds no client public key (*.key): every client is refused until one is "
                            "added and the list reloaded (SIGHUP)", folder)
            auth.configure_curve(domain="*", location=os.fspath(folder))

    # ---------------------------------------------------------------- requests
    @staticmethod
    def _split(msg: list[bytes]) -> tuple[list[bytes], list[bytes]]:
        # ROUTER prefix: identity, then (REQ / DEALER clients) frames up to an empty delimiter.
        for k in range(1, len(msg)):
            if msg[k] == b"":
                return msg[: k + 1], msg[k + 1 :]
        return msg[:1], msg[1:]

    def _send(self, sock: zmq.Socket[Any], envelope: list[bytes], frames: list[Any]) -> None:
        try:
            sock.send_multipart([*envelope, *frames], zmq.NOBLOCK, copy=len(frames) < 2)
        except zmq.ZMQError as exc:  # peer gone or HWM: the client will retry
            log.debug("reply dropped: %s", exc)

    def _error(self, code: str, message: str, header: Mapping[str, Any] | None = None, details: Mapping[str, Any] | None = None) -> list[Any]:
        """An error reply; it never raises, so no request goes unanswered and no thread dies."""
        self.counters["errors"] += 1
        try:
            return codec.make_error(code, message, request=header, server_session=self.server_session, details=details)
        except Exception:  # noqa: BLE001  the last resort: no echo, no details, ASCII text
            log.error("could not build a %s reply:\n%s", code, traceback.format_exc())
            text = message.encode("ascii", "backslashreplace").decode("ascii")
            return codec.make_error(code, text, server_session=self.server_session)

    def _on_message(self, sock: zmq.Socket[Any], msg: list[bytes]) -> None:
        self.counters["requests"] += 1
        envelope, body = self._split(msg)
        header: dict[str, Any] | None = None
        try:
            reply = self._dispatch(envelope, body)
        except WireError as exc:
            header = exc.details.pop("_header", None) if isinstance(exc.details, dict) else None
            reply = self._error(exc.code, exc.message, header, exc.details)
        except Exception as exc:  # noqa: BLE001  a bug must not stop the server
            log.error("internal error on a request:\n%s", traceback.format_exc())
            reply = self._error("INTERNAL", f"internal server error: {type(exc).__name__}: {exc}")
        if reply is not None:
            self._send(sock, envelope, reply)

    def _dispatch(self, envelope: list[bytes], body: list[bytes]) -> list[Any] | None:
        if not body:
            raise WireError("BAD_REQUEST", "empty message: frame 0 must be a JSON header")
        header = codec.decode_header(body[0])

        def fail(code: str, message: str, details: dict[str, Any] | None = None) -> WireError:
            d = dict(details or {})
            d["_header"] = header
            return WireError(code, message, d)

        size = sum(len(f) for f in body)
        if size > self.max_message_bytes:
            raise fail(
                "TOO_LARGE",
                f"message is {size} bytes, the server accepts at most {self.max_message_bytes}; "
                f"split the request (at most {self.max_rows} rows)",
                {"bytes": size, "max_message_bytes": self.max_message_bytes},
            )
        if header.get("protocol") != codec.PROTOCOL:
            raise fail("BAD_REQUEST", f'header field "protocol" must be "{codec.PROTOCOL}", got {header.get("protocol")!r}')
        try:
            major, minor = codec.parse_version(header.get("v"))
        except WireError as exc:
            raise fail(exc.code, exc.message) from None
        if major != codec.PROTOCOL_VERSION[0]:
            raise fail(
                "UNSUPPORTED_VERSION",
                codec.version_mismatch_message((major, minor), we_are="server"),
                {"client_version": header.get("v"), "server_version": codec.VERSION, "supported": [codec.VERSION]},
            )
        if header.get("type", "request") != "request":
            raise fail("BAD_REQUEST", f'header field "type" must be "request", got {header.get("type")!r}')
        for name in ("id", "session"):
            value = header.get(name)
            if not isinstance(value, str) or not 1 <= len(value) <= 128:
                raise fail("BAD_REQUEST", f'header field "{name}" must be a string of 1 to 128 characters, got {value!r}')
        op = header.get("op")
        if not isinstance(op, str) or not op:
            raise fail("BAD_REQUEST", f'header field "op" must be an operation name, got {op!r}')
        handler = self._handlers.get(op)
        if handler is None:
            import difflib

            close = difflib.get_close_matches(op, list(self._handlers), n=1)
            hint = f"; did you mean `{close[0]}`?" if close else ""
            raise fail(
                "UNKNOWN_OPERATION",
                f"unknown operation {op[:64]!r}{hint} (this server knows {', '.join(self._handlers)})",
                {"operation": op[:64], "operations": list(self._handlers)},
            )
        params = header.get("params", {})
        if params is None:
            params = {}
        if not isinstance(params, dict):
            raise fail("BAD_REQUEST", f'header field "params" must be a JSON object, got {type(params).__name__}')
        try:
            message = codec.decode(body)
        except WireError as exc:
            raise fail(exc.code, exc.message, exc.details) from None
        try:
            return handler(_Request(envelope, body, header, params, message))
        except WireError as exc:
            raise fail(exc.code, exc.message, exc.details) from None

    # ---------------------------------------------------------------- operations
    def _op_hello(self, req: _Request) -> list[Any]:
        result = {
            "server": f"rcvgp {_package_version()}",
            "server_session": self.server_session,
            "versions": [codec.VERSION],
            "operations": list(self._handlers),
            "oracle": self._spec_dict,
            "limits": {
                "max_rows": self.max_rows,
                "max_message_bytes": self.max_message_bytes,
                "max_queue": self.max_queue,
                "dtypes": list(codec.ARRAY_DTYPES),
                "reply_cache_bytes": self.reply_cache_bytes,
                "measure_timeout": self.measure_timeout,
            },
            "capabilities": sorted(set(self.spec.capabilities) | {"readback", "expires_in", "session_counters"}
                                   | ({"journal"} if self.journal_dir else set())),
        }
        return codec.make_reply(req.header, self.server_session, result)

    def _op_describe(self, req: _Request) -> list[Any]:
        return codec.make_reply(req.header, self.server_session, {"oracle": self._spec_dict})

    def _op_ping(self, req: _Request) -> list[Any]:
        return codec.make_reply(req.header, self.server_session, {"server_session": self.server_session, "time": time.time()})

    def _op_status(self, req: _Request) -> list[Any]:
        with self._lock:
            cur = self._current
            stuck = self._stuck
            session = dict(self._session_counters(req.key[0]))
        if stuck is not None:
            state = "stuck"
        elif cur is not None or self._pending:
            state = "measuring"  # running, or queued for the worker
        else:
            state = "idle"
        shown = stuck or cur
        result = {
            "server_session": self.server_session,
            "state": state,
            "uptime": time.time() - self._started_at,
            "queue": len(self._pending),
            "current": None if shown is None else {"session": shown.key[0], "id": shown.key[1], "rows": int(shown.X.shape[0]),
                                                   "running_for": shown.running_for()},
            "fault": None if stuck is None else self._stuck_message(stuck),
            "measure_timeout": self.measure_timeout,
            "cache_entries": len(self._cache),
            "cache_bytes": self._cache_bytes,
            **self.counters,
            "session_counters": session,
        }
        return codec.make_reply(req.header, self.server_session, result)

    def _op_measure(self, req: _Request) -> list[Any] | None:
        key = req.key
        digest = codec.request_digest(req.header, req.body[1:])
        cached = self._cache_get(key)
        if cached is not None:
            if cached[0] != digest:
                raise WireError("BAD_REQUEST", f"request id {key[1]!r} was already used in this session for a different request; use a new id")
            self._count_cache_hit(key[0])
            return cached[1]
        job = self._pending.get(key)
        if job is not None:
            if job.digest != digest:
                raise WireError("BAD_REQUEST", f"request id {key[1]!r} is in progress for a different request; use a new id")
            job.envelopes = [*job.envelopes[-(_MAX_WAITERS - 1):], req.envelope]  # answered when it completes
            self._count_cache_hit(key[0])
            return None
        readback = req.params.get("readback", False)
        if not isinstance(readback, bool):
            raise WireError("BAD_REQUEST", f'measure parameter "readback" must be true or false, got {readback!r}')
        expires_in = _expires_in(req.header)
        X = self._validate_points(req.message)
        stuck = self._stuck
        if stuck is not None:  # nothing is queued behind a driver that has not returned
            raise WireError("RIG_TIMEOUT", f"not measured: {self._stuck_message(stuck)}", self._stuck_details(stuck))
        if len(self._pending) >= self.max_queue:
            raise WireError("BUSY", f"{len(self._pending)} measurements are queued (the limit is {self.max_queue}); retry later",
                            {"queue": len(self._pending), "max_queue": self.max_queue})
        job = _Job(key, digest, req.header, X, readback, expires_in)
        job.envelopes.append(req.envelope)
        self._pending[key] = job
        with self._wake:
            self._queue.append(job)
            self._wake.notify()
        return None

    def _validate_points(self, message: codec.Message) -> np.ndarray:
        if "X" not in message.arrays:
            raise WireError("BAD_REQUEST", 'measure needs one array named "X" of shape (n_rows, n_vars)')
        X = message.arrays["X"]
        n_vars = self.spec.n_vars
        if X.ndim != 2 or X.shape[1] != n_vars:
            raise WireError(
                "BAD_REQUEST",
                f"X must have shape (n_rows, {n_vars}) (one column per variable: "
                f"{', '.join(v.name for v in self.spec.variables)}), got {tuple(X.shape)}",
                {"shape": list(X.shape), "n_vars": n_vars},
            )
        if X.shape[0] < 1:
            raise WireError("BAD_REQUEST", "X has no rows")
        if X.shape[0] > self.max_rows:
            raise WireError("TOO_LARGE", f"X has {X.shape[0]} rows, the server accepts at most {self.max_rows} per request",
                            {"rows": int(X.shape[0]), "max_rows": self.max_rows})
        X = np.array(X, dtype=np.float64, order="C")  # exact for every accepted dtype
        for j, var in enumerate(self.spec.variables):
            bad = ~var.contains(X[:, j])
            if bad.any():
                i = int(np.flatnonzero(bad)[0])
                value = float(X[i, j])
                raise WireError(
                    "OUT_OF_LIMITS",
                    f"variable {var.name} = {value!r} (row {i}) is outside its limits {var.describe_limits()}; "
                    f"{int(bad.sum())} row(s) out of limits, nothing was measured",
                    {"variable": var.name, "column": j, "row": i, "value": value, "low": var.low, "high": var.high,
                     "only_positive": var.only_positive, "limits": var.describe_limits(), "n_bad": int(bad.sum())},
                )
        return X

    # ---------------------------------------------------------------- worker side
    def _work(self, wsock: socket.socket) -> None:
        while True:
            with self._wake:
                while not self._queue and not self._stop.is_set():
                    self._wake.wait(0.5)
                if self._stop.is_set():
                    return
                job = self._queue.popleft()
                if job.expires_at is not None and time.monotonic() >= job.expires_at:
                    job.state = "expired"
                else:
                    job.state = "running"
                    job.started, job.started_wall = time.monotonic(), time.time()
                    self._current = job
                    self._count_measurement(job)
            if job.state == "expired":
                frames = self._expired_reply(job)
            else:
                frames = self._run_job(job)
            with self._lock:
                self._current = None
                late = job.state == "timed_out"
                if late:
                    self._stuck = None  # the driver returned: measuring can go on
                else:
                    job.state = "done"
                    self._done.append((job, frames))
            if late:
                log.warning("the rig returned from request %r of session %r after %.1f s, past the measure timeout "
                            "of %s s; its client was answered RIG_TIMEOUT, this result is discarded",
                            job.key[1], job.key[0], job.running_for(), self.measure_timeout)
            try:
                wsock.send(b"x")
            except OSError:
                return

    def _run_job(self, job: _Job) -> list[Any]:
        """Measure and journal one job; any failure becomes an error reply (the worker never dies)."""
        try:
            frames = self._measure(job)
            with self._lock:
                if job.state == "timed_out":
                    return frames  # answered already; the caller discards it
                job.state = "finishing"  # from here on the clock no longer applies
            if self.journal_dir is not None:
                self._journal_write(job.key, job.digest, frames)
            return frames
        except Exception as exc:  # noqa: BLE001  never let the worker die
            log.error("measure failed:\n%s", traceback.format_exc())
            return self._error("INTERNAL", f"internal server error: {type(exc).__name__}: {exc}", job.header)

    def _measure(self, job: _Job) -> list[Any]:
        n = job.X.shape[0]
        name = self.spec.name
        try:
            if job.readback:
                X_reached, y = self.oracle.measure_readback(job.X.copy())
                X_reached = np.asarray(X_reached, dtype=np.float64)
                if X_reached.shape != job.X.shape:
                    raise OracleError(f"{name}: measure_readback returned X of shape {X_reached.shape}, expected {job.X.shape}")
            else:
                y = self.oracle.measure(job.X.copy())
                X_reached = None
            y = check_reply(y, n, name)
        except OutOfLimitsError as exc:
            return self._error("OUT_OF_LIMITS", str(exc), job.header)
        except OracleError as exc:
            return self._error("RIG_FAULT", str(exc), job.header, {"exception": type(exc).__name__})
        except Exception as exc:  # noqa: BLE001
            log.error("oracle raised:\n%s", traceback.format_exc())
            return self._error("INTERNAL", f"the oracle raised {type(exc).__name__}: {exc}", job.header,
                               {"exception": type(exc).__name__})
        arrays = {"y": y.astype("<f8", copy=False)}
        if X_reached is not None:
            arrays["X_reached"] = X_reached.astype("<f8", copy=False)
        frames = codec.make_reply(job.header, self.server_session, {"n_rows": n}, arrays)
        return [bytes(f) for f in frames]

    # ---------------------------------------------------------------- I/O side of the jobs
    def _drain_results(self, sock: zmq.Socket[Any], rsock: socket.socket) -> None:
        try:
            while rsock.recv(4096):
                pass
        except (BlockingIOError, OSError):
            pass
        with self._lock:
            done, self._done = self._done, []
        for job, frames in done:
            if job.state == "expired" and self.journal_dir is not None:
                self._journal_write(job.key, job.digest, frames)
            self._finish(sock, job, frames, store=True)

    def _check_clock(self, sock: zmq.Socket[Any]) -> None:
        """Answer queued jobs past their ``expires_in``, and a measurement past the measure timeout."""
        now = time.monotonic()
        timed_out: _Job | None = None
        dropped: list[_Job] = []
        with self._lock:
            expired = [job for job in self._queue if job.expires_at is not None and now >= job.expires_at]
            for job in expired:
                self._queue.remove(job)
                job.state = "expired"
            cur = self._current
            if (self.measure_timeout is not None and cur is not None and cur.state == "running"
                    and cur.running_for() >= self.measure_timeout):
                cur.state = "timed_out"
                timed_out = self._stuck = cur
                dropped = list(self._queue)  # never measured: their ids stay free
                self._queue.clear()
                for job in dropped:
                    job.state = "dropped"
        for job in expired:
            self._finish(sock, job, self._expired_reply(job), store=True, journal=True)
        if timed_out is not None:
            log.error("request %r of session %r has run %.1f s, over the measure timeout of %s s: answered RIG_TIMEOUT; "
                      "measure requests are refused until the rig returns", timed_out.key[1], timed_out.key[0],
                      timed_out.running_for(), self.measure_timeout)
            message = (f"the rig did not return within the measure timeout of {self.measure_timeout:g} s; the measurement "
                       "may have happened and is not repeated; the server refuses measure requests until the rig returns")
            frames = self._error("RIG_TIMEOUT", message, timed_out.header, self._stuck_details(timed_out))
            self._finish(sock, timed_out, frames, store=True, journal=True)
        for job in dropped:
            frames = self._error("RIG_TIMEOUT", f"not measured: {self._stuck_message(timed_out)}", job.header,  # type: ignore[arg-type]
                                 self._stuck_details(timed_out))  # type: ignore[arg-type]
            self._finish(sock, job, frames, store=False)

    def _finish(self, sock: zmq.Socket[Any], job: _Job, frames: list[Any], *, store: bool, journal: bool = False) -> None:
        """Send a job's reply to everyone waiting on it; keep it for retries when ``store``."""
        self._pending.pop(job.key, None)
        if store:
            if journal and self.journal_dir is not None:
                self._journal_write(job.key, job.digest, frames)
            self._cache_put(job.key, job.digest, frames)
        for envelope in job.envelopes:
            self._send(sock, envelope, frames)

    def _expired_reply(self, job: _Job) -> list[Any]:
        return self._error("EXPIRED", f"not measured: the request did not start within its expires_in of {job.expires_in:g} s; "
                           "send a new request (with a new id) if it is still wanted", job.header,
                           {"expires_in": job.expires_in})

    def _stuck_message(self, job: _Job) -> str:
        return (f"RIG_TIMEOUT: the rig has not returned from request {job.key[1]!r} of session {job.key[0]!r} for "
                f"{job.running_for():.1f} s (the measure timeout is {self.measure_timeout:g} s); the rig is stuck and "
                "nothing is measured until it returns; check the instrument")

    def _stuck_details(self, job: _Job) -> dict[str, Any]:
        return {"measure_timeout": self.measure_timeout, "running_for": round(job.running_for(), 3),
                "stuck_request": {"session": job.key[0], "id": job.key[1]}}

    # ---------------------------------------------------------------- per-session counters
    def _session_counters(self, session: str) -> dict[str, int]:
        """The counters of one session (call under ``_lock``); only the latest sessions are kept."""
        counters = self._sessions.get(session)
        if counters is None:
            counters = self._sessions[session] = {"measurements": 0, "points": 0, "cache_hits": 0}
            while len(self._sessions) > MAX_SESSIONS:
                self._sessions.popitem(last=False)
        self._sessions.move_to_end(session)
        return counters

    def _count_measurement(self, job: _Job) -> None:
        """Count a job the rig is about to measure (call under ``_lock``)."""
        n = int(job.X.shape[0])
        self.counters["measurements"] += 1
        self.counters["points"] += n
        session = self._session_counters(job.key[0])
        session["measurements"] += 1
        session["points"] += n

    def _count_cache_hit(self, session: str) -> None:
        with self._lock:
            self.counters["cache_hits"] += 1
            self._session_counters(session)["cache_hits"] += 1

    def _cache_get(self, key: tuple[str, str]) -> tuple[str, list[Any]] | None:
        hit = self._cache.get(key)
        if hit is not None:
            self._cache.move_to_end(key)
            return hit
        if self.journal_dir is not None:
            hit = self._journal_read(key)
            if hit is not None:
                self._cache_put(key, *hit)
        return hit

    def _cache_put(self, key: tuple[str, str], digest: str, frames: list[Any]) -> None:
        kept = [bytes(f) for f in frames]
        old = self._cache.pop(key, None)
        if old is not None:
            self._cache_bytes -= _entry_cost(key, old[1])
        self._cache[key] = (digest, kept)
        self._cache_bytes += _entry_cost(key, kept)
        while self._cache_bytes > self.reply_cache_bytes and len(self._cache) > 1:  # the newest always stays
            old_key, (_, old_frames) = self._cache.popitem(last=False)
            self._cache_bytes -= _entry_cost(old_key, old_frames)

    def _journal_path(self, key: tuple[str, str]) -> Path:
        assert self.journal_dir is not None
        name = hashlib.blake2b(f"{key[0]}\0{key[1]}".encode(), digest_size=16).hexdigest()
        return self.journal_dir / f"{name}.reply"

    def _journal_write(self, key: tuple[str, str], digest: str, frames: list[Any]) -> None:
        path = self._journal_path(key)
        parts = [digest.encode(), *(bytes(f) for f in frames)]
        data = _JOURNAL_MAGIC + b"".join(struct.pack("<Q", len(p)) + p for p in parts)
        tmp = path.with_suffix(".tmp")
        with open(tmp, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)

    def _journal_read(self, key: tuple[str, str]) -> tuple[str, list[Any]] | None:
        path = self._journal_path(key)
        try:
            data = path.read_bytes()
        except OSError:
            return None
        if not data.startswith(_JOURNAL_MAGIC):
            return None
        pos, parts = len(_JOURNAL_MAGIC), []
        while pos + 8 <= len(data):
            (n,) = struct.unpack_from("<Q", data, pos)
            parts.append(data[pos + 8 : pos + 8 + n])
            pos += 8 + n
        if len(parts) < 2:
            return None
        return parts[0].decode(), parts[1:]


def _entry_cost(key: tuple[str, str], frames: list[bytes]) -> int:
    return sum(len(f) for f in frames) + len(key[0]) + len(key[1]) + _ENTRY_OVERHEAD


def _expires_in(header: Mapping[str, Any]) -> float | None:
    """The request's ``expires_in`` (seconds, > 0), or None; BAD_REQUEST for anything else."""
    value = header.get("expires_in")
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value < float("inf"):
        raise WireError("BAD_REQUEST", f'header field "expires_in" must be a number of seconds > 0, got {value!r}')
    return float(value)


def serve(
    oracle: DataOracle,
    address: str = DEFAULT_ADDRESS,
    *,
    on_ready: Callable[[OracleServer], None] | None = None,
    **options: Any,
) -> None:
    """Serve ``oracle`` on ``address`` until SIGINT or SIGTERM; the one call a rig integrator needs.

    ``options`` are those of :class:`OracleServer` (``max_rows``, ``max_message_bytes``,
    ``journal_dir``, ``curve_secret_key``, ``curve_clients_dir``, ``insecure``, ...).

    Examples
    --------
    >>> serve(MyRig(), "tcp://127.0.0.1:5555")  # doctest: +SKIP
    """
    server = OracleServer(oracle, address, **options)
    previous: dict[int, Any] = {}
    in_main = threading.current_thread() is threading.main_thread()
    if in_main:
        def _stop(signum: int, frame: Any) -> None:
            log.info("signal %d: stopping", signum)
            server.stop()

        for sig in (signal.SIGINT, signal.SIGTERM):
            previous[sig] = signal.signal(sig, _stop)
        if hasattr(signal, "SIGHUP"):
            previous[signal.SIGHUP] = signal.signal(signal.SIGHUP, lambda s, f: server.reload_keys())
    try:
        server.serve_forever(on_ready)
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
