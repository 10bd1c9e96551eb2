"""The measurement journal: every answer an oracle gives is on disk before the search sees it.

:class:`JournalingOracle` wraps any :class:`~rcvgp.oracle.DataOracle`. Each request's set
points and the oracle's answer are appended to a journal file as one line of JSON, flushed and
fsync'ed before ``measure`` returns. Arrays travel as base64 of their little-endian float64
bytes, with their shapes, so a replayed answer is bitwise the measured one (NaN included).

The file::

    {"journal": "rcvgp", "version": 2, "fingerprint": "...", "spec": {...}, "created": "..."}
    {"i": 0, "op": "measure", "shape": [256, 3], "X": "<base64>", "y": "<base64>", "run": 0, "step": 0}
    {"i": 1, "op": "readback", "shape": [256, 3], "X": "...", "X_reached": "...", "y": "...", "run": 0, "step": 2}
    {"i": 2, "op": "measure", "shape": [5, 3], "X": "...", "error": {"type": "OracleError", "message": "..."}, ...}

Before a request to an oracle that recognises a retried request (a :class:`RequestIdOracle`,
such as :class:`~rcvgp.transport.client.ZmqOracle`, whose server keeps a reply cache keyed by
session and request id), the journal writes the *intent*: the client session, the request id it
is about to use and a digest of the set points; the record of the answer names that id::

    {"intent": "m7", "session": "5f0c...", "op": "readback", "shape": [256, 3], "digest": "..."}
    {"i": 6, "id": "m7", "op": "readback", ...}

A resumed run keeps the session, numbers its requests on from the journal's, and sends a
request whose intent has no answer on record (the client was killed between send and reply)
under its old id: the server answers it from its reply cache (or its own ``--journal``), so the
rig does not measure it again.

``run`` counts the runs that wrote the journal (0 for the first, 1 for the first resume, ...);
``step`` counts the progress reports the search made in that run before the request
(:meth:`JournalingOracle.checkpoint`). Since a seeded search asks the same questions in the same
order, resuming replays the journal instead of measuring:

- A record made before its run's last progress report is on the search's *path*: the resumed
  search must ask it again, in order. A request that differs from the next path record means
  that the search is not the one that wrote the journal: an error.
- A record made after its run's last report is in that run's *tail*: the search may not ask it
  again. After Ctrl-C, a spent budget or a kill, the tail holds what the search measured to end
  (the validation and test points of an interrupted result) or had just begun. A tail record
  is replayed when a request asks bitwise the same set points (wherever it comes), and is
  otherwise kept, unused: nothing measured is thrown away, nothing is measured twice.
- What the journal does not hold is measured live and appended.

A torn last line (the process killed mid-write) is dropped. An oracle error is journalled too
and replayed where the search went on after it; the error that ended a run (the last record of
that run) is retried live instead, under a new request id if the server answered it (its
reply cache holds that error), under the same one if no answer came (a timeout).

:func:`read_measurements` reads a journal's readings back as arrays with the variables' names
and units (what ``RunReport.data()`` and ``rcvgp export`` give), one row per point.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

import numpy as np

from rcvgp import errors
from rcvgp.errors import ConfigError, OracleError
from rcvgp.oracle import DataOracle, OracleSpec

__all__ = [
    "JOURNAL_NAME", "JOURNAL_VERSION", "JournalStats", "JournalingOracle", "Measurements", "RequestIdOracle",
    "column_label", "read_journal", "read_measurements",
]

#: File name of the journal inside a run's output folder.
JOURNAL_NAME = "journal.jsonl"
#: Version of the journal's line format (version 1, without ``run`` and ``step``, is still read).
JOURNAL_VERSION = 2
_READABLE_VERSIONS = (1, 2)


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


@runtime_checkable
class RequestIdOracle(Protocol):
    """An oracle that recognises a retried request by (``session``, request id) and answers it
    without measuring again, as a protocol-v1 server does from its reply cache."""

    session: str

    def measure_with_id(
        self, X: np.ndarray, request_id: str | None, *, readback: bool = False
    ) -> tuple[np.ndarray, np.ndarray]:
        """Measure ``X`` under ``request_id``; returns (X reached, y)."""
        ...


def read_journal(path: str | Path) -> tuple[dict[str, Any] | None, list[dict[str, Any]], int]:
    """Read a journal: its header, its complete records (intents left out) and the byte length
    of its complete lines.

    A last line that is incomplete (no newline) or unreadable is a torn write and is left out;
    the returned length excludes it, so the file can be truncated there before appending.

    Raises
    ------
    ConfigError
        When a line before the last is damaged, or the file is not an rcvgp journal.
    """
    header, records, _, length = _scan(Path(path))
    return header, records, length


@dataclass(frozen=True, eq=False)  # arrays: compare them with numpy, not ==
class Measurements:
    """Every reading a journal holds, one row per point, with the names and units of its columns.

    Attributes
    ----------
    X : ndarray of shape (n_points, n_vars)
        Where each reading was taken: the set points reached, for a request read back, else the
        set points asked.
    X_set : ndarray of shape (n_points, n_vars)
        The set points asked.
    y : ndarray of shape (n_points,)
        The readings; NaN for a point the oracle could not measure.
    request : ndarray of int, shape (n_points,)
        The request each point came from: its record's number ``i`` in the journal.
    variables : tuple of str
        The columns of ``X``, in order.
    units : tuple of str
        The unit of each variable ("" where none was declared).
    output : str
        The name of y.
    output_unit : str
        The unit of y.

    A column is also available by name: ``m["x0"]``, ``m["y"]``.
    """

    X: np.ndarray
    X_set: np.ndarray
    y: np.ndarray
    request: np.ndarray
    variables: tuple[str, ...]
    units: tuple[str, ...]
    output: str = "y"
    output_unit: str = ""

    def __len__(self) -> int:
        return int(self.y.shape[0])

    def __getitem__(self, name: str) -> np.ndarray:
        if name in self.variables:
            return self.X[:, self.variables.index(name)]
        if name == self.output:
            return self.y
        raise KeyError(f"{name!r} is not a column; the columns are {', '.join(self.variables + (self.output,))}")

    @property
    def n_requests(self) -> int:
        """How many requests the points came from."""
        return int(np.unique(self.request).size)

    @property
    def labels(self) -> tuple[str, ...]:
        """The variables and y with their units, as tables head them: ``("v [m/s]", ..., "E [J]")``."""
        names, units = self.variables + (self.output,), self.units + (self.output_unit,)
        return tuple(column_label(n, u) for n, u in zip(names, units))

    def __repr__(self) -> str:
        return f"Measurements({len(self):,} points from {self.n_requests:,} requests: {', '.join(self.labels)})"


def column_label(name: str, unit: str) -> str:
    """A quantity's name with its unit, as tables show it: ``v [m/s]``, or ``v`` without one."""
    return f"{name} [{unit}]" if unit else name


