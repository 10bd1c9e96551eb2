"""The server in a thread: validation before the oracle, error replies, cache, journal, liveness."""

from __future__ import annotations

import json
import threading
import uuid
from typing import Any

import numpy as np
import pytest

from wire_helpers import SPEC, CountingFn, in_limits
from rcvgp.errors import ConfigError, OracleError, OracleTimeout
from rcvgp.oracle import CallableOracle
from rcvgp.transport import codec
from rcvgp.transport.client import Channel, ZmqOracle
from rcvgp.transport.server import OracleServer, is_loopback


def _ask(channel: Channel, frames: list[Any], rid: str | None = None) -> codec.Message:
    return codec.decode(channel.exchange(frames, rid, timeout=5, deadline=10), dtypes=None)


def _req(op: str, rid: str = "1", session: str = "s", arrays: dict | None = None, **header: Any) -> list[Any]:
    h = {"protocol": codec.PROTOCOL, "v": codec.VERSION, "op": op, "id": rid, "session": session, "params": {}}
    h.update(header)
    return codec.encode(h, arrays)


def _hdr(frames_dict: dict) -> bytes:
    return json.dumps(frames_dict).encode()


GOOD = {"protocol": "rcvgp-oracle", "v": "1.0", "op": "measure", "id": "m", "session": "s", "params": {}}
X3 = in_limits(4)
DESC = {"name": "X", "dtype": "<f8", "shape": [4, 3], "nbytes": 96}

MALFORMED = {
    "empty message": ([], "BAD_REQUEST"),
    "empty header": ([b""], "BAD_REQUEST"),
    "binary header": ([b"\x00\xff\x10"], "BAD_REQUEST"),
    "invalid json": ([b"{'op': 'ping'}"], "BAD_REQUEST"),
    "json list": ([b"[]"], "BAD_REQUEST"),
    "json string": ([b'"ping"'], "BAD_REQUEST"),
    "no protocol": ([_hdr({k: v for k, v in GOOD.items() if k != "protocol"})], "BAD_REQUEST"),
    "no version": ([_hdr({k: v for k, v in GOOD.items() if k != "v"})], "BAD_REQUEST"),
    "bad version": ([_hdr(dict(GOOD, v="one"))], "BAD_REQUEST"),
    "major 2": ([_hdr(dict(GOOD, v="2.0"))], "UNSUPPORTED_VERSION"),
    "no id": ([_hdr({k: v for k, v in GOOD.items() if k != "id"})], "BAD_REQUEST"),
    "numeric id": ([_hdr(dict(GOOD, id=5))], "BAD_REQUEST"),
    "long id": ([_hdr(dict(GOOD, id="x" * 200))], "BAD_REQUEST"),
    "no session": ([_hdr({k: v for k, v in GOOD.items() if k != "session"})], "BAD_REQUEST"),
    "type reply": ([_hdr(dict(GOOD, type="reply"))], "BAD_REQUEST"),
    "op not string": ([_hdr(dict(GOOD, op=["measure"]))], "BAD_REQUEST"),
    "unknown op": ([_hdr(dict(GOOD, op="explode"))], "UNKNOWN_OPERATION"),
    "params list": ([_hdr(dict(GOOD, params=[]))], "BAD_REQUEST"),
    "readback not bool": ([_hdr(dict(GOOD, params={"readback": "yes"}, arrays=[DESC])), X3.tobytes()], "BAD_REQUEST"),
    "missing X": ([_hdr(GOOD)], "BAD_REQUEST"),
    "descriptor without frame": ([_hdr(dict(GOOD, arrays=[DESC]))], "BAD_REQUEST"),
    "frame without descriptor": ([_hdr(GOOD), X3.tobytes()], "BAD_REQUEST"),
    "nbytes wrong": ([_hdr(dict(GOOD, arrays=[dict(DESC, nbytes=95)])), X3.tobytes()], "BAD_REQUEST"),
    "shape wrong": ([_hdr(dict(GOOD, arrays=[dict(DESC, shape=[3, 4])])), X3.tobytes()], "BAD_REQUEST"),
    "shape 1-d": ([_hdr(dict(GOOD, arrays=[dict(DESC, shape=[12])])), X3.tobytes()], "BAD_REQUEST"),
    "too few columns": ([_hdr(dict(GOOD, arrays=[dict(DESC, shape=[6, 2])])), X3.tobytes()], "BAD_REQUEST"),
    "zero rows": ([_hdr(dict(GOOD, arrays=[dict(DESC, shape=[0, 3], nbytes=0)])), b""], "BAD_REQUEST"),
    "native dtype": ([_hdr(dict(GOOD, arrays=[dict(DESC, dtype="f8")])), X3.tobytes()], "BAD_REQUEST"),
    "complex dtype": ([_hdr(dict(GOOD, arrays=[dict(DESC, dtype="<c16", nbytes=192)])), bytes(192)], "BAD_REQUEST"),
    "int dtype": ([_hdr(dict(GOOD, arrays=[dict(DESC, dtype="<i8")])), bytes(96)], "BAD_REQUEST"),
    "object dtype": ([_hdr(dict(GOOD, arrays=[dict(DESC, dtype="|O")])), bytes(96)], "BAD_REQUEST"),
    "pickle-like": ([_hdr(dict(GOOD, arrays=[dict(DESC, dtype="pickle")])), b"\x80\x04K\x01."], "BAD_REQUEST"),
    "shape strings": ([_hdr(dict(GOOD, arrays=[dict(DESC, shape=["4", "3"])])), X3.tobytes()], "BAD_REQUEST"),
    "descriptor not object": ([_hdr(dict(GOOD, arrays=["X"])), X3.tobytes()], "BAD_REQUEST"),
    "nan set point": ([_hdr(dict(GOOD, arrays=[DESC])), np.where(np.eye(4, 3) > 0, np.nan, X3).tobytes()], "OUT_OF_LIMITS"),
    "too many rows": (_req("measure", arrays={"X": in_limits(5001)}), "TOO_LARGE"),
    "oversize": ([_hdr(dict(GOOD, arrays=[{"name": "pad", "dtype": "<f8", "shape": [2**17 + 1], "nbytes": 2**20 + 8}])),
                  bytes(2**20 + 8)], "TOO_LARGE"),
}


