"""The MPI collective algorithms (Thakur, Rabenseifner & Gropp 2005) and NCCL's point-to-point path.

Cost of each (collective, algorithm) pair, excluding the per-call base latency and launch.
Notation: n bytes (nccl-tests size convention: the per-rank buffer for allreduce, broadcast, reduce,
sendrecv and alltoall; the gathered/scattered total for allgather and reducescatter), p ranks, N
scale-up domains, g = p / N ranks per domain, placed domain-major. ``a_i``/``a_o`` are the per-step
latencies inside/across domains (NCCL's ring hwLat for the link's class), ``B_i`` the per-GPU
bandwidth inside the domain, ``B_net`` the scale-out bandwidth of a domain and ``B_o = B_net / g``
its share per GPU when all GPUs cross at once. Bandwidths are already scaled by the protocol factor.
NCCL's own ring, tree and NVLS algorithms are in :mod:`commodel.comm.nccl`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from commodel.comm import tables
from commodel.comm.fabric import Fabric
from commodel.comm.p2p import hockney, protocol_bandwidth_factor

OPS = ("allreduce", "allgather", "reducescatter", "broadcast", "reduce", "alltoall", "sendrecv")
REDUCING_OPS = frozenset({"allreduce", "reducescatter", "reduce"})
_RING, _CLASSES = tables.ALGOS.index("ring"), {"nvlink": 0, "pci": 1}

#: nccl-tests bus-bandwidth factor: busbw = algbw x factor (p ranks).
BUSBW_FACTOR: dict[str, Callable[[np.ndarray], np.ndarray]] = {
    "allreduce": lambda p: 2 * (p - 1) / p,
    "allgather": lambda p: (p - 1) / p,
    "reducescatter": lambda p: (p - 1) / p,
    "alltoall": lambda p: (p - 1) / p,
    "broadcast": lambda p: np.ones_like(p),
    "reduce": lambda p: np.ones_like(p),
    "sendrecv": lambda p: np.ones_like(p),
}


@dataclass(frozen=True)
class Point:
    """Broadcast arrays describing a batch of collective calls on one fabric."""

    n: np.ndarray
    p: np.ndarray
    nodes: np.ndarray
    fab: Fabric
    protocol: str
    reduces: bool
    all_to_all: bool = False

    @property
    def g(self) -> np.ndarray:
        return self.p / self.nodes

    @property
    def multi(self) -> np.ndarray:
        return self.nodes > 1

    @property
    def factor(self) -> float:
        return protocol_bandwidth_factor(self.protocol, self.reduces)

    @property
    def _pr(self) -> int:
        return tables.PROTOCOLS.index(self.protocol)

    @property
    def a_i(self) -> float:
        """Per-step latency inside a domain: NCCL's ring hwLat for the scale-up link's class."""
        return tables.HW_LAT[_CLASSES[self.fab.up_class], _RING, self._pr] * 1e-6

    @property
    def a_o(self) -> float:
        """Per-step latency across domains: NCCL's NET ring hwLat plus the plugin-reported latency."""
        return tables.HW_LAT[2, _RING, self._pr] * 1e-6 + self.fab.net_latency_s + self.fab.off_rail_s

    @property
    def a_p2p(self) -> float:
        """Latency of NCCL's point-to-point path across domains, through the ranks' proxy threads
        (:func:`commodel.comm.initiation.nccl_net_p2p`), plus what the net plugin reports, as in
        :attr:`a_o`; :attr:`a_o` where the NIC's parameters are not known."""
        if self.fab.p2p_net_latency_s is None:
            return self.a_o
        return self.fab.p2p_net_latency_s + self.fab.net_latency_s + self.fab.off_rail_s

    @property
    def B_i(self) -> np.ndarray:
        return self.fab.up_Bps(self.g, self.all_to_all) * self.factor

    @property
    def B_net(self) -> np.ndarray:
        """The domain's NICs at their share above the pods (:meth:`Fabric.pod_share`)."""
        return self.fab.net_Bps(self.g) * self.fab.pod_share(self.nodes, self.all_to_all) * self.factor

    @property
    def B_o(self) -> np.ndarray:
        return self.B_net / self.g

    def step(self, size: np.ndarray, distance: np.ndarray) -> np.ndarray:
        """One exchange of ``size`` bytes with the rank ``distance`` away (inter-node iff >= g)."""
        inter = distance >= self.g
        return hockney(size, np.where(inter, self.a_o, self.a_i), np.where(inter, self.B_o, self.B_i))


