"""The experiment runner: the one place that wires an experiment's oracle, journal and search.

:func:`run_experiment` takes a validated :class:`~rcvgp.config.ExperimentConfig`, builds its
oracle (:func:`build_oracle`: a simulated catalog entry, a simulated expression, or a remote
endpoint), wraps it in a :class:`~rcvgp.journal.JournalingOracle` so that every measurement is
on disk before the search uses it, runs the search, and writes ``result.json`` and
``summary.txt`` atomically (a temporary file, then a rename) into the output folder, beside
``journal.jsonl``, the resolved ``experiment.yaml``, ``history.jsonl`` (one line per
generation, written as the search goes: :data:`HISTORY_FIELDS`) and ``test_points.csv`` (the
fresh points the law was scored on, with its predictions).

Ctrl-C (SIGINT) or SIGTERM asks the search to stop after its current generation; the best
expression so far is then saved like any other result, with ``stopped: interrupted``. A second
Ctrl-C aborts at once; the journal is intact either way, and ``resume=True`` continues the run
without measuring any journalled point again.

:func:`load_run` reads a run folder back into the :class:`RunReport` that
:func:`run_experiment` returned: the law to evaluate, the front, the settings and the
measurements (:meth:`RunReport.data`), which :func:`write_measurements` saves as CSV or NPZ.
"""

from __future__ import annotations

import csv
import io
import json
import math
import numbers
import os
import secrets
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

import numpy as np
import yaml

from rcvgp.config import ExperimentConfig
from rcvgp.errors import ConfigError, ExpressionError, OracleError, OracleTimeout, ProtocolError, RunFolderError
from rcvgp.journal import (
    JOURNAL_NAME, JournalingOracle, JournalStats, Measurements, column_label, read_measurements,
)
from rcvgp.noisefloor import NoiseModel
from rcvgp.oracle import DataOracle, OracleSpec
from rcvgp.search.base import Progress, SearchResult

__all__ = [
    "RESULT_NAME",
    "SUMMARY_NAME",
    "EXPERIMENT_NAME",
    "MEASUREMENTS_NAME",
    "EXPORT_FORMATS",
    "HISTORY_NAME",
    "HISTORY_FIELDS",
    "TEST_POINTS_NAME",
    "RunReport",
    "read_result",
    "ProgressPrinter",
    "build_oracle",
    "run_experiment",
    "load_run",
    "format_summary",
    "format_progress",
    "write_measurements",
    "write_atomic",
]

#: File names inside a run's output folder (besides the journal, ``journal.jsonl``).
RESULT_NAME = "result.json"
SUMMARY_NAME = "summary.txt"
EXPERIMENT_NAME = "experiment.yaml"
#: File name (without its suffix) that ``rcvgp export`` writes the measurements to, by default.
MEASUREMENTS_NAME = "measurements"
#: The formats :func:`write_measurements` writes.
EXPORT_FORMATS = ("csv", "npz")
HISTORY_NAME = "history.jsonl"
TEST_POINTS_NAME = "test_points.csv"
#: The keys of each line of ``history.jsonl`` (one line per generation).
HISTORY_FIELDS = ("round", "n_rounds", "generation", "best_nmse", "schedules", "points", "requests", "seconds")
_SAME_GENERATION = ("round", "generation", "points", "requests")  # a replayed line is the journalled run's line
_RUN_FILES = (JOURNAL_NAME, RESULT_NAME, SUMMARY_NAME, EXPERIMENT_NAME, HISTORY_NAME, TEST_POINTS_NAME)
_PRETTY_WIDTH = 100  # widest pretty-printed expression the summary shows
_FRONT_SHOWN = 8  # entries of the Pareto front the summary lists
_FRONT_WIDTH = 70


