"""Vectorised evaluation of an expression tree, with forward-mode derivatives w.r.t. constants.

A tree is compiled once (cached by its tokens) into nested tuples, then evaluated on whole
arrays: variables are the columns of ``X`` (shape ``(..., n_vars)``, e.g. ``(K, m, n)`` for K
trials at once) and constant ``k`` is ``consts[..., k]`` broadcast against them (e.g. shape
``(K, L)``: one vector of constants per trial). Floating-point errors are silenced here: a
non-finite output is judged by the fitness, never replaced by a made-up value.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from functools import lru_cache
from typing import Union

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
    """Evaluate a tree and its derivatives w.r.t. the constants ``wrt`` (forward mode).

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


@lru_cache(maxsize=32768)
def _program(tokens: tuple[str, ...], wrt: tuple[int, ...]) -> Program:
    """Straight-line numpy code for a tree and its derivatives w.r.t. ``wrt``, compiled once.

    Generated code, not a tree walk: the search evaluates the same few thousand trees many
    times, and the interpreter overhead of walking them was a third of its run time. The code
    is built only from the operator table's names and integer indices, never from user text.
    """
    node = compile_tree(tokens)
    want = set(wrt)
    lines: list[str] = []
    names: dict[str, object] = {}
    counter = iter(range(10**9))

    def emit(n: Node) -> tuple[str, dict[int, str]]:
        head = n[0]
        if head == "x":
            v = f"v{next(counter)}"
            lines.append(f"{v} = X[..., {n[1]}]")
            return v, {}
        if head == "c":
            k = n[1]
            return f"C[{k}]", ({k: "1"} if k in want else {})  # type: ignore[dict-item]
        if head == "k":
            return f"({float(n[1])!r})", {}  # type: ignore[arg-type]
        op: Operator = head  # type: ignore[assignment]
        fn = f"F_{op.name}"
        names[fn] = op.fn
        names[f"G_{op.name}"] = op.grad
        i = next(counter)
        v = f"v{i}"
        if op.arity == 1:
            a, ga = emit(n[1])  # type: ignore[arg-type]
            lines.append(f"{v} = -{a}" if op.name == "neg" else f"{v} = {fn}({a})")
            if not ga:
                return v, {}
            if op.name == "neg":
                return v, {k: _assign(lines, f"g{i}_{k}", f"-({g})") for k, g in ga.items()}
            lines.append(f"d{i} = G_{op.name}({a})[0]")
            return v, {k: _assign(lines, f"g{i}_{k}", _times(f"d{i}", g)) for k, g in ga.items()}
        a, ga = emit(n[1])  # type: ignore[arg-type]
        b, gb = emit(n[2])  # type: ignore[arg-type]
        symbol = {"add": "+", "sub": "-", "mul": "*", "div": "/"}.get(op.name)
        lines.append(f"{v} = {a} {symbol} {b}" if symbol else f"{v} = {fn}({a}, {b})")
        if not ga and not gb:
            return v, {}
        grads: dict[int, str] = {}
        if op.name in ("add", "sub"):
            for k in sorted(set(ga) | set(gb)):
                left = ga.get(k)
                right = gb.get(k)
                if right is None:
                    expr = str(left)
                elif op.name == "add":
                    expr = right if left is None else f"{left} + {right}"
                else:
                    expr = f"-({right})" if left is None else f"{left} - ({right})"
                grads[k] = _assign(lines, f"g{i}_{k}", expr)
            return v, grads
        if op.name == "mul":
            da, db = b, a
        else:
            lines.append(f"da{i}, db{i} = G_{op.name}({a}, {b})")
            da, db = f"da{i}", f"db{i}"
        for k in sorted(set(ga) | set(gb)):
            parts = []
            if k in ga:
                parts.append(_times(da, ga[k]))
            if k in gb:
                parts.append(_times(db, gb[k]))
            grads[k] = _assign(lines, f"g{i}_{k}", " + ".join(parts))
        return v, grads

    root, root_grads = emit(node)
    outs = ", ".join(root_grads.get(k, "None") for k in wrt)
    body = "\n    ".join(lines) if lines else "pass"
    source = f"def program(X, C):\n    {body}\n    return {root}, ({outs}{',' if wrt else ''})\n"
    scope: dict[str, object] = dict(names)
    exec(compile(source, "<rcvgp tree>", "exec"), scope)  # noqa: S102 - generated from the operator table only
    return scope["program"]  # type: ignore[return-value]


def _times(a: str, b: str) -> str:
    if b == "1":
        return a
    if a == "1":
        return b
    return f"{a} * {b}"


def _assign(lines: list[str], name: str, expr: str) -> str:
    if expr == "1":
        return "1"
    lines.append(f"{name} = {expr}")
    return name
