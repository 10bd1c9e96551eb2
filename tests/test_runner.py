"""The runner: oracle + journal + search wired from an experiment, results saved atomically."""

from __future__ import annotations

import json

import pytest

from rcvgp.config import experiment_from_dict, load_experiment
from rcvgp.errors import ConfigError, OracleTimeout
from rcvgp.journal import read_journal
from rcvgp.runner import build_oracle, format_summary, run_experiment, write_atomic
from rcvgp.simulate import SimulatedOracle

REQUIRED_KEYS = ("expression", "nmse_test", "exact", "points_measured", "requests", "wall_seconds", "schedule")


def run(path, **options):
    options.setdefault("notes", None)
    options.setdefault("handle_signals", False)
    return run_experiment(load_experiment(path), **options)


def test_a_run_saves_result_summary_experiment_and_journal(write_experiment, tmp_path):
    report = run(write_experiment())
    out = tmp_path / "runs" / "tiny"
    assert report.output == out
    assert {p.name for p in out.iterdir()} == {"journal.jsonl", "result.json", "summary.txt", "experiment.yaml",
                                               "history.jsonl", "test_points.csv"}
    data = json.loads((out / "result.json").read_text())
    assert data == report.result_json
    for key in REQUIRED_KEYS:
        assert key in data
    assert isinstance(data["exact"], bool) and data["truth"] == "x0*x1 + 2.5"
    assert data["oracle"] == "sim:tiny" and data["variables"] == ["x0", "x1"]
    assert data["schedule"][-1] == []  # the last round holds nothing
    # the Pareto front, simplest first, each entry better on validation than every simpler one
    front = data["equations"]
    assert front and all({"complexity", "loss", "nmse_validation", "expression", "latex"} <= set(e) for e in front)
    assert [e["complexity"] for e in front] == sorted({e["complexity"] for e in front})
    assert all(a["nmse_validation"] > b["nmse_validation"] for a, b in zip(front, front[1:]))
    assert sum(e["chosen"] for e in front) == 1
    assert data["noise"]["source"] == "replicates" and data["noise"]["absolute"] == 0.0
    assert data["points_measured"] == report.result.points_measured > 0
    # every point the search used was journalled, none replayed
    assert data["journal"]["live_points"] == data["points_measured"] and data["journal"]["replayed_points"] == 0
    _, records, _ = read_journal(out / "journal.jsonl")
    assert sum(r["shape"][0] for r in records) == data["points_measured"]
    assert load_experiment(out / "experiment.yaml").fingerprint() == report.config.fingerprint()
    summary = (out / "summary.txt").read_text()
    assert data["pretty"] in summary and "NMSE" in summary and "schedule" in summary


def test_resuming_a_finished_run_replays_everything_and_measures_nothing(write_experiment):
    path = write_experiment()
    first = run(path)
    again = run(path, resume=True)
    assert again.journal.live_points == 0 and again.journal.live_requests == 0
    assert again.journal.replayed_points == first.result.points_measured
    for key in ("expression", "nmse_test", "schedule", "points_measured", "requests", "exact"):
        assert again.result_json[key] == first.result_json[key]


def test_a_new_run_moves_the_earlier_one_aside(write_experiment, tmp_path):
    path = write_experiment()
    run(path)
    run(path)
    assert (tmp_path / "runs" / "tiny.1" / "result.json").exists()
    assert (tmp_path / "runs" / "tiny" / "result.json").exists()