@dataclass(frozen=True)
class RunReport:
    """A run: what :func:`run_experiment` returns and :func:`load_run` reads back from its folder.

    The answer is the search's (:attr:`result`): :attr:`law`, :attr:`equations`, :meth:`sympy`,
    :meth:`latex` and :meth:`predict`, as on a :class:`~rcvgp.search.SearchResult`; the run adds
    its settings (:attr:`config`), its files (:attr:`output`, :attr:`result_json`) and its
    measurements (:meth:`data`).

    Attributes
    ----------
    config : ExperimentConfig
    result : SearchResult
        The search's own result (rebuilt from ``result.json`` by :func:`load_run`).
    result_json : dict
        The content of ``result.json`` (JSON-ready): the search result plus ``exact``,
        ``truth``, ``oracle``, ``units``, ``journal`` counts and ``output``.
    output : Path
        The run's folder.
    journal : JournalStats
        Points and requests replayed from the journal and measured live.
    """

    config: ExperimentConfig
    result: SearchResult
    result_json: dict[str, Any]
    output: Path
    journal: JournalStats

    @property
    def interrupted(self) -> bool:
        return self.result.stopped == "interrupted"

    @property
    def law(self) -> str:
        """The law, as text (constants rounded to 6 digits; :meth:`sympy` has them in full)."""
        return self.result.law

    @property
    def equations(self) -> list[dict[str, Any]]:
        """The Pareto front the law was chosen from, simplest first: per entry ``complexity``,
        ``loss``, ``nmse_validation``, ``expression``, ``latex``, ``sympy``, ``schedule`` and
        ``chosen`` (``pandas.DataFrame(run.equations)`` makes it a table)."""
        return [dict(e) for e in self.result_json.get("equations") or ()]

    def sympy(self, index: int | None = None) -> Any:
        """The law as a sympy expression over the variables' names, or the front's entry ``index``."""
        return self.result.sympy(index)

    def latex(self, index: int | None = None) -> str:
        """The law (or the front's entry ``index``) in LaTeX."""
        return self.result.latex(index)

    def predict(self, X: Any, index: int | None = None) -> np.ndarray:
        """The law (or the front's entry ``index``) on new points: ``X`` of shape
        (n_samples, n_vars), or a mapping of variable name to values
        (:meth:`SearchResult.predict <rcvgp.search.SearchResult.predict>`)."""
        return self.result.predict(X, index)

    def data(self) -> Measurements:
        """Every measurement of the run, from its journal: set points and readings as numpy
        arrays, with the variables' names and units and the request of each row.

        Raises
        ------
        RunFolderError
            When the run's folder has no journal.
        """
        path = self.output / JOURNAL_NAME
        if not path.exists():
            raise RunFolderError(f"{_shown(self.output)}: no {JOURNAL_NAME}, so no measurements to read")
        return read_measurements(path)

    def __repr__(self) -> str:
        nmse = _num(self.result_json.get("nmse_test"))
        return f"RunReport({_shown(self.output)!r}: {self.law}, test NMSE {nmse}, {self.result.stopped})"

    def __str__(self) -> str:
        return format_summary(self.result_json)


def load_run(run_dir: str | Path) -> RunReport:
    """Read a run back from its output folder (``result.json``, ``experiment.yaml``, and the
    journal for :meth:`RunReport.data`). It needs no connection, so the CurveZMQ key files the
    experiment names need not be there (a folder copied to another machine loads).

    Reading the law evaluates the text of ``result.json`` (as ``sympy.sympify`` does): load only
    runs you trust.

    Raises
    ------
    RunFolderError
        When the folder does not exist, has no ``result.json`` (an unfinished run: its
        measurements can still be exported), or a file in it is damaged.
    """
    folder = Path(run_dir)
    data = read_result(folder)
    try:
        result = SearchResult.from_dict(data)
    except ConfigError as exc:
        raise RunFolderError(f"{_shown(folder / RESULT_NAME)}: {exc}") from None
    from rcvgp.config import load_experiment

    try:
        config = load_experiment(folder / EXPERIMENT_NAME, check_key_files=False)
    except ConfigError as exc:
        raise RunFolderError(str(exc)) from None
    counts: dict[str, Any] = data["journal"] if isinstance(data.get("journal"), dict) else {}
    journal = JournalStats(**{k: int(counts.get(k) or 0) for k in JournalStats.__dataclass_fields__})
    return RunReport(config=config, result=result, result_json=data, output=folder, journal=journal)


def read_result(run_dir: str | Path) -> dict[str, Any]:
    """The content of a run folder's ``result.json``, or a :class:`RunFolderError` that says
    what the folder is instead (none, an unfinished run, a damaged file)."""
    folder = Path(run_dir)
    if not folder.is_dir():
        what = "not a folder" if folder.exists() else "no such folder"
        raise RunFolderError(f"{run_dir}: {what}; give a run's output folder (the `output` of its experiment)")
    path = folder / RESULT_NAME
    if not path.exists():
        if (folder / JOURNAL_NAME).exists():
            hint = (f"the run has not finished: continue it with `rcvgp run {_shown(folder / EXPERIMENT_NAME)} "
                    f"--resume`, or save what it measured with `rcvgp export {run_dir}`")
        else:
            hint = f"not a run's output folder (no {JOURNAL_NAME} either)"
        raise RunFolderError(f"{run_dir}: no {RESULT_NAME}; {hint}")
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise RunFolderError(f"{_shown(path)}: not readable as JSON ({exc}); the run's other files, and "
                             f"`rcvgp export {run_dir}`, may still serve") from None
    if not isinstance(data, dict):
        raise RunFolderError(f"{_shown(path)}: expected a JSON object, got {type(data).__name__}")
    if "expression" not in data:
        raise RunFolderError(f"{_shown(path)}: not an rcvgp result (no `expression`)")
    return data


