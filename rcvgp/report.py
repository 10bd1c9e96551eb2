"""The report of a finished run: ``report.html`` in its folder, one page to look at.

:func:`write_report` reads nothing but the run folder (``result.json``, ``history.jsonl``,
``test_points.csv``) and writes one self-contained HTML file: the law rendered as mathematics,
the key numbers, then figures with captions (the Pareto front, the race of the schedules, the
law against the test points and its residuals, and the points measured over time). Images are
PNGs embedded as data URIs, so the page opens anywhere without a network.

The figures need matplotlib, an optional extra (``pip install "rcvgp[plot]"``); without it,
:func:`write_report` raises :class:`~rcvgp.errors.MissingExtra` before it reads anything.
"""

from __future__ import annotations

import base64
import datetime
import html
import io
import math
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from rcvgp.errors import MissingExtra
from rcvgp.journal import column_label
from rcvgp.noisefloor import NoiseModel
from rcvgp.runner import (
    HISTORY_NAME, RESULT_NAME, TEST_POINTS_NAME, _constant_items, _fit_text, _noise_model, _noise_text, _num,
    _read_history, _schedule_text, _variables_text, read_result, write_atomic,
)

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

__all__ = ["REPORT_NAME", "PLOT_EXTRA_HINT", "write_report", "render_report"]

#: File name of the report inside a run's folder.
REPORT_NAME = "report.html"
#: What to do when matplotlib is missing.
PLOT_EXTRA_HINT = 'the report needs matplotlib, an optional extra: pip install "rcvgp[plot]"'

_DPI = 200  # images are drawn at twice their size on the page, so they stay sharp on fine screens
_SHOWN_DPI = 100
_LEGEND_MAX = 12  # schedules named in the race's legend; the rest are drawn grey
_LAW_LINE = 90  # characters of LaTeX per line of the rendered law, roughly
_INK = "#1f2933"
_MUTED = "#8a94a0"
_ACCENT = "#c2410c"
_STYLE: dict[str, Any] = {
    "font.size": 10,
    "axes.titlesize": 11,
    "axes.labelsize": 10,
    "axes.edgecolor": "#c9ced6",
    "axes.labelcolor": _INK,
    "axes.grid": True,
    "axes.spines.top": False,
    "axes.spines.right": False,
    "grid.color": "#e6e9ee",
    "grid.linewidth": 0.8,
    "xtick.color": "#52606d",
    "ytick.color": "#52606d",
    "legend.frameon": False,
    "legend.fontsize": 8.5,
    "figure.facecolor": "white",
}


def write_report(run_dir: str | Path) -> Path:
    """Write ``report.html`` into a run folder and return its path.

    Raises
    ------
    MissingExtra
        When matplotlib is not installed.
    ConfigError
        When ``run_dir`` is not the folder of a finished run (no readable ``result.json``).
    """
    run_dir = Path(run_dir)
    page = render_report(run_dir)
    path = run_dir / REPORT_NAME
    write_atomic(path, page)
    return path


def render_report(run_dir: str | Path) -> str:
    """The report of the run in ``run_dir`` as one self-contained HTML page (see :func:`write_report`)."""
    _need_matplotlib()
    run_dir = Path(run_dir)
    data = read_result(run_dir)
    history = _read_history(run_dir / HISTORY_NAME)
    points = _read_test_points(run_dir / TEST_POINTS_NAME)
    return _page(run_dir, data, history, points)


# -- reading the run folder -------------------------------------------------------------------------


def _need_matplotlib() -> None:
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        raise MissingExtra(PLOT_EXTRA_HINT) from None


class _TestPoints:
    """``test_points.csv``: the variables' columns, the readings and the law's predictions."""

    def __init__(self, names: list[str], X: np.ndarray, y: np.ndarray, predicted: np.ndarray) -> None:
        self.names, self.X, self.y, self.predicted = names, X, y, predicted


def _read_test_points(path: Path) -> _TestPoints | None:
    if not path.exists():
        return None
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
        header = lines[0].split(",")
        table = np.array([[float(v) for v in line.split(",")] for line in lines[1:] if line], dtype=float)
    except (OSError, IndexError, ValueError):
        return None
    if header[-2:] != ["measured", "predicted"] or table.ndim != 2 or table.shape[1] != len(header):
        return None
    return _TestPoints(header[:-2], table[:, :-2], table[:, -2], table[:, -1])


# -- the page -------------------------------------------------------------------------------------


