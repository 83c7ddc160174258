"""Collective cost model: time, algbw and busbw of every (algorithm, protocol), and NCCL-style tuning.

``time = launch + base_latency[protocol] + algorithm cost`` (see :mod:`commodel.comm.algorithms`).
``auto`` is the argmin over every applicable (algorithm, protocol) of that same time, as NCCL's tuner
selects (src/graph/tuning.cc), so the reported time is the cost that drove the choice.
Results follow nccl-tests: algbw = size / time, busbw = algbw x the collective's factor (GB = 1e9 B).
"""

from __future__ import annotations

import numpy as np
import pandas as pd
from numpy.typing import ArrayLike

from commodel.comm.algorithms import (
    ALGORITHMS,
    BUSBW_FACTOR,
    OPS,
    REDUCING_OPS,
    SUPPORTED,
    Point,
    library_algorithms,
    protocols_for,
)
from commodel.comm.fabric import Fabric, fabric_of
from commodel.comm.p2p import BASE_LATENCY_S, PROTOCOLS
from commodel.errors import CommodelError, unknown
from commodel.hardware.cluster import Cluster

LIBRARIES = ("all", "nccl")
COLUMNS = [
    "op",
    "algo",
    "protocol",
    "size_bytes",
    "gpus",
    "nodes",
    "time_s",
    "algbw_GBps",
    "busbw_GBps",
]


def check_op(op: str) -> None:
    if op not in OPS:
        raise unknown("collective", op, OPS)


def available(algo: str, fab: Fabric, nodes: ArrayLike) -> np.ndarray:
    """Whether ``algo`` can run with ``nodes`` nodes on ``fab`` (NVLS: one node with an NVLS switch)."""
    nodes = np.asarray(nodes)
    if algo == "nvls":
        return (nodes == 1) & (fab.nvls_Bps is not None)
    if algo == "hierarchical":
        return nodes > 1
    return np.ones(nodes.shape, dtype=bool)


def collective_time(
    op: str,
    algo: str,
    protocol: str,
    size_bytes: ArrayLike,
    ranks: ArrayLike,
    nodes: ArrayLike,
    fab: Fabric,
) -> np.ndarray:
    """Time in seconds of ``op`` with one algorithm and protocol; inputs broadcast against each other.

    Points where the algorithm cannot run get ``inf`` (so an argmin skips them); one rank costs 0.
    """
    check_op(op)
    if algo not in ALGORITHMS:
        raise unknown("algorithm", algo, ALGORITHMS)
    if protocol not in PROTOCOLS:
        raise unknown("protocol", protocol, PROTOCOLS)
    n, p, N = np.broadcast_arrays(
        np.asarray(size_bytes, dtype=float),
        np.asarray(ranks, dtype=float),
        np.asarray(nodes, dtype=float),
    )
    ok = available(algo, fab, N)
    if not ok.any():
        return np.where(p <= 1, 0.0, np.inf)
    point = Point(n=n, p=p, nodes=N, fab=fab, protocol=protocol, reduces=op in REDUCING_OPS)
    with np.errstate(divide="ignore", invalid="ignore"):
        cost = ALGORITHMS[algo](op, point)
    t = np.where(ok, fab.launch_s + BASE_LATENCY_S[protocol] + cost, np.inf)
    return np.where(p <= 1, 0.0, t)


def candidates(op: str, fab: Fabric, algos: tuple[str, ...] | None = None) -> list[tuple[str, str]]:
    """Every (algorithm, protocol) pair that implements ``op`` on ``fab`` (restricted to ``algos``)."""
    check_op(op)
    names = SUPPORTED[op] if algos is None else algos
    return [(a, p) for a in names for p in protocols_for(a, fab)]


def price(
    op: str,
    size_bytes: ArrayLike,
    ranks: ArrayLike,
    nodes: ArrayLike,
    fab: Fabric,
    pairs: list[tuple[str, str]] | None = None,
) -> tuple[list[tuple[str, str]], np.ndarray]:
    """Time of every (algorithm, protocol) pair at every point: an array of shape (pairs, *points)."""
    pairs = candidates(op, fab) if pairs is None else pairs
    return pairs, np.stack([collective_time(op, a, pr, size_bytes, ranks, nodes, fab) for a, pr in pairs])


