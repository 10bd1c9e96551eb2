"""Expression trees in prefix form: build, measure, parse and print, and convert to/from sympy.

An :class:`Expr` is a tuple of tokens in prefix order — operator names from
:mod:`rcvgp.operators`, variables ``x0``, ``x1``, ..., open constants ``c`` and literal numbers
such as ``-2.86`` — with one ``frozen`` flag per node. Frozen nodes are not edited by the GP
operators; the search keeps the invariant that every descendant of an editable node is
editable, so editable parts are whole subtrees. The values of open constants live outside the
tree (one vector per control-variable trial) and are fitted to data; a literal is a constant
FreezeEquation has fixed (see :func:`literal`), and no fit changes it.
"""

from __future__ import annotations

import math
import re
from tokenize import TokenError
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property

import sympy

from rcvgp.errors import ExpressionError
from rcvgp.operators import OPERATORS

__all__ = [
    "CONST_TOKEN", "Expr", "arity", "is_var", "var_index", "literal", "is_literal", "reopened", "subtree_end",
    "to_text", "to_sympy", "from_sympy", "parse",
]

CONST_TOKEN = "c"
_VAR = re.compile(r"x(\d+)\Z")


def is_var(token: str) -> bool:
    return token[0] == "x" and token[1:].isdigit()


def var_index(token: str) -> int:
    return int(token[1:])


def literal(value: float) -> str:
    """The token of a constant fixed at ``value`` (finite); ``repr`` round-trips the float exactly."""
    return repr(float(value))


def is_literal(token: str) -> bool:
    return token[0] in "0123456789.-"


def reopened(tokens: Sequence[str], constants: Sequence[float]) -> tuple[tuple[str, ...], list[float]]:
    """The tree with every literal made an open constant again, and the values of all its
    constants in order: ``constants`` for the open ones, the literals' own values for the rest."""
    given = iter(constants)
    out: list[str] = []
    values: list[float] = []
    for t in tokens:
        if t == CONST_TOKEN:
            out.append(t)
            values.append(float(next(given)))
        elif is_literal(t):
            out.append(CONST_TOKEN)
            values.append(float(t))
        else:
            out.append(t)
    return tuple(out), values


def arity(token: str) -> int:
    op = OPERATORS.get(token)
    return op.arity if op is not None else 0


def subtree_end(tokens: Sequence[str], start: int) -> int:
    """Index one past the end of the subtree that starts at ``start``."""
    need = 1
    i = start
    while need:
        need += arity(tokens[i]) - 1
        i += 1
    return i