def build_oracle(config: ExperimentConfig, notes: TextIO | None = None) -> DataOracle:
    """The oracle an experiment names, ready to answer (an endpoint has done its handshake).

    Parameters
    ----------
    config : ExperimentConfig
    notes : text stream, optional
        Where to say what an endpoint that does not answer yet seems to be doing (every few
        seconds while the handshake, or a later request, waits).

    Raises
    ------
    ConfigError
        For an oracle that cannot be built from the settings, naming the experiment's source
        and key.
    OracleTimeout
        For an endpoint that does not answer the handshake, with the likeliest reason
        (nothing listening, a CURVE key missing or refused, a silent server) and the key to fix.
    OracleError
        For an endpoint that refuses the handshake.
    """
    o = config.oracle
    # Noise and simulated failures get their own stream, apart from the search's (same seed).
    if o.kind in ("catalog", "expression"):
        from rcvgp.simulate import SimulatedOracle

        options: dict[str, Any] = dict(
            noise=o.noise, seed=np.random.default_rng([config.seed, 0x5EED]), latency=o.latency,
            fail_rate=o.fail_rate,
        )
        key = f"oracle.{o.kind}"
        try:
            if o.kind == "catalog":
                return SimulatedOracle.from_benchmark(str(o.catalog), **options)
            return SimulatedOracle.from_expression(str(o.expression), o.variables, name=f"sim:{config.name}",
                                                   output=o.output, **options)
        except (ConfigError, ExpressionError) as exc:
            raise config.error(key, str(exc)) from exc

    from rcvgp.transport.client import ZmqOracle

    endpoint = str(o.endpoint)
    try:
        remote = ZmqOracle(endpoint, timeout=o.timeout, deadline=o.deadline,
                           curve_server_key=o.server_key, curve_client_key=o.client_key,
                           on_wait=None if notes is None else (lambda text: _note(notes, text)))
    except ConfigError as exc:
        raise config.error("oracle", str(exc)) from exc
    except (OSError, ValueError) as exc:  # zmq errors on a bad key file or address
        raise config.error("oracle", f"cannot open {endpoint}: {exc}") from exc
    try:
        remote.describe()  # the handshake: fails here, not in the middle of the search
    except ConfigError as exc:  # an address the socket refuses
        remote.close()
        raise config.error("oracle.endpoint", str(exc)) from exc
    except OracleTimeout as exc:
        kind, why = remote.diagnosis()
        remote.close()
        keys = {key: config.label(f"oracle.{key}") for key in ("endpoint", "deadline", "server_key", "client_key")}
        hint = _NO_ANSWER_HINTS.get(kind, _NO_ANSWER_HINTS["unreachable"]).format(address=endpoint, **keys)
        raise OracleTimeout(
            f"{config.source}: {config.label('oracle.endpoint')}: no answer from {endpoint} within "
            f"{o.deadline:g} s: {why}; {hint}"
        ) from exc
    except (OracleError, ProtocolError) as exc:
        remote.close()
        raise OracleError(f"{config.source}: {config.label('oracle.endpoint')}: {endpoint} refused the handshake: "
                          f"{exc}") from exc
    return remote


# What to do about an endpoint that does not answer, by Channel.diagnosis() kind; the fields
# are the address and how the experiment names its keys.
_NO_ANSWER_HINTS = {
    "refused": "start the server (e.g. `rcvgp serve ID --bind {address}`) or check `{endpoint}`",
    "unreachable": "check `{endpoint}` and that its host is reachable, or raise `{deadline}`",
    "needs-curve": "set `{server_key}` to the server's public key file (the NAME.key beside its NAME.key_secret)",
    "no-curve": "remove `{server_key}` and `{client_key}`, or start the server with --curve-secret",
    "bad-server-key": "set `{server_key}` to this server's public key file (the NAME.key beside its NAME.key_secret)",
    "client-refused": "copy this client's public key (`{client_key}` without _secret) into the server's --curve-clients "
                      "folder and send the server SIGHUP, or give an allowed key pair in `{client_key}`",
    "not-zmq": "check `{endpoint}`: it should be an rcvgp oracle server (`rcvgp conformance` tells)",
    "handshake": "check `{endpoint}`: it should be an rcvgp oracle server (`rcvgp conformance` tells)",
    "silent": "check the server's log, or raise `{deadline}` if its first answer takes longer",
}


