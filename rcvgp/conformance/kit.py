"""The conformance kit: run the scenarios of ``protocols/conformance.yaml`` against any server.

``check_oracle(address)`` talks to the server through the transport's raw :class:`Channel` (so
it can send malformed frames on purpose) and the pure codec, and returns a
:class:`ConformanceReport`. It judges a server by the text of ``protocols/v1.md`` only: the same
scenarios pass rcvgp's own server and the plain-pyzmq reference server, and are the project's
protocol tests.
"""

from __future__ import annotations

import json
import os
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from importlib import resources
from typing import Any

import numpy as np

from rcvgp.errors import ConfigError, OracleTimeout, RcvgpError
from rcvgp.transport import codec
from rcvgp.transport.client import Channel, diagnose

__all__ = ["ScenarioResult", "ConformanceReport", "check_oracle", "load_points", "scenario_list"]

_CAP_BYTES = 64 * 2**20
_OVERSIZE_CAP = 256 * 2**20
#: The names the ``operators`` hint of an oracle description may hold (protocols/v1.md, section 5).
OPERATOR_NAMES = frozenset({"add", "sub", "mul", "div", "inv", "neg", "n2", "n3", "n4", "n5", "sin", "cos", "exp", "log",
                            "sqrt", "tanh", "const"})
#: The values of ``status.state``.
STATES = frozenset({"idle", "measuring", "stuck"})


def scenario_list() -> list[dict[str, Any]]:
    """The scenarios of the protocol, as listed in ``protocols/conformance.yaml``."""
    import yaml

    text = resources.files("rcvgp.protocols").joinpath("conformance.yaml").read_text(encoding="utf-8")
    return list(yaml.safe_load(text)["scenarios"])


@dataclass(frozen=True)
class ScenarioResult:
    """The outcome of one scenario."""

    id: str
    title: str
    passed: bool
    message: str = ""
    seconds: float = 0.0
    skipped: bool = False

    def to_dict(self) -> dict[str, Any]:
        return {"id": self.id, "title": self.title, "passed": self.passed, "skipped": self.skipped,
                "message": self.message, "seconds": round(self.seconds, 4)}


@dataclass
class ConformanceReport:
    """All scenario results for one endpoint; ``passed`` when none failed."""

    address: str
    results: list[ScenarioResult] = field(default_factory=list)
    server: dict[str, Any] = field(default_factory=dict)

    @property
    def passed(self) -> bool:
        return all(r.passed for r in self.results) and bool(self.results)

    @property
    def failures(self) -> list[ScenarioResult]:
        return [r for r in self.results if not r.passed]

    def __getitem__(self, scenario_id: str) -> ScenarioResult:
        for r in self.results:
            if r.id == scenario_id:
                return r
        raise KeyError(scenario_id)

    def to_dict(self) -> dict[str, Any]:
        return {
            "address": self.address,
            "protocol": codec.PROTOCOL,
            "version": codec.VERSION,
            "passed": self.passed,
            "n_passed": sum(r.passed for r in self.results),
            "n_failed": len(self.failures),
            "server": self.server,
            "scenarios": [r.to_dict() for r in self.results],
        }

    def to_text(self) -> str:
        lines = [f"conformance of {self.address} to {codec.PROTOCOL} {codec.VERSION}"]
        for r in self.results:
            mark = "SKIP" if r.skipped else ("PASS" if r.passed else "FAIL")
            lines.append(f"  {mark}  {r.id:<34} {r.title}" + (f"\n        {r.message}" if r.message and not r.passed or r.skipped else ""))
        n_fail = len(self.failures)
        lines.append(f"{len(self.results) - n_fail} passed, {n_fail} failed")
        return "\n".join(lines)


