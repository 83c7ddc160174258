"""Exposed tensor-parallel communication of one layer under each TP mechanism.

Per pass, ``pairs`` reductions (reduce-scatter with sequence parallelism, else allreduce) follow their
producer GEMMs, and with sequence parallelism ``pairs`` allgathers precede their consumer GEMMs: two
in a dense layer (attention's and the MLP's), fewer where routed experts replace the MLP
(:func:`commodel.workloads.transformer.tensor_parallel_mlps`).
"""

from __future__ import annotations

import numpy as np

from commodel.comm.fabric import Fabric
from commodel.errors import CommodelError, unknown
from commodel.workloads.groups import Group, collective, forced
from commodel.workloads.layer_work import Work
from commodel.workloads.layout import Layout

#: Tensor-parallel communication mechanisms, each with what it can use:
#: ``none`` (collectives after/before their GEMMs, NCCL's choice of algorithm: NVLS where the switch
#: reduces); ``t3`` (Pati et al., ASPLOS'24: the producer GEMM's tiles feed a ring reduce-scatter as
#: they are written, by DMA, reduced in memory; a ring design: no in-switch reduction and no multicast,
#: so its gathers run as exposed ring all-gathers); ``cais`` (compute-aware in-switch: tiles are reduced
#: by the NVLink switch as they are produced and gathers are multicast into the consumer GEMM's tiles;
#: needs NVLS); ``userbuffers`` (Transformer Engine's comm+GEMM overlap, what Megatron's
#: ``--tp-comm-overlap`` turns on: see :func:`userbuffers_exposed`; needs sequence parallelism).
TP_OVERLAP = ("none", "t3", "cais", "userbuffers")

#: Transformer Engine's userbuffers defaults (``transformer_engine.pytorch.module.base.initialize_ub``):
#: a pipelined reduce-scatter splits its GEMM into 4 chunks, and the reduce-scatter and bulk kernels
#: run on 16 SMs the GEMMs give up (``num_sm``, ``set_sm_margin``); the ring-exchange gathers are
#: copy-engine sends (``use_ce``) and take no SMs.
UB_SPLITS = 4
UB_SMS = 16

#: One GEMM output tile (128 x 256 bf16 = 64 KiB): the unit a fused mechanism hands to the network.
TILE_BYTES = 128 * 256 * 2


def _fused(compute: np.ndarray, comm: np.ndarray, tail: np.ndarray, slow: np.ndarray) -> np.ndarray:
    """Time a collective adds when fused into ``compute`` tile by tile: it streams behind the tiles,
    slows them by ``slow`` (shared HBM), and ends ``tail`` after the last tile."""
    return np.maximum(np.maximum(comm, compute * slow) + tail - compute, 0.0)


def _in_switch(op: str, size: np.ndarray, where: Group, fab: Fabric) -> np.ndarray:
    """Time of ``op`` reduced or multicast by the switch (NVLS); where NVLS cannot run it (a group
    wider than the switch's multicast arity, or spanning domains), NCCL's own choice."""
    nvls, _ = forced(op, "nvls", size, where, fab)
    fallback, _ = collective(op, size, where, fab)
    return np.where(np.isfinite(nvls), nvls, fallback)


def userbuffers_exposed(
    work: Work,
    act: np.ndarray,
    where: Group,
    fab: Fabric,
    x: Layout,
    units: float,
    pairs: float,
    again: np.ndarray,
) -> np.ndarray:
    """Exposed TP communication of one layer and micro-batch under Transformer Engine's userbuffers
    overlap (all passes; recomputation repeats ``again`` of the forward's).

    - Gathers (forward before the column GEMMs, backward before the row GEMMs' input gradients) are
      *ring exchanges*: the GEMM runs chunk by chunk, the local chunk first, while the next chunk
      arrives from a neighbour, so the ring all-gather hides behind ``(tp - 1) / tp`` of its GEMM.
    - Forward reductions are *pipelined*: the row GEMM runs in :data:`UB_SPLITS` chunks on
      ``SMs - UB_SMS`` SMs, each chunk's reduce-scatter behind the next chunk; the last chunk's
      reduce-scatter stays exposed.
    - Backward reductions (the column GEMMs' input gradients) are *bulk*: reduce-scattered during the
      same layer's weight-gradient GEMM (the same FLOPs as the input gradient), also on ``UB_SMS`` SMs.

    Not priced: what splitting a GEMM into chunks costs it. The roofline's fixed 128 x 256 tiles would
    price a chunk of ``m / tp`` rows as a mostly empty wave (Llama 3 70B, TP 8, 4,096 tokens: 1.8x its
    GEMMs), where cuBLAS picks smaller tiles for small GEMMs; no published measurement separates it, so
    this is optimistic where the chunks are small (narrow models, short micro-batches, large TP).
    """
    rs, _ = collective("reducescatter", act, where, fab)
    last_chunk, _ = collective("reducescatter", act / UB_SPLITS, where, fab)
    ag, _ = forced("allgather", "ring", act, where, fab)
    slow = units / (units - UB_SMS)
    ahead = (x.tp - 1) / x.tp
    no_tail = np.zeros_like(rs)
    forward = _fused(work.reduce_fwd_s, pairs * rs, pairs * last_chunk, slow)
    forward = forward + _fused(work.gather_fwd_s * ahead, pairs * ag, no_tail, 1.0)
    backward = _fused(work.reduce_bwd_s, pairs * rs, no_tail, slow)
    backward = backward + _fused(work.gather_bwd_s * ahead, pairs * ag, no_tail, 1.0)
    return forward * (1 + again) + backward


