"""Global sensitivity of a study's objectives to its variables and, on request, the uncertain numbers
of its hardware (``commodel sensitivity [--parameters]``): first-order and total Sobol indices
(Saltelli sampling) or Morris elementary effects, estimated by SALib.

Every variable spans the unit interval its sweep encoding uses (:func:`commodel.explore.space.decode`:
choices and integers pick among their grid values, reals interpolate); the design points are
completed and evaluated exactly as a sweep evaluates them, chunk by chunk, by the same executors
(in this process, or on a Dask cluster). A point the evaluator rejects (an invalid
layout) takes the objective's mean over the valid points, and the share of such points is reported:
an index is only as good as the space is valid. An uncertain number spans its range
(:mod:`commodel.hardware.uncertain`, uniform in the logarithm) and each point is priced on the
database its numbers give: one evaluation per point, so this is for small studies.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable, Sequence

import numpy as np
import pandas as pd

from commodel.errors import CommodelError, unknown
from commodel.explore.evaluation import commonest_reason
from commodel.explore.executors import execute
from commodel.explore.space import complete, decode, grid_index
from commodel.explore.spec import Choice, RealRange, SweepSpec
from commodel.hardware.uncertain import Uncertain, factors_of, on_draws
from commodel.pricing.evaluator import evaluator, objective_values
from commodel.validate.bands import hardware_uncertainty

METHODS = ("sobol", "morris")


def indices(
    function: Callable[[np.ndarray], dict[str, np.ndarray]],
    names: list[str],
    method: str = "sobol",
    samples: int = 256,
    seed: int = 0,
    levels: Callable[[np.ndarray], np.ndarray] | None = None,
) -> pd.DataFrame:
    """Sensitivity of each output of ``function`` (unit-cube points, one column per name -> outputs) to
    each name: one row per (output, name) with ``S1``, ``ST`` and their 95% confidence half-widths
    (Sobol), or ``mu_star`` and ``sigma`` (Morris); ``invalid_share`` of points replaced by the mean.

    ``levels`` maps unit-cube points to the values the function actually sees (a choice's index): a
    Sobol estimate compares each base point ``A`` with ``A`` whose column ``j`` comes from a second
    point ``B``, so where no base sample's two draws of ``j`` give different values (a few samples of
    a two-valued choice can land in the same half every time: SALib's 16 base samples of six
    variables do for the sixth), ``j`` was never varied and its indices are not measured: NaN, and
    :func:`estimator_notes` says so, where they would read as zero."""
    # slow: SALib (0.8 s with scipy.stats), for sensitivity runs only
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
    varied = (
        _varied(levels(x), len(names))
        if levels is not None and method == "sobol"
        else np.ones(len(names), bool)
    )
    rows = []
    for output, y in function(x).items():
        y = np.asarray(y, dtype=float)
        bad = ~np.isfinite(y)
        if bad.all():
            raise CommodelError(f"no design of the space gives a value for {output}")
        y = np.where(bad, np.mean(y[~bad]), y)
        if method == "sobol":
            # A generator, not the seed: SALib bootstraps from NumPy's global state when seed is 0.
            s = sobol_analyze.analyze(problem, y, calc_second_order=False, seed=np.random.default_rng(seed))
            stats = {"S1": s["S1"], "S1_conf": s["S1_conf"], "ST": s["ST"], "ST_conf": s["ST_conf"]}
        else:
            s = morris_analyze.analyze(problem, x, y, num_levels=4, seed=seed)
            stats = {"mu_star": s["mu_star"], "mu_star_conf": s["mu_star_conf"], "sigma": s["sigma"]}
        for i, name in enumerate(names):
            values = {k: float(v[i]) if varied[i] else float("nan") for k, v in stats.items()}
            rows.append({"output": output, "variable": name, **values, "invalid_share": float(bad.mean())})
    return pd.DataFrame(rows)


def _varied(levels: np.ndarray, d: int) -> np.ndarray:
    """Per variable, whether some Sobol base sample's ``A`` and ``A`` with that column from ``B`` (SALib's
    rows: ``A``, ``AB_1`` .. ``AB_d``, ``B``, for each base sample) give it different values."""
    blocks = np.asarray(levels).reshape(-1, d + 2, levels.shape[1])
    a, swapped = blocks[:, 0, :d], blocks[:, 1 : d + 1, :d]
    return (swapped[:, np.arange(d), np.arange(d)] != a).any(axis=0)


#: The 95% confidence half-width of a Sobol index taken as resolved (the note's target).
RESOLVED_CONF = 0.05


def estimator_notes(table: pd.DataFrame, samples: int) -> list[str]:
    """What a Sobol table cannot yet say at ``samples`` base samples: each index whose estimate is
    impossible (a first-order index above the total, or below 0) or whose 95% interval is wider than
    :data:`RESOLVED_CONF`, and the samples that would narrow it to that (the interval shrinks as one
    over the square root of the samples)."""
    if "S1" not in table:
        return []
    notes = [
        f"{name}: no base sample's two draws give it different values at {samples} base samples, so its "
        "indices are not measured (NaN, not zero); give more samples"
        for name in dict.fromkeys(table.variable[table.S1.isna() & table.ST.isna()])
    ]
    odd = table[(table.S1 > table.ST) | (table.S1 < 0)]
    for r in odd.itertuples():
        notes.append(
            f"{r.output} / {r.variable}: S1 = {r.S1:.3f} ± {r.S1_conf:.3f} against ST = {r.ST:.3f} ± {r.ST_conf:.3f} "
            "is estimator noise at this sample size (S1 cannot exceed ST nor fall below 0)"
        )
    confs = table[["S1_conf", "ST_conf"]].to_numpy()
    widest = float(np.nanmax(confs)) if np.isfinite(confs).any() else 0.0
    if widest > RESOLVED_CONF:
        needed = int(2 ** np.ceil(np.log2(samples * (widest / RESOLVED_CONF) ** 2)))
        notes.append(
            f"the widest 95% interval is ±{widest:.3f} at {samples} base samples; about {needed} would narrow "
            f"every one to ±{RESOLVED_CONF}"
        )
    return notes


def _chunk_objectives(payload: str, index: int) -> pd.DataFrame:
    """The objectives of chunk ``index`` of a sensitivity sample (a picklable task, as a sweep's): the
    variables' columns decoded as a sweep decodes them; each uncertain number's column (if any) a
    factor on it, every point then priced on its own moved database."""
    data = json.loads(payload)
    spec = SweepSpec.model_validate_json(data["spec"])
    size, d = spec.study.chunk_size, len(spec.variables)
    x = np.asarray(data["x"], dtype=float)[index * size : (index + 1) * size]
    designs = complete(spec, decode(spec, x[:, :d], index * size))
    evaluate = evaluator(spec.study.evaluate)
    parameters = [Uncertain(**{**p, "path": tuple(p["path"])}) for p in data["parameters"]]
    if parameters:
        point = factors_of(parameters, x[:, d:])  # each point on its own moved database
        parts = on_draws(lambda i: evaluate(designs.iloc[[i]]), parameters, point)
        result = pd.concat(parts, ignore_index=True)
    else:
        result = evaluate(designs)
    return pd.DataFrame(objective_values(result, list(spec.objectives)), columns=list(spec.objectives))


def study_function(
    spec: SweepSpec,
    executor: str = "local",
    scheduler: str | None = None,
    parameters: Sequence[Uncertain] = (),
) -> Callable[[np.ndarray], dict[str, np.ndarray]]:
    """Unit-cube points (the variables, then ``parameters``) -> the spec's objectives, through the
    sweep's encoding, evaluator, chunks and executors (a Dask cluster evaluates the chunks as it
    does a sweep's)."""

    def objectives(x: np.ndarray) -> dict[str, np.ndarray]:
        payload = json.dumps({"spec": spec.model_dump_json(), "x": x.tolist(),
                              "parameters": [dataclasses.asdict(p) for p in parameters]})  # fmt: skip
        chunks = list(range(-(-len(x) // spec.study.chunk_size)))
        parts = dict(execute(executor, _chunk_objectives, payload, chunks, scheduler))
        frame = pd.concat([parts[i] for i in chunks], ignore_index=True)
        given_by_none = frame.columns[frame.isna().all()]
        if len(given_by_none):  # an objective no design gives: say why, as a sweep does
            reason = commonest_reason(spec)
            raise CommodelError(
                f"no design of the space gives a value for {given_by_none[0]}"
                + (f"; {reason}" if reason else "")
            )
        return {name: frame[name].to_numpy() for name in spec.objectives}

    return objectives


def study_sensitivity(
    spec: SweepSpec,
    method: str = "sobol",
    samples: int = 256,
    seed: int = 0,
    executor: str = "local",
    scheduler: str | None = None,
    parameters: bool = False,
) -> pd.DataFrame:
    """:func:`indices` of a study's objectives with respect to its variables and, with
    ``parameters``, the uncertain numbers of the hardware its designs use (each point then priced
    on its own database: one evaluation per point, for small studies)."""
    uncertain = _study_parameters(spec) if parameters else []
    if not spec.variables and not uncertain:
        raise CommodelError(f"{spec.study.name} has no variables to be sensitive to")
    fixed = [name for name, var in spec.variables.items() if not var.varies]
    if fixed and len(fixed) == len(spec.variables) and not uncertain:
        raise CommodelError(
            f"{spec.study.name}: no variable varies ({', '.join(fixed)} take one value each): nothing to be "
            "sensitive to"
        )
    names = [*spec.variables, *(p.label for p in uncertain)]
    function = study_function(spec, executor, scheduler, uncertain)
    return indices(function, names, method, samples, seed, lambda x: unit_levels(spec, x))


def unit_levels(spec: SweepSpec, x: np.ndarray) -> np.ndarray:
    """Unit-cube points as what the study's variables take (:func:`~commodel.explore.space.decode`: a
    choice's or an integer's index among its grid values; a real's own coordinate), uncertain numbers'
    columns as they are."""
    levels = np.array(x, dtype=float)
    for j, var in enumerate(spec.variables.values()):
        if not isinstance(var, RealRange):
            levels[:, j] = grid_index(var, x[:, j])
    return levels


def _study_parameters(spec: SweepSpec) -> list[Uncertain]:
    """The uncertain numbers of the hardware records any design of the space may use."""
    choices = [v for var in spec.variables.values() if isinstance(var, Choice) for v in var.choice]
    return hardware_uncertainty(str(v) for v in [*choices, *spec.fixed.values()])