def run_experiment(
    config: ExperimentConfig,
    *,
    resume: bool = False,
    progress: Callable[[Progress], Any] | None = None,
    notes: TextIO | None = sys.stderr,
    handle_signals: bool = True,
) -> RunReport:
    """Run an experiment end to end and save its results.

    Parameters
    ----------
    config : ExperimentConfig
    resume : bool
        Continue the run journalled in the output folder: journalled requests are answered from
        the journal, the rest is measured live (a folder without a journal is an error). Without
        it, an earlier run in the output folder is moved aside to ``<output>.1`` (``.2``, ...),
        its files rewritten to name their new folder, so that nothing is lost.
    progress : callable, optional
        Called with each :class:`~rcvgp.search.Progress`; returning True stops the search with
        its best expression so far.
    notes : text stream, optional
        Where to say what happens to the output folder (stderr by default; None for silence).
    handle_signals : bool
        Turn the first SIGINT/SIGTERM into a clean stop (only possible in the main thread).

    Returns
    -------
    RunReport

    Raises
    ------
    ConfigError
        For an oracle that cannot be built, or a journal that does not belong to this
        experiment.
    OracleTimeout
        For an endpoint that does not answer (see :func:`build_oracle`).
    OracleError
        When the oracle refuses the handshake or fails during the search (the journal keeps
        what was measured).
    """
    from rcvgp.search import run_search

    output = Path(config.output)
    journal_path = output / JOURNAL_NAME
    if resume and not journal_path.exists():
        raise ConfigError(
            f"{config.source}: --resume: there is no run to resume in {_shown(output)} (no {JOURNAL_NAME}); "
            "to start a new run there, run the same command without --resume"
        )
    oracle = build_oracle(config, notes)  # before touching the output folder: a bad oracle leaves nothing behind
    if not resume and any((output / name).exists() for name in _RUN_FILES):
        moved = _set_aside(output)
        _note(notes, f"an earlier run in {_shown(output)} was moved to {_shown(moved)}")
    output.mkdir(parents=True, exist_ok=True)
    try:
        write_atomic(output / EXPERIMENT_NAME, yaml.safe_dump(config.to_dict(), sort_keys=False))
        journal = JournalingOracle(oracle, journal_path, resume=resume, fingerprint=config.fingerprint())
    except BaseException:
        oracle.close()
        raise
    # A resumed search replays every generation from the journal: its history is written afresh,
    # with the times the interrupted run recorded (read before the file is emptied).
    clock = _HistoryClock(_read_history(output / HISTORY_NAME) if resume else [])
    with journal, open(output / HISTORY_NAME, "w", encoding="utf-8") as history, \
            _stop_requests(handle_signals, notes) as stop:

        def on_progress(p: Progress) -> bool:
            journal.checkpoint()  # what was measured so far is on the search's path
            if not p.message:
                record = history_record(p)
                record["seconds"] = clock.seconds(record, p.elapsed)
                history.write(json.dumps(record, allow_nan=False) + "\n")
                history.flush()  # a killed run keeps the generations it finished
            wanted = bool(progress(p)) if progress is not None else False
            return wanted or stop.is_set()

        spec = journal.describe()
        try:
            result = run_search(config.method, journal, config.search, config.seed, progress=on_progress)
        except ConfigError as exc:  # a setting the search refuses (e.g. a budget too small to start)
            if str(exc).startswith(str(journal_path)):
                raise
            raise ConfigError(f"{config.source}: {exc}") from exc
        stats = journal.stats
    data = _result_data(config, result, spec, oracle, stats, output, seconds_offset=clock.offset)
    if result.test_points is not None:
        write_atomic(output / TEST_POINTS_NAME, _test_points_csv(result, [v.name for v in spec.variables]))
    _write_result(output, data)
    return RunReport(config=config, result=result, result_json=data, output=output, journal=stats)


def history_record(p: Progress) -> dict[str, Any]:
    """One line of ``history.jsonl``: a generation's round, the race (population and best loss
    per schedule), the best NMSE so far, and the points, requests and seconds spent by then
    (the search's clock; :func:`run_experiment` continues an interrupted run's times on a
    resumed one). Strict JSON: a loss that is not finite is null."""
    record = {
        "round": p.round,
        "n_rounds": p.n_rounds,
        "generation": p.generation,
        "best_nmse": p.best_nmse,
        "schedules": [
            {"schedule": [list(held) for held in s.schedule], "population": s.population, "best_loss": s.best_loss}
            for s in p.schedules
        ],
        "points": p.points,
        "requests": p.requests,
        "seconds": round(p.elapsed, 3),
    }
    return _json_ready(record)  # type: ignore[no-any-return]


class _HistoryClock:
    """The ``seconds`` of ``history.jsonl`` on a resumed run.

    The search replays the journalled generations (quickly: nothing is measured) before it goes
    on. Those keep the times the interrupted run recorded, and the later ones continue from the
    last of them (:attr:`offset` is added to the resumed search's clock), so that the history
    reads as one run's: neither the replay nor the interrupted run's unfinished generation is
    counted. A run that is not resumed has no earlier lines and an offset of 0.
    """

    def __init__(self, earlier: list[dict[str, Any]]) -> None:
        self._earlier = list(reversed(earlier))  # popped from the end, first line first
        self.offset = 0.0

    def seconds(self, record: dict[str, Any], elapsed: float) -> float:
        """The time to write in ``record``, the line of the generation the search reached at ``elapsed``."""
        if self._earlier:
            old = self._earlier.pop()
            then = old.get("seconds")
            if isinstance(then, (int, float)) and all(old.get(k) == record[k] for k in _SAME_GENERATION):
                self.offset = float(then) - elapsed
                return float(then)
            self._earlier = []  # not the journalled run's path (a damaged history): go on from the last match
        return round(elapsed + self.offset, 3)


