"""The communication parameters of a cluster, reduced to the numbers the cost formulas use.

A *domain* is what one scale-up fabric joins: a node's NVSwitch or xGMI mesh, or a rack-scale NVLink
domain spanning several nodes (GB200 NVL72: 72 GPUs in 18 trays). NCCL treats a domain as one node
(a multi-node NVLink clique), so "nodes" in every collective formula count domains.

Two views of the same hardware are kept side by side:

- **achievable** bandwidths (bytes/s per direction: vendor rate x measured or assumed efficiency),
  which price the time a collective takes;
- **NCCL's own view** (GB/s, :mod:`commodel.comm.tables`): NVLink per-link speed by architecture,
  NIC line rate / 8, xGMI per-link speed, which its topology search and tuner read to choose an
  algorithm, protocol and channel count.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from functools import cached_property

import numpy as np
from numpy.typing import ArrayLike

from commodel.comm import tables
from commodel.comm.initiation import nccl_net_p2p, path_of
from commodel.errors import CommodelError, unknown
from commodel.hardware.cluster import Cluster
from commodel.records import Bandwidth

#: How calls reach the GPU (a software setting of the run, not hardware): ``stream`` launches every
#: call as its own kernel (nccl-tests' default), ``graph`` replays calls captured in a CUDA graph.
#: Back-to-back calls overlap the host's work with the previous kernel, so a call takes
#: ``max(kernel + start, host)``: ``start`` is the launch overhead (stream) or one graph node (graph)
#: before the kernel runs; ``host`` is that cost for every GPU one process drives (nccl-tests ``-g``),
#: since a single process launches each call on its GPUs one after another. Graph capture registers
#: the user buffers, so NVLS runs zero-copy at its measured latency (the link's ``nvls_latency``).
LAUNCH_MODES = ("stream", "graph")

#: Cost of one kernel node in a replayed CUDA graph: measurement graph-replay (15 us + 0.58 us per node).
GRAPH_NODE_S = 0.58e-6

#: Extra switch hops an inter-node step crosses when the scale-out network is not rail-optimized
#: (leaf, spine, leaf instead of one leaf).
OFF_RAIL_HOPS = 2


@dataclass(frozen=True)
class Fabric:
    """Scale-up and scale-out parameters of one cluster, per scale-up domain. ``p2p_net_latency_s`` and
    ``proxy_op_s`` are NCCL's point-to-point path across domains (:func:`~commodel.comm.initiation.nccl_net_p2p`;
    ``None`` and 0 where the NIC's initiation parameters are not in the database)."""

    library: str
    arch: str
    cpu: str
    topology: str
    domain: int
    link_Bps: float
    link_line_Bps: float
    links_per_gpu: int
    up_class: str
    nic_Bps: float
    nic_line_Bps: float
    nics_per_domain: float
    net_latency_s: float
    off_rail_s: float
    nvls_Bps: float | None
    sharp: bool
    reduce_Bps: float
    start_s: float
    host_s: float
    ll128: bool
    unpack: bool = False
    ring_step_s: float | None = None
    nvls_latency_s: float | None = None
    pod_domains: float = float("inf")
    oversubscription: float = 1.0
    package: int = 1
    package_links: int = 0
    p2p_net_latency_s: float | None = None
    proxy_op_s: float = 0.0

    def call_time(self, kernel_s: ArrayLike) -> np.ndarray:
        """Time per call of back-to-back calls whose kernel takes ``kernel_s``: ``max(kernel + start,
        host)`` (:data:`LAUNCH_MODES`)."""
        return np.maximum(np.asarray(kernel_s) + self.start_s, self.host_s)

    @property
    def nvidia(self) -> bool:
        return self.library == "nccl"

    @cached_property
    def tuner_view(self) -> Fabric:
        """The fabric as NCCL's tuner sees it: its topology detection's nominal speeds, counts and
        architecture, and the latency the net plugin reports; the rates and costs a calibration or an
        uncertainty draw moves (payload efficiencies, NVLS's measured rate, kernel starts) set to
        one placeholder each, so that fabrics NCCL cannot tell apart share their tuner terms."""
        return dataclasses.replace(
            self, link_Bps=self.link_line_Bps, nic_Bps=self.nic_line_Bps,
            nvls_Bps=None if self.nvls_Bps is None else 1.0, reduce_Bps=1.0, start_s=0.0, host_s=0.0,
            ring_step_s=None, nvls_latency_s=None, p2p_net_latency_s=None, proxy_op_s=0.0,
        )  # fmt: skip

    @property
    def arch_index(self) -> int:
        """NCCL's architecture index (0 Volta .. 3 Blackwell); AMD GPUs (RCCL keeps NCCL's tables with
        CDNA in Ampere's row) take 1."""
        return tables.ARCHS.index(self.arch) if self.library == "nccl" else 1

    @property
    def speed_family(self) -> str:
        """Which of NCCL's search speed arrays applies."""
        if not self.nvidia:
            return "amd"
        return {"hopper": "hopper", "blackwell": "blackwell"}.get(self.arch, "pre_hopper")

    # --- achievable bandwidths (bytes/s) ----------------------------------------------------------

    def up_Bps(self, ranks_per_domain: ArrayLike, all_to_all: bool = False) -> np.ndarray:
        """Per-GPU scale-up bandwidth when ``ranks_per_domain`` GPUs of a domain take part.

        switch and pcie: every GPU drives its own ports (``links x link``); mesh: a GPU reaches each of
        the other g - 1 participants over its own direct links, so ring-like and all-to-all patterns
        use ``(g - 1) x links x link`` in aggregate; a mesh of packages: :meth:`packaged_Bps`.
        """
        g = np.asarray(ranks_per_domain, dtype=float)
        per_gpu = self.links_per_gpu * self.link_Bps
        if self.topology == "mesh" and self.package > 1:
            return self.packaged_Bps(g, all_to_all)
        if self.topology == "mesh":
            return np.maximum(g - 1, 1) * per_gpu
        return np.full_like(g, per_gpu)

    def packaged_Bps(self, g: np.ndarray, all_to_all: bool = False) -> np.ndarray:
        """Per-GPU bandwidth on a mesh of ``q``-die packages (MI250X: two GCDs): ``P`` a die's package
        links, ``X`` its links to other packages, ``g`` participants in whole packages. Inside one
        package: ``P``. A ring visits each package's dies in a row, so at least ``g / q`` of its ``g``
        hops leave a package: the ``g X`` leaving capacity carries at least that share of the ``g B``
        sent, ``B <= q X``, and no die sends more than its links, ``B <= P + X``. An all-to-all sends
        ``(g - q) / (g - 1)`` of its bytes out of the package: ``B <= X (g - 1) / (g - q)``, and
        ``(q - 1) / (g - 1)`` over the package links."""
        q, cross, inner = (
            float(self.package),
            self.links_per_gpu * self.link_Bps,
            self.package_links * self.link_Bps,
        )
        if all_to_all:
            outside = np.asarray(g - q, dtype=float)  # none: the package's own links alone carry it
            leaving = np.divide(
                cross * (g - 1), outside, out=np.full(outside.shape, np.inf), where=outside > 0
            )
            across = np.minimum(leaving, inner * (g - 1) / max(q - 1, 1))
        else:
            across = np.minimum(q * cross, inner + cross)
        return np.where(g <= q, inner, across)

    def net_Bps(self, ranks_per_domain: ArrayLike) -> np.ndarray:
        """Scale-out bandwidth of one domain when ``ranks_per_domain`` of its GPUs take part (each
        drives the NICs on its rail)."""
        g = np.asarray(ranks_per_domain, dtype=float)
        return np.minimum(self.nics_per_domain, g) * self.nic_Bps

    def pod_share(self, domains: ArrayLike, all_to_all: bool = False) -> np.ndarray:
        """The share of its NIC rate a domain keeps when a call over ``domains`` domains (placed in
        whole pods, as Megatron's rank order places a group) crosses the core tier, which carries
        ``1 / o`` of a pod's NIC bandwidth (``o``: :attr:`oversubscription`).

        Rings and trees (and a pipeline's sends) leave a pod of ``P`` of the call's domains through
        one domain's traffic while every domain of the pod runs such a call: ``min(1, P / o)``. An
        all-to-all sends the share ``f = (N - P) / (N - 1)`` of its bytes out of the pod:
        ``1 / max(1, f o)``. 1 within a pod."""
        n = np.asarray(domains, dtype=float)
        pod = min(self.pod_domains, 1e300)
        if self.oversubscription <= 1:
            return np.ones_like(n)
        if all_to_all:
            leaving = np.divide(n - pod, n - 1, out=np.zeros_like(n), where=n > 1)
            share = 1 / np.maximum(1.0, leaving * self.oversubscription)
        else:
            share = np.full_like(n, min(1.0, pod / self.oversubscription))
        return np.where(n > pod, share, 1.0)

    def pipeline_share(self, stage_gpus: ArrayLike, gpus: ArrayLike) -> np.ndarray:
        """The share of its NIC rate a pipeline send keeps where two stages meet across pods: every
        GPU of the sending stage in the pod, ``min(stage, pod)`` of them, sends at once through the
        core's ``pod / o``: ``min(1, pod / (o min(stage, pod)))``; 1 where the job fits one pod."""
        stage = np.asarray(stage_gpus, dtype=float)
        pod = min(self.pod_domains * self.domain, 1e300)
        share = np.minimum(1.0, pod / (self.oversubscription * np.minimum(stage, pod)))
        return np.where(np.asarray(gpus, dtype=float) > pod, share, 1.0)

    # --- NCCL's view (GB/s) -------------------------------------------------------------------

    def nccl_up_GBps(self, ranks_per_domain: ArrayLike) -> np.ndarray:
        """A GPU's total scale-up bandwidth as NCCL's topology sees it (digest 3.1, 7.5)."""
        g = np.asarray(ranks_per_domain, dtype=float)
        if self.topology == "mesh" and self.package > 1:  # the package's links, and beyond it all of them
            links = np.where(g <= self.package, self.package_links, self.package_links + self.links_per_gpu)
            return links * tables.XGMI_LINK_BW.get(self.arch, self.link_line_Bps / 1e9)
        if self.topology == "mesh":
            per_link = tables.XGMI_LINK_BW.get(self.arch, self.link_line_Bps / 1e9)
            return np.maximum(g - 1, 1) * self.links_per_gpu * per_link
        if self.up_class == "nvlink":
            return np.full_like(g, self.links_per_gpu * tables.NVLINK_LINK_BW[self.arch_index])
        return np.full_like(g, self.links_per_gpu * self.link_line_Bps / 1e9)

    def mesh_paths(self, ranks_per_domain: ArrayLike) -> np.ndarray:
        """The paths a GPU's ring channels can take on a mesh, each at :meth:`nccl_path_GBps`: one to
        each of the ``g - 1`` peers; on packages, the one to its package's peers inside a package, and
        beyond it each of its links (the package's and those leaving it) on its own."""
        g = np.asarray(ranks_per_domain, dtype=float)
        if self.package > 1:
            outside = self.package_links + self.links_per_gpu
            return np.where(g <= self.package, np.maximum(g - 1, 1), outside)
        return np.maximum(g - 1, 1)

    def nccl_path_GBps(self, ranks_per_domain: ArrayLike) -> np.ndarray:
        """The best single GPU-to-GPU path inside a domain, as NCCL sees it (one peer on a mesh)."""
        g = np.asarray(ranks_per_domain, dtype=float)
        if self.topology == "mesh" and self.package > 1:  # the package's links; beyond, one link's hop
            per_link = tables.XGMI_LINK_BW.get(self.arch, self.link_line_Bps / 1e9)
            return np.where(g <= self.package, self.nccl_up_GBps(g), per_link)
        if self.topology == "mesh":
            return self.nccl_up_GBps(g) / np.maximum(g - 1, 1)
        return self.nccl_up_GBps(g)

    @property
    def nccl_nic_GBps(self) -> float:
        """NIC speed as NCCL reads it: port rate in Mb/s / 8000 (digest 3.1)."""
        return self.nic_line_Bps / 1e9


