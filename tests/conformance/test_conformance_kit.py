"""The conformance kit passes our server and the plain-pyzmq reference server, and fails broken ones."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import zmq

from rcvgp.cli import main
from rcvgp.conformance import check_oracle, load_points, scenario_list
from rcvgp.conformance.kit import _Kit
from rcvgp.errors import ConfigError, OracleTimeout
from rcvgp.oracle import CallableOracle, OracleSpec, Variable
from rcvgp.transport.client import ZmqOracle
from rcvgp.transport.server import OracleServer

ROOT = Path(__file__).resolve().parents[2]
SPEC = OracleSpec((Variable("T", 250.0, 400.0, unit="K"), Variable("p", 0.5, 5.0, only_positive=False)),
                  name="test:gas", max_rows=20000)


def noisy_oracle(seed: int = 0) -> CallableOracle:
    rng = np.random.default_rng(seed)
    return CallableOracle(lambda X: X[:, 1] / X[:, 0] + 0.01 * rng.standard_normal(len(X)), SPEC)


@pytest.fixture
def endpoint() -> Iterator[str]:
    with OracleServer(noisy_oracle(), "tcp://127.0.0.1:*", max_message_bytes=2**20) as srv:
        yield srv.endpoint


def test_every_listed_scenario_has_a_check() -> None:
    ids = [s["id"] for s in scenario_list()]
    assert ids[0] == "hello" and len(ids) == len(set(ids)) >= 15
    for sid in ids:
        assert callable(getattr(_Kit, "s_" + sid))


def test_kit_passes_our_server(endpoint: str) -> None:
    report = check_oracle(endpoint, timeout=5)
    assert report.passed, report.to_text()
    assert {r.id for r in report.results} == {s["id"] for s in scenario_list()}
    assert report["duplicate_request_id"].passed and not report["oversize_message"].skipped
    assert not report["expires_in"].skipped


def test_kit_is_not_fooled_by_other_clients_measuring(monkeypatch: pytest.MonkeyPatch) -> None:
    srv = OracleServer(noisy_oracle(), "tcp://127.0.0.1:*")
    real_status = srv._op_status

    def busy_elsewhere(req: Any) -> Any:  # another client measures between any two checks
        srv.counters["measurements"] += 1
        return real_status(req)

    monkeypatch.setattr(srv, "_op_status", busy_elsewhere)
    srv._handlers["status"] = busy_elsewhere
    with srv:
        report = check_oracle(srv.endpoint, timeout=5)
    assert report.passed, report.to_text()


def test_kit_passes_while_another_client_really_measures() -> None:
    with OracleServer(noisy_oracle(), "tcp://127.0.0.1:*") as srv:
        stop = threading.Event()

        def measure_in_a_loop() -> None:
            with ZmqOracle(srv.endpoint, timeout=5, deadline=30) as other:
                X = np.array([[300.0, 1.0]] * 4)
                while not stop.is_set():
                    other.measure(X)

        thread = threading.Thread(target=measure_in_a_loop)
        thread.start()
        try:
            report = check_oracle(srv.endpoint, timeout=5)
        finally:
            stop.set()
            thread.join(30)
    assert report.passed, report.to_text()


def test_kit_takes_the_rigs_sample_points_from_yaml(endpoint: str, tmp_path: Path) -> None:
    points = tmp_path / "points.yaml"
    points.write_text("in_limits:\n  - [300, 1.0]\n  - [260, -4.5]\nout_of_limits:\n  - [300, 1.0]\n  - [300, 0.1]\nlarge_rows: 1000\n")
    report = check_oracle(endpoint, points=points, timeout=5)
    assert report.passed, report.to_text()
    assert "p = 0.1" in report["out_of_limits"].message
    assert report["large_batch"].message == "1000 rows"


def test_points_file_with_a_typo_names_the_key(tmp_path: Path) -> None:
    bad = tmp_path / "p.yaml"
    bad.write_text("in_limit:\n  - [1, 2]\n")
    with pytest.raises(ConfigError, match="did you mean `in_limits`"):
        load_points(bad)


def test_kit_fails_a_server_that_measures_a_duplicate_id_twice(monkeypatch: pytest.MonkeyPatch) -> None:
    srv = OracleServer(noisy_oracle(), "tcp://127.0.0.1:*")
    monkeypatch.setattr(srv, "_cache_get", lambda key: None)  # the cache forgets everything
    with srv:
        report = check_oracle(srv.endpoint, timeout=5)
    assert not report.passed
    assert not report["duplicate_request_id"].passed
    assert "executed 2 times" in report["duplicate_request_id"].message or "measured again" in report["duplicate_request_id"].message
    assert report["measure_roundtrip"].passed


def test_kit_fails_a_server_that_does_not_check_limits(monkeypatch: pytest.MonkeyPatch) -> None:
    srv = OracleServer(CallableOracle(lambda X: X[:, 0], SPEC), "tcp://127.0.0.1:*")
    monkeypatch.setattr(srv, "_validate_points", lambda message: np.array(message.arrays["X"], dtype=float))
    with srv:
        report = check_oracle(srv.endpoint, timeout=5)
    assert not report["out_of_limits"].passed


class SilentOnUnknownOps:
    """A broken server: answers only the operations it knows, and is silent on anything else."""

    def __init__(self) -> None:
        self.inner = OracleServer(noisy_oracle(), "inproc://unused")
        self.stop = threading.Event()
        self.ready = threading.Event()
        self.thread = threading.Thread(target=self.run, daemon=True)

    def run(self) -> None:
        ctx = zmq.Context()
        sock = ctx.socket(zmq.ROUTER)
        sock.setsockopt(zmq.LINGER, 0)
        sock.bind("tcp://127.0.0.1:*")
        self.endpoint = sock.getsockopt_string(zmq.LAST_ENDPOINT)
        self.ready.set()
        try:
            while not self.stop.is_set():
                if not sock.poll(50):
                    continue
                msg = sock.recv_multipart()
                try:
                    header = json.loads(msg[2])
                    op = header.get("op")
                except Exception:  # noqa: BLE001
                    continue  # silence on garbage too
                if op not in ("hello", "describe", "ping", "status", "measure"):
                    continue
                self.inner._on_message(sock, msg)  # the real server's answer for known operations
        finally:
            sock.close(0)
            ctx.term()


def test_kit_fails_a_server_that_is_silent_on_unknown_operations_and_does_not_hang() -> None:
    broken = SilentOnUnknownOps()
    broken.thread.start()
    broken.ready.wait(5)
    try:
        report = check_oracle(broken.endpoint, timeout=0.3)
    finally:
        broken.stop.set()
        broken.thread.join(5)
    assert report["hello"].passed
    assert not report["unknown_operation"].passed and "no reply" in report["unknown_operation"].message
    assert not report["malformed_json"].passed


def test_kit_against_nothing_says_unreachable_and_why(tmp_path: Path) -> None:
    with pytest.raises(OracleTimeout, match="unreachable: nothing is listening there"):
        check_oracle(f"ipc://{tmp_path}/nothing.sock", timeout=5)


@pytest.mark.skipif(not zmq.has("curve"), reason="libzmq without CURVE")
def test_kit_against_a_curve_server_without_keys_says_it_wants_keys(tmp_path: Path) -> None:
    import zmq.auth

    _, secret = zmq.auth.create_certificates(str(tmp_path), "server")
    with OracleServer(noisy_oracle(), "tcp://127.0.0.1:*", curve_secret_key=secret) as srv:
        with pytest.raises(OracleTimeout, match="wants CurveZMQ encryption"):
            check_oracle(srv.endpoint, timeout=5)


@pytest.mark.parametrize("as_json", [False, True])
def test_cli_says_unreachable_in_one_line_with_exit_status_4(tmp_path: Path, capsys: pytest.CaptureFixture[str], as_json: bool) -> None:
    assert main(["conformance", f"ipc://{tmp_path}/none.sock", "--timeout", "5", *(["--json"] if as_json else [])]) == 4
    captured = capsys.readouterr()
    assert captured.out == ""
    assert len(captured.err.strip().splitlines()) == 1 and "unreachable" in captured.err


def test_cli_json_report_and_exit_status(endpoint: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["conformance", endpoint, "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["passed"] is True and data["n_failed"] == 0


def _wait_for_line(proc: subprocess.Popen[str], marker: str) -> str:
    assert proc.stdout is not None
    line = proc.stdout.readline()
    assert marker in line, line + (proc.stderr.read() if proc.stderr else "")
    return line


@pytest.mark.integration
def test_kit_passes_the_plain_pyzmq_reference_server(tmp_path: Path) -> None:
    address = f"ipc://{tmp_path}/ref.sock"
    proc = subprocess.Popen([sys.executable, str(ROOT / "oracles" / "reference_server.py"), "--bind", address,
                             "--max-message-bytes", "4000000"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        _wait_for_line(proc, "reference server on")
        report = check_oracle(address, timeout=10)
        assert report.passed, report.to_text()
        assert report["oversize_message"].passed and not report["oversize_message"].skipped
    finally:
        proc.terminate()
        out, err = proc.communicate(timeout=10)
    assert proc.returncode == 0, err


def test_reference_server_imports_nothing_from_rcvgp() -> None:
    text = (ROOT / "oracles" / "reference_server.py").read_text()
    imports = [line for line in text.splitlines() if line.startswith(("import ", "from "))]
    assert not any("rcvgp" in line for line in imports), imports
    assert "pickle" not in text.replace("never pickle", "")


@pytest.mark.integration
def test_the_reference_server_refuses_a_source_address_that_hides_a_public_bind() -> None:
    proc = subprocess.run([sys.executable, str(ROOT / "oracles" / "reference_server.py"), "--bind", "tcp://127.0.0.1:1;*:5599"],
                          capture_output=True, text=True, timeout=30)
    assert proc.returncode != 0 and "loopback" in proc.stderr
