"""The end of a search: the Pareto front, the choice of the law on it, snapping constants."""

from __future__ import annotations

from collections.abc import Callable
import math

import numpy as np
import pytest
import sympy

from rcvgp.search.choice import (
    constant_errors,
    Fitted, as_fractions, choose, collected, completed_squares, drop_negligible_terms, expanded,
    factored_polynomials, folded_exponentials, merged_logs, merged_roots, normalized_quotients,
    over_common_denominators, pareto_front, predict, refitted, shared_coefficients, shortened_series,
    joined_phases, simple_values, snap_constants, summed_angles, written_digits,
)
from rcvgp.tree import Expr

X = np.random.default_rng(0).uniform(1.0, 2.0, size=(256, 2))
TRUTH = 2.0 * X[:, 0] + 0.5 * X[:, 1] ** 2


def _noisy(seed: int) -> np.ndarray:
    return TRUTH + 0.05 * np.random.default_rng(seed).standard_normal(256)


def _fitted(n_nodes: int, prediction: np.ndarray, y: np.ndarray) -> Fitted:
    nmse = float(np.mean((y - prediction) ** 2) / np.var(y))
    return Fitted(Expr(("c",) * n_nodes), np.zeros(0), (frozenset(),), nmse, prediction, nmse)


def _candidates(y: np.ndarray) -> list[Fitted]:
    """A ladder of fits of the truth: the simplest misses a term, the middle one is the law, the
    biggest wiggles around it in a way that happens to follow the validation noise a little
    (correlation 0.16, within chance for 256 points), so that it is the best on paper."""
    wiggle = 0.01 * ((y - TRUTH) + 6 * 0.05 * np.random.default_rng(7).standard_normal(256))
    return [
        _fitted(3, 2.0 * X[:, 0] + np.mean(0.5 * X[:, 1] ** 2), y),  # the square term as its mean: a miss
        _fitted(5, np.full(256, y.mean()), y),  # a constant: worse than the simpler one, off the front
        _fitted(9, TRUTH, y),
        _fitted(15, TRUTH + wiggle, y),
    ]


def test_front_is_simplest_first_and_keeps_only_what_beats_every_simpler_fit() -> None:
    y = _noisy(1)
    front = pareto_front(reversed(_candidates(y)))
    assert [f.complexity for f in front] == [3, 9, 15]
    assert all(a.nmse_validation > b.nmse_validation for a, b in zip(front, front[1:]))


def test_the_law_is_the_simplest_fit_the_noise_cannot_tell_from_the_best() -> None:
    y = _noisy(2)
    front = pareto_front(_candidates(y))
    noise = np.full(256, 0.05)
    assert front[-1].nmse_validation < front[1].nmse_validation  # the overfit is best on paper
    assert front[choose(front, y, noise)].complexity == 9
    assert front[choose(front, y, noise, rule="accuracy")].complexity == 15
    with pytest.raises(ValueError, match="rule"):
        choose(front, y, noise, rule="smallest")


def test_without_noise_only_the_exact_law_is_as_good_as_the_best() -> None:
    near = _fitted(7, TRUTH * (1 + 1e-6), TRUTH)  # good to a millionth: not the law
    exact = _fitted(9, TRUTH.copy(), TRUTH)
    bigger = _fitted(12, TRUTH * (1 + 1e-15), TRUTH)  # as exact, bigger: rounding apart
    front = [near, exact, bigger]
    assert front[choose(front, TRUTH, np.zeros(256))].complexity == 9


def test_negligible_terms_are_dropped_at_any_depth_while_the_law_stays_within_rounding() -> None:
    # velocity addition over one denominator, with v up to 2e8: rounding left -16 beside v**2;
    # without it the numerator is v*(u + v) and the v cancels. 0.001/x, up to a tenth of the
    # law's values, stays, and so does a top-level term that matters
    u, v, x = sympy.symbols("u v x")
    rng = np.random.default_rng(0)
    UV = rng.uniform(1e7, 2e8, (256, 2))
    law = (u * v + v**2 - 16) / (v * (1.11265e-17 * u * v + 1))
    assert sympy.factor_terms(drop_negligible_terms(law, (u, v), UV)) == (u + v) / (1.11265e-17 * u * v + 1)
    X = rng.uniform(0.01, 1.0, (256, 1))
    assert drop_negligible_terms((x**2 + 0.001) / x, (x,), X) == (x**2 + 0.001) / x
    assert drop_negligible_terms(x + 3e-9 * x**2 + 0.5, (x,), X) == x + 0.5


