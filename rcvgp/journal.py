"""The measurement journal: every answer an oracle gives is on disk before the search sees it.

:class:`JournalingOracle` wraps any :class:`~rcvgp.oracle.DataOracle`. Each request's set
points and the oracle's answer are appended to a journal file as one line of JSON, flushed and
fsync'ed before ``measure`` returns. Arrays travel as base64 of their little-endian float64
bytes, with their shapes, so a replayed answer is bitwise the measured one (NaN included).

The file::

    {"journal": "rcvgp", "version": 1, "fingerprint": "...", "spec": {...}, "created": "..."}
    {"i": 0, "op": "measure", "shape": [256, 3], "X": "<base64>", "y": "<base64>"}
    {"i": 1, "op": "readback", "shape": [256, 3], "X": "...", "X_reached": "...", "y": "..."}
    {"i": 2, "op": "measure", "shape": [5, 3], "X": "...", "error": {"type": "OracleError", "message": "..."}}

On resume the journal is replayed: as long as it has records, a request whose X is bitwise the
next record's X gets the journalled answer without touching the real oracle (a seeded search
asks the same questions again). The end of the journal switches to live measuring; a request
that differs from the next record is an error, since the search is then not the one that wrote
the journal. A torn last line (the process killed mid-write) is dropped. An oracle error is
journalled too and replayed where the search went on after it; an error on the last record
(the one that ended the run) is retried live instead.
"""

from __future__ import annotations

import base64
import json
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from rcvgp import errors
from rcvgp.errors import ConfigError, OracleError
from rcvgp.oracle import DataOracle, OracleSpec

__all__ = ["JOURNAL_NAME", "JOURNAL_VERSION", "JournalStats", "JournalingOracle", "read_journal"]

#: File name of the journal inside a run's output folder.
JOURNAL_NAME = "journal.jsonl"
#: Version of the journal's line format.
JOURNAL_VERSION = 1


@dataclass(frozen=True)
class JournalStats:
    """How many points and requests were replayed from the journal and measured live."""

    replayed_points: int
    replayed_requests: int
    live_points: int
    live_requests: int

    def to_dict(self) -> dict[str, int]:
        return {
            "replayed_points": self.replayed_points,
            "replayed_requests": self.replayed_requests,
            "live_points": self.live_points,
            "live_requests": self.live_requests,
        }


def read_journal(path: str | Path) -> tuple[dict[str, Any] | None, list[dict[str, Any]], int]:
    """Read a journal: its header, its complete records and the byte length they span.

    A last line that is incomplete (no newline) or unreadable is a torn write and is left out;
    the returned length excludes it, so the file can be truncated there before appending.

    Raises
    ------
    ConfigError
        When a line before the last is damaged, or the file is not an rcvgp journal.
    """
    header, records, ends = _scan(Path(path))
    return header, records, ends[-1] if ends else 0


def _scan(p: Path) -> tuple[dict[str, Any] | None, list[dict[str, Any]], list[int]]:
    """Header, complete records, and the byte offset after the header and after each record."""
    data = p.read_bytes()
    lines = data.split(b"\n")
    # After a final newline split() leaves b"": every element but the last ended with "\n".
    complete, tail = lines[:-1], lines[-1]
    header: dict[str, Any] | None = None
    records: list[dict[str, Any]] = []
    ends: list[int] = []
    good_length = 0
    for n, raw in enumerate(complete):
        try:
            obj = json.loads(raw)
            if not isinstance(obj, dict):
                raise ValueError("not an object")
        except ValueError as exc:
            if n == len(complete) - 1 and not tail:
                break  # a damaged last line: torn
            raise ConfigError(
                f"{p}: line {n + 1} is damaged ({exc}); the journal cannot be replayed past it; "
                "start a new run in another output folder"
            ) from exc
        if n == 0:
            if obj.get("journal") != "rcvgp":
                raise ConfigError(f"{p}: not an rcvgp journal (first line has no \"journal\": \"rcvgp\")")
            if obj.get("version") != JOURNAL_VERSION:
                raise ConfigError(
                    f"{p}: journal version {obj.get('version')!r}, this rcvgp reads version {JOURNAL_VERSION}"
                )
            header = obj
        else:
            records.append(obj)
        good_length += len(raw) + 1
        ends.append(good_length)
    return header, records, ends