def _page(run_dir: Path, data: dict[str, Any], history: list[dict[str, Any]], points: _TestPoints | None) -> str:
    from rcvgp import __version__

    esc = html.escape
    unit = str(data.get("output_unit") or "")
    title = str(data.get("experiment") or run_dir.name)
    stopped = str(data.get("stopped") or "")
    subtitle = f"{data.get('method')} on {data.get('oracle')}, seed {data.get('seed')}"
    how = _STOPPED.get(stopped, stopped)
    not_run = data.get("rounds_not_run") or []
    if not_run:
        how += f" (round{'s' if len(not_run) > 1 else ''} {', '.join(map(str, not_run))} not run)"
    parts = [f"<header><p class='kicker'>rcvgp report</p><h1>{esc(title)}</h1>"
             f"<p class='sub'>{esc(subtitle)} &middot; <span class='stop-{esc(stopped)}'>{esc(how)}</span>"
             "</p></header>"]
    if stopped == "interrupted":
        parts.append("<p class='note'>The run was interrupted: this is the best law found so far. "
                     "<code>rcvgp run ... --resume</code> continues it.</p>")

    # A run that ended on an approximation says so where the eye lands first, not only in its card.
    heading = "The approximation found" if data.get("fits_noise") is False else "The law found"
    parts.append(f"<section class='law'><h2>{heading}</h2>")
    parts.append(_math_block(str(data.get("latex") or ""), str(data.get("expression")), "the law found", 22))
    parts.append(f"<p class='plain'><code>{esc(str(data.get('expression')))}</code></p>")
    truth = data.get("truth")
    if truth:
        exact = {True: "recovered exactly", False: "not recovered exactly"}.get(data.get("exact"), "")  # type: ignore[arg-type]
        parts.append(f"<p class='truth-label'>The true law (known because the oracle is simulated)"
                     f"{': ' + exact if exact else ''}</p>")
        parts.append(_math_block(_truth_latex(str(truth), data.get("variables") or []), str(truth),
                                 "the true law", 15, muted=True))
    parts.append("</section>")

    parts.append(_numbers(data, unit))

    figures: list[tuple[str, str, str | None]] = []  # (heading, caption, image) or a note without image
    equations = data.get("equations") or []
    if equations:
        figures.append(("The Pareto front", _front_caption(data), _png(_front_figure(equations), "NMSE against complexity")))
    if history:
        figures.append(("The race", _race_caption(data), _png(_race_figure(history, data.get("variables") or []),
                                                          "population and best loss per schedule")))
    elif (run_dir / HISTORY_NAME).exists():
        figures.append(("The race", "The run stopped before its first generation ended: there is no race to "
                        "draw.", None))
    else:
        figures.append(("The race", f"This run folder has no {HISTORY_NAME} (a run made before rcvgp kept its "
                        "history), so the race cannot be drawn.", None))
    if points is not None and np.isfinite(points.y).any():
        figures.append(("Predicted against measured", _fit_caption(data, points),
                        _png(_fit_figure(points, data, unit), "predicted against measured")))
        figures.append(("Residuals against each variable", _residual_caption(data),
                        _png(_residual_figure(points, data, unit), "residuals against each variable")))
    else:
        figures.append(("Predicted against measured", f"This run folder has no usable {TEST_POINTS_NAME} (a run "
                        "made before rcvgp kept its test points), so the law cannot be compared with them here.",
                        None))
    if history:
        figures.append(("Points measured over time", _points_caption(data, history),
                        _png(_points_figure(history, data), "points measured against time")))
    for n, (heading, caption, image) in enumerate(figures, 1):
        parts.append(f"<section><h2>{esc(heading)}</h2>")
        if image is None:
            parts.append(f"<p class='note'>{esc(caption)}</p>")
        else:
            parts.append(f"<figure>{image}<figcaption><b>Figure {n}.</b> {esc(caption)}</figcaption></figure>")
        parts.append("</section>")

    if equations:
        parts.append(_front_table(equations))
    made = datetime.datetime.now().astimezone().strftime("%Y-%m-%d %H:%M %Z")
    sources = ", ".join(n for n in (RESULT_NAME, HISTORY_NAME, TEST_POINTS_NAME) if (run_dir / n).exists())
    parts.append(f"<footer>Made by rcvgp {esc(__version__)} on {esc(made)} from {esc(sources)} in "
                 f"<code>{esc(run_dir.name)}</code>.</footer>")
    body = "\n".join(parts)
    return (f"<!DOCTYPE html>\n<html lang='en'>\n<head>\n<meta charset='utf-8'>\n"
            f"<meta name='viewport' content='width=device-width, initial-scale=1'>\n"
            f"<title>{esc(title)}: rcvgp report</title>\n<style>{_CSS}</style>\n</head>\n"
            f"<body>\n<main>\n{body}\n</main>\n</body>\n</html>\n")


