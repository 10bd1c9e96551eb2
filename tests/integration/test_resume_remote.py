"""A run against a `rcvgp serve` subprocess, stopped at several moments (Ctrl-C, SIGKILL, with a
request in flight or not) and resumed: the same result as an uninterrupted run, and the server's
own counters show that no point was measured twice, with and without `serve --journal`."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from rcvgp.journal import read_journal
from rcvgp.transport.client import ZmqOracle

# Small and seeded: about 6 measure requests for the search and 3 for its result.
EXPERIMENT: dict[str, Any] = {
    "name": "remote",
    "oracle": {"endpoint": None, "timeout": 5, "deadline": 60},
    "method": "racing",
    "operators": ["add", "mul", "sin"],
    "seed": 1,
    "search": {"population": 10, "generations": 3, "batch": 32, "n_trials": 2, "hall_of_fame": 5,
               "n_validation": 64, "n_test": 64},
    "output": "runs/remote",
}
SAME = ("expression", "nmse_test", "test_metrics", "exact", "schedule", "points_measured", "requests", "stopped",
        "equations")


class Server:
    """`rcvgp serve` of a simulated catalog oracle, slow enough (0.3 s per request) to be caught
    with a request in flight."""

    def __init__(self, tmp_path: Path, journal: bool) -> None:
        cmd = [sys.executable, "-m", "rcvgp", "serve", "sincos-3-2-2/1", "--bind", "tcp://127.0.0.1:*",
               "--latency", "0.3", "--quiet"]
        if journal:
            cmd += ["--journal", str(tmp_path / "server-journal")]
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        assert " on tcp://" in line, line + self.proc.stderr.read()  # type: ignore[union-attr]
        self.endpoint = line.split(" on ", 1)[1].split()[0]

    def counters(self) -> dict[str, Any]:
        with ZmqOracle(self.endpoint, timeout=5, deadline=20) as client:
            return client.status()

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
        self.proc.communicate(timeout=20)


@pytest.fixture
def serve(tmp_path: Path) -> Iterator[Callable[[bool], Server]]:
    servers: list[Server] = []

    def start(journal: bool = False) -> Server:
        servers.append(Server(tmp_path / f"server{len(servers)}", journal))
        return servers[-1]

    yield start
    for server in servers:
        server.stop()


def _experiment(folder: Path, endpoint: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    data = dict(EXPERIMENT, oracle=dict(EXPERIMENT["oracle"], endpoint=endpoint))
    (folder / "exp.yaml").write_text(yaml.safe_dump(data, sort_keys=False))
    return folder


def _rcvgp(folder: Path, *args: str) -> dict[str, Any]:
    done = subprocess.run([sys.executable, "-m", "rcvgp", "run", "exp.yaml", "--json", "--quiet", *args],
                          cwd=folder, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)  # type: ignore[no-any-return]


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, Any], dict[str, Any]]:
    """The result of a run that nobody stopped, and the counters of its server."""
    tmp = tmp_path_factory.mktemp("uninterrupted")
    server = Server(tmp, journal=False)
    try:
        result = _rcvgp(_experiment(tmp / "client", server.endpoint))
        return result, server.counters()
    finally:
        server.stop()


def _lines(journal: Path) -> list[bytes]:
    return journal.read_bytes().split(b"\n")[:-1] if journal.exists() else []


def in_flight(lines: list[bytes], server: Server) -> bool:
    """After the first answer, while the server measures a request (its answer not on record)."""
    return any(b'"y"' in line for line in lines) and server.counters()["state"] == "measuring"


def after_first_answer(lines: list[bytes], server: Server) -> bool:
    return len(lines) >= 2 and b'"y"' in lines[-1]


@pytest.mark.integration
@pytest.mark.parametrize(
    ("sig", "moment", "server_journal"),
    [
        (signal.SIGKILL, in_flight, False),
        (signal.SIGKILL, in_flight, True),
        (signal.SIGKILL, after_first_answer, False),
        (signal.SIGINT, after_first_answer, True),
    ],
    ids=["kill-in-flight", "kill-in-flight-server-journal", "kill-between-requests",
         "ctrl-c-between-requests-server-journal"],
)
def test_a_stopped_run_resumes_to_the_same_result_and_the_rig_measures_nothing_twice(
    tmp_path: Path, serve: Callable[[bool], Server], uninterrupted: tuple[dict[str, Any], dict[str, Any]],
    sig: signal.Signals, moment: Callable[[list[bytes], Server], bool], server_journal: bool,
) -> None:
    expected, expected_counters = uninterrupted
    server = serve(server_journal)
    folder = _experiment(tmp_path / "client", server.endpoint)
    journal = folder / "runs" / "remote" / "journal.jsonl"
    proc = subprocess.Popen([sys.executable, "-m", "rcvgp", "run", "exp.yaml", "--json", "--quiet"], cwd=folder,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        end = time.monotonic() + 120
        while not moment(_lines(journal), server):
            assert proc.poll() is None, f"the run ended before the moment to stop it: {proc.communicate()}"
            assert time.monotonic() < end, "the moment to stop the run never came"
            time.sleep(0.002)
        proc.send_signal(sig)
        _, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == (130 if sig == signal.SIGINT else -signal.SIGKILL), err

    resumed = _rcvgp(folder, "--resume")
    for key in SAME:
        assert resumed[key] == expected[key], key
    counters = server.counters()
    _, records, _ = read_journal(journal)
    asked = [r["X"] for r in records]
    assert len(set(asked)) == len(asked)  # the client asked for no set of points twice ...
    assert counters["points"] == sum(r["shape"][0] for r in records)  # ... and the rig measured each once
    if sig == signal.SIGKILL:  # nothing measured to end the killed run: exactly the uninterrupted count
        assert counters["points"] == expected_counters["points"] == expected["points_measured"]
        assert counters["measurements"] == expected_counters["measurements"]
    if sig == signal.SIGKILL and moment is in_flight:  # answered from the server's reply cache
        assert counters["cache_hits"] >= 1
