"""The physical time of an NCCL (RCCL) collective call: the bytes each algorithm moves over each
resource (a GPU's scale-up links, its domain's NICs, the switch's multimem ports) at the hardware's
achievable bandwidths, the pipeline fill NCCL's chunking causes, the run-time channel reduction for
small messages, the table latencies (:func:`commodel.comm.nccl.latency`) and the host launch.
:mod:`commodel.comm.nccl` holds NCCL's own tuner cost, whose argmin is the choice this prices.
"""

from __future__ import annotations

from functools import cache

import numpy as np

from commodel.comm import tables
from commodel.comm.fabric import Fabric
from commodel.comm.graph import nvls_graph, ring_graph
from commodel.comm.nccl import REDUCING_OPS, latency, ll_max_GBps, node_column


def btree(nranks: int, rank: int) -> tuple[int, int, int]:
    """(parent, child 0, child 1) of ``rank`` in NCCL's binary tree (``ncclGetBtree``, trees.cc);
    -1 where there is none. Rank 0 is the root, with one child."""
    bit = 1
    while bit < nranks and not bit & rank:
        bit <<= 1
    if rank == 0:
        return -1, -1, (bit >> 1 if nranks > 1 else -1)
    up = (rank ^ bit) | (bit << 1)
    if up >= nranks:
        up = rank ^ bit
    low = bit >> 1
    down0 = rank - low if low else -1
    down1 = rank + low if low else -1
    while down1 >= nranks:
        down1 = rank + low if low else -1
        low >>= 1
    return up, down0, down1


@cache
def tree_traffic(domains: int) -> float:
    """Bytes the busiest domain sends per byte of an allreduce over NCCL's double binary tree.

    Each of the two trees carries half the data; a domain sends it to its parent (reduce) and to each
    child (broadcast). The second tree mirrors the first (``ncclGetDtree``; shifted by one for odd
    counts), so a domain interior in one tree is a leaf in the other: 1 for two domains, 1.5 for
    three, 2 from four on (then as much as a ring).
    """
    if domains <= 1:
        return 0.0

    def links(rank: int) -> int:
        return sum(peer != -1 for peer in btree(domains, rank))

    def second(rank: int) -> int:
        return (rank - 1) % domains if domains % 2 else domains - 1 - rank

    return max(0.5 * (links(r) + links(second(r))) for r in range(domains))


def _tree_traffic(nodes: np.ndarray) -> np.ndarray:
    values, inverse = np.unique(nodes, return_inverse=True)
    return np.array([tree_traffic(int(v)) for v in values])[inverse].reshape(np.shape(nodes))


def bandwidth_time(
    op: str,
    algo: str,
    proto: str,
    n: np.ndarray,
    p: np.ndarray,
    nodes: np.ndarray,
    fab: Fabric,
    ll_cap: bool = True,
) -> np.ndarray:
    """Seconds the bytes take with every default channel running: the busiest resource's load over
    its achievable bandwidth.

    ring: ``T n / min(B_up, B_net)`` with T = 2(p-1)/p (allreduce), (p-1)/p (allgather,
    reducescatter), 1 (broadcast, reduce); LL keeps 1/4 (reductions) or 1/3 (copies) of it, at most
    NCCL's LL cap; LL128 120/128. tree (allreduce): ``max(2n / B_up, F(N) n / B_net)`` (a chain GPU
    sends n up and n down; :func:`tree_traffic`), LL 1/3.8, LL128 7/9 in a domain or 120/128 across.
    NVLS (multimem): ``n (1 + 1/g) / B_nvls`` for allreduce (a GPU receives its reduced share and
    every multicast store), ``n (g-1)/g / B_nvls`` for allgather and reducescatter. NVLS-tree:
    ``max(NVLS, F(N) n / B_net)`` and at most NCCL's per-channel NVLS-tree cap. CollNet (the network
    reduces): ``max(2 n (g-1)/g / B_up, n / B_net)``. PAT: as ring across domains. ``ll_cap=False``
    leaves out NCCL's LL cap (llMaxBw), a bound on the whole call's LL throughput, not on one hop.
    ``B_net`` is the domain's NICs at their share above the pods (:meth:`~commodel.comm.fabric.Fabric.pod_share`).
    """
    g = p / nodes
    up = np.where(g > 1, fab.up_Bps(g), np.inf)
    net = np.where(nodes > 1, fab.net_Bps(g) * fab.pod_share(nodes), np.inf)
    reduces = op in REDUCING_OPS
    if algo in ("ring", "pat"):
        traffic = {"allreduce": 2 * (p - 1) / p, "allgather": (p - 1) / p, "reducescatter": (p - 1) / p}
        bw = np.minimum(up, net)
        if proto == "ll":
            bw = bw * (0.25 if reduces else 1 / 3)
            bw = np.minimum(bw, ll_max_GBps(fab, nodes) * 1e9) if ll_cap else bw
        elif proto == "ll128":
            bw = bw * (tables.LL128_USEFUL if fab.nvidia else tables.RCCL_LL128_USEFUL)
        return traffic.get(op, 1.0) * n / bw
    if algo == "tree":
        chain = np.where(g > 1, 2 * n / up, 0.0)
        across = np.where(nodes > 1, _tree_traffic(nodes) * n / net, 0.0)
        t = np.maximum(chain, across)
        if proto == "ll":
            return np.maximum(t * 3.8, 2 * n / (ll_max_GBps(fab, nodes) * 1e9)) if ll_cap else t * 3.8
        if proto == "ll128":
            return t / np.where(nodes == 1, 7 / 9, 120 / 128)
        return t
    if algo in ("nvls", "nvls-tree"):
        share = (1 + 1 / g) if op == "allreduce" else (g - 1) / g
        t = share * n / fab.nvls_Bps
        if algo == "nvls":
            return t
        graph = nvls_graph(fab, g, nodes)
        cap = graph.channels * tables.PER_CH_MAX_NVLS_TREE[fab.arch_index, node_column(nodes)] * 1e9
        return np.maximum.reduce([t, _tree_traffic(nodes) * n / net, 2 * (p - 1) / p * n / cap])
    # CollNet: the network reduces, so each domain sends and receives n once.
    return np.maximum(2 * n * (g - 1) / g / up, n / net)


