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

__all__ = ["Grammar", "random_tree", "random_term", "mutate", "crossover", "tournament", "fold_constants"]


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


def fold_constants(expr: Expr) -> Expr:
    """Replace every editable subtree without variables (e.g. ``sin(c) * c``) by one constant."""
    tokens, frozen = list(expr.tokens), list(expr.frozen)
    i = 0
    out_t: list[str] = []
    out_f: list[bool] = []
    while i < len(tokens):
        end = subtree_end(tokens, i)
        if (
            end - i > 1
            and not any(frozen[i:end])
            and not any(is_var(t) for t in tokens[i:end])
        ):
            out_t.append(CONST_TOKEN)
            out_f.append(False)
            i = end
        else:
            out_t.append(tokens[i])
            out_f.append(frozen[i])
            i += 1
    if len(out_t) == len(tokens):
        return expr
    return Expr(tuple(out_t), tuple(out_f))


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
            child = fold_constants(child)
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
    ca, cb = a.replace(i, sb), b.replace(j, sa)
    if not (g.fits(ca) and g.fits(cb)):
        return None
    return ca, cb


def tournament(fitness: Sequence[float], size: int, rng: np.random.Generator, among: Sequence[int] | None = None) -> int:
    """Index of the fittest (lowest) of ``size`` random picks, optionally among some indices."""
    pool = list(among) if among is not None else list(range(len(fitness)))
    picks = rng.integers(len(pool), size=size)
    best = min((pool[int(p)] for p in picks), key=lambda i: fitness[i])
    return best
