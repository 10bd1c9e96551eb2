"""A run's history (``history.jsonl``), its test points (``test_points.csv``) and its page of
pictures (``rcvgp report``, ``rcvgp run --report``): the page parses, every image in it decodes
and is not blank, and without matplotlib the command says how to get it and exits 2."""

from __future__ import annotations

import base64
import io
import json
import shutil
import sys
from html.parser import HTMLParser
from pathlib import Path

import numpy as np
import pytest
import yaml
from conftest import TINY_EXPERIMENT

from rcvgp.cli import main
from rcvgp.config import load_experiment
from rcvgp.metrics import regression_metrics
from rcvgp.runner import HISTORY_FIELDS, HISTORY_NAME, TEST_POINTS_NAME, run_experiment

import matplotlib  # noqa: F401,E402  (a test dependency: the report is tested, never skipped)
from PIL import Image  # noqa: E402  (matplotlib needs Pillow: it is there when matplotlib is)

from rcvgp.report import (  # noqa: E402
    PLOT_EXTRA_HINT, REPORT_NAME, _latex_lines, _math_block, _noise_model, _residual_caption, write_report,
)


@pytest.fixture(scope="module")
def finished(tmp_path_factory):
    """The tiny experiment run once, with every progress report it made: (report, reports)."""
    folder = tmp_path_factory.mktemp("run")
    path = folder / "exp.yaml"
    path.write_text(yaml.safe_dump(TINY_EXPERIMENT, sort_keys=False))
    seen = []

    def progress(p):
        lines = (folder / "runs" / "tiny" / HISTORY_NAME).read_text().splitlines()
        seen.append((p, len(lines)))

    report = run_experiment(load_experiment(path), progress=progress, notes=None, handle_signals=False)
    return report, seen


def history(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (run_dir / HISTORY_NAME).read_text().splitlines()]


# -- history.jsonl --------------------------------------------------------------------------------


def test_the_history_has_one_line_per_generation_with_the_documented_fields(finished):
    report, seen = finished
    lines = history(report.output)
    generations = [p for p, _ in seen if not p.message]
    assert len(lines) == len(generations) > 0
    for line, p in zip(lines, generations):
        assert tuple(line) == HISTORY_FIELDS
        assert (line["round"], line["generation"], line["points"], line["requests"]) == (
            p.round, p.generation, p.points, p.requests)
        assert line["n_rounds"] == 2 and line["best_nmse"] == p.best_nmse
        assert line["schedules"] and all(set(s) == {"schedule", "population", "best_loss"} for s in line["schedules"])
        # every schedule holds one set of variables per round so far; the population is all there,
        # as the search reported it (duplicates removed, so at times a tree or two short of the setting)
        assert all(len(s["schedule"]) == line["round"] for s in line["schedules"])
        assert [s["population"] for s in line["schedules"]] == [s.population for s in p.schedules]
        assert sum(s["population"] for s in line["schedules"]) > TINY_EXPERIMENT["search"]["population"] // 2
    # generations count from 1 in each round; points, requests and time only grow
    for a, b in zip(lines, lines[1:]):
        assert b["generation"] == (a["generation"] + 1 if b["round"] == a["round"] else 1)
        assert b["points"] >= a["points"] and b["requests"] >= a["requests"] and b["seconds"] >= a["seconds"]
    assert lines[-1]["points"] <= report.result_json["points_measured"]


def test_each_line_is_on_disk_before_the_search_goes_on(finished):
    _, seen = finished
    generations = 0
    for p, lines_on_disk in seen:
        generations += not p.message
        assert lines_on_disk == generations


def test_the_law_s_schedule_ran_in_the_race(finished):
    report, _ = finished
    last_round = [line for line in history(report.output) if line["round"] == line["n_rounds"]]
    raced = {json.dumps(s["schedule"]) for line in last_round for s in line["schedules"]}
    assert json.dumps(report.result_json["schedule"]) in raced


def test_a_resumed_run_writes_its_history_afresh_with_the_times_it_took(finished, tmp_path):
    report, _ = finished
    copy = tmp_path / "tiny"
    shutil.copytree(report.output, copy)
    config = load_experiment(copy / "experiment.yaml", overrides={"output": str(copy)})
    again = run_experiment(config, resume=True, notes=None, handle_signals=False)
    assert again.journal.live_points == 0
    assert history(copy) == history(report.output)  # every generation replayed: the times are the run's own


