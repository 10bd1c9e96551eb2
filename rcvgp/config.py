"""Experiment files: YAML in, a frozen :class:`ExperimentConfig` out, every mistake named.

An experiment file says which oracle to question (a catalog id, an expression with variable
ranges, or an endpoint), which search to run and with which settings, the seed, the budgets and
where results go::

    oracle:
      expression: x0*x1 + sin(x2)
      variables:
        - {name: x0, low: 0.1, high: 10, dist: loguniform}
        - {name: x1, low: 0.1, high: 10, dist: loguniform}
        - {name: x2, low: -3, high: 3}
      noise: none
    method: racing
    operators: [add, sub, mul, sin, cos]
    seed: 0
    search: {population: 40, generations: 12}
    budget: {points: 200000, requests: 2000, seconds: 600}
    output: runs/quickstart

Validation happens here, where the file is read: an unknown key (with a did-you-mean), a wrong
type, a value out of range, a missing file. Every error is a :class:`~rcvgp.errors.ConfigError`
whose message starts with the file name and names the key path, e.g.
``exp.yaml: search.popluation: unknown key; did you mean `population`?``. Search settings are
validated by :class:`rcvgp.search.SearchConfig` itself; this module only adds the file and key.
Relative paths (output folder, key files) are taken relative to the experiment file's folder.
"""

from __future__ import annotations

import dataclasses
import difflib
import hashlib
import json
import math
import re
import typing
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from rcvgp.errors import ConfigError, ExpressionError
from rcvgp.oracle import DISTRIBUTIONS, Output, Variable
from rcvgp.search.base import METHODS, SearchConfig

__all__ = [
    "ORACLE_KINDS",
    "ENDPOINT_SCHEMES",
    "OracleConfig",
    "ExperimentConfig",
    "load_experiment",
    "experiment_from_dict",
    "is_endpoint",
]

#: The three ways to name an oracle; exactly one of these keys appears under ``oracle:``.
ORACLE_KINDS = ("catalog", "expression", "endpoint")

#: Address schemes an endpoint may use (ZeroMQ transports).
ENDPOINT_SCHEMES = ("tcp", "ipc", "inproc")

#: ``search.noise_std: auto``: the search estimates the noise from replicate readings.
AUTO = "auto"
_TOP_KEYS = ("name", "oracle", "method", "operators", "seed", "search", "budget", "output")
_ORACLE_KEYS = ("catalog", "expression", "variables", "output", "endpoint", "noise", "latency", "fail_rate",
                "timeout", "deadline", "server_key", "client_key")
_SIMULATED_ONLY = ("noise", "latency", "fail_rate")
_ENDPOINT_ONLY = ("timeout", "deadline", "server_key", "client_key")
_VARIABLE_KEYS = ("name", "low", "high", "dist", "only_positive", "unit")
_OUTPUT_KEYS = ("name", "unit")
_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")  # a variable's or y's name: usable in a formula and a CSV header
_BUDGET_KEYS = {"points": "max_points", "requests": "max_requests", "seconds": "max_seconds"}
# SearchConfig fields set elsewhere in the file, with where they belong.
_SEARCH_ELSEWHERE = {
    "operators": "the top-level key `operators`",
    "max_points": "`budget.points`",
    "max_requests": "`budget.requests`",
    "max_seconds": "`budget.seconds`",
}
_SEARCH_KEYS = tuple(f.name for f in dataclasses.fields(SearchConfig) if f.name not in _SEARCH_ELSEWHERE)
_SEARCH_TYPES = typing.get_type_hints(SearchConfig)


