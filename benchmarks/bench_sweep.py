"""Sweep engine benchmarks: the default study end to end, NSGA-II against the exhaustive grid, and a
10-million-point grid streamed with bounded memory.

Run: ``python benchmarks/bench_sweep.py [--big]`` (results in docs/benchmarks.md). ``--big`` adds
the 10-million-point grid (about a minute and several GB of scratch disk).
"""

from __future__ import annotations

import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pandas as pd

from commodel.explore.pareto import bounds, hypervolume, objective_matrix, pareto_front
from commodel.explore.space import grid_size
from commodel.explore.spec import Choice, IntRange, RealRange, load_spec
from commodel.explore.sweep import evaluate_all, run_sweep
from commodel.resources import resource_dir

DEFAULT = resource_dir("studies") / "default" / "study.toml"
#: The optimizer's reach and the grid's throughput are measured on the nominal models (no bands).
NOMINAL = {"uncertainty": None, "sensitivity": None}
#: Points per chunk of the big grid: what bounds its memory.
CHUNK = 100_000


def default_study_wall_time() -> float:
    """``commodel sweep`` with no arguments, as a user runs it (process start to plot written)."""
    with tempfile.TemporaryDirectory() as tmp:
        start = time.perf_counter()
        subprocess.run(["commodel", "sweep", "--quiet", "-o", tmp], check=True, capture_output=True)
        elapsed = time.perf_counter() - start
        assert (Path(tmp) / "pareto.png").is_file()
    return elapsed


def nsga_against_grid(share: float = 0.05, seeds: range = range(5)) -> list[tuple[int, int, float]]:
    """(grid evaluations, NSGA-II evaluations, hypervolume ratio) per seed, in the grid's normalization."""
    grid_spec = load_spec(DEFAULT).model_copy(update=NOMINAL)
    grid = evaluate_all(grid_spec)
    feasible = grid[grid.feasible]
    lo, hi = bounds(objective_matrix(feasible, grid_spec.objectives))
    reference = hypervolume(
        objective_matrix(pareto_front(feasible, grid_spec.objectives), grid_spec.objectives), lo, hi
    )
    budget = int(share * len(grid))
    rows = []
    for seed in seeds:
        study = grid_spec.study.model_copy(update={"method": "nsga2", "budget": budget, "seed": seed})
        found = evaluate_all(grid_spec.model_copy(update={"study": study}))
        found = found[found.feasible]
        points = objective_matrix(pareto_front(found, grid_spec.objectives), grid_spec.objectives)
        rows.append((len(grid), budget, hypervolume(points, lo, hi) / reference))
    return rows


def big_grid(points: int = 10_000_000) -> tuple[float, float, int]:
    """(seconds, peak resident memory in GiB, points) of a training grid of at least ``points`` points,
    streamed to disk: the default study with PUE, global batch and sequence length as variables too."""
    spec = load_spec(DEFAULT)
    variables = {
        **spec.variables,
        "nodes": IntRange(int=(8, 256), log=True),
        "tp": Choice(choice=[1, 2, 4, 8]),
        "pp": Choice(choice=[1, 2, 4, 8, 16]),
        "micro_batch": Choice(choice=[1, 2, 4, 8]),
        "pue": RealRange(real=(1.05, 1.6), points=20),
        "global_batch": IntRange(int=(64, 8192), log=True),
        "seq": IntRange(int=(1024, 8192), log=True),
    }
    fixed = {k: v for k, v in spec.fixed.items() if k not in variables}
    study = spec.study.model_copy(update={"name": "big", "chunk_size": CHUNK})
    big = spec.model_copy(update={"study": study, "variables": variables, "fixed": fixed, **NOMINAL})
    total = grid_size(big)
    assert total >= points, total
    with tempfile.TemporaryDirectory() as tmp:
        start = time.perf_counter()
        run_sweep(big, tmp, progress=False)
        elapsed = time.perf_counter() - start
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20
    return elapsed, peak, total


def main() -> None:
    print(f"default study (commodel sweep, wall): {default_study_wall_time():.1f} s")
    rows = nsga_against_grid()
    table = pd.DataFrame(rows, columns=["grid_evaluations", "nsga2_evaluations", "hypervolume_ratio"])
    print(table.to_string(index=False))
    print(
        f"NSGA-II hypervolume / grid hypervolume: min {table.hypervolume_ratio.min():.4f}, mean {table.hypervolume_ratio.mean():.4f}"
    )
    if "--big" in sys.argv:
        seconds, peak, total = big_grid()
        print(
            f"{total:,}-point grid: {seconds:.0f} s ({total / seconds:,.0f} points/s), peak resident memory {peak:.2f} GiB"
        )


if __name__ == "__main__":
    main()