def test_a_resumed_run_s_history_continues_the_interrupted_run_s_times(write_experiment):
    path = write_experiment()
    stopped = run_experiment(load_experiment(path), progress=lambda p: True, notes=None,
                             handle_signals=False)  # stops after its first generation
    assert stopped.interrupted
    folder = stopped.output
    slow = [dict(line, seconds=line["seconds"] + 1000) for line in history(folder)]  # as on a slow rig
    (folder / HISTORY_NAME).write_text("".join(json.dumps(line) + "\n" for line in slow))
    resumed = run_experiment(load_experiment(path), resume=True, notes=None, handle_signals=False)
    lines = history(folder)
    assert lines[: len(slow)] == slow  # the generations the interrupted run finished keep its times
    later = lines[len(slow):]
    assert later and later[0]["seconds"] >= slow[-1]["seconds"]  # the resumed run's go on from them
    assert all(b["seconds"] >= a["seconds"] for a, b in zip(lines, lines[1:]))
    # result.json says what the history adds to the resumed run's clock, so the report's last
    # step (the final fit, at wall_seconds) comes after the last generation
    offset = resumed.result_json["journal"]["seconds_offset"]
    assert all(0 <= line["seconds"] - offset <= resumed.result_json["wall_seconds"] + 1e-3 for line in later)
    assert stopped.result_json["journal"]["seconds_offset"] == 0
    assert "the replay is not counted" in write_report(folder).read_text()


# -- test_points.csv ------------------------------------------------------------------------------


def test_the_test_points_are_those_the_law_was_scored_on(finished):
    report, _ = finished
    lines = (report.output / TEST_POINTS_NAME).read_text().splitlines()
    assert lines[0] == "x0,x1,measured,predicted"
    table = np.array([[float(v) for v in line.split(",")] for line in lines[1:]])
    assert table.shape == (TINY_EXPERIMENT["search"]["n_test"], 4)
    assert regression_metrics(table[:, 2], table[:, 3])["nmse"] == report.result_json["nmse_test"]
    low, high = 0.1, 10
    assert np.all((table[:, :2] >= low) & (table[:, :2] <= high))


# -- the page -------------------------------------------------------------------------------------


class _Page(HTMLParser):
    """Collects the tags of a page and the attributes of its images; fails on unbalanced sections."""

    def __init__(self) -> None:
        super().__init__()
        self.images: list[dict[str, str | None]] = []
        self.tags: list[str] = []
        self.open: list[str] = []
        self.text: list[str] = []

    def handle_starttag(self, tag, attrs):
        self.tags.append(tag)
        if tag == "img":
            self.images.append(dict(attrs))
        elif tag not in ("meta", "br"):
            self.open.append(tag)

    def handle_endtag(self, tag):
        assert self.open and self.open[-1] == tag, f"</{tag}> closes <{self.open[-1] if self.open else None}>"
        self.open.pop()

    def handle_data(self, data):
        self.text.append(data)


def parse(page: str) -> _Page:
    parser = _Page()
    parser.feed(page)
    parser.close()
    assert parser.open == []
    return parser


def decoded(img: dict[str, str | None]) -> np.ndarray:
    src = img["src"] or ""
    prefix = "data:image/png;base64,"
    assert src.startswith(prefix)
    image = Image.open(io.BytesIO(base64.b64decode(src[len(prefix):], validate=True)))
    image.load()
    assert image.format == "PNG"
    pixels = np.asarray(image.convert("RGB"), dtype=float)
    # shown at half its pixel size, for fine screens
    assert (int(img["width"] or 0), int(img["height"] or 0)) == (round(image.width / 2), round(image.height / 2))
    return pixels


