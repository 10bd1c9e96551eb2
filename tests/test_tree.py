"""Expression trees: prefix structure, parse/print and sympy round trips, operator validation."""

from __future__ import annotations

import numpy as np
import pytest
import sympy

from rcvgp.errors import ExpressionError
from rcvgp.gp import Grammar, random_tree
from rcvgp.operators import OPERATORS, resolve_operators
from rcvgp.tree import Expr, from_sympy, literal, parse, reopened, subtree_end, to_sympy

ALL_OPS = tuple(OPERATORS)


def _same_function(a: sympy.Expr, b: sympy.Expr) -> bool:
    return sympy.simplify(a - b) == 0


# --- structure ---------------------------------------------------------------------------------

def test_subtree_end_walks_prefix_arity() -> None:
    tokens = ("add", "mul", "c", "x0", "sin", "x1")
    assert subtree_end(tokens, 0) == 6
    assert subtree_end(tokens, 1) == 4
    assert subtree_end(tokens, 2) == 3
    assert subtree_end(tokens, 4) == 6


def test_expr_measures_size_depth_constants_and_variables() -> None:
    e = Expr(("add", "mul", "c", "x0", "sin", "x2"))
    assert len(e) == 6
    assert e.depth == 3
    assert e.n_consts == 1
    assert e.const_positions == (2,)
    assert e.variables == frozenset({0, 2})
    assert e.frozen == (False,) * 6


def test_replace_and_subtree_carry_frozen_flags() -> None:
    e = Expr(("add", "x0", "c"), (True, True, False))
    sub = Expr(("sin", "x1"), (False, False))
    out = e.replace(2, sub)
    assert out.tokens == ("add", "x0", "sin", "x1")
    assert out.frozen == (True, True, False, False)
    assert out.subtree(2) == sub


@pytest.mark.parametrize(
    "tokens",
    [
        (),
        ("add", "x0"),
        ("x0", "x1"),
        ("sin",),
        ("add", "x0", "x1", "x2"),
        ("mul", "c"),
    ],
)
def test_from_tokens_rejects_malformed_prefix(tokens: tuple[str, ...]) -> None:
    with pytest.raises(ExpressionError):
        Expr.from_tokens(tokens)


@pytest.mark.parametrize("token", ["foo", "x", "xa", "pow", "C", "nan", "inf", "1e999", "-", "1.2.3"])
def test_from_tokens_rejects_unknown_token(token: str) -> None:
    with pytest.raises(ExpressionError, match="unknown token"):
        Expr.from_tokens(("add", "x0", token))


def test_from_tokens_rejects_frozen_flags_of_wrong_length() -> None:
    with pytest.raises(ExpressionError, match="frozen"):
        Expr.from_tokens(("add", "x0", "c"), (True, False))


def test_from_tokens_accepts_well_formed_prefix() -> None:
    e = Expr.from_tokens(["add", "x0", "sin", "c"], [True, True, False, False])
    assert e.tokens == ("add", "x0", "sin", "c")
    assert e.frozen == (True, True, False, False)


def test_literals_are_fixed_constants_that_print_and_convert_as_numbers() -> None:
    value = 0.1 + 0.2  # not a short decimal: the token must keep every bit
    e = Expr.from_tokens(("add", "mul", "c", "x0", literal(value)))
    assert float(e.tokens[-1]) == value
    assert e.n_consts == 1 and e.const_positions == (2,)
    assert to_sympy(Expr.from_tokens(("add", "x0", "-2.5")).tokens) == sympy.Symbol("x0", real=True) - 2.5
    assert str(Expr(("mul", "-2.5", "x0"))) == "((-2.5) * x0)"


def test_reopened_makes_literals_open_constants_with_their_values() -> None:
    tokens, values = reopened(("add", "mul", "c", "x0", "mul", "-2.5", "sin", "c"), [4.0, 7.0])
    assert tokens == ("add", "mul", "c", "x0", "mul", "c", "sin", "c")
    assert values == [4.0, -2.5, 7.0]


# --- operators -----------------------------------------------------------------------------------

def test_resolve_operators_rejects_unknown_name_with_suggestion() -> None:
    with pytest.raises(ExpressionError, match="unknown operator 'sinn'.*sin"):
        resolve_operators(["add", "sinn"])


@pytest.mark.parametrize("names", [[], ["const"]])
def test_resolve_operators_rejects_empty_set(names: list[str]) -> None:
    with pytest.raises(ExpressionError, match="empty"):
        resolve_operators(names)


def test_resolve_operators_drops_const_and_duplicates() -> None:
    assert resolve_operators(["add", "const", " mul ", "add"]) == ("add", "mul")


