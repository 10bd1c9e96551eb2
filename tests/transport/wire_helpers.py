"""Helpers of the transport tests: a counting oracle, in-limit points, a scriptable fake server."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import pytest
import zmq

from rcvgp.oracle import CallableOracle, OracleSpec, Variable
from rcvgp.transport import codec
from rcvgp.transport.server import OracleServer


class CountingFn:
    """y = x0 * sin(x1) + x2, recording every X it is asked to measure."""

    def __init__(self, block: threading.Event | None = None, started: threading.Event | None = None) -> None:
        self.calls: list[np.ndarray] = []
        self.block = block
        self.started = started

    def __call__(self, X: np.ndarray) -> np.ndarray:
        self.calls.append(np.array(X))
        if self.started is not None:
            self.started.set()
        if self.block is not None:
            assert self.block.wait(30), "test forgot to release the oracle"
        return X[:, 0] * np.sin(X[:, 1]) + X[:, 2]


SPEC = OracleSpec(
    (Variable("a", 0.1, 2.0, unit="m"), Variable("b", 0.5, 3.0, only_positive=False), Variable("c", -1.0, 1.0)),
    name="test:counting",
    max_rows=5000,
)


def in_limits(n: int, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    b = rng.uniform(0.5, 3.0, n) * rng.choice([-1.0, 1.0], n)
    return np.column_stack([rng.uniform(0.1, 2.0, n), b, rng.uniform(-1, 1, n)])


class FakeServer:
    """A ROUTER in a thread whose replies a test scripts: ``handler(header, n_seen) -> frames | None``."""

    def __init__(self, handler: Callable[[dict[str, Any], int], list[Any] | list[list[Any]] | None]) -> None:
        self.handler = handler
        self.seen: list[dict[str, Any]] = []
        self._stop = threading.Event()
        self._ready = threading.Event()
        self.endpoint = ""
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> FakeServer:
        self._thread.start()
        self._ready.wait(5)
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(5)

    def _run(self) -> None:
        ctx = zmq.Context()
        sock = ctx.socket(zmq.ROUTER)
        sock.setsockopt(zmq.LINGER, 0)
        sock.bind("tcp://127.0.0.1:*")
        self.endpoint = sock.getsockopt_string(zmq.LAST_ENDPOINT)
        self._ready.set()
        try:
            while not self._stop.is_set():
                if not sock.poll(50):
                    continue
                msg = sock.recv_multipart()
                envelope, body = msg[:2], msg[2:]
                header = json.loads(body[0])
                self.seen.append(header)
                out = self.handler(header, len(self.seen))
                if out is None:
                    continue
                replies = out if out and isinstance(out[0], list) else [out]
                for frames in replies:
                    sock.send_multipart([*envelope, *frames])
        finally:
            sock.close(0)
            ctx.term()


def reply(header: dict[str, Any], result: dict[str, Any] | None = None, arrays: dict[str, np.ndarray] | None = None,
          v: str | None = None, server_session: str = "fake-session") -> list[Any]:
    frames = codec.make_reply(header, server_session, result, arrays)
    if v is not None:
        h = json.loads(bytes(frames[0]))
        h["v"] = v
        frames[0] = json.dumps(h).encode()
    return [bytes(f) for f in frames]


def hello_result() -> dict[str, Any]:
    return {"server_session": "fake-session", "versions": ["1.0"], "oracle": SPEC.to_dict(),
            "limits": {"max_rows": 5000, "max_message_bytes": 2**20}}