def default_channels(algo: str, fab: Fabric, g: np.ndarray, nodes: np.ndarray) -> np.ndarray:
    """Collective channels (CTAs) an algorithm launches with: NVLS's own count, else the ring's."""
    graph = nvls_graph(fab, g, nodes) if algo in ("nvls", "nvls-tree") else ring_graph(fab, g, nodes)
    return graph.runtime


def line_round_bytes(proto: str) -> float:
    """Bytes one channel's threads move per round: ``threads x`` NCCL's thread threshold (Simple
    512 x 64 B = 32 KiB, LL 512 x 8 B = 4 KiB, LL128 640 x 8 B = 5 KiB). NCCL keeps a channel for each
    such round a message fills (:func:`used_channels`); LL and LL128 flag every line, so it is also
    the granule by which a receiver can forward what has arrived (:func:`pipeline_fill`)."""
    return float(tables.MAX_THREADS[proto] * tables.THREAD_THRESHOLD[proto])


def used_channels(algo: str, proto: str, n: np.ndarray, p: np.ndarray, channels: np.ndarray) -> np.ndarray:
    """Run-time channel reduction (digest 3.6): ring, tree and PAT drop channels while
    ``nBytes < nc x threads x bytes-per-thread`` (Simple 32 KiB per channel, LL128 5 KiB, ring LL
    4 KiB x nRanks); NVLS and CollNet keep theirs. Returned unrounded (NCCL takes the floor), so that
    time stays monotone in size: each channel then carries at least its threshold of bytes."""
    if algo not in ("ring", "tree", "pat"):
        return channels
    per_channel = line_round_bytes(proto) * (p if (algo == "ring" and proto == "ll") else 1)
    return np.clip(n / per_channel, 1, channels)


def chunk_bytes(
    op: str, algo: str, proto: str, n: np.ndarray, g: np.ndarray, nodes: np.ndarray, channels: np.ndarray
) -> np.ndarray:
    """Bytes one channel moves per pipeline step (digest 4.2-4.3), at most its share of the message.

    ring: LL 32 KiB, LL128 576,000 B, Simple 512 KiB x chunkSteps (4 for allreduce, allgather and
    reducescatter); tree: 512 KiB Simple, LL128 shrunk for small messages (:func:`_tree_ll128_chunk`); NVLS: 128 KiB shrinking to 64, 32, 16 KiB below 64, 8, 2 x
    (channels x heads x chunk) bytes; NVLS-tree: 256 KiB shrinking to 128, 64, 32 KiB below 32, 16,
    4, 1 x (channels x heads x chunk)."""
    heads = g
    if algo in ("nvls", "nvls-tree"):
        regimes = tables.NVLS_CHUNK_STEPS if algo == "nvls" else tables.NVLS_TREE_CHUNK_STEPS
        chunk = np.full(np.shape(n), tables.NVLS_CHUNK_DEFAULT if algo == "nvls" else 256 * 1024, dtype=float)
        ops = channels * heads
        for below, size in regimes:
            chunk = np.where((n < below * ops * chunk) & (chunk > size), size, chunk)
        share = n / (channels * heads)
    else:
        by_proto = {"ll": tables.LL_CHUNK_BYTES, "ll128": tables.LL128_CHUNK_BYTES}
        simple = (
            tables.TREE_SIMPLE_CHUNK_BYTES
            if algo != "ring"
            else tables.SIMPLE_STEP_BYTES * tables.SIMPLE_CHUNK_STEPS.get(op, 1)
        )
        chunk = np.full(np.shape(n), by_proto.get(proto, simple), dtype=float)
        if algo == "tree" and proto == "ll128":
            chunk = _tree_ll128_chunk(chunk, n, g, nodes, channels)
        share = n / (channels * (g * nodes if algo == "ring" else 1))
    return np.maximum(np.minimum(chunk, share), 1.0)