def _read_history(path: Path) -> list[dict[str, Any]]:
    """The generations in ``history.jsonl``; a torn last line (a killed run) is left out."""
    if not path.exists():
        return []
    out = []
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            record = json.loads(line)
        except ValueError:
            continue
        if isinstance(record, dict) and isinstance(record.get("schedules"), list):
            out.append(record)
    return out


def _test_points_csv(result: SearchResult, names: list[str]) -> str:
    """The test points as CSV: one column per variable, then ``measured`` and ``predicted``,
    every number to full precision."""
    tp = result.test_points
    assert tp is not None
    rows = [",".join([*names, "measured", "predicted"])]
    for x, y, f in zip(tp.X, tp.y, tp.predicted):
        rows.append(",".join(repr(float(v)) for v in (*x, y, f)))
    return "\n".join(rows) + "\n"


# -- presentation ---------------------------------------------------------------------------------


def format_progress(p: Progress) -> str:
    """One progress line: round, generation, the round's best NMSE so far, points measured, elapsed time;
    or the search's note of why it stopped early."""
    if p.message:
        return f"[{p.method}] {p.message}  points {p.points:,} ({p.requests:,} requests)  {p.elapsed:.1f} s"
    rounds = f"round {p.round}/{p.n_rounds}" if p.round else "initial pools"
    return (
        f"[{p.method}] {rounds}  gen {p.generation}  best NMSE {_num(p.best_nmse)}  "
        f"points {p.points:,} ({p.requests:,} requests)  {p.elapsed:.1f} s"
    )


class ProgressPrinter:
    """A progress callback that prints :func:`format_progress` lines, at most one per interval
    (plus every change of round), to a stream."""

    def __init__(self, stream: TextIO = sys.stderr, min_interval: float = 1.0) -> None:
        self.stream = stream
        self.min_interval = float(min_interval)
        self._last = -math.inf
        self._round: int | None = None

    def __call__(self, p: Progress) -> None:
        now = time.monotonic()
        if p.message or p.round != self._round or now - self._last >= self.min_interval:
            self._round = p.round
            self._last = now
            print(format_progress(p), file=self.stream, flush=True)


def format_summary(data: dict[str, Any]) -> str:
    """The readable summary of a ``result.json`` object: the law (pretty-printed when it fits),
    its variables with their units, its metrics, the noise, its schedule, the front it was
    chosen from, the measurements spent and where the files are."""
    stopped = str(data.get("stopped"))
    not_run = data.get("rounds_not_run") or []
    if not_run:
        stopped += f" in round {data.get('rounds_run')} (round{'s' if len(not_run) > 1 else ''} "
        stopped += f"{', '.join(map(str, not_run))} not run)"
    lines = [f"rcvgp {data.get('method')} on {data.get('oracle')} (seed {data.get('seed')}): {stopped}", ""]
    pretty = str(data.get("pretty") or "")
    if pretty and max(len(row) for row in pretty.splitlines()) <= _PRETTY_WIDTH:
        lines.extend("    " + row for row in pretty.splitlines())
        lines.append("")
    else:
        lines.append(f"  law          {data.get('expression')}")
    if data.get("truth") is not None:
        exact = {True: "yes", False: "no"}.get(data.get("exact"), "unknown")  # type: ignore[arg-type]
        lines.append(f"  true law     {data['truth']}   (recovered exactly: {exact})")
    if data.get("variables"):
        lines.append(f"  variables    {_variables_text(data)}")
    m = data.get("test_metrics") or {}
    lines.append(
        f"  test data    NMSE {_num(m.get('nmse'))}   R^2 {_num(m.get('r2'), '.6f')}   RMSE {_num(m.get('rmse'))}"
        f"   (fresh points, never seen by the search)"
    )
    noise = _noise_text(data.get("noise"), data.get("output_unit") or "")
    if noise:
        lines.append(f"  noise        {noise}")
    fit = _fit_text(data)
    if fit:
        lines.append(f"  fit          {fit}")
    lines.extend(_constants_lines(data.get("constants") or [], data.get("constants_error")))
    schedule = data.get("schedule") or []
    if schedule:
        lines.append("  schedule     " + _schedule_text(schedule))
    if data.get("restarts"):
        n = int(data["restarts"])
        lines.append(f"  restarts     {n} (the rounds ran {n + 1} times: no fit had reached the noise floor)")
    equations = data.get("equations") or []
    chosen = next((i for i, eq in enumerate(equations) if eq.get("chosen")), 0)
    # The entries around the law: the simpler ones it was preferred to and the next more complex.
    start = max(0, min(chosen - _FRONT_SHOWN + 3, len(equations) - _FRONT_SHOWN))
    shown = equations[start : start + _FRONT_SHOWN]
    for i, eq in enumerate(shown):
        label = "front" if i == 0 else ""
        mark = "   <- the law" if eq.get("chosen") else ""
        text = str(eq.get("expression"))
        if len(text) > _FRONT_WIDTH:
            text = text[: _FRONT_WIDTH - 3] + "..."
        lines.append(f"  {label:<11}  {eq.get('complexity'):>3} nodes  NMSE {_num(eq.get('nmse_validation')):>8}  {text}{mark}")
    hidden = [f"{n} simpler" for n in [start] if n] + [f"{n} more complex" for n in [len(equations) - start - len(shown)] if n]
    if hidden:
        lines.append(f"  {'':<11}  ({' and '.join(hidden)} in result.json, equations)")
    failed, replaced = data.get("points_failed") or 0, data.get("points_replaced") or 0
    notes = []
    if failed:
        notes.append(f"{failed:,} unmeasurable")
    if replaced:
        notes.append(f"{replaced:,} wild, replaced by a second reading")
    lines.append(
        f"  measured     {data.get('points_measured', 0):,} points in {data.get('requests', 0):,} requests"
        + (f" ({', '.join(notes)})" if notes else "")
        + f", {_num(data.get('wall_seconds'), '.1f')} s"
    )
    j = data.get("journal") or {}
    if j.get("replayed_points"):
        lines.append(f"  journal      {j['replayed_points']:,} points replayed, {j.get('live_points', 0):,} measured live")
    if data.get("output"):
        lines.append(f"  results      {_shown(Path(data['output']) / RESULT_NAME)}")
    if data.get("stopped") == "interrupted":
        lines.append("  (interrupted: this is the best expression so far; continue with --resume)")
    return "\n".join(lines)


