"""The operator table: name, arity, numpy function, its derivative, and the sympy counterpart.

Evaluation is plain mathematics, never "protected" by substituting values (a protected log|a|
would make the search fit a different function than the one it prints). Instead the fitness of
a prediction that is NaN or infinite anywhere is +inf, so a domain error can never look good;
numpy warnings about it are silenced where the evaluator runs.

Names are those of the benchmark catalog: add sub mul div inv neg n2 n3 n4 n5 sin cos exp log
sqrt tanh, plus ``const`` for an open constant in operator sets.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import numpy as np
import sympy

from rcvgp.errors import ExpressionError

__all__ = ["Operator", "OPERATORS", "CONST", "DEFAULT_OPERATORS", "resolve_operators"]

#: Name of the open-constant leaf in operator sets (not an operator).
CONST = "const"

Array = np.ndarray


@dataclass(frozen=True)
class Operator:
    """One operator: ``fn`` evaluates it on arrays, ``grad`` gives d fn / d each argument."""

    name: str
    arity: int
    fn: Callable[..., Array]
    grad: Callable[..., tuple[Array, ...]]
    sympy_fn: Callable[..., Any]
    symbol: str  # how the plain-text printer writes it (infix for binary ops)


def _unary(name: str, fn: Callable[[Array], Array], grad: Callable[[Array], Array], sym: Any) -> Operator:
    return Operator(name, 1, fn, lambda a: (grad(a),), sym, name)


OPERATORS: dict[str, Operator] = {
    op.name: op
    for op in (
        Operator("add", 2, np.add, lambda a, b: (np.ones_like(a), np.ones_like(b)), lambda a, b: a + b, "+"),
        Operator("sub", 2, np.subtract, lambda a, b: (np.ones_like(a), -np.ones_like(b)), lambda a, b: a - b, "-"),
        Operator("mul", 2, np.multiply, lambda a, b: (b, a), lambda a, b: a * b, "*"),
        Operator("div", 2, np.divide, lambda a, b: (1.0 / b, -a / (b * b)), lambda a, b: a / b, "/"),
        _unary("inv", lambda a: 1.0 / a, lambda a: -1.0 / (a * a), lambda a: 1 / a),
        _unary("neg", np.negative, lambda a: -np.ones_like(a), lambda a: -a),
        _unary("n2", np.square, lambda a: 2.0 * a, lambda a: a**2),
        _unary("n3", lambda a: a * a * a, lambda a: 3.0 * a * a, lambda a: a**3),
        _unary("n4", lambda a: np.square(np.square(a)), lambda a: 4.0 * a * a * a, lambda a: a**4),
        _unary("n5", lambda a: a * np.square(np.square(a)), lambda a: 5.0 * np.square(np.square(a)), lambda a: a**5),
        _unary("sin", np.sin, np.cos, sympy.sin),
        _unary("cos", np.cos, lambda a: -np.sin(a), sympy.cos),
        _unary("exp", np.exp, np.exp, sympy.exp),
        _unary("log", np.log, lambda a: 1.0 / a, sympy.log),
        _unary("sqrt", np.sqrt, lambda a: 0.5 / np.sqrt(a), sympy.sqrt),
        _unary("tanh", np.tanh, lambda a: 1.0 - np.square(np.tanh(a)), sympy.tanh),
    )
}

#: Used when neither the user nor the oracle names an operator set.
DEFAULT_OPERATORS: tuple[str, ...] = ("add", "sub", "mul", "div", "sin", "cos", "exp", "log", "sqrt", "n2")


def resolve_operators(names: Iterable[str]) -> tuple[str, ...]:
    """Validate an operator set; ``const`` is accepted and dropped (constants are always allowed).

    Raises
    ------
    ExpressionError
        For an unknown name (with the closest known names) or an empty set.
    """
    import difflib

    out: list[str] = []
    for raw in names:
        name = str(raw).strip()
        if name == CONST:
            continue
        if name not in OPERATORS:
            close = difflib.get_close_matches(name, list(OPERATORS), n=3)
            hint = f"; did you mean {', '.join(close)}?" if close else ""
            raise ExpressionError(
                f"unknown operator {name!r}{hint} (known: {', '.join(OPERATORS)}, const)"
            )
        if name not in out:
            out.append(name)
    if not out:
        raise ExpressionError("the operator set is empty: give at least one operator, e.g. add, mul")
    return tuple(out)