_STOPPED = {
    "completed": "completed",
    "budget": "stopped: measurement budget spent",
    "time": "stopped: time budget spent",
    "interrupted": "interrupted",
}

_CSS = """
:root { color-scheme: light; }
body { margin: 0; background: #f4f5f7; color: #1f2933;
  font: 15px/1.5 system-ui, -apple-system, "Segoe UI", Roboto, "Helvetica Neue", Arial, sans-serif; }
main { max-width: 860px; margin: 0 auto; padding: 32px 28px 48px; background: white;
  box-shadow: 0 0 0 1px #e4e7eb; min-height: 100vh; box-sizing: border-box; }
header { border-bottom: 1px solid #e4e7eb; padding-bottom: 14px; margin-bottom: 8px; }
.kicker { margin: 0; text-transform: uppercase; letter-spacing: .08em; font-size: 12px; color: #8a94a0; }
h1 { margin: 2px 0 4px; font-size: 28px; font-weight: 650; }
h2 { font-size: 18px; font-weight: 620; margin: 30px 0 10px; }
.sub { margin: 0; color: #52606d; }
.stop-completed { color: #2f7d32; }
.stop-budget, .stop-time, .stop-interrupted { color: #c2410c; }
.law .math { display: block; margin: 8px 0 4px; max-width: 100%; height: auto; }
.plain { margin: 2px 0 14px; color: #52606d; font-size: 13px; overflow-wrap: anywhere; }
.truth-label { margin: 14px 0 0; color: #52606d; font-size: 13px; }
pre.math-text { font-size: 16px; white-space: pre-wrap; overflow-wrap: anywhere; margin: 8px 0; }
.numbers { display: grid; grid-template-columns: repeat(auto-fill, minmax(180px, 1fr)); gap: 10px;
  margin: 22px 0 6px; }
.card { border: 1px solid #e4e7eb; border-radius: 8px; padding: 10px 12px; }
.card .k { font-size: 12px; color: #8a94a0; text-transform: uppercase; letter-spacing: .05em; }
.card .v { font-size: 20px; font-weight: 600; margin-top: 2px; overflow-wrap: anywhere; }
.card .d { font-size: 12.5px; color: #52606d; }
.card.wide { grid-column: 1 / -1; }
.card.wide .v { font-size: 15px; font-weight: 500; }
figure { margin: 0; }
figure img { display: block; max-width: 100%; height: auto; margin: 0 auto; }
figcaption { font-size: 13.5px; color: #52606d; margin-top: 8px; }
.note { background: #fff7ed; border: 1px solid #fed7aa; border-radius: 6px; padding: 8px 12px; font-size: 14px; }
table { border-collapse: collapse; width: 100%; font-size: 13px; }
th, td { text-align: left; padding: 5px 8px; border-bottom: 1px solid #eef0f3; vertical-align: top; }
th { color: #52606d; font-weight: 600; }
td.n, th.n { text-align: right; white-space: nowrap; font-variant-numeric: tabular-nums; }
td code { overflow-wrap: anywhere; }
th:last-child { width: 62%; }
tr.chosen { background: #fff7ed; }
footer { margin-top: 36px; font-size: 12.5px; color: #8a94a0; }
code { font-family: ui-monospace, "SFMono-Regular", Menlo, Consolas, monospace; }
"""


def _numbers(data: dict[str, Any], unit: str) -> str:
    """The key numbers as cards."""
    m = data.get("test_metrics") or {}
    cards = [("Test NMSE", _num(data.get("nmse_test")), f"R\u00b2 {_num(m.get('r2'), '.6f')} on fresh points")]
    exact = data.get("exact")
    if exact is not None:
        cards.append(("Exact", "yes" if exact else "no", "compared symbolically with the true law"))
    failed, replaced = data.get("points_failed") or 0, data.get("points_replaced") or 0
    cards.append(("Points measured", f"{int(data.get('points_measured') or 0):,}",
                  f"in {int(data.get('requests') or 0):,} requests" + (f", {failed:,} failed" if failed else "")
                  + (f", {replaced:,} wild and read again" if replaced else "")))
    cards.append(("Wall time", f"{_num(data.get('wall_seconds'), '.1f')} s",
                  f"rounds run: {data.get('rounds_run')}" if data.get("rounds_run") is not None else ""))
    wide = []
    if data.get("variables"):
        wide.append(("Variables", _variables_text(data), ""))
    schedule = data.get("schedule") or []
    if schedule:
        wide.append(("Schedule of the law", _schedule_text(schedule, " \u2192 "), ""))
    noise = _noise_text(data.get("noise"), unit)
    if noise:
        wide.append(("Noise", noise, ""))
    fit = _fit_text(data)
    if fit:
        wide.append(("Fit", fit, ""))
    constants = _constant_items(data.get("constants") or [], "\u00b1")
    if constants:
        largest = data.get("constants_error")
        wide.append(("Constants of the law", ", ".join(constants), "standard errors the noise leaves" + (
            f"; the largest relative one {100 * float(largest):.2g}%" if largest is not None else "")))
    out = ["<div class='numbers'>"]
    for key, value, detail in cards:
        out.append(_card(key, value, detail))
    for key, value, detail in wide:
        out.append(_card(key, value, detail, wide=True))
    out.append("</div>")
    return "\n".join(out)