def _fit_text(data: Mapping[str, Any]) -> str:
    """How the summary states whether the law fits fresh readings to their noise (the judge of a
    law, where the test NMSE alone does not say what the readings allow); empty if not judged."""
    fits = data.get("fits_noise")
    if fits is None:
        return ""
    model = _noise_model(data.get("noise"))
    noiseless = model is not None and model.zero
    if fits:
        return "exact, to rounding" if noiseless else "within the readings' noise"
    short = "not exact" if noiseless else "beyond the readings' noise"
    caveat = "" if noiseless or not data.get("constants") else " (its constants' errors assume its form)"
    return f"{short}: an approximation, not the law{caveat}"


def _schedule_text(schedule: list[list[str]], arrow: str = " -> ") -> str:
    """A schedule as the summary states it: the held variables of each round."""
    return arrow.join(("held " + ", ".join(s)) if s else "none held" for s in schedule)


def _variables_text(data: dict[str, Any]) -> str:
    """The variables with their units, and the measured quantity: ``L [m], theta0 [rad] -> T [s]``."""
    units = data.get("units") or {}
    inputs = ", ".join(column_label(str(name), str(units.get(name) or "")) for name in data.get("variables") or [])
    return f"{inputs} -> {column_label(str(data.get('output_name') or 'y'), str(data.get('output_unit') or ''))}"


def _noise_model(noise: Any) -> NoiseModel | None:
    """The noise model of ``result.json``'s ``noise``; None if it holds none that reads as one."""
    try:
        return NoiseModel.from_dict(noise)
    except (AttributeError, TypeError, ValueError):
        return None


def _noise_text(noise: Any, unit: str) -> str:
    """How the summary states the noise the search judged its fits against."""
    model = _noise_model(noise)
    if model is None:
        return ""
    in_unit = f" {unit}" if unit else ""
    parts = []
    if model.absolute:
        parts.append(f"std {model.absolute:.3g}{in_unit}")
    if model.relative:
        quietest = f" (at least {model.least:.3g}{in_unit})" if model.least > model.absolute else ""
        parts.append(f"{100 * model.relative:.3g}% of the reading{quietest}")
    if model.digits or model.resolution:
        shown = [f"{model.digits} significant digits"] if model.digits else []
        if model.resolution:
            shown.append(f"steps of {'at least ' if model.digits else ''}{model.resolution:.3g}{in_unit}")
        parts.append(f"readings rounded to {', in '.join(shown)}")
    if model.source == "replicates":
        how = f"from replicate readings ({model.dof} degrees of freedom)"
        return f"{' + '.join(parts)}, estimated {how}" if parts else "none found in replicate readings"
    return f"{' + '.join(parts) if parts else 'none'} (declared)"


