"""Experiment files: strict keys with suggestions, types, and every error naming the file and key."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from rcvgp.config import ExperimentConfig, experiment_from_dict, is_endpoint, load_experiment
from rcvgp.errors import ConfigError
from rcvgp.oracle import Output
from rcvgp.search import SearchConfig

GOOD = """\
name: law
oracle:
  expression: x0*x1 + sin(x2)
  variables:
    - {name: x0, low: 0.1, high: 10, dist: loguniform}
    - {name: x1, low: 0.1, high: 10, dist: loguniform}
    - {name: x2, low: -3, high: 3, unit: rad}
  noise: relative:0.01
  latency: 0.001
method: cvgp
operators: [add, sub, mul, sin, const]
seed: 7
search:
  population: 40
  generations: 12
  eps_loss: 1e-4
budget: {points: 2e5, requests: 500, seconds: 60}
output: out/law
"""


def write(tmp_path: Path, text: str, name: str = "exp.yaml") -> Path:
    path = tmp_path / name
    path.write_text(textwrap.dedent(text))
    return path


def test_a_full_experiment_file_loads_into_frozen_settings(tmp_path):
    cfg = load_experiment(write(tmp_path, GOOD))
    assert isinstance(cfg, ExperimentConfig)
    assert cfg.name == "law" and cfg.method == "cvgp" and cfg.seed == 7
    assert cfg.oracle.kind == "expression" and cfg.oracle.noise == "relative:0.01" and cfg.oracle.latency == 0.001
    assert [v.name for v in cfg.oracle.variables] == ["x0", "x1", "x2"]
    assert cfg.oracle.variables[0].dist == "loguniform" and cfg.oracle.variables[2].unit == "rad"
    assert isinstance(cfg.search, SearchConfig)
    assert cfg.search.population == 40 and cfg.search.generations == 12
    assert cfg.search.eps_loss == 1e-4  # YAML reads 1e-4 as a string; accepted as a number
    assert cfg.search.operators == ("add", "sub", "mul", "sin")
    assert (cfg.search.max_points, cfg.search.max_requests, cfg.search.max_seconds) == (200_000, 500, 60.0)
    assert cfg.output == tmp_path / "out" / "law"  # relative to the file's folder
    with pytest.raises(AttributeError):
        cfg.seed = 3  # type: ignore[misc]


def test_defaults_are_racing_seed_zero_and_a_runs_folder(tmp_path):
    cfg = load_experiment(write(tmp_path, "oracle: {catalog: sincos-3-2-2/1}\n", "quick.yaml"))
    assert cfg.method == "racing" and cfg.seed == 0 and cfg.name == "quick"
    assert cfg.search == SearchConfig()  # operators empty: the catalog entry's set is used
    assert cfg.output == tmp_path / "runs" / "quick"


def test_oracle_shorthands_for_an_id_and_an_endpoint(tmp_path):
    cfg = load_experiment(write(tmp_path, "oracle: Feynman/I.8.14\n"))
    assert cfg.oracle.kind == "catalog" and cfg.oracle.catalog == "feynman/I.8.14"  # the catalog's spelling
    cfg = load_experiment(write(tmp_path, "oracle: tcp://127.0.0.1:5555\n"))
    assert cfg.oracle.kind == "endpoint" and cfg.oracle.timeout == 10.0


def test_an_endpoint_with_timeout_and_key_files(tmp_path):
    (tmp_path / "keys").mkdir()
    (tmp_path / "keys" / "server.key").write_text("x")
    (tmp_path / "keys" / "client.key_secret").write_text("x")
    cfg = load_experiment(write(tmp_path, """\
        oracle:
          endpoint: tcp://10.0.0.5:5555
          timeout: 2.5
          deadline: 30
          server_key: keys/server.key
          client_key: keys/client.key_secret
        """))
    o = cfg.oracle
    assert (o.kind, o.endpoint, o.timeout, o.deadline) == ("endpoint", "tcp://10.0.0.5:5555", 2.5, 30.0)
    assert o.server_key == tmp_path / "keys" / "server.key"


def test_overrides_win_over_the_file(tmp_path):
    cfg = load_experiment(write(tmp_path, GOOD), overrides={"seed": 3, "budget.points": 1000, "output": "elsewhere"})
    assert cfg.seed == 3 and cfg.search.max_points == 1000
    assert cfg.output == Path.cwd() / "elsewhere"


def test_fingerprint_ignores_budget_output_and_workers_but_not_the_seed(tmp_path):
    path = write(tmp_path, GOOD)
    base = load_experiment(path).fingerprint()
    assert load_experiment(path, overrides={"budget.points": 10, "output": "x"}).fingerprint() == base
    more = load_experiment(path, overrides={"search.workers": 4})  # a run resumed on more cores asks the same
    assert more.search.workers == 4 and more.fingerprint() == base
    assert load_experiment(path, overrides={"seed": 8}).fingerprint() != base


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("oracle: {catalog: sincos-3-2-2/1}\nsearch: {popluation: 3}\n",
         "exp.yaml: search.popluation: unknown key; did you mean `population`?"),
        ("oracle: {catalog: sincos-3-2-2/1}\nbugdet: {points: 3}\n", "exp.yaml: bugdet: unknown key; did you mean `budget`?"),
        ("oracle: {catalog: sincos-3-2-2/1}\nbudget: {point: 3}\n", "exp.yaml: budget.point: unknown key; did you mean `points`?"),
        ("oracle: {catalgo: a/1}\n", "exp.yaml: oracle.catalgo: unknown key; did you mean `catalog`?"),
        ("oracle: {catalog: sincos-3-2-2/1}\nsearch: {population: many}\n",
         "exp.yaml: search.population: expected an integer, got 'many'"),
        ("oracle: {catalog: sincos-3-2-2/1}\nsearch: {population: 0}\n", "exp.yaml: search.population: must be an integer >= 1"),
        ("oracle: {catalog: sincos-3-2-2/1}\nsearch: {p_mate: 2}\n", "exp.yaml: search.p_mate: must be a probability"),
        ("oracle: {catalog: sincos-3-2-2/1}\nsearch: {workers: 0}\n", "exp.yaml: search.workers: must be an integer >= 1"),
        ("oracle: {catalog: sincos-3-2-2/1}\nsearch: {precision: 0}\n",
         "exp.yaml: search.precision: must be a relative standard error > 0"),
        ("oracle: {catalog: sincos-3-2-2/1}\nsearch: {precision_points: -1}\n",
         "exp.yaml: search.precision_points: must be an integer >= 0"),
        ("oracle: {catalog: sincos-3-2-2/1}\nsearch: {workers: -1}\n", "exp.yaml: search.workers: must be an integer >= 1"),
        ("oracle: {catalog: sincos-3-2-2/1}\nsearch: {restarts: -1}\n", "exp.yaml: search.restarts: must be an integer >= 0"),
        ("oracle: {catalog: sincos-3-2-2/1}\nsearch: {workers: two}\n",
         "exp.yaml: search.workers: expected an integer, got 'two'"),
        ("oracle: {catalog: sincos-3-2-2/1}\nsearch: {workers: true}\n",
         "exp.yaml: search.workers: expected an integer, got true (a boolean)"),
        ("oracle: {catalog: sincos-3-2-2/1}\nsearch: {noise_std: -1}\n",
         "exp.yaml: search.noise_std: must be a standard deviation >= 0"),
        ("oracle: {catalog: sincos-3-2-2/1}\nsearch: {noise_std: some}\n", "exp.yaml: search.noise_std: expected a number"),
        ("oracle: {catalog: sincos-3-2-2/1}\nsearch: {selection: simplest}\n",
         "exp.yaml: search.selection: 'simplest' is not one of parsimonious, accuracy"),
        ("oracle: {catalog: sincos-3-2-2/1}\nsearch: {max_points: 3}\n", "exp.yaml: search.max_points: not a setting of `search`"),
        ("oracle: {catalog: sincos-3-2-2/1}\nsearch: 5\n", "exp.yaml: search: expected a mapping"),
        ("oracle: {catalog: sincos-3-2-2/1}\nmethod: racin\n", "exp.yaml: method: unknown method 'racin'; did you mean `racing`?"),
        ("oracle: {catalog: sincos-3-2-2/1}\nseed: true\n", "exp.yaml: seed: expected an integer"),
        ("oracle: {catalog: sincos-3-2-2/1}\nseed: -1\n", "exp.yaml: seed: must be >= 0"),
        ("oracle: {catalog: sincos-3-2-2/1}\noperators: [add, sn]\n", "exp.yaml: operators: unknown operator 'sn'; did you mean sin"),
        ("oracle: {catalog: sincos-3-2-2/1}\nbudget: {points: 0}\n", "exp.yaml: budget.points: must be an integer >= 1"),
        ("oracle: {catalog: sincos-3-2-2/1}\nbudget: {seconds: soon}\n", "exp.yaml: budget.seconds: expected a number"),
        ("oracle: {catalog: sincos-3-2-2/1, timeout: 3}\n", "exp.yaml: oracle.timeout: applies only to an endpoint"),
        ("oracle: {endpoint: tcp://h:1, noise: relative:0.1}\n", "exp.yaml: oracle.noise: applies only to a simulated oracle"),
        ("oracle: {catalog: sincos-3-2-2/1, endpoint: tcp://h:1}\n", "exp.yaml: oracle: give exactly one of"),
        ("oracle: {noise: 0.1}\n", "exp.yaml: oracle: give exactly one of"),
        ("oracle: {catalog: sincos-3-2-2/1, noise: 0.1}\n", "exp.yaml: oracle.noise: write the kind and the scale"),
        ("oracle: {catalog: sincos-3-2-2/1, noise: relativ:0.1}\n",
         "exp.yaml: oracle.noise: noise kind 'relativ' is not one of"),
        ("oracle: {catalog: sincos-3-2-2/1, fail_rate: 1}\n", "exp.yaml: oracle.fail_rate: must be a probability"),
        ("oracle: {catalog: sincos-3-2-2/2x}\n", "exp.yaml: oracle.catalog: unknown oracle id 'sincos-3-2-2/2x'"),
        ("oracle: {endpoint: tcp://localhost}\n", "exp.yaml: oracle.endpoint: 'tcp://localhost' lacks a host and port"),
        ("oracle: {endpoint: http://h:1}\n", "exp.yaml: oracle.endpoint: unsupported scheme 'http'"),
        ("oracle: {endpoint: tcp://h:1, timeout: 0}\n", "exp.yaml: oracle.timeout: must be > 0"),
        ("oracle: {endpoint: tcp://h:1, client_key: c.key}\n", "exp.yaml: oracle.server_key: missing"),
        ("oracle: {endpoint: tcp://h:1, server_key: s.key, client_key: c.key}\n",
         "exp.yaml: oracle.server_key: no such file"),
        ("oracle: {endpoint: tcp://h:1, retries: 3}\n", "exp.yaml: oracle.retries: unknown key"),
        ("oracle: {expression: x0}\n", "exp.yaml: oracle.variables: missing"),
        ("oracle: {expression: x0 + y, variables: [{name: x0, low: 0, high: 1}]}\n",
         "exp.yaml: oracle.expression: unknown name 'y'"),
        ("oracle: {expression: 'x0 +', variables: [{name: x0, low: 0, high: 1}]}\n",
         "exp.yaml: oracle.expression: the expression does not parse"),
        ("oracle: {expression: x0, variables: [{name: x0, low: 2, high: 1}]}\n",
         "exp.yaml: oracle.variables[0]: variable x0: limits must be finite with low < high"),
        ("oracle: {expression: x0, variables: [{name: x0, low: 1}]}\n", "exp.yaml: oracle.variables[0].high: missing"),
        ("oracle: {expression: x0, variables: [{name: x0, low: 0, hihg: 1}]}\n",
         "exp.yaml: oracle.variables[0].hihg: unknown key; did you mean `high`?"),
        ("oracle: {expression: x0, variables: [{name: x0, low: 0, high: 1, dist: logunifrom}]}\n",
         "exp.yaml: oracle.variables[0].dist: unknown distribution 'logunifrom'; did you mean `loguniform`?"),
        ("oracle: {expression: x0, variables: [{name: x0, low: 0, high: 1}, {name: x0, low: 0, high: 1}]}\n",
         "exp.yaml: oracle.variables: variable names must be unique"),
        ("oracle: {catalog: sincos-3-2-2/1, variables: []}\n", "exp.yaml: oracle.variables: applies only to `expression`"),
        ("oracle: {catalog: sincos-3-2-2/1, output: {name: T}}\n",
         "exp.yaml: oracle.output: applies only to `expression`; a `catalog` oracle describes its own output"),
        ("oracle: {endpoint: tcp://h:1, output: {unit: s}}\n", "exp.yaml: oracle.output: applies only to `expression`"),
        ("oracle: {expression: x0, variables: [{name: x0, low: 0, high: 1}], output: T}\n",
         "exp.yaml: oracle.output: expected a mapping of keys (`name: ...`) for `oracle.output`, got 'T'"),
        ("oracle: {expression: x0, variables: [{name: x0, low: 0, high: 1}], output: {name: T, units: s}}\n",
         "exp.yaml: oracle.output.units: unknown key; did you mean `unit`?"),
        ("oracle: {expression: x0, variables: [{name: x0, low: 0, high: 1}], output: {name: T, unit: 5}}\n",
         "exp.yaml: oracle.output.unit: expected a string, got 5"),
        ("oracle: {expression: x0, variables: [{name: x0, low: 0, high: 1}], output: {name: 3}}\n",
         "exp.yaml: oracle.output.name: expected a string, got 3"),
        ("oracle: {expression: x0, variables: [{name: x0, low: 0, high: 1}], output: {name: 'T [s]'}}\n",
         "exp.yaml: oracle.output.name: 'T [s]' is not a usable name"),
        ("oracle: {expression: x0, variables: [{name: x0, low: 0, high: 1}], output: {name: x0}}\n",
         "exp.yaml: oracle.output.name: 'x0' is also a variable's name"),
        ("method: racing\n", "exp.yaml: oracle: missing"),
        ("- oracle\n", "exp.yaml: expected a mapping"),
        ("", "exp.yaml: the file is empty"),
        ("oracle: [\n  x: 1", "exp.yaml: line 2, column"),
    ],
)
def test_a_bad_file_gives_one_line_naming_the_file_and_the_key(tmp_path, monkeypatch, text, expected):
    write(tmp_path, text)
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ConfigError) as info:
        load_experiment("exp.yaml")
    message = str(info.value)
    assert message.startswith(expected), message
    assert "\n" not in message


def test_the_noise_is_auto_declared_or_none(tmp_path):
    auto = load_experiment(write(tmp_path, "oracle: {catalog: sincos-3-2-2/1}\nsearch: {noise_std: auto}\n"))
    assert auto.search.noise_std is None and auto.to_dict()["search"]["noise_std"] == "auto"
    assert load_experiment(write(tmp_path, "oracle: {catalog: sincos-3-2-2/1}\n")).search.noise_std is None
    declared = load_experiment(write(tmp_path, "oracle: {catalog: sincos-3-2-2/1}\nsearch: {noise_std: 0.02}\n"))
    assert declared.search.noise_std == 0.02 and declared.to_dict()["search"]["noise_std"] == 0.02
    assert declared.fingerprint() != auto.fingerprint()  # the replicates are questions the search asks


def test_a_missing_file_is_named(tmp_path):
    with pytest.raises(ConfigError, match=r"nope\.yaml: no such file"):
        load_experiment(tmp_path / "nope.yaml")
    with pytest.raises(ConfigError, match="is a folder"):
        load_experiment(tmp_path)


def test_messages_can_name_command_line_flags():
    with pytest.raises(ConfigError, match=r"^command line: --budget-points: must be an integer >= 1"):
        experiment_from_dict({"oracle": "sincos-3-2-2/1", "budget": {"points": 0}}, source="command line",
                             key_names={"budget.points": "--budget-points"})


def test_is_endpoint_tells_addresses_from_catalog_ids():
    assert is_endpoint("tcp://127.0.0.1:5555") and is_endpoint("ipc:///tmp/rig")
    assert not is_endpoint("feynman/I.8.14") and not is_endpoint("sincos-3-2-2/1")


def test_an_expression_can_name_y_and_its_unit(tmp_path):
    plain = load_experiment(write(tmp_path, GOOD))
    assert plain.oracle.output == Output("y", "") and "output" not in plain.to_dict()["oracle"]
    named = load_experiment(write(tmp_path, GOOD.replace("  noise:", "  output: {name: T, unit: s}\n  noise:")))
    assert named.oracle.output == Output("T", "s")
    assert named.to_dict()["oracle"]["output"] == {"name": "T", "unit": "s"}
    unit_only = load_experiment(write(tmp_path, GOOD.replace("  noise:", "  output: {unit: K}\n  noise:")))
    assert unit_only.oracle.output == Output("y", "K")
    again = experiment_from_dict(named.to_dict(), source="again", base_dir=tmp_path)
    assert again.oracle == named.oracle and again.fingerprint() == named.fingerprint()
    # The simulated oracle describes it, as a rig describes its Output
    from rcvgp.runner import build_oracle

    with build_oracle(named) as oracle:
        assert oracle.describe().output == Output("T", "s")


def test_to_dict_round_trips(tmp_path):
    cfg = load_experiment(write(tmp_path, GOOD))
    again = experiment_from_dict(cfg.to_dict(), source="again", base_dir=tmp_path)
    assert again.oracle == cfg.oracle and again.search == cfg.search
    assert again.seed == cfg.seed and again.output == cfg.output and again.fingerprint() == cfg.fingerprint()