def test_simple_values_go_from_zero_to_the_whole_number_and_quarters_of_the_value_s_decade() -> None:
    assert simple_values(2.26) == [0, 2, sympy.Rational(5, 2), sympy.Rational(7, 3), sympy.Rational(9, 4)]
    assert simple_values(-2.9999) == [0, -3]
    assert simple_values(0.6098) == [0, sympy.Float(0.6)]  # 6.098: 6 is nearest in every denominator
    assert simple_values(0.26) == [0, sympy.Float(0.3), sympy.Rational(1, 4)]  # not 4/15, a third of a decade
    assert simple_values(16.97) == [0, 20, 15, sympy.Rational(50, 3)]
    # whole numbers and halves of a decade are the same in any units (thirds and quarters of a
    # decade other than the value's own make no simple number: 7/3e-6 is none)
    assert simple_values(4.99997e-7) == [0, sympy.Float(5e-7)] and simple_values(4.99997) == [0, 5]
    assert simple_values(6098.0) == [0, 6000] and simple_values(2.26e-6) == [0, sympy.Float(2e-6), sympy.Float(2.5e-6)]
    assert simple_values(float("nan")) == [0] and simple_values(0.0) == [0]
    # a million or more reads as a float: 7.25e+22, not 72500000000000000000000
    assert simple_values(7.2499e22) == [0, sympy.Float(7e22), sympy.Float(7.25e22)]
    assert str(simple_values(7.2499e22)[-1] * sympy.Symbol("x")) == "7.25e+22*x"


def test_each_float_of_a_law_gets_the_standard_error_its_readings_leave() -> None:
    """A line's slope and intercept get the textbook errors, in the order the law is written;
    a snapped (exact) number has none; a float the readings cannot tell from another gets inf."""
    x = sympy.Symbol("x")
    X = np.random.default_rng(0).uniform(0.0, 10.0, (1000, 1))
    std = np.full(1000, 0.3)
    spread = float(((X[:, 0] - X[:, 0].mean()) ** 2).sum())
    slope_se, intercept_se = 0.3 / np.sqrt(spread), 0.3 * np.sqrt(1e-3 + X[:, 0].mean() ** 2 / spread)
    (v1, e1), (v2, e2) = constant_errors(sympy.Float(1.5) * x + sympy.Float(0.25), [x], X, std)
    assert (v1, v2) == (1.5, 0.25)
    assert e1 == pytest.approx(slope_se, rel=1e-9) and e2 == pytest.approx(intercept_se, rel=1e-9)
    assert constant_errors(sympy.Rational(3, 2) * x + sympy.Float(0.25), [x], X, std) == ((0.25, pytest.approx(
        0.3 / np.sqrt(1000), rel=1e-9)),)
    assert constant_errors(3 * x, [x], X, std) == ()
    traded = constant_errors(sympy.log(sympy.Float(2.0) * x) + sympy.Float(0.5), [x], X, std)
    assert [e for _, e in traded] == [np.inf, np.inf]  # only log(2) + 0.5 is told
    unread = constant_errors(sympy.Float(1.5) * x, [x], X, np.full(1000, np.nan))  # every reading failed
    assert unread == ((1.5, np.inf),)


def test_snapping_replaces_constants_within_noise_and_keeps_the_rest() -> None:
    x0, x1 = sympy.symbols("x0 x1", positive=True)
    y = _noisy(3)
    noise = np.full(256, 0.05)
    found = 2.0004 * x0 + 0.49991 * x1**2 + 0.0012 + 0.6098 * sympy.sin(1.9e-5 * x1)
    reference = predict(found, [x0, x1], X)

    def within_noise(e: sympy.Expr) -> bool:
        from rcvgp.noisefloor import not_worse

        return not_worse(y, predict(e, [x0, x1], X), reference, noise)

    snapped = snap_constants(found, within_noise)
    assert snapped == 2 * x0 + x1**2 / 2  # the tiny sine's argument snapped to 0, then 0.0012 too
    # in other units of y the same constants snap, to the same values in those units
    scaled = snap_constants(1e-6 * found, lambda e: within_noise(1e6 * e))
    assert sympy.simplify(scaled - 1e-6 * snapped) == 0
    # without noise only what rounding allows moves: a slope of 3 + 1e-13 is 3, 0.6098 stays
    exact = 3.0000000000001 * x0 + 0.6098 * x1
    values = predict(exact, [x0, x1], X)
    kept = snap_constants(exact, lambda e: bool(np.max(np.abs(predict(e, [x0, x1], X) - values)) < 1e-9))
    assert kept == 3 * x0 + sympy.Float(0.6098) * x1


def test_a_phase_within_noise_of_a_quarter_turn_snaps_to_it() -> None:
    # a travelling wave at 1% came back as 0.01*cos(6.27873*x - 31.4046*t + 4.71335): the phase
    # is 3*pi/2 as far as the readings tell, and cos(u + 3*pi/2) is sin(u). A phase the readings
    # pin elsewhere stays, and so does one they cannot pin at all (a wave of amplitude 0)
    from rcvgp.noisefloor import not_worse

    x, t = sympy.symbols("x t")
    rng = np.random.default_rng(0)
    XT = rng.uniform((0.0, 0.0), (1.0, 0.2), (4096, 2))
    noise = np.full(4096, 7e-5)

    def snapped(found: sympy.Expr) -> sympy.Expr:
        """``found`` snapped against readings of itself at noise 7e-5 (1% of the wave's spread)."""
        reference = predict(found, [x, t], XT)
        y = reference + 7e-5 * rng.standard_normal(4096)
        return snap_constants(found, lambda e: not_worse(y, predict(e, [x, t], XT), reference, noise))

    wave = snapped(0.01 * sympy.cos(6.28 * x - 31.4 * t + 4.71335))
    assert wave.has(sympy.sin) and not wave.has(sympy.cos)
    assert np.allclose(predict(wave, [x, t], XT), 0.01 * np.sin(6.28 * XT[:, 0] - 31.4 * XT[:, 1]), rtol=0, atol=1e-15)
    assert snapped(0.01 * sympy.cos(6.28 * x - 31.4 * t + 1.8708)).has(sympy.Float(1.8708))
    assert not snapped(0.01 * sympy.sin(6.28 * x - 31.4 * t) + 1e-9 * sympy.cos(x + t + 1.5)).has(sympy.pi)