def _card(key: str, value: str, detail: str, wide: bool = False) -> str:
    esc = html.escape
    extra = f"<div class='d'>{esc(detail)}</div>" if detail else ""
    return (f"<div class='card{' wide' if wide else ''}'><div class='k'>{esc(key)}</div>"
            f"<div class='v'>{esc(value)}</div>{extra}</div>")


def _front_table(equations: list[dict[str, Any]]) -> str:
    esc = html.escape
    rows = ["<section><h2>Every law on the front</h2><table><thead><tr><th class='n'>nodes</th>"
            "<th class='n'>NMSE validation</th><th class='n'>NMSE fit</th><th>expression</th></tr></thead><tbody>"]
    for eq in equations:
        mark = " class='chosen'" if eq.get("chosen") else ""
        law = " <b>\u2190 the law</b>" if eq.get("chosen") else ""
        rows.append(f"<tr{mark}><td class='n'>{esc(str(eq.get('complexity')))}</td>"
                    f"<td class='n'>{esc(_num(eq.get('nmse_validation')))}</td>"
                    f"<td class='n'>{esc(_num(eq.get('loss')))}</td>"
                    f"<td><code>{esc(str(eq.get('expression')))}</code>{law}</td></tr>")
    rows.append("</tbody></table></section>")
    return "\n".join(rows)


# -- captions -------------------------------------------------------------------------------------


def _front_caption(data: dict[str, Any]) -> str:
    rule = (data.get("config") or {}).get("selection", "parsimonious")
    why = ("the most accurate entry" if rule == "accuracy"
           else "the simplest entry not distinguishably worse than the most accurate, given the noise")
    return ("Error against complexity: the best expression of each size that beats every smaller one, refitted "
            "with no variable held and scored on fresh validation points (NMSE, log scale, with a row for 0 at "
            f"the bottom). The law (\u2605) is {why}; its constants are then snapped and negligible "
            "terms dropped, so its NMSE can differ slightly from its entry's.")


def _race_caption(data: dict[str, Any]) -> str:
    if data.get("method") == "gp":
        return ("Plain GP holds no variable: its one schedule frees them all at once. Top: the population; "
                "bottom: its best training loss (NMSE), generation by generation.")
    return ("Each schedule is named by the order in which it freed its variables (x0 \u2192 x1: x0 free first, "
            "then x1). Top: how many expressions of the population came by each schedule, generation by "
            "generation; a schedule whose band ends has lost the race. Bottom: the best training loss (NMSE, "
            "mean over the trials of its held values) of each schedule. Dotted lines separate the rounds, "
            "numbered above; grey bands are schedules too many to name.")


def _fit_caption(data: dict[str, Any], points: _TestPoints) -> str:
    failed = int(np.sum(~np.isfinite(points.y)))
    note = f" ({failed} failed readings left out)" if failed else ""
    return (f"The law against the {len(points.y)} test points{note}: fresh set points drawn over the whole range "
            "with no variable held, measured once at the end and never seen by the search. On the diagonal, the "
            "law predicts the reading exactly.")


def _residual_caption(data: dict[str, Any]) -> str:
    noise = _noise_model(data.get("noise") or {}) or NoiseModel()
    if noise.relative or noise.digits:
        band = (" Grey whiskers span \u00b12 standard deviations of the noise at each point: residuals within "
                "them are what the noise leaves.")
    elif noise.absolute or noise.resolution:
        band = (" The grey band spans \u00b12 standard deviations of the noise: residuals within it are what the "
                "noise leaves.")
    else:
        band = ""
    return ("Measured minus predicted on the test points, against each variable: a pattern here is a part of the "
            "law that was missed; an exact law on noiseless readings leaves only rounding." + band)


def _points_caption(data: dict[str, Any], history: list[dict[str, Any]]) -> str:
    replayed = (data.get("journal") or {}).get("replayed_points")
    note = (f" The run was resumed: {replayed:,} points were replayed from the journal; the generations the "
            "interrupted run finished keep its times, and the resumed run's continue from them (the replay is not "
            "counted)." if replayed else "")
    return ("Points measured as the search went, one dot per generation (dotted lines: a new round). The last "
            "step is the final fit, validation and test points, measured after the search." + note)


