"""A 3-D 7-point stencil with halo exchange (the GICC stencil proxy, Shan et al., arXiv:2604.22126):
per iteration, each GPU updates its ``n^3`` subdomain of doubles and swaps one face with each neighbour.

- **Decomposition**: ``P`` GPUs as the most cubic ``px x py x pz`` grid; a GPU has, per dimension,
  ``min(p_d - 1, 2)`` neighbours (the busiest GPU sets the pace). A node's GPUs form a compact block
  (2 x 2 x 2 for 8), so per dimension at most one face stays inside the node and the rest cross its
  NICs, which all its GPUs share.
- **Compute**: a memory-bound sweep, read and write ``n^3`` doubles (the roofline of an elementwise
  kernel, 8 FLOPs per cell).
- **Host-driven** (GPU-aware MPI at kernel boundaries): kernel, host wake-up, one library call per
  face, the faces in flight together (each the host-driven put of its size, the node's NIC bandwidth
  shared), the completions, the next kernel launch; nothing overlaps.
- **Kernel-triggered** (GICC): one persistent kernel sweeps, triggers the puts the host pre-staged and
  polls for the neighbours' faces: the same sequence without the kernel boundary, the host on the
  critical path or a call per face (``sweep + exchange + poll``; GICC removes the host, it does not
  claim to overlap).

Weak scaling: parallel efficiency ``E(P) = t(1) / t(P)`` with ``t(1)`` the sweep alone; strong scaling
divides a fixed ``N^3`` domain: ``E(P) = t(1, N) / (P t(P, N / P^(1/3)))``.
"""

from __future__ import annotations

import numpy as np

from commodel.comm.initiation import Path, check_scheme, path_of, put_latency
from commodel.compute.kernels import elementwise
from commodel.compute.roofline import kernel_time
from commodel.errors import CommodelError, unknown
from commodel.hardware.cluster import Cluster

SCHEMES = ("host-driven", "kernel-triggered")
CELL_BYTES = 8.0


def process_grid(gpus: int) -> tuple[int, int, int]:
    """The most cubic factorization ``px >= py >= pz`` of ``gpus``."""
    best = (gpus, 1, 1)
    for pz in range(1, round(gpus ** (1 / 3)) + 2):
        if gpus % pz:
            continue
        rest = gpus // pz
        for py in range(pz, int(rest**0.5) + 1):
            if rest % py == 0 and rest // py >= py:
                best = min(best, (rest // py, py, pz), key=lambda g: max(g) - min(g))
    return best


def faces(gpus: int, per_node: int) -> tuple[int, int]:
    """(intra-node, inter-node) neighbour faces of the busiest GPU."""
    grid = process_grid(gpus)
    total = sum(min(p - 1, 2) for p in grid)
    inside = sum(1 for p in grid if p > 1) if per_node > 1 and gpus > 1 else 0
    inside = min(inside, total, int(np.log2(per_node)) if per_node > 1 else 0)
    return inside, total - inside


def _sweep_s(c: Cluster, cells: float) -> float:
    kernel = elementwise(cells, "fp64", reads=1, writes=1, flops_per_element=8)
    return float(kernel_time(c.gpu, kernel, launch=False).time_s)


def iteration_time(scheme: str, c: Cluster, n: int, gpus: int, halo: int = 1) -> dict[str, float]:
    """Seconds per iteration (``time_s``) on ``gpus`` GPUs of cluster ``c`` with an ``n^3`` subdomain
    each and faces ``halo`` cells deep, its ``compute_s`` and the communication time it spends
    (``comm_s``: what is not compute)."""
    if scheme not in SCHEMES:
        raise unknown("halo-exchange scheme", scheme, SCHEMES)
    if halo < 1 or 2 * halo >= n:
        raise CommodelError(
            f"a halo of {halo} cells does not fit a subdomain of {n} cells per side (it needs 2 x halo < n)"
        )
    path: Path = path_of(c)
    check_scheme(scheme, path)
    per_node = min(c.gpus_per_node, gpus)
    inside, outside = faces(gpus, per_node)
    face = halo * n * n * CELL_BYTES
    compute = _sweep_s(c, float(n) ** 3)
    if inside + outside == 0:
        return {"time_s": compute + c.gpu.launch_overhead.value, "compute_s": compute, "comm_s": 0.0}
    # Inter-node faces of every GPU in the node share its NICs; intra-node ones use the scale-up links.
    share = c.system.scale_out.nics_per_node.value / per_node
    network = path.bandwidth * min(share, 1.0) / max(outside, 1)
    remote = float(put_latency(scheme, path, 0)) + face / network if outside else 0.0
    local_bw = c.scale_up.bandwidth.value * c.scale_up.efficiency.value
    local = float(put_latency(scheme, path, 0)) - (2 * path.nic + path.hops * path.hop) + face / local_bw
    exchange = max(remote, local if inside else 0.0)
    if scheme == "host-driven":
        calls = (inside + outside) * path.host_call
        comm = exchange + calls + c.gpu.launch_overhead.value
        return {"time_s": compute + comm, "compute_s": compute, "comm_s": comm}
    comm = exchange + path.device_poll
    return {"time_s": compute + comm, "compute_s": compute, "comm_s": comm}


def weak_efficiency(scheme: str, c: Cluster, n: int, gpus: int, halo: int = 1) -> float:
    """Weak-scaling parallel efficiency at ``gpus`` GPUs: one GPU's iteration over this one's."""
    alone = _sweep_s(c, float(n) ** 3) + c.gpu.launch_overhead.value
    return alone / iteration_time(scheme, c, n, gpus, halo)["time_s"]


def strong_efficiency(scheme: str, c: Cluster, domain: int, gpus: int, halo: int = 1) -> float:
    """Strong-scaling parallel efficiency at ``gpus`` GPUs on a fixed ``domain^3`` grid, each GPU
    taking a ``domain / gpus^(1/3)`` cube: one GPU's iteration over ``gpus`` times this one's."""
    alone = _sweep_s(c, float(domain) ** 3) + c.gpu.launch_overhead.value
    n = max(round(domain / gpus ** (1 / 3)), 2 * halo + 1)
    return alone / (gpus * iteration_time(scheme, c, n, gpus, halo)["time_s"])