def load_points(source: str | os.PathLike[str] | Mapping[str, Any] | None) -> dict[str, Any]:
    """Read the optional sample-points file (``in_limits``, ``out_of_limits``, ``large_rows``)."""
    if source is None:
        return {}
    if isinstance(source, Mapping):
        data: Any = dict(source)
        where = "points"
    else:
        import yaml

        where = os.fspath(source)
        try:
            with open(where, encoding="utf-8") as fh:
                data = yaml.safe_load(fh) or {}
        except OSError as exc:
            raise ConfigError(f"{where}: cannot read the points file: {exc}") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{where}: expected a mapping with `in_limits`, `out_of_limits`, `large_rows`")
    known = {"in_limits", "out_of_limits", "large_rows"}
    for key in data:
        if key not in known:
            import difflib

            close = difflib.get_close_matches(str(key), sorted(known), n=1)
            hint = f"; did you mean `{close[0]}`?" if close else ""
            raise ConfigError(f"{where}: {key}: unknown key{hint}")
    out: dict[str, Any] = {}
    for key in ("in_limits", "out_of_limits"):
        if key in data:
            try:
                arr = np.asarray(data[key], dtype=np.float64)
            except (TypeError, ValueError):
                raise ConfigError(f"{where}: `{key}` must be a list of rows of numbers") from None
            if arr.ndim != 2 or arr.shape[0] < 1:
                raise ConfigError(f"{where}: `{key}` must be a non-empty list of rows, got shape {arr.shape}")
            out[key] = arr
    if "large_rows" in data:
        n = data["large_rows"]
        if isinstance(n, bool) or not isinstance(n, int) or n < 1:
            raise ConfigError(f"{where}: `large_rows` must be an integer >= 1, got {n!r}")
        out["large_rows"] = n
    return out


class _Fail(Exception):
    pass


class _Skip(Exception):
    pass


