"""Vectorised evaluation of an expression tree, with forward-mode derivatives w.r.t. constants.

A tree is compiled once (cached by its tokens) into nested tuples, then evaluated on whole
arrays: variables are the columns of ``X`` (shape ``(..., n_vars)``, e.g. ``(K, m, n)`` for K
trials at once) and constant ``k`` is ``consts[..., k]`` broadcast against them (e.g. shape
``(K, L)``: one vector of constants per trial). Floating-point errors are silenced here: a
non-finite output is judged by the fitness, never replaced by a made-up value.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import lru_cache
from typing import Union

import numpy as np

from rcvgp.operators import OPERATORS, Operator
from rcvgp.tree import CONST_TOKEN, var_index

__all__ = ["compile_tree", "evaluate", "evaluate_with_grad"]

_ONE = np.float64(1.0)  # d c / d c, broadcast wherever it is used

# ("x", i) | ("c", k) | (Operator, child, ...)
Node = tuple[Union[str, Operator, "Node", int], ...]


@lru_cache(maxsize=65536)
def compile_tree(tokens: tuple[str, ...]) -> Node:
    """Nested-tuple form of a prefix token tuple; constants numbered left to right."""
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
    node = compile_tree(tuple(tokens))
    C = _const_columns(consts, X)
    with np.errstate(all="ignore"):
        out = _value(node, X, C)
    return np.broadcast_to(out, _shape(X)).astype(float, copy=False)


def _const_columns(consts: np.ndarray | None, X: np.ndarray) -> list[np.ndarray]:
    if consts is None:
        return []
    c = np.asarray(consts, dtype=float)
    if c.ndim == 1:
        return [np.float64(v) for v in c]  # type: ignore[misc]
    return [c[..., k, None] for k in range(c.shape[-1])]


def _value(node: Node, X: np.ndarray, C: Sequence[np.ndarray]) -> np.ndarray:
    head = node[0]
    if head == "x":
        return X[..., node[1]]  # type: ignore[index]
    if head == "c":
        return C[node[1]]  # type: ignore[index]
    op: Operator = head  # type: ignore[assignment]
    if op.arity == 2:
        return op.fn(_value(node[1], X, C), _value(node[2], X, C))  # type: ignore[arg-type]
    return op.fn(_value(node[1], X, C))  # type: ignore[arg-type]


def evaluate_with_grad(
    tokens: tuple[str, ...], X: np.ndarray, consts: np.ndarray, wrt: Sequence[int]
) -> tuple[np.ndarray, list[np.ndarray]]:
    """Evaluate a tree and its derivatives w.r.t. the constants ``wrt`` (forward mode).

    Returns
    -------
    y : ndarray of shape X.shape[:-1]
    grads : list of ndarray, one per entry of ``wrt``, each of shape X.shape[:-1]
    """
    node = compile_tree(tuple(tokens))
    C = _const_columns(consts, X)
    want = frozenset(int(k) for k in wrt)
    with np.errstate(all="ignore"):
        value, grad = _value_grad(node, X, C, want)
    shape = _shape(X)
    zero = np.zeros(shape)
    grads = [np.broadcast_to(grad[k], shape) if k in grad else zero for k in wrt]
    return np.broadcast_to(value, shape), grads


def _value_grad(
    node: Node, X: np.ndarray, C: Sequence[np.ndarray], want: frozenset[int]
) -> tuple[np.ndarray, dict[int, np.ndarray]]:
    head = node[0]
    if head == "x":
        return X[..., node[1]], {}  # type: ignore[index]
    if head == "c":
        k: int = node[1]  # type: ignore[assignment]
        return C[k], ({k: _ONE} if k in want else {})
    op: Operator = head  # type: ignore[assignment]
    if op.arity == 2:
        a, ga = _value_grad(node[1], X, C, want)  # type: ignore[arg-type]
        b, gb = _value_grad(node[2], X, C, want)  # type: ignore[arg-type]
        value = op.fn(a, b)
        if not ga and not gb:
            return value, {}
        name = op.name
        # The hot cases without the generic rule's multiplications by ones.
        if name == "add":
            grad = dict(ga)
            for k, g in gb.items():
                grad[k] = grad[k] + g if k in grad else g
            return value, grad
        if name == "sub":
            grad = dict(ga)
            for k, g in gb.items():
                grad[k] = grad[k] - g if k in grad else -g
            return value, grad
        if name == "mul":
            grad = {k: b * g for k, g in ga.items()}
            for k, g in gb.items():
                grad[k] = grad[k] + a * g if k in grad else a * g
            return value, grad
        da, db = op.grad(a, b)
        grad = {k: da * g for k, g in ga.items()}
        for k, g in gb.items():
            grad[k] = grad[k] + db * g if k in grad else db * g
        return value, grad
    a, ga = _value_grad(node[1], X, C, want)  # type: ignore[arg-type]
    value = op.fn(a)
    if not ga:
        return value, {}
    if op.name == "neg":
        return value, {k: -g for k, g in ga.items()}
    (da,) = op.grad(a)
    return value, {k: da * g for k, g in ga.items()}