def test_the_report_parses_and_every_image_decodes_and_is_not_blank(finished, tmp_path, capsys):
    report, _ = finished
    run_dir = tmp_path / "tiny"
    shutil.copytree(report.output, run_dir)
    with open(run_dir / HISTORY_NAME, "a") as fh:  # a run killed mid-line: the torn line is left out
        fh.write('{"round": 2, "gener')
    assert main(["report", str(run_dir)]) == 0
    assert capsys.readouterr().out.strip() == str(run_dir / REPORT_NAME)
    page = (run_dir / REPORT_NAME).read_text(encoding="utf-8")
    parsed = parse(page)
    assert parsed.tags[0] == "html" and "title" in parsed.tags
    # the law and the truth as mathematics, then five figures with captions
    assert len(parsed.images) == 7 and parsed.tags.count("figcaption") == 5
    for img in parsed.images:
        pixels = decoded(img)
        assert pixels.var() > 0, img["alt"]
        assert img["alt"]
    text = " ".join(parsed.text)
    # the schedule the search took (which variable it held first is the search's to choose)
    first, last = report.result_json["schedule"]
    schedule = f"held {first[0]} \u2192 none held"
    assert len(first) == 1 and last == []
    for words in ("The law found", "The Pareto front", "The race", "Predicted against measured",
                  "Residuals against each variable", "Points measured over time", report.result_json["expression"],
                  "Test NMSE", "Schedule of the law", schedule, "Noise"):
        assert words in text, words
    assert "http://" not in page and "https://" not in page  # opens with no network


def test_the_units_a_run_declares_are_on_the_page(finished, tmp_path):
    report, _ = finished
    run_dir = tmp_path / "units"
    shutil.copytree(report.output, run_dir)
    data = json.loads((run_dir / "result.json").read_text())
    data["units"], data["output_name"], data["output_unit"] = {data["variables"][0]: "m"}, "T", "s"
    (run_dir / "result.json").write_text(json.dumps(data))
    text = " ".join(parse(write_report(run_dir).read_text(encoding="utf-8")).text)
    assert f"{data['variables'][0]} [m]" in text and "-> T [s]" in text


def test_a_noisy_law_s_constants_are_on_the_page_with_their_errors(finished, tmp_path):
    report, _ = finished
    run_dir = tmp_path / "noisy"
    shutil.copytree(report.output, run_dir)
    data = json.loads((run_dir / "result.json").read_text())
    data["constants"] = [{"value": 2.00606, "standard_error": 0.0011}, {"value": 0.1255, "standard_error": None}]
    data["constants_error"] = 0.0009
    (run_dir / "result.json").write_text(json.dumps(data))
    text = " ".join(parse(write_report(run_dir).read_text(encoding="utf-8")).text)
    assert "2.00606 \u00b1 0.0011, 0.1255 (not pinned by the readings)" in text
    assert "the largest relative one 0.09%" in text


def test_an_approximation_is_called_one_on_the_page(finished, tmp_path):
    report, _ = finished
    run_dir = tmp_path / "short"
    shutil.copytree(report.output, run_dir)
    data = json.loads((run_dir / "result.json").read_text())
    assert data["fits_noise"] is True  # the tiny run finds its law
    text = " ".join(parse(write_report(run_dir).read_text(encoding="utf-8")).text)
    assert "The law found" in text and "an approximation" not in text
    data["fits_noise"] = False
    (run_dir / "result.json").write_text(json.dumps(data))
    text = " ".join(parse(write_report(run_dir).read_text(encoding="utf-8")).text)
    assert "The approximation found" in text and "The law found" not in text
    assert "an approximation, not the law" in text


def test_wild_readings_replaced_are_counted_on_the_page(finished, tmp_path):
    report, _ = finished
    run_dir = tmp_path / "wild"
    shutil.copytree(report.output, run_dir)
    data = json.loads((run_dir / "result.json").read_text())
    data["points_failed"], data["points_replaced"] = 2, 17
    (run_dir / "result.json").write_text(json.dumps(data))
    text = " ".join(parse(write_report(run_dir).read_text(encoding="utf-8")).text)
    assert f"in {data['requests']:,} requests, 2 failed, 17 wild and read again" in text


