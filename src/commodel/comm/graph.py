"""NCCL's topology search, reduced to what its tuner reads: channels and GB/s per channel.

NCCL searches ring, tree and NVLS *graphs* at init (``src/graph/search.cc``, digest 3.2-3.5): it
picks the highest speed of its per-architecture speed array that one channel can run at, builds as
many channels as the links carry at that speed, duplicates channels on fast links, and finally
doubles the collective channel count (``connect.cc``). This module follows those rules on the
cluster's own numbers, vectorized over (ranks per domain, domains); it does not enumerate paths,
so it is the search NCCL would run on a regular (rail-aligned, fully switched or fully meshed)
topology.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from commodel.comm import tables
from commodel.comm.fabric import Fabric
from commodel.vectorize import memoized


@dataclass(frozen=True)
class Graph:
    """One searched graph per point: ``channels`` and speeds are NCCL's (before the run-time
    doubling), ``runtime`` is the collective channel count kernels launch with (one CTA each)."""

    channels: np.ndarray
    bw_intra: np.ndarray
    bw_inter: np.ndarray
    runtime: np.ndarray


def _highest_speed(speeds: tuple[float, ...], limit: np.ndarray) -> np.ndarray:
    """The highest speed of a search array that does not exceed ``limit`` (the lowest otherwise)."""
    ordered = np.sort(np.asarray(speeds, dtype=float))
    index = np.searchsorted(ordered, limit, side="right") - 1
    return ordered[np.clip(index, 0, None)]


def _raised(speeds: tuple[float, ...], start: np.ndarray, ceiling: np.ndarray) -> np.ndarray:
    """NCCL's pass 2 for NVLS: raise a speed through the array while it is below ``ceiling``."""
    ordered = np.sort(np.asarray(speeds, dtype=float))
    above = np.searchsorted(ordered, ceiling, side="left")  # smallest speed >= ceiling
    target = ordered[np.clip(above, 0, len(ordered) - 1)]
    return np.maximum(start, target)


def ring_graph(fab: Fabric, g: np.ndarray, nodes: np.ndarray) -> Graph:
    """Ring (and tree: same channels) graph for ``g`` ranks per domain over ``nodes`` domains.

    Speed ``s``: the highest array speed within the best single path (and, across domains, the NIC);
    channels: how many ``s``-channels the GPU's links (and the domain's NICs) carry, at most 32;
    duplicated (``ncclTopoDupChannels``) when ``s >= 25`` unless Hopper+ with ``s < 50`` and more
    than 4 channels, halving the per-channel speed; run-time channels = 2 x graph channels (NCCL
    ``connect.cc``; RCCL: its channel multiplier, 2 by default), at most 64.
    """
    return _ring_graph(fab.tuner_view, g, nodes)


@memoized
def _ring_graph(fab: Fabric, g: np.ndarray, nodes: np.ndarray) -> Graph:
    """:func:`ring_graph` on the fabric as NCCL's topology search sees it
    (:attr:`~commodel.comm.fabric.Fabric.tuner_view`), which no calibration or uncertainty draw moves:
    searched once for them all."""
    g, nodes = np.broadcast_arrays(np.asarray(g, dtype=float), np.asarray(nodes, dtype=float))
    multi = nodes > 1
    family = fab.speed_family
    total = fab.nccl_up_GBps(g)
    path = fab.nccl_path_GBps(g)
    nic = fab.nccl_nic_GBps
    intra_limit = np.where(g > 1, path, np.inf)
    limit = np.where(multi, np.minimum(intra_limit, nic), path)
    speed = np.where(
        multi,
        _highest_speed(tables.SPEEDS_INTER[family], limit),
        _highest_speed(tables.SPEEDS_INTRA[family], limit),
    )
    if fab.topology == "mesh":
        by_links = fab.mesh_paths(g) * np.floor(path / speed)
    else:
        by_links = np.floor(total / speed)
    by_links = np.where(g > 1, by_links, np.inf)
    by_nics = np.where(multi, np.minimum(fab.nics_per_domain, g) * np.floor(nic / speed), np.inf)
    channels = np.clip(np.minimum(by_links, by_nics), 1, tables.MAX_RING_GRAPH_CHANNELS)
    skip = (speed < 25) | ((fab.arch_index >= 2) & (speed < 50) & (channels > 4))
    dup = fab.nvidia & ~skip
    channels = np.where(dup, np.minimum(2 * channels, tables.MAX_RING_GRAPH_CHANNELS), channels)
    speed = np.where(dup, speed / 2, speed)
    runtime = np.minimum(tables.MAX_CHANNELS, _runtime_multiplier(fab, g, nodes) * channels)
    return Graph(channels, speed, speed, runtime)


def _runtime_multiplier(fab: Fabric, g: np.ndarray, nodes: np.ndarray) -> np.ndarray:
    """Collective channels per graph channel: 2 in NCCL; RCCL's ``nc`` (digest 7.5) on MI300X
    (16 for 2 ranks, 4 for 4) and MI200 (4 inside a node)."""
    if fab.nvidia:
        return np.full_like(g, 2.0)
    ranks = g * nodes
    if fab.arch == "cdna3":
        return np.select([ranks == 2, ranks == 4], [16.0, 4.0], 2.0)
    if fab.arch == "cdna2":
        return np.where(nodes == 1, 4.0, 2.0)
    return np.full_like(g, 2.0)


def nvls_graph(fab: Fabric, g: np.ndarray, nodes: np.ndarray) -> Graph:
    """NVLS graph (NVLink SHARP): one channel per local rank (at most 32), at the highest speed whose
    channels fit the GPU's links scaled by g / (g - 1); pass 2 raises the inter speed toward twice
    the intra speed; across domains it is capped by the domain's NICs shared over the channels.
    Run-time NVLS channels: 16 on Hopper, 24 on Blackwell in one domain, 32 across (nvls.cc)."""
    return _nvls_graph(fab.tuner_view, g, nodes)


@memoized
def _nvls_graph(fab: Fabric, g: np.ndarray, nodes: np.ndarray) -> Graph:
    """:func:`nvls_graph` on the fabric as NCCL's topology search sees it
    (:attr:`~commodel.comm.fabric.Fabric.tuner_view`), which no calibration or uncertainty draw moves:
    searched once for them all."""
    g, nodes = np.broadcast_arrays(np.asarray(g, dtype=float), np.asarray(nodes, dtype=float))
    family = fab.speed_family
    speeds = tables.SPEEDS_INTRA[family]
    channels = np.clip(np.minimum(32, g), 1, None)
    room = fab.nccl_up_GBps(g) * g / np.maximum(g - 1, 1) / channels
    speed = _highest_speed(speeds, np.minimum(room, fab.nccl_path_GBps(g)))
    inter = _raised(speeds, speed, 2 * speed)
    net = fab.nccl_nic_GBps * np.minimum(fab.nics_per_domain, g) / channels
    inter = np.where(nodes > 1, np.minimum(inter, net), inter)
    if fab.arch == "blackwell":
        runtime = np.where(
            nodes > 1, tables.NVLS_CHANNELS["blackwell_multi"], tables.NVLS_CHANNELS["blackwell_single"]
        )
    else:
        runtime = np.full_like(g, tables.NVLS_CHANNELS["hopper"])
    return Graph(channels, speed, inter, np.asarray(runtime, dtype=float))