# -- figures --------------------------------------------------------------------------------------


@contextmanager
def _styled() -> Iterator[None]:
    import matplotlib

    with matplotlib.rc_context(_STYLE):  # type: ignore[arg-type]  # its keys are literals in the stubs
        yield


def _figure(width: float, height: float) -> Figure:
    from matplotlib.figure import Figure

    return Figure(figsize=(width, height), dpi=_SHOWN_DPI, layout="constrained")


def _png(fig: Figure, alt: str = "") -> str:
    """A figure as an ``<img>`` with a PNG data URI, shown at half its pixel size (sharp on fine screens)."""
    buf = io.BytesIO()
    with _styled():
        fig.savefig(buf, format="png", dpi=_DPI)
    return _img(buf.getvalue(), alt, "figure")


def _img(png: bytes, alt: str, cls: str) -> str:
    width, height = _png_size(png)
    scale = _SHOWN_DPI / _DPI
    return (f"<img class='{cls}' alt='{html.escape(alt, quote=True)}' width='{round(width * scale)}' "
            f"height='{round(height * scale)}' src='data:image/png;base64,{base64.b64encode(png).decode('ascii')}'>")


def _png_size(png: bytes) -> tuple[int, int]:
    """Width and height from a PNG's IHDR chunk."""
    return int.from_bytes(png[16:20], "big"), int.from_bytes(png[20:24], "big")


def _math_block(latex: str, plain: str, alt: str, size: float, muted: bool = False) -> str:
    """The expression rendered by matplotlib's mathtext as an image; as plain text if it cannot be."""
    if latex:
        png = _math_png(latex, size, _MUTED if muted else _INK)
        if png is not None:
            return _img(png, f"{alt}: {plain}", "math")
    return f"<pre class='math-text'>{html.escape(plain)}</pre>"


def _math_png(latex: str, size: float, color: str) -> bytes | None:
    from matplotlib.figure import Figure

    lines = _latex_lines(latex)
    text = "\n".join(f"${line}$" for line in lines)
    with _styled():
        fig = Figure(figsize=(0.01, 0.01), dpi=_SHOWN_DPI)
        fig.text(0, 0, text, fontsize=size, color=color, ha="left", va="bottom", linespacing=1.6)
        buf = io.BytesIO()
        try:
            fig.savefig(buf, format="png", dpi=_DPI, bbox_inches="tight", pad_inches=0.04, facecolor="white")
        except ValueError:  # mathtext cannot parse it
            return None
    return buf.getvalue()


def _latex_lines(latex: str) -> list[str]:
    """A long sum split at its top-level ``+``/``-`` into lines of about :data:`_LAW_LINE`
    characters, each next line starting with its sign (mathtext sets one line at a time)."""
    terms: list[str] = []
    depth, start, i = 0, 0, 0
    while i < len(latex):
        if latex.startswith("\\left", i):
            depth += 1
            i += 5
            continue
        if latex.startswith("\\right", i):
            depth -= 1
            i += 6
            continue
        ch = latex[i]
        if ch == "{":
            depth += 1
        elif ch == "}":
            depth -= 1
        elif depth == 0 and latex.startswith((" + ", " - "), i) and i > start:
            terms.append(latex[start:i].strip())
            start = i + 1
        i += 1
    terms.append(latex[start:].strip())
    lines: list[str] = []
    for term in terms:
        if lines and len(lines[-1]) + len(term) + 1 <= _LAW_LINE:
            lines[-1] += " " + term
        else:
            lines.append(term)
    return [lines[0]] + [r"\quad " + line for line in lines[1:]]


def _truth_latex(truth: str, names: Sequence[str]) -> str:
    try:
        import sympy

        from rcvgp.benchmarks import parse_expression

        return str(sympy.latex(parse_expression(truth, list(names))))
    except Exception:  # noqa: BLE001 - the page shows it as plain text instead
        return ""


def _floored(values: Sequence[Any]) -> tuple[np.ndarray, np.ndarray, float]:
    """Values for a log axis: None and non-finite as NaN, zeros (and below) raised to a floor,
    the power of ten three decades under the smallest positive value; returns (values, mask of
    those raised, floor)."""
    v = np.array([np.nan if x is None else float(x) for x in values], dtype=float)
    positive = v[np.isfinite(v) & (v > 0)]
    smallest = float(positive.min()) if positive.size else 1.0
    floor = 10.0 ** (math.floor(math.log10(smallest)) - 3)
    low = np.isfinite(v) & (v <= 0)
    v[low] = floor
    return v, low, floor