def test_a_folder_moved_aside_names_itself_and_resumes_there(write_experiment, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    path = write_experiment()
    first = run(path)
    run(path)
    moved = tmp_path / "runs" / "tiny.1"
    data = json.loads((moved / "result.json").read_text())
    assert data["output"] == str(moved) and data["journal"]["path"] == str(moved / "journal.jsonl")
    assert data["expression"] == first.result_json["expression"]
    assert "results      runs/tiny.1/result.json" in (moved / "summary.txt").read_text()
    settings = load_experiment(moved / "experiment.yaml")
    assert settings.output == moved and settings.fingerprint() == first.config.fingerprint()
    again = run_experiment(settings, resume=True, notes=None, handle_signals=False)  # resumes the moved run
    assert again.output == moved and again.journal.live_points == 0
    assert again.journal.replayed_points == first.result_json["points_measured"]


def test_resume_without_a_run_to_resume_is_an_error_saying_how_to_start_one(write_experiment, tmp_path):
    with pytest.raises(ConfigError, match=r"--resume: there is no run to resume in .*runs/tiny \(no journal\.jsonl\); "
                                          r"to start a new run there, run the same command without --resume"):
        run(write_experiment(), resume=True)
    assert not (tmp_path / "runs").exists()


def test_a_stop_request_saves_the_best_so_far(write_experiment, tmp_path):
    calls = []

    def stop_at_once(progress):
        calls.append(progress)
        return True

    report = run(write_experiment(), progress=stop_at_once)
    assert calls and report.interrupted and report.result_json["stopped"] == "interrupted"
    saved = json.loads((tmp_path / "runs" / "tiny" / "result.json").read_text())
    assert saved["stopped"] == "interrupted" and saved["expression"]


def test_a_budget_ends_the_run_cleanly(write_experiment):
    report = run(write_experiment(budget={"points": 260}))  # the tiny run needs 320 unbounded
    assert report.result_json["stopped"] == "budget" and report.result_json["points_measured"] <= 260
    assert report.result_json["journal"]["live_points"] == report.result_json["points_measured"]


def test_a_budget_the_search_refuses_names_the_file(write_experiment, tmp_path, monkeypatch):
    write_experiment(budget={"points": 10})
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ConfigError, match=r"^exp\.yaml: .*max_points"):
        run("exp.yaml")


def test_named_variables_are_kept_and_exactness_is_judged_on_them(write_experiment):
    report = run(write_experiment(oracle={
        "expression": "m*v + 2.5",
        "variables": [{"name": "m", "low": 0.1, "high": 10, "dist": "loguniform"},
                      {"name": "v", "low": 0.1, "high": 10}],
    }))
    assert report.result_json["variables"] == ["m", "v"]
    assert isinstance(report.result_json["exact"], bool)
    assert not ({"x0", "x1"} & set(report.result_json["expression"].replace("(", " ").replace(")", " ").split()))


def test_exactness_is_judged_on_the_declared_domains(write_experiment, monkeypatch):
    """The oracle's variables are positive, so sqrt(x1)/sqrt(x0) is the truth's sqrt(x1/x0)."""
    import dataclasses

    import sympy

    import rcvgp.search

    real_search = rcvgp.search.run_search

    def answers_split_root(*args, **kwargs):
        result = real_search(*args, **kwargs)
        x0, x1 = sympy.symbols("x0 x1", real=True)
        found = x0 + sympy.sqrt(x1) / sympy.sqrt(x0)
        return dataclasses.replace(result, best=dataclasses.replace(result.best, sympy_expr=found,
                                                                    expression=str(found)))

    monkeypatch.setattr(rcvgp.search, "run_search", answers_split_root)
    report = run(write_experiment(oracle={"expression": "x0 + sqrt(x1/x0)"}, operators=["add", "mul", "div", "sqrt"]))
    assert report.result_json["expression"] == "x0 + sqrt(x1)/sqrt(x0)"
    assert report.result_json["exact"] is True


def test_build_oracle_makes_simulated_oracles_with_their_truth(write_experiment, tmp_path):
    oracle = build_oracle(load_experiment(write_experiment(oracle={"noise": "relative:0.01"})))
    assert isinstance(oracle, SimulatedOracle) and oracle.reveal() == "x0*x1 + 2.5"
    catalog = experiment_from_dict({"oracle": {"catalog": "sincos-3-2-2/1"}}, base_dir=tmp_path)
    assert build_oracle(catalog).describe().name == "sim:sincos-3-2-2/1"


def test_an_unreachable_endpoint_is_a_timeout_naming_the_key_and_the_cause(tmp_path, monkeypatch):
    path = tmp_path / "remote.yaml"
    path.write_text("oracle: {endpoint: 'tcp://127.0.0.1:9', timeout: 0.2, deadline: 0.5}\n")
    monkeypatch.chdir(tmp_path)
    with pytest.raises(OracleTimeout, match=r"^remote\.yaml: oracle\.endpoint: no answer from tcp://127\.0\.0\.1:9 "
                                            r"within 0\.5 s: nothing is listening there \(connection refused\); "
                                            r"start the server"):
        run_experiment(load_experiment("remote.yaml"), notes=None, handle_signals=False)
    assert not (tmp_path / "runs").exists()  # nothing written for a run that never started


