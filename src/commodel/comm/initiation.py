"""Who drives a message: the latency of one put, of one coordination and the message rate of each
GPU-centric communication scheme (Unat et al., "The landscape of GPU-centric communication",
arXiv:2409.09874), from named hardware parameters.

Pieces (``hardware_db``): the GPU's kernel launch; the host's and GPU's software costs
(:class:`commodel.hardware.schema.HostCosts`: host wake-up on a stream, library call, proxy pick-up,
stream memory operation, device poll, work-request build); a PCIe transaction ``p`` (the GPU's host
link latency; a read is a round trip, ``2p``); the NIC's processing per side and the switch hops
(:class:`commodel.hardware.schema.NicInitiation`, each hop the fabric's latency); payload
serialization at the link's achievable bandwidth. The network part of every put is
``N = 2 nic + hops x hop + n / B``.

One put, sender's decision to payload visible to the receiver:

- ``host-driven`` (GPU-aware MPI at a kernel boundary): the host wakes on the kernel's end, calls the
  library, rings the NIC (``p``), the NIC reads the request from host memory and the payload from the
  GPU (``2p`` each), ``N``, writes the payload (``p``), the receiving host's progress engine sees it.
- ``stream-triggered``: operations queued on the stream beforehand; at the kernel boundary the GPU's
  front end triggers the NIC (a stream memory operation), the NIC reads the payload (``2p``), ``N``,
  writes it (``p``), and a stream wait-value operation releases the receiver.
- ``kernel-triggered`` (GICC on libfabric CXI; GPUDirect Async's pre-built work requests on
  ConnectX): inside the kernel a GPU thread fences and stores the trigger of an operation the host
  pre-staged, the store crosses PCIe (the doorbell write), the NIC reads the payload (``2p``), ``N``,
  writes payload and completion (``p``), a GPU thread polls it.
- ``kernel-initiated`` (NVSHMEM IBGDA, NCCL GIN GDAKI): a GPU thread builds the work request and rings
  the doorbell, the NIC reads request and payload from GPU memory (``2p`` each), ``N``, writes (``p``),
  a GPU thread polls.
- ``proxy`` (NVSHMEM and NCCL GIN proxy): a GPU thread posts to a host queue (``p``), a proxy thread
  picks it up and posts to the NIC like the host path, the receiving GPU polls.

Where GPU threads share one send queue or proxy channel (NVSHMEM), each put first reserves a slot
with an atomic and orders it with a system-scope fence (``queue_lock``).

A **coordination** (signal a peer and wait for its answer) is a round trip of 8-byte puts, plus, where
a kernel boundary is needed on each side (host-driven, stream-triggered), ending and relaunching the
kernel. The **message rate** is one over the slowest serial step per message: the host call, the
proxy thread, the stream front end, or the NIC.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike

from commodel.errors import CommodelError, unknown
from commodel.hardware import default_db
from commodel.hardware.cluster import Cluster

SCHEMES = ("host-driven", "stream-triggered", "kernel-triggered", "kernel-initiated", "proxy")

#: The taxonomy: who calls, who builds the message, who triggers it, who moves the data.
TAXONOMY = {
    "host-driven": ("host", "host", "host", "NIC"),
    "stream-triggered": ("host (ahead)", "host", "GPU stream", "NIC"),
    "kernel-triggered": ("host (ahead)", "host", "GPU thread", "NIC"),
    "kernel-initiated": ("GPU thread", "GPU thread", "GPU thread", "NIC"),
    "proxy": ("GPU thread", "host proxy", "host proxy", "NIC"),
}

#: Which NIC capability a scheme needs (the others work on any RDMA NIC).
NEEDS = {"kernel-triggered": "triggered_ops", "kernel-initiated": "device_initiated"}


@dataclass(frozen=True)
class Path:
    """The parameters of one node-to-node path (seconds, bytes/s)."""

    launch: float
    host_sync: float
    host_call: float
    proxy_poll: float
    stream_memop: float
    device_poll: float
    wqe_build: float
    doorbell: float
    progress: float
    reclaim: float
    trigger_store: float
    queue_lock: float
    pcie: float
    nic: float
    nic_rate: float
    hops: float
    hop: float
    bandwidth: float
    triggered_ops: bool
    device_initiated: bool
    scope: str = "network"


#: Where a message goes: to another node through the NICs, or to a GPU of the same node over the
#: scale-up fabric (NVLink, xGMI), where a GPU thread stores into the peer's memory itself.
SCOPES = ("network", "node")


def path_of(c: Cluster, scope: str = "network") -> Path:
    """The path between two GPUs of cluster ``c``: across nodes (its scale-out NIC, its GPU's host
    link), or inside a node, where the scale-up fabric is both network and NIC: one hop at its latency,
    no PCIe, GPU threads storing directly (load/store; no work request, no doorbell), the host path
    a copy the host starts at a kernel boundary, no host-staged triggers."""
    if scope not in SCOPES:
        raise unknown("message scope", scope, SCOPES)
    if scope == "node":
        if c.domain_gpus < 2:
            raise CommodelError(f"{c.name} has one GPU per node: --scope node needs two GPUs that share one")
        host = c.system.initiation
        up = c.scale_up
        return Path(
            launch=c.gpu.launch_overhead.value, host_sync=host.host_sync.value, host_call=host.host_call.value,
            proxy_poll=host.proxy_poll.value, stream_memop=host.stream_memop.value,
            device_poll=host.device_poll.value, wqe_build=0.0, doorbell=0.0, progress=host.progress.value,
            reclaim=host.reclaim.value, trigger_store=host.trigger_store.value, queue_lock=host.queue_lock.value,
            pcie=0.0, nic=0.0,
            nic_rate=np.inf, hops=1.0, hop=up.latency.value,
            bandwidth=up.bandwidth.value * up.efficiency.value * c.system.scale_up.links_per_gpu.value,
            triggered_ops=False, device_initiated=True, scope="node",
        )  # fmt: skip
    nic = c.scale_out.initiation
    if nic is None:
        raise CommodelError(
            f"{c.scale_out.description} has no NIC initiation parameters in the hardware database"
        )
    host = c.system.initiation
    return Path(
        launch=c.gpu.launch_overhead.value,
        host_sync=host.host_sync.value,
        host_call=host.host_call.value,
        proxy_poll=host.proxy_poll.value,
        stream_memop=host.stream_memop.value,
        device_poll=host.device_poll.value,
        wqe_build=host.wqe_build.value,
        doorbell=host.doorbell.value,
        progress=host.progress.value,
        reclaim=host.reclaim.value,
        trigger_store=host.trigger_store.value,
        queue_lock=host.queue_lock.value,
        pcie=default_db().link(c.gpu.host_link).latency.value,
        nic=nic.processing.value,
        nic_rate=nic.message_rate.value if nic.message_rate else 1 / nic.processing.value,
        hops=nic.hops.value,
        hop=c.scale_out.latency.value,
        bandwidth=c.scale_out.bandwidth.value * c.scale_out.efficiency.value,
        triggered_ops=nic.triggered_ops,
        device_initiated=nic.device_initiated,
    )


def check_scheme(scheme: str, path: Path) -> None:
    """An unknown scheme, or one the fabric's NIC cannot run, is an error naming what is missing."""
    if scheme not in SCHEMES:
        raise unknown("initiation scheme", scheme, SCHEMES)
    need = NEEDS.get(scheme)
    if need and not getattr(path, need):
        what = (
            "host-staged triggered operations" if need == "triggered_ops" else "GPU-initiated work requests"
        )
        raise CommodelError(f"{scheme} needs a NIC with {what}; this fabric's NIC has none")