class _Kit:
    def __init__(self, channel: Channel, timeout: float, points: dict[str, Any]) -> None:
        self.channel = channel
        self.timeout = timeout
        self.points = points
        self.session = "conformance-" + uuid.uuid4().hex[:12]
        self.counter = 0
        self.hello: dict[str, Any] | None = None
        self.server_session: str | None = None
        self.minor = 0  # the server's minor version: 1.1 additions are checked from 1
        self.raw_header_id: Any = None

    # ------------------------------------------------------------ sending
    def next_id(self) -> str:
        self.counter += 1
        return f"c{self.counter}"

    def raw(self, frames: Sequence[Any], rid: str | None = None) -> codec.Message:
        reply = self.channel.exchange(list(frames), rid, timeout=self.timeout, deadline=2 * self.timeout)
        try:
            msg = codec.decode(reply, dtypes=None)
        except codec.WireError as exc:
            raise _Fail(f"the reply breaks the protocol: {exc.message}") from None
        self.raw_header_id = msg.header.get("id")
        return msg

    def header(self, op: str, rid: str | None = None, **extra: Any) -> dict[str, Any]:
        h = {"protocol": codec.PROTOCOL, "v": codec.VERSION, "type": "request", "op": op,
             "id": rid or self.next_id(), "session": self.session, "params": {}}
        h.update(extra)
        return h

    def request(self, op: str, params: Mapping[str, Any] | None = None, arrays: Mapping[str, np.ndarray] | None = None,
                rid: str | None = None, **extra: Any) -> codec.Message:
        h = self.header(op, rid, **extra)
        if params is not None:
            h["params"] = dict(params)
        return self.raw(codec.encode(h, arrays), h["id"])

    # ------------------------------------------------------------ checks
    @staticmethod
    def ok(msg: codec.Message, what: str) -> dict[str, Any]:
        h = msg.header
        if h.get("ok") is not True:
            err = h.get("error") or {}
            raise _Fail(f"{what}: expected ok, got {err.get('code')}: {err.get('message')}")
        result = h.get("result")
        if not isinstance(result, dict):
            raise _Fail(f"{what}: reply has no \"result\" object")
        return result

    @staticmethod
    def error(msg: codec.Message, code: str | tuple[str, ...], what: str, rid: str | None = None) -> dict[str, Any]:
        codes = (code,) if isinstance(code, str) else code
        h = msg.header
        if h.get("ok") is not False:
            raise _Fail(f"{what}: expected error {'/'.join(codes)}, got a success reply")
        err = h.get("error")
        if not isinstance(err, dict):
            raise _Fail(f"{what}: error reply without an \"error\" object")
        if err.get("code") not in codes:
            raise _Fail(f"{what}: expected error {'/'.join(codes)}, got {err.get('code')}: {err.get('message')}")
        for key, typ in (("message", str), ("retryable", bool), ("details", dict)):
            if not isinstance(err.get(key), typ):
                raise _Fail(f"{what}: error.{key} missing or not a {typ.__name__}")
        if rid is not None and h.get("id") != rid:
            raise _Fail(f"{what}: error reply has id {h.get('id')!r}, expected {rid!r}")
        return err

    def measurements(self) -> int:
        """Measure requests executed for the kit's session (robust to other clients measuring).

        A 1.0 server has only the server-wide counter, which other clients move too: run the kit
        while nobody else measures there.
        """
        result = self.ok(self.request("status"), "status")
        own = result.get("session_counters")
        if self.minor >= 1:
            if not isinstance(own, dict) or not isinstance(own.get("measurements"), int):
                raise _Fail("a 1.1 server's status needs \"session_counters\" with an integer \"measurements\"")
            return int(own["measurements"])
        n = result.get("measurements")
        if not isinstance(n, int):
            raise _Fail("status result has no integer \"measurements\" counter (measure requests executed)")
        return n

    def alive(self) -> None:
        self.ok(self.request("ping"), "ping after a bad request")

    # ------------------------------------------------------------ design
    @property
    def oracle(self) -> dict[str, Any]:
        if self.hello is None:
            raise _Skip("needs a successful hello")
        return self.hello["oracle"]

    @property
    def n_vars(self) -> int:
        return len(self.oracle["variables"])

    def in_points(self) -> np.ndarray:
        if "in_limits" in self.points:
            X = self.points["in_limits"]
            if X.shape[1] != self.n_vars:
                raise _Fail(f"the points file's in_limits rows have {X.shape[1]} values, the oracle has {self.n_vars} variables")
            return X
        fr = np.linspace(0.3, 0.7, 8)
        cols = [v["low"] + fr * (v["high"] - v["low"]) for v in self.oracle["variables"]]
        return np.column_stack(cols)

    def out_points(self) -> np.ndarray:
        if "out_of_limits" in self.points:
            return self.points["out_of_limits"]
        X = self.in_points()[:2].copy()
        v = self.oracle["variables"][0]
        X[-1, 0] = v["high"] + (v["high"] - v["low"]) + 1.0
        return X

    def max_rows(self) -> int:
        return int(self.hello["limits"]["max_rows"]) if self.hello else 1

    def max_bytes(self) -> int:
        return int(self.hello["limits"]["max_message_bytes"]) if self.hello else _CAP_BYTES

    def tile(self, rows: int) -> np.ndarray:
        X = self.in_points()
        return np.ascontiguousarray(X[np.arange(rows) % X.shape[0]])

    def check_y(self, msg: codec.Message, rows: int, what: str) -> np.ndarray:
        result = self.ok(msg, what)
        y = msg.arrays.get("y")
        if y is None:
            raise _Fail(f"{what}: reply has no array \"y\"")
        if y.dtype.str != "<f8" or y.shape != (rows,):
            raise _Fail(f"{what}: y must be '<f8' of shape ({rows},), got {y.dtype.str} {y.shape}")
        if result.get("n_rows", rows) != rows:
            raise _Fail(f"{what}: result n_rows={result.get('n_rows')!r}, expected {rows}")
        return y

    # ------------------------------------------------------------ scenarios
    def s_hello(self) -> str:
        rid = self.next_id()
        msg = self.request("hello", {"client": "rcvgp-conformance", "versions": [codec.VERSION]}, rid=rid)
        result = self.ok(msg, "hello")
        h = msg.header
        if h.get("id") != rid or h.get("session") != self.session:
            raise _Fail(f"reply must echo id and session, got id={h.get('id')!r} session={h.get('session')!r}")
        sess = h.get("server_session")
        if not isinstance(sess, str) or not sess:
            raise _Fail("reply header has no server_session")
        versions = result.get("versions")
        if not isinstance(versions, list) or not any(str(v).split(".")[0] == "1" for v in versions):
            raise _Fail(f"hello result versions must list a 1.x version, got {versions!r}")
        oracle = result.get("oracle")
        if not isinstance(oracle, dict) or not isinstance(oracle.get("variables"), list) or not oracle["variables"]:
            raise _Fail("hello result has no oracle with a non-empty variables list")
        for v in oracle["variables"]:
            if not (isinstance(v, dict) and isinstance(v.get("name"), str)
                    and isinstance(v.get("low"), (int, float)) and isinstance(v.get("high"), (int, float))
                    and np.isfinite(v["low"]) and np.isfinite(v["high"]) and v["low"] < v["high"]):
                raise _Fail(f"oracle variable {v!r} needs a name and finite low < high")
        limits = result.get("limits")
        if not isinstance(limits, dict) or not all(isinstance(limits.get(k), int) and limits[k] >= 1
                                                   for k in ("max_rows", "max_message_bytes")):
            raise _Fail(f"hello result limits need integers max_rows and max_message_bytes, got {limits!r}")
        if "truth" in json.dumps(oracle).lower() or "equation" in oracle:
            raise _Fail("the oracle description must not expose the equation")
        unknown = sorted(str(o) for o in oracle.get("operators") or [] if o not in OPERATOR_NAMES)
        if unknown:
            raise _Fail(f"the operators hint holds names outside the protocol's table: {unknown} "
                        f"(known: {', '.join(sorted(OPERATOR_NAMES))})")
        for where, caps in (("capabilities", result.get("capabilities", [])), ("oracle.capabilities", oracle.get("capabilities", []))):
            if not isinstance(caps, list) or not all(isinstance(c, str) for c in caps):
                raise _Fail(f"{where} must be a list of strings, got {caps!r}")
        try:
            self.minor = codec.parse_version(h.get("v"))[1]
        except codec.WireError:
            raise _Fail(f"the reply's \"v\" is not a version: {h.get('v')!r}") from None
        self.hello = result
        self.server_session = sess
        return f"{oracle.get('name')!r}: {len(oracle['variables'])} variable(s), max_rows {limits['max_rows']}"

    def s_version_mismatch(self) -> str:
        for v, side in (("99.0", "server"), ("0.9", "client")):
            rid = self.next_id()
            h = self.header("hello", rid, v=v)
            err = self.error(self.raw(codec.encode(h), rid), "UNSUPPORTED_VERSION", f"hello with v {v}", rid)
            text = err["message"].lower()
            if "upgrade" not in text or side not in text:
                raise _Fail(f"v {v}: the message must say which side must upgrade (the {side}), got {err['message']!r}")
        return "refused, and says who must upgrade"

    def s_minor_version_and_unknown_fields(self) -> str:
        rid = self.next_id()
        h = self.header("hello", rid, v="1.99", x_future_field={"a": 1})
        h["params"] = {"client": "rcvgp-conformance", "x_future_param": True}
        self.ok(self.raw(codec.encode(h), rid), "hello 1.99 with unknown fields")
        return ""

    def s_ping_status(self) -> str:
        msg = self.request("ping")
        self.ok(msg, "ping")
        if msg.header.get("server_session") != self.server_session:
            raise _Fail("ping reply has another server_session than hello")
        result = self.ok(self.request("status"), "status")
        missing = [k for k in ("state", "requests", "measurements", "points") if k not in result]
        if missing:
            raise _Fail(f"status result lacks {', '.join(missing)}")
        if result["state"] not in STATES:
            raise _Fail(f"status state must be one of {sorted(STATES)}, got {result['state']!r}")
        return f"state {result['state']}"

    def s_describe(self) -> str:
        result = self.ok(self.request("describe"), "describe")
        if result.get("oracle") != self.oracle:
            raise _Fail("describe's oracle differs from hello's")
        return ""

    def s_measure_roundtrip(self) -> str:
        X = self.in_points()
        before = self.measurements()
        rid = self.next_id()
        msg = self.request("measure", {}, {"X": X.astype("<f8")}, rid=rid)
        y = self.check_y(msg, X.shape[0], "measure")
        if msg.header.get("id") != rid:
            raise _Fail("measure reply does not echo the request id")
        after = self.measurements()
        if after != before + 1:
            raise _Fail(f"measurements counter went from {before} to {after}, expected +1")
        self._y_in = y
        return f"{X.shape[0]} rows, {int(np.isnan(y).sum())} NaN"

    def s_measure_big_endian(self) -> str:
        X = self.in_points()
        msg = self.request("measure", {}, {"X": X.astype(">f8")})
        if msg.header.get("ok") is False:
            self.error(msg, "BAD_REQUEST", "measure with '>f8'")
            return "'>f8' not accepted (allowed), refused with BAD_REQUEST"
        self.check_y(msg, X.shape[0], "measure with '>f8'")
        return "accepted"

    def s_large_batch(self) -> str:
        rows = int(self.points.get("large_rows", min(self.max_rows(), 65536)))
        rows = min(rows, self.max_rows())
        if rows * self.n_vars * 8 + 4096 > self.max_bytes():
            rows = max(1, (self.max_bytes() - 4096) // (self.n_vars * 8))
        X = self.tile(rows)
        self.check_y(self.request("measure", {}, {"X": X}), rows, f"measure of {rows} rows")
        return f"{rows} rows"

    def s_out_of_limits(self) -> str:
        X = self.out_points()
        before = self.measurements()
        rid = self.next_id()
        err = self.error(self.request("measure", {}, {"X": X}, rid=rid), "OUT_OF_LIMITS", "out-of-limit measure", rid)
        d = err["details"]
        names = [v["name"] for v in self.oracle["variables"]]
        if d.get("variable") not in names:
            raise _Fail(f"details.variable must name a variable ({names}), got {d.get('variable')!r}")
        for key in ("value", "low", "high"):
            if key not in d:
                raise _Fail(f"OUT_OF_LIMITS details lack {key!r}")
        if d["variable"] not in err["message"]:
            raise _Fail(f"the message must name the variable: {err['message']!r}")
        nan_rows = self.in_points()[:1].copy()
        nan_rows[0, 0] = np.nan
        nan_err = self.error(self.request("measure", {}, {"X": nan_rows}), "OUT_OF_LIMITS", "a NaN set point")
        if nan_err["details"].get("value") != "nan":
            raise _Fail(f'OUT_OF_LIMITS details write a NaN value as the string "nan", got {nan_err["details"].get("value")!r}')
        after = self.measurements()
        if after != before:
            raise _Fail(f"the out-of-limit request reached the oracle (measurements {before} -> {after})")
        self.check_y(self.request("measure", {}, {"X": self.in_points()}, rid=rid), self.in_points().shape[0],
                     "an id refused with OUT_OF_LIMITS, reused with in-limit points")
        return err["message"]

    def s_too_many_rows(self) -> str:
        rows = self.max_rows() + 1
        nbytes = rows * self.n_vars * 8
        if nbytes + 4096 > min(self.max_bytes(), _CAP_BYTES):
            raise _Skip(f"{rows} rows would exceed the message cap; covered by oversize_message")
        before = self.measurements()
        err = self.error(self.request("measure", {}, {"X": self.tile(rows)}), "TOO_LARGE", f"measure of {rows} rows")
        if err["details"].get("rows") != rows or err["details"].get("max_rows") != self.max_rows():
            raise _Fail(f"TOO_LARGE details for rows must give rows={rows} and max_rows={self.max_rows()}, got {err['details']}")
        if self.measurements() != before:
            raise _Fail("a request over max_rows reached the oracle")
        return f"{rows} rows refused"

    def _bad(self, frames: list[Any], what: str, code: str = "BAD_REQUEST") -> None:
        self.error(self.raw(frames, None), code, what)
        self.alive()

    def s_malformed_frames(self) -> str:
        X = self.in_points()
        good = self.header("measure")
        desc = {"name": "X", "dtype": "<f8", "shape": list(X.shape), "nbytes": int(X.nbytes)}
        self._bad([], "an empty message")
        self._bad([b"\xff\xfe{not utf-8"], "a header that is not UTF-8")
        self._bad([json.dumps(dict(good, arrays=[desc])).encode()], "an array descriptor without its frame")
        self._bad([json.dumps(dict(good, arrays=[])).encode(), X.astype("<f8").tobytes()], "a frame without a descriptor")
        bad_n = dict(desc, nbytes=int(X.nbytes) + 8)
        self._bad([json.dumps(dict(good, id=self.next_id(), arrays=[bad_n])).encode(), X.astype("<f8").tobytes()], "nbytes not matching")
        bad_s = dict(desc, shape=[X.shape[0] + 1, X.shape[1]], nbytes=int(X.nbytes))
        self._bad([json.dumps(dict(good, id=self.next_id(), arrays=[bad_s])).encode(), X.astype("<f8").tobytes()], "shape not matching")
        for field_ in ("dtype", "nbytes"):
            partial = {k: v for k, v in desc.items() if k != field_}
            self._bad([json.dumps(dict(good, id=self.next_id(), arrays=[partial])).encode(), X.astype("<f8").tobytes()],
                      f"a descriptor without {field_}")
        huge = dict(desc, shape=[2**64, X.shape[1]])
        self._bad([json.dumps(dict(good, id=self.next_id(), arrays=[huge])).encode(), X.astype("<f8").tobytes()],
                  "a shape whose size overflows 64 bits")
        return "9 kinds refused"

    def s_malformed_json(self) -> str:
        self._bad([b"{this is not json"], "invalid JSON")
        self._bad([b"[1, 2, 3]"], "a JSON array")
        h = self.header("ping")
        del h["id"]
        self._bad([json.dumps(h).encode()], "a header without id")
        self._bad([json.dumps(self.header("ping", protocol="not-rcvgp")).encode()], "a wrong protocol name")
        self._bad([json.dumps(self.header("ping", params=[1])).encode()], "params not an object")
        self._bad([b'{"protocol":"rcvgp-oracle","v":"1.0","op":"ping","id":"x","session":"s","n":NaN}'], "a NaN literal")
        self.error(self.raw([json.dumps(self.header("ping", id="")).encode()], ""), "BAD_REQUEST", "an empty id")
        if self.raw_header_id != "":
            raise _Fail(f'a reply echoes an id that is a string of at most 128 characters as sent, even "", got {self.raw_header_id!r}')
        self.alive()
        for v in ("\u00b2.0", "\u0661.0"):
            self._bad([json.dumps(self.header("ping", v=v), ensure_ascii=False).encode()], f"a version with the non-ASCII digit {v[0]!r}")
        text = json.dumps(self.header("ping", id="X")).replace('"id": "X"', '"id": "\\ud800"')
        msg = self.raw([text.encode()], None)
        self.error(msg, "BAD_REQUEST", "an id with a lone UTF-16 surrogate")
        if msg.header.get("id") is not None:
            raise _Fail(f"an id that cannot be echoed in UTF-8 is echoed as null, got {msg.header.get('id')!r}")
        self.alive()
        return "10 kinds refused"

    def s_null_optional_fields(self) -> str:
        h = self.header("ping", params=None, arrays=None)
        del h["type"]
        self.ok(self.raw([json.dumps(h).encode()], h["id"]), 'ping with "params": null, "arrays": null and no "type"')
        return ""

    def s_wrong_dtype(self) -> str:
        X = self.in_points()
        before = self.measurements()
        for dt in ("<c16", "|u1", "<M8[s]"):
            try:
                a = X.astype(dt)
                buf = a.tobytes()
            except (TypeError, ValueError):
                a, buf = X, X.astype("<f8").tobytes()
            h = self.header("measure", arrays=[{"name": "X", "dtype": dt, "shape": list(X.shape), "nbytes": len(buf)}])
            self._bad([json.dumps(h).encode(), buf], f"X as {dt!r}")
        wide = np.hstack([X, X[:, :1]])
        self.error(self.request("measure", {}, {"X": wide}), "BAD_REQUEST", f"X with {self.n_vars + 1} columns")
        self.error(self.request("measure", {}, {"X": X[:, 0].copy()}), "BAD_REQUEST", "X of one dimension")
        self.error(self.request("measure", {}, {}), "BAD_REQUEST", "measure without X")
        if self.measurements() != before:
            raise _Fail("a request with a wrong dtype or shape reached the oracle")
        return ""

    def s_unknown_operation(self) -> str:
        rid = self.next_id()
        self.error(self.request("frobnicate", rid=rid), "UNKNOWN_OPERATION", "op frobnicate", rid)
        return ""

    def s_duplicate_request_id(self) -> str:
        X = self.in_points()
        before = self.measurements()
        rid = self.next_id()
        frames = codec.encode(self.header("measure", rid), {"X": X})
        first = self.raw(frames, rid)
        second = self.raw(frames, rid)
        y1 = self.check_y(first, X.shape[0], "first measure")
        y2 = self.check_y(second, X.shape[0], "repeated measure")
        if y1.tobytes() != y2.tobytes():
            raise _Fail("the repeated request got other y values: it was measured again")
        after = self.measurements()
        if after != before + 1:
            raise _Fail(f"the request was executed {after - before} times, expected once")
        self._dup = (rid, X)
        return "executed once, same bytes"

    def s_reused_id_different_request(self) -> str:
        rid, X = getattr(self, "_dup", (None, None))
        if rid is None:
            raise _Skip("needs duplicate_request_id")
        before = self.measurements()
        X2 = X[::-1].copy() if X.shape[0] > 1 else np.vstack([X, X])
        self.error(self.request("measure", {}, {"X": X2}, rid=rid), "BAD_REQUEST", "an id reused for other points", rid)
        if self.measurements() != before:
            raise _Fail("a reused id with other points was measured")
        return ""

    def s_oversize_message(self) -> str:
        limit = self.max_bytes()
        if limit + 1 > _OVERSIZE_CAP:
            raise _Skip(f"max_message_bytes is {limit}; the kit sends at most {_OVERSIZE_CAP} bytes")
        h = self.header("measure")
        head = json.dumps(h).encode()
        pad = max(0, limit + 1 - len(head) - 64)
        n = pad // 8
        desc = {"name": "pad", "dtype": "<f8", "shape": [n], "nbytes": 8 * n}
        h["arrays"] = [desc]
        frames = [json.dumps(h).encode(), bytes(8 * n)]
        while sum(len(f) for f in frames) <= limit:
            n += 1
            h["arrays"] = [dict(desc, shape=[n], nbytes=8 * n)]
            frames = [json.dumps(h).encode(), bytes(8 * n)]
        size = sum(len(f) for f in frames)
        err = self.error(self.raw(frames, h["id"]), "TOO_LARGE", f"a message of {size} bytes", h["id"])
        if err["details"].get("bytes") != size or err["details"].get("max_message_bytes") != limit:
            raise _Fail(f"TOO_LARGE details for a message must give bytes={size} and max_message_bytes={limit}, got {err['details']}")
        return f"{sum(len(f) for f in frames)} bytes refused"

    def s_oversize_header(self) -> str:
        h = self.header("ping", x_pad="")
        h["x_pad"] = " " * (codec.MAX_HEADER_BYTES + 1 - len(json.dumps(h).encode()))
        frame = json.dumps(h).encode()
        msg = self.raw([frame], None)
        err = self.error(msg, "TOO_LARGE", f"a header frame of {len(frame)} bytes")
        d = err["details"]
        if self.minor >= 1 and (d.get("header_bytes") != len(frame) or d.get("max_header_bytes") != codec.MAX_HEADER_BYTES):
            raise _Fail(f"TOO_LARGE details for a header must give header_bytes={len(frame)} and "
                        f"max_header_bytes={codec.MAX_HEADER_BYTES}, got {d}")
        self.alive()
        return f"{len(frame)} bytes refused"

    def s_expires_in(self) -> str:
        if self.minor < 1:
            raise _Skip("expires_in is a 1.1 addition; this server speaks 1.0")
        X = self.in_points()
        self.check_y(self.request("measure", {}, {"X": X}, expires_in=60.0), X.shape[0], "measure with expires_in 60")
        for bad in ("soon", -1):
            self.error(self.request("measure", {}, {"X": X}, expires_in=bad), "BAD_REQUEST", f"measure with expires_in {bad!r}")
        return "honoured and validated"

    def s_still_serving(self) -> str:
        msg = self.request("ping")
        self.ok(msg, "ping")
        if msg.header.get("server_session") != self.server_session:
            raise _Fail("the server restarted during the checks (server_session changed)")
        return ""


def check_oracle(
    address: str,
    *,
    points: str | os.PathLike[str] | Mapping[str, Any] | None = None,
    timeout: float = 5.0,
    curve_server_key: Any = None,
    curve_client_key: Any = None,
    only: Sequence[str] | None = None,
    progress: Callable[[ScenarioResult], None] | None = None,
) -> ConformanceReport:
    """Run the protocol's conformance scenarios against the server at ``address``.

    Parameters
    ----------
    address : str
        The server's endpoint.
    points : path or mapping, optional
        Sample points for the rig: ``in_limits`` (rows safe to measure), ``out_of_limits``
        (rows it must refuse), ``large_rows``. Default: mid-range points.
    timeout : float
        Seconds to wait for each reply (a request is sent at most twice).
    only : sequence of str, optional
        Run only these scenario ids (``hello`` always runs).
    progress : callable, optional
        Called with each :class:`ScenarioResult` as it completes.

    Returns
    -------
    ConformanceReport
        ``report.passed`` is False when any scenario failed.

    Raises
    ------
    OracleTimeout
        Nothing answers a ``ping`` at ``address`` (within ``timeout``); the message says why
        when ZeroMQ can tell (connection refused, a server that wants CURVE keys, a refused key).
    """
    pts = load_points(points)
    reason = diagnose(address, curve_server_key=curve_server_key, curve_client_key=curve_client_key, timeout=timeout)
    if reason is not None:
        raise OracleTimeout(f"{address} is unreachable: {reason}")
    report = ConformanceReport(address)
    channel = Channel(address, curve_server_key=curve_server_key, curve_client_key=curve_client_key)
    kit = _Kit(channel, float(timeout), pts)
    try:
        for sc in scenario_list():
            sid, title = sc["id"], sc["title"]
            if only and sid not in only and sid != "hello":
                continue
            method = getattr(kit, "s_" + sid)
            t0 = time.perf_counter()
            if sid != "hello" and kit.hello is None:
                res = ScenarioResult(sid, title, False, "not run: the handshake failed", 0.0)
            else:
                try:
                    message = method()
                    res = ScenarioResult(sid, title, True, message or "", time.perf_counter() - t0)
                except _Skip as exc:
                    res = ScenarioResult(sid, title, True, f"skipped: {exc}", time.perf_counter() - t0, skipped=True)
                except _Fail as exc:
                    res = ScenarioResult(sid, title, False, str(exc), time.perf_counter() - t0)
                except OracleTimeout as exc:
                    res = ScenarioResult(sid, title, False, f"no reply: {exc}", time.perf_counter() - t0)
                except RcvgpError as exc:
                    res = ScenarioResult(sid, title, False, f"{type(exc).__name__}: {exc}", time.perf_counter() - t0)
                except Exception as exc:  # noqa: BLE001  a broken server must not crash the kit
                    res = ScenarioResult(sid, title, False, f"unexpected {type(exc).__name__}: {exc}", time.perf_counter() - t0)
            report.results.append(res)
            if progress is not None:
                progress(res)
        if kit.hello is not None:
            report.server = {"server": kit.hello.get("server"), "oracle": kit.hello["oracle"].get("name"),
                             "server_session": kit.server_session, "limits": kit.hello.get("limits")}
    finally:
        channel.close()
    return report
