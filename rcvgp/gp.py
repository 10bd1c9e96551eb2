"""Genetic operators on expression trees: random trees, the paper's four mutations, subtree
crossover and tournament selection.

Every operator edits only editable (unfrozen) nodes and writes only free variables into new
nodes; results larger than ``max_size`` nodes or deeper than ``max_depth`` are refused (None),
which keeps expressions bounded. Randomness comes only from the ``rng`` passed in.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from rcvgp.operators import OPERATORS
from rcvgp.tree import CONST_TOKEN, Expr, arity, is_var, subtree_end

__all__ = [
    "Grammar", "random_tree", "random_term", "mutate", "crossover", "tournament", "simplify_tree", "deletions", "hoists",
]


@dataclass(frozen=True)
class Grammar:
    """What new nodes may be made of: the operator set and the free variables."""

    operators: tuple[str, ...]
    free_vars: tuple[int, ...]
    max_size: int = 64
    max_depth: int = 12

    @property
    def unary(self) -> tuple[str, ...]:
        return tuple(o for o in self.operators if OPERATORS[o].arity == 1)

    @property
    def binary(self) -> tuple[str, ...]:
        return tuple(o for o in self.operators if OPERATORS[o].arity == 2)

    def fits(self, expr: Expr) -> bool:
        return len(expr) <= self.max_size and expr.depth <= self.max_depth


def _leaf(g: Grammar, rng: np.random.Generator, p_const: float = 0.15) -> str:
    if not g.free_vars or rng.random() < p_const:
        return CONST_TOKEN
    return f"x{g.free_vars[rng.integers(len(g.free_vars))]}"


def random_tree(g: Grammar, rng: np.random.Generator, depth: int) -> Expr:
    """A random editable tree of at most ``depth`` levels ("grow" method)."""
    tokens: list[str] = []

    def grow(d: int) -> None:
        ops = g.operators
        if d <= 1 or not ops or rng.random() < 0.3:
            tokens.append(_leaf(g, rng))
            return
        op = ops[rng.integers(len(ops))]
        tokens.append(op)
        for _ in range(OPERATORS[op].arity):
            grow(d - 1)

    grow(depth)
    return Expr(tuple(tokens))


def random_term(g: Grammar, rng: np.random.Generator, depth: int) -> Expr:
    """A random tree scaled by an open constant, ``c * t``, when ``mul`` is allowed.

    New additive terms nearly always need a coefficient; giving it up front saves the search
    a step, and the coefficient is solved by least squares for free.
    """
    t = random_tree(g, rng, depth)
    if "mul" in g.operators and t.tokens != (CONST_TOKEN,):
        return Expr(("mul", CONST_TOKEN) + t.tokens)
    return t


# A tree as nested lists while simplifying: [token, frozen, children].
_Node = list  # type: ignore[type-arg]


def _nest(expr: Expr) -> _Node:
    def build(i: int) -> tuple[_Node, int]:
        t = expr.tokens[i]
        kids = []
        j = i + 1
        for _ in range(arity(t)):
            kid, j = build(j)
            kids.append(kid)
        return [t, expr.frozen[i], kids], j

    return build(0)[0]


def _flat(node: _Node, tokens: list[str], frozen: list[bool]) -> None:
    tokens.append(node[0])
    frozen.append(node[1])
    for kid in node[2]:
        _flat(kid, tokens, frozen)


def _c() -> _Node:
    return [CONST_TOKEN, False, []]


def _is_c(node: _Node) -> bool:
    return node[0] == CONST_TOKEN and not node[1]


def _has_var(node: _Node) -> bool:
    return is_var(node[0]) or any(_has_var(k) for k in node[2])


def _simplify(node: _Node) -> _Node:
    if node[1]:  # frozen: editable parts are whole subtrees, so nothing below is editable either
        return node
    node = [node[0], node[1], [_simplify(k) for k in node[2]]]
    if node[2] and not _has_var(node):
        return _c()
    t, kids = node[0], node[2]
    if t == "neg" and not kids[0][1] and kids[0][0] == "mul" and any(_is_c(k) for k in kids[0][2]):
        return kids[0]  # -(c*x) is c*x with another c
    if t == "mul":
        a, b = kids
        if _is_c(b):
            a, b = b, a
        if _is_c(a):
            if b[0] == "neg" and not b[1]:
                return _simplify(["mul", False, [a, b[2][0]]])
            if b[0] == "mul" and not b[1] and any(_is_c(k) for k in b[2]):
                return b  # c * (c * x) -> c * x
            if b[0] in ("add", "sub") and not b[1] and any(_is_c(k) for k in b[2]):
                # c * (x + c) -> c * x + c: the same family, but now linear in both constants
                x = b[2][1] if _is_c(b[2][0]) else b[2][0]
                scaled = _simplify(["mul", False, [_c(), x]])
                return [b[0], False, [_c(), scaled] if _is_c(b[2][0]) else [scaled, _c()]]
    if t in ("add", "sub"):
        a, b = kids
        for one, other in ((a, b), (b, a)):
            if _is_c(one) and other[0] in ("add", "sub") and not other[1] and any(_is_c(k) for k in other[2]):
                return other  # c + (x + c) -> x + c
    return node


def simplify_tree(expr: Expr) -> Expr:
    """Rewrite editable parts into simpler trees of the same family: subtrees without variables
    become one constant, ``c*(c*x)`` becomes ``c*x``, ``c*(x + c)`` becomes ``c*x + c``,
    ``c + (x + c)`` becomes ``x + c``. Fewer and more often linear constants make fitting cheap
    and exact; frozen nodes are never touched."""
    if all(expr.frozen):
        return expr
    tokens: list[str] = []
    frozen: list[bool] = []
    _flat(_simplify(_nest(expr)), tokens, frozen)
    if tuple(tokens) == expr.tokens:
        return expr
    return Expr(tuple(tokens), tuple(frozen))


def deletions(expr: Expr) -> list[Expr]:
    """Every tree made by replacing one editable operator's subtree with a constant (then
    simplified), biggest subtree first; only those smaller than ``expr`` and with a variable left."""
    ops = _editable(expr, ops_only=True)
    ops.sort(key=lambda i: i - subtree_end(expr.tokens, i))
    out = []
    for i in ops:
        child = simplify_tree(expr.replace(i, Expr((CONST_TOKEN,))))
        if len(child) < len(expr) and child.variables and child not in out:
            out.append(child)
    return out


def hoists(expr: Expr) -> list[Expr]:
    """Every tree made by replacing one editable operator with one of its children (then
    simplified), smallest first; only those smaller than ``expr`` and with a variable left:
    ``(c*sqrt(x0) + c)`` loses a constant offset that ``deletions`` can only take with the rest."""
    out = []
    for i in _editable(expr, ops_only=True):
        j = i + 1
        for _ in range(arity(expr.tokens[i])):
            child = simplify_tree(expr.replace(i, expr.subtree(j)))
            j = subtree_end(expr.tokens, j)
            if len(child) < len(expr) and child.variables and child not in out:
                out.append(child)
    return sorted(out, key=len)


def _editable(expr: Expr, leaves_only: bool = False, ops_only: bool = False) -> list[int]:
    out = []
    for i, (t, f) in enumerate(zip(expr.tokens, expr.frozen)):
        if f:
            continue
        a = arity(t)
        if (leaves_only and a) or (ops_only and not a):
            continue
        out.append(i)
    return out


def _pick(rng: np.random.Generator, items: Sequence[int]) -> int:
    return items[int(rng.integers(len(items)))]


def mutate(expr: Expr, g: Grammar, rng: np.random.Generator) -> Expr | None:
    """One of the paper's four mutations, on an editable node; None if none applies.

    1. replace an editable leaf by a random subtree; 2. change a node into another of the same
    arity; 3. insert a node above an editable subtree; 4. delete an editable node, keeping one
    of its children.
    """
    kinds = [_mutate_leaf, _mutate_point, _mutate_insert, _mutate_delete]
    for _ in range(4):
        kind = kinds[int(rng.integers(len(kinds)))]
        child = kind(expr, g, rng)
        if child is not None:
            child = simplify_tree(child)
            if child.tokens != expr.tokens and g.fits(child):
                return child
    return None


def _mutate_leaf(expr: Expr, g: Grammar, rng: np.random.Generator) -> Expr | None:
    leaves = _editable(expr, leaves_only=True)
    if not leaves:
        return None
    i = _pick(rng, leaves)
    sub = random_term(g, rng, int(rng.integers(1, 3))) if expr.tokens[i] == CONST_TOKEN else random_tree(
        g, rng, int(rng.integers(1, 4))
    )
    return expr.replace(i, sub)


def _mutate_point(expr: Expr, g: Grammar, rng: np.random.Generator) -> Expr | None:
    nodes = _editable(expr)
    if not nodes:
        return None
    i = _pick(rng, nodes)
    t = expr.tokens[i]
    a = arity(t)
    if a == 0:
        choices = [CONST_TOKEN] + [f"x{v}" for v in g.free_vars]
    else:
        choices = list(g.unary if a == 1 else g.binary)
    choices = [c for c in choices if c != t]
    if not choices:
        return None
    new = choices[int(rng.integers(len(choices)))]
    return Expr(expr.tokens[:i] + (new,) + expr.tokens[i + 1 :], expr.frozen)


def _mutate_insert(expr: Expr, g: Grammar, rng: np.random.Generator) -> Expr | None:
    nodes = _editable(expr)
    if not nodes or not g.operators:
        return None
    i = _pick(rng, nodes)
    sub = expr.subtree(i)
    op = g.operators[int(rng.integers(len(g.operators)))]
    if OPERATORS[op].arity == 1:
        new = Expr((op,) + sub.tokens, (False,) + sub.frozen)
    else:
        other = random_term(g, rng, int(rng.integers(1, 3))) if op in ("add", "sub") else random_tree(g, rng, 2)
        if rng.random() < 0.5 or op in ("add", "sub"):
            new = Expr((op,) + sub.tokens + other.tokens, (False,) + sub.frozen + other.frozen)
        else:
            new = Expr((op,) + other.tokens + sub.tokens, (False,) + other.frozen + sub.frozen)
    return expr.replace(i, new)


def _mutate_delete(expr: Expr, g: Grammar, rng: np.random.Generator) -> Expr | None:
    ops = _editable(expr, ops_only=True)
    if not ops:
        return None
    i = _pick(rng, ops)
    children = []
    j = i + 1
    for _ in range(arity(expr.tokens[i])):
        children.append(j)
        j = subtree_end(expr.tokens, j)
    keep = _pick(rng, children)
    return expr.replace(i, expr.subtree(keep))


def crossover(a: Expr, b: Expr, g: Grammar, rng: np.random.Generator) -> tuple[Expr, Expr] | None:
    """Swap a random editable subtree of ``a`` with one of ``b``; None if either has none.

    Callers pair only expressions with the same controlled variables, so both subtrees use
    variables that are free for both.
    """
    na, nb = _editable(a), _editable(b)
    if not na or not nb:
        return None
    i, j = _pick(rng, na), _pick(rng, nb)
    sa, sb = a.subtree(i), b.subtree(j)
    ca, cb = simplify_tree(a.replace(i, sb)), simplify_tree(b.replace(j, sa))
    if not (g.fits(ca) and g.fits(cb)):
        return None
    return ca, cb


def tournament(fitness: Sequence[float], size: int, rng: np.random.Generator, among: Sequence[int] | None = None) -> int:
    """Index of the fittest (lowest) of ``size`` random picks, optionally among some indices."""
    pool = list(among) if among is not None else list(range(len(fitness)))
    picks = rng.integers(len(pool), size=size)
    best = min((pool[int(p)] for p in picks), key=lambda i: fitness[i])
    return best
