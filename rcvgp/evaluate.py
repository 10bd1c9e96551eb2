"""Vectorised evaluation of an expression tree, with derivatives w.r.t. constants.

A tree is compiled once (cached by its tokens) into nested tuples, then evaluated on whole
arrays: variables are the columns of ``X`` (shape ``(..., n_vars)``, e.g. ``(K, m, n)`` for K
trials at once) and constant ``k`` is ``consts[..., k]`` broadcast against them (e.g. shape
``(K, L)``: one vector of constants per trial). Floating-point errors are silenced here: a
non-finite output is judged by the fitness, never replaced by a made-up value.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from functools import lru_cache
from typing import NamedTuple, Union

import numpy as np

from rcvgp.operators import OPERATORS, Operator
from rcvgp.tree import CONST_TOKEN, is_literal, var_index

__all__ = ["compile_tree", "evaluate", "evaluate_with_grad"]

# ("x", i) | ("c", k) | ("k", value) | (Operator, child, ...)
Node = tuple[Union[str, Operator, "Node", int], ...]


@lru_cache(maxsize=65536)
def compile_tree(tokens: tuple[str, ...]) -> Node:
    """Nested-tuple form of a prefix token tuple; open constants numbered left to right."""
    counter = iter(range(len(tokens)))

    def build(i: int) -> tuple[Node, int]:
        t = tokens[i]
        op = OPERATORS.get(t)
        if op is not None:
            children = []
            j = i + 1
            for _ in range(op.arity):
                child, j = build(j)
                children.append(child)
            return (op, *children), j
        if t == CONST_TOKEN:
            return ("c", next(counter)), i + 1
        if is_literal(t):
            return ("k", float(t)), i + 1
        return ("x", var_index(t)), i + 1

    node, _ = build(0)
    return node


def _shape(X: np.ndarray) -> tuple[int, ...]:
    return X.shape[:-1]


def evaluate(tokens: tuple[str, ...], X: np.ndarray, consts: np.ndarray | None = None) -> np.ndarray:
    """Evaluate a tree.

    Parameters
    ----------
    tokens : tuple of str
        The tree in prefix order.
    X : ndarray of shape (..., n_vars)
    consts : ndarray of shape (..., n_consts), optional
        Broadcast against ``X[..., 0]`` after appending one axis (so ``(K, L)`` pairs with
        ``X`` of shape ``(K, m, n)``); a 1-D vector applies to every point.

    Returns
    -------
    y : ndarray of shape X.shape[:-1]
    """
    program = _program(tuple(tokens), ())
    with np.errstate(all="ignore"):
        value, _ = program(X, _const_columns(consts, X))
    return np.broadcast_to(value, _shape(X)).astype(float, copy=False)


def _const_columns(consts: np.ndarray | None, X: np.ndarray) -> list[np.ndarray]:
    if consts is None:
        return []
    c = np.asarray(consts, dtype=float)
    if c.ndim == 1:
        return [np.float64(v) for v in c]  # type: ignore[misc]
    return [c[..., k, None] for k in range(c.shape[-1])]


def evaluate_with_grad(
    tokens: tuple[str, ...], X: np.ndarray, consts: np.ndarray, wrt: Sequence[int]
) -> tuple[np.ndarray, list[np.ndarray]]:
    """Evaluate a tree and its derivatives w.r.t. the constants ``wrt``.

    Returns
    -------
    y : ndarray of shape X.shape[:-1]
    grads : list of ndarray, one per entry of ``wrt``, each of shape X.shape[:-1]
    """
    wrt = tuple(int(k) for k in wrt)
    program = _program(tuple(tokens), wrt)
    with np.errstate(all="ignore"):
        value, grads = program(X, _const_columns(consts, X))
    shape = _shape(X)
    return _full(value, shape), [np.zeros(shape) if g is None else _full(g, shape) for g in grads]


def _full(a: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    # Most results already have the full shape; broadcast_to costs more than the check.
    return a if getattr(a, "shape", None) == shape else np.broadcast_to(a, shape)


Program = Callable[[np.ndarray, Sequence[np.ndarray]], tuple[np.ndarray, tuple[np.ndarray | None, ...]]]


class _Node(NamedTuple):
    """A tree node as emitted: the name (or literal) of its value, whether a wanted constant lies
    below it, its operator and children (``op`` None for a leaf), and its constant's index."""

    value: str
    wanted: bool
    op: Operator | None = None
    children: tuple[_Node, ...] = ()
    const: int | None = None