def test_constants_the_data_pin_down_only_together_snap_with_the_others_refitted() -> None:
    # A charging curve at 5% noise: amplitude and rate are correlated, so snapping one while the
    # other stays where the joint fit put it can look inconsistent with the readings.
    from scipy.optimize import curve_fit

    from rcvgp.noisefloor import consistent

    t = sympy.Symbol("t")
    rng = np.random.default_rng(0)
    law = 5 - 5 * sympy.exp(-100 * t)
    found: dict[str, int] = {"alone": 0, "refitted": 0}
    for _ in range(20):
        times = rng.uniform(0.0, 0.05, (300, 1))
        truth = predict(law, [t], times)
        sd = np.full(300, 0.05 * truth.std())
        y = truth + sd * rng.standard_normal(300)
        a, b, k = curve_fit(lambda x, a, b, k: a - b * np.exp(-k * x), times[:, 0], y, p0=[1.0, 1.0, 50.0])[0]
        raw = sympy.Float(a) - sympy.Float(b) * sympy.exp(-sympy.Float(k) * t)
        on_raw = predict(raw, [t], times)

        def accept(e: sympy.Expr) -> bool:
            return consistent(y, predict(e, [t], times), on_raw, sd, 3 - len(e.atoms(sympy.Float)))

        snapped = snap_constants(raw, accept, lambda e, at, free: refitted(e, [t], at, free, times, y, sd))
        assert snapped == law or not accept(law)  # the law itself 3 standard deviations out: 1 draw in 20
        found["refitted"] += snapped == law
        found["alone"] += snap_constants(raw, accept) == law
    assert found["refitted"] >= 19 and found["alone"] < found["refitted"]


def test_two_constants_the_data_take_as_one_are_tied_and_others_are_not() -> None:
    # 8.314*n*log(V2/V1) at 1% noise, fitted as a*n*log(V2) - b*n*log(V1): a and b differ by
    # their noise, and as one number the sum reads as one log; 7.93*log(V2) - 8.61*log(V1) stays
    from scipy.optimize import curve_fit

    from rcvgp.noisefloor import consistent

    n, v1, v2 = sympy.symbols("n V1 V2", positive=True)
    rng = np.random.default_rng(1)
    X = np.column_stack([rng.uniform(0.1, 2.0, 2000), rng.uniform(1e-3, 1e-2, 2000), rng.uniform(1e-2, 1e-1, 2000)])
    for a, b in ((8.314, 8.314), (7.93, 8.61)):
        truth = X[:, 0] * (a * np.log(X[:, 2]) - b * np.log(X[:, 1]))
        sd = np.full(2000, 0.01 * truth.std())
        y = truth + sd * rng.standard_normal(2000)
        (fa, fb), _ = curve_fit(lambda x, p, q: x[0] * (p * np.log(x[2]) - q * np.log(x[1])), X.T, y, p0=[1.0, 1.0])
        raw = sympy.Float(fa) * n * sympy.log(v2) - sympy.Float(fb) * n * sympy.log(v1)
        assert fa != fb
        on_raw = predict(raw, [n, v1, v2], X)

        def accept(e: sympy.Expr) -> bool:
            return consistent(y, predict(e, [n, v1, v2], X), on_raw, sd, 2 - len(e.atoms(sympy.Float)))

        snapped = snap_constants(raw, accept, lambda e, at, free: refitted(e, [n, v1, v2], at, free, X, y, sd))
        sizes = {abs(float(f)) for f in snapped.atoms(sympy.Float)}
        if a == b:
            (c,) = sizes
            assert sympy.expand(snapped - sympy.Float(c) * n * (sympy.log(v2) - sympy.log(v1))) == 0
            assert c == pytest.approx(8.314, rel=2e-3)
        else:
            assert len(sizes) == 2