def write_measurements(measurements: Measurements, path: str | Path, format: str = "csv") -> Path:
    """Save measurements (:meth:`RunReport.data`, :func:`~rcvgp.journal.read_measurements`) to a file.

    Parameters
    ----------
    measurements : Measurements
    path : str or Path
        The file to write (replaced whole if it exists).
    format : {"csv", "npz"}
        ``csv``: a header row of ``name [unit]`` labels, then one row per point: ``request``,
        the variables, y, and, when a rig read back set points other than those asked, the set
        points asked (``x0_set [unit]``, ...); numbers in full precision, ``nan`` for a point
        not measured. ``npz`` (``numpy.load``, no pickle): the arrays ``X``, ``X_set``, ``y``
        and ``request``, and ``variables``, ``units``, ``output`` and ``output_unit``.

    Returns
    -------
    Path
        The file written.
    """
    if format not in EXPORT_FORMATS:
        raise ConfigError(f"format {format!r}: expected one of {', '.join(EXPORT_FORMATS)}")
    path = Path(path)
    m = measurements
    if format == "npz":
        buffer = io.BytesIO()
        np.savez(buffer, X=m.X, X_set=m.X_set, y=m.y, request=m.request, variables=np.array(m.variables, dtype=str),
                 units=np.array(m.units, dtype=str), output=np.array(m.output), output_unit=np.array(m.output_unit))
        write_atomic(path, buffer.getvalue())
        return path
    asked = not np.array_equal(m.X, m.X_set, equal_nan=True)
    header = ["request", *m.labels]
    if asked:
        header += [column_label(f"{n}_set", u) for n, u in zip(m.variables, m.units)]
    text = io.StringIO()
    writer = csv.writer(text, lineterminator="\n")
    writer.writerow(header)
    table = np.column_stack([m.X, m.y, m.X_set] if asked else [m.X, m.y])
    for request, row in zip(m.request.tolist(), table.tolist()):
        writer.writerow([request] + [repr(v) for v in row])  # repr: the shortest text that reads back bitwise
    write_atomic(path, text.getvalue())
    return path


def write_atomic(path: str | Path, text: str | bytes) -> None:
    """Write a file (text, or bytes as they are) so that readers see the old content or the new
    one, never a part.

    The file's permissions follow the umask, as for any file a program creates (results are not
    secrets; ``tempfile.mkstemp`` would make them 0600).
    """
    path = Path(path)
    while True:
        tmp = str(path.parent / f".{path.name}.{secrets.token_hex(6)}.tmp")
        try:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
            break
        except FileExistsError:  # pragma: no cover - 48 random bits
            continue
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(text if isinstance(text, bytes) else text.encode("utf-8"))
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    try:  # make the rename itself durable
        dir_fd = os.open(path.parent, os.O_RDONLY)
    except OSError:  # pragma: no cover - e.g. platforms without directory handles
        return
    try:
        os.fsync(dir_fd)
    except OSError:  # pragma: no cover
        pass
    finally:
        os.close(dir_fd)


# -- internals ------------------------------------------------------------------------------------


def _result_data(
    config: ExperimentConfig,
    result: SearchResult,
    spec: OracleSpec,
    oracle: DataOracle,
    stats: JournalStats,
    output: Path,
    seconds_offset: float = 0.0,
) -> dict[str, Any]:
    import sympy

    from rcvgp import __version__

    data = result.to_dict()
    names = [v.name for v in spec.variables]
    found = _on_names(result.best.sympy_expr, names)
    truth_text = oracle.reveal() if callable(getattr(oracle, "reveal", None)) else None  # type: ignore[attr-defined]
    exact: bool | None = None
    if truth_text is not None:
        from rcvgp.benchmarks import parse_expression
        from rcvgp.metrics import is_exact

        exact = bool(is_exact(found, parse_expression(truth_text, names), variables=spec.variables))
    data.update(
        experiment=config.name,
        oracle=spec.name,
        variables=names,
        sympy=sympy.srepr(found) if found is not None else None,
        pretty=_pretty(found, result.best.expression),
        units={v.name: v.unit for v in spec.variables},
        output_name=spec.output.name,
        output_unit=spec.output.unit,
        exact=exact,
        truth=truth_text,
        journal={"path": str(output / JOURNAL_NAME), **stats.to_dict(), "seconds_offset": round(seconds_offset, 3)},
        output=str(output),
        experiment_file=config.source,
        rcvgp_version=__version__,
    )
    order = ["expression", "nmse_test", "exact", "points_measured", "requests", "wall_seconds", "schedule", "stopped"]
    ordered = {k: data[k] for k in order} | {k: v for k, v in data.items() if k not in order}
    return _json_ready(ordered)  # type: ignore[no-any-return]


def _on_names(expr: Any, names: list[str]) -> Any:
    """The expression over the oracle's variable names (a search may print x0..x{n-1})."""
    import sympy

    if expr is None:
        return None
    expr = sympy.sympify(expr)
    swap = {}
    for sym in expr.free_symbols:
        text = str(sym)
        if text not in names and text.startswith("x") and text[1:].isdigit() and int(text[1:]) < len(names):
            swap[sym] = sympy.Symbol(names[int(text[1:])])
    return expr.xreplace(swap) if swap else expr