# --- printing and parsing ------------------------------------------------------------------------

def test_str_is_infix_text() -> None:
    assert str(Expr(("add", "mul", "c", "sin", "x0", "x1"))) == "((c * sin(x0)) + x1)"


def test_parse_gives_tree_and_constants() -> None:
    tree, consts = parse("2.5*sin(x0) + x1")
    expr = tree.to_sympy(consts)
    x0, x1 = sympy.symbols("x0 x1", real=True)
    assert _same_function(expr, 2.5 * sympy.sin(x0) + x1)
    assert consts == [2.5]


def test_parse_with_names_maps_to_columns() -> None:
    tree, _ = parse("m*a", names=["a", "m"])
    assert tree.variables == frozenset({0, 1})
    assert set(tree.tokens) == {"mul", "x0", "x1"}


@pytest.mark.parametrize("text", ["x0 +", "y0 + x1", "gamma(x0)", "x0**7", "x0 ** x1"])
def test_parse_rejects_bad_text(text: str) -> None:
    with pytest.raises(ExpressionError):
        parse(text)


def test_parse_of_printed_random_trees_round_trips() -> None:
    """parse(str(t)) is the same function as t (constants come back as 'c' tokens)."""
    g = Grammar(ALL_OPS, (0, 1, 2))
    rng = np.random.default_rng(11)
    checked = 0
    for _ in range(150):
        tree = random_tree(g, rng, 4)
        if tree.n_consts:
            continue  # printed text names constants 'c', which is not a parseable symbol
        try:
            back, values = parse(str(tree))
        except ExpressionError:
            continue  # e.g. a power sympy folds into one outside the table (x**6)
        assert values == [] or all(np.isfinite(values))
        assert _same_function(back.to_sympy(values), tree.to_sympy()), str(tree)
        checked += 1
    assert checked > 50


def test_from_sympy_of_to_sympy_round_trips() -> None:
    g = Grammar(ALL_OPS, (0, 1, 2))
    rng = np.random.default_rng(5)
    X = np.random.default_rng(0).uniform(0.5, 2.0, size=(40, 3))
    checked = 0
    for _ in range(200):
        tree = random_tree(g, rng, 4)
        consts = list(rng.uniform(0.5, 2.0, size=tree.n_consts))
        expr = to_sympy(tree.tokens, consts)
        try:
            back, values = from_sympy(expr)
        except ExpressionError:
            continue
        again = back.to_sympy(values)
        f1 = sympy.lambdify(sympy.symbols("x0 x1 x2", real=True), expr, "numpy")
        f2 = sympy.lambdify(sympy.symbols("x0 x1 x2", real=True), again, "numpy")
        with np.errstate(all="ignore"):
            a = np.broadcast_to(np.asarray(f1(X[:, 0], X[:, 1], X[:, 2]), dtype=float), (40,))
            b = np.broadcast_to(np.asarray(f2(X[:, 0], X[:, 1], X[:, 2]), dtype=float), (40,))
        ok = np.isfinite(a) & np.isfinite(b) & (np.abs(a) < 1e100)
        np.testing.assert_allclose(b[ok], a[ok], rtol=1e-9, atol=1e-12, err_msg=str(expr))
        assert np.array_equal(np.isfinite(a), np.isfinite(b)), str(expr)
        checked += 1
    assert checked > 150


def test_to_sympy_numbers_constants_left_to_right() -> None:
    e = Expr(("add", "mul", "c", "x0", "c"))
    c0, c1 = sympy.symbols("c0 c1")
    x0 = sympy.Symbol("x0", real=True)
    assert e.to_sympy() == c0 * x0 + c1
    assert e.to_sympy([2.0, 3.0]) == 2.0 * x0 + 3.0


def test_to_sympy_uses_names() -> None:
    e = Expr(("mul", "x0", "x1"))
    assert {str(s) for s in e.to_sympy(names=["mass", "acc"]).free_symbols} == {"mass", "acc"}


@pytest.mark.parametrize(
    ("text", "tokens"),
    [
        ("x0**2", ("n2", "x0")),
        ("x0**5", ("n5", "x0")),
        ("1/x0", ("inv", "x0")),
        ("x0**(-3)", ("inv", "n3", "x0")),
        ("sqrt(x0)", ("sqrt", "x0")),
        ("1/sqrt(x0)", ("inv", "sqrt", "x0")),
        ("-x0", ("neg", "x0")),
        ("tanh(x0)", ("tanh", "x0")),
    ],
)
def test_from_sympy_maps_powers_and_functions_to_the_table(text: str, tokens: tuple[str, ...]) -> None:
    tree, values = parse(text)
    assert tree.tokens == tokens
    assert values == []
