"""Collective cost model: time, algbw and busbw of every (algorithm, protocol), and how one is chosen.

Time is :func:`commodel.comm.nccl_physical.physical_time` for NCCL's algorithms (ring, tree, NVLS, NVLS-tree,
CollNet, PAT) and ``launch + base latency + cost`` for the MPI algorithms of
:mod:`commodel.comm.mpi`. Two policies choose among them:

- ``auto``: what the library does. With ``library="nccl"`` (RCCL on AMD GPUs) it is the argmin of
  NCCL's own tuner cost (:func:`commodel.comm.nccl.tuner_time`), so the choice is NCCL's and the time
  is what that choice takes; with ``library="all"`` no single library's tuner covers every algorithm,
  so ``auto`` is ``best``.
- ``best``: the argmin of the time itself, what a perfect tuner plugin would choose.

Results follow nccl-tests: algbw = size / time, busbw = algbw x the collective's factor (GB = 1e9 B).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
from numpy.typing import ArrayLike

from commodel.comm import mpi, nccl, nccl_physical
from commodel.comm.fabric import Fabric
from commodel.comm.mpi import OPS, REDUCING_OPS, Point
from commodel.comm.p2p import BASE_LATENCY_S, PROTOCOLS
from commodel.errors import unknown
from commodel.vectorize import memoized

if TYPE_CHECKING:
    pass

LIBRARIES = ("nccl", "all")
POLICIES = ("auto", "best")
ALGORITHMS = (*nccl.tables.ALGOS, *mpi.ALGORITHMS)


def check_op(op: str) -> None:
    if op not in OPS:
        raise unknown("collective", op, OPS)


def library_algorithms(op: str, library: str) -> tuple[str, ...]:
    """Algorithms a library offers for ``op``: NCCL's (its point-to-point path for alltoall and
    sendrecv), or with ``all`` every algorithm commodel models."""
    if library not in LIBRARIES:
        raise unknown("library", library, LIBRARIES)
    own = nccl.NCCL_ALGORITHMS.get(op, ("direct",))
    return own if library == "nccl" else (*own, *(a for a in mpi.SUPPORTED[op] if a not in own))


#: NCCL's point-to-point operations (alltoall, sendrecv) run LL up to this many bytes per peer and
#: Simple above it, never LL128 (``NCCL_P2P_LL_THRESHOLD``, src/enqueue.cc ``addP2pToPlan``).
P2P_LL_THRESHOLD = 16384
P2P_OPS = ("sendrecv", "alltoall")


def protocols_for(algo: str, fab: Fabric) -> tuple[str, ...]:
    """Protocols ``algo`` can use on ``fab``."""
    if algo in nccl.tables.ALGOS:
        return nccl.protocols(algo, fab)
    if algo == "direct":
        return ("ll", "simple")
    return tuple(p for p in PROTOCOLS if p != "ll128" or fab.ll128)


def p2p_protocol_taken(op: str, protocol: str, size_bytes: np.ndarray, ranks: np.ndarray) -> np.ndarray:
    """Where NCCL itself runs its point-to-point path in ``protocol``: LL where a peer's share is at
    most :data:`P2P_LL_THRESHOLD` bytes, Simple above."""
    peer = size_bytes / ranks if op == "alltoall" else size_bytes
    small = peer <= P2P_LL_THRESHOLD
    return small if protocol == "ll" else ~small


def candidates(op: str, fab: Fabric, algos: tuple[str, ...] | None = None) -> list[tuple[str, str]]:
    """Every (algorithm, protocol) pair that implements ``op`` on ``fab`` (restricted to ``algos``)."""
    check_op(op)
    names = library_algorithms(op, "all") if algos is None else algos
    return [(a, p) for a in names for p in protocols_for(a, fab)]


def _arrays(size_bytes: ArrayLike, ranks: ArrayLike, nodes: ArrayLike) -> tuple[np.ndarray, ...]:
    """Sizes, ranks and domains as float arrays, not broadcast against each other: everything that
    depends on ranks and domains only (graphs, latencies) is priced once per layout, not per size."""
    return tuple(np.asarray(v, dtype=float) for v in (size_bytes, ranks, nodes))


def _nccl_available(op: str, algo: str, fab: Fabric, p: np.ndarray, nodes: np.ndarray) -> np.ndarray:
    return nccl.available(op, algo, fab, p / nodes, nodes)


def pair_time(
    op: str,
    algo: str,
    protocol: str,
    size_bytes: ArrayLike,
    ranks: ArrayLike,
    nodes: ArrayLike,
    fab: Fabric,
    channels: ArrayLike | None = None,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(seconds, channels, chunk bytes) of ``op`` with one algorithm and protocol over ``ranks`` GPUs
    in ``nodes`` scale-up domains; ``inf`` where the algorithm cannot run, 0 for one rank."""
    check_op(op)
    if algo not in ALGORITHMS:
        raise unknown("algorithm", algo, ALGORITHMS)
    if protocol not in PROTOCOLS:
        raise unknown("protocol", protocol, PROTOCOLS)
    n, p, N = _arrays(size_bytes, ranks, nodes)
    shape = np.broadcast_shapes(n.shape, p.shape, N.shape)
    if algo in nccl.tables.ALGOS:
        ok = _nccl_available(op, algo, fab, p, N) if algo in nccl.NCCL_ALGORITHMS.get(op, ()) else p < 0
        if not ok.any():
            zeros = np.zeros(shape)
            return np.broadcast_to(np.where(p <= 1, 0.0, np.inf), shape), zeros, zeros
        with np.errstate(divide="ignore", invalid="ignore"):
            time, used, chunk = nccl_physical.physical_time(op, algo, protocol, n, p, N, fab, channels)
    else:
        ok = mpi.available(algo, N) & (algo in mpi.SUPPORTED[op])
        point = Point(n=n, p=p, nodes=N, fab=fab, protocol=protocol, reduces=op in REDUCING_OPS,
                      all_to_all=op == "alltoall")  # fmt: skip
        with np.errstate(divide="ignore", invalid="ignore"):
            time = fab.call_time(BASE_LATENCY_S[protocol] + mpi.ALGORITHMS[algo](op, point))
        used, chunk = np.ones(shape), np.broadcast_to(n, shape)
    if fab.unpack and protocol != "simple":  # device-unpack net plugins carry only Simple across nodes
        ok = ok & (N <= 1)
    time = np.where(ok, time, np.inf)
    full = [np.broadcast_to(v, shape) for v in (np.where(p <= 1, 0.0, time), np.where(ok, used, 0.0))]
    return full[0], full[1], np.broadcast_to(np.where(ok, chunk, 0.0), shape)