def _constants_lines(constants: Sequence[Mapping[str, Any]], largest: float | None) -> list[str]:
    """The summary's lines on the law's constants: each with its standard error (wrapped), and
    the largest relative one."""
    precision = [] if largest is None else [
        f"the largest relative standard error the noise leaves: {100 * float(largest):.2g}%"]
    items = _constant_items(constants, "+/-")
    rows: list[str] = []
    for item in items:
        if rows and len(rows[-1]) + len(item) < _FRONT_WIDTH:
            rows[-1] += f", {item}"
        else:
            rows.append(item)
    rows = [row + ("," if i < len(rows) - 1 else "") for i, row in enumerate(rows)]
    rows += [f"({text})" if items else text for text in precision]
    return [f"  {'constants' if i == 0 else '':<11}  {row}" for i, row in enumerate(rows)]


def _constant_items(constants: Sequence[Mapping[str, Any]], plus_minus: str) -> list[str]:
    """Each of result.json's ``constants`` as text: its value with its standard error."""
    return [f"{c['value']:.6g} {plus_minus} {c['standard_error']:.2g}" if c.get("standard_error") is not None
            else f"{c['value']:.6g} (not pinned by the readings)" for c in constants]


def _pretty(expr: Any, fallback: str) -> str:
    import sympy

    if expr is None:
        return fallback
    try:
        from rcvgp.metrics import round_floats

        return str(sympy.pretty(round_floats(expr, 6), use_unicode=False, wrap_line=False))
    except Exception:  # noqa: BLE001 - a printer failure must not lose a result
        return fallback


def _json_ready(value: Any) -> Any:
    """Strict JSON: tuples become lists, non-finite floats null, numpy scalars Python numbers."""
    if isinstance(value, dict):
        return {str(k): _json_ready(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_json_ready(v) for v in value]
    if value is None or isinstance(value, (bool, str)):
        return value
    if isinstance(value, numbers.Integral):
        return int(value)
    if isinstance(value, numbers.Real):
        f = float(value)
        return f if math.isfinite(f) else None
    return str(value)


def _num(value: Any, fmt: str = ".3g") -> str:
    if value is None:
        return "n/a"
    try:
        return format(float(value), fmt)
    except (TypeError, ValueError):
        return str(value)


def _shown(path: Path) -> str:
    """A path as short as it can be: relative to the current folder when it is inside it."""
    try:
        return str(Path(path).relative_to(Path.cwd()))
    except ValueError:
        return str(path)


def _note(stream: TextIO | None, text: str) -> None:
    if stream is not None:
        print(f"rcvgp: {text}", file=stream, flush=True)


def _write_result(output: Path, data: dict[str, Any]) -> None:
    write_atomic(output / RESULT_NAME, json.dumps(data, indent=2, allow_nan=False) + "\n")
    write_atomic(output / SUMMARY_NAME, format_summary(data) + "\n")


def _set_aside(output: Path) -> Path:
    """Move an earlier run's folder to ``<output>.N`` (the first N free); its files then name
    the folder they are in, not the one the new run takes over."""
    n = 1
    while output.with_name(f"{output.name}.{n}").exists():
        n += 1
    target = output.with_name(f"{output.name}.{n}")
    os.rename(output, target)
    try:
        data = json.loads((target / RESULT_NAME).read_text(encoding="utf-8"))
    except (OSError, ValueError):  # a run killed before its result: nothing to rewrite
        data = None
    if isinstance(data, dict):
        data["output"] = str(target)
        if isinstance(data.get("journal"), dict):
            data["journal"]["path"] = str(target / JOURNAL_NAME)
        _write_result(target, data)
    try:
        settings = yaml.safe_load((target / EXPERIMENT_NAME).read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError):
        settings = None
    if isinstance(settings, dict):  # so that `rcvgp run <target>/experiment.yaml --resume` resumes it there
        settings["output"] = str(target)
        write_atomic(target / EXPERIMENT_NAME, yaml.safe_dump(settings, sort_keys=False))
    return target


@contextmanager
def _stop_requests(enabled: bool, notes: TextIO | None) -> Iterator[threading.Event]:
    """A flag the first SIGINT/SIGTERM sets; a second SIGINT raises KeyboardInterrupt."""
    flag = threading.Event()
    if not enabled or threading.current_thread() is not threading.main_thread():
        yield flag
        return
    signals = [signal.SIGINT] + ([signal.SIGTERM] if hasattr(signal, "SIGTERM") else [])
    previous = {s: signal.getsignal(s) for s in signals}

    def handler(signum: int, frame: Any) -> None:
        if flag.is_set() and signum == signal.SIGINT:
            raise KeyboardInterrupt
        flag.set()
        _note(notes, "stopping after this generation; the best expression so far will be saved "
                     "(Ctrl-C again to abort; the journal keeps every measurement)")

    for s in signals:
        signal.signal(s, handler)
    try:
        yield flag
    finally:
        for s, h in previous.items():
            signal.signal(s, h)