def available(scheme: str, path: Path) -> bool:
    need = NEEDS.get(scheme)
    return need is None or bool(getattr(path, need))


def put_latency(
    scheme: str, path: Path, size: ArrayLike = 8, after_kernel: bool = True, shared_queue: bool = False
) -> np.ndarray:
    """Seconds from the sender's decision to ``size`` bytes visible to the receiver (module docstring).
    ``after_kernel=False``: a host program's own put, with no kernel end to wait for (host-driven).
    ``shared_queue``: GPU threads share one send queue or proxy channel (NVSHMEM), so each put first
    reserves a slot and orders it (``queue_lock``)."""
    check_scheme(scheme, path)
    n = np.asarray(size, dtype=float)
    p = path.pcie
    network = 2 * path.nic + path.hops * path.hop + n / path.bandwidth
    land = network + p  # the receiving NIC writes the payload into GPU memory
    lock = path.queue_lock if shared_queue else 0.0
    if scheme == "host-driven":
        wake = path.host_sync if after_kernel else 0.0
        return wake + path.host_call + p + 2 * p + 2 * p + land + path.progress
    if scheme == "stream-triggered":
        return path.stream_memop + 2 * p + land + path.stream_memop
    if scheme == "kernel-triggered":
        return path.trigger_store + path.doorbell + 2 * p + land + path.device_poll
    if scheme == "kernel-initiated":
        return lock + path.wqe_build + path.doorbell + 2 * p + 2 * p + land + path.device_poll
    return lock + p + path.proxy_poll + path.host_call + p + 2 * p + 2 * p + land + path.device_poll


