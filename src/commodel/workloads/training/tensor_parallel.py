"""Exposed tensor-parallel communication of one layer under each TP mechanism.

Per pass, ``pairs`` reductions (reduce-scatter with sequence parallelism, else allreduce) follow their
producer GEMMs, and with sequence parallelism ``pairs`` allgathers precede their consumer GEMMs: two
in a dense layer (attention's and the MLP's), fewer where routed experts replace the MLP
(:func:`commodel.workloads.model.transformer.tensor_parallel_mlps`). With sequence parallelism a column
GEMM keeps only its input's shard for the backward and gathers it again for its weight gradient
(Korthikanti et al. 2022, section 4.2.2; Megatron-Core's
``LinearWithGradAccumulationAndAsyncCommunication``; Transformer Engine's ``qkv_dgrad`` and
``fc1_dgrad`` gathers): ``pairs`` more allgathers in the backward.
"""

from __future__ import annotations

import numpy as np

from commodel.comm.fabric import Fabric
from commodel.comm.nccl import MAX_NVLS_ARITY
from commodel.errors import CommodelError, unknown
from commodel.overlap import ctas
from commodel.overlap.interference import Memory, collective_load, corun_end, slowdowns
from commodel.workloads.layer.userbuffers import UB_SMS, UB_SPLITS
from commodel.workloads.layer.work import Work
from commodel.workloads.parallel.groups import Group, collective, collectives, domain, forced
from commodel.workloads.parallel.layout import Layout

#: Tensor-parallel communication mechanisms, each with what it can use:
#: ``none`` (collectives after/before their GEMMs, NCCL's choice of algorithm: NVLS where the switch
#: reduces); ``async`` (Megatron-Core's and Transformer Engine's layers without ``--tp-comm-overlap``:
#: as ``none``, but the backward's column collectives start asynchronously beside the GEMMs they do
#: not feed, :func:`async_exposed`); ``t3`` (Pati et al., ASPLOS'24: the producer GEMM's tiles feed a ring reduce-scatter as
#: they are written, by DMA, reduced in memory; a ring design: no in-switch reduction and no multicast,
#: so its gathers run as exposed ring all-gathers); ``t3-nvls`` (T3's fusion with the reduction done by
#: the switch, its gathers exposed NVLS multicasts); ``cais`` (compute-aware in-switch: tiles are
#: reduced by the NVLink switch as they are produced and gathers are multicast into the consumer GEMM's
#: tiles); ``cais-base`` (CAIS's switch and ISA only: reductions in the switch as tiles are produced,
#: but without its dataflow optimizer the consumer GEMM waits for the whole gather); ``userbuffers``
#: (Transformer Engine's comm+GEMM overlap, what Megatron's ``--tp-comm-overlap`` turns on: see
#: :func:`userbuffers_exposed`; needs sequence parallelism). The switch-reducing ones need NVLS.
TP_OVERLAP = ("none", "async", "t3", "cais", "userbuffers", "t3-nvls", "cais-base")
IN_SWITCH = ("t3-nvls", "cais", "cais-base")

#: One GEMM output tile (128 x 256 bf16 = 64 KiB): the unit a fused mechanism hands to the network.
TILE_BYTES = 128 * 256 * 2


def _fused(
    compute: np.ndarray, comm: np.ndarray, tail: np.ndarray, slow: np.ndarray, loads: Loads
) -> np.ndarray:
    """Time a collective adds when fused into ``compute`` tile by tile: it streams behind the tiles,
    slows them by ``slow`` (their cut or the SMs they give up), the two slow each other through
    shared HBM while both run (:func:`~commodel.overlap.interference.corun` of the ``loads``), and it
    ends ``tail`` after the last tile."""
    fc, fm = slowdowns(*loads)
    return np.maximum(corun_end(compute * slow, comm, 0.0, fc, fm) + tail - compute, 0.0)


#: (compute's, collective's) HBM load alone and the GPU's HBM, as
#: :func:`~commodel.overlap.interference.slowdowns` takes them.
Loads = tuple[np.ndarray, np.ndarray, Memory]


def loads(gemm_s: np.ndarray, gemm_hbm_s: np.ndarray, comm_Bps: np.ndarray, memory: Memory) -> Loads:
    """The HBM load alone of GEMMs of ``gemm_s`` (``gemm_hbm_s`` of it moving HBM bytes) and of a TP
    collective moving ``comm_Bps`` per GPU each way (sent and received)."""
    own = np.divide(gemm_hbm_s, gemm_s, out=np.zeros_like(gemm_s), where=gemm_s > 0)
    return own, collective_load(2 * np.asarray(comm_Bps, dtype=float), memory), memory


