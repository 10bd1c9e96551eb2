"""Genetic operators: random trees, mutation and crossover respect frozen nodes, held variables
and size limits; selection; mating within one controlled set during a search."""

from __future__ import annotations

import numpy as np
import pytest

from rcvgp.gp import Grammar, crossover, deletions, hoists, mutate, random_term, random_tree, simplify_tree, tournament
from rcvgp.oracle import CallableOracle, OracleSpec, Variable
from rcvgp.operators import OPERATORS
from rcvgp.search import SearchConfig
from rcvgp.search.engine import Run
from rcvgp.tree import CONST_TOKEN, Expr, arity, is_var, subtree_end

OPS = ("add", "sub", "mul", "div", "sin", "cos", "exp", "log", "n2", "sqrt", "neg")


def _frozen_tokens(e: Expr) -> list[tuple[int, str]]:
    """The frozen nodes' tokens in prefix order, numbered."""
    return list(enumerate(t for t, f in zip(e.tokens, e.frozen) if f))


def _editable_count(e: Expr, token: str) -> int:
    return sum(t == token and not f for t, f in zip(e.tokens, e.frozen))


def _editable_subtrees_are_whole(e: Expr) -> bool:
    """Every descendant of an editable node is editable."""
    for i, f in enumerate(e.frozen):
        if not f and any(e.frozen[i:subtree_end(e.tokens, i)]):
            return False
    return True


def _well_formed(e: Expr) -> bool:
    return len(e.frozen) == len(e.tokens) and subtree_end(e.tokens, 0) == len(e.tokens)


def _partly_frozen(g_all: Grammar, rng: np.random.Generator) -> Expr:
    """A random tree, frozen except a few whole subtrees (what FreezeEquation leaves editable)."""
    while True:
        tree = random_tree(g_all, rng, int(rng.integers(3, 6)))
        if len(tree) >= 5:
            break
    frozen = [True] * len(tree)
    for _ in range(int(rng.integers(1, 3))):
        i = int(rng.integers(len(tree)))
        for j in range(i, subtree_end(tree.tokens, i)):
            frozen[j] = False
    return tree.with_frozen(frozen)


# --- random trees -----------------------------------------------------------------------------

def test_random_trees_use_only_free_variables_and_allowed_operators() -> None:
    g = Grammar(("add", "sin"), free_vars=(1, 3))
    rng = np.random.default_rng(0)
    seen_vars: set[int] = set()
    for _ in range(300):
        tree = random_tree(g, rng, 5)
        assert _well_formed(tree)
        assert tree.depth <= 5
        assert not any(tree.frozen)
        for t in tree.tokens:
            assert t in ("add", "sin", CONST_TOKEN) or is_var(t)
        seen_vars |= tree.variables
    assert seen_vars == {1, 3}


def test_random_term_has_a_coefficient_when_mul_is_allowed() -> None:
    rng = np.random.default_rng(1)
    g = Grammar(("add", "mul", "cos"), free_vars=(0,))
    for _ in range(50):
        t = random_term(g, rng, 3)
        assert t.tokens[:2] == ("mul", CONST_TOKEN) or t.tokens == (CONST_TOKEN,)
    g_no_mul = Grammar(("add", "cos"), free_vars=(0,))
    assert all("mul" not in random_term(g_no_mul, rng, 3).tokens for _ in range(50))


def test_grammar_fits_checks_size_and_depth() -> None:
    g = Grammar(("add",), (0,), max_size=5, max_depth=3)
    assert g.fits(Expr(("add", "x0", "add", "x0", "x0")))
    assert not g.fits(Expr(("add", "x0", "add", "x0", "add", "x0", "x0")))  # size 7
    assert not g.fits(Expr(("sin", "sin", "sin", "x0")))  # depth 4
    assert g.unary == () and g.binary == ("add",)


# --- mutation -----------------------------------------------------------------------------------

def test_mutation_preserves_frozen_nodes_and_whole_editable_subtrees() -> None:
    g_all = Grammar(OPS, (0, 1, 2))
    g = Grammar(OPS, free_vars=(0, 2), max_size=30, max_depth=8)  # x1 is held
    mutated = 0
    for seed in range(400):
        rng = np.random.default_rng(seed)
        parent = _partly_frozen(g_all, rng)
        if not g.fits(parent):
            continue
        for _ in range(5):
            child = mutate(parent, g, rng)
            if child is None:
                continue
            mutated += 1
            assert _well_formed(child)
            assert child.tokens != parent.tokens
            assert _frozen_tokens(child) == _frozen_tokens(parent), (parent, child)
            assert _editable_subtrees_are_whole(child), (parent, child)
            # no new node holds the held variable x1 (editable ones may only disappear)
            assert _editable_count(child, "x1") <= _editable_count(parent, "x1"), (parent, child)
            assert len(child) <= g.max_size and child.depth <= g.max_depth
    assert mutated > 500


