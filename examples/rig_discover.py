"""Discover the law of a remote rig (run ``examples/lab_rig.py`` first, in another process).

    python examples/rig_discover.py tcp://127.0.0.1:5555
"""

from __future__ import annotations

import argparse

from rcvgp.search import SearchConfig, run_search
from rcvgp.transport.client import ZmqOracle


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("endpoint", nargs="?", default="tcp://127.0.0.1:5555")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--generations", type=int, default=20)
    parser.add_argument("--population", type=int, default=50)
    args = parser.parse_args(argv)
    # A slow instrument: wait up to 30 s per attempt, and keep retrying for up to an hour
    # (a restarted server is noticed; a retried measurement is never measured twice).
    with ZmqOracle(args.endpoint, timeout=30.0, deadline=3600.0) as rig:
        spec = rig.describe()
        print(f"connected to {spec.name}: " + ", ".join(f"{v.name} [{v.unit}] in {v.describe_limits()}" for v in spec.variables))
        config = SearchConfig(population=args.population, generations=args.generations, batch=64, n_trials=4)
        result = run_search("racing", rig, config, seed=args.seed)
        status = rig.status()
    print(f"{spec.output.name} = {result.best.expression}")
    print(f"test NMSE {result.nmse_test:.3g}; {result.points_measured} points in {result.requests} requests "
          f"({result.points_failed} failed readings); server measured {status['points']} points")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