def _log2_floor(p: np.ndarray) -> np.ndarray:
    return np.floor(np.log2(p) + 1e-9)


def _log2_ceil(p: np.ndarray) -> np.ndarray:
    return np.ceil(np.log2(p) - 1e-9)


def _non_pow2_fixup(x: Point, size: np.ndarray) -> np.ndarray:
    """MPICH's extra pre/post steps for p not a power of two: 2 (a + n / B) on the slowest link."""
    p2 = 2.0 ** _log2_floor(x.p)
    far = np.where(x.multi, x.g, 1.0)
    return np.where(x.p != p2, 2 * x.step(size, far), 0.0)


def _steps(x: Point, count: np.ndarray, cost: Callable[[float], np.ndarray]) -> np.ndarray:
    """Sum ``cost(k)`` over k = 0 .. count - 1 elementwise (count varies across the batch)."""
    total = np.zeros(np.broadcast(x.n, x.p, x.nodes).shape)
    for k in range(int(np.max(count, initial=0))):
        total = total + np.where(k < count, cost(k), 0.0)
    return total


# ---------------------------------------------------------------------------------------------------
# MPI algorithms (Thakur, Rabenseifner & Gropp 2005)
# ---------------------------------------------------------------------------------------------------


def recursive_doubling(op: str, x: Point) -> np.ndarray:
    """Recursive doubling over lg p steps, partner distance 2^k.

    allreduce: ``lg p (a + n / B + n gamma)``; allgather: ``lg p a + n (p-1)/p / B`` (step k sends
    n 2^k / p). Non-powers of two add MPICH's two extra steps.
    """
    lg = _log2_floor(x.p)
    p2 = 2.0**lg
    if op == "allreduce":
        reduce = x.n / x.fab.reduce_Bps
        body = _steps(x, lg, lambda k: x.step(x.n, 2.0**k) + reduce)
        return body + _non_pow2_fixup(x, x.n)
    body = _steps(x, lg, lambda k: x.step(x.n * 2.0**k / p2, 2.0**k))
    return body + _non_pow2_fixup(x, x.n / x.p)


def halving_doubling(op: str, x: Point) -> np.ndarray:
    """Rabenseifner: recursive-halving reduce-scatter, then (allreduce) recursive-doubling allgather.

    allreduce: ``2 lg p a + 2 n (p-1)/p / B + n (p-1)/p gamma``; reducescatter is its first half.
    Halving step k exchanges n / 2^(k+1) bytes at distance p / 2^(k+1) (the largest pieces travel
    farthest, across nodes first).
    """
    lg = _log2_floor(x.p)
    p2 = 2.0**lg

    def halving(k: int) -> np.ndarray:
        piece = x.n / 2.0 ** (k + 1)
        return x.step(piece, p2 / 2.0 ** (k + 1)) + piece / x.fab.reduce_Bps

    total = _steps(x, lg, halving)
    if op == "allreduce":
        total = total + _steps(x, lg, lambda k: x.step(x.n * 2.0**k / p2, 2.0**k))
    return total + _non_pow2_fixup(x, x.n)


def bruck(op: str, x: Point) -> np.ndarray:
    """Bruck (1997): ceil(lg p) steps at distance 2^k.

    allgather: step k sends min(2^k, p - 2^k) blocks of n/p: ``ceil(lg p) a + n (p-1)/p / B``.
    alltoall: step k sends the blocks whose index has bit k set, about p/2 blocks of n/p:
    ``ceil(lg p) (a + n/2 / B)``; fewer steps than pairwise exchange, more bytes.
    """
    lg = _log2_ceil(x.p)
    block = x.n / x.p
    if op == "allgather":
        return _steps(x, lg, lambda k: x.step(np.minimum(2.0**k, x.p - 2.0**k) * block, 2.0**k))

    def alltoall_step(k: int) -> np.ndarray:
        period = 2.0 ** (k + 1)
        with_bit = np.floor(x.p / period) * 2.0**k + np.maximum(0, np.mod(x.p, period) - 2.0**k)
        return x.step(with_bit * block, 2.0**k)

    return _steps(x, lg, alltoall_step)


