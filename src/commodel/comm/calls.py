"""A collective call as nccl-tests runs it (:func:`run`): ``op`` over a range of sizes on some GPUs of
a cluster, the algorithm and protocol chosen as the library chooses them (``auto``), the fastest
(``best``) or one forced, with a forced channel count where a tuner plugin sets one; the results as
nccl-tests prints them (size, time, algbw, busbw, with the algorithm, protocol, channels and chunk),
beside the fastest path the library offers there: a choice slower than it is the tuner's, and only
the choice can fall as the message grows (no path's own time does, so neither does the fastest).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np
from numpy.typing import ArrayLike

from commodel.comm import nccl
from commodel.comm.collectives import (
    ALGORITHMS,
    POLICIES,
    Choice,
    candidates,
    check_op,
    collective_time,
    library_algorithms,
    pair_time,
    protocols_for,
    tune,
)
from commodel.comm.fabric import Fabric, fabric_of
from commodel.comm.mpi import BUSBW_FACTOR
from commodel.comm.p2p import PROTOCOLS
from commodel.comm.tables import MAX_CHANNELS
from commodel.errors import CommodelError, unknown
from commodel.hardware.cluster import Cluster
from commodel.units import format_bytes

if TYPE_CHECKING:
    import pandas as pd

COLUMNS = [
    "op",
    "algo",
    "protocol",
    "size_bytes",
    "gpus",
    "nodes",
    "domains",
    "channels",
    "chunk_bytes",
    "time_s",
    "algbw_GBps",
    "busbw_GBps",
    "fastest",
    "fastest_time_s",
]


#: Bytes per element of nccl-tests' default type (float), in which a size counts whole elements.
ELEMENT_BYTES = 4

#: Collectives whose every rank holds a slice of the buffer: nccl-tests runs ``count / ranks`` elements
#: a rank (``AllGatherGetCollByteCount`` and its kin), none below one element per rank.
SLICED = ("allgather", "reducescatter", "alltoall")


def least_size(op: str, ranks: int) -> int:
    """The smallest size in bytes nccl-tests runs ``op`` at over ``ranks`` GPUs: one float element, one
    per rank for a collective that slices its buffer (:data:`SLICED`)."""
    return ELEMENT_BYTES * (ranks if op in SLICED and ranks > 1 else 1)


def too_small(op: str, size: float, ranks: int, named: str = "--size") -> str:
    """Why nccl-tests would run ``op`` of ``size`` bytes over ``ranks`` GPUs as no bytes ("" where it
    would not): below :func:`least_size`."""
    if size >= least_size(op, ranks):
        return ""
    each = f" per rank of {ranks}" if op in SLICED and ranks > 1 else ""
    return f"{named} {size:g} B is less than one {ELEMENT_BYTES}-byte float element{each}: nccl-tests would run 0"


def resolve_layout(cluster: Cluster, gpus: int | None) -> tuple[int, int, int]:
    """(ranks, nodes, scale-up domains) for ``gpus`` GPUs spread evenly over the cluster's nodes
    (default: all GPUs)."""
    total, nodes = cluster.total_gpus, cluster.nodes
    gpus = total if gpus is None else gpus
    if gpus < 2:  # NCCL's one-rank path is a local copy, not a collective
        more = "" if total > 1 else f"; {cluster.name} has one GPU per node: raise --nodes"
        raise CommodelError(f"a collective takes 2 or more GPUs, got {gpus}{more}")
    if gpus > total:
        raise CommodelError(
            f"{gpus} GPUs requested but {nodes} node(s) of {cluster.name} have {total}; "
            f"raise --nodes to at least {-(-gpus // cluster.gpus_per_node)}"
        )
    if gpus % nodes:
        raise CommodelError(f"{gpus} GPUs do not spread evenly over {nodes} nodes; use a multiple of {nodes}")
    return gpus, nodes, domains_of(cluster, nodes)


def domains_of(cluster: Cluster, nodes: int) -> int:
    """Scale-up domains ``nodes`` nodes fill (a domain may span several nodes, as in NVL72)."""
    per_domain = max(cluster.domain_gpus // cluster.gpus_per_node, 1)
    if nodes <= per_domain:
        return 1
    if nodes % per_domain:
        raise CommodelError(
            f"{nodes} nodes of {cluster.name} do not fill whole {cluster.domain_gpus}-GPU scale-up domains "
            f"of {per_domain} nodes; use a multiple of {per_domain}"
        )
    return nodes // per_domain


def run_columns(
    op: str,
    cluster: Cluster,
    sizes: ArrayLike,
    gpus: int | None = None,
    algo: str = "auto",
    protocol: str = "auto",
    library: str = "nccl",
    channels: int | None = None,
    fab: Fabric | None = None,
) -> dict[str, np.ndarray]:
    """nccl-tests-like table of ``op`` over ``sizes`` on ``gpus`` GPUs of ``cluster``, as columns
    (:data:`COLUMNS`: one array each; :func:`run` gives the same as a DataFrame).

    ``algo``: ``auto`` (the library's own choice), ``best`` (the fastest) or one algorithm;
    ``protocol``: ``auto`` or one protocol; ``channels`` forces a channel count (as a tuner plugin
    may). Raises :class:`CommodelError` if the request cannot run here.
    """
    check_op(op)
    fab = fab or fabric_of(cluster)
    ranks, nodes, domains = resolve_layout(cluster, gpus)
    algos = _requested_algos(op, algo, fab, ranks, domains, cluster, library)
    pairs = candidates(op, fab, algos)
    if protocol != "auto":
        if protocol not in PROTOCOLS:
            raise unknown("protocol", protocol, PROTOCOLS)
        pairs = [(a, p) for a, p in pairs if p == protocol]
        if not pairs:
            path = op if algo in POLICIES else algo
            raise CommodelError(f"protocol '{protocol}' is not available for {path} on {cluster.name}")
    if channels is not None and not 1 <= channels <= MAX_CHANNELS:
        raise CommodelError(f"--channels must be 1 to {MAX_CHANNELS} (NCCL's MAXCHANNELS), got {channels}")
    sizes = np.asarray(sizes, dtype=float)
    if sizes.size:
        require_held(cluster, sizes.max())
    policy = "best" if algo == "best" or library == "all" else "auto"
    if channels is None:
        choice = tune(op, sizes, ranks, domains, fab, pairs, policy)
        fastest = choice if policy == "best" else tune(op, sizes, ranks, domains, fab, pairs, "best")
    else:
        choice = fastest = _forced_channels(op, sizes, ranks, domains, fab, pairs, channels)
    return results_columns(op, sizes, ranks, nodes, domains, choice, fastest)


def unheld(cluster: Cluster, size: float, holder: str = "every GPU of a collective") -> str:
    """Why a buffer of ``size`` bytes cannot be sent on ``cluster``'s GPUs ("" where it can): in place,
    every GPU of a collective holds at least the buffer (nccl-tests allocates it whole), a message's
    sender at least the message (``holder``)."""
    held = cluster.gpu.memory_capacity.value
    if size <= held:
        return ""
    return (
        f"a {format_bytes(size)} buffer does not fit the {format_bytes(held)} of {cluster.gpu.description}: "
        f"{holder} holds at least its buffer"
    )


def require_held(cluster: Cluster, size: float, holder: str = "every GPU of a collective") -> None:
    """:func:`unheld`'s reason as an error, where there is one."""
    why = unheld(cluster, size, holder)
    if why:
        raise CommodelError(why)


def run(op: str, cluster: Cluster, sizes: ArrayLike, *args: Any, **kwargs: Any) -> pd.DataFrame:
    """:func:`run_columns` (the same arguments) as a DataFrame."""
    import pandas as pd  # slow: pandas (0.2 s), for this table only (a training step needs none)

    return pd.DataFrame(run_columns(op, cluster, sizes, *args, **kwargs), columns=COLUMNS)


def _forced_channels(
    op: str, sizes: np.ndarray, ranks: int, domains: int, fab: Fabric, pairs: list, channels: int
) -> Choice:
    """The fastest pair when every call runs ``channels`` channels."""
    results = [pair_time(op, a, pr, sizes, ranks, domains, fab, channels) for a, pr in pairs]
    times = np.stack([r[0] for r in results])
    best = np.argmin(times, axis=0)
    pick = lambda stack: np.take_along_axis(stack, best[None], axis=0)[0]  # noqa: E731
    return Choice(
        pick(times),
        np.array([a for a, _ in pairs])[best],
        np.array([pr for _, pr in pairs])[best],
        pick(np.stack([r[1] for r in results])),
        pick(np.stack([r[2] for r in results])),
    )


def results_columns(
    op: str, sizes: np.ndarray, ranks: int, nodes: int, domains: int, choice: Choice, fastest: Choice
) -> dict[str, np.ndarray]:
    """Assemble the nccl-tests columns and the ``fastest`` path (``algo/protocol``) with its time."""
    time = choice.time_s
    algbw = sizes / time / 1e9
    busbw = algbw * BUSBW_FACTOR[op](np.float64(ranks))
    rows = len(sizes)
    return {
        "op": np.full(rows, op),
        "algo": choice.algo,
        "protocol": choice.protocol,
        "size_bytes": sizes.astype(np.int64),
        "gpus": np.full(rows, ranks, dtype=np.int64),
        "nodes": np.full(rows, nodes, dtype=np.int64),
        "domains": np.full(rows, domains, dtype=np.int64),
        "channels": choice.channels.astype(np.int64),
        "chunk_bytes": choice.chunk_bytes.astype(np.int64),
        "time_s": time,
        "algbw_GBps": algbw,
        "busbw_GBps": busbw,
        "fastest": np.char.add(np.char.add(fastest.algo, "/"), fastest.protocol),
        "fastest_time_s": fastest.time_s,
    }


def _requested_algos(
    op: str, algo: str, fab: Fabric, ranks: int, domains: int, cluster: Cluster, library: str
) -> tuple[str, ...]:
    offered = library_algorithms(op, library)
    if algo in POLICIES:
        return offered
    if algo not in ALGORITHMS:
        raise unknown("algorithm", algo, (*POLICIES, *ALGORITHMS))
    every = library_algorithms(op, "all")
    if algo not in every:
        raise CommodelError(f"{op} has no '{algo}' algorithm; choose from: auto, best, {', '.join(every)}")
    time = collective_time(op, algo, protocols_for(algo, fab)[-1], 2**20, ranks, domains, fab)
    if not np.all(np.isfinite(time)):
        raise CommodelError(
            f"'{algo}' cannot run {op} on {ranks} GPUs of {cluster.name} here: {_why(op, algo, fab, ranks, domains)}"
        )
    return (algo,)


def _why(op: str, algo: str, fab: Fabric, ranks: int, domains: int) -> str:
    """Why an algorithm is unavailable, in the user's terms."""
    nvls_ok = fab.nvls_Bps is not None and fab.nvidia and domains == 1
    if algo == "nvls" and nvls_ok and op != "allreduce" and ranks / domains > nccl.MAX_NVLS_ARITY:
        return (
            f"NCCL runs NVLS {op}s on at most {nccl.MAX_NVLS_ARITY} GPUs of a domain (NCCL_MAX_NVLS_ARITY), "
            f"and this one has {ranks / domains:.0f}"
        )
    reasons = {
        "nvls": "NVLS needs an NVLink switch that reduces (NVLink SHARP) and one scale-up domain"
        + ("; across domains use nvls-tree" if domains > 1 else ""),
        "nvls-tree": "NVLS-tree needs NVLink SHARP inside each domain and more than one domain",
        "collnet-direct": "CollNet needs a scale-out network that reduces (SHARP, --sharp) and several domains",
        "collnet-chain": "CollNet needs a scale-out network that reduces (SHARP, --sharp) and several domains",
        "pat": "PAT runs with one GPU per node across several nodes",
        "hierarchical": "the two-level algorithm needs more than one domain",
        "tree": "RCCL does not use its tree inside one MI300X node",
    }
    return reasons.get(algo, f"{fab.library.upper()} has no such path here")