@pytest.mark.parametrize("history_file", ["missing", "empty"])
def test_a_folder_without_history_or_test_points_still_gets_a_page_that_says_so(finished, tmp_path, history_file):
    report, _ = finished
    run_dir = tmp_path / "old"
    shutil.copytree(report.output, run_dir)
    if history_file == "missing":  # a run made before runs kept their history
        (run_dir / HISTORY_NAME).unlink()
    else:  # a run stopped before its first generation ended
        (run_dir / HISTORY_NAME).write_text("")
    (run_dir / TEST_POINTS_NAME).unlink()
    parsed = parse(write_report(run_dir).read_text(encoding="utf-8"))
    assert len(parsed.images) == 3  # the law, the truth, the front
    text = " ".join(parsed.text)
    assert f"no usable {TEST_POINTS_NAME}" in text
    assert (f"no {HISTORY_NAME}" if history_file == "missing" else "no race to draw") in text
    assert "Points measured over time" not in text


def test_a_long_law_is_set_on_lines_that_break_only_between_terms():
    latex = r" + ".join([r"0.123456 x_{0} \sin{\left(x_{1} + x_{2} - 3 \right)}"] * 6) + r" - \frac{x_{0} - 1}{x_{2}}"
    lines = _latex_lines(latex)
    assert len(lines) > 1
    assert all(line.startswith(r"\quad + ") or line.startswith(r"\quad - ") for line in lines[1:])
    assert " ".join(line.removeprefix(r"\quad ") for line in lines) == latex
    assert _latex_lines(r"x_{0} x_{1}") == [r"x_{0} x_{1}"]


def test_a_law_mathtext_cannot_set_is_shown_as_text():
    assert _math_block(r"\frac{x_{0}", "x0/(", "the law", 20) == "<pre class='math-text'>x0/(</pre>"
    assert _math_block(r"x_{0}", "x0", "the law", 20).startswith("<img class='math'")


# -- the commands ---------------------------------------------------------------------------------


@pytest.mark.parametrize("make", ["missing", "empty"])
def test_rcvgp_report_of_a_folder_that_is_no_run_exits_2_in_one_line(make, tmp_path, capsys):
    run_dir = tmp_path / "nothing"
    if make == "empty":
        run_dir.mkdir()
    assert main(["report", str(run_dir)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith(f"rcvgp: error: {run_dir}: no ")
    assert not (run_dir / REPORT_NAME).exists()


def test_rcvgp_report_without_matplotlib_says_how_to_get_it_and_exits_2(finished, tmp_path, capsys, monkeypatch):
    report, _ = finished
    run_dir = tmp_path / "tiny"
    shutil.copytree(report.output, run_dir)
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # what `import matplotlib` meets when it is not installed
    assert main(["report", str(run_dir)]) == 2
    assert capsys.readouterr().err == f"rcvgp: {PLOT_EXTRA_HINT}\n"
    assert 'pip install "rcvgp[plot]"' in PLOT_EXTRA_HINT
    assert not (run_dir / REPORT_NAME).exists()


def test_run_with_report_writes_the_page(write_experiment, tmp_path, capsys):
    assert main(["run", str(write_experiment()), "--report", "--quiet"]) == 0
    assert (tmp_path / "runs" / "tiny" / REPORT_NAME).exists()
    assert "report" not in capsys.readouterr().err  # --quiet


def test_run_with_report_without_matplotlib_finishes_the_run_and_says_the_page_was_not_written(
        write_experiment, tmp_path, capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    assert main(["run", str(write_experiment()), "--report", "--quiet"]) == 0
    out = tmp_path / "runs" / "tiny"
    assert (out / "result.json").exists() and not (out / REPORT_NAME).exists()
    err = capsys.readouterr().err
    assert err == f"rcvgp: the report was not written: {PLOT_EXTRA_HINT}; then `rcvgp report {out}`\n"


def test_the_residuals_show_the_noise_the_fits_were_judged_against() -> None:
    def caption(noise: object) -> str:
        return _residual_caption({"noise": noise})

    whiskers, band = "whiskers span", "band spans"
    assert whiskers in caption({"relative": 0.01}) and whiskers in caption({"digits": 4, "resolution": 1e-3})
    assert band in caption({"absolute": 0.5}) and band in caption({"resolution": 1e-3})
    assert whiskers not in caption({}) and band not in caption(None) and band not in caption({"digits": "four"})
    # a meter of four digits: each reading's step, not one for all
    sigma = _noise_model({"digits": 4, "resolution": 1e-3}).std(np.array([1.234, 56.78]))
    assert sigma == pytest.approx(np.array([1e-3, 1e-2]) / np.sqrt(12))
