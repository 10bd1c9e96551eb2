"""A whole seeded Racing-CVGP run over the wire: identical to in-process, and survives a server kill."""

from __future__ import annotations

import hashlib
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from rcvgp.oracle import CallableOracle, OracleSpec, Variable
from rcvgp.search import SearchConfig, run_search
from rcvgp.transport.client import ZmqOracle
from rcvgp.transport.server import OracleServer

CONFIG = SearchConfig(population=20, generations=6, batch=32, n_trials=3, operators=("add", "mul", "sin"))
SPEC = OracleSpec((Variable("x0", 0.5, 2.0), Variable("x1", 0.5, 2.0)), name="test:wire-run")

# The oracle served by the subprocess: it logs a fingerprint of every batch it measures, and
# blocks for ever (a hung rig) on its 4th call while the file `block` exists.
RIG_MODULE = '''
import hashlib, os, time
import numpy as np
from rcvgp.oracle import CallableOracle, OracleSpec, Variable

HERE = os.path.dirname(os.path.abspath(__file__))
SPEC = OracleSpec((Variable("x0", 0.5, 2.0), Variable("x1", 0.5, 2.0)), name="test:wire-run")


def truth(X):
    return X[:, 0] * X[:, 1] + np.sin(X[:, 0])


def fn(X):
    log = os.path.join(HERE, "calls.log")
    n = sum(1 for _ in open(log)) if os.path.exists(log) else 0
    if n >= 3 and os.path.exists(os.path.join(HERE, "block")):
        os.remove(os.path.join(HERE, "block"))
        open(os.path.join(HERE, "blocked"), "w").close()
        time.sleep(1000)
    y = truth(X)
    with open(log, "a") as fh:
        fh.write(hashlib.sha1(np.ascontiguousarray(X).tobytes()).hexdigest() + "\\n")
    return y


def make():
    return CallableOracle(fn, SPEC)
'''


def truth(X: np.ndarray) -> np.ndarray:
    return X[:, 0] * X[:, 1] + np.sin(X[:, 0])


class Recording:
    def __init__(self) -> None:
        self.batches: list[str] = []

    def __call__(self, X: np.ndarray) -> np.ndarray:
        self.batches.append(hashlib.sha1(np.ascontiguousarray(X).tobytes()).hexdigest())
        return truth(X)


def _comparable(result: Any) -> dict[str, Any]:
    data = result.to_dict()
    data.pop("wall_seconds")
    return data


@pytest.mark.integration
def test_same_seeded_run_in_process_and_over_the_wire() -> None:
    local_fn, remote_fn = Recording(), Recording()
    in_process = run_search("racing", CallableOracle(local_fn, SPEC), CONFIG, seed=3)
    with OracleServer(CallableOracle(remote_fn, SPEC), "tcp://127.0.0.1:*") as srv, ZmqOracle(srv.endpoint) as remote:
        over_wire = run_search("racing", remote, CONFIG, seed=3)
    assert _comparable(over_wire) == _comparable(in_process)
    assert remote_fn.batches == local_fn.batches


def _start(tmp_path: Path, address: str) -> subprocess.Popen[str]:
    cmd = [sys.executable, "-m", "rcvgp", "serve", f"{tmp_path / 'rig_module.py'}:make", "--bind", address,
           "--journal", str(tmp_path / "journal"), "--quiet"]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=tmp_path)
    assert proc.stdout is not None
    line = proc.stdout.readline()
    assert "rcvgp serve:" in line, line + proc.stderr.read()
    return proc


@pytest.mark.integration
def test_kill_and_restart_the_server_mid_run_loses_and_repeats_nothing(tmp_path: Path) -> None:
    (tmp_path / "rig_module.py").write_text(RIG_MODULE)
    (tmp_path / "block").touch()
    address = f"ipc://{tmp_path}/rig.sock"
    procs = [_start(tmp_path, address)]
    errors: list[BaseException] = []

    def kill_and_restart() -> None:
        try:
            deadline = time.monotonic() + 60
            while not (tmp_path / "blocked").exists():
                assert time.monotonic() < deadline, "the rig never reached its 4th measurement"
                time.sleep(0.05)
            procs[0].send_signal(signal.SIGKILL)  # a crash, mid-measurement
            procs[0].wait(10)
            time.sleep(0.5)  # the client keeps retrying meanwhile
            procs.append(_start(tmp_path, address))
        except BaseException as exc:  # noqa: BLE001
            errors.append(exc)

    killer = threading.Thread(target=kill_and_restart)
    killer.start()
    try:
        with ZmqOracle(address, timeout=0.5, deadline=60) as remote:
            over_wire = run_search("racing", remote, CONFIG, seed=3)
            restarts = remote.restarts
    finally:
        killer.join(60)
        for p in procs:
            if p.poll() is None:
                p.terminate()
            p.communicate(timeout=10)
    assert not errors, errors
    assert restarts == 1
    local_fn = Recording()
    in_process = run_search("racing", CallableOracle(local_fn, SPEC), CONFIG, seed=3)
    assert _comparable(over_wire) == _comparable(in_process)
    measured = (tmp_path / "calls.log").read_text().split()
    assert measured == local_fn.batches  # every batch measured once, none lost, none repeated
    assert procs[-1].returncode == 0
    assert os.listdir(tmp_path / "journal")