def test_a_function_of_an_argument_small_over_the_data_becomes_its_series_where_the_data_allow() -> None:
    # T**4 at 1% noise, fitted as c - c*cos(a*T**2): over 200..1000 K the cosine's argument stays
    # below 0.05, and 1 - u**2/2 is the law; a cosine that turns over the data stays a cosine
    from rcvgp.noisefloor import not_worse

    T = sympy.Symbol("T", positive=True)
    rng = np.random.default_rng(0)
    temps = rng.uniform(200.0, 1000.0, (1000, 1))
    truth = 5.67e-8 * temps[:, 0] ** 4
    sd = 0.01 * truth.std()
    y = truth + sd * rng.standard_normal(1000)

    def accept_for(found: sympy.Expr, y: np.ndarray, sd: float) -> Callable[[sympy.Expr], bool]:
        reference = predict(found, [T], temps)
        return lambda e: not_worse(y, predict(e, [T], temps), reference, np.full(1000, sd))

    found = 45569500 - 45569500 * sympy.cos(sympy.Float(4.98904e-8) * T**2)
    shortened = shortened_series(found, accept_for(found, y, sd))
    assert shortened.free_symbols == {T} and sympy.Poly(shortened, T).monoms() == [(4,)]
    assert float(shortened.coeff(T, 4)) == pytest.approx(5.67e-8, rel=1e-3)
    turning = 3.0 * sympy.cos(sympy.Float(0.01) * T)  # 2 to 10 rad over the data
    wave = predict(turning, [T], temps)
    y = wave + 0.01 * wave.std() * rng.standard_normal(1000)
    assert shortened_series(turning, accept_for(turning, y, 0.01 * wave.std())) == turning
    # a quotient by 1 + u, u small over the data, standing for a line: 1.2*T as 1e5 - 1e5/(1 + 1.2e-5*T)
    line = 1.2 * temps[:, 0]
    y = line + 0.01 * line.std() * rng.standard_normal(1000)
    pole = 100000 - 100000 / (1 + sympy.Float(1.2e-5) * T)
    assert shortened_series(pole, accept_for(pole, y, 0.01 * line.std())) == sympy.Float(1.2) * T
    near = 1 / (1 + sympy.Float(0.01) * T)  # 1/3 to 1/11 over the data: no line
    curve = predict(near, [T], temps)
    y = curve + 0.01 * curve.std() * rng.standard_normal(1000)
    assert shortened_series(near, accept_for(near, y, 0.01 * curve.std())) == near


def test_a_series_drops_what_two_constants_fitted_a_hair_apart_leave() -> None:
    # (sin(a)/a)**2 at 1% noise, fitted as c1 - c2*cos(k*sin(a)/a) with c1 and c2 a hair apart:
    # 1 - u**2/2 leaves (c1 - c2) beside the law, which no reading can tell from 0
    from rcvgp.noisefloor import not_worse

    a = sympy.Symbol("a", positive=True)
    rng = np.random.default_rng(0)
    angles = rng.uniform(0.1, 10.0, (1000, 1))
    truth = (np.sin(angles[:, 0]) / angles[:, 0]) ** 2
    sd = np.full(1000, 0.01 * truth.std())
    y = truth + sd * rng.standard_normal(1000)
    found = sympy.Float(4264.1782048678) - sympy.Float(4264.17828241095) * sympy.cos(
        sympy.Float(0.0216583572060303) * sympy.sin(a) / a)
    reference = predict(found, [a], angles)
    shortened = shortened_series(found, lambda e: not_worse(y, predict(e, [a], angles), reference, sd))
    assert not shortened.has(sympy.cos)
    assert sympy.simplify(shortened / (sympy.sin(a) ** 2 / a**2)) == pytest.approx(1.0, rel=1e-3)


def test_a_series_is_judged_with_its_constants_fitted_again() -> None:
    # 1.2*T + 30*sqrt(T) at 1% noise, fitted as A - B/(1 + u*T) + d*sqrt(T): the quotient's
    # curvature, as small as the readings allow, has bent d and A - B away from the law, so the
    # series as fitted is worse than the fit by more than noise; refitted, it is the law
    from scipy.optimize import least_squares

    from rcvgp.noisefloor import not_worse

    T = sympy.Symbol("T", positive=True)
    rng = np.random.default_rng(0)
    temps = rng.uniform(200.0, 1000.0, (2000, 1))
    t = temps[:, 0]
    truth = 1.2 * t + 30 * np.sqrt(t)
    sd = np.full(len(t), 0.01 * truth.std())
    y = truth + sd * rng.standard_normal(len(t))
    start = [4e4, 4e4, 3e-5, 30.0]
    fit = least_squares(lambda p: (p[0] - p[1] / (1 + p[2] * t) + p[3] * np.sqrt(t) - y) / sd, start, x_scale=start)
    A, B, u, d = (sympy.Float(v) for v in fit.x)
    found = A - B / (1 + u * T) + d * sympy.sqrt(T)
    reference = predict(found, [T], temps)

    def accept(e: sympy.Expr) -> bool:
        return not_worse(y, predict(e, [T], temps), reference, sd)

    assert shortened_series(found, accept) == found
    shortened = shortened_series(found, accept, refit=lambda e, at, free: refitted(e, [T], at, free, temps, y, sd))
    assert set(sympy.Add.make_args(shortened)) == {shortened.coeff(T) * T, shortened.coeff(sympy.sqrt(T)) * sympy.sqrt(T)}
    assert float(shortened.coeff(T)) == pytest.approx(1.2, rel=1e-2)
    assert float(shortened.coeff(sympy.sqrt(T))) == pytest.approx(30.0, rel=1e-2)


