"""The hard wall-time limit of :mod:`rcvgp.timelimit`."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from rcvgp.timelimit import TimeUp, call_with_time_limit


def _deaf_sleep(seconds: float) -> str:
    """Sleep with every signal blocked: what sympy does inside one long call into C, where a
    timer signal's handler cannot run until the call returns."""
    signal.pthread_sigmask(signal.SIG_BLOCK, set(signal.Signals) - {signal.SIGKILL, signal.SIGSTOP})
    time.sleep(seconds)
    return "woke"


def _divide(a: float, b: float) -> float:
    return a / b


def _pid() -> int:
    return os.getpid()


def test_a_call_deaf_to_signals_is_stopped_at_its_time_and_the_next_call_runs() -> None:
    """The limit is its point: the old timer-signal limit raised TimeUp here only after the
    whole minute's sleep (a hang of a benchmark's scoring, and of CI, for as long as sympy's)."""
    start = time.monotonic()
    with pytest.raises(TimeUp):
        call_with_time_limit(0.5, _deaf_sleep, 60.0)
    assert time.monotonic() - start < 30.0
    assert call_with_time_limit(30.0, _divide, 1.0, 4.0) == 0.25


def test_a_call_s_result_and_error_come_back_from_one_reused_child() -> None:
    assert call_with_time_limit(30.0, _divide, 3.0, 2.0) == 1.5
    with pytest.raises(ZeroDivisionError):
        call_with_time_limit(30.0, _divide, 1.0, 0.0)
    first = call_with_time_limit(30.0, _pid)
    assert first != os.getpid()
    assert call_with_time_limit(30.0, _pid) == first


def test_a_child_killed_from_outside_is_replaced_at_the_next_call() -> None:
    first = call_with_time_limit(30.0, _pid)
    os.kill(first, signal.SIGKILL)
    try:
        second = call_with_time_limit(30.0, _pid)
    except ChildProcessError:  # sent before the death was seen: this call is lost, not the next
        second = call_with_time_limit(30.0, _pid)
    assert second not in (first, os.getpid())


@pytest.mark.integration
def test_worker_processes_that_used_the_limit_end_and_a_daemonic_one_runs_the_call_itself(tmp_path: Path) -> None:
    """A benchmark's worker joins its children as it ends: the limit's child, waiting for its
    next call, kept it (and the benchmark) from ending at all. A multiprocessing.Pool worker is
    daemonic and may have no child: it runs the call itself."""
    script = textwrap.dedent("""
        import multiprocessing
        from rcvgp.pool import process_pool, single_threaded_children
        from rcvgp.timelimit import call_with_time_limit

        def pid_of_the_call(_):
            import os
            return call_with_time_limit(30.0, os.getpid), os.getpid()

        if __name__ == "__main__":
            with single_threaded_children(), process_pool(2) as pool:
                assert all(call != worker for call, worker in pool.map(pid_of_the_call, range(4)))
            with multiprocessing.get_context("spawn").Pool(2) as daemonic:
                assert all(call == worker for call, worker in daemonic.map(pid_of_the_call, range(2)))
            print("ended")
    """)
    path = tmp_path / "workers.py"  # spawned workers import their functions from a file
    path.write_text(script)
    done = subprocess.run([sys.executable, str(path)], check=False, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and done.stdout.strip() == "ended", done.stderr
