"""The benchmark catalog: every equation of the paper as a frozen :class:`Benchmark`, loaded from
the YAML files of ``oracles/`` (installed as the package ``rcvgp.catalog``), plus the small,
safe expression language those files use.

A catalog entry is validated when the catalog loads, not halfway through a search: its keys, its
variables (``x0..x{n-1}``, ranges, distributions), its operator set (against
:data:`rcvgp.operators.OPERATORS`) and its expression, which is parsed from a Python-syntax string
by walking its syntax tree over a whitelist of names (variables, ``sin cos exp log sqrt tanh``,
``pi``, ``E``) -- nothing in a catalog file is ever evaluated as code. Errors name the file, the
entry and the field. The format is described in ``oracles/README.md``.

The ground truth is data like any other here; keeping it away from a search is the job of
:mod:`rcvgp.simulate` (its oracles never expose it) and of the CLI (``--reveal``). A
:class:`Benchmark`'s repr leaves the expression out so that logging one does not leak it.
"""

from __future__ import annotations

import ast
import difflib
import functools
import math
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

import sympy
import yaml

from rcvgp.errors import ConfigError, ExpressionError
from rcvgp.operators import resolve_operators
from rcvgp.oracle import DISTRIBUTIONS, Variable

__all__ = [
    "Benchmark",
    "CATALOG_PACKAGE",
    "EXPRESSION_FUNCTIONS",
    "parse_expression",
    "check_expression",
    "load_catalog",
    "load_catalog_file",
    "get_benchmark",
    "list_groups",
    "benchmarks_in_group",
    "closest_ids",
]

#: The package the catalog's YAML files are installed in (the repository's ``oracles/``).
CATALOG_PACKAGE = "rcvgp.catalog"

#: Functions an expression may call, and the sympy function each one builds.
EXPRESSION_FUNCTIONS: dict[str, Any] = {
    "sin": sympy.sin,
    "cos": sympy.cos,
    "exp": sympy.exp,
    "log": sympy.log,
    "sqrt": sympy.sqrt,
    "tanh": sympy.tanh,
}
_EXPRESSION_CONSTANTS: dict[str, sympy.Expr] = {"pi": sympy.pi, "E": sympy.E}

_SCHEMA = "rcvgp-catalog/1"
_YAML_LOADER: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # the C loader when built with libyaml
_GROUP_KEYS = {"schema", "group", "family", "title", "order", "paper_table", "count", "note", "equations"}
_GROUP_REQUIRED = ("schema", "group", "count", "equations")
_ENTRY_KEYS = {
    "id", "paper_eq_id", "source", "expression", "paper_expression", "operators", "variables",
    "threshold", "nonfinite_fraction", "notes",
}  # fmt: skip
_ENTRY_REQUIRED = ("id", "paper_eq_id", "expression", "operators", "variables")
_VARIABLE_KEYS = {"name", "dist", "low", "high", "only_positive", "unit"}
_VARIABLE_REQUIRED = ("name", "dist", "low", "high")
_ID_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*/[A-Za-z0-9][A-Za-z0-9._-]*$")