def test_mutation_adds_no_held_variable() -> None:
    """Starting from trees over the free variables, no mutant ever mentions a held one."""
    g = Grammar(OPS, free_vars=(1,), max_size=40, max_depth=10)
    for seed in range(300):
        rng = np.random.default_rng(seed)
        tree = random_tree(g, rng, 4)
        for _ in range(10):
            tree = mutate(tree, g, rng) or tree
            assert tree.variables <= {1}, tree
            assert g.fits(tree)


def test_fully_frozen_tree_is_never_mutated() -> None:
    tree = Expr(("add", "mul", "x0", "x1", "sin", "x0"), (True,) * 6)
    g = Grammar(OPS, (0, 1))
    for seed in range(50):
        assert mutate(tree, g, np.random.default_rng(seed)) is None


def test_frozen_structure_with_open_summary_constant_only_changes_that_constant() -> None:
    # c*sin(x0) + c with the first constant a summary constant (editable) and the rest frozen
    tree = Expr(("add", "mul", "c", "sin", "x0", "c"), (True, True, False, True, True, True))
    g = Grammar(OPS, free_vars=(1,), max_size=20, max_depth=8)
    for seed in range(100):
        child = mutate(tree, g, np.random.default_rng(seed))
        if child is None:
            continue
        i = 2
        end = subtree_end(child.tokens, i)
        assert child.tokens[:2] == ("add", "mul")
        assert child.tokens[end:] == ("sin", "x0", "c")
        assert all(child.frozen[end:]) and not any(child.frozen[i:end])
        assert child.variables <= {0, 1}


# --- crossover ------------------------------------------------------------------------------------

def test_crossover_swaps_only_editable_subtrees() -> None:
    g_all = Grammar(OPS, (0, 1, 2))
    g = Grammar(OPS, free_vars=(0, 1, 2), max_size=40, max_depth=10)
    swapped = 0
    for seed in range(300):
        rng = np.random.default_rng(seed)
        a, b = _partly_frozen(g_all, rng), _partly_frozen(g_all, rng)
        if not (g.fits(a) and g.fits(b)):
            continue
        pair = crossover(a, b, g, rng)
        if pair is None:
            continue
        swapped += 1
        ca, cb = pair
        for parent, child in ((a, ca), (b, cb)):
            assert _well_formed(child)
            assert _frozen_tokens(child) == _frozen_tokens(parent)
            assert _editable_subtrees_are_whole(child)
            assert g.fits(child)
        # the material comes from the parents (children may be simplified), none is made up
        assert ca.variables | cb.variables <= a.variables | b.variables
    assert swapped > 100


def test_crossover_refuses_trees_without_editable_nodes() -> None:
    frozen = Expr(("sin", "x0"), (True, True))
    free = Expr(("cos", "x0"))
    g = Grammar(OPS, (0,))
    assert crossover(frozen, free, g, np.random.default_rng(0)) is None
    assert crossover(free, frozen, g, np.random.default_rng(0)) is None


def test_crossover_refuses_children_over_the_size_limit() -> None:
    big = Expr(("add",) + ("add", "x0", "x0") + ("add", "x0", "x0"))
    g = Grammar(OPS, (0,), max_size=7, max_depth=10)
    for seed in range(50):
        pair = crossover(big, big, g, np.random.default_rng(seed))
        if pair is not None:
            assert all(g.fits(c) for c in pair)


# --- folding and selection ------------------------------------------------------------------------

def test_simplify_tree_folds_variable_free_editable_subtrees() -> None:
    e = Expr(("add", "mul", "sin", "c", "c", "x0"))
    assert simplify_tree(e).tokens == ("add", "c", "x0")
    frozen = Expr(("add", "mul", "sin", "c", "c", "x0"), (False, True, True, True, True, False))
    assert simplify_tree(frozen) == frozen  # frozen nodes are never folded
    plain = Expr(("add", "c", "x0"))
    assert simplify_tree(plain) is plain


@pytest.mark.parametrize(
    ("tokens", "expected"),
    [
        (("mul", "c", "mul", "c", "x0"), ("mul", "c", "x0")),  # c*(c*x) -> c*x
        (("add", "c", "add", "x0", "c"), ("add", "x0", "c")),  # c + (x + c) -> x + c
        (("mul", "c", "add", "x0", "c"), ("add", "mul", "c", "x0", "c")),  # c*(x + c) -> c*x + c
    ],
)
def test_simplify_tree_keeps_the_family_with_fewer_or_linear_constants(
    tokens: tuple[str, ...], expected: tuple[str, ...]
) -> None:
    out = simplify_tree(Expr(tokens))
    assert out.tokens == expected
    assert not any(out.frozen)