def _log_axis(ax: Axes, values: np.ndarray, zero: np.ndarray, floor: float) -> None:
    """A log y axis; where some values were 0 (drawn at ``floor`` by :func:`_floored`), the
    floor is labelled ``0``."""
    from matplotlib.ticker import FixedLocator, LogLocator

    ax.set_yscale("log")
    if not zero.any():
        return
    ax.set_ylim(floor / 3, np.nanmax(values) * 3)

    ticks = [t for t in LogLocator(numticks=8).tick_values(floor * 1000, ax.get_ylim()[1]) if t >= floor * 1000]
    ax.yaxis.set_major_locator(FixedLocator([floor, *ticks]))
    labels = ["0"] + [f"$10^{{{round(math.log10(t))}}}$" for t in ticks]
    ax.set_yticklabels(labels)
    ax.yaxis.set_minor_locator(FixedLocator([]))
    ax.axhspan(floor / 3, floor * 3, color="#f4f5f7", zorder=0, lw=0)


def _front_figure(equations: list[dict[str, Any]]) -> Figure:
    from matplotlib.ticker import MaxNLocator

    with _styled():
        fig = _figure(7.4, 3.6)
        ax = fig.add_subplot()
        x = np.array([float(eq.get("complexity") or 0) for eq in equations])
        y, zero, floor = _floored([eq.get("nmse_validation") for eq in equations])
        ax.step(x, y, where="post", color="#9aa5b1", lw=1, zorder=1)
        ax.scatter(x[~zero], y[~zero], s=28, color="#3e7cb1", zorder=2)
        if zero.any():
            ax.scatter(x[zero], y[zero], s=36, marker="v", color="#3e7cb1", zorder=2)
        chosen = [i for i, eq in enumerate(equations) if eq.get("chosen")]
        for i in chosen:
            ax.scatter([x[i]], [y[i]], s=260, marker="*", color=_ACCENT, edgecolor="white", lw=0.8, zorder=3)
            ax.annotate(f"the law: {_num(equations[i].get('nmse_validation'))}", (x[i], y[i]),
                        xytext=(10, 8), textcoords="offset points", color=_ACCENT, fontsize=9)
        _log_axis(ax, y, zero, floor)
        ax.set_xlabel("complexity (nodes)")
        ax.set_ylabel("NMSE on validation points")
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    return fig


def _schedule_path(held: list[list[str]], names: Sequence[str]) -> tuple[str, ...]:
    """A schedule as the order its variables were freed: one step per round."""
    if not held:
        return ("?",)
    first = [n for n in names if n not in held[0]] or ["none"]
    steps = [", ".join(first)]
    for before, after in zip(held, held[1:]):
        freed = [n for n in before if n not in after]
        steps.append(", ".join(freed) if freed else "\u2013")
    return tuple(steps)


def _schedule_label(path: tuple[str, ...]) -> str:
    return " \u2192 ".join(path)


def _lineage_colors(paths: Sequence[tuple[str, ...]], named: set[tuple[str, ...]]) -> dict[tuple[str, ...], Any]:
    """A colour per schedule: one hue per first freed variable (the race's lineages), shades of it
    for the schedules that grew from there; grey for those not named."""
    from matplotlib import colormaps

    families = ["Blues", "Oranges", "Greens", "Reds", "Purples", "YlOrBr", "PuRd", "BuGn", "Greys"]
    roots = sorted({p[0] for p in paths})
    colors: dict[tuple[str, ...], Any] = {}
    for p in paths:
        if p not in named:
            colors[p] = "#d5d9de"
            continue
        cmap = colormaps[families[roots.index(p[0]) % len(families)]]
        kin = sorted(q for q in paths if q in named and q[0] == p[0] and len(q) == len(p))
        # Deeper rounds darker; siblings spread over a band of shades.
        k, n = kin.index(p), len(kin)
        base = 0.55 + 0.12 * min(len(p) - 1, 3)
        spread = 0.3 if n > 1 else 0.0
        colors[p] = cmap(min(0.98, max(0.3, base - spread / 2 + spread * k / max(1, n - 1))))
    return colors


