"""Design spaces: the grid (enumerated in chunks), quasi-random samples, and the unit-cube encoding
that samplers and optimizers share. Every point is completed with the fixed and derived inputs."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from commodel.errors import CommodelError
from commodel.explore.expressions import evaluate_expression
from commodel.explore.spec import Choice, IntRange, Lookup, RealRange, SweepSpec, Variable, derived_order


def grid_values(var: Variable) -> list:
    """The values a variable takes on the grid: choices, integers (powers of two when ``log``), or
    ``points`` reals spaced linearly or logarithmically."""
    if isinstance(var, Choice):
        return list(var.choice)
    if isinstance(var, IntRange):
        lo, hi = var.int
        if var.log:
            return [int(lo * 2**k) for k in range(int(np.floor(np.log2(hi / lo))) + 1)]
        return list(range(lo, hi + 1, var.step))
    lo, hi = var.real
    values = np.geomspace(lo, hi, var.points) if var.log else np.linspace(lo, hi, var.points)
    return [float(v) for v in values]


def value_count(var: Variable) -> int:
    """How many values :func:`grid_values` gives, without listing them."""
    if isinstance(var, Choice):
        return len(var.choice)
    if isinstance(var, IntRange):
        lo, hi = var.int
        return int(np.floor(np.log2(hi / lo))) + 1 if var.log else (hi - lo) // var.step + 1
    return var.points


def grid_shape(spec: SweepSpec) -> tuple[int, ...]:
    return tuple(value_count(v) for v in spec.variables.values())


def grid_size(spec: SweepSpec) -> int:
    """Points of the full grid (a Python integer: no overflow however large)."""
    return math.prod(grid_shape(spec))


def design_points(spec: SweepSpec) -> int:
    """Points a specification asks for: its grid, or its method's budget."""
    return grid_size(spec) if spec.study.method == "grid" else spec.study.budget


def grid_chunk(spec: SweepSpec, start: int, stop: int) -> pd.DataFrame:
    """Grid points ``start`` to ``stop`` (row-major over the variables, in spec order)."""
    index = np.arange(start, stop, dtype=np.int64)
    frame = pd.DataFrame({"point": index})
    if spec.variables:
        coords = np.unravel_index(index, grid_shape(spec))
        for (name, var), coord in zip(spec.variables.items(), coords, strict=True):
            frame[name] = _as_array(var)[coord]
    return frame


def _as_array(var: Variable) -> np.ndarray:
    """Grid values as an array: numbers or booleans when they all are, else objects (strings)."""
    values = grid_values(var)
    flags = all(isinstance(v, bool) for v in values)
    numbers = all(isinstance(v, int | float) and not isinstance(v, bool) for v in values)
    return np.asarray(values, dtype=None if flags or numbers else object)


def decode(spec: SweepSpec, unit: np.ndarray, first_point: int = 0) -> pd.DataFrame:
    """Points of the unit cube ``[0, 1)^d`` (one column per variable) as variable values: choices and
    integers pick among their grid values, reals interpolate (logarithmically when ``log``)."""
    unit = np.atleast_2d(np.asarray(unit, dtype=float))
    frame = pd.DataFrame({"point": np.arange(first_point, first_point + len(unit), dtype=np.int64)})
    for column, (name, var) in enumerate(spec.variables.items()):
        u = np.clip(unit[:, column], 0.0, 1.0 - 1e-12)
        if isinstance(var, RealRange):
            lo, hi = var.real
            frame[name] = np.exp(np.log(lo) + u * np.log(hi / lo)) if var.log else lo + u * (hi - lo)
        else:
            frame[name] = _as_array(var)[grid_index(var, u)]
    return frame


def grid_index(var: Variable, unit: np.ndarray) -> np.ndarray:
    """Which of a choice's or an integer range's grid values each unit coordinate picks: the
    ``floor(u x count)``-th (:func:`decode`)."""
    u = np.clip(np.asarray(unit, dtype=float), 0.0, 1.0 - 1e-12)
    return (u * len(grid_values(var))).astype(int)


def sample(spec: SweepSpec) -> pd.DataFrame:
    """``budget`` quasi-random points: scrambled Sobol (the first ``budget`` of the next power of two)
    or Latin hypercube (scipy.stats.qmc), seeded."""
    from scipy.stats import qmc  # slow: scipy.stats (0.6 s), for sampled spaces only

    d = max(len(spec.variables), 1)
    engine = (
        qmc.Sobol(d, scramble=True, seed=spec.study.seed)
        if spec.study.method == "sobol"
        else qmc.LatinHypercube(d, seed=spec.study.seed)
    )
    n = spec.study.budget
    if spec.study.method == "sobol":  # Sobol' balance needs 2^m points: draw them, keep the first n
        return decode(spec, engine.random_base2(int(np.ceil(np.log2(max(n, 1)))))[:n])
    return decode(spec, engine.random(n))


def complete(spec: SweepSpec, frame: pd.DataFrame) -> pd.DataFrame:
    """Add the fixed inputs and the derived values (each after those it reads: :func:`derived_order`)
    to a frame of variable values."""
    frame = frame.copy()
    for name, value in spec.fixed.items():
        frame[name] = value
    for name in derived_order(spec):
        rule = spec.derived[name]
        where = f"[derived] {name}"
        if isinstance(rule, Lookup):
            keys = frame[rule.lookup].astype(str)
            missing = sorted(set(keys) - set(rule.values))
            if missing:
                raise CommodelError(f"{where}: no value for {rule.lookup} = {', '.join(missing)}")
            frame[name] = keys.map(rule.values).to_numpy()
        else:
            frame[name] = evaluate_expression(rule, frame, where)
    return frame
