"""ZmqOracle: same numbers as in-process, typed errors, lost replies, restarts, never hangs."""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import pytest

from wire_helpers import SPEC, CountingFn, FakeServer, hello_result, in_limits, reply
from rcvgp.errors import ConfigError, OracleError, OracleTimeout, OutOfLimitsError, ProtocolError, RemoteError
from rcvgp.oracle import CallableOracle
from rcvgp.transport import codec
from rcvgp.transport.client import Channel, MockChannel, RemoteOutOfLimits, ZmqOracle
from rcvgp.transport.server import OracleServer


def test_remote_measure_is_bit_identical_to_in_process(server: OracleServer) -> None:
    local = CallableOracle(CountingFn(), SPEC)
    with ZmqOracle(server.endpoint) as remote:
        assert remote.describe() == SPEC
        for seed in range(5):
            X = in_limits(256, seed)
            assert remote.measure(X).tobytes() == local.measure(X).tobytes()
        Xr, y = remote.measure_readback(in_limits(4))
        np.testing.assert_array_equal(Xr, in_limits(4))
        assert y.dtype == np.float64 and y.flags.writeable


def test_out_of_limits_is_a_typed_error_with_the_servers_code(server: OracleServer) -> None:
    X = in_limits(3)
    X[2, 0] = 7.5
    with ZmqOracle(server.endpoint) as remote:
        with pytest.raises(RemoteOutOfLimits) as info:
            remote.measure(X)
    exc = info.value
    assert isinstance(exc, RemoteError) and isinstance(exc, OutOfLimitsError) and isinstance(exc, OracleError)
    assert exc.code == "OUT_OF_LIMITS" and exc.details["variable"] == "a" and exc.details["value"] == 7.5
    assert "a = 7.5" in exc.message and "[0.1, 2]" in exc.message


def test_unknown_operation_raises_remote_error(server: OracleServer) -> None:
    with ZmqOracle(server.endpoint) as remote:
        with pytest.raises(RemoteError) as info:
            remote.request("calibrate")
    assert info.value.code == "UNKNOWN_OPERATION" and "calibrate" in info.value.message


def test_wrong_number_of_columns_is_refused_before_sending(server: OracleServer) -> None:
    with ZmqOracle(server.endpoint) as remote:
        with pytest.raises(OracleError, match=r"shape \(n_samples, 3\)"):
            remote.measure(np.ones((4, 2)))


def test_a_server_that_was_never_there_times_out_and_close_does_not_hang(tmp_path: Any) -> None:
    remote = ZmqOracle(f"ipc://{tmp_path}/nobody.sock", timeout=0.1, deadline=0.5)
    with pytest.raises(OracleTimeout, match="no reply"):
        remote.describe()
    with pytest.raises(OracleTimeout):
        remote.measure(np.ones((1, 3)))
    remote.close()
    assert remote._channel.reconnects >= 2


def test_lost_reply_is_recovered_by_resending_the_same_request_id() -> None:
    def handler(header: dict, n: int) -> Any:
        if header["op"] == "hello":
            return reply(header, hello_result())
        if n == 2:
            return None  # the first measure's reply is lost
        return reply(header, {"n_rows": 2}, {"y": np.array([1.0, 2.0])})

    with FakeServer(handler) as fake, ZmqOracle(fake.endpoint, timeout=0.2, deadline=10) as remote:
        y = remote.measure(in_limits(2))
        measures = [h for h in fake.seen if h["op"] == "measure"]
    assert y.tolist() == [1.0, 2.0]
    assert len(measures) == 2 and measures[0]["id"] == measures[1]["id"]


def test_a_stray_reply_is_never_taken_for_the_next_request() -> None:
    def handler(header: dict, n: int) -> Any:
        if header["op"] == "hello":
            return reply(header, hello_result())
        value = float(header["id"])
        frames = reply(header, {"n_rows": 1}, {"y": np.array([value])})
        return [frames, frames]  # every reply sent twice: the copy is stale for the next request

    with FakeServer(handler) as fake, ZmqOracle(fake.endpoint, timeout=2, deadline=10) as remote:
        remote.describe()
        first = remote.measure(in_limits(1))
        second = remote.measure(in_limits(1))
    assert first[0] + 1 == second[0]


def test_busy_is_retried_with_the_same_id() -> None:
    def handler(header: dict, n: int) -> Any:
        if header["op"] == "hello":
            return reply(header, hello_result())
        if n < 4:
            return [bytes(f) for f in codec.make_error("BUSY", "queue full", request=header, server_session="fake-session")]
        return reply(header, {"n_rows": 1}, {"y": np.array([3.0])})

    with FakeServer(handler) as fake, ZmqOracle(fake.endpoint, timeout=2, deadline=10) as remote:
        assert remote.measure(in_limits(1)).tolist() == [3.0]
        ids = {h["id"] for h in fake.seen if h["op"] == "measure"}
    assert len(ids) == 1


