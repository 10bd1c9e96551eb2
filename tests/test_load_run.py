"""A run as a Python object (``load_run``), its measurements (``.data()``, ``rcvgp export``) and the
units it declares (in result.json and summary.txt)."""

from __future__ import annotations

import base64
import csv
import html
import json
import re
import shutil
from pathlib import Path

import numpy as np
import pytest
import sympy
import yaml

import rcvgp
from rcvgp.cli import main
from rcvgp.config import load_experiment
from rcvgp.errors import ConfigError, OracleError, RunFolderError
from rcvgp.journal import JournalingOracle, read_journal, read_measurements
from rcvgp.oracle import DataOracle, OracleSpec, Output, Variable
from rcvgp.runner import RunReport, format_summary, load_run, run_experiment, write_measurements
from rcvgp.search.base import SearchResult

from conftest import TINY_EXPERIMENT

ROOT = Path(__file__).resolve().parents[1]

#: The tiny experiment over named variables with units, y named with its unit; it finds m*v + 5/2 exactly.
NAMED = {"oracle": {"expression": "m*v + 2.5",
                    "variables": [{"name": "m", "low": 0.1, "high": 10, "dist": "loguniform", "unit": "kg"},
                                  {"name": "v", "low": 0.1, "high": 10, "unit": "m/s"}],
                    "output": {"name": "p", "unit": "kg m/s"}}}


@pytest.fixture(scope="module")
def finished(tmp_path_factory: pytest.TempPathFactory) -> RunReport:
    """One finished tiny run, shared by the tests that only read it."""
    folder = tmp_path_factory.mktemp("finished")
    path = folder / "exp.yaml"
    # Seed 3: the front holds a simpler entry beside the law (with most seeds the first round's
    # pieces find the law at once, and the front is the law alone).
    path.write_text(yaml.safe_dump(TINY_EXPERIMENT | NAMED | {"seed": 3}, sort_keys=False))
    return run_experiment(load_experiment(path), notes=None, handle_signals=False)


def _journal_points(folder: Path) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Set points, readings and request numbers decoded straight from the journal's lines."""
    _, records, _ = read_journal(folder / "journal.jsonl")
    X, y, request = [], [], []
    for rec in records:
        if "y" in rec:
            X.append(np.frombuffer(base64.b64decode(rec["X"]), dtype="<f8").reshape(rec["shape"]))
            y.append(np.frombuffer(base64.b64decode(rec["y"]), dtype="<f8"))
            request += [rec["i"]] * len(y[-1])
    return np.concatenate(X), np.concatenate(y), np.array(request)


# -- load_run --------------------------------------------------------------------------------------


def test_load_run_gives_back_the_run_that_run_experiment_returned(finished):
    loaded = load_run(finished.output)
    assert isinstance(loaded, RunReport) and type(loaded) is type(finished)
    assert loaded.law == finished.law == "m*v + 5/2" == finished.result_json["expression"]
    assert loaded.result == finished.result  # the search's result, rebuilt whole from result.json
    assert loaded.equations == finished.equations == finished.result_json["equations"]
    assert [e["expression"] for e in loaded.equations] == ["7.77819*m", "m*v + 2.5"]
    assert sum(e["chosen"] for e in loaded.equations) == 1
    assert loaded.result_json == json.loads((finished.output / "result.json").read_text())
    assert loaded.config.fingerprint() == finished.config.fingerprint()
    assert loaded.journal == finished.journal and loaded.output == finished.output
    m, v = sympy.symbols("m v", positive=True)
    assert sympy.simplify(loaded.sympy() - (m * v + sympy.Rational(5, 2))) == 0
    assert loaded.latex() == "m v + \\frac{5}{2}" and loaded.latex(0) == finished.result.equations[0].latex
    assert str(loaded) == (finished.output / "summary.txt").read_text().rstrip("\n")
    assert repr(loaded).startswith("RunReport(") and "m*v + 5/2" in repr(loaded) and "completed" in repr(loaded)


def test_load_run_is_importable_from_the_package():
    assert rcvgp.load_run is load_run and rcvgp.RunReport is RunReport and rcvgp.run_experiment is run_experiment


