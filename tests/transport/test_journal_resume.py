"""A journalled client killed with a request in flight, resumed: the server answers that request
from its reply cache (same session, same request id), and the rig measures nothing twice."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from wire_helpers import SPEC, CountingFn, in_limits
from rcvgp.errors import OracleTimeout, RemoteError
from rcvgp.journal import JournalingOracle, RequestIdOracle, read_journal
from rcvgp.oracle import CallableOracle
from rcvgp.transport.client import BaseChannel, Channel, ZmqOracle
from rcvgp.transport.server import OracleServer


class Killed(BaseException):
    """The client process dies here (SIGKILL): nothing after it runs."""


class DiesInFlight(BaseChannel):
    """A real channel that raises ``dies`` on the n-th measure: after sending it
    (``after_reply=False``: the server measures, the client never sees the reply) or after
    receiving the reply."""

    def __init__(self, address: str, n: int, after_reply: bool, dies: type[BaseException] = Killed) -> None:
        self.inner = Channel(address)
        self.address = address
        self.n = n
        self.after_reply = after_reply
        self.dies = dies
        self.measures = 0

    def exchange(self, frames: Sequence[Any], request_id: str | None, **kw: Any) -> list[bytes]:
        is_measure = b'"op":"measure"' in bytes(frames[0]).replace(b" ", b"")
        self.measures += is_measure
        if is_measure and self.measures == self.n:
            if self.after_reply:
                self.inner.exchange(frames, request_id, **kw)
            else:
                # sent, then the client dies before the reply comes
                kw.update(timeout=0.3, deadline=0.3)
                try:
                    self.inner.exchange(frames, request_id, **kw)
                except OracleTimeout:
                    pass
            raise self.dies("the client died with a request in flight")
        return self.inner.exchange(frames, request_id, **kw)

    def close(self) -> None:
        self.inner.close()


def _requests(n: int) -> list[np.ndarray]:
    return [in_limits(5, seed) for seed in range(n)]


@pytest.mark.parametrize("after_reply", [False, True], ids=["before-the-reply", "after-the-reply"])
def test_a_request_in_flight_at_a_kill_is_answered_from_the_servers_cache_on_resume(tmp_path: Path,
                                                                                     after_reply: bool) -> None:
    fn = CountingFn()
    path = tmp_path / "journal.jsonl"
    requests = _requests(5)
    with OracleServer(CallableOracle(fn, SPEC), "tcp://127.0.0.1:*") as server:
        first = ZmqOracle(server.endpoint, timeout=2, deadline=20, channel=DiesInFlight(server.endpoint, 3, after_reply))
        journal = JournalingOracle(first, path)
        with pytest.raises(Killed):
            for X in requests:
                journal.measure(X)
        journal.close()
        _, records, _ = read_journal(path)
        assert len(records) == 2  # the third request was measured, but its answer is not on record

        second = ZmqOracle(server.endpoint, timeout=2, deadline=20)  # a new process: a new random session
        assert isinstance(second, RequestIdOracle)
        with JournalingOracle(second, path, resume=True) as resumed:
            answers = [resumed.measure(X) for X in requests]
            assert resumed.stats.replayed_requests == 2 and resumed.stats.live_requests == 3
        status = server.counters
    assert len(fn.calls) == 5  # every request measured once on the rig
    assert [c.tobytes() for c in fn.calls] == [X.tobytes() for X in requests]
    assert status["points"] == 25 and status["cache_hits"] >= 1
    assert answers[2].tobytes() == (requests[2][:, 0] * np.sin(requests[2][:, 1]) + requests[2][:, 2]).tobytes()
    _, records, _ = read_journal(path)
    assert [r["id"] for r in records] == ["m1", "m2", "m3", "m4", "m5"]


def test_an_error_reply_that_ended_a_run_is_retried_under_a_new_id(tmp_path: Path) -> None:
    """The server's cache holds the error under the old id: the retry must not be answered from it."""
    fails = {"left": 1}

    def flaky(X: np.ndarray) -> np.ndarray:
        if fails["left"]:
            fails["left"] -= 1
            from rcvgp.errors import OracleError

            raise OracleError("shutter stuck")
        return X[:, 0]

    path = tmp_path / "journal.jsonl"
    with OracleServer(CallableOracle(flaky, SPEC), "tcp://127.0.0.1:*") as server:
        with JournalingOracle(ZmqOracle(server.endpoint, timeout=2, deadline=20), path) as first:
            with pytest.raises(RemoteError, match="shutter stuck"):
                first.measure(in_limits(3))
        with JournalingOracle(ZmqOracle(server.endpoint, timeout=2, deadline=20), path, resume=True) as second:
            y = second.measure(in_limits(3))
    assert y.tolist() == in_limits(3)[:, 0].tolist()
    _, records, _ = read_journal(path)
    assert [(r["id"], "error" in r) for r in records] == [("m1", True), ("m2", False)]


def test_a_timeout_that_ended_a_run_is_retried_under_the_same_id(tmp_path: Path) -> None:
    """No reply came: the server may have measured; the same id gets its cached answer."""
    fn = CountingFn()
    path = tmp_path / "journal.jsonl"
    with OracleServer(CallableOracle(fn, SPEC), "tcp://127.0.0.1:*") as server:
        lost = DiesInFlight(server.endpoint, 1, after_reply=False, dies=OracleTimeout)
        with JournalingOracle(ZmqOracle(server.endpoint, timeout=2, deadline=20, channel=lost), path) as first:
            with pytest.raises(OracleTimeout):
                first.measure(in_limits(4))
        with JournalingOracle(ZmqOracle(server.endpoint, timeout=2, deadline=20), path, resume=True) as second:
            second.measure(in_limits(4))
    assert len(fn.calls) == 1
    _, records, _ = read_journal(path)
    assert [(r["id"], "error" in r) for r in records] == [("m1", True), ("m1", False)]
