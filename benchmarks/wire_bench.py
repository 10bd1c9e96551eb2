"""Wire overhead benchmark (a script, not a test).

1. Round-trip time of ``measure`` for 256 x n points through ZmqOracle + OracleServer, against
   a raw pyzmq DEALER/ROUTER echo of the same bytes (ratio).
2. A whole Racing-CVGP run over loopback TCP against the same seeded run in-process (ratio).

    python benchmarks/wire_bench.py [--repeats 2000] [--json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import threading
import time

import numpy as np
import zmq

from rcvgp.oracle import CallableOracle, OracleSpec, Variable
from rcvgp.transport import codec
from rcvgp.transport.client import ZmqOracle
from rcvgp.transport.server import OracleServer


def spec(n: int) -> OracleSpec:
    return OracleSpec(tuple(Variable(f"x{i}", 0.5, 2.0) for i in range(n)), name=f"bench:{n}")


def fn(X: np.ndarray) -> np.ndarray:
    return X.sum(axis=1)


def echo_server(ctx: zmq.Context, stop: threading.Event, ready: list[str]) -> None:
    sock = ctx.socket(zmq.ROUTER)
    sock.setsockopt(zmq.LINGER, 0)
    sock.bind("tcp://127.0.0.1:*")
    ready.append(sock.getsockopt_string(zmq.LAST_ENDPOINT))
    while not stop.is_set():
        if sock.poll(50):
            sock.send_multipart(sock.recv_multipart(copy=False), copy=False)
    sock.close(0)


def raw_rtt(n_vars: int, repeats: int) -> float:
    ctx = zmq.Context()
    stop, ready = threading.Event(), []
    t = threading.Thread(target=echo_server, args=(ctx, stop, ready))
    t.start()
    while not ready:
        time.sleep(0.01)
    sock = ctx.socket(zmq.DEALER)
    sock.setsockopt(zmq.LINGER, 0)
    sock.connect(ready[0])
    X = np.random.default_rng(0).uniform(0.5, 2.0, (256, n_vars))
    frames = [bytes(f) for f in codec.make_request("measure", "1", "s", {}, {"X": X})]
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        sock.send_multipart([b"", *frames])
        sock.recv_multipart()
        times.append(time.perf_counter() - t0)
    sock.close(0)
    stop.set()
    t.join()
    ctx.term()
    return statistics.median(times)


def wire_rtt(n_vars: int, repeats: int) -> float:
    with OracleServer(CallableOracle(fn, spec(n_vars)), "tcp://127.0.0.1:*") as srv, ZmqOracle(srv.endpoint) as remote:
        remote.describe()
        X = np.random.default_rng(0).uniform(0.5, 2.0, (256, n_vars))
        times = []
        for _ in range(repeats):
            t0 = time.perf_counter()
            remote.measure(X)
            times.append(time.perf_counter() - t0)
    return statistics.median(times)


def local_call(n_vars: int, repeats: int) -> float:
    oracle = CallableOracle(fn, spec(n_vars))
    X = np.random.default_rng(0).uniform(0.5, 2.0, (256, n_vars))
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        oracle.measure(X)
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def search_ratio(generations: int, population: int, seed: int) -> dict[str, float]:
    from rcvgp.search import SearchConfig, run_search

    s = OracleSpec((Variable("x0", 0.5, 2.0), Variable("x1", 0.5, 2.0), Variable("x2", 0.5, 2.0)), name="bench:run")

    def truth(X: np.ndarray) -> np.ndarray:
        return X[:, 0] * np.sin(X[:, 1]) + X[:, 2]

    config = SearchConfig(population=population, generations=generations, operators=("add", "mul", "sin"))
    t0 = time.perf_counter()
    local = run_search("racing", CallableOracle(truth, s), config, seed=seed)
    t_local = time.perf_counter() - t0
    with OracleServer(CallableOracle(truth, s), "tcp://127.0.0.1:*") as srv, ZmqOracle(srv.endpoint) as remote:
        t0 = time.perf_counter()
        wire = run_search("racing", remote, config, seed=seed)
        t_wire = time.perf_counter() - t0
    same = local.best.expression == wire.best.expression and local.test_metrics == wire.test_metrics
    return {"in_process_s": t_local, "loopback_s": t_wire, "ratio": t_wire / t_local, "requests": wire.requests,
            "points": wire.points_measured, "identical_result": same}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=2000)
    parser.add_argument("--generations", type=int, default=20)
    parser.add_argument("--population", type=int, default=50)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--skip-search", action="store_true")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    rows = []
    for n in (1, 2, 4, 8):
        raw = raw_rtt(n, args.repeats)
        wire = wire_rtt(n, args.repeats)
        local = local_call(n, args.repeats)
        rows.append({"n_vars": n, "rows": 256, "bytes": 256 * n * 8, "raw_echo_us": raw * 1e6, "measure_us": wire * 1e6,
                     "in_process_us": local * 1e6, "ratio_vs_raw": wire / raw})
    out: dict[str, object] = {"rtt": rows}
    if not args.skip_search:
        out["search"] = search_ratio(args.generations, args.population, args.seed)
    if args.json:
        print(json.dumps(out, indent=2))
        return 0
    print("measure round trip, 256 x n points, loopback TCP (median)")
    print(f"{'n':>3} {'bytes':>7} {'raw echo us':>12} {'measure us':>11} {'ratio':>6} {'in-process us':>14}")
    for r in rows:
        print(f"{r['n_vars']:>3} {r['bytes']:>7} {r['raw_echo_us']:>12.1f} {r['measure_us']:>11.1f} {r['ratio_vs_raw']:>6.2f} {r['in_process_us']:>14.1f}")
    if "search" in out:
        s = out["search"]
        print(f"Racing-CVGP run (population {args.population}, {args.generations} generations, seed {args.seed}): "
              f"in-process {s['in_process_s']:.2f} s, loopback {s['loopback_s']:.2f} s, ratio {s['ratio']:.3f} "
              f"({s['requests']} requests, {s['points']} points, identical result: {s['identical_result']})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