def read_measurements(path: str | Path) -> Measurements:
    """Every reading in a journal, with its variables' names and units (from the journal's
    header), in the order the requests were made; a failed request has no readings and no row.

    Raises
    ------
    ConfigError
        When the journal is damaged, is not an rcvgp journal, or has no header yet.
    """
    header, records, _ = read_journal(path)
    if header is None:
        raise ConfigError(f"{path}: the journal is empty (the run was stopped before its first line was written)")
    spec = OracleSpec.from_dict(header["spec"])
    n_vars = spec.n_vars
    X_set, X, y, request = [], [], [], []
    for k, rec in enumerate(records):
        if "y" not in rec:  # an error: nothing was read
            continue
        asked = _array(rec, "X").reshape(tuple(rec["shape"]))
        reached, readings = _answer(rec, asked)
        X_set.append(asked)
        X.append(reached)
        y.append(readings)
        request.append(np.full(readings.shape[0], int(rec.get("i", k)), dtype=np.int64))
    empty = np.empty((0, n_vars))
    return Measurements(
        X=np.concatenate(X) if X else empty,
        X_set=np.concatenate(X_set) if X_set else empty.copy(),
        y=np.concatenate(y) if y else np.empty(0),
        request=np.concatenate(request) if request else np.empty(0, dtype=np.int64),
        variables=tuple(v.name for v in spec.variables),
        units=tuple(v.unit for v in spec.variables),
        output=spec.output.name,
        output_unit=spec.output.unit,
    )


