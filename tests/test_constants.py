"""Constant fitting: exact linear solves, every optimiser taking effect, NaN points dropped, and
data at Feynman scales (1e-25 .. 1e84)."""

from __future__ import annotations

import numpy as np
import pytest

from rcvgp.constants import FitResult, Trials, fit_constants, linear_constants, standard_errors
from rcvgp.errors import ConfigError
from rcvgp.evaluate import evaluate
from rcvgp.oracle import CallableOracle, OracleSpec, Variable
from rcvgp.search import OPTIMIZERS, SearchConfig
from rcvgp.search.engine import Run
from rcvgp.tree import parse

SIN_COS = ("add", "add", "mul", "c", "sin", "x0", "mul", "c", "cos", "x0", "c")  # c*sin(x0)+c*cos(x0)+c
C_SIN_CX = ("mul", "c", "sin", "mul", "c", "x0")  # c*sin(c*x0)


def _trials(fn, K: int = 3, m: int = 64, n: int = 1, low: float = -3.0, high: float = 3.0, seed: int = 0) -> Trials:
    rng = np.random.default_rng(seed)
    X = rng.uniform(low, high, size=(K, m, n))
    return Trials(X, fn(X))


# --- which constants are linear ------------------------------------------------------------------

@pytest.mark.parametrize(
    ("text_tokens", "expected"),
    [
        (SIN_COS, (0, 1, 2)),
        (C_SIN_CX, (0,)),
        (("sin", "c"), ()),
        (("div", "c", "add", "x0", "c"), (0,)),
        (("mul", "c", "mul", "c", "x0"), (0,)),  # only one factor's constants are linear
        (("sub", "neg", "c", "mul", "x0", "c"), (0, 1)),
        (("exp", "mul", "c", "x0"), ()),
        (("add", "mul", "-2.5", "x0", "mul", "c", "sin", "mul", "1.5", "x0"), (0,)),  # literals are not constants
    ],
)
def test_linear_constants(text_tokens: tuple[str, ...], expected: tuple[int, ...]) -> None:
    assert linear_constants(text_tokens) == expected


# --- exact linear solves --------------------------------------------------------------------------

def test_linear_constants_are_solved_exactly() -> None:
    trials = _trials(lambda X: 1.7 * np.sin(X[..., 0]) - 0.4 * np.cos(X[..., 0]) + 2.2)
    fit = fit_constants(SIN_COS, trials)
    assert fit.losses.shape == (3,)
    assert np.all(fit.losses < 1e-20)
    np.testing.assert_allclose(fit.constants, np.tile([1.7, -0.4, 2.2], (3, 1)), rtol=1e-12)


def test_literals_stay_fixed_while_the_open_constants_are_fitted() -> None:
    trials = _trials(lambda X: 1.7 * np.sin(X[..., 0]) - 0.4 * np.cos(X[..., 0]) + 2.2)
    # c0*sin(x0) - 0.5*cos(x0) + c1: the literal is off, so the fit is good but not exact
    tokens = ("add", "add", "mul", "c", "sin", "x0", "mul", "-0.5", "cos", "x0", "c")
    fit = fit_constants(tokens, trials)
    assert fit.constants.shape == (3, 2)
    assert np.all(fit.losses > 1e-6) and np.all(fit.losses < 1e-2)


def test_each_trial_gets_its_own_constants() -> None:
    rng = np.random.default_rng(3)
    X = rng.uniform(-3, 3, size=(4, 50, 1))
    a = np.array([1.0, -2.0, 0.5, 10.0])
    y = a[:, None] * np.sin(X[..., 0]) + 1.0
    fit = fit_constants(SIN_COS, Trials(X, y))
    np.testing.assert_allclose(fit.constants[:, 0], a, rtol=1e-10)
    np.testing.assert_allclose(fit.constants[:, 1], 0.0, atol=1e-10)
    assert np.all(fit.losses < 1e-20)


def test_tree_without_constants_is_just_scored() -> None:
    trials = _trials(lambda X: np.sin(X[..., 0]))
    fit = fit_constants(("sin", "x0"), trials)
    assert fit.constants.shape == (3, 0)
    assert np.all(fit.losses == 0.0)
    assert fit.n_evals == 1


