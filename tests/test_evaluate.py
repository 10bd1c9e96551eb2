"""Vectorised evaluation: agreement with sympy's lambdify, forward-mode derivatives, and plain
(unprotected) mathematics whose domain errors are judged by the fitness."""

from __future__ import annotations

import numpy as np
import pytest
import sympy

from rcvgp.constants import BAD_LOSS, Trials, fit_constants
from rcvgp.evaluate import evaluate, evaluate_with_grad
from rcvgp.gp import Grammar, random_tree
from rcvgp.metrics import regression_metrics
from rcvgp.operators import OPERATORS
from rcvgp.tree import Expr

ALL_OPS = tuple(OPERATORS)
SYMBOLS = sympy.symbols("x0 x1 x2", real=True)


def _lambdified(tree: Expr, consts: np.ndarray, X: np.ndarray) -> np.ndarray:
    fn = sympy.lambdify(SYMBOLS, tree.to_sympy(consts), "numpy")
    with np.errstate(all="ignore"):
        out = fn(X[:, 0], X[:, 1], X[:, 2])
    return np.broadcast_to(np.asarray(out, dtype=complex), (len(X),))


def test_evaluate_agrees_with_lambdify_on_random_trees() -> None:
    g = Grammar(ALL_OPS, (0, 1, 2))
    rng = np.random.default_rng(2024)
    X = rng.uniform(-3.0, 3.0, size=(64, 3))
    compared = 0
    for _ in range(300):
        tree = random_tree(g, rng, int(rng.integers(2, 6)))
        consts = rng.uniform(-2.0, 2.0, size=tree.n_consts)
        ours = evaluate(tree.tokens, X, consts)
        assert ours.shape == (64,)
        ref = _lambdified(tree, consts, X)
        # sympy may simplify (e.g. sqrt(x)**2 -> x), so compare only where both are finite reals.
        real = np.abs(ref.imag) == 0
        both = np.isfinite(ours) & np.isfinite(ref.real) & real & (np.abs(ours) < 1e8)
        np.testing.assert_allclose(ours[both], ref.real[both], rtol=1e-7, atol=1e-7, err_msg=str(tree))
        compared += int(both.sum())
    assert compared > 10_000


def test_evaluate_broadcasts_one_constant_vector_per_trial() -> None:
    tokens = ("add", "mul", "c", "x0", "c")
    rng = np.random.default_rng(0)
    X = rng.uniform(size=(3, 10, 2))
    consts = np.array([[1.0, 0.0], [2.0, 1.0], [-1.0, 5.0]])
    out = evaluate(tokens, X, consts)
    assert out.shape == (3, 10)
    for k in range(3):
        np.testing.assert_allclose(out[k], consts[k, 0] * X[k, :, 0] + consts[k, 1])


def test_evaluate_of_variable_free_tree_has_the_shape_of_the_data() -> None:
    out = evaluate(("sin", "c"), np.zeros((7, 2)), np.array([0.5]))
    assert out.shape == (7,)
    np.testing.assert_allclose(out, np.sin(0.5))


def test_evaluate_with_grad_agrees_with_finite_differences() -> None:
    g = Grammar(ALL_OPS, (0, 1, 2))
    rng = np.random.default_rng(7)
    X = rng.uniform(0.2, 2.0, size=(30, 3))
    checked = 0
    for _ in range(300):
        tree = random_tree(g, rng, int(rng.integers(2, 5)))
        if tree.n_consts == 0:
            continue
        consts = rng.uniform(0.5, 1.5, size=tree.n_consts)
        wrt = list(range(tree.n_consts))
        value, grads = evaluate_with_grad(tree.tokens, X, consts, wrt)
        np.testing.assert_array_equal(value, evaluate(tree.tokens, X, consts))
        for k in wrt:
            h = 1e-6 * max(1.0, abs(consts[k]))
            up, down = consts.copy(), consts.copy()
            up[k] += h
            down[k] -= h
            fd = (evaluate(tree.tokens, X, up) - evaluate(tree.tokens, X, down)) / (2 * h)
            ok = np.isfinite(fd) & np.isfinite(grads[k]) & (np.abs(value) < 1e6) & (np.abs(grads[k]) < 1e4)
            np.testing.assert_allclose(grads[k][ok], fd[ok], rtol=1e-4, atol=1e-5, err_msg=f"{tree} d/dc{k}")
            checked += int(ok.sum())
    assert checked > 1000


def test_derivatives_wrt_some_constants_in_any_order_are_those_of_all() -> None:
    """The backward sweep skips subtrees with no wanted constant; what it returns must not
    depend on which others are wanted or in what order they are asked for."""
    g = Grammar(ALL_OPS, (0, 1))
    rng = np.random.default_rng(3)
    X = rng.uniform(0.2, 2.0, size=(2, 20, 2))
    checked = 0
    for _ in range(1000):
        # Half the leaves of a random tree become constants.
        tokens = tuple("c" if t.startswith("x") and rng.random() < 0.5 else t
                       for t in random_tree(g, rng, int(rng.integers(3, 7))).tokens)
        n = tokens.count("c")
        if n < 2:
            continue
        consts = rng.uniform(0.5, 1.5, size=(2, n))
        _, every = evaluate_with_grad(tokens, X, consts, range(n))
        wrt = [int(k) for k in rng.permutation(n)[: n - 1]]
        _, some = evaluate_with_grad(tokens, X, consts, wrt)
        for k, grad in zip(wrt, some):
            np.testing.assert_array_equal(grad, every[k], err_msg=f"{tokens} d/dc{k}")
            checked += 1
    assert checked > 100


