"""The noise floor: the noise model estimated from replicate readings, the floor and level of a set
of trials, and the test of "not distinguishably worse"."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest

from rcvgp.constants import Trials, fit_constants
from rcvgp.noisefloor import (
    EXACT_LOSS, LEAST_NOISE, WILD, NoiseModel, chance_rise, consistent, estimate_noise, floor_levels, not_worse, read_resolution,
    reading_weights, suspects, unlikely_sets, wild,
)


def _replicates(std: Callable[[np.ndarray], np.ndarray], n_points: int = 64, repeats: int = 8, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    truth = rng.uniform(1.0, 100.0, size=n_points)
    return truth[:, None] + std(truth)[:, None] * rng.standard_normal((n_points, repeats))


def test_additive_noise_is_estimated_from_replicates() -> None:
    model = estimate_noise(_replicates(lambda y: np.full_like(y, 0.5)))
    assert model.absolute == pytest.approx(0.5, rel=0.1)
    assert model.relative < 0.002  # 0.002 * 100 is a fifth of the noise at the largest reading
    assert model.dof == 64 * 7 and model.source == "replicates"
    assert model.uncertainty == pytest.approx(np.sqrt(2 / 448))


def test_noise_proportional_to_the_reading_is_estimated_as_relative() -> None:
    model = estimate_noise(_replicates(lambda y: 0.01 * y))
    assert model.relative == pytest.approx(0.01, rel=0.1)
    assert model.absolute < 0.1  # the noise at the smallest reading is 0.01


def test_noise_alike_on_every_reading_gets_no_part_proportional_to_the_reading() -> None:
    """Fitted freely, the proportional part comes out above zero for about half of such estimates
    by chance, and the search then weighed readings unequally for nothing (at SRBench's 1%, a
    third of the catalog's answers changed). It is kept only where the replicates show it."""
    for seed in range(20):
        alike = estimate_noise(_replicates(lambda y: np.full_like(y, 0.5), n_points=32, seed=seed))
        assert alike.relative == 0.0 and alike.absolute == pytest.approx(0.5, rel=0.2)
        proportional = estimate_noise(_replicates(lambda y: 0.01 * y, n_points=32, seed=seed))
        assert proportional.relative == pytest.approx(0.01, rel=0.2)


def test_noiseless_replicates_give_no_noise_and_failed_readings_are_left_out() -> None:
    y = np.repeat(np.arange(1.0, 5.0)[:, None] + np.pi, 8, axis=1)  # full doubles: 1, 2, ... would be rounded
    y[0, :7] = np.nan  # one reading left: says nothing about its spread
    model = estimate_noise(y)
    assert model.zero and model.dof == 3 * 7
    assert estimate_noise(np.full((3, 8), np.nan)).zero


def test_noise_model_std() -> None:
    model = NoiseModel(0.3, 0.02)
    assert model.std(np.array([0.0, 10.0])).tolist() == pytest.approx([0.3, np.sqrt(0.09 + 0.04)])
    with pytest.raises(ValueError, match="absolute"):
        NoiseModel(-1.0)


def _shown(y: np.ndarray, digits: int) -> np.ndarray:
    """Readings as a meter showing ``digits`` significant digits gives them."""
    return np.array([float(f"{v:.{digits - 1}e}") for v in np.ravel(y)]).reshape(np.shape(y))


def test_the_rounding_of_readings_is_read_off_their_digits() -> None:
    rng = np.random.default_rng(0)
    y = rng.uniform(0.1, 10.0, 200) * rng.choice([-1.0, 1.0], 200)
    assert read_resolution(y) == (0, 0.0)  # a double as the law computes it: no rounding seen
    assert read_resolution(_shown(y, 4)) == (4, 1e-4)  # the smallest readings, 0.1xxx, show 4 decimals
    fixed = np.round(rng.uniform(0.0, 12.4, 200), 3)  # a meter with three decimals, readings 0.00x to 12.xxx
    digits, step = read_resolution(fixed)
    assert step == 1e-3 and digits == 5
    assert read_resolution(_shown(y, 12))[0] == 12 and read_resolution(_shown(y, 13)) == (0, 0.0)
    assert read_resolution(np.array([0.0, np.nan])) == (0, 0.0)


def test_a_deterministic_rig_s_rounding_is_its_noise() -> None:
    """Replicates of a rig whose meter shows four digits agree to the last digit, yet no law fits
    its readings closer than that digit: the rounding is the noise, a step h adding h**2/12."""
    truth = np.random.default_rng(1).uniform(1.0, 100.0, 64)
    model = estimate_noise(np.repeat(_shown(truth, 4)[:, None], 8, axis=1))
    assert not model.zero and (model.absolute, model.relative) == (0.0, 0.0) and model.digits == 4
    assert model.std(np.array([1.234, 12.34, 56.78])) == pytest.approx(np.array([1e-3, 1e-2, 1e-2]) / np.sqrt(12))
    # noise beside the rounding: both counted
    noisy = estimate_noise(_shown(_replicates(lambda y: 0.01 * y), 4))
    assert noisy.relative == pytest.approx(0.01, rel=0.1) and noisy.digits == 4
    # a three-decimal meter: a reading of 0.005 is as rounded as one of 12.345
    fixed = NoiseModel(digits=5, resolution=1e-3)
    assert fixed.std(np.array([0.005, 12.345])) == pytest.approx(np.full(2, 1e-3 / np.sqrt(12)))
    assert NoiseModel.from_dict(model.to_dict()) == model
    assert NoiseModel.from_dict({"absolute": 0.1, "relative": None}) == NoiseModel(0.1)  # before digits were kept
    with pytest.raises(ValueError, match="digits"):
        NoiseModel(digits=-1)


@pytest.mark.parametrize("scale", [1e-80, 1.0, 1e80, 1e160])
def test_the_estimate_is_the_same_in_any_units_of_y(scale: float) -> None:
    """Readings of 1e160 (a Feynman law reaches 1e84) must not overflow the fit's squares."""
    model = estimate_noise(scale * _replicates(lambda y: 0.01 * y))
    plain = estimate_noise(_replicates(lambda y: 0.01 * y))
    assert model.relative == pytest.approx(plain.relative, rel=1e-9)
    assert model.absolute == pytest.approx(scale * plain.absolute, rel=1e-9, abs=1e-300)


def test_floor_is_what_the_noise_alone_scores_and_the_level_allows_for_chance() -> None:
    rng = np.random.default_rng(1)
    X = rng.uniform(0, 1, size=(3, 400, 1))
    truth = 2.0 * X[..., 0] + 1.0
    y = truth + 0.1 * rng.standard_normal(truth.shape)
    trials = Trials(X, y, noise_std=np.full(y.shape, 0.1))
    # a perfect model scores the noise: NMSE = 0.01 / Var(y) per trial
    assert trials.floor.expected == pytest.approx(0.01 / y.var(axis=1))
    fit = fit_constants(("add", "mul", "c", "x0", "c"), trials)
    assert fit.at_floor and fit.score == 0.0
    assert np.all(fit.losses < trials.floor.level)
    # a model that misses the slope is above it, by its excess over the noise
    wrong = fit_constants(("add", "mul", "c", "n2", "x0", "c"), trials)
    assert not wrong.at_floor and wrong.score == pytest.approx(wrong.fitness - trials.floor.mean_expected)
    # without noise the level is rounding
    plain = floor_levels(None, np.ones((2, 5), dtype=bool), np.ones(2), 0.0)
    assert plain.level.tolist() == [EXACT_LOSS, EXACT_LOSS] and plain.mean_expected == 0.0


def test_readings_of_unequal_noise_widen_the_level() -> None:
    """The loss of a perfect model fluctuates more when a few readings carry most of the noise:
    sqrt(2 * sum(v**2)) / sum(v) of its expected value, not sqrt(2 / n)."""
    mask = np.ones((1, 256), dtype=bool)
    even = floor_levels(np.full((1, 256), 1.0), mask, np.ones(1), 0.0)
    uneven = floor_levels(np.linspace(0.01, 1.99, 256)[None] ** 2, mask, np.ones(1), 0.0)
    assert even.level[0] - even.expected[0] == pytest.approx(3 * np.sqrt(2 / 256) * even.expected[0])
    assert (uneven.level[0] - uneven.expected[0]) / uneven.expected[0] > 1.5 * 3 * np.sqrt(2 / 256)


def test_level_widens_with_the_uncertainty_of_the_noise_estimate() -> None:
    mask = np.ones((1, 256), dtype=bool)
    known = floor_levels(np.full((1, 256), 1.0), mask, np.ones(1), 0.0)
    rough = floor_levels(np.full((1, 256), 1.0), mask, np.ones(1), 0.2)
    assert known.expected == rough.expected == pytest.approx([1.0])
    assert 1.0 < known.level[0] < rough.level[0]


def test_not_worse_judges_a_difference_against_the_noise() -> None:
    rng = np.random.default_rng(2)
    x = rng.uniform(0, 1, 256)
    truth = 3 * x + 1
    noise = np.full(256, 0.1)
    y = truth + 0.1 * rng.standard_normal(256)
    assert not_worse(y, 3.005 * x + 1, truth, noise)  # far inside the noise
    assert not not_worse(y, 3.3 * x + 1, truth, noise)  # a tenth of y's spread is visible
    # with no noise, any difference beyond rounding counts, however few the points it shows on
    exact = truth.copy()
    rare = truth + np.where(np.arange(256) == 7, 1e-3, 0.0)
    assert not not_worse(exact, rare, truth, np.zeros(256))
    assert not_worse(exact, truth * (1 + 1e-12), truth, np.zeros(256))
    assert not not_worse(exact, np.where(x > 0.5, np.inf, truth), truth, np.zeros(256))
    # finite, but so large that its squared errors overflow: worse, under noise as without it
    assert not not_worse(y, np.where(x > 0.5, 4e199, truth), truth, noise)
    assert not_worse(y, truth, np.where(x > 0.5, 4e199, truth), noise)  # the other way round it is better


def test_a_constant_set_to_a_simple_value_must_be_within_a_few_standard_errors() -> None:
    rng = np.random.default_rng(3)
    x = rng.uniform(0, 1, 1280)
    y = 2.86 * x + 0.1 * rng.standard_normal(1280)
    noise = np.full(1280, 0.1)
    slope = float(x @ y / (x @ x))  # the least-squares fit, standard error 0.1 / sqrt(x @ x)
    se = 0.1 / float(np.sqrt(x @ x))
    fitted = slope * x
    for moved, expected in ((1.0, True), (2.5, True), (4.0, False)):
        snapped = (slope + moved * se) * x
        assert consistent(y, snapped, fitted, noise) is expected, moved
    # four standard errors out is still not distinguishably worse as a prediction
    assert not_worse(y, (slope + 4.0 * se) * x, fitted, noise)
    # two constants moved allow a larger rise than one
    two = (slope + 3.2 * se) * x
    assert not consistent(y, two, fitted, noise) and consistent(y, two, fitted, noise, restrictions=2)
    # with no noise, rounding only
    assert consistent(2.86 * x, 2.86 * x * (1 + 1e-13), 2.86 * x, np.zeros(1280))
    assert not consistent(2.86 * x, 2.87 * x, 2.86 * x, np.zeros(1280))
    # the best of many restrictions looked at (a term chosen among 100) must rise further
    three = (slope + 3.5 * se) * x
    assert not consistent(y, three, fitted, noise) and consistent(y, three, fitted, noise, tries=100)


def test_the_rise_chance_gives_is_shared_among_the_restrictions_looked_at() -> None:
    from scipy.stats import chi2, norm

    assert chance_rise() == pytest.approx(9.0, rel=1e-9)  # a constant three standard errors out
    assert chance_rise(2) == pytest.approx(chi2.isf(2 * norm.sf(3.0), 2), rel=1e-9)
    for tries in (10, 100):
        assert chi2.sf(chance_rise(1, tries), 1) == pytest.approx(2 * norm.sf(3.0) / tries, rel=1e-6)


def test_no_reading_is_taken_as_quieter_than_the_replicates_showed() -> None:
    """Noise of 1% of each reading, replicates read at readings from 1 to 100: a reading of 0.001
    is not taken as known to 1e-5 (nor one of zero as exact), only to the noise the quietest
    replicates showed."""
    model = estimate_noise(_replicates(lambda y: 0.01 * y))
    truth_low = np.random.default_rng(0).uniform(1.0, 100.0, size=64).min()  # the quietest set point
    assert model.absolute == 0.0 and model.least == pytest.approx(model.relative * truth_low, rel=0.05)
    assert model.std(np.array([0.0, 1e-3, 50.0])) == pytest.approx([model.least, model.least, 50 * model.relative])
    assert NoiseModel.from_dict(model.to_dict()) == model
    # noise alike on every reading: the least is that noise, nothing changes
    alike = estimate_noise(_replicates(lambda y: np.full_like(y, 0.5)))
    assert alike.least == pytest.approx(alike.absolute) and alike.std(np.zeros(1)) == pytest.approx(alike.absolute)


def test_readings_are_weighted_by_the_inverse_of_their_noise() -> None:
    mask = np.array([[True, True, True, False], [True, True, True, True]])
    alike = np.full((2, 4), 0.3)
    assert reading_weights(None, mask) is None and reading_weights(alike, mask) is None  # no weighting
    std = np.array([[1.0, 2.0, 4.0, np.nan], [1.0, 1.0, 0.0, 1.0]])
    weight = reading_weights(std, mask)
    assert weight is not None
    assert weight[0, :3] == pytest.approx(np.array([4.0, 2.0, 1.0]) / np.sqrt(7.0))  # mean square 1
    assert weight[0, 3] == 1.0  # not measured: any finite number
    # a reading of no noise (zero under relative noise) counts as the least noise allowed, not as exact
    assert weight[1, 2] / weight[1, 0] == pytest.approx(1 / LEAST_NOISE)
    # the loss of the truth is what the floor expects of it, weighted as the fits are
    rng = np.random.default_rng(2)
    X = np.geomspace(0.01, 100.0, 400)[None, :, None]
    truth = 3.0 * X[..., 0]
    trials = Trials(X, truth * (1 + 0.01 * rng.standard_normal(truth.shape)), noise_std=0.01 * truth)
    assert trials.weight is not None
    assert trials.losses(truth)[0] == pytest.approx(trials.floor.expected[0], rel=0.2)
    # a loss reads as an NMSE: the weighted mean scores 1 (measured against y's spread unweighted,
    # any prediction scored about 1e-7 here, under every threshold the search has)
    w2 = trials.weight[0] ** 2
    assert trials.losses(np.full(truth.shape, w2 @ trials.y[0] / w2.sum()))[0] == pytest.approx(1.0)
    fit = fit_constants(("mul", "c", "x0"), trials)
    assert fit.at_floor and fit.constants[0, 0] == pytest.approx(3.0, rel=3 * 0.01 / np.sqrt(400))


def test_not_worse_weighs_readings_by_their_noise() -> None:
    """Noise of 1% of each reading, readings from 0.01 to 100: a scale 0.5% off is 11 standard
    errors off on all 512 readings, but unweighted only the few largest count, where it was
    within the noise."""
    for seed in range(5):
        rng = np.random.default_rng(seed)
        x = np.geomspace(0.01, 100.0, 512)
        std = 0.01 * x
        y = x + std * rng.standard_normal(512)
        assert not not_worse(y, 1.005 * x, x, std)
        assert not_worse(y, 1.001 * x, x, std)  # 2 standard errors


def test_readings_near_the_largest_float_are_judged_without_overflow() -> None:
    # feynman/III.14.14 reads up to exp(700); squares of such numbers overflow a Python float
    x = np.linspace(0, 1, 64)
    y = 1e300 * (1 + x)
    noise = NoiseModel(absolute=1e298, relative=0.01, dof=10, source="estimated")
    std = noise.std(y)
    assert std == pytest.approx(np.hypot(1e298, 0.01 * y))  # its variance, 1e596, is no double
    assert not_worse(y, y * (1 + 1e-13), y, std)
    assert not not_worse(y, 1e300 * (1 + 2 * x), y, std)
    assert consistent(y, y * (1 + 1e-5), y, std) and not consistent(y, y * 1.05, y, std)
    # the floor, in units of each trial's spread: as for the same readings in units of 1e300
    huge = floor_levels(std[None], np.ones((1, 64), dtype=bool), np.array([1e300 * np.std(1 + x)]), 0.1)
    plain = floor_levels(std[None] / 1e300, np.ones((1, 64), dtype=bool), np.array([np.std(1 + x)]), 0.1)
    assert huge.level == pytest.approx(plain.level) and huge.per_constant == pytest.approx(plain.per_constant)
    assert plain.per_constant > 0


def test_a_set_of_replicates_holding_a_wild_reading_is_told_from_the_rest() -> None:
    """One reading of a loose contact (the reading times 2.3) among 256 at 0.1% noise inflates
    the noise estimate by more than ten times; its set scatters beyond any chance, the others do not."""
    for seed in range(10):
        for std in (lambda y: np.full_like(y, 0.05), lambda y: 0.001 * y):
            y = _replicates(std, n_points=32, seed=seed)
            assert not unlikely_sets(y, estimate_noise(y)).any()
            y[seed, 3] *= 2.3
            inflated = estimate_noise(y)
            assert inflated.std(np.array([50.0]))[0] > 10 * estimate_noise(np.delete(y, seed, axis=0)).std(np.array([50.0]))[0]
            assert np.flatnonzero(unlikely_sets(y, inflated)).tolist() == [seed]
    assert not unlikely_sets(y, NoiseModel()).any()  # noiseless: nothing to judge by


def test_a_wild_reading_stands_out_of_a_good_fit_and_not_of_an_approximation() -> None:
    rng = np.random.default_rng(0)
    sd = np.full((2, 200), 0.1)
    mask = np.ones((2, 200), dtype=bool)
    none = np.zeros((2, 200), dtype=bool)
    residual = 0.1 * rng.standard_normal((2, 200))  # a fit to the noise floor
    residual[0, 17] += 5.0  # 50 standard deviations
    assert np.argwhere(suspects(residual, sd, mask, none, none)).tolist() == [[0, 17]]
    checked = none.copy()
    checked[0, 17] = True
    assert not suspects(residual, sd, mask, checked, none).any()  # measured again already
    # An approximation missing every reading by some ten standard deviations: none stands out.
    rough = residual + np.sin(np.linspace(0, 20, 200))
    rough[0, 17] = 1.5
    assert not suspects(rough, sd, mask, none, none).any()
    # A fit at the noise nominates up to a twentieth of a row's readings, the worst first ...
    many = residual.copy()
    many[1, :15] = np.arange(1, 16)
    assert np.argwhere(suspects(many, sd, mask, none, none)).tolist() == [[0, 17]] + [[1, i] for i in range(5, 15)]
    # ... an approximation (typical residual 5 standard deviations) a hundredth, of second
    # readings that agreed with the first: those that replaced a wild one do not count.
    skewed = many + 0.5 * rng.standard_normal((2, 200))
    skewed[1, :15] = 10 * np.arange(1, 16)
    assert np.argwhere(suspects(skewed, sd, mask, none, none)[1]).ravel().tolist() == [13, 14]
    agreed = none.copy()
    agreed[1, 14] = True
    assert np.argwhere(suspects(skewed, sd, mask, agreed, none)[1]).ravel().tolist() == [13]
    assert np.argwhere(suspects(skewed, sd, mask, agreed, agreed)[1]).ravel().tolist() == [12, 13]


def test_the_repeat_not_the_fit_decides_a_reading_is_wild() -> None:
    first, sd = np.array([10.0, 10.0, 10.0, 10.0]), np.full(4, 0.1)
    again = np.array([10.1, 10.0 + 0.99 * WILD * np.sqrt(2) * 0.1, 3.0, np.nan])
    assert wild(first, again, sd).tolist() == [False, False, True, False]
