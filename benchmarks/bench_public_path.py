"""The public batch path against its core, on the same spaces of distinct training layouts.

Run: ``python benchmarks/bench_public_path.py`` (results in docs/benchmarks.md). The space is Llama 3
8B's layouts on DGX A100 clusters (tp, pp, dp, micro-batch, recomputation, ZeRO stage, sequence
parallelism, global batch: 18,432 points), kept where they are valid and fit the GPUs' memory (a job
that does not fit gets no step, so the paths would not price the same rows); a second space fixes the
global batch, so that every point is a distinct micro-batch configuration. Each path prices the same
rows:

- **public**: a DataFrame of the jobs into the ``training`` evaluator (:func:`commodel.pricing.evaluator`),
  which checks every input by the job declaration's rules, resolves the layout, prices the step and
  the job totals (power, energy, goodput, cost) and returns a DataFrame;
- **pricing**: the same jobs already held as columns (the declaration's defaults broadcast) into
  :func:`commodel.pricing.training.price_training`: what the DataFrame path wraps, without the
  DataFrame in and out and the input checks;
- **step**: the same layouts already built, into :func:`commodel.workloads.training.step.train_step`
  (the step alone: no input checks, no layout rules, no job totals, no tables).

Each figure is the best of ``repeats`` calls, layouts per second; each ratio is the public path's
time over the other's.
"""

from __future__ import annotations

import itertools
import time

import numpy as np
import pandas as pd

from commodel.hardware import cluster
from commodel.pricing.evaluator import evaluator
from commodel.pricing.training import job_layouts, price_training
from commodel.workloads.model.catalog import model
from commodel.workloads.training.step import train_step

MODEL, SYSTEM = "llama3-8b", "dgx-a100"

SPACE = {
    "tp": [1, 2, 4, 8],
    "pp": [1, 2, 4, 8],
    "dp": [1, 2, 4, 8],
    "micro_batch": [1, 2, 4, 8],
    "recompute": ["none", "selective", "full"],
    "zero": [0, 1, 2, 3],
    "sequence_parallel": [False, True],
    "global_batch": [1024, 2048, 4096],
}


def jobs(**fixed: object) -> pd.DataFrame:
    """The space (with ``fixed`` fields held at one value) as a table of training jobs on tp x pp x dp
    GPUs."""
    space = SPACE | {name: [value] for name, value in fixed.items()}
    rows = pd.DataFrame(list(itertools.product(*space.values())), columns=list(space))
    return rows.assign(model=MODEL, system=SYSTEM, gpus=rows.tp * rows.pp * rows.dp)


def best_of(call: object, repeats: int) -> float:
    best = np.inf
    for _ in range(repeats):
        start = time.perf_counter()
        call()
        best = min(best, time.perf_counter() - start)
    return best


def measure(every: pd.DataFrame, label: str, repeats: int) -> None:
    """The three paths on the rows of ``every`` that fit."""
    price = evaluator("training")
    frame = every[price(every)["valid"].to_numpy()].reset_index(drop=True)
    assert price(frame)["valid"].all()
    layout, (columns, _) = job_layouts(frame), price.columns(frame)
    net, where = model(MODEL), cluster(SYSTEM)
    public = best_of(lambda: price(frame), repeats)
    pricing = best_of(lambda: price_training(columns), repeats)
    step = best_of(lambda: train_step(net, where, layout), repeats)
    n = len(frame)
    print(f"{label}: {n:,} distinct layouts that fit, of {len(every):,}")
    print(f"  public (DataFrame -> training evaluator -> DataFrame): {n / public:12,.0f} layouts/s")
    print(f"  pricing (price_training on the jobs as columns):       {n / pricing:12,.0f} layouts/s")
    print(f"  step (train_step on the built layouts):                {n / step:12,.0f} layouts/s")
    print(f"  public over pricing: {public / pricing:.2f}x the time; public over step: {public / step:.2f}x")


def main(repeats: int = 5) -> None:
    measure(jobs(), f"{MODEL} on {SYSTEM}", repeats)
    measure(jobs(global_batch=2048), "one global batch: every micro-batch configuration distinct", repeats)


if __name__ == "__main__":
    main()