def test_a_constant_inside_an_absolute_value_has_a_standard_error() -> None:
    # a law a restart of feynman/I.8.14 chose at 1% held |x1 - x0 + c|: its slope in c went
    # through re(c), which numpy cannot print, and the run ended in a traceback, not a result
    x0, x1 = sympy.symbols("x0 x1", real=True, nonzero=True)
    law = sympy.Float(2.5) * sympy.Abs(-x0 + x1 + sympy.Float(0.117))
    X = np.random.default_rng(0).uniform(1.0, 2.0, (200, 2))
    errors = dict(constant_errors(law, [x0, x1], X, np.full(200, 0.01)))
    assert set(errors) == {2.5, 0.117} and all(0 < e < 0.1 for e in errors.values())


def test_a_peak_is_written_about_its_centre() -> None:
    x, y = sympy.symbols("x y", positive=True)
    fitted = sympy.Float(7.45331e-6) * sympy.exp(50 * x / 3) * sympy.exp(sympy.Float(-5.55556) * x**2) + y
    written = completed_squares(fitted)
    height, centre = sympy.Wild("h"), sympy.Wild("m")
    match = (written - y).match(height * sympy.exp(sympy.Float(-5.55556) * (x + centre) ** 2))
    assert match and float(match[height]) == pytest.approx(2.0, rel=1e-4) and float(match[centre]) == pytest.approx(-1.5, rel=1e-4)
    points = np.random.default_rng(0).uniform(0.5, 3.0, size=(100, 2))
    np.testing.assert_allclose(predict(written, [x, y], points), predict(fitted, [x, y], points), rtol=1e-9)
    # left as they are: a rising exponent, one of two variables, one already about its centre
    for other in (sympy.exp(sympy.Float(0.3) * x + sympy.Float(0.01) * x**2), 3 * sympy.exp(-x**2 + 2 * x * y),
                  2 * sympy.exp(-((x - 1) ** 2)), x**2 * sympy.exp(-x)):
        assert completed_squares(other) is other
    # A Lorentzian line as divided through, about its centre: divided through again, it snaps.
    f = sympy.Symbol("f", positive=True)
    line = sympy.Float(0.0019992) / (sympy.Float(9.996e-5) * f**2 - sympy.Float(0.019992) * f + 1)
    written = normalized_quotients(completed_squares(line), [f], points[:, :1] * 10 + 90)
    np.testing.assert_allclose(predict(written, [f], points[:, :1] * 10 + 90),
                               predict(line, [f], points[:, :1] * 10 + 90), rtol=1e-9)
    assert snap_constants(written, lambda e: np.allclose(predict(e, [f], points[:, :1] * 10 + 90),
                                                         predict(line, [f], points[:, :1] * 10 + 90), rtol=1e-3)) \
        == 5 / ((f - 100) ** 2 / 4 + 1)
    for other in (1 / (f**2 - 3 * f + 2), 1 / (f**2 + 1), 1 / (f**2 + f * x + 1)):  # real roots; none to move; two variables
        assert completed_squares(other) is other


def test_roots_of_sums_in_a_product_are_taken_as_one() -> None:
    m, v = sympy.symbols("m v", positive=True)
    a = sympy.Float(3.33564e-9)
    fitted = sympy.Float(8.98755e16) * m / (sympy.sqrt(1 - a * v) * sympy.sqrt(1 + a * v))
    assert merged_roots(fitted) == sympy.Float(8.98755e16) * m / sympy.sqrt(1 - a**2 * v**2)
    points = np.random.default_rng(0).uniform(1e7, 2.5e8, size=(50, 2))
    np.testing.assert_allclose(predict(merged_roots(fitted), [m, v], points), predict(fitted, [m, v], points), rtol=1e-12)
    for other in (sympy.sqrt(m) * sympy.sqrt(v), sympy.sqrt(m + 1) * (v + 2), sympy.sqrt(m + 1) * sympy.cbrt(v + 2)):
        assert merged_roots(other) is other


def test_logs_in_a_sum_are_taken_as_one_where_that_is_shorter() -> None:
    p, b, m0, mf = sympy.symbols("P B m0 mf", positive=True)
    assert merged_logs(b * (sympy.log(m0) - sympy.log(mf))) == b * sympy.log(m0 / mf)
    shannon = b * (sympy.log(100 * p + sympy.Float(0.1)) + sympy.Float(np.log(10.0)))
    merged = merged_logs(shannon)
    assert len(merged.atoms(sympy.log)) == 1 and not merged.has(sympy.Float(np.log(10.0)))
    points = np.random.default_rng(1).uniform(1e-3, 1.0, size=(50, 4))
    np.testing.assert_allclose(predict(merged, [p, b, m0, mf], points), predict(shannon, [p, b, m0, mf], points), rtol=1e-12)
    nernst = sympy.expand(sympy.Float(0.0257) * (sympy.log(m0) - sympy.log(mf)))  # a number and a sum, distributed
    assert merged_logs(nernst) == sympy.Float(0.0257) * sympy.log(m0 / mf)
    for other in (sympy.log(p) + 2, 3 * sympy.log(p) + 1, sympy.log(p) + p, 2 * sympy.log(m0) - 3 * sympy.log(mf)):
        assert merged_logs(other) is other  # none shorter merged, or no coefficient shared