@dataclass(frozen=True)
class Expr:
    """An expression tree in prefix order with per-node frozen flags."""

    tokens: tuple[str, ...]
    frozen: tuple[bool, ...] = ()

    def __post_init__(self) -> None:
        # Built in the hot loop of the search, so no validation here: see from_tokens.
        if not self.frozen:
            object.__setattr__(self, "frozen", (False,) * len(self.tokens))

    @classmethod
    def from_tokens(cls, tokens: Sequence[str], frozen: Sequence[bool] = ()) -> Expr:
        """Build a tree from user-given tokens, checking every token and the prefix structure."""
        tokens = tuple(str(t) for t in tokens)
        if not tokens:
            raise ExpressionError("an expression needs at least one node")
        for t in tokens:
            if t != CONST_TOKEN and t not in OPERATORS and not _VAR.match(t) and not _finite_literal(t):
                raise ExpressionError(f"unknown token {t!r} in expression")
        if not _well_formed(tokens):
            raise ExpressionError(f"malformed prefix expression {' '.join(tokens)!r}")
        if frozen and len(frozen) != len(tokens):
            raise ExpressionError("frozen flags must match the tokens one to one")
        return cls(tokens, tuple(bool(f) for f in frozen))

    def __len__(self) -> int:
        return len(self.tokens)

    @cached_property
    def n_consts(self) -> int:
        return sum(t == CONST_TOKEN for t in self.tokens)

    @cached_property
    def const_positions(self) -> tuple[int, ...]:
        """Token index of each constant, in the order constant vectors use."""
        return tuple(i for i, t in enumerate(self.tokens) if t == CONST_TOKEN)

    @cached_property
    def variables(self) -> frozenset[int]:
        return frozenset(var_index(t) for t in self.tokens if is_var(t))

    @cached_property
    def depth(self) -> int:
        deepest = 0
        pending = [1]  # the depth of each child slot still to be filled
        for t in self.tokens:
            d = pending.pop()
            deepest = max(deepest, d)
            pending.extend([d + 1] * arity(t))
        return deepest

    def fixed(self, values: Sequence[float], open_: Sequence[bool] | None = None) -> Expr:
        """This tree frozen whole, each constant fixed as a literal at its value in ``values``,
        except those marked in ``open_``: they stay open, editable constants."""
        tokens = list(self.tokens)
        frozen = [True] * len(tokens)
        for k, pos in enumerate(self.const_positions):
            if open_ is not None and open_[k]:
                frozen[pos] = False
            else:
                tokens[pos] = literal(values[k])
        return Expr(tuple(tokens), tuple(frozen))

    def with_frozen(self, frozen: Sequence[bool]) -> Expr:
        return Expr(self.tokens, tuple(bool(f) for f in frozen))

    def replace(self, start: int, sub: Expr) -> Expr:
        """This tree with the subtree at ``start`` replaced by ``sub`` (flags included)."""
        end = subtree_end(self.tokens, start)
        return Expr(
            self.tokens[:start] + sub.tokens + self.tokens[end:],
            self.frozen[:start] + sub.frozen + self.frozen[end:],
        )

    def subtree(self, start: int) -> Expr:
        end = subtree_end(self.tokens, start)
        return Expr(self.tokens[start:end], self.frozen[start:end])

    def __str__(self) -> str:
        return to_text(self.tokens)

    def to_sympy(
        self, constants: Sequence[float] | None = None, names: Sequence[str | sympy.Symbol] | None = None
    ) -> sympy.Expr:
        """The sympy form; constants as Floats if given, else symbols c0, c1, ..."""
        return to_sympy(self.tokens, constants, names)


def _finite_literal(token: str) -> bool:
    try:
        return is_literal(token) and math.isfinite(float(token))
    except ValueError:
        return False


def _well_formed(tokens: Sequence[str]) -> bool:
    need = 1
    for t in tokens:
        if need == 0:
            return False
        need += arity(t) - 1
    return need == 0


def to_text(tokens: Sequence[str]) -> str:
    """Plain infix text (unsimplified), e.g. ``(c*sin(x0) + x1)``."""
    out, _ = _text(tokens, 0)
    return out


def _text(tokens: Sequence[str], i: int) -> tuple[str, int]:
    t = tokens[i]
    op = OPERATORS.get(t)
    if op is None:
        return (f"({t})" if t[0] == "-" else t), i + 1
    if op.arity == 2:
        a, j = _text(tokens, i + 1)
        b, k = _text(tokens, j)
        return f"({a} {op.symbol} {b})", k
    a, j = _text(tokens, i + 1)
    return f"{t}({a})", j


def to_sympy(
    tokens: Sequence[str],
    constants: Sequence[float] | None = None,
    names: Sequence[str | sympy.Symbol] | None = None,
) -> sympy.Expr:
    """The sympy form of a prefix tree; ``names`` may be plain names (real symbols) or
    symbols with their own assumptions."""
    symbols: dict[int, sympy.Symbol] = {}
    counter = iter(range(len(tokens)))
    values = None if constants is None else [float(c) for c in constants]

    def build(i: int) -> tuple[sympy.Expr, int]:
        t = tokens[i]
        op = OPERATORS.get(t)
        if op is not None:
            args = []
            j = i + 1
            for _ in range(op.arity):
                a, j = build(j)
                args.append(a)
            return op.sympy_fn(*args), j
        if t == CONST_TOKEN:
            k = next(counter)
            if values is not None:
                return sympy.Float(values[k]), i + 1
            return sympy.Symbol(f"c{k}"), i + 1
        if is_literal(t):
            return sympy.Float(float(t)), i + 1
        k = var_index(t)
        if k not in symbols:
            given = names[k] if names is not None else t
            symbols[k] = given if isinstance(given, sympy.Symbol) else sympy.Symbol(given, real=True)
        return symbols[k], i + 1

    expr, _ = build(0)
    return expr


