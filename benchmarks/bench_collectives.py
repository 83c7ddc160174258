"""Throughput of the vectorized collective model: points priced per second in one call.

Run: ``python benchmarks/bench_collectives.py`` (results go to docs/benchmarks.md by hand).
One call prices every (algorithm, protocol) pair of allreduce on 2,000 sizes x 64 domain counts on
one fabric (``price``), or also runs NCCL's tuner on every pair and picks its choice (``tune``, the
``auto`` result).
"""

from __future__ import annotations

import time

import numpy as np

from commodel.comm.collectives import candidates, price, tune
from commodel.comm.fabric import fabric_of
from commodel.hardware import cluster


def main(repeats: int = 5) -> None:
    fab = fabric_of(cluster("dgx-h100", 64))
    sizes = np.logspace(3, 34, 2000, base=2)[:, None]
    nodes = np.arange(1, 65)[None, :]
    ranks = nodes * 8
    pairs = candidates("allreduce", fab, ("ring", "tree", "nvls", "nvls-tree"))
    calls = {
        "price (all pairs)": lambda: price("allreduce", sizes, ranks, nodes, fab, pairs),
        "tune (NCCL's choice)": lambda: tune("allreduce", sizes, ranks, nodes, fab, pairs, policy="auto"),
    }
    for label, fn in calls.items():
        best = np.inf
        for _ in range(repeats):
            start = time.perf_counter()
            fn()
            best = min(best, time.perf_counter() - start)
        points = sizes.size * ranks.size * len(pairs)
        print(
            f"{label:<22} {points:>10,d} points in {best * 1e3:7.1f} ms = {points / best / 1e6:6.1f} M points/s"
        )


if __name__ == "__main__":
    main()
