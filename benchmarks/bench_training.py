"""Throughput of the vectorized training-step model: distinct design points evaluated per second.

Run: ``python benchmarks/bench_training.py`` (results in docs/benchmarks.md). The batch is up to a
million distinct training configurations of Llama 3 70B on DGX H100 clusters (every point differs in
at least one of cluster size, tensor/pipeline/context parallelism, micro-batch, global batch, sequence
length, recomputation, sequence parallelism or ZeRO stage), priced in one call of ``train_step`` per
overlap strategy on one core. Layouts that differ only in global batch share their per-micro-batch
pricing, so a second run fixes the global batch: there every point is a distinct micro-batch
configuration, the worst case for that sharing.
"""

from __future__ import annotations

import itertools
import time

import numpy as np

from commodel.hardware import cluster
from commodel.pricing.training import job_layouts
from commodel.workloads.model.catalog import model
from commodel.workloads.parallel.layout import RECOMPUTE
from commodel.workloads.parallel.layout_rules import valid
from commodel.workloads.training.step import train_step


def design_points(limit: int) -> dict[str, np.ndarray]:
    """Distinct layouts from a product space (valid ones first), at most ``limit``."""
    space = {
        "nodes": [8, 16, 32, 64, 128, 256],
        "tp": [1, 2, 4, 8],
        "pp": [1, 2, 4, 8, 16],
        "cp": [1, 2],
        "micro_batch": [1, 2, 4],
        "global_batch": [256, 512, 768, 1024, 1536, 2048, 3072, 4096],
        "seq": [2048, 4096, 8192],
        "recompute": [0, 1, 2],
        "sequence_parallel": [False, True],
        "zero": [0, 1, 2, 3],
        "vpp": [1, 2],
    }
    grid = np.array(list(itertools.product(*space.values())), dtype=float)[:limit]
    return dict(zip(space, grid.T, strict=True))


def main(points: int = 1_000_000, repeats: int = 3) -> None:
    measure(design_points(points), repeats, "every point distinct")
    p = design_points(points)
    one_batch = p["global_batch"] == 1024
    measure(
        {k: v[one_batch] for k, v in p.items()},
        repeats,
        "one global batch: every micro-batch configuration distinct",
    )


def measure(p: dict[str, np.ndarray], repeats: int, label: str) -> None:
    net, c = model("llama3-70b"), cluster("dgx-h100")
    gpus = p["nodes"] * 8
    x = job_layouts({
        "model": "llama3-70b", "system": "dgx-h100", "gpus": gpus, "tp": p["tp"], "pp": p["pp"], "cp": p["cp"],
        "vpp": p["vpp"], "micro_batch": p["micro_batch"], "global_batch": p["global_batch"], "seq": p["seq"],
        "recompute": np.asarray(RECOMPUTE)[p["recompute"].astype(int)], "zero": p["zero"],
        "sequence_parallel": p["sequence_parallel"].astype(bool),
    })  # fmt: skip
    ok = valid(net, x, gpus)
    x = x.select(ok)
    n = int(ok.sum())
    print(f"{label}: {len(ok):,} points, {n:,} valid layouts")
    for strategy in ("serial", "sm-partition", "occupancy-shaped"):
        best = np.inf
        for _ in range(repeats):
            start = time.perf_counter()
            train_step(net, c, x, strategy=strategy)
            best = min(best, time.perf_counter() - start)
        print(
            f"{strategy:<18} {n:>9,} layouts in {best:6.2f} s = {n / best / 1e6:5.2f} M evaluations/s (one core)"
        )


if __name__ == "__main__":
    main()