def tensor_parallel_exposed(
    mechanism: str,
    work: Work,
    act: np.ndarray,
    where: Group,
    fab: Fabric,
    x: Layout,
    hbm: float,
    units: float,
    pairs: float,
    again: np.ndarray,
) -> np.ndarray:
    """Exposed tensor-parallel communication of one layer and micro-batch (all passes).

    Per pass, ``pairs`` reductions (reduce-scatter with sequence parallelism, else allreduce) follow
    their producer GEMMs, and with sequence parallelism ``pairs`` allgathers precede their consumer
    GEMMs (module docstring; 2 in a dense layer). Recomputation repeats ``again`` of the forward
    pass's communication (:func:`~commodel.workloads.transformer.recomputed_pairs`: all of it under
    full recomputation). ``units``: the GPU's SMs.
    """
    if mechanism not in TP_OVERLAP:
        raise unknown("tensor-parallel overlap", mechanism, TP_OVERLAP)
    sp = x.sequence_parallel
    passes = [(work.reduce_fwd_s, work.gather_fwd_s), (work.reduce_bwd_s, work.gather_bwd_s)]
    passes.append(passes[0])  # the forward again, ``again`` times
    repeats = [1.0, 1.0, again]
    # Sequence parallelism gathers and reduce-scatters, else it allreduces: price only what runs.
    ag, _ = collective("allgather", np.where(sp, act, 0.0), where, fab)
    gathers = np.where(sp, pairs * ag, 0.0)
    if mechanism in ("none", "userbuffers"):
        rs, _ = collective("reducescatter", np.where(sp, act, 0.0), where, fab)
        ar, _ = collective("allreduce", np.where(sp, 0.0, act), where, fab)
        serial = (np.where(sp, pairs * rs, pairs * ar) + gathers) * sum(repeats)
        if mechanism == "none":
            return serial
        # Userbuffers overlap needs sequence parallelism (TE refuses it otherwise).
        return np.where(sp, userbuffers_exposed(work, act, where, fab, x, units, pairs, again), serial)
    tile = TILE_BYTES * x.tp
    if mechanism == "t3":
        ag, _ = forced("allgather", "ring", act, where, fab)
        # Ring reduce-scatter by DMA; allreduce = reduce-scatter + an exposed allgather. Each GPU's HBM
        # serves 3 bytes per byte reduced (read the tile, receive a partial, read-modify-write the sum),
        # which stretches the producer GEMMs' memory term: slow = max(C, hbm B / (B - r)) / C.
        rs, rs_bw = forced("reducescatter", "ring", act, where, fab)
        tail, _ = forced("reducescatter", "ring", tile, where, fab)
        stretch = hbm / np.maximum(hbm - 3 * rs_bw, 0.1 * hbm)
        total = 0.0
        producers = [(work.reduce_fwd_s, work.reduce_fwd_hbm_s), (work.reduce_bwd_s, work.reduce_bwd_hbm_s)]
        producers.append(producers[0])
        for (producer, hbm_s), r in zip(producers, repeats, strict=True):
            slow = np.divide(
                np.maximum(producer, hbm_s * stretch),
                producer,
                out=np.ones_like(producer),
                where=producer > 0,
            )
            total = total + r * (_fused(producer, pairs * rs, tail, slow) + pairs * ag)
        return np.where(where.ranks > 1, total, 0.0)
    if fab.nvls_Bps is None:
        raise CommodelError("cais needs a switch that reduces in the network (NVLS); this system has none")
    rs = _in_switch("reducescatter", act, where, fab)
    ar = _in_switch("allreduce", act, where, fab)
    reduce = np.where(sp, pairs * rs, pairs * ar)
    tail = _in_switch("allreduce", tile, where, fab)
    total = 0.0
    for (producer, consumer), r in zip(passes, repeats, strict=True):
        fused = _fused(producer, reduce, tail, np.ones_like(producer))
        fused = fused + np.where(sp, _fused(consumer, gathers, tail, np.ones_like(consumer)), 0.0)
        total = total + r * fused
    return np.where(where.ranks > 1, total, 0.0)