def test_a_run_over_an_endpoint_has_no_truth(write_experiment):
    from rcvgp.transport.server import OracleServer

    served = SimulatedOracle.from_expression("x0*x1 + 2.5", [{"name": "x0", "low": 0.1, "high": 10},
                                                             {"name": "x1", "low": 0.1, "high": 10}])
    server = OracleServer(served, "tcp://127.0.0.1:*").start()
    try:
        report = run(write_experiment(oracle={"endpoint": server.endpoint, "expression": None, "variables": None,
                                              "timeout": 5}))
    finally:
        server.stop()
    assert report.result_json["exact"] is None and report.result_json["truth"] is None
    assert report.result_json["journal"]["live_points"] == served.points_measured == report.result_json["points_measured"]


def test_summary_reads_well():
    data = {"method": "racing", "oracle": "sim:x", "seed": 0, "stopped": "completed", "expression": "x0 + 1",
            "pretty": "x0 + 1", "truth": "x0 + 1", "exact": True,
            "test_metrics": {"nmse": 1e-12, "r2": 1.0, "rmse": 1e-6}, "schedule": [["x1"], []],
            "points_measured": 1234, "requests": 5, "points_failed": 2, "wall_seconds": 3.2,
            "journal": {"replayed_points": 1000, "live_points": 234}, "output": "/tmp/run"}
    text = format_summary(data)
    assert "recovered exactly: yes" in text and "held x1 -> none held" in text
    assert "1,234 points in 5 requests (2 unmeasurable)" in text and "1,000 points replayed" in text
    assert text.count("x0 + 1") == 2  # the law once, and the true law
    wild = format_summary({**data, "points_replaced": 3})
    assert "1,234 points in 5 requests (2 unmeasurable, 3 wild, replaced by a second reading)" in wild


def test_summary_names_the_noise_the_front_and_the_rounds_a_stop_left_out():
    front = [{"complexity": n, "nmse_validation": 10.0 ** -n, "expression": f"law{n}", "chosen": n == 9}
             for n in range(3, 15)]
    data = {"method": "racing", "oracle": "rig:r", "seed": 0, "stopped": "time", "rounds_run": 2,
            "rounds_not_run": [3, 4], "expression": "law9", "test_metrics": {"nmse": 0.1},
            "noise": {"absolute": 0.02, "relative": 0.001, "dof": 224, "source": "replicates"},
            "output_unit": "V", "equations": front, "schedule": [["x1"], []]}
    text = format_summary(data)
    assert text.splitlines()[0] == "rcvgp racing on rig:r (seed 0): time in round 2 (rounds 3, 4 not run)"
    assert "std 0.02 V + 0.1% of the reading, estimated from replicate readings (224 degrees of freedom)" in text
    quiet = format_summary({**data, "noise": {"relative": 0.01, "least": 0.003, "dof": 224, "source": "replicates"}})
    assert "1% of the reading (at least 0.003 V), estimated" in quiet
    shown = [line for line in text.splitlines() if " nodes " in line]
    # eight entries around the law: up to five simpler, two more complex
    assert len(shown) == 8 and shown[5].endswith("law9   <- the law") and shown[0].endswith("law4")
    assert "(1 simpler and 3 more complex in result.json, equations)" in text
    rounded = format_summary({**data, "noise": {"absolute": 0.0, "relative": 0.0, "dof": 224, "source": "replicates",
                                                "digits": 4, "resolution": 0.001}})
    assert ("readings rounded to 4 significant digits, in steps of at least 0.001 V, estimated from replicate "
            "readings (224 degrees of freedom)") in rounded
    declared = format_summary({**data, "noise": {"absolute": 0.0, "relative": 0.0, "source": "declared"}})
    assert "none (declared)" in declared
    measured = format_summary({**data, "constants_error": 0.0012, "constants": [
        {"value": 0.78331129, "standard_error": 0.00081234}, {"value": 2.5, "standard_error": None}]})
    assert ("  constants    0.783311 +/- 0.00081, 2.5 (not pinned by the readings)\n"
            "               (the largest relative standard error the noise leaves: 0.12%)") in measured


