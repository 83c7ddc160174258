"""Two kernels on two streams: a GEMM already running, and a collective launched beside it.

How soon the collective's CTAs get SMs, and what the GEMM loses meanwhile, depends on the arm:

- ``sequential``: the collective runs after the GEMM, ``T = W + M``.
- ``naive`` (two streams, default residency, equal priority). NVIDIA's block scheduler dispatches a
  later kernel's blocks only once the earlier kernel has dispatched all of its own (the left-over
  policy: Pai et al., ASPLOS 2013; CUDA C++ Programming Guide, streams): a many-wave GEMM's blocks hold
  every SM until its last wave, so the collective starts one block life ``t_blk`` before the GEMM
  ends. AMD's work-group dispatcher serves its hardware queues in turn (assumed from the HSA queue
  model: each HIP stream maps to its own hardware queue), so the collective's work-groups take the
  next slots that free, ``t_blk / b`` in, and displace the GEMM's blocks on the CUs they land on.
- ``shaped`` (Cui & Pericas, arXiv:2606.09200): the GEMM's shared memory is padded so that fewer of
  its blocks reside, leaving room for one collective CTA on every SM, and the collective's stream
  has priority: it starts at once, and the GEMM runs at the capped residency throughout.

With the GEMM's work ``W`` (seconds alone at its arm's residency), the collective's ``M``, its start
``d`` and the GEMM's rate ``rho`` while both run (the SMs the collective's CTAs displace), the two
also slow each other through HBM (:mod:`commodel.overlap.interference`: ``f_c``, ``f_m`` from the
GEMM's load ``u_c`` and the collective's ``u_m``), and the pair ends at
``corun_end(W, M, d, f_c / rho, f_m)``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike

from commodel.overlap.interference import Memory, corun_end, slowdowns

ARMS = ("sequential", "naive", "shaped")

#: How each vendor's hardware dispatches the blocks of kernels from two streams of equal priority.
DISPATCH = {"nvidia": "in-order", "amd": "interleaved"}


@dataclass(frozen=True)
class Beside:
    """A GEMM as a collective beside it finds it: its time alone (``gemm_s``) and one block's life
    (``block_s``) at its default residency ``blocks``; its time at the shaped residency
    (``shaped_s``); its rate while the collective's CTAs displace its blocks (``displaced_rate``,
    a share of its rate alone); and its HBM load alone (``load``, of the achievable bandwidth)."""

    gemm_s: ArrayLike
    block_s: ArrayLike
    blocks: ArrayLike
    shaped_s: ArrayLike
    displaced_rate: ArrayLike
    load: ArrayLike = 0.0


def arm_time(
    arm: str,
    gemm: Beside,
    comm_s: ArrayLike,
    dispatch: str,
    comm_load: ArrayLike,
    memory: Memory,
) -> np.ndarray:
    """Total time of the GEMM and the collective (of HBM load ``comm_load``) under ``arm`` with the
    vendor's ``dispatch``, on a GPU whose HBM is ``memory``."""
    if arm == "sequential":
        return np.asarray(gemm.gemm_s, dtype=float) + comm_s
    fc, fm = slowdowns(gemm.load, comm_load, memory)
    if arm == "shaped":
        return corun_end(gemm.shaped_s, comm_s, 0.0, fc, fm)
    if dispatch == "in-order":
        start = np.maximum(np.asarray(gemm.gemm_s) - gemm.block_s, 0.0)
        return corun_end(gemm.gemm_s, comm_s, start, fc, fm)
    start = np.asarray(gemm.block_s) / np.asarray(gemm.blocks)
    return corun_end(gemm.gemm_s, comm_s, start, fc / np.asarray(gemm.displaced_rate), fm)
