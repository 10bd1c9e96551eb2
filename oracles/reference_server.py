"""Reference oracle server for the rcvgp oracle protocol 1.1, with plain pyzmq and numpy only.

It imports nothing from rcvgp: it is the proof that ``protocols/v1.md`` can be implemented from
its text. It serves a small built-in simulated rig,

    y = x0 * sin(x1) + 0.5 * x2**2 + noise,   x0 in [0.1, 2], |x1| in [0.5, 3], x2 in [-1, 1],

and passes ``rcvgp conformance``. Run it with

    python oracles/reference_server.py --bind tcp://127.0.0.1:5555

Single-threaded on purpose (the built-in measurement takes microseconds); a rig whose
measurements take long should measure in a worker thread so ``ping``/``status`` stay answerable.
"""

from __future__ import annotations

import argparse
import ipaddress
import json
import math
import re
import signal
import sys
import time
import uuid
from collections import OrderedDict

import numpy as np
import zmq

PROTOCOL = "rcvgp-oracle"
VERSION = "1.1"
MAJOR = 1
DTYPES = ("<f8", ">f8", "<f4", ">f4")
RETRYABLE = {"BUSY"}
VERSION_TEXT = re.compile(r"[0-9]{1,9}(\.[0-9]{1,9}){0,2}")  # ASCII digits only
MAX_SESSIONS = 1024

VARIABLES = [
    {"name": "x0", "unit": "", "low": 0.1, "high": 2.0, "dist": "uniform", "only_positive": True},
    {"name": "x1", "unit": "rad", "low": 0.5, "high": 3.0, "dist": "uniform", "only_positive": False},
    {"name": "x2", "unit": "", "low": -1.0, "high": 1.0, "dist": "uniform", "only_positive": True},
]
ORACLE = {
    "name": "reference:sin-rig",
    "variables": VARIABLES,
    "output": {"name": "y", "unit": ""},
    "max_rows": 100000,
    "operators": ["add", "mul", "sin", "n2"],
    "capabilities": [],
}


def loopback(endpoint):
    """True for ipc://, and tcp:// on a loopback address (judging what follows a "SOURCE;")."""
    scheme, _, rest = endpoint.partition("://")
    if scheme == "ipc":
        return True
    host = rest.rpartition(";")[2].rsplit(":", 1)[0].strip("[]")
    if scheme != "tcp":
        return False
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


class Reject(Exception):
    """A request that gets an error reply."""

    def __init__(self, code, message, details=None):
        super().__init__(message)
        self.code, self.message, self.details = code, message, details or {}


def has_surrogate(value):
    """True when a string anywhere in value holds a lone UTF-16 surrogate (from a "\\ud800" escape)."""
    if isinstance(value, str):
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            return True
        return False
    if isinstance(value, dict):
        return any(has_surrogate(k) or has_surrogate(v) for k, v in value.items())
    if isinstance(value, list):
        return any(has_surrogate(v) for v in value)
    return False


def clean(value):
    """Strict JSON: no NaN or Infinity."""
    if isinstance(value, float) and not math.isfinite(value):
        return repr(value)
    if isinstance(value, dict):
        return {k: clean(v) for k, v in value.items()}
    if isinstance(value, list):
        return [clean(v) for v in value]
    return value