def test_summary_says_whether_the_law_fits_fresh_readings_to_their_noise():
    noisy = {"method": "racing", "oracle": "rig:r", "seed": 0, "stopped": "completed", "expression": "x0",
             "test_metrics": {"nmse": 0.1}, "noise": {"absolute": 0.02, "dof": 224, "source": "replicates"},
             "constants": [{"value": 0.5, "standard_error": 0.001}]}
    noiseless = {**noisy, "noise": {"absolute": 0.0, "dof": 224, "source": "replicates"}, "constants": None}

    def fit(data: dict) -> list[str]:
        return [line for line in format_summary(data).splitlines() if line.startswith("  fit ")]

    assert fit({**noisy, "fits_noise": True}) == ["  fit          within the readings' noise"]
    assert fit({**noisy, "fits_noise": False}) == [
        "  fit          beyond the readings' noise: an approximation, not the law "
        "(its constants' errors assume its form)"]
    assert fit({**noiseless, "fits_noise": True}) == ["  fit          exact, to rounding"]
    assert fit({**noiseless, "fits_noise": False}) == ["  fit          not exact: an approximation, not the law"]
    assert fit(noisy) == []  # an older result.json, which did not judge it


@pytest.mark.parametrize("umask", [0o022, 0o077])
def test_results_follow_the_umask_like_the_journal(write_experiment, tmp_path, umask):
    import os

    old = os.umask(umask)
    try:
        report = run(write_experiment())
    finally:
        os.umask(old)
    modes = {p.name: p.stat().st_mode & 0o777 for p in report.output.iterdir()}
    names = ["journal.jsonl", "result.json", "summary.txt", "experiment.yaml", "history.jsonl", "test_points.csv"]
    assert modes == dict.fromkeys(names, 0o666 & ~umask)


def test_write_atomic_replaces_whole_files_and_leaves_no_temporary(tmp_path):
    target = tmp_path / "result.json"
    write_atomic(target, "old")
    write_atomic(target, "new")
    assert target.read_text() == "new"
    assert [p.name for p in tmp_path.iterdir()] == ["result.json"]


def _stop_at(n):
    """A progress callback that asks the search to stop at its n-th report (as Ctrl-C does)."""
    calls = []

    def progress(p):
        calls.append(p)
        return len(calls) >= n

    return progress


@pytest.mark.parametrize("stop_at", [1, 2, 3])  # the tiny run reports 3 times
def test_an_interrupted_run_resumes_to_the_uninterrupted_result_measuring_nothing_twice(write_experiment, tmp_path,
                                                                                         stop_at):
    path = write_experiment()
    full = run_experiment(load_experiment(path, overrides={"output": str(tmp_path / "full")}), notes=None,
                          handle_signals=False)
    stopped = run(path, progress=_stop_at(stop_at))
    assert stopped.interrupted
    resumed = run(path, resume=True)
    for key in ("expression", "nmse_test", "test_metrics", "schedule", "points_measured", "requests", "exact",
                "stopped", "equations"):
        assert resumed.result_json[key] == full.result_json[key], key
    _, records, _ = read_journal(tmp_path / "runs" / "tiny" / "journal.jsonl")
    asked = [r["X"] for r in records]
    assert len(set(asked)) == len(asked)  # no set of points was measured twice
    assert resumed.journal.replayed_points + resumed.journal.live_points == full.result_json["points_measured"]
    assert resumed.journal.replayed_points > 0


@pytest.mark.skipif(not __import__("zmq").has("curve"), reason="libzmq without CURVE")
def test_a_curve_server_without_a_key_in_the_experiment_names_the_key_to_set(write_experiment, tmp_path):
    import zmq.auth

    from rcvgp.transport.server import OracleServer

    zmq.auth.create_certificates(str(tmp_path), "server")
    served = SimulatedOracle.from_expression("x0 + 1", [{"name": "x0", "low": 0.1, "high": 10}])
    with OracleServer(served, "tcp://127.0.0.1:*", curve_secret_key=tmp_path / "server.key_secret") as server:
        path = write_experiment(oracle={"endpoint": server.endpoint, "expression": None, "variables": None,
                                        "timeout": 1, "deadline": 3})
        with pytest.raises(OracleTimeout, match=r"the server wants CurveZMQ encryption and this client has no server "
                                                r"key; set `oracle\.server_key` to the server's public key file"):
            run(path)
    assert served.points_measured == 0
