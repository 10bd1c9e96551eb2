"""The oracle interface: variable and spec validation, CallableOracle's checks of set points and
replies, and the control-variable experiment design."""

from __future__ import annotations

import numpy as np
import pytest

from rcvgp.errors import ConfigError, OracleError, OutOfLimitsError
from rcvgp.oracle import (
    CallableOracle,
    DataOracle,
    OracleSpec,
    Output,
    Variable,
    check_limits,
    check_reply,
    design_points,
    design_trials,
    spread_variable,
)


def _spec(**kw: object) -> OracleSpec:
    variables = (
        Variable("x0", 0.1, 10.0, "loguniform"),
        Variable("x1", 1.0, 2.0, "uniform", only_positive=False),
        Variable("x2", 0.0, 5.0, "integer_uniform"),
    )
    return OracleSpec(variables, **kw)  # type: ignore[arg-type]


# --- Variable and OracleSpec -------------------------------------------------------------------

@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"name": "", "low": 0, "high": 1}, "name"),
        ({"name": "a", "low": 1, "high": 1}, "low < high"),
        ({"name": "a", "low": 0, "high": float("inf")}, "finite"),
        ({"name": "a", "low": 0, "high": 1, "dist": "normal"}, "dist"),
        ({"name": "a", "low": 0, "high": 1, "dist": "loguniform"}, "loguniform"),
        ({"name": "a", "low": -1, "high": 1, "only_positive": False}, "only_positive"),
    ],
)
def test_variable_rejects_bad_settings(kwargs: dict[str, object], match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        Variable(**kwargs)  # type: ignore[arg-type]


def test_variable_support_with_and_without_sign_rule() -> None:
    pos = Variable("a", 1.0, 2.0)
    both = Variable("b", 1.0, 2.0, only_positive=False)
    values = np.array([-1.5, 0.0, 1.0, 1.5, 2.0, 2.5, np.nan])
    assert pos.contains(values).tolist() == [False, False, True, True, True, False, False]
    assert both.contains(values).tolist() == [True, False, True, True, True, False, False]
    assert both.describe_limits() == "[-2, -1] U [1, 2]"
    assert pos.describe_limits() == "[1, 2]"


def test_spec_validation() -> None:
    with pytest.raises(ConfigError, match="at least one variable"):
        OracleSpec(())
    with pytest.raises(ConfigError, match="unique"):
        OracleSpec((Variable("a", 0, 1), Variable("a", 0, 2)))
    with pytest.raises(ConfigError, match="max_rows"):
        OracleSpec((Variable("a", 0, 1),), max_rows=0)


def test_spec_dict_round_trip() -> None:
    spec = _spec(name="rig:1", max_rows=7, operators=("add", "sin"), output=Output("T", "K"))
    assert OracleSpec.from_dict(spec.to_dict()) == spec
    assert spec.n_vars == 3


# --- CallableOracle -------------------------------------------------------------------------------

def test_callable_oracle_measures() -> None:
    oracle = CallableOracle(lambda X: X[:, 0] + X[:, 1], _spec())
    X = np.array([[1.0, -1.5, 2.0], [0.5, 2.0, 0.0]])
    np.testing.assert_allclose(oracle.measure(X), [-0.5, 2.5])
    reached, y = oracle.measure_readback(X)
    np.testing.assert_array_equal(reached, X)


@pytest.mark.parametrize(
    ("row", "name"),
    [
        ([20.0, 1.5, 1.0], "x0"),
        ([0.05, 1.5, 1.0], "x0"),
        ([1.0, 0.5, 1.0], "x1"),
        ([1.0, -2.5, 1.0], "x1"),
        ([1.0, 1.5, 6.0], "x2"),
        ([np.nan, 1.5, 1.0], "x0"),
    ],
)
def test_set_points_outside_the_limits_are_refused(row: list[float], name: str) -> None:
    calls = []
    oracle = CallableOracle(lambda X: calls.append(X) or X[:, 0], _spec())
    with pytest.raises(OutOfLimitsError, match=f"variable {name} .* outside its limits"):
        oracle.measure(np.array([[1.0, 1.5, 1.0], row]))
    assert calls == []  # the function never saw the bad request
    assert issubclass(OutOfLimitsError, OracleError)


def test_set_points_of_wrong_shape_or_too_many_rows_are_refused() -> None:
    oracle = CallableOracle(lambda X: X[:, 0], _spec(max_rows=3))
    with pytest.raises(OracleError, match="shape"):
        oracle.measure(np.ones((2, 2)))
    with pytest.raises(OracleError, match="shape"):
        oracle.measure(np.ones(3))
    with pytest.raises(OracleError, match="exceed"):
        oracle.measure(np.ones((4, 3)))


@pytest.mark.parametrize(
    ("reply", "match"),
    [
        (lambda X: X[:, 0][:-1], "shape"),
        (lambda X: X[:, :2], "shape"),
        (lambda X: np.where(X[:, 0] > 0, np.inf, 0.0), "infinite"),
        (lambda X: ["a"] * len(X), "not numeric"),
    ],
)
def test_bad_replies_are_oracle_errors(reply, match: str) -> None:
    oracle = CallableOracle(reply, _spec())
    with pytest.raises(OracleError, match=match):
        oracle.measure(np.array([[1.0, 1.5, 1.0], [2.0, 1.5, 1.0]]))


def test_nan_replies_pass_and_column_replies_are_flattened() -> None:
    oracle = CallableOracle(lambda X: np.array([[np.nan], [1.0]]), _spec())
    y = oracle.measure(np.array([[1.0, 1.5, 1.0], [2.0, 1.5, 1.0]]))
    assert y.shape == (2,)
    assert np.isnan(y[0]) and y[1] == 1.0
    np.testing.assert_array_equal(check_reply([1, 2], 2), [1.0, 2.0])


def test_callable_oracle_needs_a_callable() -> None:
    with pytest.raises(ConfigError, match="callable"):
        CallableOracle(42, _spec())  # type: ignore[arg-type]


def test_check_limits_returns_contiguous_float64() -> None:
    X = check_limits(_spec(), np.asfortranarray(np.array([[1, 1, 1], [2, 2, 2]])))
    assert X.dtype == np.float64 and X.flags.c_contiguous


def test_oracle_is_a_context_manager() -> None:
    closed = []

    class Rig(DataOracle):
        def describe(self) -> OracleSpec:
            return _spec()

        def measure(self, X: np.ndarray) -> np.ndarray:
            return np.zeros(len(X))

        def close(self) -> None:
            closed.append(True)

    with Rig() as rig:
        assert rig.measure(np.ones((2, 3))).shape == (2,)
    assert closed == [True]


# --- experiment design ------------------------------------------------------------------------------

def test_design_holds_controlled_variables_within_each_trial() -> None:
    spec = _spec()
    X = design_trials(spec, {0, 2}, n_trials=6, n_points=40, rng=np.random.default_rng(0))
    assert X.shape == (6, 40, 3)
    for j in (0, 2):
        assert np.all(X[:, :, j] == X[:, :1, j])  # constant within a trial
    assert len(np.unique(X[:, 0, 0])) == 6  # a new value per trial
    assert all(len(np.unique(X[k, :, 1])) == 40 for k in range(6))  # the free one varies
    check_limits(spec, X.reshape(-1, 3))  # every point inside the limits


@pytest.mark.parametrize("n", [2, 5, 9])
def test_held_values_span_the_support_ends_and_one_in_each_part_between(n: int) -> None:
    rng = np.random.default_rng(3)
    uniform, logs = Variable("u", 0.3, 2.0), Variable("v", 1e-3, 10.0, "loguniform")
    values = spread_variable(uniform, n, rng)
    inside = np.sort(values)[1:-1]
    assert values.min() == 0.3 and values.max() == pytest.approx(2.0)  # both ends, in a random place
    assert np.array_equal(np.floor((inside - 0.3) / 1.7 * (n - 2)), np.arange(n - 2))  # one per part
    spread = np.log10(np.sort(spread_variable(logs, n, rng)))
    assert spread[0] == pytest.approx(-3) and spread[-1] == pytest.approx(1)
    assert np.array_equal(np.floor((spread[1:-1] + 3) / 4 * (n - 2)), np.arange(n - 2))  # parts of the log
    integers = spread_variable(Variable("k", 0.0, 5.0, "integer_uniform"), n, rng)
    assert integers.min() == 0 and integers.max() == 4 and np.all(integers == np.round(integers))
    orders = {tuple(np.argsort(spread_variable(uniform, n, np.random.default_rng(s)))) for s in range(20)}
    assert len(orders) > 1  # which trial holds which value is drawn


def test_design_samples_each_declared_distribution() -> None:
    X = design_points(_spec(), 4000, np.random.default_rng(1))
    assert X.shape == (4000, 3)
    logs = np.log10(X[:, 0])
    assert logs.min() >= -1 and logs.max() <= 1
    assert abs(np.mean(logs < 0) - 0.5) < 0.05  # loguniform: half the draws below 1
    assert abs(np.mean(X[:, 1] < 0) - 0.5) < 0.05  # sign rule: half negative
    assert np.all((np.abs(X[:, 1]) >= 1) & (np.abs(X[:, 1]) <= 2))
    assert set(np.unique(X[:, 2])) == {0.0, 1.0, 2.0, 3.0, 4.0}  # integers in [low, high)


def test_design_is_reproducible_from_the_rng() -> None:
    a = design_trials(_spec(), {1}, 3, 10, np.random.default_rng(5))
    b = design_trials(_spec(), {1}, 3, 10, np.random.default_rng(5))
    np.testing.assert_array_equal(a, b)


def test_design_rejects_controlled_variables_out_of_range() -> None:
    with pytest.raises(ConfigError, match="out of range"):
        design_trials(_spec(), {3}, 2, 5, np.random.default_rng(0))