def _race_figure(history: list[dict[str, Any]], names: Sequence[str]) -> Figure:
    from matplotlib.ticker import MaxNLocator

    steps = np.arange(1, len(history) + 1)
    population: dict[tuple[str, ...], np.ndarray] = {}
    loss: dict[tuple[str, ...], list[Any]] = {}
    for k, record in enumerate(history):
        for s in record["schedules"]:
            path = _schedule_path(s.get("schedule") or [], names)
            if path not in population:
                population[path] = np.zeros(len(history))
                loss[path] = [None] * len(history)
            population[path][k] += float(s.get("population") or 0)
            old, new = loss[path][k], s.get("best_loss")
            loss[path][k] = new if old is None or (new is not None and new < old) else old
    # Rounds first, then by name: a lineage's schedules sit together in the stack and the legend.
    paths = sorted(population, key=lambda p: (len(p), p))
    # Name the schedules that held the most of the population at some point; the others are grey.
    named = set(sorted(paths, key=lambda p: -float(population[p].max()))[:_LEGEND_MAX])
    colors = _lineage_colors(paths, named)
    with _styled():
        fig = _figure(7.4, 6.2)
        top, bottom = fig.subplots(2, 1, sharex=True, height_ratios=[1.1, 1])
        below = np.zeros(len(history))
        handles = {}
        for p in paths:
            handles[p] = top.bar(steps, population[p], bottom=below, width=1.0, color=colors[p], linewidth=0)
            below = below + population[p]
        top.set_ylabel("expressions")
        top.set_xlim(steps[0] - 0.5, steps[-1] + 0.5)
        top.grid(axis="x", visible=False)
        top.set_axisbelow(True)
        values, zero, floor = _floored([v for p in paths for v in loss[p]])
        values = values.reshape(len(paths), len(history))
        for row, p in enumerate(paths):
            alive = population[p] > 0
            series = np.where(alive, values[row], np.nan)
            lone = alive & ~(np.roll(alive, 1) & (steps > 1)) & ~(np.roll(alive, -1) & (steps < len(steps)))
            bottom.plot(steps, series, color=colors[p], lw=1.8 if p in named else 0.9, zorder=3 if p in named else 2)
            if lone.any():  # a schedule alive for one generation only: a dot, not an invisible line
                bottom.scatter(steps[lone], series[lone], s=12, color=[colors[p]], zorder=3)
        _log_axis(bottom, values, zero, floor)
        bottom.set_ylabel("best loss (NMSE)")
        bottom.set_xlabel("generation, all rounds")
        bottom.xaxis.set_major_locator(MaxNLocator(integer=True))
        _mark_rounds([top, bottom], history, steps)
        shown = [p for p in paths if p in named]
        if shown:
            fig.legend([handles[p] for p in shown], [_schedule_label(p) for p in shown], loc="outside lower center",
                       ncols=min(4, len(shown)), title="schedule (order freed)")
    return fig


def _round_spans(history: list[dict[str, Any]]) -> list[tuple[int, int, int]]:
    """(round, first step, last step) of each stretch of generations in one round, steps 1-based."""
    spans: list[tuple[int, int, int]] = []
    previous = 0
    for k, record in enumerate(history, 1):
        r, gen = int(record.get("round") or 0), int(record.get("generation") or 0)
        # cvgp-all runs a round again in each branch: its generations count from 1 again.
        if spans and spans[-1][0] == r and gen > previous:
            spans[-1] = (r, spans[-1][1], k)
        else:
            spans.append((r, k, k))
        previous = gen
    return spans


def _mark_rounds(axes: Sequence[Axes], history: list[dict[str, Any]], steps: np.ndarray) -> None:
    spans = _round_spans(history)
    for ax in axes:
        for _, first, _ in spans[1:]:
            ax.axvline(first - 0.5, color="#7b8794", lw=0.9, ls=":", zorder=4)
    top = axes[0]
    for r, first, last in spans:
        # As wide as there is room for: "round 2", "2", or nothing (cvgp-all has many short rounds).
        room = (last - first + 1) / len(steps)
        label = f"round {r}" if room >= 0.12 else str(r) if room >= 0.025 else ""
        top.text((first + last) / 2, 1.01, label, transform=top.get_xaxis_transform(), ha="center",
                 va="bottom", fontsize=8.5, color="#52606d")


