"""NCCL's and RCCL's collective algorithms: which run where, their table latencies, and what their
tuner predicts (the physical time of a call: :mod:`commodel.comm.nccl_physical`).

Two cost functions share one structure (channels, chunks, per-(algorithm, protocol) latency):

- :func:`tuner_time` is NCCL's own cost model (``ncclTopoTuneModel`` + ``ncclTopoGetAlgoTime``,
  digest sections 1-2): table latencies, the searched graph's channels x GB/s per channel, the
  protocol refinements and per-channel caps, the tree correction factors and the ring plateau.
  Its argmin is NCCL's choice of (algorithm, protocol): what ``auto`` reproduces.
- :func:`physical_time` prices that choice on the hardware's achievable bandwidths by counting the
  bytes each algorithm moves over each resource (a GPU's scale-up links, its domain's NICs, the
  switch's multimem ports), plus the pipeline fill NCCL's chunking causes, the run-time channel
  reduction for small messages, the same table latencies, and the host launch. Where NCCL's default
  is not the fastest choice (ring vs NVLS at mid sizes on Blackwell, ring vs tree across three
  domains), the two disagree, as the real library does.

Sizes follow NCCL's ``nBytes``: the per-rank buffer for allreduce, broadcast and reduce, the gathered
total for allgather and reducescatter. ``p`` ranks over ``N`` scale-up domains, ``g = p / N`` per
domain (placed domain-major).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from commodel.comm import tables
from commodel.comm.fabric import Fabric
from commodel.comm.graph import nvls_graph, ring_graph
from commodel.vectorize import memoized

#: Algorithms NCCL implements per collective (digest 5.1); alltoall and sendrecv are grouped
#: point-to-point operations, priced by :func:`commodel.comm.mpi.direct`.
NCCL_ALGORITHMS: dict[str, tuple[str, ...]] = {
    "allreduce": ("ring", "tree", "nvls", "nvls-tree", "collnet-direct", "collnet-chain"),
    "allgather": ("ring", "nvls", "pat", "collnet-direct"),
    "reducescatter": ("ring", "nvls", "pat", "collnet-direct"),
    "broadcast": ("ring",),
    "reduce": ("ring",),
}
REDUCING_OPS = frozenset({"allreduce", "reducescatter", "reduce"})
#: NVLS reduces sum/min/max in the switch; collectives other than allreduce need <= 32 local ranks.
MAX_NVLS_ARITY = 32


def protocols(algo: str, fab: Fabric) -> tuple[str, ...]:
    """Protocols an algorithm runs: ring and tree all three (LL128 only on NVIDIA NVLink systems,
    off in RCCL by default), every other algorithm Simple only."""
    if algo not in ("ring", "tree"):
        return ("simple",)
    return tuple(p for p in tables.PROTOCOLS if p != "ll128" or fab.ll128)


@memoized
def available(op: str, algo: str, fab: Fabric, g: np.ndarray, nodes: np.ndarray) -> np.ndarray:
    """Where ``algo`` can run (digest 5.2): NVLS needs a reducing switch and one domain, NVLS-tree and
    CollNet more than one (CollNet also a reducing network), PAT one GPU per domain (AG/RS only),
    tree on RCCL is not used inside one MI300X node."""
    g, nodes = np.broadcast_arrays(np.asarray(g, dtype=float), np.asarray(nodes, dtype=float))
    nvls = fab.nvls_Bps is not None and fab.nvidia
    if algo == "ring":
        return np.ones(g.shape, dtype=bool)
    if algo == "tree":
        return np.full(g.shape, True) if fab.nvidia or fab.arch != "cdna3" else nodes > 1
    if algo == "nvls":
        return nvls & (nodes == 1) & (g >= 2) & ((op == "allreduce") | (g <= MAX_NVLS_ARITY))
    if algo == "nvls-tree":
        return nvls & (nodes > 1) & (g >= 2)
    if algo in ("collnet-direct", "collnet-chain"):
        return fab.sharp & (nodes > 1)
    return fab.nvidia & (g == 1) & (nodes > 1)  # pat


# ---------------------------------------------------------------------------------------------------
# Latency (digest 1.3; RCCL 7.1): the same table-driven latency prices the choice and the call.
# ---------------------------------------------------------------------------------------------------


@memoized
def latency(
    op: str, algo: str, proto: str, p: np.ndarray, nodes: np.ndarray, fab: Fabric, measured: bool = False
) -> np.ndarray:
    """NCCL's latency of one call in seconds (no launch, no bytes). ``measured`` prices the call rather
    than the choice: it replaces the tuner table's Simple ring step and NVLS latency on NVLink by the
    link's measured values where it has them, and on AMD takes the network hop from NCCL's NET row
    (RCCL's tuning model 5 weights a network ring Simple step at 320 us to steer its choice).

    ring: ``base + (nsteps - nInter) max(intraLat, netOverhead) + nInter interLat`` (allreduce,
    allgather, reducescatter), ``base + p L`` (broadcast, reduce); tree: ``base + 2((g-1) intraLat +
    floor(lg N) interLat)``; NVLS: ``intraLat (+ interLat)``; NVLS-tree: ``base + intraLat + 2 floor(lg N)
    interLat``; CollNet direct: ``base + 2(min(1, g-1) intraLat + 0.4 (g-1)) + interLat``; chain:
    ``base + 2 (g-1) intraLat + interLat``; PAT: ``base + floor(lg N) interLat / 3.5 + 2.8 p``.
    interLat adds the net plugin's reported latency (twice for Simple) and off-rail switch hops.
    """
    g = p / nodes
    multi = nodes > 1
    lg = np.floor(np.log2(np.maximum(nodes, 1)))
    a, pr = tables.ALGOS.index(algo), tables.PROTOCOLS.index(proto)
    intra_class = 0 if fab.up_class == "nvlink" else 1
    base, intra, inter = _latency_tables(fab, a, pr, intra_class)
    if measured and not fab.nvidia:
        inter = tables.HW_LAT[2, a, pr]
    if measured and fab.up_class == "nvlink" and proto == "simple":
        own = {"ring": fab.ring_step_s, "nvls": fab.nvls_latency_s, "nvls-tree": fab.nvls_latency_s}
        intra = own[algo] * 1e6 if own.get(algo) is not None else intra
    inter = np.where(g <= 1, _latency_tables(fab, 0, pr, intra_class)[2], inter)  # ppn 1: tree's NET row
    reported = (fab.net_latency_s + fab.off_rail_s) * 1e6
    inter = inter + reported * (2 if proto == "simple" else 1)
    if algo == "ring":
        if op in ("broadcast", "reduce"):  # Simple steps take the tree row's latency
            row = _latency_tables(fab, 0, pr, intra_class) if proto == "simple" else (base, intra, inter)
            us = base + p * np.where(multi, inter if proto != "simple" else row[2], row[1])
        else:
            steps = 2 * (p - 1) if op == "allreduce" else p - 1
            n_inter = np.where(
                multi, (2 if op == "allreduce" else 1) * (nodes - 1 + (0 if fab.nvidia else 1)), 0
            )
            overhead = tables.NET_OVERHEAD_US["amd" if fab.cpu == "amd" else "intel"] * (
                3 if proto == "simple" else 1
            )
            per_step = np.where(multi, np.maximum(intra, overhead), intra)
            us = base + (steps - n_inter) * per_step + n_inter * inter
    elif algo == "tree":
        us = base + 2 * ((g - 1) * intra + lg * inter)
    elif algo == "nvls":
        us = intra + np.where(multi, inter, 0.0)
    elif algo == "nvls-tree":
        us = base + intra + 2 * lg * inter
    elif algo == "collnet-direct":
        us = base + 2 * (np.minimum(1, g - 1) * intra + 0.4 * (g - 1)) + inter
    elif algo == "collnet-chain":
        us = base + 2 * (g - 1) * intra + inter
    else:  # pat
        us = base + lg * inter / 3.5 + 2.8 * p
    return np.asarray(us, dtype=float) * 1e-6


def rccl_tuning_model(fab: Fabric) -> int:
    """RCCL's tuning model: 5 on 8-GPU fully connected xGMI boards (MI300X-class), 0 elsewhere."""
    return 5 if fab.topology == "mesh" and fab.arch == "cdna3" else 0


def _latency_tables(fab: Fabric, a: int, pr: int, intra_class: int) -> tuple[float, float, float]:
    """(base, intra-domain, inter-domain) latency in us of one (algorithm, protocol): NCCL 2.30's
    tables, or RCCL's base latency and tuning-model hwLat rows (model 5 on 8-GPU xGMI meshes)."""
    if fab.nvidia or tables.ALGOS[a] not in ("tree", "ring"):
        base = tables.BASE_LAT[a, pr] if fab.nvidia else 0.0
        return base, tables.HW_LAT[intra_class, a, pr], tables.HW_LAT[2, a, pr]
    model = tables.RCCL_HW_LAT[rccl_tuning_model(fab)]
    algo = tables.ALGOS[a]
    intra = model["nvlink"][algo][pr] if intra_class == 0 else tables.HW_LAT[1, a, pr]
    return tables.RCCL_BASE_LAT[pr], intra, model["net"][algo][pr]


# ---------------------------------------------------------------------------------------------------
# NCCL's tuner (digest 1.1-1.2, 2.4-2.9): the cost whose argmin is NCCL's choice.
# ---------------------------------------------------------------------------------------------------


def node_column(nodes: np.ndarray) -> np.ndarray:
    """The tables' node-count column: 0 for one node, 1 for two, 2 for three or more."""
    return np.clip(nodes - 1, 0, 2).astype(int)


def ll_max_GBps(fab: Fabric, nodes: np.ndarray) -> np.ndarray:
    """NCCL's LL bandwidth cap: the GPU architecture's row on one node, the CPU vendor's beyond."""
    scale = node_column(nodes)
    row = np.where(nodes > 1, 1 if fab.cpu == "amd" else 0, fab.arch_index)
    return tables.LL_MAX_BW[row, np.where(nodes > 1, scale, 0)]


def _nsteps(op: str, p: np.ndarray) -> np.ndarray:
    return {"allreduce": 2 * (p - 1), "allgather": p - 1, "reducescatter": p - 1}.get(op, p)


@dataclass(frozen=True)
class TunerTerms:
    """NCCL's tuner cost of one (algorithm, protocol) without the message size: ``n`` bytes take
    ``lat + n / (algBw x correction)``, where ``lat`` is ``plateau`` times the table latency from
    ``plateau_bytes`` on (the ring plateau) and ``correction``, where ``corrected``, the factor of
    the ``correction`` row at ``log2(n / 64)`` from 64 B on (the last beyond the row)."""

    latency_s: np.ndarray
    alg_Bps: np.ndarray
    plateau: float | np.ndarray = 1.0
    plateau_bytes: np.ndarray | float = np.inf
    correction: np.ndarray = field(default_factory=lambda: np.ones(1))
    corrected: np.ndarray | bool = False

    def time(self, n: np.ndarray) -> np.ndarray:
        """Predicted seconds of ``n``-byte calls (``n`` broadcasts against the terms; terms
        :func:`stacked` price every pair of theirs at once)."""
        alg, lat = self.alg_Bps, self.latency_s
        if np.any(self.corrected):
            log_size = np.floor(np.log2(np.maximum(n, 1) / 64)).astype(int)
            factor = self.correction[..., np.clip(log_size, 0, self.correction.shape[-1] - 1)]
            alg = alg * np.where(self.corrected & (log_size >= 0), factor, 1.0)
        if np.any(self.plateau != 1.0):
            lat = np.where(n >= self.plateau_bytes, self.plateau * lat, lat)
        with np.errstate(divide="ignore"):
            return lat + n / alg


def stacked(terms: list[TunerTerms], ndim: int = 0) -> TunerTerms:
    """Several pairs' terms as one, each field with a leading axis of one entry per pair (a
    correction row padded with its last factor) before the points' axes (``ndim`` of them at least,
    for sizes with more axes than the layouts), so that one :meth:`TunerTerms.time` call prices them
    all with the same arithmetic as each alone."""
    fields = ("latency_s", "alg_Bps", "plateau_bytes", "corrected")
    shape = np.broadcast_shapes(*(np.shape(getattr(t, name)) for t in terms for name in fields))
    points = (len(terms), *(1,) * (ndim - len(shape)), *shape)

    def each(name: str, dtype: type = float) -> np.ndarray:
        out = np.empty((len(terms), *shape), dtype=dtype)
        for i, t in enumerate(terms):
            out[i] = getattr(t, name)
        return out.reshape(points)

    correction = np.empty((len(terms), max(t.correction.size for t in terms)))
    for i, t in enumerate(terms):  # each row padded with its last factor
        correction[i] = t.correction[-1]
        correction[i, : t.correction.size] = t.correction
    return TunerTerms(
        latency_s=each("latency_s"),
        alg_Bps=each("alg_Bps"),
        plateau=np.array([t.plateau for t in terms], dtype=float).reshape(-1, *(1,) * (len(points) - 1)),
        plateau_bytes=each("plateau_bytes"),
        correction=correction,
        corrected=each("corrected", bool),
    )


def tuner_time(
    op: str, algo: str, proto: str, n: np.ndarray, p: np.ndarray, nodes: np.ndarray, fab: Fabric
) -> np.ndarray:
    """NCCL's predicted time in seconds: ``lat x latCount + nBytes / algBw`` (one call, latCount 1)."""
    return tuner_terms(op, algo, proto, p, nodes, fab).time(np.asarray(n, dtype=float))


def tuner_terms(op: str, algo: str, proto: str, p: np.ndarray, nodes: np.ndarray, fab: Fabric) -> TunerTerms:
    """The size-independent part of :func:`tuner_time`: NCCL's algorithm bandwidth and latency."""
    p, nodes = np.asarray(p, dtype=float), np.asarray(nodes, dtype=float)
    g = p / nodes
    arch, scale = fab.arch_index, node_column(nodes)
    nvls = algo in ("nvls", "nvls-tree")
    graph = nvls_graph(fab, g, nodes) if nvls else ring_graph(fab, g, nodes)
    ch = graph.channels
    if nvls:
        spread = 2.0 if op == "allreduce" else (g - 1) / g
        intra_bw = graph.bw_intra * tables.NVLS_EFFICIENCY[arch] * (ch - 1) / ch * spread
        inter_bw = graph.bw_inter * np.where((algo == "nvls-tree") & (nodes <= 2), 2.0, 1.0)
        cap = tables.PER_CH_MAX_NVLS_TREE[arch, scale] if algo == "nvls-tree" else np.inf
        bus = ch * np.minimum(np.minimum(intra_bw, inter_bw), cap)
    else:
        per_channel = np.where(nodes <= 2, graph.bw_intra, graph.bw_inter)
        bus = ch * per_channel
    if not fab.nvidia:
        bus = bus * _rccl_bw_ratio(algo, proto, fab, nodes)
        if algo == "ring" and proto == "ll" and op in ("broadcast", "reduce") and fab.arch == "cdna3":
            bus = bus * np.where(nodes == 1, tables.RCCL_RING_LL_ROOTED_SINGLE_NODE, 1.0)
    elif algo == "ring" and proto == "ll":
        bus = np.minimum(ll_max_GBps(fab, nodes), bus * 0.5)
    elif algo == "ring" and proto == "ll128":
        bus = np.minimum(bus * 0.92, ch * tables.PER_CH_MAX_RING_LL128[arch, scale])
    elif algo == "tree":
        bus = np.minimum(bus * 0.92, ch * tables.PER_CH_MAX_TREE[arch, scale])
        if proto == "ll":
            bus = np.minimum(bus / 3.8, ll_max_GBps(fab, nodes))
        elif proto == "ll128":
            factor = np.where(nodes == 1, 7 / 9, 120 / 128)
            bus = np.minimum(bus * factor, ch * tables.PER_CH_MAX_TREE_LL128[arch, scale])
    elif algo == "pat":
        bus = bus * 0.75
    elif algo == "collnet-direct":
        if op in ("allgather", "reducescatter"):
            bus = g * np.minimum(graph.bw_intra, 0.9 * graph.bw_inter)
        else:
            f = g / ch
            bus = bus / (f - (f - 1) / 2) * (0.85 if arch >= 2 else 1.0)
    if op in ("allgather", "reducescatter"):  # only ring converts bus to algorithm bandwidth here
        alg = bus * p / _nsteps(op, p) if algo == "ring" else bus
    elif algo in ("ring", "nvls", "nvls-tree"):
        alg = bus * p / _nsteps(op, p)
    else:
        alg = bus * 0.5
    correction, corrected = _correction(op, algo, proto, fab, nodes)
    plateau, plateau_bytes = 1.0, np.inf  # ring Simple allreduce across nodes: the plateau latency
    if fab.nvidia and algo == "ring" and proto == "simple" and op == "allreduce":
        plateau = tables.RING_PLATEAU["ampere_or_later" if arch >= 1 else "pre_ampere"]
        plateau_bytes = np.where(nodes > 1, 64 * ring_graph(fab, g, nodes).runtime * p, np.inf)
    return TunerTerms(
        latency_s=latency(op, algo, proto, p, nodes, fab),
        alg_Bps=alg * 1e9,
        plateau=plateau,
        plateau_bytes=plateau_bytes,
        correction=correction,
        corrected=corrected,
    )


def _correction(
    op: str, algo: str, proto: str, fab: Fabric, nodes: np.ndarray
) -> tuple[np.ndarray, np.ndarray | bool]:
    """The tuner's size-dependent correction row of a pair and where it applies: RCCL model 5's tree
    factors for every collective and ring factors across nodes (digest 7.1-7.2); else NCCL's tree
    factors for allreduce (23 sizes; 24 for NVLS-tree on Blackwell with an x86 host), 1 beyond (RCCL's
    other models assumed to keep NCCL's: the digest gives only model 5's)."""
    pr = tables.PROTOCOLS.index(proto)
    if not fab.nvidia and rccl_tuning_model(fab) == 5 and algo in ("tree", "ring"):
        if algo == "tree":
            return tables.RCCL_TREE_CORRECTION[pr], True
        return tables.RCCL_RING_CORRECTION[pr], nodes > 1
    blackwell_x86 = fab.arch_index >= 3 and fab.cpu != "arm"
    if op != "allreduce" or not (algo == "tree" or (algo == "nvls-tree" and blackwell_x86)):
        return np.ones(1), False
    bins = 23 if algo == "tree" else 24
    return np.append(tables.TREE_CORRECTION[pr, :bins], 1.0), True


def _rccl_bw_ratio(algo: str, proto: str, fab: Fabric, nodes: np.ndarray) -> np.ndarray:
    """RCCL's bwRatio for tree and ring (model 5 on 8-GPU xGMI meshes, model 0 otherwise); RCCL
    applies none of NCCL's protocol refinements."""
    model = rccl_tuning_model(fab)
    if algo not in ("ring", "tree"):
        return np.ones_like(nodes)
    simple = np.where(nodes <= 2, *tables.RCCL_BW_RATIO[model][algo])
    other = {"ll": 0.08 if algo == "ring" else 0.06, "ll128": 0.0}
    return simple if proto == "simple" else np.full_like(nodes, other[proto])
