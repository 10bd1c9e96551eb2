"""``rcvgp ping ENDPOINT`` against a server in a thread: what the server serves, its limits,
session and state; one line and exit status 4 when nothing answers, or without the CURVE key."""

from __future__ import annotations

import json
import threading
from pathlib import Path

import pytest
import zmq
import zmq.auth

from rcvgp.cli import ExitCode, main
from rcvgp.oracle import CallableOracle
from rcvgp.transport.client import ZmqOracle
from rcvgp.transport.server import OracleServer
from wire_helpers import SPEC, CountingFn, in_limits


def test_ping_prints_the_description_limits_session_and_state(server: OracleServer,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    with ZmqOracle(server.endpoint, timeout=2, deadline=20) as client:
        client.measure(in_limits(10))
    assert main(["ping", server.endpoint]) == ExitCode.OK
    out = capsys.readouterr().out
    lines = out.splitlines()
    assert lines[0].startswith(f"{server.endpoint}: rcvgp ") and "protocol 1.1" in lines[0]
    assert "oracle      test:counting" in lines
    # every variable with its limits and unit, and the sampling distribution
    assert lines[2].split() == ["variables", "a", "[0.1,", "2]", "m", "uniform"]
    assert lines[3].split() == ["b", "[-3,", "-0.5]", "U", "[0.5,", "3]", "-", "uniform"]
    assert lines[4].split() == ["c", "[-1,", "1]", "-", "uniform"]
    assert "output      y  -" in lines
    assert any(line.startswith("limits      5000 rows per measure, messages up to 1 MiB") for line in lines)
    assert f"session     {server.server_session}, up " in out
    state = next(line for line in lines if line.startswith("state"))
    assert state.startswith("state       idle;") and "1 measurements (10 points)" in state


def test_ping_json_is_one_object_with_the_hello_and_the_status(server: OracleServer,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["ping", server.endpoint, "--json"]) == ExitCode.OK
    data = json.loads(capsys.readouterr().out)
    assert data["endpoint"] == server.endpoint and data["round_trip_seconds"] > 0
    assert data["hello"]["oracle"] == SPEC.to_dict()
    assert data["hello"]["limits"]["max_message_bytes"] == 2**20
    assert data["hello"]["server_session"] == data["status"]["server_session"] == server.server_session
    assert data["status"]["state"] == "idle" and data["status"]["points"] == 0


def test_ping_where_nothing_listens_exits_4_with_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    address = f"ipc://{tmp_path}/nobody.sock"
    assert main(["ping", address, "--timeout", "3"]) == ExitCode.TIMEOUT
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.splitlines() == [f"rcvgp ping: {address} is unreachable: "
                                         "nothing is listening there (connection refused)"]


@pytest.mark.parametrize("flag, value, expected", [
    ("--timeout", "0", "expected a finite number > 0"),
    ("--curve-server-key", "no/such/server.key", "no/such/server.key: cannot read the server's public key"),
])
def test_ping_names_a_bad_flag(flag: str, value: str, expected: str, capsys: pytest.CaptureFixture[str]) -> None:
    try:
        code = main(["ping", "tcp://127.0.0.1:5555", flag, value])
    except SystemExit as exc:  # argparse's own refusal
        code = exc.code  # type: ignore[assignment]
    assert code == ExitCode.USAGE and expected in capsys.readouterr().err


@pytest.mark.skipif(not zmq.has("curve"), reason="libzmq without CURVE")
def test_ping_takes_the_curve_keys_of_a_secured_server(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    zmq.auth.create_certificates(str(tmp_path), "server")
    oracle = CallableOracle(CountingFn(), SPEC)
    with OracleServer(oracle, "tcp://127.0.0.1:*", curve_secret_key=tmp_path / "server.key_secret") as curve:
        assert main(["ping", curve.endpoint, "--timeout", "3"]) == ExitCode.TIMEOUT
        err = capsys.readouterr().err
        assert "wants CurveZMQ encryption" in err and len(err.splitlines()) == 1
        assert main(["ping", curve.endpoint, "--curve-server-key", str(tmp_path / "server.key")]) == ExitCode.OK
        assert "oracle      test:counting" in capsys.readouterr().out


def test_ping_says_what_a_busy_server_is_measuring(capsys: pytest.CaptureFixture[str]) -> None:
    release, started = threading.Event(), threading.Event()
    oracle = CallableOracle(CountingFn(block=release, started=started), SPEC)
    with OracleServer(oracle, "tcp://127.0.0.1:*") as srv, ZmqOracle(srv.endpoint, timeout=5, deadline=30) as client:
        worker = threading.Thread(target=client.measure_with_id, args=(in_limits(7), "job-1"))
        worker.start()
        try:
            assert started.wait(20)
            assert main(["ping", srv.endpoint]) == ExitCode.OK
        finally:
            release.set()
            worker.join(30)
    state = next(line for line in capsys.readouterr().out.splitlines() if line.startswith("state"))
    assert state.startswith("state       measuring (request job-1, 7 rows, for ")
