"""``rcvgp oracles list`` and ``rcvgp oracles show``."""

from __future__ import annotations

import json

import pytest

from rcvgp.benchmarks import get_benchmark, load_catalog
from rcvgp.cli import ExitCode, main


def test_list_prints_one_row_per_entry_with_group_vars_and_operators(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["oracles", "list"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split() == ["ID", "GROUP", "VARS", "OPERATORS"]
    assert len(lines) == 1 + 162
    first = lines[1].split()
    assert first[:3] == ["sincos-3-2-2/1", "sincos-3-2-2", "3"]
    assert first[3:] == list(get_benchmark("sincos-3-2-2/1").operators)


def test_list_json_gives_id_group_n_vars_operators(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["oracles", "list", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert len(rows) == 162
    assert {"id", "group", "n_vars", "operators"} <= set(rows[0])
    by_id = {r["id"]: r for r in rows}
    assert by_id["feynman/bonus.4"] == {
        "id": "feynman/bonus.4",
        "group": "feynman-n5",
        "n_vars": 5,
        "operators": list(get_benchmark("feynman/bonus.4").operators),
    }


def test_list_filters_by_group(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["oracles", "list", "--group", "feynman-n5", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert len(rows) == 12 and {r["group"] for r in rows} == {"feynman-n5"}


def test_list_unknown_group_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["oracles", "list", "--group", "feynman"]) == ExitCode.USAGE == 2
    err = capsys.readouterr().err
    assert "unknown group 'feynman'" in err and "feynman-n4" in err


def test_list_and_show_never_print_the_truth(capsys: pytest.CaptureFixture[str]) -> None:
    main(["oracles", "list"])
    main(["oracles", "list", "--json"])
    for bench_id in ("feynman/I.32.17", "livermore2/Vars4-18", "sincos-8-8-12/10"):
        main(["oracles", "show", bench_id])
        main(["oracles", "show", bench_id, "--json"])
    out = capsys.readouterr().out
    for b in load_catalog().values():
        assert b.expression not in out, b.id
    assert "0.00353914989750933" not in out


def test_show_prints_variables_and_ranges(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["oracles", "show", "feynman/I.8.14"]) == 0
    out = capsys.readouterr().out
    assert "id:         feynman/I.8.14" in out
    assert "x3  loguniform" in out and "[-10, -0.1] U [0.1, 10]" in out
    assert "hidden" in out


def test_show_mentions_a_documented_hard_case(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["oracles", "show", "livermore2/Vars5-25"]) == 0
    assert "63.6%" in capsys.readouterr().out


def test_show_reveal_prints_the_truth(capsys: pytest.CaptureFixture[str]) -> None:
    b = get_benchmark("feynman/I.32.17")
    assert main(["oracles", "show", b.id, "--reveal"]) == 0
    out = capsys.readouterr().out
    assert f"truth:      {b.expression}" in out
    assert main(["oracles", "show", b.id, "--reveal", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["expression"] == b.expression and data["variables"][0]["name"] == "x0"


def test_show_unknown_id_exits_2_with_one_line_of_closest_ids(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["oracles", "show", "feynman/I.8.15"]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1
    assert "unknown oracle id 'feynman/I.8.15'; closest: feynman/I.8.14" in lines[0]


def test_show_without_an_id_is_an_argparse_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        main(["oracles", "show"])
    assert info.value.code == 2