def test_a_factor_of_an_exponential_is_taken_into_its_exponent_for_the_snapping_to_judge() -> None:
    e, t = sympy.symbols("E t", positive=True)
    fermi = 1 / (sympy.Float(2.06115e-9) * sympy.exp(40 * e) + 1)
    folded = folded_exponentials(fermi)
    assert folded.atoms(sympy.exp) == {sympy.exp(40 * e + sympy.Float(np.log(2.06115e-9)), evaluate=False)}
    points = np.linspace(0.0, 1.0, 50)[:, None]
    np.testing.assert_allclose(predict(folded, [e], points), predict(fermi, [e], points), rtol=1e-12)
    assert snap_constants(folded, lambda f: np.allclose(predict(f, [e], points), predict(fermi, [e], points),
                                                        rtol=1e-5)) == 1 / (sympy.exp(40 * e - 20) + 1)
    # A sign stays in front; a float left in an exponent goes back out, as sympy writes it.
    folded = folded_exponentials(sympy.Float(-54.6) * t * sympy.exp(sympy.Float(-0.8) * t))
    assert folded.as_coeff_Mul()[0] == -1 and sympy.sympify(str(folded)).as_coeff_Mul()[0] == pytest.approx(-54.6)
    for other in (2 * sympy.exp(t), sympy.Float(2.5) * sympy.exp(t) * sympy.exp(e), sympy.Float(2.5) * t):
        assert folded_exponentials(other) == other  # no float in front, two exponentials, none


def test_a_polynomial_with_exact_coefficients_is_factored_where_that_is_shorter() -> None:
    x0, x2, x3 = sympy.symbols("x0 x2 x3", positive=True)
    response = sympy.Float(0.0111186) * x0**2 * x2**4 / (x2**4 - 2 * x2**2 * x3**2 + x3**4)  # feynman/I.32.17
    assert factored_polynomials(response) == sympy.Float(0.0111186) * x0**2 * x2**4 / ((x2 - x3) ** 2 * (x2 + x3) ** 2)
    assert factored_polynomials(sympy.sin(x0) ** 2 + 2 * sympy.sin(x0) + 1) == (sympy.sin(x0) + 1) ** 2
    for other in (x0**2 + 2 * x0 * x2 + x2**2 + 1, x2**2 - sympy.Float(2.0001) * x2 * x3 + x3**2):
        assert factored_polynomials(other) is other  # not shorter; a fitted float


def test_terms_that_share_a_function_are_collected_where_that_is_shorter() -> None:
    t0, ta, t = sympy.symbols("T0 Ta t", positive=True)
    decay = sympy.exp(sympy.Float(-0.01) * t)
    assert collected(t0 * decay + ta - ta * decay) == ta + (t0 - ta) * decay
    for other in (t0 * decay + ta, t0 * sympy.sin(t) + ta * sympy.cos(t), t0 + ta):
        assert collected(other) is other


def test_terms_over_one_denominator_are_written_over_it_once_where_that_is_shorter() -> None:
    x0, x1, x2, x3, x4 = sympy.symbols("x0:5", positive=True)
    # livermore2/Vars5-9 as multiplied out to snap
    assert over_common_denominators(x0 * (x0 / (x1 * x3 + x4) + x1 / (x1 * x3 + x4) + x2)) \
        == x0 * (x2 + (x0 + x1) / (x1 * x3 + x4))
    shared = sympy.Float(0.27) * x1 * (x0 + 1) / (x1 + x3)  # their common factor taken out
    assert over_common_denominators(sympy.expand(shared) + x4) == shared + x4
    for other in (1 / x0 + 1 / x1, sympy.sqrt(x0) / sympy.sqrt(x1) + x0, x0 / (x1 + 1) + 2, 2 - 1 / x0,
                  sympy.Float(1.5) + sympy.Float(0.3) / (x0 + x1)):
        assert over_common_denominators(other) is other
    # a number that cancels against a quotient joins it: a saturation found as 3.2 - 3.2/(2*S + 1)
    c = sympy.Float(3.2)
    assert over_common_denominators(c - c / (2 * x0 + 1) + x1) == 2 * c * x0 / (2 * x0 + 1) + x1


def test_terms_that_share_a_number_are_written_with_it_once_where_that_is_shorter() -> None:
    x0, x1, x2, x3, x4 = sympy.symbols("x0:5", positive=True)
    c = sympy.Float(0.33)
    assert shared_coefficients(c * x0 * x4 / (x0**2 + x1) + x1 + c * x2 * x3 * x4) \
        == x1 + c * x4 * (x0 / (x0**2 + x1) + x2 * x3)
    half = shared_coefficients(x0 * x1**2 / 2 + x0 * x2**2 / 2 + x3)
    assert str(half) == "x0*(x1**2 + x2**2)/2 + x3"
    for other in (sympy.Float(0.3) * x0 + sympy.Float(0.4) * x1, x0 + x1 + 1, sympy.Float(0.3) * x0 + sympy.Float(0.3)):
        assert shared_coefficients(other) is other


