"""The noise floor: how noisy an oracle's readings are, and what loss a perfect model reaches.

A reading is the law plus noise whose variance is ``absolute**2 + (relative * y)**2`` (an
instrument's "0.5% of reading + 2 digits"), and rounded to the digits the instrument shows.
:func:`estimate_noise` fits that model to replicate readings (several set points, each measured a
few times: only an active method can ask for them) and reads the rounding off their digits
(:func:`read_resolution`: replicates of a deterministic rig agree to the last digit, yet a law
fits its readings no closer than that digit); an experiment may instead declare the noise.
:func:`floor_levels` turns the model into what the search judges fits against: the NMSE the
noise alone gives on each trial, and the loss below which a fit cannot be told from a perfect
one with the points at hand. With no noise, that level is rounding (:data:`EXACT_LOSS`).
:func:`unlikely_sets`, :func:`suspects` and :func:`wild` find readings the noise cannot explain
(a loose contact), for the search to measure again.

(:class:`rcvgp.simulate.Noise` is something else: the noise a simulated oracle adds.)
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass
from typing import Any

import numpy as np

__all__ = ["EXACT_LOSS", "LEAST_NOISE", "ROUNDED_DIGITS", "WILD", "Z", "NoiseModel", "Floor", "chance_rise", "consistent",
           "estimate_noise", "floor_levels", "not_worse", "read_resolution", "reading_weights", "suspects", "unlikely_sets", "wild"]

#: Losses below this are rounding (an exact fit of doubles gives 1e-30 or so).
EXACT_LOSS = 1e-14
#: Standard errors a difference must exceed before the data show it (about 1 in 700 one-sided).
Z = 3.0
#: Noise standard deviations beyond which a reading is suspect (1 in 5e8 by chance): a loose
#: contact, a missed trigger. Such a reading is measured again; see :func:`wild`.
WILD = 6.0


@dataclass(frozen=True)
class NoiseModel:
    """Measurement noise with variance ``absolute**2 + (relative * y)**2``, plus the rounding of
    readings shown to ``digits`` significant digits and in steps of ``resolution`` (0: none).

    ``dof`` is the degrees of freedom of the replicate readings behind an estimate (its relative
    uncertainty in variance is about ``sqrt(2 / dof)``); None when the noise was declared, or
    when there is none to estimate. ``least`` is the least noise the model gives where the
    replicates were read: no reading is taken as quieter than the replicates ever showed (a
    part proportional to the reading would otherwise make readings near zero nearly exact).
    """

    absolute: float = 0.0
    relative: float = 0.0
    dof: int | None = None
    source: str = "declared"  # "declared" or "replicates"
    digits: int = 0
    resolution: float = 0.0
    least: float = 0.0

    def __post_init__(self) -> None:
        for name in ("absolute", "relative", "resolution", "least"):
            value = getattr(self, name)
            if not (isinstance(value, (int, float)) and math.isfinite(value) and value >= 0):
                raise ValueError(f"noise `{name}` must be a finite number >= 0, got {value!r}")
        if isinstance(self.digits, bool) or not isinstance(self.digits, int) or self.digits < 0:
            raise ValueError(f"noise `digits` must be a whole number >= 0, got {self.digits!r}")

    @property
    def zero(self) -> bool:
        """Whether there is no noise."""
        return self.absolute == 0 and self.relative == 0 and self.digits == 0 and self.resolution == 0 and self.least == 0

    @property
    def uncertainty(self) -> float:
        """Relative standard deviation of the variance this model gives (0 when declared)."""
        return math.sqrt(2.0 / self.dof) if self.dof else 0.0

    def std(self, y: np.ndarray) -> np.ndarray:
        """The noise's standard deviation at readings ``y`` (any shape).

        Kept as a standard deviation wherever the search uses it: a variance of readings above
        1e154 overflows (feynman/III.14.14 reads 1e258), and an infinite variance makes every
        fit look as good as the best.
        """
        y = np.asarray(y, dtype=float)
        with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
            std = np.hypot(self.absolute, self.relative * y)
            if self.digits or self.resolution:
                # Rounding to a step h leaves an error uniform over +-h/2: variance h**2 / 12.
                step = np.maximum(10.0 ** (np.floor(np.log10(np.abs(y))) - self.digits + 1) if self.digits else 0.0,
                                  self.resolution)
                std = np.hypot(std, step / math.sqrt(12.0))
        return np.maximum(std, self.least) if self.least else std

    def to_dict(self) -> dict[str, Any]:
        """The model as JSON-ready data (``result.json``'s ``noise``)."""
        return {"absolute": self.absolute, "relative": self.relative, "dof": self.dof, "source": self.source,
                "digits": self.digits, "resolution": self.resolution, "least": self.least}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> NoiseModel:
        """The model :meth:`to_dict` wrote (keys it lacks at their defaults; null a non-finite
        estimate, written as JSON allows, read as 0); ValueError or TypeError if a value is no
        number."""
        dof = data.get("dof")
        return cls(float(data.get("absolute") or 0.0), float(data.get("relative") or 0.0),
                   None if dof is None else int(dof), str(data.get("source") or "declared"),
                   int(data.get("digits") or 0), float(data.get("resolution") or 0.0), float(data.get("least") or 0.0))


#: Readings that all fit in this many significant digits were rounded by the instrument (or the
#: text it sent them as): a double's shortest form takes 15 to 17 for a value the law computes.
ROUNDED_DIGITS = 12


def read_resolution(y: np.ndarray) -> tuple[int, float]:
    """The rounding visible in readings ``y``: (significant digits, step) such that every finite
    reading is shown to at most that many digits and is a whole number of steps; (0, 0.0) if
    some reading needs more than :data:`ROUNDED_DIGITS` digits (it was not rounded).

    A meter that shows four digits gives readings of four digits or fewer (2.5 is 2.500), so the
    most digits any reading needs are those it shows; one that shows a fixed number of decimals
    gives the most decimals any reading needs. Each reading's step is then the larger of the two
    (``NoiseModel.std``), which is right for either kind: four digits over readings of 0.1
    to 10, or three decimals over readings of 0.005 to 12.345.
    """
    values = np.asarray(y, dtype=float).ravel()
    values = values[np.isfinite(values) & (values != 0)]
    if not values.size:
        return 0, 0.0
    digits = np.array([_shortest_digits(float(v)) for v in values])
    if digits.max() > ROUNDED_DIGITS:
        return 0, 0.0
    exponents = np.floor(np.log10(np.abs(values))).astype(int)
    decimals = int(np.max(digits - 1 - exponents))  # digits after the point (negative: a step of 10, 100, ...)
    return int(digits.max()), float(10.0**-decimals)


def _shortest_digits(value: float) -> int:
    """The fewest significant digits that write ``value`` exactly (a double needs at most 17)."""
    for digits in range(1, 18):
        if float(f"{value:.{digits - 1}e}") == value:
            return digits
    return 17


def estimate_noise(y: np.ndarray) -> NoiseModel:
    """Fit the noise model to replicate readings.

    Parameters
    ----------
    y : ndarray of shape (n_points, n_repeats)
        Row i holds the repeated readings at set point i; NaN where a reading failed.

    The sample variance of each row is chi-squared about the model's variance at the row's mean;
    the two coefficients are fitted (non-negative) by least squares weighted by the inverse
    variance of each sample variance, re-weighted a few times. The part proportional to the
    reading is kept only where the replicates show it: a likelihood-ratio test against noise
    alike on every reading, at :data:`Z` standard errors.
    """
    from scipy.optimize import nnls

    y = np.asarray(y, dtype=float)
    digits, resolution = read_resolution(y)
    ok = np.isfinite(y)
    counts = ok.sum(axis=1)
    use = counts >= 2
    if not use.any():
        return NoiseModel(source="replicates", dof=0)
    y, ok, counts = y[use], ok[use], counts[use]
    # In units of the largest reading: squares of y ~ 1e84 (Feynman) would overflow.
    unit = float(np.abs(np.where(ok, y, 0.0)).max()) or 1.0
    y = y / unit
    dof = counts - 1
    mean = np.where(ok, y, 0.0).sum(axis=1) / counts
    var = np.where(ok, (y - mean[:, None]) ** 2, 0.0).sum(axis=1) / dof
    total = int(dof.sum())
    pooled = float(np.sum(dof * var) / total)
    if not pooled > 0:
        # A noiseless oracle (a simulator, say), or a deterministic rig, whose readings differ
        # from the law only by the digits it shows.
        return NoiseModel(0.0, 0.0, total, "replicates", digits, resolution)
    square = mean**2
    columns = np.column_stack([np.ones_like(square), square])
    norms = np.linalg.norm(columns, axis=0)
    norms[norms == 0] = 1.0
    model = np.full(len(var), pooled)
    a, b = pooled, 0.0
    for _ in range(5):
        weight = np.sqrt(dof) / np.maximum(model, 1e-300 * pooled)
        coef, _ = nnls(columns / norms * weight[:, None], var * weight)
        a, b = coef / norms
        model = a + b * square
        if not (model > 0).all():
            break
    if b > 0 and not _shows_proportional_part(dof, var, pooled, a + b * square):
        a, b = pooled, 0.0
    quietest = float(np.min(np.maximum(a, 0.0) + np.maximum(b, 0.0) * square))
    return NoiseModel(unit * math.sqrt(max(a, 0.0)), math.sqrt(max(b, 0.0)), total, "replicates", digits, resolution,
                      unit * math.sqrt(quietest))


def _shows_proportional_part(dof: np.ndarray, var: np.ndarray, pooled: float, model: np.ndarray) -> bool:
    """Whether sample variances ``var`` (with ``dof`` degrees of freedom) follow ``model`` more
    likely than the constant ``pooled`` by :data:`Z` standard errors (a likelihood-ratio test).

    Under noise alike everywhere, the fitted part proportional to the reading is above zero half
    the time by chance; kept, it would weigh readings unequally for nothing.
    """
    def log_likelihood(variance: np.ndarray | float) -> float:
        variance = np.maximum(variance, 1e-300 * pooled)
        return float(-0.5 * np.sum(dof * (np.log(variance) + var / variance)))

    return 2.0 * (log_likelihood(model) - log_likelihood(pooled)) > Z**2


def unlikely_sets(y: np.ndarray, model: NoiseModel) -> np.ndarray:
    """Which rows of replicate readings ``y`` (n_points, n_repeats) scatter beyond what
    ``model`` gives them, by chance less than once in a million (a chi-square test of each
    row's sample variance): a row holding a wild reading, which would inflate the noise
    estimate a hundredfold. Measured again, such a row reads as the others."""
    from scipy.stats import chi2

    ok = np.isfinite(y)
    dof = ok.sum(axis=1) - 1
    out = np.zeros(len(y), dtype=bool)
    if model.zero:
        return out
    with np.errstate(all="ignore"):
        mean = np.where(ok, y, 0.0).sum(axis=1) / np.maximum(dof + 1, 1)
        sd = model.std(mean)
        scatter = np.where(ok, ((y - mean[:, None]) / sd[:, None]) ** 2, 0.0).sum(axis=1)
    test = dof >= 1
    out[test] = chi2.sf(scatter[test], dof[test]) < 1e-6
    return out


def suspects(residual: np.ndarray, noise_std: np.ndarray, mask: np.ndarray, checked: np.ndarray,
             replaced: np.ndarray) -> np.ndarray:
    """Readings to measure again, per row (a trial) of ``residual`` (reading less a fit): those
    off by more than :data:`WILD` noise standard deviations and :data:`WILD` times the row's
    typical residual (its median absolute deviation, as a standard deviation), the worst
    first, not ``checked`` before. A fit that is only an approximation misses many readings by
    a little; a wild reading stands out of both.

    How many: a fit at the noise on most of a row's readings (a typical residual within twice
    the noise) may nominate up to a twentieth of the row's readings in all; any other fit
    (whose far readings are mostly where the fit is wrong) only while the row's second
    readings that agreed with the first (checked, not ``replaced``) are under a hundredth.

    Returns a boolean array of ``residual``'s shape."""
    out = np.zeros(mask.shape, dtype=bool)
    with np.errstate(invalid="ignore"):
        candidates = mask & ~checked & (np.abs(residual) > WILD * noise_std)
    n = mask.sum(axis=1)
    at_noise = np.ceil(0.05 * n) - checked.sum(axis=1)  # each row's allowance, as the fit is at the noise
    otherwise = np.ceil(0.01 * n) - (checked & ~replaced).sum(axis=1)  # or not
    # Most fits miss no reading by that much, or the rows they miss have spent both allowances.
    rows = np.flatnonzero(candidates.any(axis=1) & (np.maximum(at_noise, otherwise) > 0))
    if not len(rows):
        return out
    with np.errstate(all="ignore"), warnings.catch_warnings(action="ignore"):  # a row with no reading
        s = np.where(mask[rows], residual[rows] / noise_std[rows], np.nan)
        centre = np.nanmedian(s, axis=1, keepdims=True)
        typical = 1.4826 * np.nanmedian(np.abs(s - centre), axis=1, keepdims=True)
        z = np.nan_to_num(np.abs(s), nan=0.0, posinf=np.inf)
        far = np.nan_to_num(np.abs(s - centre) / typical, nan=0.0, posinf=np.inf)
    limit = np.where(typical[:, 0] <= 2.0, at_noise[rows], otherwise[rows]).astype(int)
    picked = candidates[rows] & (far > WILD)
    for k in np.flatnonzero(picked.sum(axis=1) > limit):
        worst = np.argsort(np.where(picked[k], -z[k], np.inf))[: max(int(limit[k]), 0)]
        picked[k] = False
        picked[k, worst] = True
    out[rows] = picked
    return out


def wild(first: np.ndarray, again: np.ndarray, noise_std: np.ndarray) -> np.ndarray:
    """Which of readings ``first`` the reading ``again`` at the same set point contradicts: the
    two differ by more than :data:`WILD` standard deviations of a difference of two readings.
    A fit only nominates suspects; the repeat, which knows no law, is the evidence."""
    with np.errstate(invalid="ignore"):
        return np.isfinite(again) & ~(np.abs(first - again) <= WILD * math.sqrt(2.0) * noise_std)


@dataclass(frozen=True)
class Floor:
    """What the noise allows on one set of K trials.

    ``expected`` (K,) is the NMSE a perfect model scores on each trial, from the noise alone, and
    ``level`` (K,) the loss below which a trial's fit cannot be told from a perfect one.
    ``distinct`` is the rise in mean loss by which the trials tell one fit worse than another,
    and ``per_constant`` the loss a constant fitted to each trial is charged when they do
    (Schwarz's BIC: log(n) times the noise's part per point).
    """

    expected: np.ndarray
    level: np.ndarray
    distinct: float
    per_constant: float

    @property
    def mean_expected(self) -> float:
        return float(self.expected.mean())


#: A reading's noise counts as at least this fraction of the largest in its row: noise of a
#: fraction of each reading gives a reading of zero none, which least squares would take as exact.
LEAST_NOISE = 1e-6


def reading_weights(noise_std: np.ndarray | None, mask: np.ndarray) -> np.ndarray | None:
    """Each reading's weight in a least-squares loss, per row (last axis) of ``noise_std``: the
    inverse of its noise's standard deviation, scaled so that its mean square over the row's
    ``mask`` is 1 (1 where the mask is false); None without noise, or where the noise is alike
    on every reading (no weighting then).

    Weighted so, least squares is the likelihood of Gaussian noise, and its NMSE reads as one
    under noise alike everywhere. Under noise of a fraction of each reading a law's readings
    can span decades; unweighted, only the largest count: a diode's ``I0*(exp(V/Vt) - 1)`` at 1%
    came back as ``0.988*I0*exp(V/Vt)``. (The search leaves a rig's rounding alone unweighted:
    ``rcvgp.search.engine.Lab.weighted``.)
    """
    if noise_std is None:
        return None
    mask = np.asarray(mask, dtype=bool) & np.isfinite(noise_std)
    with np.errstate(all="ignore"):
        sd = np.where(mask, noise_std, 0.0)
        top = sd.max(axis=-1, keepdims=True)
        if np.all(np.where(mask, sd == top, True)):
            return None
        weight = np.where(mask, 1.0 / np.maximum(sd / np.where(top > 0, top, 1.0), LEAST_NOISE), 0.0)
        weight /= np.sqrt(np.sum(weight * weight, axis=-1, keepdims=True) / np.maximum(mask.sum(axis=-1, keepdims=True), 1))
    return np.where(mask, weight, 1.0)


def floor_levels(noise_std: np.ndarray | None, mask: np.ndarray, spread: np.ndarray, uncertainty: float) -> Floor:
    """The :class:`Floor` of K trials.

    Parameters
    ----------
    noise_std : ndarray of shape (K, m) or None
        Noise standard deviation of each reading, in the units of y (None: no noise).
    mask : ndarray of shape (K, m)
        The points that were measured.
    spread : ndarray of shape (K,)
        What each trial's errors are measured in (its NMSE is the mean square of error / spread).
    uncertainty : float
        Relative standard deviation of the noise variance itself.

    A perfect model's loss is a sum of squared noises: its relative standard deviation is
    ``sqrt(2 * sum(v**2)) / sum(v)`` for readings of variance ``v`` (``sqrt(2 / n)`` when they are
    alike), and its expected value is known to ``uncertainty``: the level is :data:`Z` of both
    above it.

    Two fits of the same points are compared more finely than either is with the noise, whose
    size need not be known to that end: the noise moves the difference of their losses by a
    standard error of about ``2 * sqrt(expected * rise / n)`` on a trial of ``n`` points, for a
    rise in loss of ``rise`` (as in :func:`not_worse`, whose test this is with the prediction's
    difference taken from the rise). Over K trials the rise is told apart where it exceeds :data:`Z`
    of those, from ``4 * Z**2 * sum(expected / n) / K**2`` (``distinct``). But each constant
    fitted to every trial lowers the loss by about ``sum(expected / n) / K`` by fitting the noise
    alone, and a search tries many trees: each constant is charged BIC's
    ``sum(log(n) * expected / n) / K`` (``per_constant``) before fits are compared so.
    """
    n = np.maximum(mask.sum(axis=1), 1)
    if noise_std is None:
        expected = np.zeros(len(n))
        spread_rel = np.zeros(len(n))
    else:
        with np.errstate(all="ignore"):
            v = np.square(np.where(mask, noise_std, 0.0) / spread[:, None])  # in units of the trial's spread
            total = v.sum(axis=1)
            expected = total / n
            v = v / v.max(axis=1, keepdims=True)  # scale-free, so its square cannot overflow
            spread_rel = np.sqrt(2.0 * (v * v).sum(axis=1)) / v.sum(axis=1)
        expected = np.where(np.isfinite(expected), expected, 0.0)
        spread_rel = np.where(np.isfinite(spread_rel), spread_rel, 0.0)
    level = EXACT_LOSS + expected * (1.0 + Z * np.sqrt(spread_rel**2 + uncertainty**2))
    distinct = EXACT_LOSS + 4.0 * Z**2 * float(np.sum(expected / n)) / len(n) ** 2
    per_constant = float(np.mean(np.log(n) * expected / n))
    return Floor(expected, level, distinct, per_constant)


def not_worse(y: np.ndarray, candidate: np.ndarray, reference: np.ndarray, noise_std: np.ndarray,
              weighted: bool = True) -> bool:
    """Whether ``candidate``'s predictions of readings ``y`` are not distinguishably worse than
    ``reference``'s: the rise in mean squared error is within :data:`Z` standard errors of what
    the noise makes of their difference, or within rounding.

    The standard error comes from the noise model, not from the spread of the squared errors,
    so a candidate whose errors are rare but large cannot hide behind them, and with no noise
    any rise beyond rounding counts. Noise that is not alike on every reading weights each by
    the inverse of its noise (:func:`reading_weights`) if ``weighted``.

    Parameters
    ----------
    y, candidate, reference, noise_std : ndarray of shape (n_samples,)
        Points where ``y`` is not finite are left out.
    """
    ok = np.isfinite(y)
    y, candidate, reference, noise_std = y[ok], candidate[ok], reference[ok], noise_std[ok]
    if y.size < 2 or not np.isfinite(candidate).all():
        return False
    if weighted and (weight := reading_weights(noise_std, np.ones(y.shape, dtype=bool))) is not None:
        # As the search judges fits: each reading weighted by the inverse of its noise.
        y, candidate, reference, noise_std = y * weight, candidate * weight, reference * weight, noise_std * weight
    unit = float(np.abs(y).max()) or 1.0  # scale-free: squares of y ~ 1e200 would overflow
    with np.errstate(all="ignore"):
        r_c, r_r = (y - candidate) / unit, (y - reference) / unit
        rise = float(np.mean(r_c**2 - r_r**2))
        delta = (candidate - reference) / unit
        # In numpy, not Python floats: readings near 1e300 make unit**2 overflow, which Python raises.
        se = 2.0 * math.sqrt(float(np.mean(np.square(noise_std / unit * delta))) / y.size)
        spread = float(np.var(y / unit)) or float(np.mean((y / unit) ** 2))  # y may not vary
        rounding = EXACT_LOSS * spread
    # Errors whose squares overflow make the rise inf, and with it the standard error, which
    # would then excuse it: a candidate reading 4e199 for readings of 10 is worse (an RC
    # discharge at 1% came back as exp(20*t/(C*R)), NMSE 7e303, chosen off the front for it).
    if not rise < math.inf:
        return False
    return bool(rise <= Z * se + rounding)


def consistent(y: np.ndarray, candidate: np.ndarray, reference: np.ndarray, noise_std: np.ndarray,
               restrictions: int = 1, tries: int = 1) -> bool:
    """Whether readings ``y`` are consistent with ``candidate``, a restriction of ``reference``
    (fitted to these readings) in ``restrictions`` of its constants, such as a constant set to a
    simple value: the rise in chi-square, sum(((y - candidate) / noise_std)**2) less reference's,
    is within what chance gives such a restriction :data:`Z` standard deviations out (9 for one
    constant: a constant moved by three of its standard errors).

    ``tries``: how many such restrictions were looked at for the one judged, the best of them
    (a term chosen among many): the chance allowed is shared among them (Bonferroni's rule).

    Stricter than :func:`not_worse`, which asks whether a fixed prediction is worse and lets a
    constant move by about twice Z of its standard errors. With no noise, any rise beyond
    rounding counts.
    """
    ok = np.isfinite(y)
    y, candidate, reference, noise_std = y[ok], candidate[ok], reference[ok], noise_std[ok]
    if not np.all(noise_std > 0):
        return not_worse(y, candidate, reference, noise_std)
    if y.size < 2 or not np.isfinite(candidate).all():
        return False
    with np.errstate(all="ignore"):
        rise = float(np.sum(((y - candidate) / noise_std) ** 2 - ((y - reference) / noise_std) ** 2))
    return math.isfinite(rise) and rise <= chance_rise(restrictions, tries)


def chance_rise(restrictions: int = 1, tries: int = 1) -> float:
    """The largest rise in chi-square that chance gives ``restrictions`` constants of a fit
    set to values of their own, :data:`Z` standard deviations out, for the best of ``tries``
    such restrictions (the chance shared among them: Bonferroni's rule)."""
    from scipy.stats import chi2, norm

    level = 2.0 * norm.cdf(Z) - 1.0
    if tries > 1:
        level = 1.0 - (1.0 - level) / tries
    return float(chi2.ppf(level, max(1, restrictions)))