@pytest.mark.parametrize("name", list(MALFORMED))
def test_malformed_input_gets_an_error_reply_and_the_server_keeps_serving(server: OracleServer, fn: CountingFn, name: str) -> None:
    frames, code = MALFORMED[name]
    with Channel(server.endpoint) as ch:
        msg = _ask(ch, frames)
        assert msg.header["ok"] is False
        assert msg.header["error"]["code"] == code, msg.header["error"]
        assert msg.header["server_session"] == server.server_session
        assert _ask(ch, _req("ping", "p"), "p").header["ok"] is True
    assert fn.calls == []  # nothing malformed reached the oracle


def test_unparsable_request_reply_has_null_id(server: OracleServer) -> None:
    with Channel(server.endpoint) as ch:
        h = _ask(ch, [b"{oops"]).header
    assert h["id"] is None and h["error"]["code"] == "BAD_REQUEST" and "JSON" in h["error"]["message"]


def test_out_of_limit_points_never_reach_the_oracle(server: OracleServer, fn: CountingFn) -> None:
    X = in_limits(50)
    X[17, 1] = 0.2  # |b| < 0.5: inside the gap of the mirrored support
    with Channel(server.endpoint) as ch:
        err = _ask(ch, _req("measure", arrays={"X": X}), "1").header["error"]
    assert err["code"] == "OUT_OF_LIMITS" and err["retryable"] is False
    d = err["details"]
    assert (d["variable"], d["row"], d["value"]) == ("b", 17, 0.2)
    assert "b = 0.2" in err["message"] and "[-3, -0.5] U [0.5, 3]" in err["message"]
    assert fn.calls == []


def test_big_endian_and_float32_set_points_are_converted_exactly(server: OracleServer, fn: CountingFn) -> None:
    X = in_limits(8).astype("<f4")
    with Channel(server.endpoint) as ch:
        y32 = _ask(ch, _req("measure", "a", arrays={"X": X}), "a").arrays["y"]
        y_be = _ask(ch, _req("measure", "b", arrays={"X": X.astype(">f8")}), "b").arrays["y"]
    assert y32.tobytes() == y_be.tobytes()
    np.testing.assert_array_equal(fn.calls[0], X.astype(np.float64))


