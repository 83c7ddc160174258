"""One tiled GEMM beside one collective on two streams, block by block: the experiment of Cui &
Pericas (arXiv:2606.09200), priced from the GPU's SM limits, the collective's CTAs and the
dispatch rules of :mod:`commodel.overlap.streams`.

The collective runs one CTA per channel (NCCL: 512 threads plus a 32-thread sync warp for a large
ring Simple call; RCCL: 256), on as many SMs. Where it lands, it takes the room of ``b - b'`` GEMM
blocks, ``b'`` being what resides beside it (:func:`commodel.compute.residency.resident_blocks`);
shaping caps every SM at ``b'`` so that room is there before it is needed.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from commodel.compute.residency import (
    Block,
    TiledGemm,
    block_time,
    busy_share,
    gemm_time,
    multiprocessor,
    resident_blocks,
)
from commodel.compute.roofline import achievable_bandwidth
from commodel.errors import CommodelError
from commodel.hardware.schema import GPU
from commodel.overlap.interference import memory_of
from commodel.overlap.streams import ARMS, DISPATCH, Beside, arm_time

#: Threads of one collective CTA for a large ring Simple call: NCCL 512 + 32 (a sync warp), RCCL 256
#: (nccl-tuning.md, sections 3.6 and 7.4).
COLLECTIVE_THREADS = {"nvidia": 544, "amd": 256}


@dataclass(frozen=True)
class Residency:
    """The GEMM's blocks per SM alone (``alone``) and beside one collective CTA (``beside``)."""

    alone: int
    beside: int


def residency(gpu: GPU, gemm: TiledGemm, cta: Block) -> Residency:
    """Blocks of ``gemm`` per SM of ``gpu`` alone and beside one ``cta``; an error where no GEMM
    block fits beside it (shaping would have to empty the SM)."""
    sm = multiprocessor(gpu)
    alone, beside = resident_blocks(sm, gemm.block), resident_blocks(sm, gemm.block, cta)
    if alone == 0 or beside == 0:
        raise CommodelError(
            f"{gpu.description}: a GEMM block ({gemm.block}) cannot reside "
            + ("at all" if alone == 0 else f"beside a collective CTA ({cta})")
        )
    return Residency(alone, min(alone, beside))


def beside(gpu: GPU, gemm: TiledGemm, cta: Block, ctas: int, hbm_bytes: float = 0.0) -> Beside:
    """The GEMM as a collective of ``ctas`` CTAs finds it: alone, shaped, displaced on the SMs its
    CTAs land on (``1 - (k / S)(1 - u(b') / u(b))`` of its rate), and loading HBM with ``hbm_bytes``
    over its time alone."""
    r = residency(gpu, gemm, cta)
    sms = gpu.compute_units.value
    kept = busy_share(gpu, gemm, r.beside) / busy_share(gpu, gemm, r.alone)
    alone = gemm_time(gpu, gemm, r.alone)
    return Beside(
        gemm_s=alone,
        block_s=block_time(gpu, gemm, r.alone),
        blocks=r.alone,
        shaped_s=gemm_time(gpu, gemm, r.beside),
        displaced_rate=1 - min(ctas, sms) / sms * (1 - kept),
        load=hbm_bytes / achievable_bandwidth(gpu) / alone,
    )


def arm_times(
    gpu: GPU,
    gemm: TiledGemm,
    cta: Block,
    ctas: int,
    comm_s: float,
    hbm_bytes: float = 0.0,
    comm_load: float = 0.0,
) -> dict[str, float]:
    """Total time of the GEMM (moving ``hbm_bytes``) and the collective (``comm_s`` alone, loading
    HBM with ``comm_load``) under each arm."""
    g, memory = beside(gpu, gemm, cta, ctas, hbm_bytes), memory_of(gpu)
    return {
        arm: float(np.asarray(arm_time(arm, g, comm_s, DISPATCH[gpu.vendor], comm_load, memory)))
        for arm in ARMS
    }