#: A GPU's store reaching another GPU through the switch and back (CAIS's simulated system: 250 ns
#: each way between a GPU and a switch, about 1 us for a request and its answer).
SWITCH_ROUND_TRIP_S = 1e-6


def switch_stores(op: str, size: np.ndarray, where: Group, fab: Fabric) -> np.ndarray:
    """Time of ``op`` done by GPU threads' own stores through a reducing switch, as tiles are written
    (CAIS; T3 with NVLS): no collective kernel, no chunk pipeline. A reduction sends each GPU's whole
    partial output once (the switch adds them into the owner's shard), a gather multicasts each shard
    once and each GPU receives the others', ``(g - 1) / g`` of it; an allreduce does both, each GPU
    sending and receiving ``size``. At the GPU's scale-up rate, plus one switch round trip. Where the
    group spans domains or exceeds the switch's multicast arity, NCCL's own choice."""
    g = where.per_node
    share = {"reducescatter": 1.0, "allreduce": 1.0, "allgather": (g - 1) / g}[op]
    direct = share * np.asarray(size, dtype=float) / fab.up_Bps(g) + SWITCH_ROUND_TRIP_S
    fallback, _ = collective(op, size, where, fab)
    local = ~np.asarray(where.spans_nodes) & (where.ranks <= MAX_NVLS_ARITY)
    return np.where(local, direct, fallback)


def async_exposed(
    work: Work,
    reduce: np.ndarray,
    ag: np.ndarray,
    sp: np.ndarray,
    pairs: float,
    again: np.ndarray,
    share: np.ndarray,
    shared: Loads,
) -> np.ndarray:
    """Exposed TP communication of one layer and micro-batch as Megatron-Core's and Transformer
    Engine's linear layers run it without userbuffers: the forward's collectives and the backward's
    gather before the row GEMMs' input gradients between the GEMMs, while a column GEMM's backward
    starts its collectives asynchronously on NCCL's stream (``async_op=True``): the gather of its input
    beside its input-gradient GEMM, and the reduce-scatter (allreduce without sequence parallelism) of
    that gradient beside its weight-gradient GEMM (the same FLOPs). The collective's CTAs hold
    ``share`` of the SMs while it runs and the two share HBM (``shared`` loads), so a GEMM of ``G``
    beside a collective of ``M`` ends at ``corun_end(G, M, 0, f_c / (1 - share), f_m)``: without
    HBM contention ``max(M, G + share M)``. ``reduce``: one reduction (reduce-scatter, or allreduce
    without sequence parallelism); ``ag``: one gather."""
    gathers = np.where(sp, pairs * ag, 0.0)
    serial = (pairs * reduce + gathers) * (1 + again) + gathers
    fc, fm = slowdowns(*shared)

    def beside(comm: np.ndarray) -> np.ndarray:
        G = work.reduce_bwd_s
        return corun_end(G, comm, 0.0, fc / (1 - share), fm) - G

    return serial + beside(pairs * reduce) + beside(gathers)