def test_duplicate_request_id_is_measured_once_and_answered_byte_for_byte(server: OracleServer, fn: CountingFn) -> None:
    frames = _req("measure", "dup", arrays={"X": in_limits(10)})
    with Channel(server.endpoint) as ch:
        first = ch.exchange(frames, "dup", timeout=5, deadline=10)
        second = ch.exchange(frames, "dup", timeout=5, deadline=10)
        other = _ask(ch, _req("measure", "dup", arrays={"X": in_limits(10, seed=1)}), "dup").header
    assert first == second
    assert len(fn.calls) == 1
    assert other["error"]["code"] == "BAD_REQUEST" and "already used" in other["error"]["message"]


def test_retry_of_a_running_measurement_is_attached_not_measured_again(fn: CountingFn) -> None:
    fn.block, fn.started = threading.Event(), threading.Event()
    with OracleServer(CallableOracle(fn, SPEC), "tcp://127.0.0.1:*") as srv:
        frames = _req("measure", "slow", arrays={"X": in_limits(3)})
        with Channel(srv.endpoint) as ch:
            with pytest.raises(OracleTimeout):
                ch.exchange(frames, "slow", timeout=0.2, deadline=0.2)
            assert fn.started.wait(5)
            threading.Timer(0.2, fn.block.set).start()
            msg = _ask(ch, frames, "slow")  # the retry, on a fresh socket
    assert msg.header["ok"] is True
    assert len(fn.calls) == 1


def test_ping_and_status_are_answered_while_a_measurement_runs(fn: CountingFn) -> None:
    fn.block, fn.started = threading.Event(), threading.Event()
    with OracleServer(CallableOracle(fn, SPEC), "tcp://127.0.0.1:*") as srv:
        results: list[Any] = []
        with ZmqOracle(srv.endpoint, timeout=5, deadline=30) as measuring, ZmqOracle(srv.endpoint, timeout=5, deadline=10) as watcher:
            measuring.describe()
            t = threading.Thread(target=lambda: results.append(measuring.measure(in_limits(5))))
            t.start()
            assert fn.started.wait(10)
            status = watcher.status()
            assert watcher.ping()["server_session"] == srv.server_session
            fn.block.set()
            t.join(10)
    assert status["state"] == "measuring" and status["current"]["rows"] == 5
    assert results and results[0].shape == (5,)


def test_busy_when_the_queue_is_full_is_retryable(fn: CountingFn) -> None:
    fn.block, fn.started = threading.Event(), threading.Event()
    with OracleServer(CallableOracle(fn, SPEC), "tcp://127.0.0.1:*", max_queue=1) as srv:
        with Channel(srv.endpoint) as ch:
            with pytest.raises(OracleTimeout):
                ch.exchange(_req("measure", "1", arrays={"X": in_limits(2)}), "1", timeout=0.2, deadline=0.2)
            assert fn.started.wait(5)
            err = _ask(ch, _req("measure", "2", arrays={"X": in_limits(2)}), "2").header["error"]
            fn.block.set()
    assert err["code"] == "BUSY" and err["retryable"] is True


@pytest.mark.parametrize(
    "exc, code",
    [(OracleError("thermocouple open circuit"), "RIG_FAULT"), (RuntimeError("driver bug"), "INTERNAL"), (None, "RIG_FAULT")],
)
def test_a_failing_oracle_becomes_an_error_reply_and_the_server_survives(exc: Exception | None, code: str) -> None:
    def bad(X: np.ndarray) -> Any:
        if exc is None:
            return np.ones(len(X) + 1)  # wrong shape
        raise exc

    with OracleServer(CallableOracle(bad, SPEC), "tcp://127.0.0.1:*") as srv, Channel(srv.endpoint) as ch:
        err = _ask(ch, _req("measure", arrays={"X": in_limits(3)}), "1").header["error"]
        assert err["code"] == code
        if exc is not None:
            assert str(exc) in err["message"]
        assert _ask(ch, _req("ping", "2"), "2").header["ok"] is True