# --- from sympy ------------------------------------------------------------------------------

def from_sympy(expr: sympy.Expr, names: Sequence[str] | None = None) -> tuple[Expr, list[float]]:
    """Convert a sympy expression into a tree of the operator table and its constant values.

    Numbers become open constants (their values returned in order); integer powers 2..5 become
    n2..n5, -1 becomes inv, 1/2 sqrt; other powers raise :class:`ExpressionError`.
    """
    name_to_index = {n: i for i, n in enumerate(names)} if names is not None else None
    tokens: list[str] = []
    values: list[float] = []

    def emit_const(v: float) -> None:
        tokens.append(CONST_TOKEN)
        values.append(float(v))

    def chain(op: str, args: Sequence[sympy.Expr]) -> None:
        for _ in range(len(args) - 1):
            tokens.append(op)
        for a in args:
            walk(a)

    def walk(e: sympy.Expr) -> None:
        if e.is_Number or e in (sympy.pi, sympy.E):
            emit_const(float(e))
        elif e.is_Symbol:
            name = str(e)
            if name_to_index is not None:
                if name not in name_to_index:
                    raise ExpressionError(f"unknown variable {name!r}")
                tokens.append(f"x{name_to_index[name]}")
            elif _VAR.match(name):
                tokens.append(name)
            else:
                raise ExpressionError(f"unknown variable {name!r}; variables are x0, x1, ...")
        elif e.is_Add:
            chain("add", e.args)
        elif e.is_Mul:
            coeff, rest = e.as_coeff_Mul()
            if coeff == -1:
                tokens.append("neg")
                walk(rest)
            else:
                chain("mul", e.args)
        elif e.is_Pow:
            base, ex = e.args
            table = {2: "n2", 3: "n3", 4: "n4", 5: "n5", -1: "inv", sympy.Rational(1, 2): "sqrt"}
            if ex in table:
                tokens.append(table[ex])
                walk(base)
            elif ex.is_Integer and -5 <= int(ex) <= -2:
                tokens.extend(["inv", f"n{-int(ex)}"])
                walk(base)
            elif ex == sympy.Rational(-1, 2):
                tokens.extend(["inv", "sqrt"])
                walk(base)
            elif ex == sympy.Rational(3, 2):
                tokens.extend(["mul", "sqrt"])
                walk(base)
                walk(base)
            else:
                raise ExpressionError(f"power {ex} is not in the operator table (only 2..5, -1, 1/2)")
        else:
            name = type(e).__name__.lower()
            if name in OPERATORS and OPERATORS[name].arity == len(e.args):
                tokens.append(name)
                for a in e.args:
                    walk(a)
            else:
                raise ExpressionError(f"function {type(e).__name__} is not in the operator table")

    walk(expr)
    return Expr(tuple(tokens)), values


def parse(text: str, names: Sequence[str] | None = None) -> tuple[Expr, list[float]]:
    """Parse infix text (sympy syntax over x0.. or ``names``) into a tree and constant values."""
    allowed: dict[str, object] = {fn: getattr(sympy, fn) for fn in ("sin", "cos", "exp", "log", "sqrt", "tanh")}
    allowed.update(pi=sympy.pi, E=sympy.E)
    for n in names or []:
        allowed[n] = sympy.Symbol(n, real=True)
    for m in re.findall(r"\bx\d+\b", text):
        allowed.setdefault(m, sympy.Symbol(m, real=True))
    try:
        expr = sympy.sympify(text, locals=allowed, rational=False)
    except (sympy.SympifyError, SyntaxError, TypeError, TokenError) as exc:
        raise ExpressionError(f"cannot parse expression: {exc}") from exc
    unknown = {str(s) for s in expr.free_symbols} - set(allowed)
    if unknown:
        raise ExpressionError(f"unknown name(s) {', '.join(sorted(unknown))} in expression")
    return from_sympy(expr, names)
