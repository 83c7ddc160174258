"""Communication groups of a parallel layout and what their collectives cost.

Ranks are ordered tp fastest (:mod:`commodel.workloads.parallel.layout`), so a group whose members are
``stride`` ranks apart has ``floor(gpus_per_domain / stride)`` members per scale-up domain (at least
one; a domain is a node, or a rack-scale NVLink domain). Every GPU of a domain runs its own group's
collective at the same time, so the domain's NICs are shared (:func:`shared_nics`). Collectives take
NCCL's own choice of algorithm and protocol, priced once per distinct size and group.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike

from commodel.comm.collectives import candidates, library_algorithms, tune
from commodel.comm.fabric import Fabric
from commodel.comm.mpi import BUSBW_FACTOR
from commodel.vectorize import on_unique


@dataclass(frozen=True)
class Group:
    """Where a communication group sits: ``ranks`` GPUs, ``per_node`` of them in each scale-up domain."""

    ranks: np.ndarray
    per_node: np.ndarray

    @property
    def nodes(self) -> np.ndarray:
        return self.ranks / self.per_node

    @property
    def spans_nodes(self) -> np.ndarray:
        return self.nodes > 1


def group(ranks: ArrayLike, stride: ArrayLike, gpus_per_domain: int) -> Group:
    """A group of ``ranks`` whose members are ``stride`` ranks apart (tp-first rank order)."""
    ranks = np.asarray(ranks, dtype=float)
    per_node = np.clip(np.floor(gpus_per_domain / np.asarray(stride, dtype=float)), 1, ranks)
    return Group(ranks, per_node)


def job_domain(gpus: ArrayLike, domain: int) -> np.ndarray:
    """GPUs of a job per scale-up domain: the largest divisor of the job's GPU count that fits the
    physical domain (a job fills its domains evenly: 256 GPUs on 72-GPU NVL72 racks run as 4 x 64)."""
    gpus = np.asarray(gpus, dtype=float)
    distinct, inverse = np.unique(gpus, return_inverse=True)  # a sweep's GPU counts: a few values
    fits = [next((size for size in range(int(domain), 1, -1) if g % size == 0), 1) for g in distinct]
    return np.asarray(fits, dtype=float)[inverse].reshape(gpus.shape)


def shared_nics(fab: Fabric) -> Fabric:
    """The fabric as one of many concurrent groups sees it: every GPU of a domain communicates at
    once, so a group with g GPUs in a domain gets g / domain of the domain's NIC bandwidth."""
    per_gpu = fab.nics_per_domain * fab.nic_Bps / fab.domain
    return dataclasses.replace(fab, nic_Bps=per_gpu, nics_per_domain=fab.domain)


def collective(op: str, size: ArrayLike, where: Group, fab: Fabric) -> tuple[np.ndarray, np.ndarray]:
    """(time, per-GPU link bytes/s) of ``op`` on ``size`` bytes over a group, as NCCL chooses it;
    nothing (0 s) where it moves no bytes: the software issues no collective then."""
    return priced(op, library_algorithms(op, "nccl"), size, where, fab, "auto")


def collectives(
    ops: tuple[str, ...], sizes: tuple[ArrayLike, ...], where: Group, fab: Fabric
) -> tuple[tuple[np.ndarray, np.ndarray], ...]:
    """:func:`collective` of each op on its size over one group, priced on the distinct rows of the
    sizes and the group, coded once for all of them (each :func:`collective` codes its own)."""

    def each(ranks: np.ndarray, per_node: np.ndarray, *sized: np.ndarray) -> tuple:
        at = Group(ranks, per_node)
        return tuple(collective(op, size, at, fab) for op, size in zip(ops, sized, strict=True))

    return on_unique(each, where.ranks, where.per_node, *sizes)


def priced(
    op: str, algos: tuple[str, ...], size: ArrayLike, where: Group, fab: Fabric, policy: str = "best"
) -> tuple[np.ndarray, np.ndarray]:
    """(time, per-GPU link bytes/s) of ``algos`` under ``policy``, once per distinct group and size;
    0 s where ``size`` is 0 or the group has one rank."""
    size = np.asarray(size, dtype=float)
    if not np.any((size > 0) & (where.ranks > 1)):
        zeros = np.zeros(np.broadcast_shapes(size.shape, where.ranks.shape))
        return zeros, zeros
    pairs = candidates(op, fab, algos)

    def price(n: np.ndarray, ranks: np.ndarray, nodes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        time = np.where(n > 0, tune(op, n, ranks, nodes, fab, pairs, policy).time_s, 0.0)
        busbw = np.divide(n, time, out=np.zeros_like(time), where=time > 0) * BUSBW_FACTOR[op](ranks)
        return time, busbw

    return on_unique(price, size, where.ranks, where.nodes)


def domain(fab: Fabric, where: Group) -> np.ndarray:
    """Which CTA budget a group's collective uses: the node's topology, or the network."""
    return np.where(where.spans_nodes, "network", fab.topology)


def in_switch(fab: Fabric, where: Group) -> np.ndarray:
    return (fab.nvls_Bps is not None) & ~where.spans_nodes


def forced(op: str, algo: str, size: ArrayLike, where: Group, fab: Fabric) -> tuple[np.ndarray, np.ndarray]:
    """(time, per-GPU link bytes/s) of ``op`` with one algorithm (any protocol)."""
    return priced(op, (algo,), size, where, fab)