def test_nan_from_the_oracle_travels_as_nan(fn: CountingFn) -> None:
    oracle = CallableOracle(lambda X: np.where(X[:, 0] > 1, np.nan, X[:, 0]), SPEC)
    with OracleServer(oracle, "tcp://127.0.0.1:*") as srv, ZmqOracle(srv.endpoint) as remote:
        X = in_limits(100)
        y = remote.measure(X)
    assert np.isnan(y).sum() == (X[:, 0] > 1).sum() > 0


def test_journal_answers_a_retry_after_a_restart_without_measuring(tmp_path: Any, fn: CountingFn) -> None:
    address = f"ipc://{tmp_path}/j.sock"
    frames = _req("measure", "42", session="client-1", arrays={"X": in_limits(6)})
    with OracleServer(CallableOracle(fn, SPEC), address, journal_dir=tmp_path / "journal") as first, Channel(address) as ch:
        before = ch.exchange(frames, "42", timeout=5, deadline=10)
        session_1 = first.server_session
    with OracleServer(CallableOracle(fn, SPEC), address, journal_dir=tmp_path / "journal") as second, Channel(address) as ch:
        after = ch.exchange(frames, "42", timeout=5, deadline=10)
        status = _ask(ch, _req("status", "s"), "s").header["result"]
        assert second.server_session != session_1
    assert after == before  # the stored reply, byte for byte (first server's session inside)
    assert len(fn.calls) == 1 and status["measurements"] == 0 and status["cache_hits"] == 1


def test_non_loopback_bind_is_refused_without_curve(oracle: CallableOracle) -> None:
    with pytest.raises(ConfigError, match="--insecure"):
        OracleServer(oracle, "tcp://0.0.0.0:5555")
    with pytest.raises(ConfigError, match="--insecure"):
        OracleServer(oracle, "tcp://*:5555")


@pytest.mark.parametrize("address, local", [("tcp://127.0.0.1:1", True), ("tcp://localhost:1", True), ("tcp://[::1]:1", True),
                                            ("ipc:///tmp/x", True), ("tcp://0.0.0.0:1", False), ("tcp://eth0:1", False),
                                            ("tcp://10.0.0.5:1", False)])
def test_is_loopback(address: str, local: bool) -> None:
    assert is_loopback(address) is local


@pytest.mark.parametrize("address", ["tcp://127.0.0.1:99999", "tcp://127.0.0.1:65536", "tcp://127.0.0.1:-1",
                                     "tcp://127.0.0.1:http", "tcp://127.0.0.1:\u0665", "127.0.0.1:5555"])
def test_an_endpoint_zeromq_would_take_otherwise_is_refused(oracle: CallableOracle, address: str) -> None:
    # ZeroMQ takes a tcp port modulo 65536: port 99999 would bind or connect to 34463, silently
    with pytest.raises(ConfigError, match="65535|ZeroMQ endpoint"):
        OracleServer(oracle, address)
    with pytest.raises(ConfigError, match="65535|ZeroMQ endpoint"):
        ZmqOracle(address, timeout=0.1, deadline=0.2)


def test_a_port_in_use_is_a_config_error(server: OracleServer, oracle: CallableOracle) -> None:
    with pytest.raises(ConfigError, match="cannot bind"):
        OracleServer(oracle, server.endpoint).start()


def test_hello_reports_limits_and_never_the_equation(server: OracleServer) -> None:
    with Channel(server.endpoint) as ch:
        result = _ask(ch, _req("hello", "h"), "h").header["result"]
    assert result["versions"] == [codec.VERSION]
    assert result["limits"]["max_rows"] == 5000 and result["limits"]["max_message_bytes"] == 2**20
    assert result["oracle"] == SPEC.to_dict()
    assert set(result["operations"]) >= {"hello", "describe", "measure", "ping", "status"}