def userbuffers_exposed(
    work: Work,
    act: np.ndarray,
    gathered: np.ndarray,
    where: Group,
    fab: Fabric,
    x: Layout,
    units: float,
    pairs: float,
    again: np.ndarray,
    memory: Memory,
) -> np.ndarray:
    """Exposed TP communication of one layer and micro-batch under Transformer Engine's userbuffers
    overlap (all passes; recomputation repeats ``again`` of the forward's), against the layer's
    uncut GEMMs: what the communication adds and what cutting the GEMMs costs them
    (:mod:`commodel.workloads.layer.userbuffers`).

    - Gathers (forward before the column GEMMs, backward before the row GEMMs' input gradients) are
      *ring exchanges* by the copy engines (``use_ce``, no SMs): the GEMM runs in ``tp`` chunks
      (``G'`` in all), the local one first, so the ring all-gather hides behind ``(tp - 1) / tp``
      of them and the last chunk follows: ``max(AG, G' (tp - 1) / tp) + G' / tp - G``.
    - Forward reductions are *pipelined*: the row GEMM runs in :data:`UB_SPLITS` chunks on
      ``SMs - UB_SMS`` SMs (``R'``), each chunk's reduce-scatter behind the next; the last chunk's
      reduce-scatter stays exposed: ``max(RS, R') + RS(1 / splits) - R``.
    - The column GEMMs' backward is *bulk*: their input gathered again during their input-gradient
      GEMM, and that gradient reduce-scattered during their weight-gradient GEMM (the same FLOPs),
      each on ``UB_SMS`` SMs the GEMM gives up.

    Each GEMM and the collective beside it share HBM (:func:`_fused`).
    """
    rs, rs_bw = collective("reducescatter", act, where, fab)
    last_chunk, _ = collective("reducescatter", act / UB_SPLITS, where, fab)
    ag, ag_bw = forced("allgather", "ring", gathered, where, fab)
    ahead = (x.tp - 1) / x.tp

    def cut(uncut: np.ndarray, chunked: np.ndarray) -> np.ndarray:
        return np.divide(chunked, uncut, out=np.ones_like(chunked), where=uncut > 0)

    def ring_exchange(uncut: np.ndarray, chunked: np.ndarray, uncut_hbm: np.ndarray) -> np.ndarray:
        tail = (chunked - uncut) / x.tp
        shared = loads(uncut, uncut_hbm, ag_bw, memory)
        return _fused(uncut * ahead, pairs * ag, tail, cut(uncut, chunked), shared)

    forward = _fused(
        work.reduce_fwd_s, pairs * rs, pairs * last_chunk, cut(work.reduce_fwd_s, work.reduce_fwd_ub_s),
        loads(work.reduce_fwd_s, work.reduce_fwd_hbm_s, rs_bw, memory),
    )  # fmt: skip
    forward = forward + ring_exchange(work.gather_fwd_s, work.gather_fwd_ub_s, work.gather_fwd_hbm_s)
    bulk = units / (units - UB_SMS)
    backward = sum(
        _fused(work.reduce_bwd_s, pairs * comm, np.zeros_like(rs), bulk,
               loads(work.reduce_bwd_s, work.reduce_bwd_hbm_s, bw, memory))
        for comm, bw in ((ag, ag_bw), (rs, rs_bw))
    )  # fmt: skip
    backward = backward + ring_exchange(work.gather_bwd_s, work.gather_bwd_ub_s, work.gather_bwd_hbm_s)
    return forward * (1 + again) + backward


def tensor_parallel_exposed(
    mechanism: str,
    work: Work,
    act: np.ndarray,
    gathered: np.ndarray,
    where: Group,
    fab: Fabric,
    x: Layout,
    memory: Memory,
    units: float,
    pairs: float,
    again: np.ndarray,
) -> np.ndarray:
    """Exposed tensor-parallel communication of one layer and micro-batch (all passes).

    Per pass, ``pairs`` reductions (reduce-scatter with sequence parallelism, else allreduce) follow
    their producer GEMMs, and with sequence parallelism ``pairs`` allgathers precede their consumer
    GEMMs (module docstring; 2 in a dense layer). Recomputation repeats ``again`` of the forward
    pass's communication (:func:`~commodel.workloads.model.transformer.recomputed_pairs`: all of it under
    full recomputation); the backward gathers each column GEMM's input again (module docstring).
    ``act``: bytes a reduction moves; ``gathered``: bytes a gather moves (fewer where the recipe
    gathers quantized activations, :attr:`~commodel.compute.precision.Precision.activation_gather_bytes`).
    ``units``: the GPU's SMs.
    """
    if mechanism not in TP_OVERLAP:
        raise unknown("tensor-parallel overlap", mechanism, TP_OVERLAP)
    sp = x.sequence_parallel
    passes = [(work.reduce_fwd_s, work.gather_fwd_s), (work.reduce_bwd_s, work.gather_bwd_s)]
    passes.append(passes[0])  # the forward again, ``again`` times
    repeats = [1.0, 1.0, again]
    regathers = [0.0, np.where(sp, 1.0, 0.0), 0.0]  # with SP the backward gathers column GEMMs' inputs again
    # Sequence parallelism gathers and reduce-scatters, else it allreduces: price only what runs.
    if mechanism in ("none", "async", "userbuffers"):
        ops = "allgather", "reducescatter", "allreduce"
        sizes = np.where(sp, gathered, 0.0), np.where(sp, act, 0.0), np.where(sp, 0.0, act)
        (ag, _), (rs, rs_bw), (ar, ar_bw) = collectives(ops, sizes, where, fab)
        gathers = np.where(sp, pairs * ag, 0.0)
        serial = np.where(sp, pairs * rs, pairs * ar) * sum(repeats) + gathers * (sum(repeats) + 1)
        if mechanism == "none":
            return serial
        if mechanism == "async":
            k = ctas("sm-partition", domain(fab, where))  # NCCL's CTAs beside the GEMM
            shared = loads(work.reduce_bwd_s, work.reduce_bwd_hbm_s, np.where(sp, rs_bw, ar_bw), memory)
            exposed = async_exposed(work, np.where(sp, rs, ar), ag, sp, pairs, again, k / units, shared)
            return np.where(where.ranks > 1, exposed, 0.0)
        # Userbuffers overlap needs sequence parallelism (TE refuses it otherwise) and a TP group.
        overlapped = userbuffers_exposed(work, act, gathered, where, fab, x, units, pairs, again, memory)
        return np.where(sp & (where.ranks > 1), overlapped, serial)
    tile = TILE_BYTES * x.tp
    if mechanism in IN_SWITCH and fab.nvls_Bps is None:
        raise CommodelError(
            f"{mechanism} needs a switch that reduces in the network (NVLS); this system has none"
        )
    if mechanism in ("t3", "t3-nvls"):
        exposed = _t3_exposed(
            mechanism, work, act, gathered, where, fab, tile, memory, pairs, repeats, regathers
        )
        return np.where(where.ranks > 1, exposed, 0.0)
    rs = switch_stores("reducescatter", act, where, fab)
    ar = switch_stores("allreduce", act, where, fab)
    reduce = np.where(sp, pairs * rs, pairs * ar)
    tail = switch_stores("allreduce", tile, where, fab)
    multicast = pairs * switch_stores("allgather", np.where(sp, gathered, 0.0), where, fab)
    total = 0.0
    # CAIS's stores leave the GPU from the tiles as they are made and its multicasts land in the
    # consumer's tiles: no HBM bytes beside the GEMMs.
    none = (np.zeros_like(reduce), np.zeros_like(reduce), memory)
    for (producer, consumer), r, again_gathered in zip(passes, repeats, regathers, strict=True):
        fused = _fused(producer, reduce, tail, np.ones_like(producer), none)
        # cais-base: without the dataflow optimizer the consumer waits for the whole multicast gather
        gather = (
            _fused(consumer, multicast, tail, np.ones_like(consumer), none)
            if mechanism == "cais"
            else multicast
        )
        total = total + r * (fused + np.where(sp, gather + again_gathered * multicast, 0.0))
    return np.where(where.ranks > 1, total, 0.0)