@dataclass(frozen=True)
class OracleConfig:
    """Which oracle to question and how.

    ``kind`` is ``"catalog"`` (a simulated benchmark by id), ``"expression"`` (a simulated law
    over ``variables``, measuring ``output``: y's name and unit) or ``"endpoint"`` (an oracle
    server reached over ZeroMQ); a catalog entry and a server describe their own output.
    ``noise`` (``none``, ``relative:0.01``, ``additive:0.1``, ``multiplicative:0.02``; see
    :class:`rcvgp.simulate.Noise`), ``latency`` (seconds per request) and ``fail_rate`` (chance a
    point comes back unmeasured) apply to simulated oracles; ``timeout`` (seconds to wait for
    one reply before the request is sent again), ``deadline`` (seconds before a request is given
    up, retries included) and the CurveZMQ key files to endpoints.
    """

    kind: str
    catalog: str | None = None
    expression: str | None = None
    variables: tuple[Variable, ...] = ()
    output: Output = field(default_factory=Output)
    endpoint: str | None = None
    noise: str = "none"
    latency: float = 0.0
    fail_rate: float = 0.0
    timeout: float = 10.0
    deadline: float = 60.0
    server_key: Path | None = None  # the server's public key file (CurveZMQ)
    client_key: Path | None = None  # this client's key-pair file (public + secret); optional

    @property
    def label(self) -> str:
        """A short identity for logs and folder names: the id, the endpoint or the expression."""
        return str(self.catalog or self.endpoint or self.expression)

    def to_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = {}
        if self.kind == "catalog":
            data["catalog"] = self.catalog
        elif self.kind == "expression":
            data["expression"] = self.expression
            data["variables"] = [v.to_dict() for v in self.variables]
            if self.output != Output():  # left out when not declared: older runs keep their fingerprint
                data["output"] = {"name": self.output.name, "unit": self.output.unit}
        else:
            data["endpoint"] = self.endpoint
        if self.kind == "endpoint":
            data.update(timeout=self.timeout, deadline=self.deadline,
                        server_key=str(self.server_key) if self.server_key else None,
                        client_key=str(self.client_key) if self.client_key else None)
        else:
            data.update(noise=self.noise, latency=self.latency, fail_rate=self.fail_rate)
        return data


@dataclass(frozen=True)
class ExperimentConfig:
    """A validated experiment: what :func:`rcvgp.runner.run_experiment` runs.

    ``search`` carries every search setting, the operator set and the budgets
    (``max_points``, ``max_requests``, ``max_seconds``). ``source`` is where the settings came
    from (the file name, or ``"command line"``), used to prefix later error messages.
    """

    oracle: OracleConfig
    method: str = "racing"
    seed: int = 0
    search: SearchConfig = field(default_factory=SearchConfig)
    output: Path = Path("runs/experiment")
    name: str = "experiment"
    source: str = "experiment"
    key_names: tuple[tuple[str, str], ...] = field(default=(), repr=False, compare=False)

    def to_dict(self) -> dict[str, Any]:
        """The experiment in the file's own layout (what a resolved ``experiment.yaml`` holds)."""
        search = {k: getattr(self.search, k) for k in _SEARCH_KEYS}
        if search.get("noise_std") is None:
            search["noise_std"] = AUTO
        return {
            "name": self.name,
            "oracle": self.oracle.to_dict(),
            "method": self.method,
            "operators": list(self.search.operators),
            "seed": self.seed,
            "search": search,
            "budget": {key: getattr(self.search, fld) for key, fld in _BUDGET_KEYS.items()},
            "output": str(self.output),
        }

    def fingerprint(self) -> str:
        """A hash of everything that decides which questions the search asks.

        Budgets, the output folder and the name are left out: a run may be resumed with a
        larger budget, and the search then asks the same questions until the old one ran out.
        So is ``search.workers``, which changes where the fits run, not what the search asks.
        """
        data = self.to_dict()
        for key in ("budget", "output", "name"):
            data.pop(key)
        data["search"].pop("workers")
        text = json.dumps(data, sort_keys=True, default=str)
        return hashlib.sha256(text.encode()).hexdigest()[:16]

    def label(self, key: str) -> str:
        """How messages call a key: its dotted path, or the flag it came from."""
        return dict(self.key_names).get(key, key)

    def error(self, key: str, message: str) -> ConfigError:
        """A ConfigError about one key of this experiment, prefixed like those found at load."""
        return ConfigError(f"{self.source}: {self.label(key)}: {message}")