def test_fitness_is_mean_loss_and_inf_if_any_trial_failed() -> None:
    assert FitResult(np.array([1e-3, 3e-3]), np.zeros((2, 0)), 1).fitness == pytest.approx(2e-3)
    assert FitResult(np.array([1e-3, np.inf]), np.zeros((2, 0)), 1).fitness == np.inf


# --- nonlinear constants and the optimisers -------------------------------------------------------

def test_nonlinear_constant_is_found_by_default_optimizer() -> None:
    trials = _trials(lambda X: 2.0 * np.sin(1.3 * X[..., 0]), K=2)
    fit = fit_constants(C_SIN_CX, trials, init=np.array([1.0, 1.2]))
    assert np.all(fit.losses < 1e-12)
    np.testing.assert_allclose(fit.constants, [[2.0, 1.3], [2.0, 1.3]], rtol=1e-6)


def test_a_constant_with_no_start_known_is_scanned_for_one() -> None:
    # sin(2/x) over x in 0.1..10: from 1.0, LM stops in a wrong period; the scan starts it in the right one
    X = np.exp(np.random.default_rng(0).uniform(np.log(0.1), np.log(10.0), size=(2, 256, 1)))
    trials = Trials(X, 3.0 + np.sin(2.0 / X[..., 0]))
    tokens = ("add", "c", "mul", "c", "sin", "div", "c", "x0")  # c + c*sin(c/x0)
    from_one = fit_constants(tokens, trials, init=np.ones(3))
    assert from_one.fitness > 0.1
    for init in (None, np.array([1.0, 1.0, np.nan])):
        found = fit_constants(tokens, trials, init=init)
        assert found.fitness < 1e-20
        np.testing.assert_allclose(found.constants, [[3.0, 1.0, 2.0]] * 2, rtol=1e-9)


def test_the_scan_finds_each_trial_its_own_start() -> None:
    # a decay rate per trial, from 0.5 to 40, with no start known: each trial's is found
    t = np.random.default_rng(1).uniform(0.0, 5.0, size=(4, 128, 1))
    rates = np.array([0.5, 3.0, 10.0, 40.0])
    trials = Trials(t, 2.0 * np.exp(-rates[:, None] * t[..., 0]))
    found = fit_constants(("mul", "c", "exp", "mul", "c", "x0"), trials)
    assert np.all(found.losses < 1e-20)
    np.testing.assert_allclose(found.constants[:, 1], -rates, rtol=1e-9)


def test_constants_with_no_start_known_are_scanned_for_from_the_inside_out() -> None:
    # logistic curves 10/(1 + a*exp(r*t)) as c/(c + exp(c*t)): the offset scanned for first,
    # with the rate at 1, settles where no rate fits (two of these); the rate first, then the
    # offset, fits all
    for a, r, high in ((54.6, -8.0, 1.0), (100.0, -2.0, 5.0), (54.6, -0.8, 10.0)):
        t = np.random.default_rng(3).uniform(0.0, high, size=(1, 256, 1))
        found = fit_constants(("div", "c", "add", "c", "exp", "mul", "c", "x0"),
                              Trials(t, 10.0 / (1.0 + a * np.exp(r * t[..., 0]))))
        assert found.fitness < 1e-20, (a, r)
        np.testing.assert_allclose(found.constants, [[10.0 / a, 1.0 / a, r]], rtol=1e-9)


def test_a_narrow_line_s_centre_is_started_where_the_readings_peak() -> None:
    # Lorentzian lines 5/(1 + ((x - x0)/w)**2) as c/(c + (c + x)**2), x in 0.9..1.1, one line
    # per trial: with the width at 1.0 the blind scan sees no centre, and its width then fits a
    # pole beside the line; a second start at the highest reading, scanned again, finds each
    x = np.random.default_rng(4).uniform(0.9, 1.1, size=(3, 256, 1))
    centre, width = np.array([[0.93], [1.0], [1.027]]), np.array([[0.01], [0.005], [0.02]])
    found = fit_constants(("div", "c", "add", "c", "n2", "add", "c", "x0"),
                          Trials(x, 5.0 / (1.0 + ((x[..., 0] - centre) / width) ** 2)))
    assert np.all(found.losses < 1e-20), found.losses
    np.testing.assert_allclose(found.constants[:, 2], -centre[:, 0], rtol=1e-9)
    # a trial whose readings in the scan's sample all failed has no peak there: no warning
    # (an error under pytest's settings), and the others are found as before
    y = 5.0 / (1.0 + ((x[..., 0] - centre) / width) ** 2)
    y[0, :64] = np.nan
    found = fit_constants(("div", "c", "add", "c", "n2", "add", "c", "x0"), Trials(x, y))
    assert np.all(found.losses[1:] < 1e-20), found.losses


