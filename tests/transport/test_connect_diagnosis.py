"""An endpoint that does not answer: the client tells why (nothing listening, a CURVE key missing,
wrong or refused, a silent server), from what its socket monitor saw and the server's greeting,
and says so while it waits."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import zmq
import zmq.auth

from wire_helpers import SPEC, CountingFn
from rcvgp.errors import OracleTimeout
from rcvgp.oracle import CallableOracle
from rcvgp.transport.client import ZmqOracle, _peer_mechanism
from rcvgp.transport.server import OracleServer

needs_curve = pytest.mark.skipif(not zmq.has("curve"), reason="libzmq without CURVE")


@pytest.fixture
def keys(tmp_path: Path) -> Path:
    for name in ("server", "alice", "mallory"):
        zmq.auth.create_certificates(str(tmp_path), name)
    (tmp_path / "allowed").mkdir()
    (tmp_path / "allowed" / "alice.key").write_bytes((tmp_path / "alice.key").read_bytes())
    return tmp_path


def _no_answer(address: str, **options: Any) -> tuple[str, str]:
    # 3 s: on a loaded machine the monitor's events can take a second to arrive
    with ZmqOracle(address, timeout=0.3, deadline=3.0, **options) as remote:
        with pytest.raises(OracleTimeout) as info:
            remote.describe()
        kind, why = remote.diagnosis()
    assert why in str(info.value)
    return kind, str(info.value)


def test_nothing_listening_is_told_apart(tmp_path: Path) -> None:
    assert _no_answer(f"ipc://{tmp_path}/nobody.sock")[0] == "refused"
    # A port that was bound and is free again: the context's end waits until ZeroMQ's I/O thread
    # has closed the listener (closing the socket alone returns before; a connect in between is
    # accepted). Below Linux's ephemeral range (32768-60999), where a connect to a free port can
    # pick that very port as its source and connect to itself.
    with zmq.Context() as ctx, ctx.socket(zmq.ROUTER) as router:
        port = router.bind_to_random_port("tcp://127.0.0.1", min_port=20000, max_port=30000)
    kind, message = _no_answer(f"tcp://127.0.0.1:{port}")
    assert kind == "refused" and "nothing is listening there (connection refused)" in message


def test_a_server_that_accepts_but_never_answers_is_called_silent() -> None:
    with zmq.Context() as ctx, ctx.socket(zmq.ROUTER) as router:
        router.setsockopt(zmq.LINGER, 0)
        port = router.bind_to_random_port("tcp://127.0.0.1")
        kind, message = _no_answer(f"tcp://127.0.0.1:{port}")
    assert kind == "silent" and "connected, but the server has not answered" in message


@needs_curve
def test_curve_key_problems_are_told_apart(keys: Path) -> None:
    oracle = CallableOracle(CountingFn(), SPEC)
    with OracleServer(oracle, "tcp://127.0.0.1:*", curve_secret_key=keys / "server.key_secret",
                      curve_clients_dir=keys / "allowed") as curve:
        assert _no_answer(curve.endpoint)[0] == "needs-curve"
        assert _no_answer(curve.endpoint, curve_server_key=keys / "mallory.key",
                          curve_client_key=keys / "alice.key_secret")[0] == "bad-server-key"
        assert _no_answer(curve.endpoint, curve_server_key=keys / "server.key",
                          curve_client_key=keys / "mallory.key_secret")[0] == "client-refused"
        with ZmqOracle(curve.endpoint, curve_server_key=keys / "server.key",
                       curve_client_key=keys / "alice.key_secret") as alice:
            assert alice.describe() == SPEC
    with OracleServer(oracle, "tcp://127.0.0.1:*") as plain:
        assert _no_answer(plain.endpoint, curve_server_key=keys / "server.key")[0] == "no-curve"


@needs_curve
def test_the_server_greeting_names_its_mechanism() -> None:
    # the monitor tells a mechanism mismatch only when this side sees it before the server hangs
    # up; the greeting tells it every time
    with zmq.Context() as ctx, ctx.socket(zmq.ROUTER) as curve, ctx.socket(zmq.ROUTER) as plain:
        public, secret = zmq.curve_keypair()
        curve.curve_server, curve.curve_secretkey, curve.curve_publickey = True, secret, public
        for sock in (curve, plain):
            sock.setsockopt(zmq.LINGER, 0)
        ports = [sock.bind_to_random_port("tcp://127.0.0.1") for sock in (curve, plain)]
        for _ in range(3):
            assert _peer_mechanism(f"tcp://127.0.0.1:{ports[0]}") == "CURVE"
            assert _peer_mechanism(f"tcp://127.0.0.1:{ports[1]}") == "NULL"
    assert _peer_mechanism(f"tcp://127.0.0.1:{ports[1]}") is None  # nothing listens now
    assert _peer_mechanism("ipc:///nowhere.sock") is None


def test_the_client_says_what_it_waits_for_and_until_when(tmp_path: Path) -> None:
    notes: list[str] = []
    with ZmqOracle(f"ipc://{tmp_path}/late.sock", timeout=0.5, deadline=2.5, on_wait=notes.append) as remote:
        remote._channel.first_note = 0.3  # type: ignore[attr-defined]
        with pytest.raises(OracleTimeout):
            remote.ping()
    assert notes and notes[0] == (f"waiting for ipc://{tmp_path}/late.sock: nothing is listening there "
                                  "(connection refused) (no answer yet, giving up in 3 s)")


def test_a_server_that_answered_and_stays_connected_is_not_reported_while_it_measures(tmp_path: Path) -> None:
    import threading

    from wire_helpers import in_limits

    release = threading.Event()
    slow = CallableOracle(CountingFn(block=release), SPEC)
    notes: list[str] = []
    with OracleServer(slow, f"ipc://{tmp_path}/slow.sock") as server, \
            ZmqOracle(server.address, timeout=5, deadline=20, on_wait=notes.append) as remote:
        remote.describe()
        remote._channel.first_note = 0.2  # type: ignore[attr-defined]
        remote._channel.note_every = 0.2  # type: ignore[attr-defined]
        threading.Timer(1.0, release.set).start()
        remote.measure(in_limits(2))  # a long measurement on a live connection
        assert notes == []
        server.stop()  # the connection goes down: now it is worth a note
        with pytest.raises(OracleTimeout):
            remote.request("ping", timeout=0.5, deadline=1.5)
    assert notes and "nothing is listening there" in notes[-1]
