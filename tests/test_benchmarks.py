"""The benchmark catalog: counts, ids, validation at load time, and shipping in a built package."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import sympy

from rcvgp.benchmarks import (
    Benchmark,
    benchmarks_in_group,
    check_expression,
    closest_ids,
    get_benchmark,
    list_groups,
    load_catalog,
    load_catalog_file,
    parse_expression,
)
from rcvgp.errors import ConfigError, ExpressionError
from rcvgp.operators import resolve_operators

REPO = Path(__file__).resolve().parents[1]

PAPER_COUNTS = {
    "sincos-3-2-2": 10,
    "sincos-4-4-6": 10,
    "sincos-5-5-5": 10,
    "sincos-6-6-10": 10,
    "sincos-8-8-12": 10,
    "livermore2-n4": 25,
    "livermore2-n5": 25,
    "livermore2-n6": 25,
    "feynman-n4": 25,
    "feynman-n5": 12,
}
PAPER_N_VARS = {
    "sincos-3-2-2": 3,
    "sincos-4-4-6": 4,
    "sincos-5-5-5": 5,
    "sincos-6-6-10": 6,
    "sincos-8-8-12": 8,
    "livermore2-n4": 4,
    "livermore2-n5": 5,
    "livermore2-n6": 6,
    "feynman-n4": 4,
    "feynman-n5": 5,
}
#: The six entries whose truth is NaN/inf on part of the declared ranges (reference header).
DOCUMENTED_NONFINITE = {
    "livermore2/Vars4-15",
    "livermore2/Vars4-18",
    "livermore2/Vars5-25",
    "livermore2/Vars6-9",
    "livermore2/Vars6-14",
    "feynman/bonus.4",
}


def test_group_counts_equal_the_papers_tables() -> None:
    assert list(list_groups()) == list(PAPER_COUNTS)
    assert {g: len(benchmarks_in_group(g)) for g in list_groups()} == PAPER_COUNTS
    assert len(load_catalog()) == 162


def test_every_entry_has_its_groups_number_of_variables() -> None:
    for b in load_catalog().values():
        assert b.n_vars == PAPER_N_VARS[b.group] == len(b.variables), b.id
        assert b.variable_names == tuple(f"x{i}" for i in range(b.n_vars)), b.id


@pytest.mark.parametrize(
    "bench_id",
    [
        "sincos-3-2-2/1",
        "sincos-8-8-12/10",
        "livermore2/Vars4-1",
        "livermore2/Vars6-25",
        "feynman/I.8.14",
        "feynman/II.6.15a",
        "feynman/bonus.4",
        "feynman/bonus.1",
    ],
)
def test_ids_follow_group_slash_paper_eq_id(bench_id: str) -> None:
    assert get_benchmark(bench_id).id == bench_id


def test_ids_are_shell_safe_and_end_with_the_paper_eq_id() -> None:
    for b in load_catalog().values():
        assert re.fullmatch(r"[A-Za-z0-9.\-]+/[A-Za-z0-9.\-]+", b.id), b.id
        assert b.id.split("/")[1].lower() == b.paper_eq_id.lower(), b.id
    # the paper writes BONUS.k in the n=4 table: verbatim Eq. ID kept, id lower-cased
    assert get_benchmark("feynman/bonus.1").paper_eq_id == "BONUS.1"


def test_every_entry_parses_and_its_operators_are_in_the_table() -> None:
    for b in load_catalog().values():
        expr = parse_expression(b.expression, b.variable_names)
        assert {str(s) for s in expr.free_symbols} <= set(b.variable_names), b.id
        assert resolve_operators(b.operators), b.id
        assert b.threshold > 0


def test_nonfinite_entries_are_exactly_the_documented_six() -> None:
    flagged = {b.id for b in load_catalog().values() if b.nonfinite_fraction > 0}
    assert flagged == DOCUMENTED_NONFINITE


def test_constants_keep_full_precision() -> None:
    assert "0.00353914989750933" in get_benchmark("feynman/I.32.17").expression
    assert "7.24297051603992e+22" in get_benchmark("feynman/II.35.21").expression
    assert get_benchmark("feynman/II.35.21").paper_expression  # the paper's rounded form is kept apart


def test_variables_keep_the_catalog_sign_rule_and_distributions() -> None:
    i814 = get_benchmark("feynman/I.8.14")
    assert all(not v.only_positive and v.dist == "loguniform" for v in i814.variables)
    dists = {v.dist for b in load_catalog().values() for v in b.variables}
    assert dists == {"loguniform", "uniform", "integer_uniform"}


def test_benchmark_repr_leaves_the_truth_out() -> None:
    b = get_benchmark("feynman/I.32.17")
    assert b.expression not in repr(b)
    assert "0.00353914989750933" not in repr(b) + str(b.summary())


def test_unknown_id_names_the_closest_ids() -> None:
    with pytest.raises(ConfigError, match=r"unknown oracle id 'feynman/I.8.15'; closest: feynman/I\.8\.14"):
        get_benchmark("feynman/I.8.15")
    assert closest_ids("bonus.4")[0] == "feynman/bonus.4"
    assert closest_ids("livermore/Vars4-1")[0] == "livermore2/Vars4-1"


def test_id_lookup_forgives_case_only() -> None:
    assert get_benchmark("feynman/BONUS.4").id == "feynman/bonus.4"


def test_unknown_group_names_the_closest_groups() -> None:
    with pytest.raises(ConfigError, match="unknown group 'feynman'; closest: feynman-n"):
        benchmarks_in_group("feynman")


def test_catalog_is_cached_but_callers_cannot_change_it() -> None:
    first = load_catalog()
    first.pop("feynman/I.8.14")
    assert "feynman/I.8.14" in load_catalog()


# -- bad catalog files: clear errors naming file, entry and field, at load time ------------------

GOOD_ENTRY = """\
  - id: demo/1
    paper_eq_id: '1'
    expression: 0.5*x0 + sin(x1)
    operators: [add, mul, sin, const]
    variables:
      - {name: x0, dist: loguniform, low: 0.1, high: 10.0, only_positive: true}
      - {name: x1, dist: uniform, low: 1.0, high: 2.0}
    threshold: 0.01
