"""One compute kernel beside one collective on one GPU, under each way of running them together.

A :class:`Pair` holds both sides alone: the kernel's ``C`` on all SMs and ``C_k`` on the ``S - k``
SMs the collective's CTAs leave, its waves, its HBM load ``u_c``; the collective's ``M`` and load
``u_m`` (:mod:`commodel.overlap.interference`, from which the slowdowns ``f_c`` and ``f_m`` come).
Each strategy sets when the collective starts (``d``), what the kernel runs on, and what the pair
adds; the two then run by :func:`~commodel.overlap.interference.corun`:

- ``serial``: the collective after the kernel, ``T = C + M``.
- ``sm-partition`` (concurrent streams, default residency, equal priority): launched after a kernel
  of ``w`` waves, the collective's CTAs wait until its last wave is dispatched (NVIDIA's in-order
  dispatch, :mod:`commodel.overlap.streams`): ``d = C (1 - 1 / w)``, and the kernel keeps its SMs;
  on AMD, whose dispatcher interleaves queues, or launched first, it starts at once and the kernel
  runs on ``S - k`` SMs (``f_c`` times ``C_k / C``).
- ``priority`` (the collective's stream at high priority, its CTAs on SMs of their own): at once,
  the kernel on ``S - k`` SMs (Agrawal et al.'s CU partitioning with priority, arXiv:2412.14335).
- ``occupancy-shaped`` (priority and co-residency, Cui & Pericas): at once, no SMs lost.
- ``copy-engine``: the collective on the DMA engines: at once, no SMs lost, HBM shared.
- ``in-network``: as ``sm-partition``, with the collective as the switch reduces it (the caller
  prices that ``M``, :data:`~commodel.overlap.window.IN_NETWORK_CTAS` CTAs and half the load).
- ``fused`` (one kernel computes and communicates tile by tile, signalling on the GPU: Flux): no
  launch between them, no SMs given up; the chunk of ``1 / p`` of the kernel a peer's data feeds
  (all-gather) or that feeds the first send (reduce-scatter) cannot overlap:
  ``T = max(corun, C / p + f_m M)``.
- ``fused-copy-engine`` (one GEMM kernel, each peer's chunk copied by the copy engines as the kernel
  signals it: kraken's Triton kernel): the ``p - 1`` copies each pay a host-issued step
  :data:`COPY_STEP_S` (the copy's launch and its wait on the kernel's flag) in turn, the last after
  the kernel ends::

      comm end = max(C / p + (p - 1) t_step + f_m M, C f_c + t_step + f_m M / (p - 1))

- ``decomposed`` (PyTorch's async tensor parallelism): the kernel cut into ``p`` kernels of ``c``
  each (a cut GEMM reads its weights ``p`` times), each step's share of the collective beside the
  next on the copy engines, every step paying ``t_step``::

      T = c + (p - 1) max(c f_c, f_m M / p) + f_m M / p + p t_step
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from commodel.overlap.interference import Memory, corun, slowdowns
from commodel.overlap.window import IN_NETWORK_CTAS

PAIR_STRATEGIES = (
    "serial", "sm-partition", "priority", "occupancy-shaped", "copy-engine", "in-network", "fused",
    "fused-copy-engine", "decomposed",
)  # fmt: skip

#: Strategies that cut the collective into a GEMM's output tiles (Flux, async TP): a kernel without
#: tiles (an elementwise pass) cannot run them.
GEMM_ONLY = ("fused", "fused-copy-engine", "decomposed")

#: Strategies whose collective takes no SMs from the kernel: on the copy engines, fused into the
#: kernel, or co-resident with it.
NO_SMS = ("occupancy-shaped", "copy-engine", "fused", "fused-copy-engine", "decomposed")

#: One host-issued step of a copy-engine overlap: launching the step's copy (and, decomposed, its
#: GEMM) and waiting on the flag that says its data is ready. Calibrated on ``krk19-h100-m512`` (8 x
#: H100, async TP of a bf16 512 x 4096 x 14336 GEMM + reduce-scatter: 0.614 ms against 0.134 ms
#: sequential); the M = 1024 and 2048 rows and the Triton copy-engine kernel's three rows are held out
#: (docs/validation.md).
COPY_STEP_S = 28.34e-6


def comm_ctas(strategy: str, channels: float) -> float:
    """SMs the collective takes from the kernel under ``strategy``: none (:data:`NO_SMS`), NVLS's few
    (:data:`~commodel.overlap.window.IN_NETWORK_CTAS`), else one per channel."""
    if strategy in NO_SMS:
        return 0.0
    return float(IN_NETWORK_CTAS if strategy == "in-network" else channels)


@dataclass(frozen=True)
class Pair:
    """A kernel and a collective, each alone (module docstring). ``chunk_s``: one of the
    ``chunks`` kernels a decomposed overlap cuts the kernel into; ``in_order``: the GPU dispatches
    a later kernel's blocks only after an earlier one's (NVIDIA); ``collective_first``: the
    collective is already running when the kernel starts; ``memory``: the GPU's HBM as the two
    share it (:class:`~commodel.overlap.interference.Memory`)."""

    compute_s: float
    partitioned_s: float
    waves: float
    compute_load: float
    comm_s: float
    comm_load: float
    memory: Memory
    chunk_s: float
    chunks: int
    in_order: bool = True
    collective_first: bool = False


class Ends(NamedTuple):
    """When the kernel ends, and when the collective starts and ends (the kernel starts at 0)."""

    compute: float
    comm_start: float
    comm: float

    @property
    def total(self) -> float:
        return max(self.compute, self.comm)


def pair_times(strategy: str, pair: Pair) -> Ends:
    """When each side starts and ends under ``strategy`` (module docstring)."""
    C, M, p = pair.compute_s, pair.comm_s, pair.chunks
    fc, fm = slowdowns(pair.compute_load, pair.comm_load, pair.memory)
    if strategy == "serial":
        return Ends(C, C, C + M)
    if strategy in ("occupancy-shaped", "copy-engine"):
        return _ends(corun(C, M, 0.0, fc, fm), 0.0)
    if strategy in ("sm-partition", "in-network") and pair.in_order and not pair.collective_first:
        start = C * (1 - 1 / pair.waves)
        return _ends(corun(C, M, start, fc, fm), start)
    if strategy in ("sm-partition", "in-network", "priority"):
        return _ends(corun(C, M, 0.0, fc * pair.partitioned_s / C, fm), 0.0)
    step = fm * M / p
    if strategy == "fused":
        compute_end, _, comm_end = _ends(corun(C, M, 0.0, fc, fm), 0.0)
        return Ends(compute_end, 0.0, max(comm_end, C / p + M * fm))
    if strategy == "fused-copy-engine":
        compute_end = C * fc
        chain = C / p + (p - 1) * COPY_STEP_S + fm * M
        return Ends(compute_end, C / p, max(chain, compute_end + COPY_STEP_S + fm * M / (p - 1)))
    if strategy == "decomposed":
        compute_end = pair.chunk_s + (p - 1) * max(pair.chunk_s * fc, step) + p * COPY_STEP_S
        return Ends(compute_end, pair.chunk_s, compute_end + step)
    raise ValueError(strategy)


def _ends(ends: tuple[np.ndarray, np.ndarray], comm_start: float) -> Ends:
    return Ends(float(ends[0]), comm_start, float(ends[1]))