class JournalingOracle(DataOracle):
    """Wrap an oracle so that each request and its answer are journalled before they are used.

    Parameters
    ----------
    oracle : DataOracle
        The real oracle.
    path : str or Path
        The journal file. Without ``resume`` it must not exist yet (it is created); with
        ``resume`` an existing journal is replayed first, then appended to.
    resume : bool
        Replay an existing journal before measuring live.
    fingerprint : str
        Identifies the experiment that writes the journal; resuming with another fingerprint is
        an error (the search would ask other questions).

    Raises
    ------
    ConfigError
        When the journal exists and ``resume`` is false, or it belongs to another experiment or
        oracle, or it is damaged.
    """

    def __init__(self, oracle: DataOracle, path: str | Path, resume: bool = False, fingerprint: str = "") -> None:
        self._oracle = oracle
        self.path = Path(path)
        self._fingerprint = fingerprint
        self._records: list[dict[str, Any]] = []
        self._next = 0  # index of the next record to replay
        self._counts = {"replayed_points": 0, "replayed_requests": 0, "live_points": 0, "live_requests": 0}
        spec = oracle.describe()
        if self.path.exists() and resume:
            header, records, ends = _scan(self.path)
            if header is None:  # killed before the header was complete
                self.path.unlink()
            else:
                self._check_header(header, spec)
                if records and "error" in records[-1]:
                    # The error that ended the interrupted run: that request is retried live.
                    records.pop()
                self._records = records
                with open(self.path, "r+b") as fh:  # drop a torn line (and that error) before appending
                    fh.truncate(ends[len(records)])
        elif self.path.exists():
            raise ConfigError(
                f"{self.path}: a journal already exists; resume that run with --resume, or use another "
                "output folder"
            )
        self._n_records = len(self._records)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        new = not self.path.exists()
        self._fh = open(self.path, "ab")
        if new:
            self._append({
                "journal": "rcvgp",
                "version": JOURNAL_VERSION,
                "fingerprint": fingerprint,
                "spec": spec.to_dict(),
                "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
            })

    # -- DataOracle -----------------------------------------------------------------------------

    def describe(self) -> OracleSpec:
        return self._oracle.describe()

    def measure(self, X: np.ndarray) -> np.ndarray:
        X = np.ascontiguousarray(X, dtype=np.float64)
        replayed = self._replay("measure", X)
        if replayed is not None:
            return replayed[1]
        try:
            y = np.asarray(self._oracle.measure(X), dtype=np.float64)
        except OracleError as exc:
            self._append(self._error_record("measure", X, exc))
            raise
        self._append(self._record("measure", X, y))
        self._count("live", X.shape[0])
        return y

    def measure_readback(self, X: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        X = np.ascontiguousarray(X, dtype=np.float64)
        replayed = self._replay("readback", X)
        if replayed is not None:
            return replayed
        try:
            X_reached, y = self._oracle.measure_readback(X)
        except OracleError as exc:
            self._append(self._error_record("readback", X, exc))
            raise
        X_reached = np.asarray(X_reached, dtype=np.float64)
        y = np.asarray(y, dtype=np.float64)
        self._append(self._record("readback", X, y, X_reached))
        self._count("live", X.shape[0])
        return X_reached, y

    def close(self) -> None:
        if not self._fh.closed:
            self._fh.close()
        self._oracle.close()

    # -- state ----------------------------------------------------------------------------------

    @property
    def stats(self) -> JournalStats:
        """Points and requests replayed from the journal and measured live so far."""
        return JournalStats(**self._counts)

    @property
    def replaying(self) -> bool:
        """Whether journalled records are still waiting to be replayed."""
        return self._next < len(self._records)

    @property
    def inner(self) -> DataOracle:
        """The wrapped oracle."""
        return self._oracle

    def __repr__(self) -> str:
        return f"JournalingOracle({self._oracle!r}, path={str(self.path)!r})"

    # -- internals ------------------------------------------------------------------------------

    def _check_header(self, header: dict[str, Any], spec: OracleSpec) -> None:
        if self._fingerprint and header.get("fingerprint") != self._fingerprint:
            raise ConfigError(
                f"{self.path}: this journal was written by a different experiment (oracle, method, seed or "
                "search settings changed); resume with the original settings, or start over in another "
                "output folder"
            )
        if header.get("spec") != spec.to_dict():
            raise ConfigError(
                f"{self.path}: the oracle now describes itself differently than when the journal was "
                f"written ({header.get('spec', {}).get('name')!r} then, {spec.name!r} now); its measurements "
                "cannot be reused; start over in another output folder"
            )

    def _replay(self, op: str, X: np.ndarray) -> tuple[np.ndarray, np.ndarray] | None:
        if self._next >= len(self._records):
            return None
        rec = self._records[self._next]
        if rec.get("op") != op or tuple(rec.get("shape", ())) != X.shape or base64.b64decode(rec["X"]) != _bytes(X):
            raise ConfigError(
                f"{self.path}: request {self._next + 1} of the resumed run differs from the journalled one "
                f"(shape {X.shape} vs {tuple(rec.get('shape', ()))}); the search no longer asks the same "
                "questions (different rcvgp version or settings?); start over in another output folder"
            )
        self._next += 1
        if "error" in rec:
            raise _rebuild_error(rec["error"])
        y = np.frombuffer(base64.b64decode(rec["y"]), dtype="<f8").astype(np.float64)
        X_reached = (
            np.frombuffer(base64.b64decode(rec["X_reached"]), dtype="<f8").astype(np.float64).reshape(X.shape)
            if "X_reached" in rec else X.copy()
        )
        self._count("replayed", X.shape[0])
        return X_reached, y

    def _count(self, kind: str, n_points: int) -> None:
        self._counts[f"{kind}_points"] += int(n_points)
        self._counts[f"{kind}_requests"] += 1

    def _record(self, op: str, X: np.ndarray, y: np.ndarray, X_reached: np.ndarray | None = None) -> dict[str, Any]:
        rec: dict[str, Any] = {"i": self._n_records, "op": op, "shape": list(X.shape), "X": _b64(X)}
        if X_reached is not None:
            rec["X_reached"] = _b64(X_reached)
        rec["y_shape"] = list(y.shape)
        rec["y"] = _b64(y)
        return rec

    def _error_record(self, op: str, X: np.ndarray, exc: OracleError) -> dict[str, Any]:
        error: dict[str, Any] = {"type": type(exc).__name__, "message": str(exc)}
        if isinstance(exc, errors.RemoteError):  # keeps the code, so a replay raises the same type
            error.update(code=exc.code, message=exc.message, retryable=exc.retryable, details=exc.details)
        return {"i": self._n_records, "op": op, "shape": list(X.shape), "X": _b64(X), "error": error}

    def _append(self, obj: dict[str, Any]) -> None:
        line = json.dumps(obj, separators=(",", ":"), allow_nan=False).encode() + b"\n"
        self._fh.write(line)
        self._fh.flush()
        os.fsync(self._fh.fileno())
        if "journal" not in obj:
            self._n_records += 1


def _bytes(a: np.ndarray) -> bytes:
    return np.ascontiguousarray(a, dtype="<f8").tobytes()


def _b64(a: np.ndarray) -> str:
    return base64.b64encode(_bytes(a)).decode("ascii")


def _rebuild_error(error: dict[str, Any]) -> OracleError:
    name = str(error.get("type", "OracleError"))
    message = str(error.get("message", ""))
    if "code" in error:  # a server's error reply (RemoteError or a subclass)
        remote = errors.RemoteError(str(error["code"]), message, bool(error.get("retryable", False)),
                                    error.get("details") or {})
        if name != "RemoteError":
            try:
                from rcvgp.transport.client import remote_error

                return remote_error(error)
            except ImportError:  # pragma: no cover - the transport is part of the package
                pass
        return remote
    cls = getattr(errors, name, OracleError)
    if not (isinstance(cls, type) and issubclass(cls, OracleError)):
        cls = OracleError
    return cls(message)