def test_the_scan_starts_a_frequency_of_many_periods_in_its_basin() -> None:
    # cos(w*x), x in 1..5: w = 3.6 is 14% from the nearest of six values a decade (3.16), which
    # is 2 radians off at x = 5: LM from there ends in another minimum
    x = np.random.default_rng(2).uniform(1.0, 5.0, size=(4, 256, 1))
    w = np.array([2.7, 3.6, 3.9, 4.1])
    found = fit_constants(("mul", "c", "cos", "mul", "c", "x0"), Trials(x, 1.5 * np.cos(w[:, None] * x[..., 0])))
    assert np.all(found.losses < 1e-20), found.losses
    np.testing.assert_allclose(np.abs(found.constants[:, 1]), w, rtol=1e-9)


@pytest.mark.parametrize("maxiter", [1, 3, 20])
def test_reported_losses_are_those_of_the_reported_constants(maxiter: int) -> None:
    """LM's last accepted point is returned without evaluating it again: its losses and its
    linear and nonlinear constants must still belong together, stopped early or not."""
    trials = _trials(lambda X: 0.7 * np.sin(1.9 * X[..., 0]) + X[..., 0] / (0.8 + X[..., 0] ** 2) + 0.3, K=4)
    tokens = ("add", "add", "mul", "c", "sin", "mul", "c", "x0", "div", "x0", "add", "c", "mul", "x0", "x0", "c")
    fit = fit_constants(tokens, trials, maxiter=maxiter)
    assert linear_constants(tokens) == (0, 3) and np.all(np.isfinite(fit.losses))
    again = trials.losses(evaluate(tokens, trials.X, fit.constants))
    # Another iterate's losses differ by percents; rounding of residuals near 1e-9 of y, by 1e-8.
    np.testing.assert_allclose(fit.losses, again, rtol=1e-6, atol=1e-28)


def test_levenberg_marquardt_fits_to_rounding_where_bfgs_stalls() -> None:
    """c/(c + c*x0) + c*x1 has a redundant constant (numerator and denominator scale together):
    a flat valley along which BFGS stops early; Levenberg-Marquardt takes Gauss-Newton steps."""
    tokens = ("add", "div", "c", "add", "c", "mul", "c", "x0", "mul", "c", "x1")
    trials = _trials(lambda X: 1.0 / (X[..., 0] + 2.08) + 0.5 * X[..., 1], K=3, n=2, low=0.5, high=2.0)
    lm = fit_constants(tokens, trials, optimizer="LM", maxiter=20)
    bfgs = fit_constants(tokens, trials, optimizer="BFGS", maxiter=20)
    assert np.all(lm.losses < 1e-25), lm.losses
    assert np.max(bfgs.losses) > 1e3 * np.max(lm.losses)
    ratio = lm.constants[:, 0] / lm.constants[:, 1]  # c0 / c1 = 1 / 2.08
    np.testing.assert_allclose(ratio, 1 / 2.08, rtol=1e-10)


def test_levenberg_marquardt_survives_points_where_the_tree_is_undefined() -> None:
    """log(c*x0) is undefined for the starting c < 0: the trial keeps a finite-or-inf loss, no
    exception, and a trial that can be fitted still is."""
    rng = np.random.default_rng(5)
    X = rng.uniform(0.5, 2.0, size=(2, 64, 1))
    y = np.log(3.0 * X[..., 0])
    fit = fit_constants(("log", "mul", "c", "x0"), Trials(X, y), optimizer="LM", init=np.array([[-1.0], [1.0]]))
    assert fit.losses[1] < 1e-20
    assert not np.isfinite(fit.losses[0]) or fit.losses[0] >= 0


