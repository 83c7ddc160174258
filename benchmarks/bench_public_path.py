"""The public batch path against its core, on the same space of distinct training layouts.

Run: ``python benchmarks/bench_public_path.py`` (results in docs/benchmarks.md). The space is 18,432
distinct Megatron 1T layouts on DGX A100 clusters (tp, pp, dp, micro-batch, recomputation, ZeRO stage,
sequence parallelism, global batch), every one of them valid, so both paths price the
same rows:

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

SPACE = {
    "tp": [1, 2, 4, 8],
    "pp": [8, 16, 32, 64],
    "dp": [1, 2, 4, 8],
    "micro_batch": [1, 2, 4, 8],
    "recompute": ["none", "selective", "full"],
    "zero": [0, 1, 2, 3],
    "sequence_parallel": [False, True],
    "global_batch": [1024, 2048, 4096],
}


def jobs() -> pd.DataFrame:
    """The space as a table of training jobs (Megatron 1T on DGX A100 nodes, tp x pp x dp GPUs)."""
    rows = pd.DataFrame(list(itertools.product(*SPACE.values())), columns=list(SPACE))
    return rows.assign(model="megatron-1t", system="dgx-a100", gpus=rows.tp * rows.pp * rows.dp)


def best_of(call: object, repeats: int) -> float:
    best = np.inf
    for _ in range(repeats):
        start = time.perf_counter()
        call()
        best = min(best, time.perf_counter() - start)
    return best


def main(repeats: int = 5) -> None:
    frame = jobs()
    price = evaluator("training")
    result = price(frame)
    assert result["valid"].all(), result.loc[~result["valid"], "problem"].iloc[0]
    layout, columns = job_layouts(frame), price.columns(frame)
    net, where = model("megatron-1t"), cluster("dgx-a100")
    public = best_of(lambda: price(frame), repeats)
    pricing = best_of(lambda: price_training(columns), repeats)
    step = best_of(lambda: train_step(net, where, layout), repeats)
    n = len(frame)
    print(f"{n:,} distinct Megatron 1T layouts, all valid")
    print(f"public (DataFrame -> training evaluator -> DataFrame): {n / public:12,.0f} layouts/s")
    print(f"pricing (price_training on the jobs as columns):       {n / pricing:12,.0f} layouts/s")
    print(f"step (train_step on the built layouts):                {n / step:12,.0f} layouts/s")
    print(f"public over pricing: {public / pricing:.2f}x the time; public over step: {public / step:.2f}x")


if __name__ == "__main__":
    main()