@lru_cache(maxsize=32768)
def _program(tokens: tuple[str, ...], wrt: tuple[int, ...]) -> Program:
    """Straight-line numpy code for a tree and its derivatives w.r.t. ``wrt``, compiled once.

    Generated code, not a tree walk: the search evaluates the same few thousand trees many
    times, and the interpreter overhead of walking them was a third of its run time. The code
    is built only from the operator table's names and integer indices, never from user text.

    Derivatives by reverse mode, point by point: one backward sweep from the root carries the
    adjoint of every node (an array over the points, not summed), and a constant's adjoint is its
    column of the Jacobian: one or two products per node whatever the number of constants.
    Forward mode carried one derivative per constant below each node: on the search's trees
    1.7 times the code (74 lines against 43), and compiling a tree costs about four evaluations.
    """
    want = set(wrt)
    lines: list[str] = []
    names: dict[str, object] = {}
    counter = iter(range(10**9))

    def emit(n: Node) -> _Node:
        head = n[0]
        if head == "x":
            v = f"v{next(counter)}"
            lines.append(f"{v} = X[..., {n[1]}]")
            return _Node(v, False)
        if head == "c":
            return _Node(f"C[{n[1]}]", n[1] in want, const=n[1])  # type: ignore[arg-type]
        if head == "k":
            # A numpy scalar, not a Python float: 1.0 / (2.0 - 2.0) between two Python floats
            # raises ZeroDivisionError, where numpy gives inf under the silenced errstate.
            k = f"K{next(counter)}"
            names[k] = np.float64(n[1])
            return _Node(k, False)
        op: Operator = head  # type: ignore[assignment]
        names[f"F_{op.name}"] = op.fn
        names[f"G_{op.name}"] = op.grad
        kids = tuple(emit(child) for child in n[1:])  # type: ignore[arg-type]
        v = f"v{next(counter)}"
        args = [kid.value for kid in kids]
        symbol = {"add": "+", "sub": "-", "mul": "*", "div": "/"}.get(op.name)
        if op.name == "neg":
            lines.append(f"{v} = -{args[0]}")
        elif symbol:
            lines.append(f"{v} = {args[0]} {symbol} {args[1]}")
        else:
            lines.append(f"{v} = F_{op.name}({', '.join(args)})")
        return _Node(v, any(kid.wanted for kid in kids), op, kids)

    grads: dict[int, str] = {}

    def back(node: _Node, adjoint: str) -> None:
        if not node.wanted:
            return
        if node.op is None:
            grads[node.const] = adjoint  # type: ignore[index]
            return
        name, kids = node.op.name, node.children
        if name in _SIGNS:
            partials = _SIGNS[name]
        elif name == "mul":
            partials = [kids[1].value, kids[0].value]
        else:
            i = next(counter)
            partials = [f"d{i}_{j}" for j in range(len(kids))]
            lines.append(f"{', '.join(partials)}, = G_{name}({', '.join(kid.value for kid in kids)})")
        for kid, partial in zip(kids, partials):
            if kid.wanted:
                back(kid, _assign(lines, f"a{next(counter)}", _times(adjoint, partial)))

    root = emit(compile_tree(tokens))
    back(root, "1")
    outs = ", ".join(grads.get(k, "None") for k in wrt)
    body = "\n    ".join(lines) if lines else "pass"
    source = f"def program(X, C):\n    {body}\n    return {root.value}, ({outs}{',' if wrt else ''})\n"
    scope: dict[str, object] = dict(names)
    exec(compile(source, "<rcvgp tree>", "exec"), scope)  # noqa: S102 - generated from the operator table only
    return scope["program"]  # type: ignore[return-value]


#: The partial derivatives of the operators that only add and negate, w.r.t. each argument.
_SIGNS = {"add": ["1", "1"], "sub": ["1", "-1"], "neg": ["-1"]}

#: A name, a constant's column or +-1: used as is, never assigned.
_ATOM = re.compile(r"[A-Za-z_]\w*|C\[\d+\]|-?1")


def _times(a: str, b: str) -> str:
    if a in ("1", "-1"):
        a, b = b, a
    if b == "1":
        return a
    if b == "-1":
        return "1" if a == "-1" else f"-{a}"
    return f"{a} * {b}"


def _assign(lines: list[str], name: str, expr: str) -> str:
    """``expr`` itself if it is a name or a number, else a new line that assigns it to ``name``."""
    if _ATOM.fullmatch(expr):
        return expr
    lines.append(f"{name} = {expr}")
    return name
