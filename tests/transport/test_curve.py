"""CurveZMQ: per-client keys through an allow-list; an unknown or revoked key is refused."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import zmq
import zmq.auth

from wire_helpers import SPEC, CountingFn, in_limits
from rcvgp.errors import ConfigError, OracleTimeout
from rcvgp.oracle import CallableOracle
from rcvgp.transport.client import ZmqOracle
from rcvgp.transport.server import OracleServer

pytestmark = pytest.mark.skipif(not zmq.has("curve"), reason="libzmq without CURVE")


@pytest.fixture
def keys(tmp_path: Path) -> dict[str, Path]:
    (tmp_path / "allowed").mkdir()
    out = {}
    for name in ("server", "alice", "mallory"):
        pub, sec = zmq.auth.create_certificates(str(tmp_path), name)
        out[name], out[name + "_secret"] = Path(pub), Path(sec)
    (tmp_path / "allowed" / "alice.key").write_bytes(out["alice"].read_bytes())
    out["allowed"] = tmp_path / "allowed"
    return out


def _client(endpoint: str, keys: dict[str, Path], who: str, **kw: Any) -> ZmqOracle:
    return ZmqOracle(endpoint, curve_server_key=keys["server"], curve_client_key=keys[who + "_secret"], **kw)


def test_allowed_client_measures_and_unknown_key_is_refused(keys: dict[str, Path]) -> None:
    oracle = CallableOracle(CountingFn(), SPEC)
    with OracleServer(oracle, "tcp://127.0.0.1:*", curve_secret_key=keys["server_secret"], curve_clients_dir=keys["allowed"]) as srv:
        with _client(srv.endpoint, keys, "alice") as alice:
            assert alice.measure(in_limits(4)).shape == (4,)
        with _client(srv.endpoint, keys, "mallory", timeout=1.0, deadline=3.0) as mallory:
            with pytest.raises(OracleTimeout, match="CURVE key"):
                mallory.describe()
        with ZmqOracle(srv.endpoint, timeout=0.3, deadline=1.0) as plain:  # no encryption at all
            with pytest.raises(OracleTimeout):
                plain.ping()


def test_one_client_can_be_revoked(keys: dict[str, Path]) -> None:
    oracle = CallableOracle(CountingFn(), SPEC)
    with OracleServer(oracle, "tcp://127.0.0.1:*", curve_secret_key=keys["server_secret"], curve_clients_dir=keys["allowed"]) as srv:
        with _client(srv.endpoint, keys, "alice") as alice:
            alice.ping()
        (keys["allowed"] / "alice.key").unlink()
        srv.reload_keys()
        with _client(srv.endpoint, keys, "alice", timeout=0.3, deadline=1.5) as alice:
            with pytest.raises(OracleTimeout):
                alice.ping()


def test_curve_allows_a_non_loopback_bind_and_needs_a_secret_key_file(keys: dict[str, Path]) -> None:
    oracle = CallableOracle(CountingFn(), SPEC)
    OracleServer(oracle, "tcp://0.0.0.0:5555", curve_secret_key=keys["server_secret"])  # accepted (not started)
    with pytest.raises(ConfigError, match="key_secret"):
        OracleServer(oracle, "tcp://127.0.0.1:*", curve_secret_key=keys["server"])


@pytest.mark.parametrize("make", ["missing", "a file"])
def test_a_curve_clients_folder_that_is_not_a_folder_is_refused_at_start(keys: dict[str, Path], tmp_path: Path, make: str) -> None:
    where = tmp_path / "no-such-folder"
    if make == "a file":
        where.write_text("alice")
    with pytest.raises(ConfigError, match="no-such-folder.*not a folder"):
        OracleServer(CallableOracle(CountingFn(), SPEC), "tcp://127.0.0.1:*", curve_secret_key=keys["server_secret"],
                     curve_clients_dir=where)


def test_a_client_key_file_that_is_missing_or_not_a_key_is_one_config_error(keys: dict[str, Path],
                                                                            tmp_path: Path) -> None:
    (tmp_path / "notes.txt").write_text("not a key\n")
    with pytest.raises(ConfigError, match=r"missing\.key: cannot read the server's public key .*: no such file"):
        ZmqOracle("tcp://127.0.0.1:5555", curve_server_key=tmp_path / "missing.key")
    with pytest.raises(ConfigError, match=r"notes\.txt: cannot read this client's key pair .*No public key found"):
        ZmqOracle("tcp://127.0.0.1:5555", curve_server_key=keys["server"], curve_client_key=tmp_path / "notes.txt")
