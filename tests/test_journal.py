"""The measurement journal: written before use, replayed bitwise on resume, robust to a torn write."""

from __future__ import annotations

import json

import numpy as np
import pytest

from rcvgp.errors import ConfigError, OracleError, RemoteError
from rcvgp.journal import JournalingOracle, read_journal
from rcvgp.oracle import CallableOracle, DataOracle, OracleSpec, Variable, design_points

SPEC = OracleSpec(
    variables=(Variable("x0", 0.1, 10.0, "loguniform"), Variable("x1", -1.0, 1.0)),
    name="test:counting",
)


class CountingOracle(DataOracle):
    """y = x0 * x1, NaN where x1 < -0.9; counts the points it measured."""

    def __init__(self, spec: OracleSpec = SPEC) -> None:
        self.spec = spec
        self.points = 0
        self.requests = 0
        self.fail_on: set[int] = set()  # request numbers (0-based) that raise

    def describe(self) -> OracleSpec:
        return self.spec

    def measure(self, X: np.ndarray) -> np.ndarray:
        n = self.requests
        self.requests += 1
        if n in self.fail_on:
            raise RemoteError("RIG_FAULT", "shutter stuck", retryable=True, details={"n": n})
        self.points += X.shape[0]
        y = X[:, 0] * X[:, 1]
        return np.where(X[:, 1] < -0.9, np.nan, y)


def _requests(seed: int, n: int, rows: int = 7) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [design_points(SPEC, rows, rng) for _ in range(n)]


def _run(oracle: DataOracle, requests: list[np.ndarray]) -> list[np.ndarray]:
    return [oracle.measure(X) for X in requests]


def test_each_answer_is_on_disk_before_measure_returns(tmp_path):
    inner = CountingOracle()
    path = tmp_path / "journal.jsonl"
    journal = JournalingOracle(inner, path, fingerprint="abc")
    X = _requests(0, 1)[0]
    y = journal.measure(X)
    header, records, _ = read_journal(path)  # read while the journal is still open
    assert header["fingerprint"] == "abc" and header["spec"] == SPEC.to_dict()
    assert len(records) == 1 and records[0]["shape"] == [7, 2]
    journal.close()


def test_resume_replays_bitwise_and_measures_nothing_again(tmp_path):
    path = tmp_path / "journal.jsonl"
    requests = _requests(1, 6)
    requests[2][0, 1] = -0.95  # one point the oracle cannot measure: NaN must survive
    with JournalingOracle(CountingOracle(), path) as first:
        first_answers = _run(first, requests[:4])
    inner = CountingOracle()
    with JournalingOracle(inner, path, resume=True) as second:
        answers = _run(second, requests)
        stats = second.stats
    assert inner.points == 2 * 7  # only the two requests the journal did not hold
    assert stats.replayed_points == 4 * 7 and stats.replayed_requests == 4
    assert stats.live_points == 2 * 7 and stats.live_requests == 2
    for a, b in zip(first_answers, answers[:4]):
        assert a.tobytes() == b.tobytes()
    assert np.isnan(answers[2][0])
    _, records, _ = read_journal(path)
    assert [r["i"] for r in records] == list(range(6))


def test_torn_last_record_is_ignored_and_measured_again(tmp_path):
    path = tmp_path / "journal.jsonl"
    requests = _requests(2, 3)
    with JournalingOracle(CountingOracle(), path) as first:
        _run(first, requests)
    data = path.read_bytes()
    path.write_bytes(data[: len(data) - 40])  # killed while writing the third record
    inner = CountingOracle()
    with JournalingOracle(inner, path, resume=True) as second:
        _run(second, requests)
        assert second.stats.replayed_requests == 2 and second.stats.live_requests == 1
    assert inner.requests == 1
    header, records, _ = read_journal(path)
    assert len(records) == 3 and header is not None


def test_torn_header_starts_a_new_journal(tmp_path):
    path = tmp_path / "journal.jsonl"
    path.write_bytes(b'{"journal": "rcv')
    with JournalingOracle(CountingOracle(), path, resume=True) as journal:
        journal.measure(_requests(3, 1)[0])
        assert journal.stats.live_requests == 1
    header, records, _ = read_journal(path)
    assert header is not None and len(records) == 1


