"""The communication parameters of a cluster, reduced to the numbers the cost formulas use.

All bandwidths are *achievable* bytes/s per direction (vendor rate x calibrated efficiency).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike

from commodel.hardware.cluster import Cluster

#: NVLS latency: NCCL tuning.cc hwLat[NVLink][NVLS][Simple] = 25 us. NCCL's tuner uses this value to
#: decide when NVLS pays off; a CUDA-graph 2-GPU measurement (h100-ar-lat2) is lower, 5.8 us.
NVLS_LATENCY_S = 25e-6


@dataclass(frozen=True)
class Fabric:
    """Scale-up and scale-out parameters of one cluster."""

    topology: str
    gpus_per_node: int
    link_Bps: float
    links_per_gpu: int
    nic_Bps: float
    nics_per_node: int
    intra_step_s: dict[str, float]
    inter_step_s: dict[str, float]
    nvls_Bps: float | None
    nvls_latency_s: float
    reduce_Bps: float
    ll128: bool
    launch_s: float

    def intra_Bps(self, ranks_per_node: ArrayLike) -> np.ndarray:
        """Per-GPU bandwidth inside a node for ``ranks_per_node`` participating GPUs.

        switch and pcie: every GPU drives its own ports (``links x link``); mesh: a GPU reaches each of
        the other g - 1 participants over its own direct links, so ring-like and all-to-all patterns
        use ``(g - 1) x links x link`` in aggregate.
        """
        g = np.asarray(ranks_per_node, dtype=float)
        per_gpu = self.links_per_gpu * self.link_Bps
        if self.topology == "mesh":
            return np.maximum(g - 1, 1) * per_gpu
        return np.full_like(g, per_gpu)

    def node_net_Bps(self, ranks_per_node: ArrayLike) -> np.ndarray:
        """Scale-out bandwidth of one node when ``ranks_per_node`` GPUs take part (rail-aligned NICs)."""
        g = np.asarray(ranks_per_node, dtype=float)
        return np.minimum(self.nics_per_node, g) * self.nic_Bps


def fabric_of(cluster: Cluster) -> Fabric:
    """Extract the cost-model parameters of ``cluster`` from its hardware records."""
    up, out, gpu = cluster.scale_up, cluster.scale_out, cluster.gpu
    nvls = None
    if up.in_network_reduction and up.reduction_efficiency is not None:
        links = cluster.system.scale_up.links_per_gpu.value
        nvls = links * up.bandwidth.value * up.reduction_efficiency.value
    return Fabric(
        topology=cluster.system.scale_up.topology,
        gpus_per_node=cluster.gpus_per_node,
        link_Bps=up.bandwidth.value * up.efficiency.value,
        links_per_gpu=int(cluster.system.scale_up.links_per_gpu.value),
        nic_Bps=out.bandwidth.value * out.efficiency.value,
        nics_per_node=int(cluster.system.scale_out.nics_per_node.value),
        intra_step_s={p: up.step_latency[p] for p in ("ll", "ll128", "simple")},
        inter_step_s={p: out.step_latency[p] for p in ("ll", "ll128", "simple")},
        nvls_Bps=nvls,
        nvls_latency_s=NVLS_LATENCY_S,
        # A local reduction reads two operands and writes one: 3 bytes of HBM traffic per byte.
        reduce_Bps=gpu.memory_bandwidth.value * gpu.memory_efficiency.value / 3,
        ll128=gpu.vendor == "nvidia" and up.kind == "nvlink",
        launch_s=gpu.launch_overhead.value,
    )