def test_predict_by_position_and_by_name_is_the_law_evaluated_by_hand(finished):
    run = load_run(finished.output)
    rng = np.random.default_rng(0)
    X = rng.uniform(0.1, 10, size=(50, 2))
    by_hand = X[:, 0] * X[:, 1] + 2.5
    np.testing.assert_allclose(run.predict(X), by_hand, rtol=1e-12)
    np.testing.assert_allclose(run.predict({"v": X[:, 1], "m": X[:, 0]}), by_hand, rtol=1e-12)
    structured = np.zeros(50, dtype=[("m", float), ("v", float)])
    structured["m"], structured["v"] = X[:, 0], X[:, 1]
    np.testing.assert_allclose(run.predict(structured), by_hand, rtol=1e-12)
    # names broadcast, e.g. a grid; the answer has the grid's shape
    M, V = np.meshgrid([1.0, 2.0, 3.0], [0.5, 4.0])
    np.testing.assert_allclose(run.predict({"m": M, "v": V}), M * V + 2.5, rtol=1e-12)
    np.testing.assert_allclose(run.predict({"m": 2.0, "v": [1.0, 3.0]}), [4.5, 8.5], rtol=1e-12)
    # an entry of the front: c*m, with c in full precision (its text rounds it to 6 digits: 7.77819)
    constant = run.predict(X, index=0) / X[:, 0]
    assert np.ptp(constant) < 1e-12 and constant[0] == pytest.approx(7.77819, abs=5e-6) and constant[0] != 7.77819
    # the in-process result answers the same
    np.testing.assert_array_equal(finished.result.predict(X), run.predict(X))
    np.testing.assert_array_equal(finished.predict(X, index=-1), run.result.predict(X, index=1))


@pytest.mark.parametrize(("X", "message"), [
    (np.ones((4, 3)), r"^predict: X has 3 columns; the variables are 2: m, v$"),
    (np.ones(4), r"^predict: X must be 2-D, of shape \(n_samples, 2\) with columns m, v, or a mapping"),
    ({"m": [1.0], "v": [2.0], "w": [3.0]}, r"^predict: unknown variable 'w'; the variables are m, v$"),
    ({"m": [1.0]}, r"^predict: variable 'v' is missing; give each of m, v$"),
    ({"m": [1.0, 2.0], "v": [1.0, 2.0, 3.0]}, r"^predict: the values of m, v must be numbers of shapes that broadcast"),
    ([["a", "b"]], r"^predict: X must hold numbers"),
])
def test_predict_names_what_is_wrong_with_its_input(finished, X, message):
    with pytest.raises(ConfigError, match=message) as info:
        finished.predict(X)
    assert isinstance(info.value, ValueError) and "\n" not in str(info.value)


@pytest.mark.parametrize("index", [2, -3, 1.0, True])
def test_an_index_outside_the_front_is_refused(finished, index):
    with pytest.raises(ConfigError, match=r"^index .*: the front has 2 equations \(0 to 1, simplest first\)"):
        finished.sympy(index)


def test_a_result_reads_back_from_text_without_full_precision_forms(finished):
    """A result.json of an older rcvgp, without `sympy`: the expressions are read from their text."""
    data = json.loads(json.dumps(finished.result_json))
    data.pop("sympy")
    for entry in data["equations"]:
        entry.pop("sympy")
    result = SearchResult.from_dict(data)
    X = np.array([[1.0, 2.0], [3.0, 4.0]])
    np.testing.assert_allclose(result.predict(X), [4.5, 14.5], rtol=1e-12)
    assert [str(e.sympy_expr) for e in result.equations] == ["7.77819*m", "m*v + 2.5"]


@pytest.mark.parametrize("damage", ["missing", "a file", "no result", "no result nor journal", "not json",
                                    "not an object", "no method", "no experiment"])