@dataclass(frozen=True)
class Benchmark:
    """One catalog entry: a ground-truth equation with its variables and operator set.

    Parameters
    ----------
    id : str
        ``group-prefix/paper Eq. ID``, e.g. ``feynman/I.8.14`` or ``livermore2/Vars4-1``.
    group : str
        The paper's group, e.g. ``feynman-n4`` or ``sincos-3-2-2``.
    paper_eq_id : str
        The paper's Eq. ID verbatim (``BONUS.1`` in the paper's n=4 table is ``feynman/bonus.1``).
    n_vars : int
        Number of input variables.
    expression : str
        The ground truth as a Python/sympy string over ``x0..x{n-1}`` (full-precision constants).
        Left out of the repr.
    variables : tuple of Variable
        ``x0..x{n-1}`` with their limits, distribution and sign rule.
    operators : tuple of str
        The paper's operator set for this equation, as given (``const`` may appear).
    threshold : float
        The entry's freeze threshold (the data files' ``expr_obj_thres``).
    notes : tuple of str
        Provenance and validation notes (non-finite fractions, rounded constants...). They may
        quote parts of the equation, so they are left out of the repr.
    nonfinite_fraction : float
        Documented fraction of points of the declared ranges where the truth is NaN/inf (0 for
        all but six entries; see ``oracles/README.md``).
    source : str
        The authors' data-file stem the entry comes from.
    paper_expression : str
        The equation as the paper prints it, where it rounds constants ('' otherwise).
    """

    id: str
    group: str
    paper_eq_id: str
    n_vars: int
    expression: str = field(repr=False)
    variables: tuple[Variable, ...]
    operators: tuple[str, ...]
    threshold: float = 0.01
    notes: tuple[str, ...] = field(default=(), repr=False)
    nonfinite_fraction: float = 0.0
    source: str = ""
    paper_expression: str = field(default="", repr=False)

    @property
    def variable_names(self) -> tuple[str, ...]:
        return tuple(v.name for v in self.variables)

    def summary(self) -> dict[str, Any]:
        """A JSON-ready description without the ground truth (what ``oracles list --json`` prints)."""
        return {
            "id": self.id,
            "group": self.group,
            "paper_eq_id": self.paper_eq_id,
            "n_vars": self.n_vars,
            "operators": list(self.operators),
            "threshold": self.threshold,
            "nonfinite_fraction": self.nonfinite_fraction,
            "variables": [v.to_dict() for v in self.variables],
        }


# --------------------------------------------------------------------------------------------
# the expression language


def _node_text(node: ast.AST) -> str:
    col = getattr(node, "col_offset", None)
    return f" at column {col + 1}" if col is not None else ""


def check_expression(text: str, names: Sequence[str]) -> None:
    """Validate an expression string as :func:`parse_expression` does, without building sympy.

    Fast enough to run on the whole catalog at every load.

    Raises
    ------
    ExpressionError
        As :func:`parse_expression`.
    """
    _walk_expression(text, names, build=False)


def parse_expression(text: str, names: Sequence[str]) -> sympy.Expr:
    """Parse an expression string into sympy without evaluating any code.

    The string is Python syntax: numbers, the variables ``names``, ``+ - * / **``, unary minus,
    calls of ``sin cos exp log sqrt tanh`` with one argument, and the constants ``pi`` and ``E``.
    Anything else (attributes, other names, keywords, lambdas...) is refused.

    Parameters
    ----------
    text : str
        The expression, e.g. ``"0.5*x0*(x1**2 + x2**2)"``.
    names : sequence of str
        The variable names it may use.

    Returns
    -------
    sympy.Expr

    Raises
    ------
    ExpressionError
        Naming the offending token and its column. The message never repeats the whole
        expression (it may be a secret ground truth).
    """
    expr = _walk_expression(text, names, build=True)
    expr = sympy.sympify(expr)
    if not isinstance(expr, sympy.Expr) or expr.has(sympy.zoo, sympy.nan, sympy.oo, -sympy.oo):
        raise ExpressionError("the expression is not a finite real formula (e.g. a division by zero)")
    return expr