def is_endpoint(text: str) -> bool:
    """Whether ``text`` looks like a ZeroMQ address (``tcp://...``, ``ipc://...``) rather than an id."""
    return re.match(r"^[A-Za-z][A-Za-z0-9+.-]*://", text) is not None


def load_experiment(
    path: str | Path, overrides: Mapping[str, Any] | None = None, *, check_key_files: bool = True
) -> ExperimentConfig:
    """Read and validate an experiment file.

    Parameters
    ----------
    path : str or Path
        The YAML file. Relative paths inside it are taken relative to its folder.
    overrides : mapping, optional
        Values that take precedence over the file's (command-line flags), keyed by dotted key
        path, e.g. ``{"seed": 3, "output": "runs/x"}``. A relative ``output`` here is taken
        relative to the current folder.
    check_key_files : bool
        Whether the CurveZMQ key files (``oracle.server_key``, ``oracle.client_key``) must exist.
        False reads the settings of a finished run, which needs no connection: a run folder
        copied to another machine without its keys still loads.

    Raises
    ------
    ConfigError
        For a missing or unreadable file, invalid YAML, or any invalid key or value; the message
        starts with the file name and names the key.
    """
    label = str(path)
    p = Path(path)
    if not p.exists():
        raise ConfigError(f"{label}: no such file; check the path (relative paths start at {Path.cwd()})")
    if p.is_dir():
        raise ConfigError(f"{label}: is a folder; give the experiment's YAML file")
    try:
        text = p.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{label}: cannot read the file: {exc}") from exc
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark is not None else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise ConfigError(f"{label}: {where}not valid YAML ({problem}); check the indentation and quoting") from exc
    if data is None:
        raise ConfigError(f"{label}: the file is empty; an experiment needs at least an `oracle:` section")
    data = _with_overrides(data, overrides or {})
    return experiment_from_dict(
        data, source=label, base_dir=p.resolve().parent, default_name=p.stem,
        output_base=Path.cwd() if overrides and "output" in overrides else None, check_key_files=check_key_files,
    )