def test_load_run_refuses_a_folder_it_cannot_read_in_one_line(finished, tmp_path, damage):
    folder = tmp_path / "run"
    shutil.copytree(finished.output, folder)
    expected = {
        "missing": "no such folder", "a file": "not a folder",
        "no result": r"no result\.json; the run has not finished",
        "no result nor journal": r"no result\.json; not a run's output folder", "not json": "not readable as JSON",
        "not an object": "expected a JSON object", "no method": "`method` is missing",
        "no experiment": r"experiment\.yaml: no such file",
    }[damage]
    result = folder / "result.json"
    if damage == "missing":
        folder = tmp_path / "elsewhere"
    elif damage == "a file":
        folder = result
    elif damage.startswith("no result"):
        result.unlink()
        if damage == "no result nor journal":
            (folder / "journal.jsonl").unlink()
    elif damage == "not json":
        result.write_text(result.read_text()[:100])
    elif damage == "not an object":
        result.write_text("[1, 2]")
    elif damage == "no method":
        result.write_text(json.dumps({k: v for k, v in json.loads(result.read_text()).items() if k != "method"}))
    else:
        (folder / "experiment.yaml").unlink()
    with pytest.raises(RunFolderError, match=expected) as info:
        load_run(folder)
    assert "\n" not in str(info.value)


# -- data() and rcvgp export -------------------------------------------------------------------------


def test_data_is_every_journalled_point_with_names_units_and_requests(finished):
    data = load_run(finished.output).data()
    X, y, request = _journal_points(finished.output)
    np.testing.assert_array_equal(data.X, X)
    np.testing.assert_array_equal(data.X_set, X)
    np.testing.assert_array_equal(data.y, y)
    np.testing.assert_array_equal(data.request, request)
    assert len(data) == finished.result_json["points_measured"] and data.n_requests == finished.result_json["requests"]
    assert data.variables == ("m", "v") and data.units == ("kg", "m/s")
    assert (data.output, data.output_unit) == ("p", "kg m/s")
    assert data.labels == ("m [kg]", "v [m/s]", "p [kg m/s]")
    np.testing.assert_array_equal(data["v"], X[:, 1])
    np.testing.assert_array_equal(data["p"], y)
    with pytest.raises(KeyError, match="the columns are m, v, p"):
        data["w"]


def test_export_writes_a_csv_that_reads_back_as_the_journal(finished, tmp_path, capsys):
    folder = tmp_path / "run"
    shutil.copytree(finished.output, folder)
    assert main(["export", str(folder)]) == 0
    out = capsys.readouterr().out
    target = folder / "measurements.csv"
    assert out == f"wrote 320 points from 6 requests (m [kg], v [m/s], p [kg m/s]) to {target}\n"
    with open(target, newline="") as fh:
        rows = list(csv.reader(fh))
    assert rows[0] == ["request", "m [kg]", "v [m/s]", "p [kg m/s]"]
    table = np.array([[float(v) for v in row] for row in rows[1:]])
    X, y, request = _journal_points(folder)
    np.testing.assert_array_equal(table[:, 0], request)
    np.testing.assert_array_equal(table[:, 1:3], X)  # bitwise: full precision
    np.testing.assert_array_equal(table[:, 3], y)


def test_export_writes_npz_arrays_where_told(finished, tmp_path, capsys):
    assert main(["export", str(finished.output), "--output", str(tmp_path / "points.npz")]) == 0
    assert capsys.readouterr().out.endswith(f"to {tmp_path / 'points.npz'}\n")
    X, y, request = _journal_points(finished.output)
    with np.load(tmp_path / "points.npz", allow_pickle=False) as saved:
        np.testing.assert_array_equal(saved["X"], X)
        np.testing.assert_array_equal(saved["X_set"], X)
        np.testing.assert_array_equal(saved["y"], y)
        np.testing.assert_array_equal(saved["request"], request)
        assert list(saved["variables"]) == ["m", "v"] and list(saved["units"]) == ["kg", "m/s"]
        assert str(saved["output"]) == "p" and str(saved["output_unit"]) == "kg m/s"
    assert main(["export", str(finished.output), "--format", "npz", "--output", str(tmp_path)]) == 0
    assert (tmp_path / "measurements.npz").exists()