def _walk_expression(text: str, names: Sequence[str], build: bool) -> Any:
    """Walk the syntax tree over the whitelist; build sympy on the way if ``build``."""
    if not isinstance(text, str) or not text.strip():
        raise ExpressionError("the expression is empty: give a formula such as `x0*sin(x1)`")
    symbols = {str(n): sympy.Symbol(str(n)) for n in names}
    for n in symbols:
        if n in EXPRESSION_FUNCTIONS or n in _EXPRESSION_CONSTANTS or not n.isidentifier():
            raise ExpressionError(f"variable name {n!r} is not a usable identifier or clashes with a built-in name")
    try:
        tree = ast.parse(text.strip(), mode="eval")
    except SyntaxError as exc:
        col = f" at column {exc.offset}" if exc.offset else ""
        raise ExpressionError(f"the expression does not parse: {exc.msg}{col}") from None

    def _full(node: ast.AST) -> Any:
        if isinstance(node, ast.Expression):
            return _full(node.body)
        if isinstance(node, ast.Constant) and type(node.value) in (int, float):
            if isinstance(node.value, int):
                return sympy.Integer(node.value)
            if not math.isfinite(node.value):
                raise ExpressionError(f"non-finite number{_node_text(node)}")
            return sympy.Float(node.value)
        if isinstance(node, ast.Name):
            if node.id in symbols:
                return symbols[node.id]
            if node.id in _EXPRESSION_CONSTANTS:
                return _EXPRESSION_CONSTANTS[node.id]
            known = list(symbols) + list(_EXPRESSION_CONSTANTS) + list(EXPRESSION_FUNCTIONS)
            close = difflib.get_close_matches(node.id, known, n=3)
            hint = f"; did you mean {', '.join(close)}?" if close else ""
            raise ExpressionError(
                f"unknown name {node.id!r}{_node_text(node)}{hint} "
                f"(variables: {', '.join(symbols) or 'none'}; constants: pi, E)"
            )
        if isinstance(node, ast.BinOp):
            left, right = _full(node.left), _full(node.right)
            if isinstance(node.op, ast.Add):
                return left + right
            if isinstance(node.op, ast.Sub):
                return left - right
            if isinstance(node.op, ast.Mult):
                return left * right
            if isinstance(node.op, ast.Div):
                return left / right
            if isinstance(node.op, ast.Pow):
                return left**right
            raise ExpressionError(
                f"operator {type(node.op).__name__}{_node_text(node)} is not allowed (use + - * / **)"
            )
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
            operand = _full(node.operand)
            return -operand if isinstance(node.op, ast.USub) else operand
        if isinstance(node, ast.Call):
            if not isinstance(node.func, ast.Name) or node.func.id not in EXPRESSION_FUNCTIONS:
                name = node.func.id if isinstance(node.func, ast.Name) else type(node.func).__name__
                close = difflib.get_close_matches(name, list(EXPRESSION_FUNCTIONS), n=3)
                hint = f"; did you mean {', '.join(close)}?" if close else ""
                raise ExpressionError(
                    f"unknown function {name!r}{_node_text(node)}{hint} "
                    f"(allowed: {', '.join(EXPRESSION_FUNCTIONS)})"
                )
            if node.keywords or len(node.args) != 1:
                raise ExpressionError(f"{node.func.id}(){_node_text(node)} takes exactly one argument")
            return EXPRESSION_FUNCTIONS[node.func.id](_full(node.args[0]))
        raise ExpressionError(f"{type(node).__name__}{_node_text(node)} is not allowed in an expression")

    def _validate(node: ast.AST) -> None:
        # the checks of _full without building sympy: inner nodes are walked here, leaves (and
        # anything refused) go through _full, which is cheap for them
        if isinstance(node, ast.BinOp):
            if isinstance(node.op, ast.Div) and isinstance(node.right, ast.Constant) and node.right.value == 0:
                raise ExpressionError(f"division by zero{_node_text(node)}")
            _validate(node.left)
            _validate(node.right)
            if not isinstance(node.op, (ast.Add, ast.Sub, ast.Mult, ast.Div, ast.Pow)):
                raise ExpressionError(
                    f"operator {type(node.op).__name__}{_node_text(node)} is not allowed (use + - * / **)"
                )
        elif isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
            _validate(node.operand)
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in EXPRESSION_FUNCTIONS:
            if node.keywords or len(node.args) != 1:
                raise ExpressionError(f"{node.func.id}(){_node_text(node)} takes exactly one argument")
            _validate(node.args[0])
        elif isinstance(node, ast.Expression):
            _validate(node.body)
        else:
            _full(node)

    try:
        if not build:
            _validate(tree)
            return None
        return _full(tree)
    except RecursionError:
        raise ExpressionError("the expression is nested too deeply") from None