def test_evaluate_with_grad_gives_zero_for_constants_outside_wrt_path() -> None:
    tokens = ("add", "mul", "c", "x0", "sin", "c")
    X = np.linspace(0.1, 1.0, 5)[:, None]
    value, grads = evaluate_with_grad(tokens, X, np.array([2.0, 0.3]), [0, 1])
    np.testing.assert_allclose(grads[0], X[:, 0])
    np.testing.assert_allclose(grads[1], np.cos(0.3))
    assert grads[1].shape == (5,)


def test_literals_evaluate_to_their_values_and_have_no_derivative() -> None:
    tokens = ("add", "mul", "c", "x0", "sin", "-0.25")
    X = np.linspace(0.1, 1.0, 5)[:, None]
    value, grads = evaluate_with_grad(tokens, X, np.array([2.0]), [0])
    np.testing.assert_allclose(value, 2.0 * X[:, 0] + np.sin(-0.25))
    np.testing.assert_allclose(evaluate(tokens, X, np.array([2.0])), value)
    assert len(grads) == 1


def test_evaluate_with_grad_per_trial_constants() -> None:
    tokens = ("mul", "c", "sin", "mul", "c", "x0")
    X = np.random.default_rng(1).uniform(size=(2, 8, 1))
    consts = np.array([[1.5, 0.5], [2.0, 3.0]])
    value, (g0, g1) = evaluate_with_grad(tokens, X, consts, [0, 1])
    x = X[..., 0]
    np.testing.assert_allclose(value, consts[:, :1] * np.sin(consts[:, 1:] * x))
    np.testing.assert_allclose(g0, np.sin(consts[:, 1:] * x))
    np.testing.assert_allclose(g1, consts[:, :1] * x * np.cos(consts[:, 1:] * x))


# --- no protection: domain errors give NaN/inf and a fitness of inf ----------------------------

@pytest.mark.parametrize(
    ("tokens", "x"),
    [
        (("log", "x0"), -1.0),
        (("sqrt", "x0"), -4.0),
        (("div", "x1", "x0"), 0.0),
        (("inv", "x0"), 0.0),
        (("log", "x0"), 0.0),
        (("exp", "mul", "x0", "x0"), 40.0),
    ],
)
def test_domain_errors_stay_non_finite(tokens: tuple[str, ...], x: float) -> None:
    X = np.array([[x, 1.0], [2.0, 1.0]])
    out = evaluate(tokens, X)
    assert not np.isfinite(out[0])  # never a made-up finite number
    assert np.isfinite(out[1])


def test_a_zero_division_between_literals_is_non_finite_not_an_exception() -> None:
    # Found by livermore2/Vars6-14: Python floats raised ZeroDivisionError mid-search.
    X = np.array([[1.0], [2.0]])
    tokens = ("add", "x0", "div", "1", "sub", "2", "2")
    assert np.all(np.isinf(evaluate(tokens, X)))
    value, (grad,) = evaluate_with_grad(("mul", "c", *tokens), X, np.array([3.0]), [0])
    assert np.all(np.isinf(value)) and np.all(np.isinf(grad))


def test_log_of_negative_data_gets_infinite_fitness() -> None:
    rng = np.random.default_rng(0)
    X = rng.uniform(-2.0, 2.0, size=(2, 50, 1))
    y = 3.0 * X[..., 0] + 1.0
    fit = fit_constants(("add", "mul", "c", "log", "x0", "c"), Trials(X, y))
    assert fit.fitness == BAD_LOSS == np.inf
    assert np.all(fit.losses == np.inf)


def test_one_bad_point_makes_the_trial_loss_infinite() -> None:
    X = np.array([[[1.0], [2.0], [0.0], [3.0]]])
    y = np.array([[1.0, 0.5, 7.0, 0.3]])
    trials = Trials(X, y)
    pred = evaluate(("inv", "x0"), X)
    assert np.isinf(pred[0, 2])
    assert trials.losses(pred)[0] == np.inf


def test_nonfinite_prediction_scores_infinite_nmse() -> None:
    y = np.array([1.0, 2.0, 3.0])
    metrics = regression_metrics(y, np.array([1.0, np.nan, 3.0]))
    assert metrics["nmse"] == np.inf
    assert metrics["r2"] == -np.inf


def test_evaluate_emits_no_floating_point_warnings() -> None:
    # pytest runs with filterwarnings=error: a RuntimeWarning here would fail the test
    X = np.array([[-1.0, 0.0], [0.0, 0.0]])
    for tokens in (("log", "x0"), ("div", "x0", "x1"), ("sqrt", "x0"), ("exp", "inv", "x1")):
        evaluate(tokens, X)
        evaluate_with_grad(("mul", "c", tokens[0]) + tokens[1:], X, np.array([1.0]), [0])