def test_every_optimizer_takes_effect() -> None:
    """Each optimiser name runs a different algorithm: the evaluation counts or constants differ,
    so the setting is never silently replaced by the default."""
    trials = _trials(lambda X: 2.0 * np.sin(1.3 * X[..., 0]), K=2)
    outcomes = {}
    for name in OPTIMIZERS:
        fit = fit_constants(C_SIN_CX, trials, optimizer=name, rng=np.random.default_rng(0), maxiter=20)
        assert fit.constants.shape == (2, 2)
        assert np.all(np.isfinite(fit.losses)), name
        outcomes[name] = (fit.n_evals, tuple(np.round(fit.constants.ravel(), 9)))
    assert len(set(outcomes.values())) == len(OPTIMIZERS), outcomes


def test_search_config_optimizer_reaches_the_fit() -> None:
    """The optimiser named in SearchConfig is the one Run.fit uses: each name gives a different fit."""
    spec = OracleSpec((Variable("x0", -3.0, 3.0),))
    oracle = CallableOracle(lambda X: 2.0 * np.sin(1.3 * X[:, 0]), spec)
    trials = _trials(lambda X: 2.0 * np.sin(1.3 * X[..., 0]), K=2)
    expr, _ = parse("2.0*sin(1.0*x0)")
    assert expr.n_consts == 2
    outcomes = {}
    for name in OPTIMIZERS:
        run = Run("gp", oracle, SearchConfig(optimizer=name, batch=16, n_trials=2), seed=0)
        fit = run.fit(expr, trials)
        outcomes[name] = (fit.n_evals, tuple(np.round(fit.constants.ravel(), 9)))
    assert len(set(outcomes.values())) == len(OPTIMIZERS), outcomes


def test_unknown_optimizer_is_a_config_error() -> None:
    trials = _trials(lambda X: 2.0 * np.sin(1.3 * X[..., 0]), K=1)
    with pytest.raises(ConfigError, match="optimizer"):
        fit_constants(C_SIN_CX, trials, optimizer="newton")
    with pytest.raises(ConfigError, match="`optimizer`.*did you mean `BFGS`"):
        SearchConfig(optimizer="BFSG")


# --- NaN points ------------------------------------------------------------------------------------

@pytest.mark.parametrize("tokens", [SIN_COS, C_SIN_CX])
def test_nan_points_are_dropped_from_fitting(tokens: tuple[str, ...]) -> None:
    rng = np.random.default_rng(4)
    X = rng.uniform(-3, 3, size=(1, 80, 1))
    y = 2.0 * np.sin(1.3 * X[..., 0]) + 0.1 * rng.normal(size=(1, 80))
    bad = np.zeros(80, dtype=bool)
    bad[[3, 17, 18, 40, 79]] = True
    y_nan = y.copy()
    y_nan[0, bad] = np.nan
    with_nan = fit_constants(tokens, Trials(X, y_nan))
    without = fit_constants(tokens, Trials(X[:, ~bad], y[:, ~bad]))
    assert np.all(np.isfinite(with_nan.losses))
    np.testing.assert_allclose(with_nan.constants, without.constants, rtol=1e-7, atol=1e-10)
    np.testing.assert_allclose(with_nan.losses, without.losses, rtol=1e-7)


def test_trials_mask_counts_measured_points() -> None:
    X = np.zeros((2, 4, 1))
    y = np.array([[1.0, np.nan, 2.0, 3.0], [np.nan, np.nan, 1.0, 1.0]])
    t = Trials(X, y)
    assert t.n_valid.tolist() == [3, 2]
    assert t.mask.sum() == 5


# --- Feynman scales ---------------------------------------------------------------------------------

def test_tiny_scale_linear_structure_fits_exactly() -> None:
    rng = np.random.default_rng(8)
    X = 10.0 ** rng.uniform(-11, -10, size=(3, 100, 2))
    y = 1.6e-5 * X[..., 0] * X[..., 1] + 3e-26  # y ~ 1e-25
    assert 1e-27 < np.abs(y).min() and np.abs(y).max() < 1e-24
    fit = fit_constants(("add", "mul", "c", "mul", "x0", "x1", "c"), Trials(X, y))
    assert np.all(fit.losses < 1e-20), fit.losses
    np.testing.assert_allclose(fit.constants, np.tile([1.6e-5, 3e-26], (3, 1)), rtol=1e-8)


