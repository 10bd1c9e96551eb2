"""A hard wall-time limit for pure-Python work that can run for hours, such as sympy's simplify.

The work runs in a child process, killed when its time is up. A timer signal in this process
cannot do it: sympy's simplify can sit for minutes inside one call into C (a ``pow`` on huge
integers while factoring), and a signal's handler only runs once that call returns. The child
is spawned once and reused, so a call costs a round trip through a pipe, not a new interpreter.
"""

from __future__ import annotations

import atexit
import threading
from collections.abc import Callable
from typing import Any, TypeVar

__all__ = ["TimeUp", "call_with_time_limit"]

T = TypeVar("T")


class TimeUp(Exception):
    """Raised by :func:`call_with_time_limit` when the call's time is up."""


def call_with_time_limit(seconds: float, fn: Callable[..., T], *args: Any) -> T:
    """``fn(*args)`` run in a child process, or :class:`TimeUp` after ``seconds`` of wall time.
    ``fn`` must be a module-level function, and its arguments and result picklable; an exception
    it raises is raised here, :class:`ChildProcessError` if the child dies (out of memory).

    In a daemonic process (a ``multiprocessing.Pool`` worker), which may have no children,
    ``fn`` runs in this process, with no limit."""
    import multiprocessing

    if multiprocessing.current_process().daemon:
        return fn(*args)
    return _CHILD.call(seconds, fn, args)


class _Child:
    """One spawned process that runs calls in turn; killed and replaced when one runs late."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._process: Any = None
        self._conn: Any = None

    def call(self, seconds: float, fn: Callable[..., T], args: tuple[Any, ...]) -> T:
        with self._lock:
            if self._process is None or not self._process.is_alive():
                self._stop()  # one that died (killed from outside) leaves its pipe to close
                self._start()
            try:
                self._conn.send((fn, args))
                if not self._conn.poll(seconds):
                    raise TimeUp
                ok, value = self._conn.recv()
            except (EOFError, ConnectionError):  # the child died: killed, or out of memory
                self._stop()
                raise ChildProcessError("the time-limited call's process ended without a reply") from None
            except BaseException:
                # A late reply would be read as the next call's: a child left mid-call goes.
                self._stop()
                raise
        if ok:
            return value  # type: ignore[no-any-return]
        raise value

    def _start(self) -> None:
        from rcvgp.pool import spawn_context

        ctx = spawn_context()
        self._conn, child_end = ctx.Pipe()
        # Daemonic: a worker process that ends joins its other children first (multiprocessing's
        # exit), and this one would wait for a call forever: a benchmark hung at its end so.
        self._process = ctx.Process(target=_serve, args=(child_end,), name="rcvgp-time-limit", daemon=True)
        self._process.start()
        child_end.close()
        atexit.register(self._stop)

    def _stop(self) -> None:
        if self._process is None:
            return
        self._conn.close()
        self._process.kill()
        self._process.join()
        self._process.close()
        self._process = self._conn = None
        atexit.unregister(self._stop)


def _serve(conn: Any) -> None:
    """The child's loop: run each call sent, send back ``(True, result)`` or ``(False, error)``;
    end when the parent closes its end (or ends: :func:`rcvgp.pool.init_worker`)."""
    from rcvgp.pool import init_worker

    init_worker()
    while True:
        try:
            fn, args = conn.recv()
        except EOFError:
            return
        try:
            reply = (True, fn(*args))
        except Exception as error:  # noqa: BLE001 - raised in the caller instead
            reply = (False, error)
        try:
            conn.send(reply)
        except Exception as error:  # noqa: BLE001 - a result or an error that does not pickle
            conn.send((False, RuntimeError(f"{fn.__name__}: {error}")))


_CHILD = _Child()