def _tree_ll128_chunk(
    chunk: np.ndarray, n: np.ndarray, ppn: np.ndarray, nodes: np.ndarray, channels: np.ndarray
) -> np.ndarray:
    """NCCL's tree LL128 chunk for small messages (``calcCollChunking``, digest 4.3): with ``s = 1 +
    floor(lg N) + 0.1 ppn``, halve while ``n / (nc chunk) < 64 s / ppn`` and the chunk is above 128 KiB,
    then while that ratio is below ``16 s / ppn`` and the chunk above 32 KiB."""
    s = 1 + np.floor(np.log2(np.maximum(nodes, 1))) + 0.1 * ppn
    for factor, floor in ((64, 128 * 1024), (16, 32 * 1024)):
        for _ in range(8):  # at most 8 halvings from 576,000 B
            shrink = (n / (channels * chunk) < factor * s / ppn) & (chunk > floor)
            chunk = np.where(shrink, chunk / 2, chunk)
    return chunk


def pipeline_fill(
    algo: str,
    n: np.ndarray,
    g: np.ndarray,
    nodes: np.ndarray,
    chunk: np.ndarray,
    rate: np.ndarray,
    proto: str = "simple",
) -> np.ndarray:
    """Time before a chunk pipeline reaches its steady state, in seconds.

    The first piece crosses every stage before the last stage starts: ``stages x piece / rate`` with
    ``rate`` one channel's bytes/s through a hop (its links' rate: NCCL's LL cap bounds the whole
    call's throughput, not a hop). A Simple piece is a chunk, forwarded once its step's flag is
    posted; LL and LL128 flag every line, so a hop forwards what one round of the channel's threads
    moves (:func:`line_round_bytes`), at most the chunk. Tree: down a chain of g GPUs and lg N tree
    levels and back up, ``2 ((g-1) + ceil(lg N))`` stages. NVLS: a step of g heads' chunks through
    scatter, multimem reduce and gather, 2 extra steps of ``g x chunk``; NVLS-tree adds the tree's
    ``2 ceil(lg N)``. A ring has none: every rank sends from the first step on.
    """
    depth = np.ceil(np.log2(np.maximum(nodes, 1)))
    if algo == "tree":
        piece = np.minimum(chunk, line_round_bytes(proto)) if proto != "simple" else chunk
        return 2 * ((g - 1) + depth) * piece / rate
    if algo in ("nvls", "nvls-tree"):
        fill = 2 * g * chunk / rate
        return fill + (2 * depth * chunk / rate if algo == "nvls-tree" else 0.0)
    return np.zeros(np.shape(n))


def physical_time(
    op: str,
    algo: str,
    proto: str,
    n: np.ndarray,
    p: np.ndarray,
    nodes: np.ndarray,
    fab: Fabric,
    channels: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(seconds, channels used, chunk bytes) of one call of (algorithm, protocol).

    ``time = launch(latency + pipeline fill + max(bandwidth time, link time x default / used
    channels))`` (NCCL's LL cap on the whole call, on NVIDIA GPUs only: RCCL applies none; the
    links' share on each channel used; see
    :meth:`Fabric.call_time`), with the link's measured latencies; ``channels`` (default: NCCL's,
    reduced for small messages) may be forced by a tuner policy; more channels than the default do
    not beat the links.
    """
    g = p / nodes
    default = default_channels(algo, fab, g, nodes)
    wanted = default if channels is None else np.broadcast_to(np.asarray(channels, dtype=float), np.shape(n))
    used = used_channels(algo, proto, n, p, wanted)
    with np.errstate(divide="ignore", invalid="ignore"):
        full = bandwidth_time(op, algo, proto, n, p, nodes, fab, ll_cap=fab.nvidia)
        # The links' share falls with the channels used; NCCL's LL cap bounds the whole call, however
        # many channels carry it. RCCL has no such cap (digest 7.1): on AMD GPUs LL runs at the links.
        uncapped = bandwidth_time(op, algo, proto, n, p, nodes, fab, ll_cap=False) if proto == "ll" else full
        moving = np.maximum(full, uncapped * default / np.minimum(used, default))
        chunk = chunk_bytes(op, algo, proto, n, g, nodes, used)
        # One channel's bytes per second through one hop: the links' rate, not the LL cap on the whole call.
        rate = n / (uncapped * default / np.minimum(used, default) * used)
        fill = pipeline_fill(algo, n, g, nodes, chunk, rate, proto)
    kernel = latency(op, algo, proto, p, nodes, fab, measured=True) + fill + moving
    return fab.call_time(kernel), np.floor(used), chunk
