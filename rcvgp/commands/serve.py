"""``rcvgp serve`` and ``rcvgp keys``: put an oracle on the wire, make CurveZMQ key pairs.

``rcvgp serve ID --bind tcp://127.0.0.1:5555`` serves a catalog oracle (simulated, with optional
noise and latency) or, when ID is ``module:NAME`` or ``path/to/file.py:NAME``, a rig
integrator's own DataOracle (an instance, or a class or factory called with the ``--arg
name=value`` given). It runs until SIGINT or SIGTERM. ``rcvgp keys DIR --name NAME`` writes ``NAME.key`` (public) and
``NAME.key_secret`` (the pair) as ZeroMQ certificate files.
"""

from __future__ import annotations

import argparse
import difflib
import importlib
import importlib.util
import inspect
import os
import re
import sys
import types
import typing
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from rcvgp.errors import ConfigError

__all__ = ["register", "load_oracle", "parse_args"]


def register(subparsers: Any) -> None:
    """Add ``serve`` and ``keys`` to the ``rcvgp`` parser."""
    p = subparsers.add_parser(
        "serve",
        help="serve an oracle over ZeroMQ (protocol v1)",
        description="Serve a catalog oracle, or your own DataOracle (module:NAME or file.py:NAME), "
        "over ZeroMQ until SIGINT/SIGTERM.",
        epilog=_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("id", metavar="ID", help="a catalog id (e.g. feynman/I.8.14) or module:NAME / path.py:NAME")
    p.add_argument("--arg", action="append", default=[], metavar="NAME=VALUE", dest="args",
                   help="a keyword argument for the class or factory NAME (repeatable); VALUE is read as YAML: "
                        "a number, true/false, null or a string")
    p.add_argument("--bind", default="tcp://127.0.0.1:5555", metavar="ADDR",
                   help="endpoint to bind (default tcp://127.0.0.1:5555; tcp://127.0.0.1:* picks a free port)")
    p.add_argument("--noise", default=None, metavar="KIND:SCALE", help="catalog oracles: noise, e.g. relative:0.01")
    p.add_argument("--seed", type=int, default=0, help="catalog oracles: noise seed (default 0)")
    p.add_argument("--latency", type=float, default=0.0, metavar="S", help="catalog oracles: seconds per request")
    p.add_argument("--max-rows", type=int, default=None, metavar="N", help="most rows per measure request")
    p.add_argument("--max-message-bytes", type=int, default=64 * 2**20, metavar="N",
                   help="larger requests get TOO_LARGE (default 64 MiB)")
    p.add_argument("--reply-cache-bytes", type=int, default=64 * 2**20, metavar="N",
                   help="bound of the reply cache kept for retries, in bytes (default 64 MiB; the newest reply "
                        "is always kept); older replies are answered from --journal, or measured again")
    p.add_argument("--measure-timeout", type=_seconds_or_none, default=600.0, metavar="S",
                   help="longest measurement in seconds (default 600; 'none' for no limit): a longer one is answered "
                        "RIG_TIMEOUT, and new measures too until the rig returns")
    p.add_argument("--journal", default=None, metavar="DIR",
                   help="store every measure reply in DIR, so a retry after a restart is not measured again")
    p.add_argument("--curve-secret", default=None, metavar="FILE",
                   help="server key pair (*.key_secret from `rcvgp keys`): enables CurveZMQ")
    p.add_argument("--curve-clients", default=None, metavar="DIR",
                   help="allow only the client public keys (*.key) in DIR; SIGHUP re-reads it")
    p.add_argument("--insecure", action="store_true", help="allow a non-loopback bind without CURVE")
    p.add_argument("--quiet", action="store_true", help="do not log requests")
    p.set_defaults(func=run_serve)

    k = subparsers.add_parser(
        "keys",
        help="make CurveZMQ key pairs (NAME.key public, NAME.key_secret pair)",
        description="Write ZeroMQ certificate files for CurveZMQ: give the server's .key to clients, each "
        "client's .key to the server's --curve-clients directory; keep the .key_secret files private.",
    )
    k.add_argument("dir", metavar="DIR", help="directory to write to (created)")
    k.add_argument("--name", action="append", default=None, metavar="NAME",
                   help="key pair name (repeatable; default: server)")
    k.add_argument("--force", action="store_true", help="overwrite existing files")
    k.set_defaults(func=run_keys)


_EPILOG = """\
your own rig: ID is file.py:NAME or module:NAME, where NAME is a DataOracle instance, or a class or
factory that makes one; --arg passes it keyword arguments, e.g.
  rcvgp serve examples/pendulum_rig.py:PendulumRig --arg noise=0.001 --arg seed=2
calls PendulumRig(noise=0.001, seed=2). Values are read as YAML: 3 and 1e-3 are numbers, true and
false booleans, null is None, anything else a string (quote it, --arg 'port="8"', to keep a number
a string). An unknown name, a missing one, or arguments the class refuses: one line, exit status 2."""


def _seconds_or_none(text: str) -> float | None:
    if text.strip().lower() in ("none", "0"):
        return None
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number of seconds or 'none', got {text!r}") from None
    if not 0 < value < float("inf"):
        raise argparse.ArgumentTypeError(f"expected a number of seconds > 0 or 'none', got {text!r}")
    return value


# A number as people write it; YAML 1.1 (PyYAML) reads 1e-3 and 1E5, without a dot, as strings.
_NUMBER = re.compile(r"[-+]?(\d[\d_]*\.?\d*|\.\d+)([eE][-+]?\d+)?")


def parse_args(pairs: Sequence[str]) -> dict[str, Any]:
    """The keyword arguments of ``--arg NAME=VALUE`` flags, each VALUE read as a YAML scalar.

    Raises
    ------
    ConfigError
        For a flag without ``=`` or a name, a name given twice, or a value YAML reads as a list
        or a mapping (or cannot read).
    """
    import yaml

    kwargs: dict[str, Any] = {}
    for pair in pairs:
        name, sep, text = pair.partition("=")
        name = name.strip()
        if not sep or not name.isidentifier():
            raise ConfigError(f"--arg {pair}: write it as NAME=VALUE, NAME a Python identifier (e.g. --arg noise=0.01)")
        if name in kwargs:
            raise ConfigError(f"--arg {name}: given twice; give each argument once")
        try:
            value = yaml.safe_load(text) if text.strip() else ""
        except yaml.YAMLError:
            value = []  # refused below, with the same advice
        if isinstance(value, str) and _NUMBER.fullmatch(text.strip()):  # unquoted: a number YAML 1.1 missed
            value = float(value.replace("_", ""))
        if isinstance(value, (list, dict, set)):
            raise ConfigError(f"--arg {pair}: expected a number, true/false, null or a string; "
                              f"quote the value (--arg '{name}=\"{text}\"') to pass it as a string")
        kwargs[name] = value
    return kwargs


def _signature(factory: Any) -> inspect.Signature | None:
    """``factory``'s signature, its annotations resolved when they can be; None for a builtin."""
    try:
        return inspect.signature(factory, eval_str=True)
    except (TypeError, ValueError):  # a builtin without a signature: let the call judge
        return None
    except Exception:  # noqa: BLE001 - an annotation that does not evaluate: check names only
        return inspect.signature(factory)


def _typed(where: str, param: inspect.Parameter, value: Any) -> Any:
    """``value`` as the parameter's plain annotation (bool, int, float, str, or a union of them and
    None) takes it: an integral float for an int, an int for a float; any other annotation as is."""
    hint = param.annotation
    options = typing.get_args(hint) if isinstance(hint, types.UnionType) or typing.get_origin(hint) is typing.Union \
        else (hint,)
    if not options or not all(o in (bool, int, float, str, type(None)) for o in options):
        return value
    if type(value) in options:  # noqa: E721 - exactly: a bool is not an int here
        return value
    if int in options and isinstance(value, float) and value.is_integer():
        return int(value)
    if float in options and type(value) is int:
        return float(value)
    wanted = " or ".join("null" if o is type(None) else o.__name__ for o in options)
    quote = f"; quote it to pass a string: --arg '{param.name}=\"...\"'" if str in options else ""
    raise ConfigError(f"{where}: --arg {param.name}: expected {wanted}, got {value!r}{quote}")


def _construct(ident: str, name: str, factory: Any, kwargs: Mapping[str, Any]) -> Any:
    """``factory(**kwargs)``, with the mistakes of ``--arg`` (an unknown or a missing name, a value
    of the wrong type, arguments the class refuses) as one :class:`ConfigError` line."""
    signature = _signature(factory)
    if signature is not None:
        params = signature.parameters
        named = {n: p for n, p in params.items()
                 if p.kind in (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)}
        takes_any = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values())
        for key in kwargs:
            if key not in named and not takes_any:
                close = difflib.get_close_matches(key, list(named), n=1)
                hint = f"did you mean `{close[0]}`? " if close else ""
                raise ConfigError(f"{ident}: --arg {key}: {name} has no parameter {key!r}; {hint}"
                                  f"(its parameters: {', '.join(named) or 'none'})")
        missing = [n for n, p in named.items() if p.default is inspect.Parameter.empty and n not in kwargs]
        if missing:
            raise ConfigError(f"{ident}: {name} needs " + " ".join(f"--arg {n}=VALUE" for n in missing))
        kwargs = {k: _typed(ident, named[k], v) if k in named else v for k, v in kwargs.items()}
    try:
        return factory(**kwargs)
    except (TypeError, ValueError) as exc:  # ConfigError too: the class refused these arguments
        shown = ", ".join(f"{k}={v!r}" for k, v in kwargs.items())
        raise ConfigError(f"{ident}: {name}({shown}) refused its arguments: {exc}") from None


