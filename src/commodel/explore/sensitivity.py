"""Global sensitivity of a study's objectives to its variables (``commodel sensitivity``): first-order
and total Sobol indices (Saltelli sampling) or Morris elementary effects, estimated by SALib.

Every variable spans the unit interval its sweep encoding uses (:func:`commodel.explore.space.decode`:
choices and integers pick among their grid values, reals interpolate); the design points are
completed and evaluated exactly as a sweep evaluates them, chunk by chunk, by the same executors
(in this process, or on a Dask cluster). A point the evaluator rejects (an invalid
layout) takes the objective's mean over the valid points, and the share of such points is reported:
an index is only as good as the space is valid.
"""

from __future__ import annotations

import json
from collections.abc import Callable

import numpy as np
import pandas as pd

from commodel.errors import CommodelError, unknown
from commodel.explore.space import complete, decode
from commodel.explore.spec import SweepSpec

METHODS = ("sobol", "morris")


def indices(
    function: Callable[[np.ndarray], dict[str, np.ndarray]],
    names: list[str],
    method: str = "sobol",
    samples: int = 256,
    seed: int = 0,
) -> pd.DataFrame:
    """Sensitivity of each output of ``function`` (unit-cube points, one column per name -> outputs) to
    each name: one row per (output, name) with ``S1``, ``ST`` and their 95% confidence half-widths
    (Sobol), or ``mu_star`` and ``sigma`` (Morris); ``invalid_share`` of points replaced by the mean."""
    from SALib.analyze import morris as morris_analyze
    from SALib.analyze import sobol as sobol_analyze
    from SALib.sample import morris as morris_sample
    from SALib.sample import sobol as sobol_sample

    if method not in METHODS:
        raise unknown("sensitivity method", method, METHODS)
    if not names:
        raise CommodelError("a sensitivity study needs at least one variable")
    problem = {"num_vars": len(names), "names": names, "bounds": [[0.0, 1.0]] * len(names)}
    if method == "sobol":
        x = sobol_sample.sample(problem, samples, calc_second_order=False, seed=seed)
    else:
        x = morris_sample.sample(problem, samples, num_levels=4, seed=seed)
    rows = []
    for output, y in function(x).items():
        y = np.asarray(y, dtype=float)
        bad = ~np.isfinite(y)
        if bad.all():
            raise CommodelError(f"no design of the space gives a value for {output}")
        y = np.where(bad, np.mean(y[~bad]), y)
        if method == "sobol":
            s = sobol_analyze.analyze(problem, y, calc_second_order=False, seed=seed)
            stats = {"S1": s["S1"], "S1_conf": s["S1_conf"], "ST": s["ST"], "ST_conf": s["ST_conf"]}
        else:
            s = morris_analyze.analyze(problem, x, y, num_levels=4, seed=seed)
            stats = {"mu_star": s["mu_star"], "mu_star_conf": s["mu_star_conf"], "sigma": s["sigma"]}
        for i, name in enumerate(names):
            rows.append({"output": output, "variable": name, **{k: float(v[i]) for k, v in stats.items()},
                         "invalid_share": float(bad.mean())})  # fmt: skip
    return pd.DataFrame(rows)


def _chunk_objectives(payload: str, index: int) -> pd.DataFrame:
    """The objectives of chunk ``index`` of a sensitivity sample (a picklable task, as a sweep's)."""
    from commodel.explore.evaluators import evaluator

    data = json.loads(payload)
    spec = SweepSpec.model_validate_json(data["spec"])
    size = spec.study.chunk_size
    x = np.asarray(data["x"], dtype=float)[index * size : (index + 1) * size]
    result = evaluator(spec.study.evaluate)(complete(spec, decode(spec, x, index * size)))
    valid = result["valid"].to_numpy(dtype=bool)
    return pd.DataFrame(
        {name: np.where(valid, result[name].to_numpy(dtype=float), np.nan) for name in spec.objectives}
    )


def study_function(
    spec: SweepSpec, executor: str = "local", scheduler: str | None = None
) -> Callable[[np.ndarray], dict[str, np.ndarray]]:
    """Unit-cube points -> the spec's objectives, through the sweep's encoding, evaluator, chunks and
    executors (a Dask cluster evaluates the chunks as it does a sweep's)."""
    from commodel.explore.executors import execute

    def objectives(x: np.ndarray) -> dict[str, np.ndarray]:
        payload = json.dumps({"spec": spec.model_dump_json(), "x": x.tolist()})
        chunks = list(range(-(-len(x) // spec.study.chunk_size)))
        parts = dict(execute(executor, _chunk_objectives, payload, chunks, scheduler))
        frame = pd.concat([parts[i] for i in chunks], ignore_index=True)
        return {name: frame[name].to_numpy() for name in spec.objectives}

    return objectives


def study_sensitivity(
    spec: SweepSpec,
    method: str = "sobol",
    samples: int = 256,
    seed: int = 0,
    executor: str = "local",
    scheduler: str | None = None,
) -> pd.DataFrame:
    """:func:`indices` of a study's objectives with respect to its variables."""
    if not spec.variables:
        raise CommodelError(f"{spec.study.name} has no variables to be sensitive to")
    return indices(study_function(spec, executor, scheduler), list(spec.variables), method, samples, seed)