"""


def _catalog_file(tmp_path: Path, entry: str = GOOD_ENTRY, count: int = 1) -> Path:
    path = tmp_path / "demo.yaml"
    path.write_text(f"schema: rcvgp-catalog/1\ngroup: demo\ncount: {count}\nequations:\n{entry}")
    return path


def test_a_good_catalog_file_loads(tmp_path: Path) -> None:
    (bench,) = load_catalog_file(_catalog_file(tmp_path))
    assert isinstance(bench, Benchmark)
    assert (bench.id, bench.group, bench.n_vars) == ("demo/1", "demo", 2)
    assert bench.operators == ("add", "mul", "sin", "const")


@pytest.mark.parametrize(
    ("old", "new", "field", "message"),
    [
        ("    expression:", "    expresion:", r"\.expresion", "did you mean `expression`"),
        ("0.5*x0 + sin(x1)", "0.5*x0 + sin(x1", r"\.expression", "does not parse"),
        ("0.5*x0 + sin(x1)", "0.5*x0 + sinn(x1)", r"\.expression", "unknown function 'sinn'.*did you mean sin"),
        ("0.5*x0 + sin(x1)", "0.5*x0 + x7", r"\.expression", "unknown name 'x7'"),
        ("low: 1.0, high: 2.0", "low: 2.0, high: 1.0", r"\.variables\[1\]\.low", "low < high"),
        ("[add, mul, sin, const]", "[add, mull, sin]", r"\.operators", "unknown operator 'mull'.*did you mean mul"),
        ("dist: uniform", "dist: unifrom", r"\.variables\[1\]\.dist", "did you mean `uniform`"),
        ("low: 0.1, high: 10.0,", "low: 1e-1, high: 10.0,", r"\.variables\[0\]\.low", "decimal point"),
        ("{name: x1,", "{name: y,", r"\.variables\[1\]\.name", "expected 'x1'"),
        ("threshold: 0.01", "threshold: -1.0", r"\.threshold", "positive"),
    ],
)
def test_a_bad_catalog_file_names_file_entry_and_field(
    tmp_path: Path, old: str, new: str, field: str, message: str
) -> None:
    assert old in GOOD_ENTRY
    path = _catalog_file(tmp_path, GOOD_ENTRY.replace(old, new, 1))
    with pytest.raises(ConfigError, match=re.escape(f"{path}: equations[0] (demo/1)") + field + r": .*" + message):
        load_catalog_file(path)


def test_a_wrong_count_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="count: says 2 but the file lists 1"):
        load_catalog_file(_catalog_file(tmp_path, count=2))


def test_a_duplicate_id_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"equations\[1\] \(demo/1\)\.id: duplicate id"):
        load_catalog_file(_catalog_file(tmp_path, GOOD_ENTRY + GOOD_ENTRY, count=2))


def test_a_file_that_is_not_yaml_is_an_error(tmp_path: Path) -> None:
    path = tmp_path / "broken.yaml"
    path.write_text("schema: [unclosed\n")
    with pytest.raises(ConfigError, match="broken.yaml: not valid YAML"):
        load_catalog_file(path)


# -- the expression language --------------------------------------------------------------------


def test_parse_expression_builds_the_sympy_expression() -> None:
    x0, x1 = sympy.symbols("x0 x1")
    got = parse_expression("-x0**2 + sqrt(2)*tanh(x1)/E + pi", ["x0", "x1"])
    assert sympy.simplify(got - (-(x0**2) + sympy.sqrt(2) * sympy.tanh(x1) / sympy.E + sympy.pi)) == 0


@pytest.mark.parametrize(
    "text",
    [
        "__import__('os').system('true')",
        "x0.__class__",
        "(lambda: 1)()",
        "x0[0]",
        "sin(x0, x1)",
        "sin(x=x0)",
        "x0 if x1 else 0",
        "'text'",
        "x0 // 2",
        "exec('1')",
    ],
)
def test_parse_expression_refuses_anything_but_arithmetic(text: str) -> None:
    with pytest.raises(ExpressionError) as info:
        parse_expression(text, ["x0", "x1"])
    assert text not in str(info.value)
    with pytest.raises(ExpressionError):  # the fast check used at catalog load agrees
        check_expression(text, ["x0", "x1"])


def test_a_literal_division_by_zero_is_refused() -> None:
    with pytest.raises(ExpressionError, match="division by zero"):
        check_expression("x0/0", ["x0"])
    with pytest.raises(ExpressionError, match="not a finite real formula"):
        parse_expression("x0/0", ["x0"])


def test_parse_expression_errors_do_not_repeat_the_expression() -> None:
    secret = "0.123456789*x0 + foo(x1)"
    with pytest.raises(ExpressionError) as info:
        parse_expression(secret, ["x0", "x1"])
    assert "0.123456789" not in str(info.value)


# -- shipped inside a non-editable install --------------------------------------------------------


@pytest.mark.integration
def test_catalog_loads_after_a_non_editable_install(tmp_path: Path) -> None:
    src = tmp_path / "src"
    src.mkdir()
    ignore = shutil.ignore_patterns("__pycache__", "*.egg-info", "build", "*.pyc")
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(REPO / name, src / name)
    for name in ("rcvgp", "oracles", "protocols"):
        shutil.copytree(REPO / name, src / name, ignore=ignore)
    target = tmp_path / "site"
    cmd = [sys.executable, "-m", "pip", "install", "--no-deps", "--quiet", "--target", str(target), str(src)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=180)
    if proc.returncode != 0:
        offline = re.search(r"(No matching distribution|Could not fetch|NewConnectionError|Temporary failure)", proc.stderr)
        if offline:
            pytest.skip("pip could not fetch the build backend (offline): " + offline.group(0))
        pytest.fail(f"pip install failed:\n{proc.stderr[-3000:]}")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    probe = textwrap.dedent(
        """
        import json, rcvgp, rcvgp.benchmarks as b
        from rcvgp.simulate import SimulatedOracle
        cat = b.load_catalog()
        o = SimulatedOracle.from_benchmark("feynman/I.8.14")
        print(json.dumps({"file": rcvgp.__file__, "n": len(cat), "groups": list(b.list_groups()),
                          "name": o.describe().name}))
        """
    )
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["PYTHONPATH"] = str(target)
    out = subprocess.run(
        [sys.executable, "-c", probe], cwd=elsewhere, env=env, capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stderr
    import json

    result = json.loads(out.stdout)
    assert Path(result["file"]).resolve().is_relative_to(target.resolve())
    assert result["n"] == 162
    assert result["groups"] == list(PAPER_COUNTS)
    assert result["name"] == "sim:feynman/I.8.14"