def load_oracle(ident: str, *, noise: str | None = None, seed: int = 0, latency: float = 0.0,
                kwargs: Mapping[str, Any] | None = None) -> Any:
    """The DataOracle named by ``ident``: ``module:NAME``, ``file.py:NAME`` or a catalog id.

    A NAME that is a class or a factory is called with ``kwargs`` (``--arg``); ``kwargs`` for an
    instance or a catalog id is a :class:`ConfigError`.
    """
    from rcvgp.oracle import DataOracle

    kwargs = dict(kwargs or {})

    if ":" in ident and not ident.startswith(("tcp:", "ipc:")):
        where, _, name = ident.rpartition(":")
        if where.endswith(".py") or os.sep in where or "/" in where:
            path = Path(where)
            if not path.is_file():
                raise ConfigError(f"{ident}: no such file {where}")
            spec = importlib.util.spec_from_file_location(f"_rcvgp_user_oracle_{path.stem}", path)
            if spec is None or spec.loader is None:
                raise ConfigError(f"{ident}: cannot import {where}")
            module = importlib.util.module_from_spec(spec)
            sys.path.insert(0, str(path.resolve().parent))
            spec.loader.exec_module(module)
        else:
            try:
                module = importlib.import_module(where)
            except ImportError as exc:
                raise ConfigError(f"{ident}: cannot import module {where}: {exc}") from None
        if not hasattr(module, name):
            raise ConfigError(f"{ident}: {where} has no attribute {name!r}")
        obj = getattr(module, name)
        if isinstance(obj, DataOracle):
            if kwargs:
                raise ConfigError(f"{ident}: {name} is an instance, made already: --arg needs a class or a factory")
            return obj
        if not callable(obj):
            raise ConfigError(f"{ident}: {name} is neither a DataOracle nor a class or factory making one")
        obj = _construct(ident, name, obj, kwargs)
        if not isinstance(obj, DataOracle):
            raise ConfigError(f"{ident}: {name}() returned {type(obj).__name__}, not a DataOracle")
        return obj
    if kwargs:
        raise ConfigError(f"--arg: {ident} is a catalog oracle; --arg is for a class of yours (file.py:NAME), "
                          "a catalog oracle takes --noise, --seed and --latency")
    from rcvgp.simulate import SimulatedOracle  # lazily: the catalog is only needed here

    return SimulatedOracle.from_benchmark(ident, noise=noise, seed=seed, latency=latency)