def test_export_of_a_killed_run_saves_what_its_journal_holds(write_experiment, tmp_path, capsys):
    """A run killed mid-write: no result.json, a torn last line. The journal is the truth."""
    path = write_experiment(**NAMED)
    report = run_experiment(load_experiment(path), notes=None, handle_signals=False,
                            progress=lambda p: True)  # stops at its first report
    for name in ("result.json", "summary.txt"):
        (report.output / name).unlink()
    journal = report.output / "journal.jsonl"
    with open(journal, "ab") as fh:
        fh.write(b'{"i": 99, "op": "measure", "sha')
    with pytest.raises(RunFolderError, match=r"no result\.json; the run has not finished: continue it with "
                                             r"`rcvgp run .*experiment\.yaml --resume`, or save what it measured "
                                             r"with `rcvgp export "):
        load_run(report.output)
    assert main(["export", str(report.output)]) == 0
    X, y, request = _journal_points(report.output)
    assert 0 < len(y) and capsys.readouterr().out.startswith(f"wrote {len(y)} points")
    with open(report.output / "measurements.csv", newline="") as fh:
        rows = list(csv.reader(fh))[1:]
    assert len(rows) == len(y) and float(rows[-1][3]) == y[-1]


@pytest.mark.parametrize(("argv", "message"), [
    (["export", "{tmp}/nowhere"], "nowhere: no such folder; give a run's output folder"),
    (["export", "{tmp}"], "no journal.jsonl; not a run's output folder"),
    (["export", "{run}", "--output", "{tmp}/no/such/x.csv"], "--output: no such folder"),
])
def test_export_mistakes_are_one_line_and_exit_2(finished, tmp_path, capsys, argv, message):
    argv = [a.format(tmp=tmp_path, run=finished.output) for a in argv]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("rcvgp: error: ") and message in err and err.count("\n") == 1