def _t3_exposed(
    mechanism: str,
    work: Work,
    act: np.ndarray,
    gathered: np.ndarray,
    where: Group,
    fab: Fabric,
    tile: float,
    memory: Memory,
    pairs: float,
    repeats: list,
    regathers: list,
) -> np.ndarray:
    """T3's exposed TP communication: the producer GEMMs' tiles feed a reduce-scatter as they are
    written (``t3``: a ring by DMA, reduced in memory; ``t3-nvls``: reduced by the switch,
    :func:`switch_stores`), the gathers run after it, exposed (a ring; a multicast). Each GPU's HBM
    serves 3 bytes per byte a ring reduces (read the tile, receive a partial, read-modify-write the
    sum) and 1 per byte the switch reduces (the tile read once): that is the reduction's HBM load,
    beside the producer GEMMs' own (their HBM time over their time), and the two slow each other
    (:func:`~commodel.overlap.interference.slowdowns`). ``act``, ``gathered``: the bytes a reduction
    and a gather move."""
    if mechanism == "t3":
        ag, _ = forced("allgather", "ring", gathered, where, fab)
        rs, rs_bw = forced("reducescatter", "ring", act, where, fab)
        tail, _ = forced("reducescatter", "ring", tile, where, fab)
        hbm_bytes = 3.0
    else:
        ag, rs = (
            switch_stores("allgather", gathered, where, fab),
            switch_stores("reducescatter", act, where, fab),
        )
        tail, rs_bw, hbm_bytes = switch_stores("reducescatter", tile, where, fab), act / rs, 1.0
    reduction = hbm_bytes * rs_bw / memory.Bps
    total = 0.0
    producers = [(work.reduce_fwd_s, work.reduce_fwd_hbm_s), (work.reduce_bwd_s, work.reduce_bwd_hbm_s)]
    producers.append(producers[0])
    for (producer, hbm_s), r, again_gathered in zip(producers, repeats, regathers, strict=True):
        own = np.divide(hbm_s, producer, out=np.zeros_like(producer), where=producer > 0)
        fused = _fused(producer, pairs * rs, tail, np.ones_like(producer), (own, reduction, memory))
        total = total + r * (fused + (1 + again_gathered) * pairs * ag)
    return total