def _scan(p: Path) -> tuple[dict[str, Any] | None, list[dict[str, Any]], list[dict[str, Any]], int]:
    """Header, complete records, intents, and the byte length of the complete lines."""
    data = p.read_bytes()
    lines = data.split(b"\n")
    # After a final newline split() leaves b"": every element but the last ended with "\n".
    complete, tail = lines[:-1], lines[-1]
    header: dict[str, Any] | None = None
    records: list[dict[str, Any]] = []
    intents: list[dict[str, Any]] = []
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
            if obj.get("version") not in _READABLE_VERSIONS:
                raise ConfigError(
                    f"{p}: journal version {obj.get('version')!r}, this rcvgp reads versions "
                    f"{', '.join(map(str, _READABLE_VERSIONS))}; resume it with the rcvgp that wrote it"
                )
            header = obj
        elif "intent" in obj:
            intents.append(obj)
        else:
            records.append(obj)
        good_length += len(raw) + 1
    return header, records, intents, good_length


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
        self._path: list[int] = []  # indices into _records of the path, in order
        self._next = 0  # position in _path of the next path record to replay
        self._tail: list[int] = []  # indices into _records of tail records not replayed yet
        self._counts = {"replayed_points": 0, "replayed_requests": 0, "live_points": 0, "live_requests": 0}
        self._run = 0
        self._step = 0
        # Request ids for an oracle that recognises retries: ids used so far, and the ids of
        # requests sent but not answered on record, by the digest of what they asked.
        self._ids = isinstance(oracle, RequestIdOracle)
        self._n_intents = 0
        self._unanswered: dict[str, list[str]] = {}
        spec = oracle.describe()
        if self.path.exists() and resume:
            header, records, intents, length = _scan(self.path)
            if header is None:  # killed before the header was complete
                self.path.unlink()
            else:
                self._check_header(header, spec)
                self._records = records
                self._path, self._tail = _split_runs(records)
                self._run = 1 + max((int(r.get("run", 0)) for r in records), default=-1)
                self._resume_ids(records, intents)
                with open(self.path, "r+b") as fh:  # drop a torn line before appending
                    fh.truncate(length)
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
        return self._live("measure", X)[1]

    def measure_readback(self, X: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        X = np.ascontiguousarray(X, dtype=np.float64)
        replayed = self._replay("readback", X)
        if replayed is not None:
            return replayed
        return self._live("readback", X)

    def close(self) -> None:
        if not self._fh.closed:
            self._fh.close()
        self._oracle.close()

    def checkpoint(self) -> None:
        """Say that the search reported progress: the requests made so far are on its path.

        The runner calls this at each of the search's progress reports; what is measured after
        the last one (the end of an interrupted run) may be skipped by a resumed search.
        """
        self._step += 1

    # -- state ----------------------------------------------------------------------------------

    @property
    def stats(self) -> JournalStats:
        """Points and requests replayed from the journal and measured live so far."""
        return JournalStats(**self._counts)

    @property
    def replaying(self) -> bool:
        """Whether path records are still waiting to be replayed."""
        return self._next < len(self._path)

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
        """The journalled answer to this request, or None to measure it live (see the module
        docstring for the rule)."""
        data = _bytes(X)
        index = None
        if self._next < len(self._path) and _asks(self._records[self._path[self._next]], op, X.shape, data):
            index = self._path[self._next]
            self._next += 1
        else:
            index = next((k for k in self._tail if _asks(self._records[k], op, X.shape, data)), None)
            if index is not None:
                self._tail.remove(index)
            elif self._next < len(self._path):
                rec = self._records[self._path[self._next]]
                n_replayed = self._counts["replayed_requests"]
                raise ConfigError(
                    f"{self.path}: request {n_replayed + 1} of the resumed run asks other set points than the "
                    f"journal's record {rec.get('i')} ({op} of shape {X.shape} vs {rec.get('op')} of shape "
                    f"{tuple(rec.get('shape', ()))}); the search no longer asks the same questions (another "
                    "rcvgp version?); start over in another output folder"
                )
        if index is None:
            return None
        rec = self._records[index]
        if "error" in rec:
            raise _rebuild_error(rec["error"])
        X_reached, y = _answer(rec, X)
        self._count("replayed", X.shape[0])
        return X_reached, y

    def _live(self, op: str, X: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Measure on the real oracle; the answer (or the error) is on disk before it returns."""
        rid = self._intent(op, X) if self._ids else None
        try:
            if self._ids:
                X_reached, y = self._oracle.measure_with_id(X, rid, readback=op == "readback")  # type: ignore[attr-defined]
            elif op == "readback":
                X_reached, y = self._oracle.measure_readback(X)
            else:
                X_reached, y = X, self._oracle.measure(X)
        except OracleError as exc:
            self._append(self._error_record(op, X, exc, rid))
            raise
        X_reached = np.asarray(X_reached, dtype=np.float64)
        y = np.asarray(y, dtype=np.float64)
        self._append(self._record(op, X, y, X_reached if op == "readback" else None, rid))
        self._count("live", X.shape[0])
        return X_reached if op == "readback" else X.copy(), y

    def _intent(self, op: str, X: np.ndarray) -> str:
        """The request id to send ``X`` under: that of an earlier run's request for the same set
        points that got no answer on record, else a new one, journalled before it is sent."""
        digest = _digest(op, X)
        waiting = self._unanswered.get(digest)
        if waiting:
            return waiting.pop(0)
        self._n_intents += 1
        rid = f"m{self._n_intents}"
        # Flushed, not fsync'ed: the OS keeps it through a kill of this process, which is what it
        # is for (after a power cut, the request in flight would be measured again); an fsync
        # here doubled the cost of a journalled request.
        self._append({"intent": rid, "session": self._oracle.session, "op": op,  # type: ignore[attr-defined]
                      "shape": list(X.shape), "digest": digest}, sync=False)
        return rid

    def _resume_ids(self, records: list[dict[str, Any]], intents: list[dict[str, Any]]) -> None:
        if not self._ids or not intents:
            return
        self._oracle.session = str(intents[-1]["session"])  # type: ignore[attr-defined]
        self._n_intents = len(intents)
        # An answer, or an error the server sent (its reply cache holds it), settles an id; a
        # timeout does not: the server may have measured, and answers the same id from its cache.
        settled = {r["id"] for r in records if "id" in r and ("error" not in r or "code" in r["error"])}
        for intent in intents:
            if intent["intent"] not in settled:
                self._unanswered.setdefault(str(intent["digest"]), []).append(str(intent["intent"]))

    def _count(self, kind: str, n_points: int) -> None:
        self._counts[f"{kind}_points"] += int(n_points)
        self._counts[f"{kind}_requests"] += 1

    def _record(
        self, op: str, X: np.ndarray, y: np.ndarray, X_reached: np.ndarray | None = None, rid: str | None = None
    ) -> dict[str, Any]:
        rec: dict[str, Any] = {"i": self._n_records, **({"id": rid} if rid else {}), "op": op,
                               "shape": list(X.shape), "X": _b64(X)}
        if X_reached is not None:
            rec["X_reached"] = _b64(X_reached)
        rec["y_shape"] = list(y.shape)
        rec["y"] = _b64(y)
        rec.update(run=self._run, step=self._step)
        return rec

    def _error_record(self, op: str, X: np.ndarray, exc: OracleError, rid: str | None = None) -> dict[str, Any]:
        error: dict[str, Any] = {"type": type(exc).__name__, "message": str(exc)}
        if isinstance(exc, errors.RemoteError):  # keeps the code, so a replay raises the same type
            error.update(code=exc.code, message=exc.message, retryable=exc.retryable, details=exc.details)
        return {"i": self._n_records, **({"id": rid} if rid else {}), "op": op, "shape": list(X.shape),
                "X": _b64(X), "error": error, "run": self._run, "step": self._step}

    def _append(self, obj: dict[str, Any], sync: bool = True) -> None:
        line = json.dumps(obj, separators=(",", ":"), allow_nan=False).encode() + b"\n"
        self._fh.write(line)
        self._fh.flush()
        if sync:
            os.fsync(self._fh.fileno())
        if "journal" not in obj and "intent" not in obj:
            self._n_records += 1


def _split_runs(records: list[dict[str, Any]]) -> tuple[list[int], list[int]]:
    """Indices of the path records and of the tail records (module docstring).

    A record without ``run`` and ``step`` (journal version 1) is on the path. The last record of
    a run is left out when it is an error: that error ended the run and is retried live.
    """
    last_step: dict[int, int] = {}
    last_index: dict[int, int] = {}
    for k, rec in enumerate(records):
        run = int(rec.get("run", 0))
        last_index[run] = k
        if "step" in rec:
            last_step[run] = max(last_step.get(run, 0), int(rec["step"]))
    ended = {k for k in last_index.values() if "error" in records[k]}
    path, tail = [], []
    for k, rec in enumerate(records):
        if k in ended:
            continue
        run = int(rec.get("run", 0))
        if "step" in rec and int(rec["step"]) >= last_step[run]:
            tail.append(k)
        else:
            path.append(k)
    return path, tail


def _array(rec: dict[str, Any], key: str) -> np.ndarray:
    """A journalled array, bitwise as it was measured (flat; the caller knows its shape)."""
    return np.frombuffer(base64.b64decode(rec[key]), dtype="<f8").astype(np.float64)


def _answer(rec: dict[str, Any], X: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The set points a record's answer was measured at (those reached, when read back; else
    ``X``, the set points asked) and its readings."""
    X_reached = _array(rec, "X_reached").reshape(X.shape) if "X_reached" in rec else X.copy()
    return X_reached, _array(rec, "y")


def _asks(rec: dict[str, Any], op: str, shape: tuple[int, ...], data: bytes) -> bool:
    """Whether a journal record answers a request for these set points."""
    return rec.get("op") == op and tuple(rec.get("shape", ())) == shape and base64.b64decode(rec["X"]) == data


def _digest(op: str, X: np.ndarray) -> str:
    """What a request asks, in 32 hex digits: the operation, the shape and the set points."""
    h = hashlib.blake2b(f"{op}:{X.shape}:".encode(), digest_size=16)
    h.update(_bytes(X))
    return h.hexdigest()


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
