"""Throughput of the vectorized collective model: points priced per second in one call.

Run: ``python benchmarks/bench_collectives.py`` (results go to docs/benchmarks.md by hand).
One call prices every (algorithm, protocol) pair of allreduce on 2,000 sizes x 64 rank counts on
one fabric, then picks the fastest per point (the ``auto`` tuner).
"""

from __future__ import annotations

import time

import numpy as np

from commodel.comm.collectives import price, tune
from commodel.comm.fabric import fabric_of
from commodel.hardware import cluster


def main(repeats: int = 5) -> None:
    fab = fabric_of(cluster("dgx-h100", 64))
    sizes = np.logspace(3, 34, 2000, base=2)[:, None]
    nodes = np.arange(1, 65)[None, :]
    ranks = nodes * 8
    for label, fn in (("price (all pairs)", price), ("tune (argmin)", tune)):
        best = np.inf
        for _ in range(repeats):
            start = time.perf_counter()
            out = fn("allreduce", sizes, ranks, nodes, fab)
            best = min(best, time.perf_counter() - start)
        pairs = len(out[0]) if fn is price else len(price("allreduce", 8, 8, 1, fab)[0])
        points = sizes.size * ranks.size * pairs
        print(
            f"{label:<18} {points:>10,d} points in {best * 1e3:7.1f} ms = {points / best / 1e6:6.1f} M points/s"
        )


if __name__ == "__main__":
    main()