class ReferenceServer:
    def __init__(self, address, noise=0.01, seed=0, max_message_bytes=64 * 2**20, cache_bytes=64 * 2**20):
        self.address = address
        self.rng = np.random.default_rng(seed)
        self.noise = noise
        self.max_message_bytes = max_message_bytes
        self.cache = OrderedDict()  # (session, id) -> (fingerprint, reply frames), bounded in bytes
        self.cache_bytes = cache_bytes
        self.cached = 0
        self.session = uuid.uuid4().hex
        self.started = time.time()
        self.counters = {"requests": 0, "errors": 0, "measurements": 0, "points": 0, "cache_hits": 0}
        self.sessions = OrderedDict()  # client session -> its own counters (status.session_counters)
        self.running = True

    def session_counters(self, session):
        counters = self.sessions.setdefault(session, {"measurements": 0, "points": 0, "cache_hits": 0})
        self.sessions.move_to_end(session)
        while len(self.sessions) > MAX_SESSIONS:
            self.sessions.popitem(last=False)
        return counters

    # the rig ---------------------------------------------------------------------------
    def measure(self, X):
        y = X[:, 0] * np.sin(X[:, 1]) + 0.5 * X[:, 2] ** 2
        return y + self.noise * self.rng.standard_normal(len(y))

    # replies ---------------------------------------------------------------------------
    def header(self, request):
        request = request or {}

        def echo(key):
            value = request.get(key)
            return value if isinstance(value, str) and len(value) <= 128 and not has_surrogate(value) else None

        return {"protocol": PROTOCOL, "v": VERSION, "type": "reply", "op": echo("op"), "id": echo("id"),
                "session": echo("session"), "server_session": self.session}

    def ok(self, request, result, arrays=()):
        h = self.header(request)
        h["ok"] = True
        h["result"] = result
        h["arrays"] = []
        frames = []
        for name, a in arrays:
            a = np.ascontiguousarray(a, dtype="<f8")
            h["arrays"].append({"name": name, "dtype": "<f8", "shape": list(a.shape), "nbytes": a.nbytes})
            frames.append(a.tobytes())
        return [json.dumps(h, allow_nan=False).encode()] + frames

    def error(self, request, code, message, details=None):
        self.counters["errors"] += 1
        h = self.header(request)
        h["ok"] = False
        h["error"] = {"code": code, "message": message, "retryable": code in RETRYABLE, "details": clean(details or {})}
        h["arrays"] = []
        return [json.dumps(h, allow_nan=False).encode()]

    # validation (protocols/v1.md section 4) ----------------------------------------------
    def parse(self, body):
        if not body:
            raise Reject("BAD_REQUEST", "empty message: frame 0 must be a JSON header")
        if len(body[0]) > 65536:
            raise Reject("TOO_LARGE", f"header frame of {len(body[0])} bytes, the limit is 65536",
                         {"header_bytes": len(body[0]), "max_header_bytes": 65536})
        try:
            text = body[0].decode("utf-8")
        except UnicodeDecodeError:
            raise Reject("BAD_REQUEST", "frame 0 (the header) is not valid UTF-8") from None
        try:
            header = json.loads(text, parse_constant=lambda c: (_ for _ in ()).throw(ValueError(c)))
        except (ValueError, RecursionError) as exc:
            raise Reject("BAD_REQUEST", f"frame 0 (the header) is not valid JSON: {exc}") from None
        if not isinstance(header, dict):
            raise Reject("BAD_REQUEST", "frame 0 must be a JSON object")
        if has_surrogate(header):
            raise Reject("BAD_REQUEST", "frame 0 holds a lone UTF-16 surrogate escape, which is not Unicode text")
        return header

    def check(self, header, body):
        size = sum(len(f) for f in body)
        if size > self.max_message_bytes:
            raise Reject("TOO_LARGE", f"message is {size} bytes, the limit is {self.max_message_bytes}",
                         {"bytes": size, "max_message_bytes": self.max_message_bytes})
        if header.get("protocol") != PROTOCOL:
            raise Reject("BAD_REQUEST", f'"protocol" must be "{PROTOCOL}"')
        v = header.get("v")
        if not isinstance(v, str) or not VERSION_TEXT.fullmatch(v):
            raise Reject("BAD_REQUEST", f'"v" must be a version string like "{VERSION}" (ASCII digits)')
        major = int(v.split(".")[0])
        if major != MAJOR:
            side = "server" if major > MAJOR else "client"
            raise Reject("UNSUPPORTED_VERSION",
                         f"protocol major version mismatch: client speaks {PROTOCOL} {v}, server speaks {VERSION}; "
                         f"upgrade the {side}", {"client_version": v, "server_version": VERSION, "supported": [VERSION]})
        if header.get("type", "request") != "request":
            raise Reject("BAD_REQUEST", '"type" must be "request"')
        for key in ("id", "session"):
            value = header.get(key)
            if not isinstance(value, str) or not 1 <= len(value) <= 128:
                raise Reject("BAD_REQUEST", f'"{key}" must be a string of 1 to 128 characters')
        op = header.get("op")
        if not isinstance(op, str):
            raise Reject("BAD_REQUEST", '"op" must be a string')
        if op not in ("hello", "describe", "measure", "ping", "status"):
            raise Reject("UNKNOWN_OPERATION", f"unknown operation {op[:64]!r}",
                         {"operation": op[:64], "operations": ["hello", "describe", "measure", "ping", "status"]})
        if not isinstance(header.get("params") or {}, dict):  # null is the same as absent
            raise Reject("BAD_REQUEST", '"params" must be a JSON object')
        expires_in = header.get("expires_in")  # this server never queues, so a request never expires
        if expires_in is not None and (isinstance(expires_in, bool) or not isinstance(expires_in, (int, float))
                                       or not 0 < expires_in < math.inf):
            raise Reject("BAD_REQUEST", '"expires_in" must be a number of seconds > 0')
        descs = header.get("arrays") or []
        if not isinstance(descs, list) or len(descs) != len(body) - 1:
            raise Reject("BAD_REQUEST", f'"arrays" describes {len(descs) if isinstance(descs, list) else "?"} '
                                        f"array(s) but {len(body) - 1} frame(s) follow the header")
        arrays = {}
        for desc, frame in zip(descs, body[1:]):
            if not isinstance(desc, dict) or not isinstance(desc.get("name"), str):
                raise Reject("BAD_REQUEST", "each array descriptor needs a name")
            name, dtype, shape = desc["name"], desc.get("dtype"), desc.get("shape")
            if dtype not in DTYPES:
                raise Reject("BAD_REQUEST", f"array {name!r}: dtype {dtype!r} not supported; use one of {DTYPES}")
            if not isinstance(shape, list) or len(shape) > 8 or not all(
                    isinstance(s, int) and not isinstance(s, bool) and 0 <= s < 2**53 for s in shape):
                raise Reject("BAD_REQUEST", f"array {name!r}: shape must be a list of at most 8 integers from 0 to 2**53 - 1")
            expected = math.prod(shape) * np.dtype(dtype).itemsize  # Python integers: no overflow
            if desc.get("nbytes") != len(frame) or expected != len(frame):
                raise Reject("BAD_REQUEST", f"array {name!r}: shape {shape} of {dtype} needs {expected} bytes, "
                                            f"nbytes says {desc.get('nbytes')}, the frame has {len(frame)}")
            try:
                arrays[name] = np.frombuffer(frame, dtype=dtype).reshape(shape).astype(np.float64)
            except ValueError:
                raise Reject("BAD_REQUEST", f"array {name!r}: shape {shape} is too large") from None
        return op, arrays

    def check_points(self, arrays):
        X = arrays.get("X")
        if X is None:
            raise Reject("BAD_REQUEST", 'measure needs an array "X"')
        if X.ndim != 2 or X.shape[1] != len(VARIABLES) or X.shape[0] < 1:
            raise Reject("BAD_REQUEST", f"X must have shape (n_rows >= 1, {len(VARIABLES)}), got {list(X.shape)}")
        if X.shape[0] > ORACLE["max_rows"]:
            raise Reject("TOO_LARGE", f"{X.shape[0]} rows, at most {ORACLE['max_rows']} per request",
                         {"rows": int(X.shape[0]), "max_rows": ORACLE["max_rows"]})
        for j, var in enumerate(VARIABLES):
            col = X[:, j] if var["only_positive"] else np.abs(X[:, j])
            bad = ~(np.isfinite(col) & (col >= var["low"]) & (col <= var["high"]))
            if bad.any():
                i = int(np.flatnonzero(bad)[0])
                value = float(X[i, j])
                lim = (f"[{var['low']:g}, {var['high']:g}]" if var["only_positive"]
                       else f"[{-var['high']:g}, {-var['low']:g}] U [{var['low']:g}, {var['high']:g}]")
                raise Reject("OUT_OF_LIMITS", f"variable {var['name']} = {value!r} (row {i}) is outside its limits {lim}",
                             {"variable": var["name"], "column": j, "row": i, "value": value, "low": var["low"],
                              "high": var["high"], "only_positive": var["only_positive"], "limits": lim})
        return X

    # operations --------------------------------------------------------------------------
    def handle(self, body):
        header = None
        try:
            header = self.parse(body)
            op, arrays = self.check(header, body)
            if op == "hello":
                return self.ok(header, {"server": "reference_server.py", "server_session": self.session,
                                        "versions": [VERSION], "operations": ["hello", "describe", "measure", "ping", "status"],
                                        "oracle": ORACLE, "capabilities": ["expires_in", "session_counters"],
                                        "limits": {"max_rows": ORACLE["max_rows"], "max_message_bytes": self.max_message_bytes,
                                                   "max_queue": 1, "dtypes": list(DTYPES),
                                                   "reply_cache_bytes": self.cache_bytes, "measure_timeout": None}})
            if op == "describe":
                return self.ok(header, {"oracle": ORACLE})
            if op == "ping":
                return self.ok(header, {"server_session": self.session, "time": time.time()})
            if op == "status":
                return self.ok(header, dict(self.counters, server_session=self.session, state="idle", queue=0,
                                            current=None, uptime=time.time() - self.started, cache_entries=len(self.cache),
                                            cache_bytes=self.cached, session_counters=dict(self.session_counters(header["session"]))))
            # measure: the reply cache first, keyed by (session, id)
            key = (header["session"], header["id"])
            fingerprint = (json.dumps([header.get("params"), header.get("arrays")], sort_keys=True), tuple(bytes(f) for f in body[1:]))
            if key in self.cache:
                stored_fp, frames = self.cache[key]
                if stored_fp != fingerprint:
                    raise Reject("BAD_REQUEST", f"request id {key[1]!r} already used for a different request")
                self.counters["cache_hits"] += 1
                self.session_counters(key[0])["cache_hits"] += 1
                return frames
            X = self.check_points(arrays)
            for counters in (self.counters, self.session_counters(key[0])):
                counters["measurements"] += 1
                counters["points"] += X.shape[0]
            try:
                y = self.measure(X)
                frames = self.ok(header, {"n_rows": int(X.shape[0])}, [("y", y)])
            except Exception as exc:  # noqa: BLE001 the rig failed
                frames = self.error(header, "RIG_FAULT", f"{type(exc).__name__}: {exc}")
            self.cache[key] = (fingerprint, frames)
            self.cached += sum(len(f) for f in frames) + 512
            while self.cached > self.cache_bytes and len(self.cache) > 1:  # the newest always stays
                _, (_, old) = self.cache.popitem(last=False)
                self.cached -= sum(len(f) for f in old) + 512
            return frames
        except Reject as exc:
            return self.error(header, exc.code, exc.message, exc.details)
        except Exception as exc:  # noqa: BLE001 never die on a request
            return self.error(header, "INTERNAL", f"{type(exc).__name__}: {exc}")

    def serve(self, ready=None):
        ctx = zmq.Context()
        sock = ctx.socket(zmq.ROUTER)
        sock.setsockopt(zmq.LINGER, 0)
        sock.setsockopt(zmq.MAXMSGSIZE, 2 * self.max_message_bytes + 2**20)
        sock.bind(self.address)
        endpoint = sock.getsockopt_string(zmq.LAST_ENDPOINT)
        if not loopback(endpoint):  # judge what was bound: "tcp://127.0.0.1:1;*:5555" binds *:5555
            sock.close(0)
            ctx.term()
            raise SystemExit(f"refusing to serve on {endpoint} (from {self.address}): the reference server has "
                             "no CURVE support; bind loopback or ipc:// only")
        print(f"reference server on {endpoint} (server session {self.session})", flush=True)
        try:
            while self.running:
                if not sock.poll(200):
                    continue
                msg = sock.recv_multipart()
                self.counters["requests"] += 1
                # envelope: identity, then everything up to and including the first empty frame
                cut = next((k + 1 for k in range(1, len(msg)) if msg[k] == b""), 1)
                envelope, body = msg[:cut], msg[cut:]
                sock.send_multipart(envelope + self.handle(body))
        finally:
            sock.close(0)
            ctx.term()


def main(argv=None):
    parser = argparse.ArgumentParser(description="rcvgp oracle protocol 1.1 reference server (pyzmq + numpy)")
    parser.add_argument("--bind", default="tcp://127.0.0.1:5555")
    parser.add_argument("--noise", type=float, default=0.01, help="std of additive Gaussian noise")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--max-message-bytes", type=int, default=64 * 2**20)
    args = parser.parse_args(argv)
    if not loopback(args.bind):
        parser.error("the reference server has no CURVE support: bind loopback or ipc:// only")
    server = ReferenceServer(args.bind, noise=args.noise, seed=args.seed, max_message_bytes=args.max_message_bytes)

    def stop(signum, frame):
        server.running = False

    signal.signal(signal.SIGINT, stop)
    signal.signal(signal.SIGTERM, stop)
    server.serve()
    return 0


if __name__ == "__main__":
    sys.exit(main())
