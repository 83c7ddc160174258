"""Uncertainty bands and robust objectives of a sweep's designs, by Monte Carlo over the uncertain
hardware numbers (:mod:`commodel.hardware.uncertain`).

All designs of a chunk see the same draws (common random numbers), so their bands compare: draw ``s``
moves every uncertain number of the records the chunk uses by its factor ``f[s]`` (a Latin
hypercube, uniform in the logarithm of each range), and the evaluator prices the whole chunk on that
database. For each objective the chunk gets ``OBJECTIVE_pLO`` and ``OBJECTIVE_pHI`` (the spec's
band) and, with ``robust = "pNN"``, ``OBJECTIVE_robust``: the objective at its pessimistic NN-th
percentile (the NN-th of a minimized objective, the (100-NN)-th of a maximized one).

Which number drives a design's band: ``OBJECTIVE_driver`` names the uncertain number whose log
factor explains the largest share of the variance of the log objective across the draws, and
``OBJECTIVE_driver_share`` that share (the squared correlation: the first-order index of a model
linear in the logs, as a Latin hypercube estimates it).

The draws of a chunk are spread over the machine's cores (forked processes); inside a Dask worker,
which may not fork, they run in its own process.
"""

from __future__ import annotations

import gc
import multiprocessing
import os
import signal

import numpy as np
import pandas as pd
from numpy.typing import ArrayLike

from commodel.explore.spec import SweepSpec
from commodel.hardware.uncertain import Uncertain, draws, drivers, on_draws
from commodel.pricing.evaluator import evaluator
from commodel.validate.bands import hardware_uncertainty


def study_parameters(frame: pd.DataFrame) -> list[Uncertain]:
    """The uncertain numbers of every hardware record a table of designs names."""
    return hardware_uncertainty(v for column in frame.columns if pd.api.types.is_string_dtype(frame[column])
                             for v in frame[column].unique() if isinstance(v, str))  # fmt: skip


def _objectives_per_draw(
    spec_json: str, frame: pd.DataFrame, parameters: list[Uncertain], factors: np.ndarray
) -> np.ndarray:
    """Draws x designs x objectives: the spec's objectives priced on each draw's database (NaN where
    a draw makes a design invalid)."""
    spec = SweepSpec.model_validate_json(spec_json)
    price = evaluator(spec.study.evaluate).repeated(frame, list(spec.objectives))
    results = on_draws(lambda _: price(), parameters, factors)
    return np.array(results).reshape(len(factors), len(frame), len(spec.objectives))


def _parent_handles_interrupts() -> None:
    """In a worker: leave Ctrl-C to the parent, which stops the pool (no traceback per worker)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def _workers(draws_: int) -> int:
    if multiprocessing.current_process().daemon or "fork" not in multiprocessing.get_all_start_methods():
        return 1
    return max(1, min(os.cpu_count() or 1, draws_))


def objectives_per_draw(
    spec: SweepSpec, frame: pd.DataFrame, parameters: list[Uncertain], factors: np.ndarray
) -> np.ndarray:
    """:func:`_objectives_per_draw`, the draws split over the machine's cores."""
    spec_json = spec.model_dump_json()
    workers = _workers(len(factors))
    if workers == 1:
        return _objectives_per_draw(spec_json, frame, parameters, factors)
    blocks = np.array_split(factors, workers)
    tasks = [(spec_json, frame, parameters, block) for block in blocks]
    context = multiprocessing.get_context("fork")
    gc.freeze()  # the forked workers' collector then skips every object they inherit (no copy, no scan)
    try:
        with context.Pool(workers, initializer=_parent_handles_interrupts) as pool:  # leaving kills them
            pending = pool.starmap_async(_objectives_per_draw, tasks)
            while not pending.ready():  # a timed wait, so Ctrl-C reaches this process at once
                pending.wait(0.2)
            return np.concatenate(pending.get(), axis=0)
    finally:
        gc.unfreeze()


def nan_percentiles(values: np.ndarray, q: ArrayLike) -> np.ndarray:
    """``np.nanpercentile(values, q, axis=0)`` (linear interpolation) for every column at once.

    NumPy falls back to one call per column when any value is NaN (draws a design fails under); here
    NaNs sort last and each column interpolates among its own ``n`` values at rank ``(n - 1) q / 100``;
    a column without values gives NaN."""
    ordered = np.sort(values, axis=0)
    n = np.sum(~np.isnan(values), axis=0)
    rank = np.maximum(n - 1, 0) * (np.asarray(q, dtype=float)[..., None] / 100)  # NumPy's (n - 1) q
    below = np.floor(rank).astype(int)
    above = np.minimum(below + 1, np.maximum(n - 1, 0))
    low, high = (np.take_along_axis(ordered, i.reshape(-1, ordered.shape[1]), axis=0) for i in (below, above))
    low, high = low.reshape(rank.shape), high.reshape(rank.shape)
    t = rank - below
    with np.errstate(invalid="ignore"):  # inf - inf where both ends are the same infinity
        # NumPy's lerp: from the nearer end, so that finite values agree to the last bit
        mixed = np.where(t < 0.5, low + (high - low) * t, high - (high - low) * (1 - t))
    return np.where(n > 0, np.where(low == high, low, mixed), np.nan)


def with_draw_bands(spec: SweepSpec, inputs: pd.DataFrame, result: pd.DataFrame) -> pd.DataFrame:
    """``result`` (the designs of ``inputs``, in order, with ``feasible`` marked) with each objective's
    band, robust value and driver; an infeasible design, never on a front, gets none (NaN)."""
    section = spec.uncertainty
    feasible = result["feasible"].to_numpy(dtype=bool)
    if section is None or not feasible.any():
        return result
    inputs = inputs[feasible].reset_index(drop=True)
    parameters = study_parameters(inputs)
    factors = draws(parameters, section.samples, section.seed)
    values = objectives_per_draw(spec, inputs, parameters, factors)
    low, high = section.band
    columns: dict[str, np.ndarray] = {}
    labels = np.array([p.label for p in parameters] or [""])
    for k, (name, sense) in enumerate(spec.objectives.items()):
        draws_k = values[:, :, k]
        columns[f"{name}_p{low:g}"], columns[f"{name}_p{high:g}"] = nan_percentiles(draws_k, (low, high))
        if section.robust is not None:
            q = section.robust_percentile
            columns[f"{name}_robust"] = nan_percentiles(draws_k, q if sense == "min" else 100 - q)
        if parameters:
            best, share = drivers(np.log(factors), draws_k)
            columns[f"{name}_driver"], columns[f"{name}_driver_share"] = labels[best], share
    bands = pd.DataFrame(columns, index=np.flatnonzero(feasible)).reindex(range(len(result)))
    return pd.concat([result, bands], axis=1)


def robust_objectives(spec: SweepSpec) -> dict[str, str]:
    """The robust objective columns and their senses (empty without ``robust``)."""
    if spec.uncertainty is None or spec.uncertainty.robust is None:
        return {}
    return {f"{name}_robust": sense for name, sense in spec.objectives.items()}