def test_many_clients_each_get_their_own_answers(server: OracleServer, fn: CountingFn) -> None:
    out: dict[int, Any] = {}

    def run(k: int) -> None:
        with ZmqOracle(server.endpoint, session=uuid.uuid4().hex) as c:
            out[k] = c.measure(in_limits(7, seed=k))

    threads = [threading.Thread(target=run, args=(k,)) for k in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(20)
    ref = CallableOracle(CountingFn(), SPEC)
    for k in range(6):
        np.testing.assert_array_equal(out[k], ref.measure(in_limits(7, seed=k)))


# ---------------------------------------------------------------- issue 22: hostile input


def _raw(text: str, *buffers: bytes) -> list[bytes]:
    """A request whose frame 0 is this exact JSON text (escapes such as \\ud800 kept as written)."""
    return [text.encode("ascii"), *buffers]


@pytest.mark.parametrize("field", ["op", "id", "session"])
def test_a_lone_surrogate_in_op_id_or_session_gets_a_reply_and_the_server_survives(server: OracleServer, field: str) -> None:
    values = {"op": '"ping"', "id": '"1"', "session": '"s"'}
    values[field] = '"\\ud800"'
    text = '{"protocol":"rcvgp-oracle","v":"1.0",' + ",".join(f'"{k}":{v}' for k, v in values.items()) + "}"
    with Channel(server.endpoint) as ch:
        h = codec.decode(ch.exchange(_raw(text), None, timeout=3, deadline=3), dtypes=None).header
        assert h["ok"] is False and h["error"]["code"] == "BAD_REQUEST", h
        assert h["op"] is None and h["id"] is None and h["session"] is None
        assert _ask(ch, _req("ping", "p"), "p").header["ok"] is True


def test_a_measure_with_a_surrogate_id_is_refused_before_the_rig_and_measuring_goes_on(server: OracleServer, fn: CountingFn) -> None:
    X = in_limits(4)
    text = ('{"protocol":"rcvgp-oracle","v":"1.0","op":"measure","id":"\\ud800","session":"s","params":{},'
            '"arrays":[{"name":"X","dtype":"<f8","shape":[4,3],"nbytes":96}]}')
    with Channel(server.endpoint) as ch:
        h = codec.decode(ch.exchange(_raw(text, X.tobytes()), None, timeout=3, deadline=3), dtypes=None).header
        assert h["error"]["code"] == "BAD_REQUEST" and "surrogate" in h["error"]["message"]
        assert fn.calls == []
        y = _ask(ch, _req("measure", "ok", arrays={"X": X}), "ok").arrays["y"]
        status = _ask(ch, _req("status", "st"), "st").header
    assert y.shape == (4,) and len(fn.calls) == 1
    assert status["ok"] is True and status["result"]["state"] == "idle"


def test_the_worker_survives_a_reply_it_cannot_build(server: OracleServer, fn: CountingFn, monkeypatch: pytest.MonkeyPatch) -> None:
    real_reply, real_error = codec.make_reply, codec.make_error

    def reply(request: Any, *args: Any, **kw: Any) -> Any:
        if request.get("session") == "evil":
            raise UnicodeEncodeError("utf-8", "\ud800", 0, 1, "surrogates not allowed")
        return real_reply(request, *args, **kw)

    def error(code: str, message: str, **kw: Any) -> Any:
        if (kw.get("request") or {}).get("session") == "evil":
            raise UnicodeEncodeError("utf-8", "\ud800", 0, 1, "surrogates not allowed")
        return real_error(code, message, **kw)

    monkeypatch.setattr(codec, "make_reply", reply)
    monkeypatch.setattr(codec, "make_error", error)
    with Channel(server.endpoint) as ch:
        h = _ask(ch, _req("measure", "e", session="evil", arrays={"X": in_limits(2)})).header
        assert h["ok"] is False and h["error"]["code"] == "INTERNAL"
        assert _ask(ch, _req("measure", "n", arrays={"X": in_limits(3)}), "n").arrays["y"].shape == (3,)
        assert _ask(ch, _req("status", "st"), "st").header["result"]["state"] == "idle"
    assert len(fn.calls) == 2


@pytest.mark.parametrize("shape", [[2**62, 4], [2**64, 4], [2**61, 4], [0, 2**64]])
def test_a_shape_that_overflows_is_bad_request_not_internal(server: OracleServer, shape: list[int]) -> None:
    with Channel(server.endpoint) as ch:
        err = _ask(ch, [_hdr(dict(GOOD, arrays=[dict(DESC, shape=shape)])), X3.tobytes()]).header["error"]
    assert err["code"] == "BAD_REQUEST", err


@pytest.mark.parametrize("v", ["\u00b2.0", "\u0661.0", "1" * 5000])
def test_a_version_with_non_ascii_digits_is_bad_request(server: OracleServer, v: str) -> None:
    with Channel(server.endpoint) as ch:
        err = _ask(ch, [_hdr(dict(GOOD, op="ping", v=v))]).header["error"]
    assert err["code"] == "BAD_REQUEST", err


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.mark.parametrize("template", ["tcp://127.0.0.1:1;0.0.0.0:{port}", "tcp://127.0.0.1:0;*:{port}", "tcp://localhost:1;*:{port}"])
def test_the_loopback_guard_judges_what_zeromq_binds(oracle: CallableOracle, template: str) -> None:
    import socket

    port = _free_port()
    with pytest.raises(ConfigError, match="--insecure"):
        OracleServer(oracle, template.format(port=port)).start()
    with socket.socket() as s:  # refused before serving anyone, and the port released
        s.bind(("0.0.0.0", port))


def test_a_loopback_name_that_binds_loopback_is_served(oracle: CallableOracle) -> None:
    with OracleServer(oracle, "tcp://localhost:*") as srv, Channel(srv.endpoint) as ch:
        assert srv.endpoint is not None and srv.endpoint.startswith("tcp://127.0.0.1:")
        assert _ask(ch, _req("ping", "p"), "p").header["ok"] is True


@pytest.mark.parametrize("address", ["tcp://127.0.0.1:1;0.0.0.0:5555", "tcp://127.0.0.1:1;*:5555", "tcp://127.0.0.1:1;10.0.0.5:5555"])
def test_is_loopback_judges_the_address_after_a_source(address: str) -> None:
    assert is_loopback(address) is False


# ---------------------------------------------------------------- issue 22: bounded cache, stuck rigs, sessions


def _status(ch: Channel, session: str = "s") -> dict[str, Any]:
    rid = uuid.uuid4().hex
    return dict(_ask(ch, _req("status", rid, session=session), rid).header["result"])


def _wait_state(ch: Channel, state: str) -> dict[str, Any]:
    for _ in range(400):  # a bound on the wait, not a timing assertion
        status = _status(ch)
        if status["state"] == state:
            return status
        threading.Event().wait(0.05)
    raise AssertionError(f"the server never reached state {state!r}: {status}")


def test_the_reply_cache_is_bounded_in_bytes(fn: CountingFn) -> None:
    bound = 100_000  # a readback reply of 500 rows is about 16 kB: six fit
    with OracleServer(CallableOracle(fn, SPEC), "tcp://127.0.0.1:*", reply_cache_bytes=bound) as srv, Channel(srv.endpoint) as ch:
        frames = [_req("measure", f"m{k}", params={"readback": True}, arrays={"X": in_limits(500, seed=k)}) for k in range(20)]
        for k, f in enumerate(frames):
            _ask(ch, f, f"m{k}")
        status = _status(ch)
        limits = _ask(ch, _req("hello", "h"), "h").header["result"]["limits"]
        _ask(ch, frames[-1], "m19")  # the newest reply is kept: not measured again
        _ask(ch, frames[0], "m0")  # the oldest was evicted: measured again
    assert limits["reply_cache_bytes"] == bound
    assert status["cache_bytes"] <= bound and 3 <= status["cache_entries"] < 20
    assert len(fn.calls) == 21


def test_a_reply_larger_than_the_cache_bound_is_still_kept_for_its_retry(fn: CountingFn) -> None:
    with OracleServer(CallableOracle(fn, SPEC), "tcp://127.0.0.1:*", reply_cache_bytes=1000) as srv, Channel(srv.endpoint) as ch:
        frames = _req("measure", "big", arrays={"X": in_limits(400)})
        first = ch.exchange(frames, "big", timeout=5, deadline=10)
        again = ch.exchange(frames, "big", timeout=5, deadline=10)
    assert first == again and len(fn.calls) == 1


def test_a_rig_that_does_not_return_is_reported_and_never_wedges_the_queue(fn: CountingFn) -> None:
    fn.block, fn.started = threading.Event(), threading.Event()
    with OracleServer(CallableOracle(fn, SPEC), "tcp://127.0.0.1:*", measure_timeout=0.5) as srv, Channel(srv.endpoint) as ch:
        slow = _req("measure", "slow", arrays={"X": in_limits(3)})
        err = _ask(ch, slow, "slow").header["error"]
        assert err["code"] == "RIG_TIMEOUT" and err["retryable"] is False and "0.5 s" in err["message"]
        stuck = _status(ch)
        refused = _ask(ch, _req("measure", "next", arrays={"X": in_limits(2)}), "next").header["error"]
        assert _ask(ch, _req("ping", "p"), "p").header["ok"] is True
        fn.block.set()  # the rig comes back
        _wait_state(ch, "idle")
        retried = _ask(ch, slow, "slow").header["error"]  # stored: not measured again
        y = _ask(ch, _req("measure", "next", arrays={"X": in_limits(2)}), "next").arrays["y"]  # refused ids stay free
    assert stuck["state"] == "stuck" and stuck["current"]["id"] == "slow" and "RIG_TIMEOUT" in stuck["fault"]
    assert refused["code"] == "RIG_TIMEOUT" and "stuck" in refused["message"]
    assert retried["code"] == "RIG_TIMEOUT" and y.shape == (2,)
    assert [len(X) for X in fn.calls] == [3, 2]


def test_a_queued_request_past_its_deadline_is_answered_expired_and_never_measured(fn: CountingFn) -> None:
    fn.block, fn.started = threading.Event(), threading.Event()
    with OracleServer(CallableOracle(fn, SPEC), "tcp://127.0.0.1:*", measure_timeout=None) as srv, \
            Channel(srv.endpoint) as first, Channel(srv.endpoint) as second:
        with pytest.raises(OracleTimeout):
            first.exchange(_req("measure", "1", arrays={"X": in_limits(2)}), "1", timeout=0.2, deadline=0.2)
        assert fn.started.wait(5)
        late = _req("measure", "2", session="other", arrays={"X": in_limits(3)}, expires_in=0.3)
        err = _ask(second, late, "2").header["error"]
        queue = _status(second)["queue"]
        fn.block.set()
        _wait_state(second, "idle")
        again = _ask(second, late, "2").header["error"]
    assert err["code"] == "EXPIRED" and err["retryable"] is False and "0.3" in err["message"]
    assert queue == 1 and again["code"] == "EXPIRED"
    assert [len(X) for X in fn.calls] == [2]


@pytest.mark.parametrize("value", ["soon", -1, 0, True, 1e999, [1]])
def test_expires_in_must_be_a_positive_number_of_seconds(server: OracleServer, fn: CountingFn, value: Any) -> None:
    with Channel(server.endpoint) as ch:
        err = _ask(ch, _req("measure", "e", arrays={"X": in_limits(2)}, expires_in=value), "e").header["error"]
    assert err["code"] == "BAD_REQUEST" and "expires_in" in err["message"] and fn.calls == []


def test_status_counts_measurements_per_session(server: OracleServer) -> None:
    with Channel(server.endpoint) as ch:
        a = _req("measure", "1", session="a", arrays={"X": in_limits(3)})
        _ask(ch, a, "1")
        _ask(ch, a, "1")
        _ask(ch, _req("measure", "1", session="b", arrays={"X": in_limits(4)}), "1")
        status_a, status_b, status_c = _status(ch, "a"), _status(ch, "b"), _status(ch, "c")
    assert status_a["session_counters"] == {"measurements": 1, "points": 3, "cache_hits": 1}
    assert status_b["session_counters"] == {"measurements": 1, "points": 4, "cache_hits": 0}
    assert status_c["session_counters"] == {"measurements": 0, "points": 0, "cache_hits": 0}
    assert status_a["measurements"] == 2


def test_a_client_measure_carries_its_deadline_as_expires_in() -> None:
    from wire_helpers import FakeServer, hello_result, reply

    def handler(header: dict[str, Any], n: int) -> list[Any]:
        if header["op"] == "hello":
            return reply(header, hello_result())
        return reply(header, {"n_rows": 2}, {"y": np.zeros(2)})

    with FakeServer(handler) as fake, ZmqOracle(fake.endpoint, timeout=5, deadline=42) as remote:
        remote.measure(in_limits(2))
        remote.ping()
    by_op = {h["op"]: h for h in fake.seen}
    assert by_op["measure"]["expires_in"] == 42 and "expires_in" not in by_op["ping"]