def collective_time(
    op: str,
    algo: str,
    protocol: str,
    size_bytes: ArrayLike,
    ranks: ArrayLike,
    nodes: ArrayLike,
    fab: Fabric,
) -> np.ndarray:
    """Time in seconds of ``op`` with one algorithm and protocol (see :func:`pair_time`)."""
    return pair_time(op, algo, protocol, size_bytes, ranks, nodes, fab)[0]


@dataclass(frozen=True)
class Choice:
    """The chosen (algorithm, protocol) per point, its time, channels and chunk size."""

    time_s: np.ndarray
    algo: np.ndarray
    protocol: np.ndarray
    channels: np.ndarray
    chunk_bytes: np.ndarray


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


def tuner_cost(
    op: str,
    size_bytes: ArrayLike,
    ranks: ArrayLike,
    nodes: ArrayLike,
    fab: Fabric,
    pairs: list[tuple[str, str]],
) -> tuple[np.ndarray, dict[int, tuple[np.ndarray, np.ndarray, np.ndarray]]]:
    """NCCL's own predicted time of every pair (shape (pairs, *points)), ``inf`` where a pair cannot
    run. A pair NCCL's tuner does not price (the point-to-point path) stands in with its physical
    time where NCCL takes its protocol (:func:`p2p_protocol_taken`); those pairs' :func:`pair_time`
    results come back too (pair index -> result), so that choosing one does not price it again."""
    n, p, N = _arrays(size_bytes, ranks, nodes)
    points = np.broadcast_shapes(n.shape, p.shape, N.shape)
    terms, available, priced = _tuner_terms(op, p, N, fab.tuner_view, tuple(pairs), len(points))
    cost = np.full((len(pairs), *points), np.inf)
    if priced:
        with np.errstate(divide="ignore", invalid="ignore"):
            cost[priced] = np.where(available, terms.time(n), np.inf)
    physical = {}
    for i, (algo, proto) in enumerate(pairs):
        if i not in priced:
            physical[i] = pair_time(op, algo, proto, n, p, N, fab)
            taken = p2p_protocol_taken(op, proto, n, p) if algo == "direct" else True
            cost[i] = np.where(taken, physical[i][0], np.inf)
    return cost, physical


