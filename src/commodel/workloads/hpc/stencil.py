"""A stencil with halo exchange (GICC's benchmarks, Shan et al., arXiv:2604.22126): per iteration,
each GPU updates its subdomain of ``n`` cells per side and swaps one face with each neighbour.

- **The kernel** (:class:`Stencil`): 2-D (a 5-point Jacobi) or 3-D (a 7-point stencil, or an
  8th-order finite-difference wave kernel such as Minimod's, whose faces are 4 cells deep); the bytes
  of a cell and the arrays a sweep reads and writes.
- **Decomposition**: ``P`` GPUs as the most square or cubic grid; a GPU has, per dimension,
  ``min(p_d - 1, 2)`` neighbours (the busiest GPU sets the pace). A node's GPUs form a compact block,
  so per dimension at most one face stays inside the node and the rest cross its NICs, which all its
  GPUs share.
- **Compute**: a memory-bound sweep (the roofline of an elementwise kernel over the subdomain).
- **Host-driven** (GPU-aware MPI at kernel boundaries): kernel, host wake-up, one library call per
  face, the faces in flight together (each the host-driven put of its size, the node's NIC bandwidth
  shared), the completions, the next kernel launch; nothing overlaps.
- **Kernel-triggered** (GICC): one persistent kernel sweeps the boundary shell first, triggers the
  puts the host pre-staged as soon as those cells are done, sweeps the interior while the faces are
  in flight, and polls for the neighbours' faces: no kernel boundary, no host on the critical path,
  no call per face, and the exchange beside the interior sweep (the paper's abstract), the two
  slowing each other through HBM (:mod:`commodel.overlap.interference`):
  ``shell + corun_end(interior, exchange) + poll``.

Weak scaling: parallel efficiency ``E(P) = t(1) / t(P)`` with ``t(1)`` the sweep alone; strong scaling
divides a fixed ``N^d`` domain: ``E(P) = t(1, N) / (P t(P, N / P^(1/d)))``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from commodel.comm.initiation import Path, check_scheme, path_of, put_latency
from commodel.compute.kernels import DTYPE_BYTES, elementwise
from commodel.compute.roofline import kernel_time
from commodel.errors import CommodelError, unknown
from commodel.hardware.cluster import Cluster, check_held
from commodel.overlap.interference import collective_load, corun_end, memory_of, slowdowns

SCHEMES = ("host-driven", "kernel-triggered")


@dataclass(frozen=True)
class Stencil:
    """A stencil kernel: ``dims`` (2 or 3), faces ``halo`` cells deep, cells of ``dtype``, and per
    cell the arrays a sweep ``reads`` and ``writes`` and the ``flops`` it does."""

    dims: int = 3
    halo: int = 1
    dtype: str = "fp64"
    reads: int = 1
    writes: int = 1
    flops: float = 8.0

    @property
    def cell_bytes(self) -> float:
        return DTYPE_BYTES[self.dtype]


#: GICC's 3-D stencil proxy in its simplest form: 7 points, doubles, one-cell halo.
SEVEN_POINT = Stencil()


def process_grid(gpus: int, dims: int = 3) -> tuple[int, ...]:
    """The most square (``dims`` = 2) or cubic (3) factorization of ``gpus``, largest first."""
    if dims == 2:
        side = max(d for d in range(1, int(gpus**0.5) + 1) if gpus % d == 0)
        return (gpus // side, side)
    best = (gpus, 1, 1)
    for pz in range(1, round(gpus ** (1 / 3)) + 2):
        if gpus % pz:
            continue
        rest = gpus // pz
        for py in range(pz, int(rest**0.5) + 1):
            if rest % py == 0 and rest // py >= py:
                best = min(best, (rest // py, py, pz), key=lambda g: max(g) - min(g))
    return best


def faces(gpus: int, per_node: int, dims: int = 3) -> tuple[int, int]:
    """(intra-node, inter-node) neighbour faces of the busiest GPU."""
    grid = process_grid(gpus, dims)
    total = sum(min(p - 1, 2) for p in grid)
    inside = sum(1 for p in grid if p > 1) if per_node > 1 and gpus > 1 else 0
    inside = min(inside, total, int(np.log2(per_node)) if per_node > 1 else 0)
    return inside, total - inside


def sweep_s(c: Cluster, cells: float, kernel: Stencil = SEVEN_POINT) -> float:
    """Seconds one sweep over ``cells`` takes: the roofline of its reads, writes and FLOPs."""
    work = elementwise(
        cells, kernel.dtype, reads=kernel.reads, writes=kernel.writes, flops_per_element=kernel.flops
    )
    return float(kernel_time(c.gpu, work, launch=False).time_s)


def iteration_time(
    scheme: str, c: Cluster, n: int, gpus: int, kernel: Stencil = SEVEN_POINT
) -> dict[str, float]:
    """Seconds per iteration (``time_s``) on ``gpus`` GPUs of cluster ``c`` with a subdomain of ``n``
    cells per side each, its ``compute_s`` and the communication time it spends (``comm_s``: what
    is not compute); a subdomain whose arrays the GPU cannot hold, or too thin for its halo, is an
    error."""
    if scheme not in SCHEMES:
        raise unknown("halo-exchange scheme", scheme, SCHEMES)
    if kernel.halo < 1 or 2 * kernel.halo >= n:
        raise CommodelError(
            f"a halo of {kernel.halo} cells does not fit a subdomain of {n} cells per side (it needs 2 x halo < n)"
        )
    arrays = kernel.reads + kernel.writes
    held = arrays * float(n) ** kernel.dims * kernel.cell_bytes
    check_held(c.gpu, held, f"the {arrays} arrays of a subdomain of {n} cells per side")
    path: Path = path_of(c)
    check_scheme(scheme, path)
    per_node = min(c.gpus_per_node, gpus)
    inside, outside = faces(gpus, per_node, kernel.dims)
    face = kernel.halo * float(n) ** (kernel.dims - 1) * kernel.cell_bytes
    compute = sweep_s(c, float(n) ** kernel.dims, kernel)
    if inside + outside == 0:
        return {
            "time_s": alone_s(scheme, c, float(n) ** kernel.dims, kernel),
            "compute_s": compute,
            "comm_s": 0.0,
        }
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
    interior = max(n - 2 * kernel.halo, 0) ** kernel.dims
    inner = sweep_s(c, float(interior), kernel)
    moved = 2 * (inside + outside) * face  # each face sent and one received, through HBM
    memory = memory_of(c.gpu)
    loads = (1.0, collective_load(moved / exchange, memory), memory)  # a sweep streams HBM
    time = (compute - inner) + float(corun_end(inner, exchange, 0.0, *slowdowns(*loads))) + path.device_poll
    return {"time_s": time, "compute_s": compute, "comm_s": time - compute}


def alone_s(scheme: str, c: Cluster, cells: float, kernel: Stencil = SEVEN_POINT) -> float:
    """One GPU's iteration over ``cells`` under ``scheme``: a sweep and, host-driven, the launch of the
    next (a kernel-triggered run is one persistent kernel)."""
    launch = c.gpu.launch_overhead.value if scheme == "host-driven" else 0.0
    return sweep_s(c, cells, kernel) + launch


def weak_efficiency(scheme: str, c: Cluster, n: int, gpus: int, kernel: Stencil = SEVEN_POINT) -> float:
    """Weak-scaling parallel efficiency at ``gpus`` GPUs: one GPU's iteration over this one's."""
    alone = alone_s(scheme, c, float(n) ** kernel.dims, kernel)
    return alone / iteration_time(scheme, c, n, gpus, kernel)["time_s"]


def strong_efficiency(
    scheme: str, c: Cluster, domain: int, gpus: int, kernel: Stencil = SEVEN_POINT
) -> float:
    """Strong-scaling parallel efficiency at ``gpus`` GPUs on a fixed grid of ``domain`` cells per side,
    each GPU taking ``domain / gpus^(1/d)`` per side: one GPU's iteration over ``gpus`` times this one's."""
    alone = alone_s(scheme, c, float(domain) ** kernel.dims, kernel)
    n = max(round(domain / gpus ** (1 / kernel.dims)), 2 * kernel.halo + 1)
    return alone / (gpus * iteration_time(scheme, c, n, gpus, kernel)["time_s"])
