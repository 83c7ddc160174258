"""Thread blocks on an SM: how many reside at once, and how fast a tiled GEMM runs at a residency.

Residency is the occupancy calculator's (CUDA C++ Programming Guide, "occupancy"): an SM holds as
many blocks of a kernel as its threads, block slots, shared memory and registers allow, after what
other kernels' blocks already hold on it::

    resident = min(blocks, threads / t, shared / s, registers / r)      (each floored, per block)

Padding a block's dynamic shared memory to ``floor(shared / cap)`` caps its residency at ``cap``
without touching the kernel: the lever of occupancy shaping (Cui & Pericas, arXiv:2606.09200).

A tiled GEMM block computes one ``tm x tn`` output tile in ``k / tk`` steps; each step's operands
(``(tm + tn) tk`` elements) are loaded into shared memory ``stages`` steps ahead. A step's math
takes ``t_c = 2 tm tn tk / R`` on an SM of rate ``R`` (the dtype's peak per SM times the GPU's
best-GEMM share); its loads take the memory latency ``L`` to return. By Little's law an SM stays
busy while its resident blocks keep enough steps in flight, so it reaches the share

    u(b) = min(1, b x stages x t_c / (t_c + L))

of ``R`` with ``b`` resident blocks, and the GEMM takes ``ceil(tiles / (S b))`` waves of blocks,
each living ``b (k / tk) t_c / u(b)``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike

from commodel.compute.kernels import DTYPE_BYTES
from commodel.compute.power import clock_share
from commodel.compute.roofline import peak_flops
from commodel.errors import CommodelError
from commodel.hardware.schema import GPU, Multiprocessor


@dataclass(frozen=True)
class Block:
    """What one thread block holds on an SM while it runs."""

    threads: float
    shared_memory: float
    registers_per_thread: float

    @property
    def registers(self) -> float:
        return self.threads * self.registers_per_thread


def multiprocessor(gpu: GPU) -> Multiprocessor:
    """``gpu``'s SM limits, or a clear error where its record does not state them."""
    if gpu.multiprocessor is None:
        raise CommodelError(
            f"{gpu.description}: its record has no [multiprocessor] table (threads, blocks, "
            "shared_memory, registers, memory_latency), so blocks cannot be placed on its SMs"
        )
    return gpu.multiprocessor


def resident_blocks(sm: Multiprocessor, block: Block, beside: Block | None = None) -> int:
    """Blocks of ``block``'s kernel one SM holds, after one block of ``beside`` (another kernel's)
    took its share: the occupancy calculator's minimum over threads, slots, shared memory and
    registers."""
    taken = beside or Block(0, 0, 0)
    limits = (
        (sm.threads.value - taken.threads) / block.threads,
        sm.blocks.value - (beside is not None),
        (sm.shared_memory.value - taken.shared_memory) / max(block.shared_memory, 1.0),
        (sm.registers.value - taken.registers) / block.registers,
    )
    return max(int(np.floor(min(limits))), 0)


def padded(sm: Multiprocessor, block: Block, cap: int) -> Block:
    """``block`` with its dynamic shared memory padded so that at most ``cap`` reside per SM."""
    return Block(
        block.threads, max(block.shared_memory, sm.shared_memory.value // cap), block.registers_per_thread
    )


@dataclass(frozen=True)
class TiledGemm:
    """A GEMM of ``tm x tn x tk`` tiles: its ``tiles`` (blocks), ``steps`` per block, one step's math
    time ``step_s`` on one SM, the ``stages`` of operands in flight, and what one block holds."""

    tiles: float
    steps: float
    step_s: float
    stages: int
    block: Block


def tiled_gemm(
    gpu: GPU,
    m: float,
    n: float,
    k: float,
    tile: tuple[int, int, int],
    dtype: str,
    stages: int,
    threads: int,
    registers_per_thread: int,
) -> TiledGemm:
    """``C[m, n] = A[m, k] B[k, n]`` cut into ``tile = (tm, tn, tk)`` blocks of ``threads`` threads,
    each holding ``stages`` operand tiles in shared memory: ``stages (tm + tn) tk`` elements."""
    tm, tn, tk = tile
    rate = peak_flops(gpu, dtype) * clock_share(gpu) * gpu.efficiency(dtype) / gpu.compute_units.value
    shared = stages * (tm + tn) * tk * DTYPE_BYTES[dtype]
    return TiledGemm(
        tiles=np.ceil(m / tm) * np.ceil(n / tn),
        steps=np.ceil(k / tk),
        step_s=2 * tm * tn * tk / rate,
        stages=stages,
        block=Block(threads, shared, registers_per_thread),
    )


def busy_share(gpu: GPU, gemm: TiledGemm, blocks: ArrayLike) -> np.ndarray:
    """``u(b) = min(1, b stages t_c / (t_c + L))``: the share of its GEMM rate an SM reaches with
    ``blocks`` resident (Little's law over the memory latency ``L``)."""
    latency = multiprocessor(gpu).memory_latency.value
    in_flight = np.asarray(blocks, dtype=float) * gemm.stages * gemm.step_s
    return np.minimum(1.0, in_flight / (gemm.step_s + latency))


def block_time(gpu: GPU, gemm: TiledGemm, blocks: ArrayLike) -> np.ndarray:
    """How long one block lives when ``blocks`` share its SM: ``b steps t_c / u(b)``."""
    b = np.asarray(blocks, dtype=float)
    return b * gemm.steps * gemm.step_s / busy_share(gpu, gemm, b)


def waves(gpu: GPU, gemm: TiledGemm, blocks: ArrayLike) -> np.ndarray:
    """``ceil(tiles / (S b))``: the waves of blocks the GEMM runs in at ``blocks`` per SM."""
    return np.ceil(gemm.tiles / (gpu.compute_units.value * np.asarray(blocks, dtype=float)))


def gemm_time(gpu: GPU, gemm: TiledGemm, blocks: ArrayLike) -> np.ndarray:
    """The GEMM's time at ``blocks`` resident per SM: its :func:`waves` of blocks."""
    return waves(gpu, gemm, blocks) * block_time(gpu, gemm, blocks)
