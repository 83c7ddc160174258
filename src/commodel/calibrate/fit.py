"""The one fitter every calibration uses: bounded constants fit to measured values by their log error.

A calibration prices each measured point through a function of the constants' values and compares:
the residual of a point is ``log(model / measured)``. The fit

1. keeps only the constants the points determine: a 1% nudge (or, from a prior near nothing, 0.1%
   of its bounds' width) must move some residual by :data:`IDENTIFIABLE` (:func:`determined`);
2. minimizes the mean |residual| inside each constant's bounds, in the logarithm of its value: a
   bounded least-squares fit (scipy ``least_squares``) finds the basin, Nelder-Mead on the mean
   |residual| refines it where there are more points than constants (the mean of absolute values is robust to a few points the model cannot
   reach, where squares would trade every other point for them);
3. keeps the priors unless the fit lowers that mean by :data:`MIN_GAIN` without raising the median
   |error| (:func:`fit`): calibrating never makes the measurements' own median error worse.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
from scipy.optimize import least_squares, minimize

#: A 1% change in a constant must move some point's log error by at least this to be fit.
IDENTIFIABLE = 1e-4

#: The least the mean |log error| must fall for a fit to replace the priors (0.01%): below it the
#: measurements already agree with the defaults, and an overlay would only restate them.
MIN_GAIN = 1e-4

#: Residuals (``log(model / measured)`` per point) as a function of the chosen constants' values.
Residuals = Callable[[np.ndarray], np.ndarray]


def mean_log_error(residuals: np.ndarray) -> float:
    """What the fit minimizes and reports: the mean |log(model / measured)| of the points."""
    return float(np.mean(np.abs(residuals)))


def median_error_pct(residuals: np.ndarray) -> float:
    """The median |model / measured - 1| (%) of the points, given their log residuals."""
    return float(100 * np.median(np.abs(np.expm1(residuals))))


@dataclass(frozen=True)
class Bounded:
    """A constant to fit: its name, prior value and the bounds it may not leave."""

    name: str
    prior: float
    bounds: tuple[float, float]


def determined(constants: Sequence[Bounded], residuals: Residuals) -> list[int]:
    """The indices of the constants the points determine: a nudge of 1% of the prior, or of 0.1% of
    the bounds' width where that is larger (a prior near nothing: a latency the record does not state,
    kept at a token 0.1 us), inward at a bound, moves some point's residual by :data:`IDENTIFIABLE`."""
    prior = np.array([c.prior for c in constants])
    start, found = residuals(prior), []
    for i, c in enumerate(constants):
        lo, hi = c.bounds
        step = max(0.01 * abs(prior[i]), 0.001 * (hi - lo))
        nudged = prior.copy()
        nudged[i] = prior[i] + step if prior[i] + step <= hi else prior[i] - step
        if np.max(np.abs(residuals(nudged) - start)) >= IDENTIFIABLE:
            found.append(i)
    return found


@dataclass(frozen=True)
class Fit:
    """The fitted values (``None`` where no fit beats the priors) and the residuals before and after."""

    values: np.ndarray | None
    before: np.ndarray
    after: np.ndarray

    @property
    def gain(self) -> float:
        """How far the fit lowered the mean |log error| (0 where the priors are kept)."""
        return mean_log_error(self.before) - mean_log_error(self.after)


def fit(constants: Sequence[Bounded], residuals: Residuals) -> Fit:
    """Fit ``constants`` (all of them: choose them with :func:`determined`) to the points
    ``residuals`` prices, inside their bounds; the priors are kept unless the fit lowers the mean
    |log error| by :data:`MIN_GAIN` without raising the median |error| (module docstring)."""
    prior = np.array([c.prior for c in constants], dtype=float)
    start = residuals(prior)
    if not constants:
        return Fit(None, start, start)
    lo, hi = (np.log([c.bounds[k] for c in constants]) for k in (0, 1))
    x0 = np.clip(np.log(prior), lo, hi)

    def log_residuals(x: np.ndarray) -> np.ndarray:
        return residuals(np.exp(np.clip(x, lo, hi)))

    coarse = least_squares(log_residuals, x0, bounds=(lo, hi)).x
    best = coarse
    if len(start) > len(constants):  # more points than constants: refine on the mean |log error|
        fine = minimize(
            lambda x: mean_log_error(log_residuals(x)), coarse, method="Nelder-Mead",
            bounds=list(zip(lo, hi, strict=True)), options={"maxfev": 200 * len(constants), "xatol": 1e-4},
        ).x  # fmt: skip
        best = min((coarse, fine), key=lambda x: mean_log_error(log_residuals(x)))
    after = log_residuals(best)
    if mean_log_error(after) < mean_log_error(start) - MIN_GAIN and median_error_pct(
        after
    ) <= median_error_pct(start):
        return Fit(np.exp(np.clip(best, lo, hi)), start, after)
    return Fit(None, start, start)
