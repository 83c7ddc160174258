"""Two kernels sharing one GPU's memory system: how much each slows the other.

Compute and a collective that run together share the GPU's HBM. Each side alone loads it with
``u`` of its achievable bandwidth ``B`` (its HBM bytes per second over ``B``): a compute window
its kernels' roofline memory terms over its time, a collective ``hbm_per_wire_byte`` times the
bytes per second it sends and receives. The maintainers of NCCL name this the cause of the slowdowns
they are shown, not SMs: "300GB/s needs to be multiplied by at least 2x for memory bandwidth ... it
can be 3x" (NVIDIA/nccl#1428), and a GEMM that leaves 14 SMs free still slows send/recv up to 2x
(NVIDIA/nccl#1433).

Memory latency rises with the load on the memory controllers, as a queue's wait does
(``L = L0 / (1 - rho)``, M/M/1), and above a full load each side gets its share of the bandwidth.
A side spends ``s`` of its time alone waiting on memory; with the other side's load added, that
part stretches by the latency's rise or the bandwidth lost, whichever is larger::

    stretch = (1 - s) + s max((1 - u_own r) / (1 - min(u_own + u_other, R)), u_own + u_other)

with the load capped at the GPU record's ``load_ceiling`` ``R`` (the controllers' queues are finite),
``r = min(1, R / (u_own + u_other))``: where the two together reach the ceiling, each side's own load
counts at its share of it, the rise the same pair feels on an HBM just fast enough for their sum to
reach the ceiling. It is the least rise that never falls as the HBM slows (both loads scaled up
alike); capping the own load alone made it fall (with the sum at the ceiling, a side's latency
alone rose with its load), and a step ran 5% slower on an H100 given H200's bandwidth. Without the
other side, ``r u_own`` is the own load capped at ``R``. A compute
window waits on memory as much as it loads it (``s = u``): compute-bound kernels feel the collective
in proportion to the bytes they move, memory-bound kernels fully. A collective's CTAs are load and
store loops of few requests in flight each, paced by latency (``s = 1``; NCCL gives a channel one
CTA, "limited by the bandwidth one SM can achieve", NVIDIA/nccl#689): it feels all of the compute's
load. So do copy-engine collectives: kraken's copy-engine rows (``krk19-*-copy-engine``) price
within 7% this way and 13% fast if the engines felt only a lack of bandwidth.

Together, compute runs ``f_c`` and the collective ``f_m`` times slower while both run; the pair ends
at (:func:`corun_end`, the collective starting ``d`` after the compute)::

    T = d + M f_m + (C - d - M f_m / f_c)      if (C - d) f_c >= M f_m   (compute ends last)
    T = d + (C - d) f_c + (M - (C - d) f_c / f_m)   otherwise

never below ``max(C, M)``; above ``C + M`` (serial) where the two slow each other enough.

The compute's clock-bound part (``1 - s`` of it) also runs at a lower clock beside the collective: it
ran at the board's power limit, and the collective's HBM traffic draws power of its own
(:func:`commodel.compute.power.shared_clock`: ``c = (1 - p u_other) ** (1 / a)``), so the compute's
stretch is ``(1 - s) / c + s max(...)``. Lee et al. (arXiv:2507.03114) measure the compute slowing
beside communication and its power rising.

Not captured: L2 (a collective's traffic evicting a GEMM's operands) and the warp scheduler's issue
slots within one SM (NCCL's CTAs never share an SM with compute: NVIDIA/nccl#689).
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
from numpy.typing import ArrayLike

from commodel.compute.power import hbm_power_share, shared_clock
from commodel.compute.roofline import achievable_bandwidth
from commodel.hardware.schema import GPU


class Memory(NamedTuple):
    """A GPU's HBM as two co-running kernels share it: its achievable bandwidth (bytes/s), the
    share of the board's dynamic power it draws at that bandwidth
    (:func:`commodel.compute.power.hbm_power_share`; 0: no power limit binds), the HBM bytes a
    collective moves per byte it sends or receives, and the load beyond which memory latency stops
    rising (the GPU record's :class:`~commodel.hardware.schema.MemoryContention`)."""

    Bps: float
    power: float
    per_wire_byte: float
    ceiling: float


def memory_of(gpu: GPU) -> Memory:
    """``gpu``'s :class:`Memory`."""
    hbm, contention = achievable_bandwidth(gpu), gpu.memory_contention
    return Memory(
        hbm, hbm_power_share(gpu, hbm), contention.hbm_per_wire_byte.value, contention.load_ceiling.value
    )


def hbm_load(bytes_per_s: ArrayLike, hbm_Bps: ArrayLike) -> np.ndarray:
    """Share of the achievable HBM bandwidth a side uses alone (may exceed 1 only in a sum)."""
    return np.asarray(bytes_per_s, dtype=float) / np.asarray(hbm_Bps, dtype=float)


def collective_load(wire_Bps: ArrayLike, memory: Memory) -> np.ndarray:
    """HBM load of a collective sending and receiving ``wire_Bps`` bytes/s per GPU."""
    return hbm_load(memory.per_wire_byte * np.asarray(wire_Bps, dtype=float), memory.Bps)


def busbw_load(busbw_Bps: ArrayLike, memory: Memory, in_network: ArrayLike = False) -> np.ndarray:
    """HBM load of a collective running at bus bandwidth ``busbw_Bps``: a ring's GPU sends and
    receives twice its busbw each second, an in-switch (NVLS) one moves it once."""
    wire = np.where(in_network, 1.0, 2.0) * np.asarray(busbw_Bps, dtype=float)
    return collective_load(wire, memory)


def stretch(
    stall: ArrayLike, own: ArrayLike, other: ArrayLike, ceiling: float, clock: ArrayLike = 1.0
) -> np.ndarray:
    """How many times slower a side runs beside another (module formula): ``stall`` of its time
    alone waits on memory; ``own`` and ``other`` are the two sides' HBM loads alone (each >= 0),
    the latency's rise capped at the load ``ceiling``; the rest of its time runs at ``clock`` of its
    clock alone."""
    s = np.minimum(np.asarray(stall, dtype=float), 1.0)
    u, v = np.asarray(own, dtype=float), np.asarray(other, dtype=float)
    both = u + v
    full = np.minimum(both, ceiling)
    alone = u * np.divide(full, both, out=np.ones_like(both), where=both > 0)
    latency = (1 - alone) / (1 - full)
    return (1 - s) / np.asarray(clock, dtype=float) + s * np.maximum(latency, both)


def slowdowns(compute_load: ArrayLike, comm_load: ArrayLike, memory: Memory) -> tuple[np.ndarray, np.ndarray]:
    """(compute's, collective's) slowdown while both run: compute waits on memory as much as it
    loads it, the collective all the time; the compute's clock-bound part runs at the clock the
    collective's HBM power leaves it (``memory.power``: the share of the board's dynamic power its
    HBM draws at full load, :func:`commodel.compute.power.hbm_power_share`). Module docstring."""
    clock = shared_clock(memory.power, comm_load)
    return (
        stretch(compute_load, compute_load, comm_load, memory.ceiling, clock),
        stretch(1.0, comm_load, compute_load, memory.ceiling),
    )


def corun(
    compute_s: ArrayLike, comm_s: ArrayLike, start_s: ArrayLike, compute_slow: ArrayLike, comm_slow: ArrayLike
) -> tuple[np.ndarray, np.ndarray]:
    """(When the compute ends, when the collective ends): ``compute_s`` of compute and a collective
    of ``comm_s`` started ``start_s`` in, each slowed ``compute_slow`` and ``comm_slow`` times while
    both run (module formula)."""
    C, M, d, fc, fm = (
        np.asarray(v, dtype=float) for v in (compute_s, comm_s, start_s, compute_slow, comm_slow)
    )
    d = np.minimum(d, C)
    rest = C - d
    comm, compute = M * fm, rest * fc  # each side's time were the other to run throughout
    compute_last = compute >= comm
    compute_end = d + np.where(compute_last, comm + rest - comm / fc, compute)
    comm_end = d + np.where(compute_last, comm, compute + M - compute / fm)
    return compute_end, comm_end


def corun_end(
    compute_s: ArrayLike, comm_s: ArrayLike, start_s: ArrayLike, compute_slow: ArrayLike, comm_slow: ArrayLike
) -> np.ndarray:
    """When the later of the two sides of :func:`corun` ends."""
    return np.maximum(*corun(compute_s, comm_s, start_s, compute_slow, comm_slow))
