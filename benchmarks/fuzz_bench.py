"""Fuzz benchmark of the oracle server (a script, not a test).

Starts ``rcvgp serve`` as a subprocess, sends malformed messages (bad JSON and UTF-8, lone
surrogates, odd fields, versions, ids, sessions, array descriptors, dtypes, shapes, frame counts,
set points, expires_in), one at a time, and prints the replies by error code, the messages that
got no reply, server crashes, the INTERNAL count and the server's resident memory (RSS) before and
after. Then it fills the reply cache with large readback measures (the issue's 100,000 rows) to
show the cache's byte bound holds, and checks the server still measures.

    python benchmarks/fuzz_bench.py [--messages 100000] [--seed 0] [--fill 300] [--fill-rows 100000]

Linux only (RSS is read from /proc). Targets: 0 crashes, 0 no-replies, 0 INTERNAL, memory growth
within the reply cache's bound (``--reply-cache-bytes``, 64 MiB by default).
"""

from __future__ import annotations

import argparse
import collections
import json
import random
import socket
import subprocess
import sys
import time
import uuid
from typing import Any

import numpy as np
import zmq

ORACLE = "livermore2/Vars4-1"
N_VARS = 4
REPLY_WAIT = 5.0  # seconds to wait for one reply before counting it as lost


def rss_mib(pid: int) -> float:
    with open(f"/proc/{pid}/status") as fh:
        for line in fh:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    raise RuntimeError("no VmRSS")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


# ---------------------------------------------------------------- malformed messages
WEIRD_STRINGS = ["", " ", "\x00", "é", "\u00b2.0", "\u0661.0", "1.0\n", "x" * 129, "x" * 5000, "\U0001F600", "null",
                 "../../etc/passwd", "1e999", "-1", "\u202e", "\ufeff", "ping ", "MEASURE"]
WEIRD_VALUES: list[Any] = [None, True, False, 0, -1, 1.5, 2**64, -(2**63), 1e308, [], {}, [1, 2], {"a": None}, "", "1.0"]
SURROGATE = "\\ud800"  # a JSON escape for a lone surrogate, written into the text as is


def good_header(rng: random.Random, op: str = "measure") -> dict[str, Any]:
    return {"protocol": "rcvgp-oracle", "v": "1.1", "type": "request", "op": op, "id": uuid.uuid4().hex[:12],
            "session": "fuzz-" + str(rng.randrange(64)), "params": {}}


def good_X(rng: random.Random, rows: int) -> np.ndarray:
    nprng = np.random.default_rng(rng.randrange(2**32))
    return nprng.uniform(0.5, 1.0, (rows, N_VARS))


def weird(rng: random.Random) -> Any:
    return rng.choice(WEIRD_VALUES + WEIRD_STRINGS)


def with_surrogate(header: dict[str, Any], field: str) -> bytes:
    header = dict(header, **{field: "SURROGATE_HERE"})
    return json.dumps(header).replace('"SURROGATE_HERE"', f'"{SURROGATE}"').encode()


