"""Cost of each (collective, algorithm) pair, excluding the per-call base latency.

Notation: n bytes (nccl-tests size convention: the per-rank buffer for allreduce, broadcast, reduce,
sendrecv and alltoall; the gathered/scattered total for allgather and reducescatter), p ranks, N
nodes, g = p / N ranks per node, placed node-major (ranks 0..g-1 on node 0). ``a_i``/``a_o`` are the
per-step latencies inside/across nodes, ``B_i`` the per-GPU bandwidth inside the node, ``B_net`` the
scale-out bandwidth of a node and ``B_o = B_net / g`` its share per GPU when all GPUs cross at once.
Bandwidths are already scaled by the protocol factor.

Formulas follow Thakur, Rabenseifner & Gropp (2005) for the MPI algorithms and NCCL's tuner
(src/graph/tuning.cc) for ring, tree and NVLS, and are given in each function's docstring.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from commodel.comm.fabric import Fabric
from commodel.comm.p2p import PROTOCOLS, hockney, protocol_bandwidth_factor

OPS = ("allreduce", "allgather", "reducescatter", "broadcast", "reduce", "alltoall", "sendrecv")
REDUCING_OPS = frozenset({"allreduce", "reducescatter", "reduce"})

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
    def a_i(self) -> float:
        return self.fab.intra_step_s[self.protocol]

    @property
    def a_o(self) -> float:
        return self.fab.inter_step_s[self.protocol]

    @property
    def B_i(self) -> np.ndarray:
        return self.fab.intra_Bps(self.g) * self.factor

    @property
    def B_net(self) -> np.ndarray:
        return self.fab.node_net_Bps(self.g) * self.factor

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
# Ring (NCCL)
# ---------------------------------------------------------------------------------------------------

_RING_STEPS = {"allreduce": 2, "allgather": 1, "reducescatter": 1, "broadcast": 1, "reduce": 1}


def ring(op: str, x: Point) -> np.ndarray:
    """Ring: ``S a + T n / B_ring``.

    S = 2(p-1) steps and T = 2(p-1)/p for allreduce; S = p-1, T = (p-1)/p for allgather and
    reducescatter; S = p-1, T = 1 for the pipelined broadcast and reduce. Of the S steps,
    S (N-1)/(p-1) cross nodes (NCCL's nInterSteps). Across nodes NCCL runs one ring per NIC, each
    crossing a node boundary once per lap, so ``B_ring = min(B_i, B_net)``: the bus bandwidth of
    a multi-node ring is the node's NIC bandwidth (for example 8 x 24 GB/s on DGX A100).
    """
    p = x.p
    steps = _RING_STEPS[op] * (p - 1)
    inter_steps = steps * (x.nodes - 1) / np.maximum(p - 1, 1)
    traffic = {
        "allreduce": 2 * (p - 1) / p,
        "allgather": (p - 1) / p,
        "reducescatter": (p - 1) / p,
        "broadcast": np.ones_like(p),
        "reduce": np.ones_like(p),
    }[op]
    bw = np.where(x.multi, np.minimum(x.B_i, x.B_net), x.B_i)
    return (steps - inter_steps) * x.a_i + inter_steps * x.a_o + traffic * x.n / bw


# ---------------------------------------------------------------------------------------------------
# Tree (NCCL: chain inside the node, double binary tree across nodes; pipelined)
# ---------------------------------------------------------------------------------------------------


def tree(op: str, x: Point) -> np.ndarray:
    """NCCL tree: a chain of g GPUs in each node and a (double) binary tree across N nodes.

    allreduce: latency ``2((g-1) a_i + ceil(lg N) a_o)``; pipelined bandwidth term
    ``max(2n / B_i, 2n (N-1)/N / B_net)``: each chain GPU sends n up and n down, and a node's NICs
    carry 2n (N-1)/N (n for two nodes, 2n for many, as in a ring).
    broadcast/reduce: latency ``(g-1) a_i + ceil(lg N) a_o``, bandwidth ``max(n / B_i,
    c n / B_net)`` with c = min(2, N-1) children per inner node.
    """
    depth = (x.g - 1) * x.a_i + _log2_ceil(x.nodes) * x.a_o
    chain = np.where(x.g > 1, 1.0, 0.0)
    if op == "allreduce":
        net = 2 * x.n * (x.nodes - 1) / x.nodes / x.B_net
        return 2 * depth + np.maximum(2 * x.n * chain / x.B_i, net)
    children = np.minimum(2, x.nodes - 1)
    return depth + np.maximum(x.n * chain / x.B_i, children * x.n / x.B_net)


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

    alltoall: ``a + max((g-1) n/p / B_i, (p-g) n/p / B_o)``, intra- and inter-node traffic in
    parallel. sendrecv: ``a + n / B`` to the next rank, over NVLink inside a node or one NIC across.
    """
    alpha = np.where(x.multi, x.a_o, x.a_i)
    if op == "sendrecv":
        nic = x.fab.nic_Bps * x.factor
        return alpha + x.n / np.where(x.multi, np.minimum(x.B_i, nic), x.B_i)
    block = x.n / x.p
    return alpha + np.maximum((x.g - 1) * block / x.B_i, (x.p - x.g) * block / x.B_o)


# ---------------------------------------------------------------------------------------------------
# In-switch reduction and two-level algorithms
# ---------------------------------------------------------------------------------------------------


def _nvls_stage(op: str, x: Point, ranks: np.ndarray) -> np.ndarray:
    """Bandwidth time of one NVLS stage over ``ranks`` GPUs of a node (Simple protocol only).

    allreduce = multimem ld_reduce (each GPU's links carry n out, n/g back) + multimem st (n/g out, n
    back): ``n (1 + 1/g) / B_nvls``, hence busbw = B_nvls 2(g-1)/(g+1), above the link rate.
    reducescatter: ``n / B_nvls``; allgather (multicast store, no reduction): ``n / B_i``.
    """
    if op == "allreduce":
        return x.n * (1 + 1 / ranks) / x.fab.nvls_Bps
    if op == "reducescatter":
        return x.n / x.fab.nvls_Bps
    return x.n / x.B_i


def nvls(op: str, x: Point) -> np.ndarray:
    """NVLink SHARP inside one node: NCCL's NVLS latency plus :func:`_nvls_stage`."""
    return x.fab.nvls_latency_s + _nvls_stage(op, x, x.p)


def hierarchical(op: str, x: Point) -> np.ndarray:
    """Two-level, rail-aligned: inside the node over NVLink/xGMI, across nodes over each GPU's NIC.

    allreduce = intra reduce-scatter + inter allreduce of n/g per rail + intra allgather;
    allgather/reducescatter = inter stage of n/g per rail + intra stage. Stages are pipelined in
    chunks, so the bandwidth term is the slowest stage and the latency term their sum:
    inter allreduce ``2(N-1) a_o + 2 n (N-1)/N / B_net``; intra ring ``2(g-1) a_i + 2 n (g-1)/g / B_i``
    (NVLS when the switch reduces: NCCL's NVLS-tree), allgather/reducescatter half of each.
    """
    share = (x.nodes - 1) / x.nodes
    rounds = 2 if op == "allreduce" else 1
    inter = rounds * (x.nodes - 1) * x.a_o, rounds * share * x.n / x.B_net
    intra = rounds * (x.g - 1) * x.a_i, rounds * (x.g - 1) / x.g * x.n / x.B_i
    if x.fab.nvls_Bps is not None and op != "allgather":
        intra = x.fab.nvls_latency_s, _nvls_stage(op, x, x.g)
    return inter[0] + intra[0] + np.maximum(inter[1], intra[1])


ALGORITHMS: dict[str, Callable[[str, Point], np.ndarray]] = {
    "ring": ring,
    "tree": tree,
    "recursive-doubling": recursive_doubling,
    "halving-doubling": halving_doubling,
    "bruck": bruck,
    "pairwise": pairwise,
    "direct": direct,
    "nvls": nvls,
    "hierarchical": hierarchical,
}

#: Which algorithms implement which collective.
SUPPORTED: dict[str, tuple[str, ...]] = {
    "allreduce": ("ring", "tree", "recursive-doubling", "halving-doubling", "nvls", "hierarchical"),
    "allgather": ("ring", "recursive-doubling", "bruck", "nvls", "hierarchical"),
    "reducescatter": ("ring", "halving-doubling", "nvls", "hierarchical"),
    "broadcast": ("ring", "tree"),
    "reduce": ("ring", "tree"),
    "alltoall": ("pairwise", "bruck", "direct"),
    "sendrecv": ("direct",),
}


#: The algorithms NCCL implements per collective (2.18+); ``hierarchical`` stands for its NVLS-tree
#: and is offered only where the switch reduces. Used when ``library="nccl"`` (and by validation,
#: whose measurements come from NCCL).
NCCL_ALGORITHMS: dict[str, tuple[str, ...]] = {
    "allreduce": ("ring", "tree", "nvls", "hierarchical"),
    "allgather": ("ring", "nvls"),
    "reducescatter": ("ring", "nvls"),
    "broadcast": ("ring",),
    "reduce": ("ring",),
    "alltoall": ("direct",),
    "sendrecv": ("direct",),
}


def library_algorithms(op: str, library: str, fab: Fabric) -> tuple[str, ...]:
    """Algorithms a library offers for ``op`` on ``fab``: ``all`` (every model) or ``nccl``."""
    if library == "all":
        return SUPPORTED[op]
    return tuple(a for a in NCCL_ALGORITHMS[op] if a != "hierarchical" or fab.nvls_Bps is not None)


def protocols_for(algo: str, fab: Fabric) -> tuple[str, ...]:
    """Protocols an algorithm may use: NVLS only Simple; LL128 only on NVIDIA NVLink systems."""
    if algo == "nvls" or (algo == "hierarchical" and fab.nvls_Bps is not None):
        return ("simple",)
    return tuple(p for p in PROTOCOLS if p != "ll128" or fab.ll128)