def experiment_from_dict(
    data: Any,
    source: str = "experiment",
    base_dir: str | Path | None = None,
    default_name: str = "experiment",
    key_names: Mapping[str, str] | None = None,
    output_base: str | Path | None = None,
    *,
    check_key_files: bool = True,
) -> ExperimentConfig:
    """Validate an experiment given as a mapping (the parsed YAML).

    Parameters
    ----------
    data : mapping
        The experiment's keys, as in the file.
    source : str
        Where the settings came from; every error message starts with it.
    base_dir : path, optional
        Folder that relative paths are taken from (default: the current folder).
    default_name : str
        The experiment's name when ``name`` is not given.
    key_names : mapping, optional
        How to call a key in messages, e.g. ``{"seed": "--seed"}`` when values came from flags.
    output_base : path, optional
        Folder a relative ``output`` is taken from (default: ``base_dir``).
    check_key_files : bool
        Whether the CurveZMQ key files must exist (see :func:`load_experiment`).
    """
    ctx = _Context(source, Path(base_dir) if base_dir is not None else Path.cwd(), dict(key_names or {}),
                   check_key_files)
    top = ctx.mapping(data, "", _TOP_KEYS)
    if "oracle" not in top:
        raise ctx.error("oracle", "missing; say which oracle to question with `oracle: {catalog: ID}`, "
                        "`oracle: {expression: ..., variables: [...]}` or `oracle: {endpoint: tcp://HOST:PORT}`")
    oracle = _oracle(ctx, top["oracle"])

    method = top.get("method", "racing")
    if not isinstance(method, str) or method not in METHODS:
        raise ctx.error("method", f"unknown method {method!r}{_did_you_mean(str(method), METHODS)} "
                        f"(one of {', '.join(METHODS)})")
    seed = ctx.integer(top.get("seed", 0), "seed", minimum=0)
    name = top.get("name", default_name)
    if not isinstance(name, str) or not name.strip():
        raise ctx.error("name", f"expected a non-empty string, got {name!r}")

    settings: dict[str, Any] = {}
    search = ctx.mapping(top.get("search") or {}, "search", _SEARCH_KEYS, elsewhere=_SEARCH_ELSEWHERE)
    for key, value in search.items():
        if key == "noise_std" and value == AUTO:
            value = None  # estimated from replicate readings
        settings[key] = ctx.typed(value, f"search.{key}", _SEARCH_TYPES[key])
    if top.get("operators") is not None:
        ops = top["operators"]
        if isinstance(ops, str):
            ops = [o for o in re.split(r"[,\s]+", ops) if o]
        if not isinstance(ops, list) or not all(isinstance(o, str) for o in ops):
            raise ctx.error("operators", f"expected a list of operator names such as [add, mul, sin], got {ops!r}")
        settings["operators"] = tuple(ops)
    budget = ctx.mapping(top.get("budget") or {}, "budget", tuple(_BUDGET_KEYS))
    for key, fld in _BUDGET_KEYS.items():
        if budget.get(key) is not None:
            settings[fld] = ctx.typed(budget[key], f"budget.{key}", _SEARCH_TYPES[fld])
    # Let SearchConfig judge each value alone first, so an error names its key.
    for key, value in settings.items():
        where = "operators" if key == "operators" else (
            f"budget.{next(b for b, f in _BUDGET_KEYS.items() if f == key)}" if key in _BUDGET_KEYS.values()
            else f"search.{key}")
        try:
            SearchConfig(**{key: value})
        except (ConfigError, ExpressionError) as exc:
            raise ctx.error(where, _strip_setting(str(exc))) from exc
    try:
        search_config = SearchConfig(**settings)
    except (ConfigError, ExpressionError) as exc:
        raise ConfigError(f"{source}: search: {exc}") from exc

    output_raw = top.get("output", f"runs/{name}")
    if not isinstance(output_raw, (str, Path)) or not str(output_raw).strip():
        raise ctx.error("output", f"expected a folder path, got {output_raw!r}")
    output = Path(output_raw).expanduser()
    if not output.is_absolute():
        output = Path(output_base) / output if output_base is not None else ctx.base_dir / output
    return ExperimentConfig(oracle=oracle, method=method, seed=seed, search=search_config,
                            output=output, name=name, source=source, key_names=tuple(ctx.key_names.items()))


# -- internals --------------------------------------------------------------------------------------