def nvls_rate(channel_Bps: float, arch: str, links_Bps: float) -> float:
    """A GPU's NVLS (multimem) bytes/s in one NVLink domain: the channels NCCL gives NVLS there (16 on
    Hopper, 24 on Blackwell: ``nvls.cc``) times one channel's rate, at most its links' line rate."""
    channels = tables.NVLS_CHANNELS["blackwell_single" if arch == "blackwell" else "hopper"]
    return min(channels * channel_Bps, links_Bps)


def nvls_channel(cluster: Cluster) -> Bandwidth | None:
    """One NVLS channel's multimem rate on ``cluster``: its system's switches' where the system states
    one (a rack's switch trays), else its scale-up link's."""
    return cluster.system.scale_up.nvls_channel_bandwidth or cluster.scale_up.nvls_channel_bandwidth


def fabric_of(
    cluster: Cluster,
    sharp: bool = False,
    launch: str = "stream",
    nvls: bool = True,
    gpus_per_process: int = 1,
) -> Fabric:
    """Extract the cost-model parameters of ``cluster`` from its hardware records.

    Run settings: ``sharp`` lets the scale-out switches reduce (CollNet/SHARP) where the fabric can;
    ``launch`` is how calls reach the GPU (:data:`LAUNCH_MODES`) and ``gpus_per_process`` how many
    GPUs one process drives (nccl-tests ``-g``; 1 with one process per GPU); ``nvls=False`` disables
    NVLink SHARP (``NCCL_NVLS_ENABLE=0``).
    """
    if launch not in LAUNCH_MODES:
        raise unknown("launch mode", launch, LAUNCH_MODES)
    if gpus_per_process < 1:
        raise CommodelError(f"GPUs per process must be at least 1, got {gpus_per_process}")
    up, out, gpu = cluster.scale_up, cluster.scale_out, cluster.gpu
    system = cluster.system
    multimem = None
    channel = nvls_channel(cluster)
    if up.in_network_reduction and channel is not None:
        multimem = nvls_rate(
            channel.value,
            gpu.architecture,
            system.scale_up.links_per_gpu.value * up.bandwidth.value,
        )
    nodes_per_domain = cluster.domain_gpus / cluster.gpus_per_node
    p2p = nccl_net_p2p(path_of(cluster)) if out.initiation is not None else (None, 0.0)
    start = gpu.launch_overhead.value if launch == "stream" else GRAPH_NODE_S
    off_rail = 0.0 if system.scale_out.rail_optimized else OFF_RAIL_HOPS * out.latency.value
    return Fabric(
        library="nccl" if gpu.vendor == "nvidia" else "rccl",
        arch=gpu.architecture,
        cpu=system.cpu,
        topology=system.scale_up.topology,
        domain=cluster.domain_gpus,
        link_Bps=up.bandwidth.value * up.efficiency.value,
        link_line_Bps=up.bandwidth.value,
        links_per_gpu=int(system.scale_up.links_per_gpu.value),
        up_class="pci" if up.kind == "pcie" else "nvlink",
        nic_Bps=out.bandwidth.value * out.efficiency.value,
        nic_line_Bps=out.bandwidth.value,
        nics_per_domain=system.scale_out.nics_per_node.value * max(nodes_per_domain, 1.0),
        net_latency_s=out.net_plugin_latency.value if out.net_plugin_latency else 0.0,
        off_rail_s=off_rail,
        nvls_Bps=multimem if nvls else None,
        sharp=bool(sharp and out.in_network_reduction),
        # A local reduction reads two operands and writes one: 3 bytes of HBM traffic per byte.
        reduce_Bps=gpu.memory_bandwidth.value * gpu.memory_efficiency.value / 3,
        start_s=start,
        host_s=start * gpus_per_process,
        ll128=gpu.vendor == "nvidia" and up.kind == "nvlink",
        unpack=out.device_unpack,
        ring_step_s=up.ring_step_latency.value if up.ring_step_latency else None,
        nvls_latency_s=up.nvls_latency.value if up.nvls_latency and launch == "graph" else None,
        pod_domains=float("inf") if cluster.pod_gpus is None else cluster.pod_gpus / cluster.domain_gpus,
        oversubscription=cluster.oversubscription,
        package=int(system.scale_up.package.value) if system.scale_up.package else 1,
        package_links=int(system.scale_up.package_links.value) if system.scale_up.package_links else 0,
        p2p_net_latency_s=p2p[0],
        proxy_op_s=p2p[1],
    )