def test_damaged_line_in_the_middle_is_an_error(tmp_path):
    path = tmp_path / "journal.jsonl"
    with JournalingOracle(CountingOracle(), path) as first:
        _run(first, _requests(4, 3))
    lines = path.read_bytes().split(b"\n")
    lines[2] = b"{garbage"
    path.write_bytes(b"\n".join(lines))
    with pytest.raises(ConfigError, match="line 3 is damaged"):
        JournalingOracle(CountingOracle(), path, resume=True)


def _run_reporting(oracle: JournalingOracle, requests: list[np.ndarray]) -> list[np.ndarray]:
    """Measure each request, then report progress, as the runner does after each generation."""
    answers = []
    for X in requests:
        answers.append(oracle.measure(X))
        oracle.checkpoint()
    return answers


def test_a_different_request_on_resume_is_an_error(tmp_path):
    path = tmp_path / "journal.jsonl"
    with JournalingOracle(CountingOracle(), path) as first:
        _run_reporting(first, _requests(5, 2))
    inner = CountingOracle()
    with JournalingOracle(inner, path, resume=True) as second:
        with pytest.raises(ConfigError, match="asks other set points than the journal's record 0"):
            second.measure(_requests(6, 1)[0])
    assert inner.requests == 0


def test_resume_of_another_experiment_is_refused(tmp_path):
    path = tmp_path / "journal.jsonl"
    JournalingOracle(CountingOracle(), path, fingerprint="one").close()
    with pytest.raises(ConfigError, match="different experiment"):
        JournalingOracle(CountingOracle(), path, resume=True, fingerprint="two")
    other = OracleSpec(variables=(Variable("x0", 0.1, 10.0), Variable("x1", -1.0, 1.0)), name="test:other")
    with pytest.raises(ConfigError, match="describes itself differently"):
        JournalingOracle(CountingOracle(other), path, resume=True, fingerprint="one")


def test_existing_journal_without_resume_is_refused(tmp_path):
    path = tmp_path / "journal.jsonl"
    JournalingOracle(CountingOracle(), path).close()
    with pytest.raises(ConfigError, match="--resume"):
        JournalingOracle(CountingOracle(), path)


def test_an_error_the_search_survived_is_replayed_the_last_one_is_retried(tmp_path):
    path = tmp_path / "journal.jsonl"
    requests = _requests(7, 4)
    inner = CountingOracle()
    inner.fail_on = {1, 3}
    with JournalingOracle(inner, path) as first:
        first.measure(requests[0])
        with pytest.raises(RemoteError):
            first.measure(requests[1])
        first.measure(requests[2])
        with pytest.raises(RemoteError):  # the error that ended the run
            first.measure(requests[3])
    retry = CountingOracle()
    with JournalingOracle(retry, path, resume=True) as second:
        second.measure(requests[0])
        with pytest.raises(RemoteError) as info:
            second.measure(requests[1])
        assert info.value.code == "RIG_FAULT" and info.value.retryable and info.value.details == {"n": 1}
        second.measure(requests[2])
        second.measure(requests[3])  # measured live this time
    assert retry.requests == 1
    _, records, _ = read_journal(path)  # the error that ended the first run stays on record
    assert [("error" in r, r["run"]) for r in records] == [(False, 0), (True, 0), (False, 0), (True, 0), (False, 1)]


def test_readback_is_journalled_and_replayed(tmp_path):
    class Readback(CountingOracle):
        def measure_readback(self, X):
            return X + 1e-3, self.measure(X)

    path = tmp_path / "journal.jsonl"
    X = _requests(8, 1)[0]
    with JournalingOracle(Readback(), path) as first:
        reached, y = first.measure_readback(X)
    inner = Readback()
    with JournalingOracle(inner, path, resume=True) as second:
        reached2, y2 = second.measure_readback(X)
    assert inner.requests == 0
    assert reached2.tobytes() == reached.tobytes() and y2.tobytes() == y.tobytes()