def test_products_of_sines_and_cosines_of_a_sum_are_written_as_one() -> None:
    x0, x2, x3 = sympy.symbols("x0 x2 x3", positive=True)
    a = sympy.Float(4.03) * x2
    assert summed_angles(x0 + sympy.sin(a) * sympy.sin(x3) - sympy.cos(a) * sympy.cos(x3)) == x0 - sympy.cos(a + x3)
    for other in (sympy.sin(x0) * sympy.cos(x2) + x3, sympy.Float(0.8) * sympy.sin(x0) - sympy.Float(0.59) * sympy.cos(x0)):
        assert summed_angles(other) is other


def test_a_sine_and_a_cosine_of_one_argument_with_the_same_factors_in_one_ratio_join_with_a_phase() -> None:
    a, x, t = sympy.symbols("a x t", positive=True)
    halves = expanded(a * ((0.540302 * a - 0.270151) * sympy.sin(x) + (0.841471 * a - 0.420735) * sympy.cos(x)))
    X = np.random.default_rng(0).uniform((0.5, -3.0), (2.0, 3.0), (256, 2))
    for func in (sympy.sin, sympy.cos):
        joined = joined_phases(halves, func)
        assert len(joined.atoms(sympy.sin, sympy.cos)) == 1 and joined.has(func)
        assert np.allclose(predict(joined, [a, x], X), predict(halves, [a, x], X), rtol=0, atol=1e-5)
    (wave,) = joined_phases(halves).atoms(sympy.sin)
    assert abs(float(wave.args[0] - x) - 1.0) < 1e-5  # sin(x + 1), its phase for the snapping
    # arguments fitted apart join at their mean; factors in no one ratio, or a lone sine, do not
    apart = 0.6 * a * sympy.sin(1.9999 * t) + 0.8 * a * sympy.cos(2.0001 * t)
    assert joined_phases(apart).atoms(sympy.sin) == {sympy.sin(sympy.Float(2.0) * t + sympy.Float(math.atan2(0.8, 0.6)))}
    for other in (a * sympy.sin(x) + sympy.cos(x), 0.3 * a * sympy.sin(x) + x * sympy.cos(x), a * sympy.sin(x) + x):
        assert joined_phases(other) is other


def test_written_digits_count_what_a_reader_sees_of_the_floats() -> None:
    t = sympy.Symbol("t")
    assert written_digits(sympy.cos(3 * t + sympy.Float(0.7))) == 1
    assert written_digits(sympy.sin(3 * t - sympy.Float(0.870796326794896))) == 6
    assert written_digits(sympy.Rational(1, 2) * t) == 0


def test_refitting_leaves_constants_as_given_where_the_fit_cannot_improve_them() -> None:
    t, c = sympy.Symbol("t"), sympy.Dummy("c")
    times = np.linspace(0.0, 1.0, 50)[:, None]
    y, sd = 3.0 * times[:, 0], np.ones(50)
    assert refitted(c * t, [t], {c: 1.0}, [c], times, y, sd)[c] == pytest.approx(3.0)
    assert refitted(c * t, [t], {c: 3.0}, [c], times, y, sd) == {c: 3.0}  # already the best
    assert refitted(c * t, [t], {c: 1.0}, [c], times[:1], y[:1], sd[:1]) == {c: 1.0}  # too few readings
    # only the free ones move: with the slope held at 2, the offset takes what it can
    d = sympy.Dummy("d")
    assert refitted(c * t + d, [t], {c: 2.0, d: 0.0}, [d], times, y, sd) == {d: pytest.approx(0.5)}


@pytest.mark.parametrize(("fitted", "width", "expected"), [
    (3.004, 0.02, 3),  # pinned: 2.75 and 3.25 are refused
    (2.8, 0.15, 2.8),  # 11/4 is as likely as 2.734 and 2.766: left as fitted
    (2.52, 0.04, sympy.Rational(5, 2)),  # 2.4375 and 2.5625 refused
    (2.52, 0.1, 2.52),  # 2.5625 as likely as 5/2
    (2.752, 0.01, sympy.Rational(11, 4)),  # 2.734 and 2.766 refused
    # a gas constant fitted as 8.314 +- 0.009, accepted within three standard errors: 8.222
    # and 8.444, the next numbers as simple as 25/3, are refused, but 8.306 is as likely as 25/3
    (8.314, 0.025, 8.314),
])
def test_a_constant_snaps_only_to_a_value_the_data_pin_down(fitted: float, width: float, expected: object) -> None:
    x = sympy.Symbol("x")

    def within(e: sympy.Expr) -> bool:  # the data accept slopes within `width` of the fitted one
        return abs(float(e.coeff(x)) - fitted) <= width

    snapped = snap_constants(sympy.Float(fitted) * x, within)
    assert snapped.coeff(x) == expected and isinstance(snapped.coeff(x), sympy.Float) == (expected == fitted)


def test_predict_gives_nan_for_what_cannot_be_evaluated() -> None:
    x0, x1 = sympy.symbols("x0 x1")
    assert predict(x0 + 1, [x0, x1], X).tolist() == (X[:, 0] + 1).tolist()
    assert predict(sympy.Integer(3), [x0, x1], X).shape == (256,)
    assert np.isnan(predict(sympy.Function("f")(x0), [x0, x1], X)).all()
    # a constant snapped to 0 under a division (feynman/I.18.4, once): x0 * 1/0
    assert np.isnan(predict(x0 * sympy.Float(1.5) / sympy.Integer(0), [x0, x1], X)).all()
    # sympy can write I into a law: its value is real only where the imaginary part cancels
    law = x0 + sympy.I * (x0 - x1)
    assert np.isnan(predict(law, [x0, x1], X)).all()
    same = X[:, [0, 0]]
    assert predict(law, [x0, x1], same).tolist() == X[:, 0].tolist()