def fuzz_message(rng: random.Random) -> list[bytes]:
    """One malformed (or borderline) message, as frames."""
    kind = rng.randrange(14)
    h = good_header(rng, rng.choice(["measure", "hello", "ping", "status", "describe"]))
    X = good_X(rng, rng.randrange(1, 20))
    desc = {"name": "X", "dtype": "<f8", "shape": list(X.shape), "nbytes": int(X.nbytes)}
    if kind == 0:  # random bytes
        return [bytes(rng.getrandbits(8) for _ in range(rng.randrange(0, 200)))]
    if kind == 1:  # truncated or broken JSON
        text = json.dumps(dict(h, arrays=[desc])).encode()
        return [text[: rng.randrange(len(text))], X.tobytes()]
    if kind == 2:  # a lone surrogate in some field
        field = rng.choice(["op", "id", "session", "v", "protocol", "type", "x_extra"])
        return [with_surrogate(dict(h, arrays=[desc]), field), X.tobytes()]
    if kind == 3:  # a weird value in a required field
        field = rng.choice(["op", "id", "session", "v", "protocol", "type", "params", "arrays"])
        return [json.dumps(dict(h, **{field: weird(rng)}), ensure_ascii=rng.random() < 0.5).encode()]
    if kind == 4:  # a field missing
        field = rng.choice(["op", "id", "session", "v", "protocol"])
        return [json.dumps({k: v for k, v in h.items() if k != field}).encode()]
    if kind == 5:  # a weird descriptor field
        field = rng.choice(["name", "dtype", "shape", "nbytes"])
        bad = dict(desc, **{field: weird(rng)}) if rng.random() < 0.7 else {k: v for k, v in desc.items() if k != field}
        return [json.dumps(dict(h, op="measure", arrays=[bad])).encode(), X.tobytes()]
    if kind == 6:  # shapes that overflow or do not match
        shape = rng.choice([[2**62, 4], [2**64, 4], [2**61, 4], [0, 2**64], [2**53, 0], [-1, 4], [X.shape[0], 5], [1] * 9])
        return [json.dumps(dict(h, op="measure", arrays=[dict(desc, shape=shape)])).encode(), X.tobytes()]
    if kind == 7:  # dtypes
        dt = rng.choice(["<c16", "|u1", "<i4", "f8", "=f8", "|O", "<M8[s]", "pickle", "<f16", ">f2", "S8", "V8"])
        return [json.dumps(dict(h, op="measure", arrays=[dict(desc, dtype=dt)])).encode(), X.tobytes()]
    if kind == 8:  # frame count mismatch
        extra = [X.tobytes()] * rng.randrange(0, 4)
        return [json.dumps(dict(h, op="measure", arrays=[desc] * rng.randrange(0, 3))).encode(), *extra]
    if kind == 9:  # set points: NaN, inf, out of limits, wrong columns, zero rows
        Y = X.copy()
        choice = rng.randrange(4)
        if choice == 0:
            Y[rng.randrange(len(Y)), rng.randrange(N_VARS)] = rng.choice([np.nan, np.inf, -np.inf, 1e300, -5.0])
        elif choice == 1:
            Y = Y[:, :3].copy()
        elif choice == 2:
            Y = Y[:0]
        else:
            Y = Y.astype("<f4")
        return [json.dumps(dict(h, op="measure", arrays=[{"name": "X", "dtype": Y.dtype.str, "shape": list(Y.shape),
                                                          "nbytes": int(Y.nbytes)}])).encode(), Y.tobytes()]
    if kind == 10:  # params and expires_in
        h["params"] = rng.choice([None, [], "x", {"readback": "yes"}, {"readback": None}, {"x": [[[[]]]]}])
        h["expires_in"] = rng.choice([None, -1, 0, "soon", True, [], 1e-9, 1e308])
        return [json.dumps(dict(h, op="measure", arrays=[desc])).encode(), X.tobytes()]
    if kind == 11:  # deep nesting or an oversize header
        if rng.random() < 0.5:
            depth = rng.randrange(30, 3000)
            return [b'{"protocol":"rcvgp-oracle","v":"1.1","op":"ping","id":"d","session":"s","x":' + b"[" * depth + b"]" * depth + b"}"]
        return [json.dumps(dict(h, x_pad=" " * rng.randrange(60000, 70000))).encode()]
    if kind == 12:  # versions
        return [json.dumps(dict(h, v=rng.choice(["2.0", "0.9", "1", "1.0.0", "1.0.0.0", "01.1", "1." + "9" * 12, "٣.0", "1_0",
                                                 "1" * 5000])), ensure_ascii=False).encode()]
    # an id reused for another request, or unknown operations
    if rng.random() < 0.5:
        return [json.dumps(dict(h, op=rng.choice(["frobnicate", "Measure", "measure ", "", "__init__", "_op_measure"]))).encode()]
    h = dict(h, op="measure", id="reused", session="fuzz-reuse")
    return [json.dumps(dict(h, arrays=[desc])).encode(), X.tobytes()]