def test_journal_lines_are_plain_json(tmp_path):
    path = tmp_path / "journal.jsonl"
    oracle = CallableOracle(lambda X: X[:, 0], SPEC)
    with JournalingOracle(oracle, path) as journal:
        journal.measure(_requests(9, 1)[0])
    for line in path.read_text().splitlines():
        json.loads(line)
    with pytest.raises(OracleError):  # the wrapped oracle's own checks still apply
        with JournalingOracle(oracle, tmp_path / "other.jsonl") as journal:
            journal.measure(np.full((2, 2), 100.0))


# -- the search's path and the tail of an interrupted run ---------------------------------------------


def test_the_tail_of_an_interrupted_run_is_kept_and_skipped_by_the_resumed_search(tmp_path):
    """Ctrl-C: the search reports, stops, and measures its validation and test points (the tail);
    resumed, it asks other questions there. The tail is neither an error nor measured again."""
    path = tmp_path / "journal.jsonl"
    search = _requests(10, 5)
    finish = _requests(11, 2)  # what the interrupted run measured to score its result
    with JournalingOracle(CountingOracle(), path) as first:
        _run_reporting(first, search[:3])  # the third report asked the search to stop
        first_finish = _run(first, finish)
    inner = CountingOracle()
    with JournalingOracle(inner, path, resume=True) as second:
        _run_reporting(second, search)
        assert second.stats.replayed_requests == 3 and second.stats.live_requests == 2
        final = _run(second, finish[1:])  # asked again after all: replayed, not measured
    assert inner.requests == 2  # only the two search requests the journal did not hold
    assert final[0].tobytes() == first_finish[1].tobytes()
    _, records, _ = read_journal(path)
    assert len(records) == 3 + 2 + 2  # nothing thrown away: the first run's tail is still there
    assert [r["run"] for r in records] == [0] * 5 + [1] * 2


def test_a_tail_is_replayed_by_content_when_the_resumed_search_asks_it(tmp_path):
    """Killed after measuring a request it had not reported on yet: the resumed search asks it
    again and gets the journalled answer."""
    path = tmp_path / "journal.jsonl"
    search = _requests(12, 4)
    with JournalingOracle(CountingOracle(), path) as first:
        _run_reporting(first, search[:2])
        first.measure(search[2])  # then SIGKILL
    inner = CountingOracle()
    with JournalingOracle(inner, path, resume=True) as second:
        _run_reporting(second, search)
    assert inner.requests == 1


def test_the_same_set_points_asked_twice_get_their_two_answers_in_order(tmp_path):
    """Replicates at one set point (to estimate the noise) are distinct measurements."""
    path = tmp_path / "journal.jsonl"
    replicate = np.tile(_requests(13, 1, rows=1)[0], (4, 1))
    noisy = CountingOracle()
    with JournalingOracle(CallableOracle(lambda X: X[:, 0] + noisy.requests, SPEC), path) as first:
        answers = []
        for _ in range(3):
            answers.append(first.measure(replicate))
            noisy.requests += 1
    with JournalingOracle(CountingOracle(), path, resume=True) as second:
        again = [second.measure(replicate) for _ in range(3)]
    assert [a.tobytes() for a in again] == [a.tobytes() for a in answers]
    assert len({a.tobytes() for a in answers}) == 3


def test_a_second_interruption_and_resume_still_replays_everything(tmp_path):
    path = tmp_path / "journal.jsonl"
    search = _requests(14, 6)
    tails = [_requests(15, 2), _requests(16, 2)]
    with JournalingOracle(CountingOracle(), path) as first:
        _run_reporting(first, search[:2])
        _run(first, tails[0])
    with JournalingOracle(CountingOracle(), path, resume=True) as second:
        _run_reporting(second, search[:4])
        _run(second, tails[1])
    inner = CountingOracle()
    with JournalingOracle(inner, path, resume=True) as third:
        _run_reporting(third, search)
        assert third.stats.replayed_requests == 4
    assert inner.requests == 2