class _Context:
    """Where the values came from, to prefix messages; plus the type checks."""

    def __init__(self, source: str, base_dir: Path, key_names: dict[str, str], check_key_files: bool = True) -> None:
        self.source = source
        self.base_dir = base_dir
        self.key_names = key_names
        self.check_key_files = check_key_files

    def error(self, key: str, message: str) -> ConfigError:
        shown = self.key_names.get(key, key)
        return ConfigError(f"{self.source}: {shown}: {message}" if shown else f"{self.source}: {message}")

    def mapping(
        self, value: Any, key: str, allowed: tuple[str, ...], elsewhere: Mapping[str, str] | None = None
    ) -> dict[str, Any]:
        if not isinstance(value, Mapping):
            what = f"`{key}`" if key else "the file"
            raise self.error(key, f"expected a mapping of keys (`{allowed[0]}: ...`) for {what}, "
                             f"got {_describe(value)}")
        for k in value:
            path = f"{key}.{k}" if key else str(k)
            if not isinstance(k, str):
                raise self.error(path, f"keys must be names, got {k!r}")
            if k in allowed:
                continue
            if elsewhere and k in elsewhere:
                raise self.error(path, f"not a setting of `{key}`; set it with {elsewhere[k]}")
            raise self.error(path, f"unknown key{_did_you_mean(k, allowed)} (allowed: {', '.join(allowed)})")
        return dict(value)

    def integer(self, value: Any, key: str, minimum: int | None = None) -> int:
        out = self.typed(value, key, int)
        if minimum is not None and out < minimum:
            raise self.error(key, f"must be >= {minimum}, got {value!r}")
        return int(out)

    def number(self, value: Any, key: str, minimum: float | None = None, positive: bool = False) -> float:
        out = float(self.typed(value, key, float))
        if not math.isfinite(out):
            raise self.error(key, f"must be a finite number, got {value!r}")
        if positive and out <= 0:
            raise self.error(key, f"must be > 0, got {value!r}")
        if minimum is not None and out < minimum:
            raise self.error(key, f"must be >= {minimum}, got {value!r}")
        return out

    def typed(self, value: Any, key: str, hint: Any) -> Any:
        """Check ``value`` against a field type (int, float, str, tuple, optional of those).

        YAML reads ``1e-3`` (no dot) as a string and ``1e5`` likewise; numeric strings are
        accepted for numbers, integral floats for integers.
        """
        args = typing.get_args(hint)
        if type(None) in args:
            if value is None:
                return None
            hint = next(a for a in args if a is not type(None))
        if hint is bool:
            if not isinstance(value, bool):
                raise self.error(key, f"expected true or false, got {_describe(value)}")
            return value
        if hint is int:
            number = _as_number(value)
            if number is None or not float(number).is_integer():
                raise self.error(key, f"expected an integer, got {_describe(value)}")
            return int(number)
        if hint is float:
            number = _as_number(value)
            if number is None:
                raise self.error(key, f"expected a number, got {_describe(value)}")
            return float(number)
        if hint is str:
            if not isinstance(value, str):
                raise self.error(key, f"expected a string, got {_describe(value)}")
            return value
        return value

    def path(self, value: Any, key: str) -> Path:
        """A key file's path, relative to the experiment's folder; it must exist unless told otherwise."""
        if not isinstance(value, str) or not value.strip():
            raise self.error(key, f"expected a file path, got {_describe(value)}")
        p = Path(value).expanduser()
        p = p if p.is_absolute() else self.base_dir / p
        if self.check_key_files and not p.is_file():
            raise self.error(key, f"no such file {str(p)!r}; create the keys with `rcvgp keys` or fix the path")
        return p