def run_serve(args: argparse.Namespace) -> int:
    import logging

    from rcvgp.transport.server import serve

    logging.basicConfig(level=logging.WARNING if args.quiet else logging.INFO,
                        format="%(asctime)s %(name)s %(levelname)s %(message)s")
    oracle = load_oracle(args.id, noise=args.noise, seed=args.seed, latency=args.latency, kwargs=parse_args(args.args))

    def ready(server: Any) -> None:
        print(f"rcvgp serve: {server.spec.name} on {server.endpoint} (server session {server.server_session}"
              f"{', CURVE' if args.curve_secret else ''}); Ctrl-C stops", flush=True)

    try:
        serve(
            oracle,
            args.bind,
            on_ready=ready,
            max_rows=args.max_rows,
            max_message_bytes=args.max_message_bytes,
            reply_cache_bytes=args.reply_cache_bytes,
            measure_timeout=args.measure_timeout,
            journal_dir=args.journal,
            curve_secret_key=args.curve_secret,
            curve_clients_dir=args.curve_clients,
            insecure=args.insecure,
            close_oracle=True,
        )
    finally:
        print("rcvgp serve: stopped", flush=True)
    return 0


def run_keys(args: argparse.Namespace) -> int:
    import zmq.auth as zauth

    out = Path(args.dir)
    out.mkdir(parents=True, exist_ok=True)
    for name in args.name or ["server"]:
        if not name or "/" in name or os.sep in name:
            raise ConfigError(f"--name {name!r}: give a plain file name such as server or client-alice")
        targets = [out / f"{name}.key", out / f"{name}.key_secret"]
        existing = [t for t in targets if t.exists()]
        if existing and not args.force:
            raise ConfigError(f"{existing[0]} exists; pass --force to overwrite or choose another --name")
        umask = os.umask(0o077)  # the secret key is private from its first byte, not after a chmod
        try:
            public, secret = zauth.create_certificates(str(out), name)
        finally:
            os.umask(umask)
        os.chmod(public, 0o666 & ~umask)  # the public key follows the umask, as results do
        print(f"{name}: public key {public} (share it), key pair {secret} (keep it private)")
    return 0