# --------------------------------------------------------------------------------------------
# loading


class _Where:
    """Builds error messages that name the file, the entry and the field."""

    def __init__(self, source: str) -> None:
        self.source = source

    def error(self, where: str, message: str) -> ConfigError:
        return ConfigError(f"{self.source}: {where}: {message}" if where else f"{self.source}: {message}")

    def check_keys(self, data: Mapping[str, Any], known: Iterable[str], required: Iterable[str], where: str) -> None:
        known = sorted(known)
        for key in data:
            if key not in known:
                close = difflib.get_close_matches(str(key), known, n=1)
                hint = f"; did you mean `{close[0]}`?" if close else f" (known: {', '.join(known)})"
                raise self.error(f"{where}.{key}" if where else str(key), f"unknown key{hint}")
        for key in required:
            if key not in data:
                raise self.error(f"{where}.{key}" if where else str(key), "required key is missing")


def _as_float(value: Any, what: str, where: _Where) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        hint = ""
        if isinstance(value, str) and re.fullmatch(r"[-+]?\d+[eE][-+]?\d+", value.strip()):
            hint = f" (YAML reads {value} as text: write it with a decimal point, e.g. 1.0e-11)"
        raise where.error(what, f"expected a number, got {value!r}{hint}")
    return float(value)


def _parse_variable(raw: Any, i: int, entry: str, where: _Where) -> Variable:
    field_name = f"{entry}.variables[{i}]"
    if not isinstance(raw, Mapping):
        raise where.error(field_name, f"expected a mapping with name, dist, low, high, got {raw!r}")
    where.check_keys(raw, _VARIABLE_KEYS, _VARIABLE_REQUIRED, field_name)
    name = raw["name"]
    if name != f"x{i}":
        raise where.error(f"{field_name}.name", f"expected 'x{i}' (variables are x0..x(n-1) in order), got {name!r}")
    dist = raw["dist"]
    if dist not in DISTRIBUTIONS:
        close = difflib.get_close_matches(str(dist), DISTRIBUTIONS, n=1)
        hint = f"; did you mean `{close[0]}`?" if close else ""
        raise where.error(f"{field_name}.dist", f"{dist!r} is not one of {', '.join(DISTRIBUTIONS)}{hint}")
    low = _as_float(raw["low"], f"{field_name}.low", where)
    high = _as_float(raw["high"], f"{field_name}.high", where)
    if not (math.isfinite(low) and math.isfinite(high)) or low >= high:
        raise where.error(f"{field_name}.low", f"need finite low < high, got low={low:g}, high={high:g}")
    only_positive = raw.get("only_positive", True)
    if not isinstance(only_positive, bool):
        raise where.error(f"{field_name}.only_positive", f"expected true or false, got {only_positive!r}")
    try:
        return Variable(
            name=str(name), low=low, high=high, dist=str(dist), only_positive=only_positive,
            unit=str(raw.get("unit", "")),
        )  # fmt: skip
    except ConfigError as exc:
        raise where.error(field_name, str(exc)) from None