def _oracle(ctx: _Context, value: Any) -> OracleConfig:
    if isinstance(value, str):  # shorthand: `oracle: sincos-3-2-2/1` or `oracle: tcp://...`
        value = {"endpoint": value} if is_endpoint(value) else {"catalog": value}
    section = ctx.mapping(value, "oracle", _ORACLE_KEYS)
    kinds = [k for k in ORACLE_KINDS if k in section]
    if len(kinds) != 1:
        got = f"got {', '.join(f'`{k}`' for k in kinds)}" if kinds else "got none"
        raise ctx.error("oracle", f"give exactly one of `catalog: ID`, `expression: ...` (with `variables:`) "
                        f"or `endpoint: tcp://HOST:PORT`; {got}")
    kind = kinds[0]
    wrong = _ENDPOINT_ONLY if kind != "endpoint" else _SIMULATED_ONLY
    for key in wrong:
        if key in section:
            applies = "an endpoint" if key in _ENDPOINT_ONLY else "a simulated oracle (catalog or expression)"
            raise ctx.error(f"oracle.{key}", f"applies only to {applies}, not to `{kind}`; remove it")
    for key in ("variables", "output"):
        if key in section and kind != "expression":
            raise ctx.error(f"oracle.{key}", f"applies only to `expression`; a `{kind}` oracle describes its own "
                            f"{key}; remove it")
    out: dict[str, Any] = {"kind": kind}
    if kind == "catalog":
        catalog = section["catalog"]
        if not isinstance(catalog, str) or not catalog.strip():
            raise ctx.error("oracle.catalog", f"expected a catalog id such as sincos-3-2-2/1 "
                            f"(list them with `rcvgp oracles list`), got {_describe(catalog)}")
        from rcvgp.benchmarks import get_benchmark

        try:
            out["catalog"] = get_benchmark(catalog.strip()).id
        except ConfigError as exc:
            raise ctx.error("oracle.catalog", f"{exc}; list them with `rcvgp oracles list`") from exc
    elif kind == "expression":
        out["expression"], out["variables"] = _expression(ctx, section)
        if section.get("output") is not None:
            out["output"] = _output(ctx, section["output"], [v.name for v in out["variables"]])
    else:
        endpoint = section["endpoint"]
        if not isinstance(endpoint, str) or not is_endpoint(endpoint.strip()):
            raise ctx.error("oracle.endpoint", f"expected an address such as tcp://127.0.0.1:5555, got "
                            f"{_describe(endpoint)}")
        endpoint = endpoint.strip()
        scheme = endpoint.split("://", 1)[0]
        if scheme not in ENDPOINT_SCHEMES:
            raise ctx.error("oracle.endpoint", f"unsupported scheme {scheme!r}{_did_you_mean(scheme, ENDPOINT_SCHEMES)} "
                            f"(one of {', '.join(s + '://' for s in ENDPOINT_SCHEMES)})")
        if scheme == "tcp" and not re.match(r"^tcp://[^:/]+:\d+$|^tcp://\[[0-9A-Fa-f:]+\]:\d+$", endpoint):
            raise ctx.error("oracle.endpoint", f"{endpoint!r} lacks a host and port; write tcp://HOST:PORT, "
                            "e.g. tcp://127.0.0.1:5555")
        out["endpoint"] = endpoint
        if "timeout" in section:
            out["timeout"] = ctx.number(section["timeout"], "oracle.timeout", positive=True)
        if "deadline" in section:
            out["deadline"] = ctx.number(section["deadline"], "oracle.deadline", positive=True)
        if section.get("client_key") is not None and section.get("server_key") is None:
            raise ctx.error("oracle.server_key", "missing; CurveZMQ needs the server's public key file "
                            "(`server_key`) besides this client's key pair (`client_key`)")
        for key in ("server_key", "client_key"):
            if section.get(key) is not None:
                out[key] = ctx.path(section[key], f"oracle.{key}")
    if section.get("noise") is not None:
        out["noise"] = _noise(ctx, section["noise"])
    if "latency" in section:
        out["latency"] = ctx.number(section["latency"], "oracle.latency", minimum=0.0)
    if "fail_rate" in section:
        out["fail_rate"] = ctx.number(section["fail_rate"], "oracle.fail_rate", minimum=0.0)
        if out["fail_rate"] >= 1:
            raise ctx.error("oracle.fail_rate", f"must be a probability below 1, got {section['fail_rate']!r}")
    return OracleConfig(**out)


def _noise(ctx: _Context, value: Any) -> str:
    from rcvgp.simulate import Noise

    if isinstance(value, (int, float)) and not isinstance(value, bool):
        raise ctx.error("oracle.noise", f"write the kind and the scale, e.g. `relative:{value}` (std relative to "
                        f"the spread of y) or `additive:{value}` (absolute std); or `none`")
    try:
        return str(Noise.parse(value))
    except ConfigError as exc:
        raise ctx.error("oracle.noise", f"{exc} (e.g. `relative:0.01`, `additive:0.1`, `none`)") from exc