@memoized
def _tuner_terms(
    op: str, p: np.ndarray, N: np.ndarray, fab: Fabric, pairs: tuple[tuple[str, str], ...], ndim: int
) -> tuple[nccl.TunerTerms | None, np.ndarray, list[int]]:
    """NCCL's tuner terms of the pairs its tuner prices, :func:`~commodel.comm.nccl.stacked` (a
    leading axis of one entry per such pair before ``ndim`` points' axes), where each can run, and
    their indices among ``pairs``: size-independent, so a loop of estimates computes them once."""
    priced = [i for i, (algo, _) in enumerate(pairs) if algo in nccl.NCCL_ALGORITHMS.get(op, ())]
    if not priced:
        return None, np.zeros(0, dtype=bool), priced
    with np.errstate(divide="ignore", invalid="ignore"):
        terms = [nccl.tuner_terms(op, *pairs[i], p, N, fab) for i in priced]
    available = np.broadcast_arrays(*(_nccl_available(op, pairs[i][0], fab, p, N) for i in priced))
    points = (1,) * (ndim - available[0].ndim) + available[0].shape
    return nccl.stacked(terms, ndim), np.stack([a.reshape(points) for a in available]), priced


def tune(
    op: str,
    size_bytes: ArrayLike,
    ranks: ArrayLike,
    nodes: ArrayLike,
    fab: Fabric,
    pairs: list[tuple[str, str]] | None = None,
    policy: str = "best",
) -> Choice:
    """The chosen pair per point among ``pairs`` (default: all candidates) under ``policy``:
    ``auto`` (NCCL's tuner decides) or ``best`` (the fastest)."""
    if policy not in POLICIES:
        raise unknown("policy", policy, POLICIES)
    pairs = candidates(op, fab) if pairs is None else pairs
    if policy == "best":
        results = dict(enumerate(pair_time(op, a, pr, size_bytes, ranks, nodes, fab) for a, pr in pairs))
        cost = np.stack([r[0] for r in results.values()])
    else:
        cost, results = tuner_cost(op, size_bytes, ranks, nodes, fab, pairs)
    while True:  # price the pairs chosen somewhere; one that cannot run there is never chosen
        best = np.argmin(cost, axis=0)
        for i in sorted(set(best.ravel().tolist())):
            if i not in results:
                results[i] = pair_time(op, *pairs[i], size_bytes, ranks, nodes, fab)
        chosen = [_gather(best, results, k) for k in range(3)]
        best_cost = np.take_along_axis(cost, best[None], axis=0)[0]
        stuck = ~np.isfinite(chosen[0]) & np.isfinite(best_cost)
        if not stuck.any():
            break
        np.put_along_axis(cost, best[None], np.where(stuck, np.inf, best_cost)[None], axis=0)
    return Choice(
        time_s=chosen[0],
        algo=np.array([a for a, _ in pairs])[best],
        protocol=np.array([pr for _, pr in pairs])[best],
        channels=chosen[1],
        chunk_bytes=chosen[2],
    )


def _gather(best: np.ndarray, results: dict[int, tuple[np.ndarray, ...]], k: int) -> np.ndarray:
    """Output ``k`` (time, channels or chunk) of the pair ``best`` chose at every point."""
    out = np.zeros(np.shape(best))
    for i, r in results.items():
        out = np.where(best == i, r[k], out)
    return out