def pairwise(op: str, x: Point) -> np.ndarray:
    """Pairwise-exchange all-to-all: p - 1 steps, partner ``rank XOR s``, n/p bytes each.

    Partners with s < g are in the same node: ``(g-1)(a_i + n/p / B_i) + (p-g)(a_o + n/p / B_o)``.
    """
    block = x.n / x.p
    intra = (x.g - 1) * (x.a_i + block / x.B_i)
    inter = (x.p - x.g) * (x.a_o + block / x.B_o)
    return intra + inter


def direct(op: str, x: Point) -> np.ndarray:
    """All messages in flight at once (NCCL grouped send/recv; sendrecv is its one-peer case).

    alltoall: ``a + max((g-1) n/p / B_i, (p-g) n/p / B_o, 2 (p-g) o_proxy)``, intra- and inter-node
    traffic in parallel, and each rank's proxy thread posting a send and a receive for each of its
    ``p - g`` peers in other domains at ``o_proxy`` each (the GPUs of a domain reach each other directly).
    sendrecv: ``a + n / B`` to the next rank, over NVLink inside a node or one NIC across. Across domains
    ``a`` is the proxy path's one-way latency (:attr:`Point.a_p2p`).
    """
    alpha = np.where(x.multi, x.a_p2p, x.a_i)
    if op == "sendrecv":
        nic = x.fab.nic_Bps * x.factor
        return alpha + x.n / np.where(x.multi, np.minimum(x.B_i, nic), x.B_i)
    block = x.n / x.p
    proxy = 2 * (x.p - x.g) * x.fab.proxy_op_s
    return alpha + np.maximum(np.maximum((x.g - 1) * block / x.B_i, (x.p - x.g) * block / x.B_o), proxy)


# ---------------------------------------------------------------------------------------------------
# Two-level (rail-aligned) algorithm
# ---------------------------------------------------------------------------------------------------


def hierarchical(op: str, x: Point) -> np.ndarray:
    """Two-level, rail-aligned: inside the domain over its scale-up links, across domains over each
    GPU's NIC.

    allreduce = intra reduce-scatter + inter allreduce of n/g per rail + intra allgather;
    allgather/reducescatter = inter stage of n/g per rail + intra stage. Stages are pipelined in
    chunks, so the bandwidth term is the slowest stage and the latency term their sum:
    inter allreduce ``2(N-1) a_o + 2 n (N-1)/N / B_net``; intra ring ``2(g-1) a_i + 2 n (g-1)/g / B_i``;
    allgather/reducescatter half of each.
    """
    share = (x.nodes - 1) / x.nodes
    rounds = 2 if op == "allreduce" else 1
    inter = rounds * (x.nodes - 1) * x.a_o, rounds * share * x.n / x.B_net
    intra = rounds * (x.g - 1) * x.a_i, rounds * (x.g - 1) / x.g * x.n / x.B_i
    return inter[0] + intra[0] + np.maximum(inter[1], intra[1])


ALGORITHMS: dict[str, Callable[[str, Point], np.ndarray]] = {
    "recursive-doubling": recursive_doubling,
    "halving-doubling": halving_doubling,
    "bruck": bruck,
    "pairwise": pairwise,
    "direct": direct,
    "hierarchical": hierarchical,
}

#: Which MPI algorithms implement which collective (``direct`` is also NCCL's alltoall and sendrecv).
SUPPORTED: dict[str, tuple[str, ...]] = {
    "allreduce": ("recursive-doubling", "halving-doubling", "hierarchical"),
    "allgather": ("recursive-doubling", "bruck", "hierarchical"),
    "reducescatter": ("halving-doubling", "hierarchical"),
    "broadcast": (),
    "reduce": (),
    "alltoall": ("pairwise", "bruck", "direct"),
    "sendrecv": ("direct",),
}


def available(algo: str, nodes: np.ndarray) -> np.ndarray:
    """Where an MPI algorithm can run: the two-level one needs more than one domain."""
    nodes = np.asarray(nodes)
    return nodes > 1 if algo == "hierarchical" else np.ones(nodes.shape, dtype=bool)