def _expression(ctx: _Context, section: dict[str, Any]) -> tuple[str, tuple[Variable, ...]]:
    expr = section["expression"]
    if isinstance(expr, (int, float)) and not isinstance(expr, bool):
        expr = str(expr)
    if not isinstance(expr, str) or not expr.strip():
        raise ctx.error("oracle.expression", f"expected a formula such as `x0*x1 + sin(x2)`, got {_describe(expr)}")
    raw_vars = section.get("variables")
    if raw_vars is None:
        raise ctx.error("oracle.variables", "missing; an expression needs its variables with ranges, e.g. "
                        "`variables: [{name: x0, low: 0.1, high: 10}]`")
    if not isinstance(raw_vars, list) or not raw_vars:
        raise ctx.error("oracle.variables", f"expected a list of variables, each `{{name: x0, low: 0.1, high: 10}}`, "
                        f"got {_describe(raw_vars)}")
    variables = []
    for i, item in enumerate(raw_vars):
        key = f"oracle.variables[{i}]"
        entry = ctx.mapping(item, key, _VARIABLE_KEYS)
        for need in ("name", "low", "high"):
            if need not in entry:
                raise ctx.error(f"{key}.{need}", "missing; each variable needs `name`, `low` and `high`")
        name = ctx.typed(entry["name"], f"{key}.name", str)
        if not _NAME.match(name):
            raise ctx.error(f"{key}.name", f"{name!r} is not a usable name; use letters, digits and _ (e.g. x0, T)")
        dist = entry.get("dist", "uniform")
        if dist not in DISTRIBUTIONS:
            raise ctx.error(f"{key}.dist", f"unknown distribution {dist!r}{_did_you_mean(str(dist), DISTRIBUTIONS)} "
                            f"(one of {', '.join(DISTRIBUTIONS)})")
        low = ctx.number(entry["low"], f"{key}.low")
        high = ctx.number(entry["high"], f"{key}.high")
        only_positive = ctx.typed(entry.get("only_positive", True), f"{key}.only_positive", bool)
        unit = entry.get("unit", "")
        if not isinstance(unit, str):
            raise ctx.error(f"{key}.unit", f"expected a string, got {_describe(unit)}")
        try:
            variables.append(Variable(name=name, low=low, high=high, dist=dist, only_positive=only_positive,
                                      unit=unit))
        except ConfigError as exc:
            raise ctx.error(key, str(exc)) from exc
    names = [v.name for v in variables]
    dupes = sorted({n for n in names if names.count(n) > 1})
    if dupes:
        raise ctx.error("oracle.variables", f"variable names must be unique; {', '.join(dupes)} appears twice")
    from rcvgp.benchmarks import parse_expression

    try:
        parse_expression(expr, names)
    except ExpressionError as exc:
        raise ctx.error("oracle.expression", f"{exc}; write it in Python syntax over the variables "
                        f"({', '.join(names)}), e.g. x0*x1 + sin(x2)") from exc
    return expr.strip(), tuple(variables)


def _output(ctx: _Context, value: Any, variables: list[str]) -> Output:
    """``oracle.output``: what y is, ``{name: T, unit: s}`` (each optional; y without a unit by default)."""
    entry = ctx.mapping(value, "oracle.output", _OUTPUT_KEYS)
    name = ctx.typed(entry.get("name", "y"), "oracle.output.name", str)
    if not _NAME.match(name):
        raise ctx.error("oracle.output.name", f"{name!r} is not a usable name; use letters, digits and _ (e.g. y, T)")
    if name in variables:
        raise ctx.error("oracle.output.name", f"{name!r} is also a variable's name; give y a name of its own")
    unit = ctx.typed(entry.get("unit", ""), "oracle.output.unit", str)
    return Output(name=name, unit=unit)


def _with_overrides(data: Any, overrides: Mapping[str, Any]) -> Any:
    if not overrides or not isinstance(data, Mapping):
        return data
    out = dict(data)
    for dotted, value in overrides.items():
        parts = dotted.split(".")
        node = out
        for part in parts[:-1]:
            child = node.get(part)
            child = dict(child) if isinstance(child, Mapping) else {}
            node[part] = child
            node = child
        node[parts[-1]] = value
    return out


def _as_number(value: Any) -> float | int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        return value
    if isinstance(value, str):
        try:
            return int(value.replace("_", ""))
        except ValueError:
            pass
        try:
            return float(value.replace("_", ""))
        except ValueError:
            return None
    return None


def _describe(value: Any) -> str:
    if value is None:
        return "nothing (null)"
    if isinstance(value, bool):
        return f"{str(value).lower()} (a boolean)"
    if isinstance(value, Mapping):
        return "a mapping"
    if isinstance(value, list):
        return "a list"
    return repr(value)


def _did_you_mean(word: str, choices: tuple[str, ...] | list[str]) -> str:
    close = difflib.get_close_matches(word, list(choices), n=1, cutoff=0.6)
    return f"; did you mean `{close[0]}`?" if close else ""


def _strip_setting(message: str) -> str:
    """Drop SearchConfig's own ``search setting `x` `` lead-in: the key path replaces it."""
    return re.sub(r"^(search setting|budget) `[^`]+`:? ?", "", message)
