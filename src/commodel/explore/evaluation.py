"""Evaluating a design space: its points chunk by chunk (grid order, or the sampler's), completed
with fixed and derived inputs, through the spec's evaluator, with validity and constraints marked.
What sweeps, studies and optimizers share; a spec with ``[uncertainty]`` adds each design's bands
(:mod:`commodel.explore.robust`)."""

from __future__ import annotations

from functools import cache

import numpy as np
import pandas as pd

from commodel.explore.expressions import constraint_mask
from commodel.explore.robust import with_draw_bands
from commodel.explore.space import complete, design_points, grid_chunk, sample
from commodel.explore.spec import SweepSpec
from commodel.pricing.evaluator import evaluator

SAMPLED = ("grid", "sobol", "lhs")


def chunk_count(spec: SweepSpec) -> int:
    return -(-design_points(spec) // spec.study.chunk_size)


@cache
def _samples(spec_json: str) -> pd.DataFrame:
    return sample(SweepSpec.model_validate_json(spec_json))


def chunk_inputs(spec: SweepSpec, index: int) -> pd.DataFrame:
    """The input table of chunk ``index``: variables, fixed inputs and derived values."""
    start = index * spec.study.chunk_size
    stop = min(start + spec.study.chunk_size, design_points(spec))
    if spec.study.method == "grid":
        points = grid_chunk(spec, start, stop)
    else:
        points = _samples(spec.model_dump_json()).iloc[start:stop]
    return complete(spec, points)


def finish(spec: SweepSpec, frame: pd.DataFrame) -> pd.DataFrame:
    """Evaluate a table of inputs; keep valid rows and mark those meeting every constraint and
    giving every objective a number (a deployment with no room for one request has no throughput)."""
    result = evaluator(spec.study.evaluate)(frame)
    valid = result["valid"].to_numpy(dtype=bool)
    result = result[valid].drop(columns="valid").reset_index(drop=True)
    objectives = result[list(spec.objectives)].to_numpy(dtype=float)
    feasible = np.isfinite(objectives).all(axis=1) if len(result) else np.ones(0, dtype=bool)
    for text in spec.study.constraints:
        feasible &= constraint_mask(text, result)
    result = result.assign(feasible=feasible)
    return with_draw_bands(spec, frame[valid].reset_index(drop=True), result)


def evaluate_chunk(spec_json: str, index: int) -> pd.DataFrame:
    """Evaluate chunk ``index`` of a specification given as JSON (a picklable task for Dask)."""
    spec = SweepSpec.model_validate_json(spec_json)
    return finish(spec, chunk_inputs(spec, index))


def commonest_reason(spec: SweepSpec, rows: int = 1000) -> str:
    """Why designs are invalid, in words ("" if none is): the commonest kind of problem among the first
    ``rows`` designs of the space (a problem's words before its first colon: "does not fit" whatever
    memory each row needs), how many of how many have it, and one problem of that kind in full."""
    frame = chunk_inputs(
        spec.model_copy(update={"study": spec.study.model_copy(update={"chunk_size": rows})}), 0
    )
    result = evaluator(spec.study.evaluate)(frame)
    problems = result.loc[~result["valid"].to_numpy(dtype=bool), "problem"] if "problem" in result else None
    if problems is None or problems.empty:
        return ""
    kinds = problems.str.split(":", n=1).str[0]
    counts = kinds.value_counts()
    text = problems[kinds == counts.index[0]].iloc[0]
    return (
        f"the commonest reason ({counts.iloc[0]} of the first {len(frame)}), as one of them says it: {text}"
    )


def emptying_constraint(spec: SweepSpec, results: pd.DataFrame) -> tuple[str, int] | None:
    """The constraint that removes the last of the valid designs ``results``, applied in the order
    the specification gives them, and how many designs were left before it (``None`` if some design
    meets them all)."""
    left = np.ones(len(results), dtype=bool)
    for text in spec.study.constraints:
        before = int(left.sum())
        left &= constraint_mask(text, results)
        if before and not left.any():
            return text, before
    return None