class ReadbackRig(DataOracle):
    """A rig that reaches its set points within 1%, and one reading that fails."""

    def describe(self) -> OracleSpec:
        return OracleSpec(variables=(Variable("L", 0.1, 2.0, unit="m"), Variable("theta", 0.0, 1.0)),
                          output=Output("T", "s"), name="rig:readback", capabilities=("readback",))

    def measure(self, X: np.ndarray) -> np.ndarray:
        return self.measure_readback(X)[1]

    def measure_readback(self, X: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        reached = X * 1.01
        y = 2.0 * np.sqrt(reached[:, 0])
        y[0] = np.nan
        return reached, y


class FailingRig(ReadbackRig):
    def measure_readback(self, X: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        raise OracleError("the rig's door is open")


def test_read_back_set_points_are_exported_beside_those_asked(tmp_path):
    journal = tmp_path / "journal.jsonl"
    asked = np.array([[0.5, 0.1], [1.0, 0.2], [1.5, 0.3]])
    with JournalingOracle(ReadbackRig(), journal) as oracle:
        oracle.measure_readback(asked)
        oracle.measure_readback(asked[:1])
    with JournalingOracle(FailingRig(), journal, resume=True) as oracle:  # a failed request: no reading, no row
        with pytest.raises(OracleError):
            oracle.measure_readback(asked / 2)
    data = read_measurements(journal)
    assert len(data) == 4 and data.request.tolist() == [0, 0, 0, 1]
    np.testing.assert_array_equal(data.X_set, np.vstack([asked, asked[:1]]))
    np.testing.assert_array_equal(data.X, data.X_set * 1.01)
    assert np.isnan(data.y[0]) and np.isnan(data.y[3]) and data.labels == ("L [m]", "theta", "T [s]")
    target = write_measurements(data, tmp_path / "points.csv")
    with open(target, newline="") as fh:
        rows = list(csv.reader(fh))
    assert rows[0] == ["request", "L [m]", "theta", "T [s]", "L_set [m]", "theta_set"]
    assert rows[1][3] == "nan" and [float(v) for v in rows[2][4:]] == asked[1].tolist()


# -- units -----------------------------------------------------------------------------------------------


def test_declared_units_are_in_result_json_and_the_summary(finished):
    saved = json.loads((finished.output / "result.json").read_text())
    assert saved["units"] == {"m": "kg", "v": "m/s"} and saved["output_name"] == "p" and saved["output_unit"] == "kg m/s"
    assert "  variables    m [kg], v [m/s] -> p [kg m/s]\n" in (finished.output / "summary.txt").read_text()


def test_the_report_names_y_as_the_experiment_declares_it(finished, tmp_path):
    from rcvgp.report import render_report  # matplotlib is a test dependency

    assert html.escape("m [kg], v [m/s] -> p [kg m/s]") in render_report(finished.output)


def test_the_summary_names_the_measured_quantity_with_its_unit():
    data = {"method": "racing", "oracle": "rig:pendulum", "seed": 0, "stopped": "completed", "expression": "2*sqrt(L)",
            "variables": ["L", "theta0"], "units": {"L": "m", "theta0": ""}, "output_name": "T", "output_unit": "s"}
    assert "  variables    L [m], theta0 -> T [s]" in format_summary(data).splitlines()


def test_export_help_names_its_options(capsys):
    with pytest.raises(SystemExit) as info:
        main(["export", "--help"])
    assert info.value.code == 0
    text = capsys.readouterr().out
    for word in ("RUN_DIR", "--format", "csv", "npz", "--output", "measurements.csv", "request", "name [unit]"):
        assert word in text, word


def test_the_readme_python_example_runs(tmp_path):
    """The README's notebook example, on the quickstart run made small (its law need not be found)."""
    block = next(code for lang, code in re.findall(r"```([a-z]*)\n(.*?)```", (ROOT / "README.md").read_text(), re.S)
                 if lang == "python" and "load_run" in code)
    assert 'rcvgp.load_run("examples/runs/quickstart")' in block
    small = {"search.population": 10, "search.generations": 3, "search.batch": 32, "search.n_trials": 2,
             "search.n_validation": 64, "search.n_test": 64, "output": str(tmp_path / "quickstart")}
    made = run_experiment(load_experiment(ROOT / "examples" / "quickstart.yaml", small), notes=None,
                          handle_signals=False)
    namespace: dict[str, object] = {}
    exec(compile(block.replace("examples/runs/quickstart", str(made.output)), "README.md", "exec"), namespace)
    run, X = namespace["run"], namespace["X"]
    assert isinstance(run, RunReport) and run.law == made.law
    np.testing.assert_array_equal(run.predict(X), made.predict(X))
    assert len(namespace["data"]) == made.result_json["points_measured"]  # type: ignore[arg-type]


# -- a run folder away from its key files ---------------------------------------------------------------


@pytest.mark.skipif(not __import__("zmq").has("curve"), reason="libzmq without CURVE")
def test_a_run_folder_copied_without_its_key_files_loads_reports_and_exports(write_experiment, tmp_path, capsys):
    import zmq.auth

    from rcvgp.report import REPORT_NAME
    from rcvgp.simulate import SimulatedOracle
    from rcvgp.transport.server import OracleServer

    keys = tmp_path / "keys"
    keys.mkdir()
    zmq.auth.create_certificates(str(keys), "server")
    zmq.auth.create_certificates(str(keys), "client")
    served = SimulatedOracle.from_expression("x0*x1 + 2.5", TINY_EXPERIMENT["oracle"]["variables"])
    with OracleServer(served, "tcp://127.0.0.1:*", curve_secret_key=keys / "server.key_secret") as server:
        path = write_experiment(oracle={"endpoint": server.endpoint, "expression": None, "variables": None,
                                        "server_key": "keys/server.key", "client_key": "keys/client.key_secret"})
        made = run_experiment(load_experiment(path), notes=None, handle_signals=False)
    copy = tmp_path / "elsewhere" / "tiny"
    shutil.copytree(made.output, copy)
    shutil.rmtree(keys)  # as on another machine: the experiment names key files that are not there

    loaded = load_run(copy)
    assert loaded.law == made.law and loaded.result == made.result
    assert loaded.config.oracle.server_key == keys / "server.key" and loaded.config.fingerprint() == made.config.fingerprint()
    assert main(["report", str(copy)]) == 0 and (copy / REPORT_NAME).exists()
    assert main(["export", str(copy)]) == 0 and (copy / "measurements.csv").exists()
    assert capsys.readouterr().err == ""
    # Starting or resuming the run needs a connection, and so its keys
    with pytest.raises(ConfigError, match=r"oracle\.server_key: no such file .*server\.key'; create the keys"):
        load_experiment(copy / "experiment.yaml")