def test_simplify_tree_never_touches_frozen_nodes() -> None:
    g_all = Grammar(OPS, (0, 1, 2))
    for seed in range(200):
        tree = _partly_frozen(g_all, np.random.default_rng(seed))
        out = simplify_tree(tree)
        assert _frozen_tokens(out) == _frozen_tokens(tree)
        assert _editable_subtrees_are_whole(out) and _well_formed(out)


def test_deletions_make_one_editable_subtree_a_constant_biggest_first() -> None:
    # c*x0 + c*cos(x0): the root would leave no variable; cos(x0) -> c gives c*x0 + c again
    e = Expr(("add", "mul", "c", "x0", "mul", "c", "cos", "x0"))
    assert [d.tokens for d in deletions(e)] == [
        ("add", "mul", "c", "x0", "c"),
        ("add", "c", "mul", "c", "cos", "x0"),
    ]
    # frozen nodes stay: only the editable sine's subtree can go
    frozen = Expr(("add", "mul", "2.0", "x0", "sin", "x1"), (True, True, True, True, False, False))
    assert [d.tokens for d in deletions(frozen)] == [("add", "mul", "2.0", "x0", "c")]
    assert deletions(Expr(("mul", "c", "x0"), (True, True, True))) == []


def test_hoists_replace_an_operator_by_one_of_its_children_smallest_first() -> None:
    # (c + x1**2) * (c*sqrt(x0) + c): the offset beside c*sqrt(x0) can go, which deletions cannot do
    e = Expr(("mul", "add", "c", "n2", "x1", "add", "mul", "c", "sqrt", "x0", "c"))
    found = [d.tokens for d in hoists(e)]
    assert ("mul", "add", "c", "n2", "x1", "mul", "c", "sqrt", "x0") in found
    assert all(len(d) < len(e) for d in hoists(e)) and found == sorted(found, key=len)
    assert ("c",) not in found  # a variable must be left
    assert hoists(Expr(("mul", "c", "x0"), (True, True, True))) == []  # frozen: nothing to hoist


def test_tournament_picks_the_lowest_fitness_among_its_picks() -> None:
    fitness = [5.0, 1.0, 3.0, 0.5, 2.0]
    rng = np.random.default_rng(0)
    # a huge tournament sees everyone
    assert tournament(fitness, 200, rng) == 3
    assert tournament(fitness, 200, rng, among=[0, 2, 4]) == 4
    picks = [tournament(fitness, 1, rng, among=[0, 2]) for _ in range(200)]
    assert set(picks) == {0, 2}


def test_tournament_pressure_favours_fitter() -> None:
    fitness = list(range(10))
    rng = np.random.default_rng(1)
    picks = [tournament(fitness, 3, rng) for _ in range(2000)]
    assert np.mean(picks) < 3.0  # size-1 picks would average 4.5


# --- mating within one controlled set during a search ----------------------------------------------

def test_evolve_mates_only_within_a_controlled_set() -> None:
    spec = OracleSpec(tuple(Variable(f"x{i}", 0.5, 2.0) for i in range(3)))
    oracle = CallableOracle(lambda X: X[:, 0] * X[:, 1] + np.sin(X[:, 2]), spec)
    config = SearchConfig(operators=("add", "mul", "sin", "cos"), population=20, batch=16, n_trials=2,
                          p_mate=1.0, p_mutate=0.3, fit_iterations=2)
    run = Run("racing", oracle, config, seed=0)
    held_a, held_b = frozenset({1, 2}), frozenset({0, 2})
    pop = run.initial_pool(held_a, 10) + run.initial_pool(held_b, 10)
    before = {ind.key for ind in pop}
    out = run.evolve(pop, 4)
    assert {ind.controlled for ind in out} <= {held_a, held_b}
    for ind in out:
        free = set(run.grammar(ind.controlled).free_vars)
        assert ind.expr.variables <= free, (ind.controlled, str(ind.expr))
    assert any(ind.key not in before for ind in out)  # offspring were made and kept


def test_run_grammar_frees_exactly_the_uncontrolled_variables() -> None:
    spec = OracleSpec(tuple(Variable(f"x{i}", 0.5, 2.0) for i in range(4)))
    run = Run("racing", CallableOracle(lambda X: X.sum(axis=1), spec), SearchConfig(batch=8, n_trials=1), seed=0)
    g = run.grammar(frozenset({0, 2}))
    assert g.free_vars == (1, 3)


@pytest.mark.parametrize("name", sorted(OPERATORS))
def test_every_operator_has_a_consistent_arity(name: str) -> None:
    assert arity(name) == OPERATORS[name].arity in (1, 2)
