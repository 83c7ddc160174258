"""Point-to-point transfers between GPUs of different vendors: a pipeline boundary between an AMD and
an NVIDIA node, where neither NCCL nor RCCL reaches the other side. The two paths Hu et al. compare
(joint training on AMD and NVIDIA GPUs, arXiv 2602.18007):

- ``cpu-forwarding``: device to pinned host memory over the sender's PCIe link, NIC to NIC by a host
  backend (no vendor library spans both GPUs: Gloo's TCP streams, one per NIC, each at most
  :data:`HOST_STREAM_BPS`, measured), host to device over the receiver's; chunk-pipelined (chunk
  ``i`` crosses the network while ``i + 1`` is copied out), each transfer striped over all the
  node's NICs;
- ``device-direct``: each NIC reads and writes GPU memory itself (GPUDirect RDMA, PCIe peer to peer)
  and a CPU thread only posts the operations (CPU-offloaded P2P): no staging, one NIC per transfer;
- ``gloo``: Gloo for all communication (the paper's first arm): the boundary as ``cpu-forwarding``,
  and each vendor's data-parallel gradient reduction on the host too (:func:`host_allreduce_time`).

With ``pairs`` transfers leaving a node at once over its ``nics`` NICs, a transfer's network share is
``nics x B_nic / pairs`` (device-direct: at most one NIC, ``B_nic``; CPU-forwarding: at most
``nics x HOST_STREAM_BPS``). For ``n`` bytes:

- device-direct: ``t = L_net + POST_S + n / min(share, B_pcie_send, B_pcie_recv)``;
- cpu-forwarding, ``k = n / c`` chunks of ``c = min(n, CHUNK_BYTES)`` through the stage rates
  ``r = (B_pcie_send, share, B_pcie_recv)``: ``t = L_net + POST_S + sum_i c / r_i + (k - 1)
  (max_i c / r_i + SYNC_S)``: the pipeline's fill, then one chunk per slowest stage plus the host's
  hand-off between stages.

PCIe rates are the GPUs' host links (``host_link`` records, with their measured efficiency); the NIC
rate is the slower scale-out fabric of the two nodes.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike

from commodel.errors import unknown
from commodel.hardware.cluster import Cluster

TRANSPORTS = ("device-direct", "cpu-forwarding", "gloo")

#: Host staging chunk (assumed: the pinned buffers of a pipelined host-forwarding path, as MPI's
#: and Gloo's pipelines use a few MiB).
CHUNK_BYTES = 4 * 2**20

#: Host hand-off per chunk and stage (assumed): the forwarding thread waits for a copy's completion
#: event, then posts the next stage.
SYNC_S = 10e-6

#: What one host-forwarding stream carries: one Gloo pair, whose sends and receives one I/O thread
#: copies through the kernel's socket (measured: 2.6 GB/s one way for 256 MiB on the reference
#: machine's loopback, a raw socket 2.5, ``benchmarks/measure_gloo.py``, docs/benchmarks.md; a
#: server core's copies may reach about twice that).
HOST_STREAM_BPS = 2.6e9

#: A CPU thread posting a transfer's network operations (assumed).
POST_S = 5e-6


def _nic_Bps(c: Cluster) -> float:
    return c.scale_out.bandwidth.value * c.scale_out.efficiency.value


def cross_vendor_time(
    transport: str, size: ArrayLike, send: Cluster, recv: Cluster, pairs: ArrayLike, nics: ArrayLike
) -> np.ndarray:
    """Seconds to move ``size`` bytes from a GPU of ``send`` to one of ``recv`` (module docstring)."""
    if transport not in TRANSPORTS:
        raise unknown("cross-vendor transport", transport, TRANSPORTS)
    n = np.asarray(size, dtype=float)
    nic = min(_nic_Bps(send), _nic_Bps(recv))
    share = np.asarray(nics, dtype=float) * nic / np.asarray(pairs, dtype=float)
    latency = max(send.scale_out.latency.value, recv.scale_out.latency.value) + POST_S
    out_rate, in_rate = send.host_link_Bps, recv.host_link_Bps
    if transport == "device-direct":
        return latency + n / np.minimum(np.minimum(share, nic), min(out_rate, in_rate))
    network = np.minimum(share, np.asarray(nics, dtype=float) * HOST_STREAM_BPS)  # cpu-forwarding, gloo
    chunk = np.minimum(n, CHUNK_BYTES)
    stages = [chunk / out_rate, chunk / network, chunk / in_rate]
    slowest = np.maximum(np.maximum(stages[0], stages[1]), stages[2])
    return latency + sum(stages) + (n / chunk - 1) * (slowest + SYNC_S)


def host_ring_s(size: ArrayLike, ranks: int, stream_Bps: float) -> np.ndarray:
    """Seconds Gloo's ring allreduce of ``size`` bytes of host memory takes over ``ranks`` processes:
    ``2 (p - 1)`` steps, in each of which a process sends ``n / p`` bytes to the next and receives as
    many from the one before through its one I/O thread, so both share its stream:
    ``2 (p - 1) (2 n / (p B_stream) + SYNC_S)`` (the host's sums, at its memory rate, left out). For
    two ranks of one pair at 2.6 GB/s this gives 1.3 GB/s of algorithm bandwidth; the same machine
    measures 1.5 (``benchmarks/measure_gloo.py``)."""
    n = np.asarray(size, dtype=float)
    if ranks <= 1:
        return np.zeros_like(n)
    return 2 * (ranks - 1) * (2 * n / (ranks * stream_Bps) + SYNC_S)


def host_allreduce_time(size: ArrayLike, ranks: int, c: Cluster) -> np.ndarray:
    """Seconds Gloo takes to allreduce ``size`` bytes of GPU memory over ``ranks`` GPUs of ``c``, as
    PyTorch's ``ProcessGroupGloo`` runs a CUDA tensor: copied to pinned host memory, reduced by Gloo's
    ring between the ranks' processes (:func:`host_ring_s`), copied back, one after the other:
    ``t = 2 n / B_pcie + ring``, with one stream per process at ``B_stream = min(HOST_STREAM_BPS,
    nics x B_nic / g)`` when the ranks span nodes of ``g`` GPUs (loopback inside one node:
    :data:`HOST_STREAM_BPS`). A sharded optimizer's reduce-scatter and parameter gather move the same
    bytes as this allreduce."""
    n = np.asarray(size, dtype=float)
    if ranks <= 1:
        return np.zeros_like(n)
    stream = HOST_STREAM_BPS
    if ranks > c.gpus_per_node:
        stream = min(stream, c.system.scale_out.nics_per_node.value * _nic_Bps(c) / c.gpus_per_node)
    return 2 * n / c.host_link_Bps + host_ring_s(n, ranks, stream)