def _fit_figure(points: _TestPoints, data: dict[str, Any], unit: str) -> Figure:
    ok = np.isfinite(points.y) & np.isfinite(points.predicted)
    y, f = points.y[ok], points.predicted[ok]
    suffix = f" [{unit}]" if unit else ""
    with _styled():
        fig = _figure(4.8, 4.3)
        ax = fig.add_subplot()
        both = np.concatenate([y, f]) if y.size else np.array([0.0, 1.0])
        lo, hi = float(both.min()), float(both.max())
        pad = 0.04 * (hi - lo or abs(hi) or 1.0)
        ax.plot([lo - pad, hi + pad], [lo - pad, hi + pad], color=_MUTED, lw=1, ls="--", zorder=1)
        ax.scatter(y, f, s=14, color="#3e7cb1", alpha=0.75, edgecolor="none", zorder=2)
        ax.set_xlim(lo - pad, hi + pad)
        ax.set_ylim(lo - pad, hi + pad)
        ax.set_aspect("equal", adjustable="box")
        ax.set_xlabel(f"measured{suffix}")
        ax.set_ylabel(f"predicted by the law{suffix}")
        m = data.get("test_metrics") or {}
        ax.text(0.03, 0.97, f"NMSE {_num(m.get('nmse'))}\nR\u00b2 {_num(m.get('r2'), '.6f')}", transform=ax.transAxes,
                va="top", ha="left", fontsize=9, color=_INK,
                bbox={"boxstyle": "round,pad=0.35", "fc": "white", "ec": "#e4e7eb"})
    return fig


def _residual_figure(points: _TestPoints, data: dict[str, Any], unit: str) -> Figure:
    ok = np.isfinite(points.y) & np.isfinite(points.predicted)
    residual = points.y[ok] - points.predicted[ok]
    X = points.X[ok]
    sigma = (_noise_model(data.get("noise") or {}) or NoiseModel()).std(points.predicted[ok])
    n = len(points.names)
    cols = min(n, 3)
    rows = math.ceil(n / cols)
    with _styled():
        fig = _figure(7.4, 2.5 * rows + 0.3)
        axes = np.atleast_1d(fig.subplots(rows, cols, sharey=True, squeeze=False)).ravel()
        for j, name in enumerate(points.names):
            ax = axes[j]
            x = X[:, j]
            if sigma.any() and np.ptp(sigma) == 0:  # the same noise everywhere: one band
                ax.axhspan(-2 * sigma[0], 2 * sigma[0], color="#e4e7eb", lw=0, zorder=1)
            elif sigma.any():  # noise that changes with the reading: a whisker at each point
                ax.vlines(x, -2 * sigma, 2 * sigma, color="#cfd4da", lw=0.7, zorder=1)
            ax.axhline(0, color=_MUTED, lw=1, ls="--", zorder=2)
            ax.scatter(x, residual, s=12, color="#3e7cb1", alpha=0.8, edgecolor="none", zorder=3)
            if _spread_on_log(x):
                ax.set_xscale("log")
            ax.set_xlabel(column_label(name, str((data.get("units") or {}).get(name) or "")))
            if j % cols == 0:
                ax.set_ylabel(f"measured \u2212 predicted{f' [{unit}]' if unit else ''}")
        for ax in axes[n:]:
            ax.set_visible(False)
    return fig


def _spread_on_log(x: np.ndarray) -> bool:
    """Whether values look drawn on a log scale (positive, over a decade or more, with their
    median nearer the geometric middle of their range than the arithmetic one)."""
    if x.size < 3 or not np.all(x > 0):
        return False
    lo, hi, median = float(x.min()), float(x.max()), float(np.median(x))
    if hi < 10 * lo:
        return False
    return abs(math.log(median / math.sqrt(lo * hi))) < abs(math.log(median / ((lo + hi) / 2)))


def _points_figure(history: list[dict[str, Any]], data: dict[str, Any]) -> Figure:
    seconds = np.array([float(r.get("seconds") or 0) for r in history])
    points = np.array([float(r.get("points") or 0) for r in history])
    with _styled():
        fig = _figure(7.4, 3.2)
        ax = fig.add_subplot()
        end_s, end_p = data.get("wall_seconds"), data.get("points_measured")
        offset = float((data.get("journal") or {}).get("seconds_offset") or 0)  # a resumed run's, as in the history
        xs, ys = seconds, points
        if end_s is not None and end_p is not None and float(end_s) + offset >= seconds[-1]:
            xs, ys = np.append(seconds, float(end_s) + offset), np.append(points, float(end_p))
        ax.step(xs, ys, where="post", color="#3e7cb1", lw=1.4)
        ax.scatter(seconds, points, s=10, color="#3e7cb1", zorder=3)
        if len(xs) > len(seconds):
            ax.scatter([xs[-1]], [ys[-1]], s=40, marker="s", color=_ACCENT, zorder=3,
                       label="final fit, validation and test")
            ax.legend(loc="upper left")
        for _, first, _ in _round_spans(history)[1:]:
            ax.axvline((seconds[first - 2] + seconds[first - 1]) / 2, color="#7b8794", lw=0.9, ls=":")
        ax.set_xlabel("seconds since the run started")
        ax.set_ylabel("points measured")
        ax.set_ylim(bottom=0)
        ax.yaxis.set_major_formatter("{x:,.0f}")
    return fig