def test_server_of_another_major_version_says_the_client_must_upgrade() -> None:
    def handler(header: dict, n: int) -> Any:
        return reply(header, hello_result(), v="2.0")

    with FakeServer(handler) as fake, ZmqOracle(fake.endpoint, timeout=2, deadline=5) as remote:
        with pytest.raises(RemoteError) as info:
            remote.describe()
    assert info.value.code == "UNSUPPORTED_VERSION" and "upgrade the client" in info.value.message


def test_client_of_another_major_version_is_told_the_server_must_upgrade(server: OracleServer) -> None:
    frames = codec.encode({"protocol": codec.PROTOCOL, "v": "2.0", "op": "hello", "id": "1", "session": "s"})
    with Channel(server.endpoint) as ch:
        header = json.loads(ch.exchange(frames, "1", timeout=5, deadline=5)[0])
    err = header["error"]
    assert err["code"] == "UNSUPPORTED_VERSION" and "upgrade the server" in err["message"]
    assert err["details"]["server_version"] == codec.VERSION


def test_a_server_restart_is_noticed_and_the_run_goes_on(tmp_path: Any, fn: CountingFn) -> None:
    address = f"ipc://{tmp_path}/restart.sock"
    with OracleServer(CallableOracle(fn, SPEC), address) as first, ZmqOracle(address, timeout=0.3, deadline=20) as remote:
        remote.measure(in_limits(3))
        first.stop()
        with OracleServer(CallableOracle(fn, SPEC), address) as second:
            y = remote.measure(in_limits(3, seed=1))
            assert remote.server_session == second.server_session
    assert remote.restarts == 1 and y.shape == (3,)
    assert len(fn.calls) == 2


def test_a_restart_with_another_oracle_is_refused(tmp_path: Any, fn: CountingFn) -> None:
    from rcvgp.oracle import OracleSpec, Variable

    address = f"ipc://{tmp_path}/swap.sock"
    other = OracleSpec((Variable("p", 0, 1), Variable("q", 0, 1), Variable("r", 0, 1)), name="other")
    with OracleServer(CallableOracle(fn, SPEC), address) as first, ZmqOracle(address, timeout=0.3, deadline=20) as remote:
        remote.describe()
        first.stop()
        with OracleServer(CallableOracle(fn, other), address):
            with pytest.raises(ProtocolError, match="different oracle"):
                remote.ping()


def test_malformed_reply_is_a_protocol_error() -> None:
    with FakeServer(lambda header, n: [b"not json"]) as fake, ZmqOracle(fake.endpoint, timeout=2, deadline=5) as remote:
        with pytest.raises(ProtocolError, match="malformed reply"):
            remote.ping()


# -- the channel seam: the client's logic without a socket -----------------------------------------


def _mock_server(fail_first_measure: bool = False) -> MockChannel:
    """A MockChannel that answers hello and measure like a server of SPEC (y = row index)."""

    def handler(request: codec.Message) -> Any:
        header = request.header
        if header["op"] == "hello":
            return reply(header, hello_result())
        if header["op"] == "measure":
            if fail_first_measure and len([h for h in channel.requests if h["op"] == "measure"]) == 1:
                return [bytes(f) for f in codec.make_error("RIG_FAULT", "lamp out", request=header,
                                                            server_session="fake-session")]
            n = request.arrays["X"].shape[0]
            return reply(header, {"n_rows": n}, {"y": np.arange(n, dtype=float)})
        return reply(header, {})

    channel = MockChannel(handler)
    return channel


def test_a_mock_channel_carries_the_clients_requests_without_a_socket() -> None:
    channel = _mock_server()
    with ZmqOracle("tcp://127.0.0.1:1", channel=channel, session="s1") as remote:
        assert remote.describe() == SPEC
        assert remote.measure(in_limits(3)).tolist() == [0.0, 1.0, 2.0]
    assert [h["op"] for h in channel.requests] == ["hello", "measure"]
    assert {h["session"] for h in channel.requests} == {"s1"}
    assert channel.closed  # the oracle closes the channel it was given


def test_a_mock_channel_turns_error_replies_and_silence_into_typed_errors() -> None:
    with ZmqOracle("mock://", channel=_mock_server(fail_first_measure=True)) as remote:
        with pytest.raises(RemoteError, match="lamp out"):
            remote.measure(in_limits(2))
    with ZmqOracle("mock://", channel=MockChannel(lambda request: None)) as silent:
        with pytest.raises(OracleTimeout):
            silent.ping()


def test_an_address_zmq_refuses_is_a_config_error_not_a_raw_zmq_error() -> None:
    with ZmqOracle("tcp://bad host:5", timeout=0.1, deadline=0.5) as remote:
        with pytest.raises(ConfigError, match=r"cannot connect to 'tcp://bad host:5'.*tcp://HOST:PORT"):
            remote.describe()