def test_expanded_gives_each_term_one_coefficient_to_snap() -> None:
    x0, x1 = sympy.symbols("x0 x1", positive=True)
    # a factored product, sqrt(2) from sqrt(x0 + x0), a phase shift: each hides a coefficient
    found = 10.0 * x1 * (0.1001 * x0 + 0.0998) + sympy.sqrt(2 * x0) + sympy.cos(x0 + 1.5708 + 4 * sympy.pi)
    terms = expanded(found).as_coefficients_dict()
    assert float(terms[x0 * x1]) == pytest.approx(1.001) and float(terms[x1]) == pytest.approx(0.998)
    assert float(terms[sympy.sqrt(x0)]) == pytest.approx(2**0.5)
    assert float(terms[sympy.sin(x0)]) == pytest.approx(-1.0, abs=1e-6)
    assert abs(float(terms[sympy.cos(x0)])) < 1e-4
    assert expanded(sympy.sin(x0 * x1)) == sympy.sin(x0 * x1)  # no number in the argument: left alone


def test_a_snapped_fraction_is_shown_as_one() -> None:
    x = sympy.Symbol("x")
    shown = as_fractions(0.666666666666667 * x + 0.431573 + 0.5000001 * x**3)
    assert shown == 2 * x / 3 + sympy.Float(0.431573) + sympy.Float(0.5000001) * x**3
    assert as_fractions(0.6 * x) == 0.6 * x  # a decimal stays one


def test_a_quotient_is_divided_through_by_its_denominator_s_constant_term() -> None:
    vm, s, km = sympy.symbols("Vm S Km", positive=True)
    points = np.random.default_rng(1).uniform(0.5, 2.0, size=(64, 3))
    # What a fit of a Michaelis-Menten law left: one free scale, in floats apart in their last digits.
    found = sympy.Float(3.7800337692091279) * vm / (sympy.Float(3.7800337692091293) * km / s
                                                   + sympy.Float(3.7800337692091266))
    divided = normalized_quotients(found, [vm, s, km], points)
    assert snap_constants(divided, lambda e: np.allclose(predict(e, [vm, s, km], points),
                                                         predict(found, [vm, s, km], points))) == vm / (km / s + 1)
    f, u = sympy.symbols("f u", positive=True)
    lens = sympy.Float(-10.0036) * f * u / (10 * f - sympy.Float(10.0034) * u)  # no constant term: by u's, the largest
    divided = normalized_quotients(lens, [f, u], np.column_stack([points[:, 0] / 10, points[:, 1]]))
    assert divided.as_coeff_Mul()[0] == pytest.approx(10.0036 / 10.0034)
    assert divided.replace(lambda e: e.is_Float, lambda e: sympy.Integer(round(float(e)))) == f * u / (u - f)
    x2, x3 = sympy.symbols("x2 x3", positive=True)
    c = sympy.Float(0.480769)  # livermore2/Vars4-20's 1/(x2*x3 + x2 + 2.08): by the number most terms share
    denominator = sympy.expand(1 / normalized_quotients(c / (c * x2 * x3 + c * x2 + 1), [x2, x3], points[:, :2]))
    assert float(denominator.coeff(x2 * x3)) == 1.0 and float(denominator.coeff(x2, 1).subs(x3, 0)) == 1.0
    assert float(denominator.subs({x2: 0, x3: 0})) == pytest.approx(2.08, abs=1e-5)
    x0, x1 = sympy.symbols("x0 x1", positive=True)
    leftover = x0 / (x1 + sympy.Float(1.3e-17))  # a constant term that is no part of the law stays to be dropped
    assert normalized_quotients(leftover, [x0, x1], points[:, :2]) == leftover
    root = sympy.Float(2.5) / sympy.sqrt(sympy.Float(-4.0) + 2 * x1**2)  # no real square root of -4 to take out
    assert normalized_quotients(root, [x0, x1], points[:, :2] + 2) == root
    divided = normalized_quotients(2.5 / sympy.sqrt(4.0 + 2 * x1**2), [x0, x1], points[:, :2])
    assert divided == sympy.Float(1.25) / sympy.sqrt(sympy.Float(0.5) * x1**2 + 1)
    t = sympy.Symbol("t", positive=True)
    # A logistic curve at 1% noise: 0.01832454880449191 times its reciprocal is 0.99999999999999989
    # in sympy's floats, which a refit of the snapping moved with the numerator.
    logistic = sympy.Float(0.18326444281818732) / (sympy.Float(0.01832454880449191) + sympy.exp(-0.8 * t))
    denominator = 1 / normalized_quotients(logistic, [t], points[:, :1]).as_coeff_Mul()[1]
    assert sympy.Integer(1) in denominator.args