def handoff(scheme: str, path: Path) -> float:
    """Seconds the initiator spends handing one operation to the NIC, the wire excluded (GICC's
    "coordination"): host-driven, the host sees the kernel end, calls the library, runs its progress
    engine, reclaims the NIC resources of what completed and relaunches the kernel; kernel-triggered,
    a GPU thread's store into a trigger the host pre-staged (the host reclaims off the critical path);
    stream-triggered, a stream memory operation; kernel-initiated, building the work request and
    ringing the doorbell; proxy, a queue post the proxy thread picks up and posts."""
    check_scheme(scheme, path)
    return {
        "host-driven": path.host_sync + path.host_call + path.progress + path.reclaim + path.launch,
        "stream-triggered": path.stream_memop,
        "kernel-triggered": path.trigger_store,
        "kernel-initiated": path.wqe_build + path.doorbell,
        "proxy": path.pcie + path.proxy_poll + path.host_call,
    }[scheme]


def coordination_latency(scheme: str, path: Path) -> np.ndarray:
    """Seconds to signal a peer and see its answer: two 8-byte puts, plus a kernel end and relaunch on
    each side where the scheme works at kernel boundaries."""
    boundary = 2 * path.launch if scheme in ("host-driven", "stream-triggered") else 0.0
    return 2 * put_latency(scheme, path, 8) + boundary


def message_rate(scheme: str, path: Path, issuers: int = 1, shared_queue: bool = False) -> float:
    """Messages per second ``issuers`` sustain (host threads, GPU warps or proxy threads, each one
    message per serial step of its own, a shared queue's lock included), at most the NIC's rate."""
    check_scheme(scheme, path)
    serial = {
        "host-driven": path.host_call,
        "stream-triggered": path.stream_memop,
        "kernel-triggered": path.doorbell,
        "kernel-initiated": path.wqe_build or path.device_poll,  # load/store: a store and its flag
        "proxy": path.proxy_poll + path.host_call,
    }[scheme] + (path.queue_lock if shared_queue and scheme in ("kernel-initiated", "proxy") else 0.0)
    return min(issuers / serial, path.nic_rate)


def nccl_net_p2p(path: Path) -> tuple[float, float]:
    """(one-way latency, proxy seconds per operation) of NCCL's point-to-point path across nodes, its
    net transport: the GPU fills a buffer and bumps a counter the rank's proxy thread polls, the proxy
    posts the work request, the NIC moves the payload (a ``proxy`` put, :func:`put_latency`), and on the
    far side that rank's proxy polls the completion and stores the counter the receiving GPU polls, one
    more ``proxy_poll + p`` (src/transport/net.cc). One proxy thread serves every connection of its
    rank, a send and a receive per peer each taking its serial step ``proxy_poll + host_call``."""
    latency = float(put_latency("proxy", path, 0)) + path.proxy_poll + path.pcie
    return latency, path.proxy_poll + path.host_call


#: "Competitive": within this share of the faster scheme's latency.
COMPETITIVE = 0.05

#: A scheme "wins" a workload when its coordinations save this share of the wall time.
WORTHWHILE = 0.10


def host_competitive_above(scheme: str, path: Path) -> float:
    """Message size (bytes) above which the host-driven put is within :data:`COMPETITIVE` of
    ``scheme``'s: the fixed gap ``D`` stays while the payload grows, so ``n >= (D / w - t(0)) B``."""
    gap = float(put_latency("host-driven", path, 0) - put_latency(scheme, path, 0))
    if gap <= 0:
        return 0.0
    return max(gap / COMPETITIVE - float(put_latency(scheme, path, 0)), 0.0) * path.bandwidth


def wins_above(scheme: str, path: Path) -> float:
    """Coordinations per second above which ``scheme`` saves :data:`WORTHWHILE` of the wall time over
    host-driven coordination (infinite when it saves nothing)."""
    gap = float(coordination_latency("host-driven", path) - coordination_latency(scheme, path))
    return WORTHWHILE / gap if gap > 0 else float("inf")


def _finite(value: float) -> float | None:
    """A number for JSON: ``None`` where it is infinite (a scheme that never wins)."""
    return value if np.isfinite(value) else None


def scheme_table(path: Path, sizes: ArrayLike) -> list[dict[str, object]]:
    """The taxonomy with this path's numbers: one record per scheme the NIC can run."""
    records = []
    for scheme in SCHEMES:
        if not available(scheme, path):
            continue
        calls, builds, triggers, moves = TAXONOMY[scheme]
        if path.scope == "node":
            moves = "GPU stores" if scheme == "kernel-initiated" else "copy engine"
        records.append(
            {
                "scheme": scheme, "calls": calls, "builds": builds, "triggers": triggers, "moves": moves,
                "put_us": {int(n): float(put_latency(scheme, path, n)) * 1e6 for n in np.atleast_1d(sizes)},
                "coordination_us": float(coordination_latency(scheme, path)) * 1e6,
                "messages_per_s": message_rate(scheme, path),
                "host_competitive_above_bytes": host_competitive_above(scheme, path),
                "wins_above_per_s": _finite(wins_above(scheme, path)),
            }
        )  # fmt: skip
    return records