def test_huge_scale_linear_structure_fits_exactly() -> None:
    rng = np.random.default_rng(9)
    X = 10.0 ** rng.uniform(10, 11, size=(3, 100, 2))
    y = 2.5e50 * X[..., 0] ** 2 * X[..., 1] + 7e72 * X[..., 1]  # y ~ 1e84
    assert np.abs(y).max() > 1e83
    tokens = ("add", "mul", "c", "mul", "n2", "x0", "x1", "mul", "c", "x1")
    fit = fit_constants(tokens, Trials(X, y))
    assert np.all(fit.losses < 1e-20), fit.losses
    np.testing.assert_allclose(fit.constants, np.tile([2.5e50, 7e72], (3, 1)), rtol=1e-8)


def test_mixed_scale_inputs_fit_exactly() -> None:
    """x from 1e-11 to 1e11 in one data set: unit-norm columns keep the solve well conditioned."""
    rng = np.random.default_rng(10)
    X = np.stack([10.0 ** rng.uniform(-11, -9, size=(2, 100)), 10.0 ** rng.uniform(9, 11, size=(2, 100))], axis=-1)
    y = 4.0e-3 * X[..., 0] + 9.0e-30 * X[..., 1]
    fit = fit_constants(("add", "mul", "c", "x0", "mul", "c", "x1"), Trials(X, y))
    assert np.all(fit.losses < 1e-20), fit.losses
    np.testing.assert_allclose(fit.constants, np.tile([4.0e-3, 9.0e-30], (2, 1)), rtol=1e-8)


def test_losses_beyond_the_square_root_of_the_largest_double_still_tell_trees_apart() -> None:
    """feynman/III.14.14 reaches y ~ 1e252: its variance is not a double, and dividing by an
    infinite variance used to score every tree 0, right or wrong."""
    rng = np.random.default_rng(11)
    X = rng.uniform(1.0, 3.0, size=(3, 100, 1))
    y = 1e250 * np.exp(X[..., 0])
    trials = Trials(X, y)
    right = fit_constants(("mul", "c", "exp", "x0"), trials)
    wrong = fit_constants(("mul", "c", "x0"), trials)
    assert np.all(right.losses < 1e-20), right.losses
    assert np.all(wrong.losses > 1e-3) and np.all(np.isfinite(wrong.losses)), wrong.losses
    np.testing.assert_allclose(right.constants, 1e250, rtol=1e-8)
    small = Trials(X, y / 1e250)
    np.testing.assert_allclose(trials.losses(1.01 * y), small.losses(1.01 * y / 1e250), rtol=1e-9)


def test_standard_errors_are_the_spread_of_constants_over_repeated_experiments() -> None:
    """The Gauss-Newton standard errors agree with the spread of the constants fitted to many
    noisy data sets (linear and nonlinear constants alike)."""
    rng = np.random.default_rng(0)
    tokens = ("add", "mul", "c", "x0", "sin", "mul", "c", "x1")  # c*x0 + sin(c*x1)
    sd = 0.01

    def experiment() -> Trials:
        X = rng.uniform(1, 2, (1, 500, 2))
        y = 1.5 * X[..., 0] + np.sin(0.7 * X[..., 1]) + sd * rng.standard_normal((1, 500))
        return Trials(X, y, noise_std=np.full(y.shape, sd))

    fitted = [fit_constants(tokens, t).constants[0] for t in (experiment() for _ in range(300))]
    one = experiment()
    predicted = standard_errors(tokens, one, fit_constants(tokens, one).constants[0])
    np.testing.assert_allclose(predicted, np.std(fitted, axis=0), rtol=0.15)


def test_standard_errors_of_constants_the_data_cannot_separate_are_infinite() -> None:
    rng = np.random.default_rng(1)
    X = rng.uniform(1, 2, (1, 100, 1))
    y = 3 * X[..., 0] + 0.01 * rng.standard_normal((1, 100))
    noisy = Trials(X, y, noise_std=np.full(y.shape, 0.01))
    product = ("mul", "mul", "c", "c", "x0")  # only the product of its constants is pinned, whatever their sizes
    for consts in ([1.0, 3.0], [1.5e-4, 2e4]):
        assert np.isinf(standard_errors(product, noisy, np.array(consts))).all()
    assert np.isfinite(standard_errors(("mul", "c", "x0"), noisy, np.array([3.0]))).all()
    # noiseless readings pin every constant
    assert (standard_errors(product, Trials(X, y), np.array([1.0, 3.0])) == 0).all()
