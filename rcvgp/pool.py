"""Worker processes for rcvgp: fresh (spawned) interpreters whose numerical libraries run one
thread each, so that N workers use N cores and no more. ``rcvgp bench`` runs whole searches in
them; a search with ``workers`` > 1 (:mod:`rcvgp.search.fitting`) fits its trees' constants in them.
"""

from __future__ import annotations

import concurrent.futures as cf
import multiprocessing
import os
import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

__all__ = ["THREAD_ENV_VARS", "spawn_context", "single_threaded_children", "init_worker", "process_pool"]

#: Environment variables that make numerical libraries single-threaded in the workers.
THREAD_ENV_VARS = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "VECLIB_MAXIMUM_THREADS",
                   "NUMEXPR_NUM_THREADS")


def spawn_context() -> Any:
    """Fresh interpreters for the workers: they read the single-thread settings at start, and
    forking a process that runs threads is unsafe."""
    return multiprocessing.get_context("spawn")


@contextmanager
def single_threaded_children() -> Iterator[None]:
    """Set :data:`THREAD_ENV_VARS` to 1 while worker processes are started (they inherit them),
    then restore this process's environment. A process pool starts its workers as work comes,
    so this has to last as long as the pool."""
    saved = {name: os.environ.get(name) for name in THREAD_ENV_VARS}
    os.environ.update({name: "1" for name in THREAD_ENV_VARS})
    try:
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def init_worker() -> None:
    """In each worker: single-threaded maths, Ctrl-C left to the parent (a Ctrl-C in a terminal
    reaches every process of the group; the parent ends the workers), and an end with the parent,
    should it end without shutting the pool down (killed, or a worker of a pool itself)."""
    os.environ.update({name: "1" for name in THREAD_ENV_VARS})  # already inherited; for subprocesses
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    parent = multiprocessing.parent_process()
    if parent is not None:
        threading.Thread(target=_exit_after, args=(parent,), daemon=True).start()


def _exit_after(parent: Any) -> None:
    parent.join()
    os._exit(1)


def process_pool(n_workers: int) -> cf.ProcessPoolExecutor:
    """A pool of ``n_workers`` spawned, single-threaded processes that ignore Ctrl-C; create it
    and use it inside :func:`single_threaded_children`."""
    return cf.ProcessPoolExecutor(max_workers=n_workers, mp_context=spawn_context(), initializer=init_worker)