def _parse_entry(raw: Any, index: int, group: str, where: _Where) -> Benchmark:
    label = f"equations[{index}]"
    if not isinstance(raw, Mapping):
        raise where.error(label, f"expected a mapping, got {type(raw).__name__}")
    if isinstance(raw.get("id"), str):
        label = f"equations[{index}] ({raw['id']})"
    where.check_keys(raw, _ENTRY_KEYS, _ENTRY_REQUIRED, label)
    bench_id = raw["id"]
    if not isinstance(bench_id, str) or not _ID_PATTERN.match(bench_id):
        raise where.error(
            f"{label}.id", f"expected 'prefix/EqID' of letters, digits, '.', '-', '_', got {bench_id!r}"
        )
    variables_raw = raw["variables"]
    if not isinstance(variables_raw, list) or not variables_raw:
        raise where.error(f"{label}.variables", "expected a non-empty list of variables")
    variables = tuple(_parse_variable(v, i, label, where) for i, v in enumerate(variables_raw))
    operators_raw = raw["operators"]
    if not isinstance(operators_raw, list) or not all(isinstance(o, str) for o in operators_raw):
        raise where.error(f"{label}.operators", f"expected a list of operator names, got {operators_raw!r}")
    try:
        resolve_operators(operators_raw)
    except ExpressionError as exc:
        raise where.error(f"{label}.operators", str(exc)) from None
    expression = raw["expression"]
    if not isinstance(expression, str):
        raise where.error(f"{label}.expression", f"expected a string, got {type(expression).__name__}")
    try:
        check_expression(expression, [v.name for v in variables])
    except ExpressionError as exc:
        raise where.error(f"{label}.expression", str(exc)) from None
    for key in ("paper_expression",):
        if key in raw and raw[key] is not None:
            try:
                check_expression(str(raw[key]), [v.name for v in variables])
            except ExpressionError as exc:
                raise where.error(f"{label}.{key}", str(exc)) from None
    threshold = _as_float(raw.get("threshold", 0.01), f"{label}.threshold", where)
    if not (threshold > 0 and math.isfinite(threshold)):
        raise where.error(f"{label}.threshold", f"expected a positive number, got {threshold!r}")
    fraction = _as_float(raw.get("nonfinite_fraction", 0.0), f"{label}.nonfinite_fraction", where)
    if not 0.0 <= fraction <= 1.0:
        raise where.error(f"{label}.nonfinite_fraction", f"expected a fraction in [0, 1], got {fraction!r}")
    notes = raw.get("notes") or []
    if not isinstance(notes, list) or not all(isinstance(n, str) for n in notes):
        raise where.error(f"{label}.notes", "expected a list of strings")
    return Benchmark(
        id=bench_id,
        group=group,
        paper_eq_id=str(raw["paper_eq_id"]),
        n_vars=len(variables),
        expression=expression,
        variables=variables,
        operators=tuple(operators_raw),
        threshold=threshold,
        notes=tuple(notes),
        nonfinite_fraction=fraction,
        source=str(raw.get("source", "")),
        paper_expression=str(raw.get("paper_expression") or ""),
    )


def _parse_group(text: str, source: str) -> tuple[dict[str, Any], tuple[Benchmark, ...]]:
    where = _Where(source)
    try:
        data = yaml.load(text, Loader=_YAML_LOADER)
    except yaml.YAMLError as exc:
        raise where.error("", f"not valid YAML: {exc}") from None
    if not isinstance(data, Mapping):
        raise where.error("", "expected a mapping with schema, group, count, equations")
    where.check_keys(data, _GROUP_KEYS, _GROUP_REQUIRED, "")
    if data["schema"] != _SCHEMA:
        raise where.error("schema", f"expected {_SCHEMA!r}, got {data['schema']!r}")
    group = data["group"]
    if not isinstance(group, str) or not re.match(r"^[a-z0-9][a-z0-9-]*$", group):
        raise where.error("group", f"expected a lower-case name such as 'feynman-n4', got {group!r}")
    equations = data["equations"]
    if not isinstance(equations, list) or not equations:
        raise where.error("equations", "expected a non-empty list")
    benches = tuple(_parse_entry(raw, i, group, where) for i, raw in enumerate(equations))
    count = data["count"]
    if count != len(benches):
        raise where.error("count", f"says {count!r} but the file lists {len(benches)} equations")
    seen: set[str] = set()
    for i, b in enumerate(benches):
        if b.id in seen:
            raise where.error(f"equations[{i}] ({b.id}).id", "duplicate id")
        seen.add(b.id)
    header = {k: v for k, v in data.items() if k != "equations"}
    return header, benches


