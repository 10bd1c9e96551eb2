"""``rcvgp run`` and ``rcvgp discover`` as a user meets them: help, exit statuses, one-line
errors, ``--json``, Ctrl-C, and a run killed with SIGKILL then resumed."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from rcvgp.cli import main
from rcvgp.journal import read_journal

REQUIRED_KEYS = ("expression", "nmse_test", "exact", "points_measured", "requests", "wall_seconds", "schedule")


def rcvgp(*args: str, cwd: Path, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    """``python -m rcvgp ARGS`` in a subprocess, as a user would run it."""
    return subprocess.run([sys.executable, "-m", "rcvgp", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=timeout)


# -- help ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("argv", [["--help"], ["run", "--help"], ["discover", "--help"]])
def test_help_is_complete(argv, capsys):
    with pytest.raises(SystemExit) as info:
        main(argv)
    assert info.value.code == 0
    text = capsys.readouterr().out
    if argv == ["--help"]:
        for command in ("run", "discover", "oracles"):
            assert command in text
    elif argv[0] == "run":
        for word in ("EXPERIMENT.yaml", "--resume", "--json", "--quiet", "oracle:", "catalog", "expression",
                     "endpoint", "method:", "operators:", "seed:", "search:", "budget:", "output:", "noise"):
            assert word in text, word
    else:
        for word in ("--oracle", "--method", "--seed", "--budget-points", "--json", "--quiet", "--resume"):
            assert word in text, word


@pytest.mark.integration
def test_python_dash_m_rcvgp_works(tmp_path):
    done = rcvgp("--help", cwd=tmp_path)
    assert done.returncode == 0 and "discover" in done.stdout


# -- user mistakes: exit 2 and one line ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        ("oracle: {catalog: sincos-3-2-2/1}\nsearch: {popluation: 10}\n",
         "exp.yaml: search.popluation: unknown key; did you mean `population`?"),
        ("oracle: {catalog: sincos-3-2-2/1}\nseed: zero\n", "exp.yaml: seed: expected an integer"),
        ("oracle: {catalog: sincos-3-2-2/99}\n", "exp.yaml: oracle.catalog: unknown oracle id"),
        ("oracle: {endpoint: 'tcp://bad host:5'}\n", "exp.yaml: oracle.endpoint: cannot connect to 'tcp://bad host:5'"),
        (None, "exp.yaml: no such file"),
    ],
    ids=["unknown-key", "wrong-type", "unknown-id", "address-zmq-refuses", "missing-file"],
)
def test_a_bad_experiment_exits_2_with_one_line(tmp_path, capsys, monkeypatch, content, expected):
    if content is not None:
        (tmp_path / "exp.yaml").write_text(content)
    monkeypatch.chdir(tmp_path)
    assert main(["run", "exp.yaml"]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    lines = captured.err.splitlines()
    assert len(lines) == 1 and expected in lines[0], captured.err


@pytest.mark.integration
def test_a_bad_experiment_in_a_real_process_has_no_traceback(tmp_path):
    (tmp_path / "exp.yaml").write_text("oracle: {catalog: sincos-3-2-2/1}\nbudget: {ponts: 3}\n")
    done = rcvgp("run", "exp.yaml", cwd=tmp_path)
    assert done.returncode == 2
    assert done.stderr.strip() == "rcvgp: error: exp.yaml: budget.ponts: unknown key; did you mean `points`? " \
                                  "(allowed: points, requests, seconds)"
    assert "Traceback" not in done.stderr and done.stdout == ""


def test_an_endpoint_that_does_not_answer_exits_4_saying_why_and_what_it_waits_for(tmp_path, capsys, monkeypatch):
    (tmp_path / "exp.yaml").write_text("oracle: {endpoint: 'tcp://127.0.0.1:9', timeout: 1, deadline: 3.5}\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr("rcvgp.transport.client.Channel.first_note", 0.5)
    assert main(["run", "exp.yaml"]) == 4
    captured = capsys.readouterr()
    assert captured.out == ""
    lines = captured.err.splitlines()
    assert lines[0].startswith("rcvgp: waiting for tcp://127.0.0.1:9: nothing is listening there (connection refused) "
                               "(no answer yet, giving up in 3 s)"), captured.err
    assert lines[-1].startswith("rcvgp: oracle timeout: exp.yaml: oracle.endpoint: no answer from tcp://127.0.0.1:9 "
                                "within 3.5 s: nothing is listening there"), captured.err
    assert "--resume" not in captured.err  # nothing was journalled: there is nothing to resume
    assert not (tmp_path / "runs").exists()


def test_resume_of_a_folder_that_does_not_exist_exits_2_in_one_line(write_experiment, tmp_path, capsys, monkeypatch):
    write_experiment()
    monkeypatch.chdir(tmp_path)
    assert main(["run", "exp.yaml", "--resume"]) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err.splitlines() == [
        "rcvgp: error: exp.yaml: --resume: there is no run to resume in runs/tiny (no journal.jsonl); to start a new "
        "run there, run the same command without --resume"]
    assert not (tmp_path / "runs").exists()


def test_bad_discover_flags_exit_2_naming_the_flag(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert main(["discover", "--oracle", "sincos-3-2-2/1", "--budget-points", "0"]) == 2
    assert capsys.readouterr().err.strip().startswith("rcvgp: error: rcvgp discover: --budget-points:")
    assert main(["discover", "--oracle", "no-such-oracle"]) == 2
    assert "rcvgp discover: --oracle: unknown oracle id" in capsys.readouterr().err
    assert not (tmp_path / "runs").exists()


@pytest.mark.parametrize("value", ["0", "-1", "two", "true"])
def test_bad_workers_exit_2_in_one_line(value, write_experiment, tmp_path, capsys, monkeypatch):
    write_experiment()
    monkeypatch.chdir(tmp_path)
    for argv in (["run", "exp.yaml"], ["discover", "--oracle", "sincos-3-2-2/1"]):
        assert main([*argv, "--workers", value]) == 2
        captured = capsys.readouterr()
        assert captured.out == "" and captured.err.splitlines() == [
            f"rcvgp: error: --workers: expected a number of processes, an integer >= 1, got {value!r}"]
    assert not (tmp_path / "runs").exists()


def test_workers_flag_reaches_the_search_and_the_result(write_experiment, tmp_path, capsys, monkeypatch):
    write_experiment()
    monkeypatch.chdir(tmp_path)
    seen = []
    monkeypatch.setattr("rcvgp.search.racing.worker_pool", _recording_pool(seen))
    assert main(["run", "exp.yaml", "--workers", "3", "--json", "--quiet"]) == 0
    assert seen == [3]
    assert json.loads(capsys.readouterr().out)["config"]["workers"] == 3


def _recording_pool(seen):
    """A stand-in for ``worker_pool`` that notes the workers asked for and fits here."""
    from contextlib import contextmanager

    @contextmanager
    def pool(n_workers, executor=None):
        seen.append(n_workers)
        yield executor

    return pool


# -- results -------------------------------------------------------------------------------------------


def test_json_prints_exactly_one_object_with_the_result_keys(write_experiment, tmp_path, capsys, monkeypatch):
    write_experiment()
    monkeypatch.chdir(tmp_path)
    assert main(["run", "exp.yaml", "--json", "--quiet"]) == 0
    captured = capsys.readouterr()
    data = json.loads(captured.out)  # the whole of stdout is one JSON object
    assert isinstance(data, dict)
    for key in REQUIRED_KEYS:
        assert key in data, key
    assert isinstance(data["exact"], bool) and data["points_measured"] > 0 and data["requests"] > 0
    assert data == json.loads((tmp_path / "runs" / "tiny" / "result.json").read_text())
    assert captured.err == ""  # --quiet


def test_progress_and_summary_without_json(write_experiment, tmp_path, capsys, monkeypatch):
    write_experiment()
    monkeypatch.chdir(tmp_path)
    assert main(["run", "exp.yaml"]) == 0
    captured = capsys.readouterr()
    assert "best NMSE" in captured.err and "points" in captured.err and "round" in captured.err
    assert "x0*x1" in captured.out and "schedule" in captured.out and "test data" in captured.out
    assert "<- the law" in captured.out  # the front, with the entry the law came from
    assert "runs/tiny/result.json" in captured.out


def test_discover_runs_a_catalog_oracle(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert main(["discover", "--oracle", "sincos-3-2-2/1", "--seed", "2", "--budget-points", "2400",
                 "--json", "--quiet"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["oracle"] == "sim:sincos-3-2-2/1" and data["seed"] == 2 and data["method"] == "racing"
    assert isinstance(data["exact"], bool) and data["points_measured"] <= 2400
    assert (tmp_path / "runs" / "sincos-3-2-2_1-racing-seed2" / "result.json").exists()


# -- interruptions -------------------------------------------------------------------------------------


def _start(args: list[str], cwd: Path) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-m", "rcvgp", *args], cwd=cwd, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def _wait_for_records(journal: Path, n: int, proc: subprocess.Popen[str], timeout: float = 120) -> None:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if proc.poll() is not None:
            raise AssertionError(f"the run ended before it could be interrupted: {proc.communicate()}")
        if journal.exists() and journal.read_bytes().count(b"\n") >= n + 1:  # header + n records
            return
        time.sleep(0.005)
    raise AssertionError("the journal did not grow")


@pytest.mark.integration
def test_ctrl_c_saves_the_best_so_far_and_exits_130(write_experiment, tmp_path):
    write_experiment(oracle={"latency": 0.3})
    proc = _start(["run", "exp.yaml", "--json"], tmp_path)
    try:
        _wait_for_records(tmp_path / "runs" / "tiny" / "journal.jsonl", 1, proc)
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=120)
    finally:
        proc.kill()
    assert proc.returncode == 130, err
    data = json.loads(out)
    assert data["stopped"] == "interrupted" and data["expression"]
    saved = json.loads((tmp_path / "runs" / "tiny" / "result.json").read_text())
    assert saved["stopped"] == "interrupted"
    assert "Traceback" not in err


@pytest.mark.integration
@pytest.mark.parametrize(("law", "restarts", "records"), [
    ("x0*x1 + 2.5", 0, 1),
    # out of reach of three generations of ten trees: the kill lands in the first restart (the
    # first start measured 4 batches, and 64 points to judge it)
    ("x0*sin(x1 + sin(x1*x0))", 2, 6),
])
def test_a_run_killed_midway_resumes_to_the_same_result_measuring_nothing_twice(write_experiment, tmp_path, law,
                                                                                 restarts, records):
    # A slow oracle (0.3 s per request) so that the kill lands in the middle of the run.
    write_experiment(oracle={"latency": 0.3, "expression": law})
    full = rcvgp("run", "exp.yaml", "--json", "--quiet", "--output", "full", cwd=tmp_path)
    assert full.returncode == 0, full.stderr
    expected = json.loads(full.stdout)
    assert expected["restarts"] == restarts

    journal = tmp_path / "runs" / "tiny" / "journal.jsonl"
    proc = _start(["run", "exp.yaml", "--quiet"], tmp_path)
    try:
        _wait_for_records(journal, records, proc)
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.communicate(timeout=60)
    assert proc.returncode == -signal.SIGKILL
    assert not (tmp_path / "runs" / "tiny" / "result.json").exists()
    _, killed_records, _ = read_journal(journal)
    journalled_points = sum(r["shape"][0] for r in killed_records)
    assert 0 < journalled_points < expected["points_measured"]

    resumed = rcvgp("run", "exp.yaml", "--json", "--quiet", "--resume", cwd=tmp_path)
    assert resumed.returncode == 0, resumed.stderr
    got = json.loads(resumed.stdout)
    for key in ("expression", "nmse_test", "test_metrics", "exact", "schedule", "points_measured", "requests",
                "stopped", "equations"):
        assert got[key] == expected[key], key
    # Nothing measured twice: the journalled points were replayed, only the rest measured live.
    assert got["journal"]["replayed_points"] == journalled_points
    assert got["journal"]["live_points"] == expected["points_measured"] - journalled_points
    _, records, _ = read_journal(journal)
    assert sum(r["shape"][0] for r in records) == expected["points_measured"]


def test_a_reply_that_breaks_the_protocol_exits_3_and_says_how_to_resume(write_experiment, tmp_path, capsys,
                                                                          monkeypatch):
    from rcvgp.errors import ProtocolError
    from rcvgp.simulate import SimulatedOracle

    measure = SimulatedOracle.measure
    calls = []

    def breaks_on_the_third(self, X):
        calls.append(len(X))
        if len(calls) == 3:
            raise ProtocolError("tcp://rig:5555: measure reply has no array \"y\"")
        return measure(self, X)

    write_experiment()
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(SimulatedOracle, "measure", breaks_on_the_third)
    assert main(["run", "exp.yaml"]) == 3
    err = capsys.readouterr().err.splitlines()
    assert err[-2] == (f"rcvgp: every measurement so far is in {tmp_path / 'runs/tiny/journal.jsonl'}; once the "
                       "oracle is fixed, run the same command again with --resume")
    assert err[-1] == 'rcvgp: oracle error: tcp://rig:5555: measure reply has no array "y"'