# ---------------------------------------------------------------- run
def exchange(sock: zmq.Socket[Any], frames: list[bytes]) -> dict[str, Any] | None:
    sock.send_multipart([b"", *frames])
    if not sock.poll(int(REPLY_WAIT * 1000)):
        return None
    reply = sock.recv_multipart()
    return dict(json.loads(reply[1]))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--messages", type=int, default=100_000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--fill", type=int, default=300, help="large readback measures sent after the fuzzing")
    parser.add_argument("--fill-rows", type=int, default=100_000)
    parser.add_argument("--reply-cache-bytes", type=int, default=64 * 2**20)
    args = parser.parse_args(argv)

    address = f"tcp://127.0.0.1:{free_port()}"
    proc = subprocess.Popen([sys.executable, "-m", "rcvgp", "serve", ORACLE, "--bind", address, "--quiet",
                             "--reply-cache-bytes", str(args.reply_cache_bytes)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    line = proc.stdout.readline()
    if "Ctrl-C stops" not in line:
        print(line, proc.stderr.read() if proc.stderr else "", file=sys.stderr)
        return 1
    ctx = zmq.Context()
    sock = ctx.socket(zmq.DEALER)
    sock.setsockopt(zmq.LINGER, 0)
    sock.connect(address)
    rng = random.Random(args.seed)
    codes: collections.Counter[str] = collections.Counter()
    no_reply = crashes = 0
    try:
        assert exchange(sock, [json.dumps(good_header(rng, "hello")).encode()]) is not None
        rss_start = rss_mib(proc.pid)
        t0 = time.perf_counter()
        for i in range(args.messages):
            reply = exchange(sock, fuzz_message(rng))
            if reply is None:
                no_reply += 1
                if proc.poll() is not None:
                    crashes += 1
                    break
                sock.close(0)  # lazy pirate: drop the lost reply's socket
                sock = ctx.socket(zmq.DEALER)
                sock.setsockopt(zmq.LINGER, 0)
                sock.connect(address)
                continue
            codes["ok" if reply.get("ok") else str((reply.get("error") or {}).get("code"))] += 1
        fuzz_seconds = time.perf_counter() - t0
        rss_fuzzed = rss_mib(proc.pid)
        # fill the reply cache: large readback measures, each a new id
        fill_bytes = 0
        for k in range(args.fill):
            X = good_X(rng, args.fill_rows)
            h = dict(good_header(rng), params={"readback": True},
                     arrays=[{"name": "X", "dtype": "<f8", "shape": list(X.shape), "nbytes": int(X.nbytes)}])
            sock.send_multipart([b"", json.dumps(h).encode(), X.tobytes()])
            if not sock.poll(60_000):
                no_reply += 1
                break
            reply_frames = sock.recv_multipart()
            fill_bytes += sum(len(f) for f in reply_frames[1:])
        rss_filled = rss_mib(proc.pid)
        status = exchange(sock, [json.dumps(good_header(rng, "status")).encode()]) or {}
        X = good_X(rng, 8)
        last = exchange(sock, [json.dumps(dict(good_header(rng), arrays=[{"name": "X", "dtype": "<f8", "shape": [8, N_VARS],
                                                                        "nbytes": 8 * 8 * N_VARS}])).encode(), X.tobytes()])
    finally:
        sock.close(0)
        ctx.term()
        if proc.poll() is None:
            proc.terminate()
            proc.communicate(timeout=30)
        else:
            crashes += 0 if crashes else 1
    result = status.get("result", {})
    print(f"fuzz_bench: {ORACLE} on {address}, seed {args.seed}")
    print(f"messages sent        {sum(codes.values()) + no_reply:>10,}   ({fuzz_seconds:.1f} s)")
    for code, n in sorted(codes.items(), key=lambda kv: -kv[1]):
        print(f"  reply {code:<14} {n:>10,}")
    print(f"no reply             {no_reply:>10,}")
    print(f"crashes              {crashes:>10,}")
    print(f"INTERNAL             {codes.get('INTERNAL', 0):>10,}")
    print(f"RSS before fuzzing   {rss_start:>10.1f} MiB")
    print(f"RSS after fuzzing    {rss_fuzzed:>10.1f} MiB   (+{rss_fuzzed - rss_start:.1f})")
    print(f"RSS after {args.fill} readback measures of {args.fill_rows:,} rows ({fill_bytes / 2**20:,.0f} MiB of replies): "
          f"{rss_filled:.1f} MiB   (+{rss_filled - rss_start:.1f} from the start)")
    print(f"reply cache          {result.get('cache_entries')} entries, {(result.get('cache_bytes') or 0) / 2**20:.1f} MiB "
          f"(bound {args.reply_cache_bytes / 2**20:.0f} MiB)")
    print(f"still measuring      {bool(last and last.get('ok'))}")
    ok = crashes == 0 and no_reply == 0 and codes.get("INTERNAL", 0) == 0 and bool(last and last.get("ok"))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
