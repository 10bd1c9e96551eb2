"""`rcvgp serve` and `rcvgp keys` as a user runs them: subprocesses, signals, exit codes."""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from rcvgp.cli import main
from rcvgp.transport.client import ZmqOracle

RIG = '''
import numpy as np
from rcvgp.oracle import DataOracle, OracleSpec, Variable


class Rig(DataOracle):
    def describe(self):
        return OracleSpec((Variable("v", 1.0, 10.0, unit="V"),), name="rig:test")

    def measure(self, X):
        return 2.0 * X[:, 0]
'''


def _serve(tmp_path: Path, *args: str) -> subprocess.Popen[str]:
    (tmp_path / "myrig.py").write_text(RIG)
    return subprocess.Popen([sys.executable, "-m", "rcvgp", "serve", f"{tmp_path / 'myrig.py'}:Rig", *args],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


@pytest.mark.integration
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_serve_a_rig_class_and_stop_cleanly_on_a_signal(tmp_path: Path, sig: signal.Signals) -> None:
    address = f"ipc://{tmp_path}/rig.sock"
    proc = _serve(tmp_path, "--bind", address, "--quiet")
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert "rig:test" in line and address in line, line + proc.stderr.read()  # type: ignore[union-attr]
        with ZmqOracle(address, timeout=2, deadline=20) as remote:
            assert remote.measure(np.array([[3.0]])).tolist() == [6.0]
        proc.send_signal(sig)
        out, err = proc.communicate(timeout=20)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 0, err
    assert "stopped" in out


@pytest.mark.integration
def test_serve_refuses_a_public_bind_without_curve(tmp_path: Path) -> None:
    proc = _serve(tmp_path, "--bind", "tcp://0.0.0.0:5999")
    out, err = proc.communicate(timeout=30)
    assert proc.returncode == 2
    assert "--insecure" in err and "CURVE" in err


def test_serve_names_a_missing_attribute(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "myrig.py").write_text(RIG)
    assert main(["serve", f"{tmp_path / 'myrig.py'}:Nope", "--bind", f"ipc://{tmp_path}/x.sock"]) == 2
    assert "has no attribute 'Nope'" in capsys.readouterr().err


def test_keys_writes_key_pairs_and_refuses_to_overwrite(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["keys", str(tmp_path), "--name", "server", "--name", "alice"]) == 0
    for name in ("server.key", "server.key_secret", "alice.key", "alice.key_secret"):
        assert (tmp_path / name).is_file()
    assert (tmp_path / "alice.key_secret").stat().st_mode & 0o077 == 0
    assert main(["keys", str(tmp_path)]) == 2
    assert "--force" in capsys.readouterr().err


def test_keys_are_written_private_and_the_public_key_follows_the_umask(tmp_path: Path, monkeypatch) -> None:
    import os

    import zmq.auth

    create, umasks = zmq.auth.create_certificates, []

    def watched(*args, **kwargs):
        umasks.append(os.umask(0o077))  # the umask the key files are created under
        os.umask(umasks[-1])
        return create(*args, **kwargs)

    monkeypatch.setattr(zmq.auth, "create_certificates", watched)
    before = os.umask(0o022)
    try:
        assert main(["keys", str(tmp_path)]) == 0
    finally:
        os.umask(before)
    assert umasks == [0o077]  # no moment when the secret key is readable by others
    assert (tmp_path / "server.key").stat().st_mode & 0o777 == 0o644
    assert (tmp_path / "server.key_secret").stat().st_mode & 0o777 == 0o600


def _refused(proc: subprocess.Popen) -> str:
    """The stderr of a ``serve`` that must exit 2 at start-up; killed if it served instead."""
    try:
        out, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:  # it served: stop it before failing
            proc.kill()
            proc.communicate()
    assert proc.returncode == 2, out + err
    return err


@pytest.mark.integration
@pytest.mark.parametrize("bind", ["tcp://127.0.0.1:1;0.0.0.0:{port}", "tcp://127.0.0.1:0;*:{port}"])
def test_serve_refuses_a_source_address_that_hides_a_public_bind(tmp_path: Path, bind: str) -> None:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    err = _refused(_serve(tmp_path, "--bind", bind.format(port=port)))
    assert "--insecure" in err and len(err.strip().splitlines()) == 1


@pytest.mark.integration
def test_serve_refuses_a_missing_curve_clients_folder_in_one_line(tmp_path: Path) -> None:
    assert main(["keys", str(tmp_path / "keys")]) == 0
    proc = _serve(tmp_path, "--bind", f"ipc://{tmp_path}/rig.sock", "--curve-secret", str(tmp_path / "keys" / "server.key_secret"),
                  "--curve-clients", str(tmp_path / "allowed"))
    err = _refused(proc)
    assert len(err.strip().splitlines()) == 1 and "--curve-clients" in err and "allowed" in err


@pytest.mark.integration
def test_serve_passes_the_cache_bound_and_the_measure_timeout_on(tmp_path: Path) -> None:
    address = f"ipc://{tmp_path}/rig.sock"
    proc = _serve(tmp_path, "--bind", address, "--quiet", "--reply-cache-bytes", "5000000", "--measure-timeout", "7.5")
    try:
        assert proc.stdout is not None and "rig:test" in proc.stdout.readline()
        with ZmqOracle(address, timeout=2, deadline=20) as remote:
            limits = remote.hello()["limits"]
    finally:
        proc.terminate()
        proc.communicate(timeout=20)
    assert limits["reply_cache_bytes"] == 5_000_000 and limits["measure_timeout"] == 7.5


@pytest.mark.parametrize("flag, value", [("--measure-timeout", "-1"), ("--measure-timeout", "soon"), ("--reply-cache-bytes", "-5")])
def test_serve_names_a_bad_bound(tmp_path: Path, capsys: pytest.CaptureFixture[str], flag: str, value: str) -> None:
    (tmp_path / "myrig.py").write_text(RIG)
    try:
        code = main(["serve", f"{tmp_path / 'myrig.py'}:Rig", "--bind", f"ipc://{tmp_path}/x.sock", flag, value])
    except SystemExit as exc:  # argparse's own refusal
        code = exc.code  # type: ignore[assignment]
    assert code == 2 and flag in capsys.readouterr().err


RIG_WITH_ARGS = '''
from rcvgp.oracle import DataOracle, OracleSpec, Variable


class Rig(DataOracle):
    def __init__(self, high: float = 10.0, name: str = "rig:test", *, gain: float = 2.0, enabled: bool = True):
        if high <= 1.0:
            raise ValueError(f"high must be above 1, got {high}")
        self.spec = OracleSpec((Variable("v", 1.0, high, unit="V"),), name=name)
        self.gain, self.enabled = gain, enabled

    def describe(self):
        return self.spec

    def measure(self, X):
        return self.gain * X[:, 0] if self.enabled else 0 * X[:, 0]


def make_rig(port):
    return Rig(name=f"rig:{port}")


rig = Rig()
'''


@pytest.mark.integration
def test_serve_passes_arg_to_the_rig_class_and_ping_shows_it(tmp_path: Path) -> None:
    (tmp_path / "argrig.py").write_text(RIG_WITH_ARGS)
    address = f"ipc://{tmp_path}/rig.sock"
    proc = subprocess.Popen([sys.executable, "-m", "rcvgp", "serve", f"{tmp_path / 'argrig.py'}:Rig", "--bind", address,
                             "--quiet", "--arg", "high=2e1", "--arg", "name=rig:bench-3", "--arg", "gain=0.5"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert "rig:bench-3" in line, line + proc.stderr.read()  # type: ignore[union-attr]
        ping = subprocess.run([sys.executable, "-m", "rcvgp", "ping", address], capture_output=True, text=True,
                              timeout=60)
        with ZmqOracle(address, timeout=2, deadline=20) as remote:
            y = remote.measure(np.array([[4.0]]))
    finally:
        proc.terminate()
        proc.communicate(timeout=20)
    assert ping.returncode == 0, ping.stderr
    assert "oracle      rig:bench-3" in ping.stdout and "v  [1, 20]  V  uniform" in ping.stdout
    assert y.tolist() == [2.0]


@pytest.mark.parametrize("args, expected", [
    (["--arg", "high"], "--arg high: write it as NAME=VALUE"),
    (["--arg", "hihg=3"], "--arg hihg: Rig has no parameter 'hihg'; did you mean `high`? (its parameters: high, name, "
                          "gain, enabled)"),
    (["--arg", "high=0.5"], "Rig(high=0.5) refused its arguments: high must be above 1, got 0.5"),
    (["--arg", "high=[1, 2]"], "--arg high=[1, 2]: expected a number, true/false, null or a string"),
    (["--arg", "high=abc"], "--arg high: expected float, got 'abc'"),
    (["--arg", "name=3"], "--arg name: expected str, got 3; quote it to pass a string"),
    (["--arg", "enabled=1"], "--arg enabled: expected bool, got 1"),
    (["--arg", "gain=1", "--arg", "gain=2"], "--arg gain: given twice"),
])
def test_serve_names_a_bad_arg_in_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str], args: list[str],
                                           expected: str) -> None:
    (tmp_path / "argrig.py").write_text(RIG_WITH_ARGS)
    assert main(["serve", f"{tmp_path / 'argrig.py'}:Rig", "--bind", f"ipc://{tmp_path}/x.sock", *args]) == 2
    err = capsys.readouterr().err
    assert expected in err and len(err.splitlines()) == 1, err


@pytest.mark.parametrize("ident, args, expected", [
    ("argrig.py:make_rig", [], "make_rig needs --arg port=VALUE"),
    ("argrig.py:rig", ["--arg", "high=3"], "rig is an instance, made already: --arg needs a class or a factory"),
    ("sincos-3-2-2/1", ["--arg", "high=3"], "sincos-3-2-2/1 is a catalog oracle"),
])
def test_serve_says_when_arg_is_missing_or_has_nowhere_to_go(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                              ident: str, args: list[str], expected: str) -> None:
    (tmp_path / "argrig.py").write_text(RIG_WITH_ARGS)
    ident = f"{tmp_path}/{ident}" if ".py:" in ident else ident
    assert main(["serve", ident, "--bind", f"ipc://{tmp_path}/x.sock", *args]) == 2
    err = capsys.readouterr().err
    assert expected in err and len(err.splitlines()) == 1, err


def test_arg_values_are_read_as_yaml_scalars() -> None:
    from rcvgp.commands.serve import parse_args

    assert parse_args(["a=3", "b=1e-3", "c=true", "d=null", "e=COM3:9600", 'f="8"', "g=-2.5E2", "h=hello world"]) == {
        "a": 3, "b": 0.001, "c": True, "d": None, "e": "COM3:9600", "f": "8", "g": -250.0, "h": "hello world"}