def tune(
    op: str,
    size_bytes: ArrayLike,
    ranks: ArrayLike,
    nodes: ArrayLike,
    fab: Fabric,
    pairs: list[tuple[str, str]] | None = None,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Fastest (algorithm, protocol) per point among ``pairs`` (default: all candidates).

    Returns ``(time_s, algo, protocol)`` arrays: the argmin of the same cost that reports the time.
    """
    pairs, times = price(op, size_bytes, ranks, nodes, fab, pairs)
    best = np.argmin(times, axis=0)
    time = np.take_along_axis(times, best[None], axis=0)[0]
    algo = np.array([a for a, _ in pairs])[best]
    protocol = np.array([pr for _, pr in pairs])[best]
    return time, algo, protocol


def resolve_layout(cluster: Cluster, gpus: int | None) -> tuple[int, int]:
    """Ranks and nodes for ``gpus`` GPUs spread evenly over the cluster's nodes (default: all GPUs)."""
    total, nodes = cluster.total_gpus, cluster.nodes
    gpus = total if gpus is None else gpus
    if gpus < 1:
        raise CommodelError(f"--gpus must be at least 1, got {gpus}")
    if gpus > total:
        raise CommodelError(
            f"{gpus} GPUs requested but {nodes} node(s) of {cluster.name} have {total}; "
            f"raise --nodes to at least {-(-gpus // cluster.gpus_per_node)}"
        )
    if gpus % nodes:
        raise CommodelError(f"{gpus} GPUs do not spread evenly over {nodes} nodes; use a multiple of {nodes}")
    return gpus, nodes


def run(
    op: str,
    cluster: Cluster,
    sizes: ArrayLike,
    gpus: int | None = None,
    algo: str = "auto",
    protocol: str = "auto",
    library: str = "all",
) -> pd.DataFrame:
    """nccl-tests-like table of ``op`` over ``sizes`` on ``gpus`` GPUs of ``cluster``.

    ``algo``/``protocol`` = ``auto`` picks the fastest per size among the algorithms of ``library``
    (``all`` models, or those ``nccl`` implements); naming one restricts the choice and raises
    :class:`CommodelError` if it cannot run here.
    """
    check_op(op)
    if library not in LIBRARIES:
        raise unknown("library", library, LIBRARIES)
    fab = fabric_of(cluster)
    ranks, nodes = resolve_layout(cluster, gpus)
    algos = _requested_algos(op, algo, fab, nodes, cluster, library)
    pairs = candidates(op, fab, algos)
    if protocol != "auto":
        if protocol not in PROTOCOLS:
            raise unknown("protocol", protocol, PROTOCOLS)
        pairs = [(a, p) for a, p in pairs if p == protocol]
        if not pairs:
            raise CommodelError(f"protocol '{protocol}' is not available for {algo} on {cluster.name}")
    sizes = np.asarray(sizes, dtype=float)
    time, chosen, proto = tune(op, sizes, ranks, nodes, fab, pairs)
    return results_frame(op, sizes, ranks, nodes, time, chosen, proto)


def results_frame(
    op: str,
    sizes: np.ndarray,
    ranks: int,
    nodes: int,
    time: np.ndarray,
    algo: np.ndarray,
    protocol: np.ndarray,
) -> pd.DataFrame:
    """Assemble the nccl-tests columns; a single rank moves nothing (time, algbw, busbw all 0)."""
    moved = time > 0
    algbw = np.divide(sizes, time, out=np.zeros_like(sizes), where=moved) / 1e9
    busbw = algbw * BUSBW_FACTOR[op](np.float64(ranks))
    return pd.DataFrame(
        {
            "op": op,
            "algo": algo,
            "protocol": protocol,
            "size_bytes": sizes.astype(np.int64),
            "gpus": ranks,
            "nodes": nodes,
            "time_s": time,
            "algbw_GBps": algbw,
            "busbw_GBps": busbw,
        },
        columns=COLUMNS,
    )


def _requested_algos(
    op: str, algo: str, fab: Fabric, nodes: int, cluster: Cluster, library: str
) -> tuple[str, ...]:
    if algo == "auto":
        return tuple(a for a in library_algorithms(op, library, fab) if available(a, fab, nodes))
    if algo not in ALGORITHMS:
        raise unknown("algorithm", algo, ("auto", *ALGORITHMS))
    if algo not in SUPPORTED[op]:
        raise CommodelError(f"{op} has no '{algo}' algorithm; choose from: auto, {', '.join(SUPPORTED[op])}")
    if algo == "nvls" and fab.nvls_Bps is None:
        raise CommodelError(
            f"{cluster.name} cannot run nvls: its {cluster.system.scale_up.link} fabric "
            f"({cluster.scale_up.switch or cluster.scale_up.kind}) has no in-switch reduction"
        )
    if not available(algo, fab, nodes):
        reason = "nvls reduces inside one node; use hierarchical" if algo == "nvls" else "needs nodes > 1"
        raise CommodelError(f"'{algo}' cannot run on {nodes} node(s): {reason}")
    return (algo,)