def load_catalog_file(path: str | Path) -> tuple[Benchmark, ...]:
    """Load and validate one catalog file (one group).

    Raises
    ------
    ConfigError
        Naming the file, the entry and the field of the first problem.
    """
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read the catalog file: {exc.strerror}") from None
    return _parse_group(text, str(path))[1]


@functools.lru_cache(maxsize=1)
def _load_all() -> tuple[dict[str, Benchmark], tuple[str, ...]]:
    root = resources.files(CATALOG_PACKAGE)
    files = sorted((f for f in root.iterdir() if f.name.endswith(".yaml")), key=lambda f: f.name)
    if not files:
        raise ConfigError(f"no catalog files (*.yaml) found in the package {CATALOG_PACKAGE}")
    groups: list[tuple[int, str, tuple[Benchmark, ...]]] = []
    for f in files:
        source = f"oracles/{f.name}"
        header, benches = _parse_group(f.read_text(encoding="utf-8"), source)
        if f.name != f"{header['group']}.yaml":
            raise ConfigError(f"{source}: group: {header['group']!r} does not match the file name")
        order = header.get("order", 1_000)
        groups.append((int(order) if isinstance(order, int) else 1_000, header["group"], benches))
    groups.sort(key=lambda g: (g[0], g[1]))
    catalog: dict[str, Benchmark] = {}
    for _, group, benches in groups:
        for b in benches:
            if b.id in catalog:
                raise ConfigError(
                    f"oracles/{group}.yaml: {b.id}: id already used in oracles/{catalog[b.id].group}.yaml"
                )
            catalog[b.id] = b
    return catalog, tuple(g[1] for g in groups)


def load_catalog() -> dict[str, Benchmark]:
    """Every catalog entry by id, in the paper's order (loaded once, then cached).

    Returns
    -------
    dict of str to Benchmark
        A fresh dict each call; the entries themselves are immutable.
    """
    return dict(_load_all()[0])


def list_groups() -> tuple[str, ...]:
    """The catalog's groups in the paper's order, e.g. ``('sincos-3-2-2', ..., 'feynman-n5')``."""
    return _load_all()[1]


def benchmarks_in_group(group: str) -> tuple[Benchmark, ...]:
    """The entries of one group in the paper's order.

    Raises
    ------
    ConfigError
        For an unknown group, with the closest group names.
    """
    catalog, groups = _load_all()
    if group not in groups:
        close = difflib.get_close_matches(group, groups, n=3, cutoff=0.0)
        raise ConfigError(f"unknown group {group!r}; closest: {', '.join(close)} (all: {', '.join(groups)})")
    return tuple(b for b in catalog.values() if b.group == group)


def closest_ids(text: str, n: int = 3) -> list[str]:
    """The ``n`` catalog ids closest to ``text`` (case-insensitive; an Eq. ID alone matches too)."""
    ids = list(_load_all()[0])
    lowered = {i.lower(): i for i in ids}
    query = text.strip().lower()
    exact_tail = [i for i in ids if i.lower().split("/", 1)[1] == query.split("/")[-1]]
    ranked = difflib.get_close_matches(query, list(lowered), n=max(n, 1) * 3, cutoff=0.0)
    out: list[str] = []
    for candidate in exact_tail + [lowered[r] for r in ranked]:
        if candidate not in out:
            out.append(candidate)
    return out[:n]


def get_benchmark(bench_id: str) -> Benchmark:
    """The catalog entry with this id (an exact match, or a case-insensitive one if unique).

    Raises
    ------
    ConfigError
        ``unknown oracle id 'x'; closest: a, b, c``.
    """
    catalog = _load_all()[0]
    if bench_id in catalog:
        return catalog[bench_id]
    folded = [b for i, b in catalog.items() if i.lower() == str(bench_id).strip().lower()]
    if len(folded) == 1:
        return folded[0]
    raise ConfigError(f"unknown oracle id {bench_id!r}; closest: {', '.join(closest_ids(str(bench_id)))}")
