"""Compute of one transformer layer and micro-batch on a GPU, and the overlap windows it offers.

A layer's forward kernels come from :func:`commodel.workloads.layer.kernels.layer_kernels`; each is
priced by the roofline (:func:`commodel.compute.roofline.kernel_time`) and takes at least the GPU's
launch overhead (the host issues kernels no faster than that). A GEMM's backward is its
input-gradient and weight-gradient GEMMs, flash attention's is :data:`ATTENTION_BACKWARD` times its
forward, an elementwise pass's twice its forward; recomputation repeats the forward (full) or the
attention core (selective).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike

from commodel.compute.kernels import Kernel, gemm_backward
from commodel.compute.precision import Precision, precision
from commodel.hardware.cluster import Cluster
from commodel.hardware.schema import GPU
from commodel.overlap import Window
from commodel.vectorize import distinct, on_unique
from commodel.workloads.layer.kernels import LayerKernels, layer_kernels
from commodel.workloads.layer.timing import hbm_share, timed, timed_all
from commodel.workloads.layer.userbuffers import UB_SMS, UB_SPLITS, chunk_groups
from commodel.workloads.model.recompute import has_module
from commodel.workloads.model.schema import Transformer
from commodel.workloads.parallel.layout import Layout

#: Flash-attention backward runs five matmuls to the forward's two (Dao 2023): 2.5x the forward's
#: tensor FLOPs, and recomputes the softmax (one exponential per score again).
ATTENTION_BACKWARD = 2.5


def attention_backward(forward: Kernel) -> Kernel:
    """The backward of a flash-attention forward: 2.5x its FLOPs, the same exponentials, twice its
    traffic (read Q, K, V, O, dO; write dQ, dK, dV)."""
    return dataclasses.replace(
        forward, name="attention-backward", flops=ATTENTION_BACKWARD * forward.flops, bytes=2 * forward.bytes
    )


@dataclass(frozen=True)
class Work:
    """Compute of one layer and micro-batch on a given number of SMs: totals and their make-up.

    ``reduce_fwd_s``/``reduce_bwd_s``: GEMMs whose output is a tensor-parallel partial sum (row GEMMs
    forward, column GEMMs' input gradients backward); ``gather_fwd_s``/``gather_bwd_s``: GEMMs that
    consume gathered input (column forward, row input gradients backward); ``reduce_*_hbm_s``,
    ``gather_*_hbm_s``: the HBM time of those GEMMs (what a collective beside them contends with);
    ``wgrad_s``: the weight-gradient GEMMs of the backward (what zero-bubble schedules defer);
    ``*_ub_s``: those GEMMs as Transformer Engine's userbuffers overlap cuts them
    (:mod:`commodel.workloads.layer.userbuffers`): the gathered ones in ``tp`` chunks, the forward
    reducing ones in its pipeline's chunks on the SMs its reduce-scatter leaves.
    """

    fwd_s: np.ndarray
    bwd_s: np.ndarray
    wgrad_s: np.ndarray
    attention_fwd_s: np.ndarray
    hbm_s: np.ndarray
    launches: np.ndarray
    reduce_fwd_s: np.ndarray
    gather_fwd_s: np.ndarray
    reduce_bwd_s: np.ndarray
    gather_bwd_s: np.ndarray
    reduce_fwd_hbm_s: np.ndarray
    reduce_bwd_hbm_s: np.ndarray
    gather_fwd_hbm_s: np.ndarray
    gather_bwd_hbm_s: np.ndarray
    reduce_fwd_ub_s: np.ndarray
    gather_fwd_ub_s: np.ndarray
    gather_bwd_ub_s: np.ndarray

    @property
    def total_s(self) -> np.ndarray:
        return self.fwd_s + self.bwd_s


def either(mask: ArrayLike, a: Work, b: Work) -> Work:
    """``a`` where ``mask`` holds, ``b`` elsewhere (field by field); ``a`` or ``b`` itself where the mask
    holds everywhere or nowhere."""
    if np.all(mask):
        return a
    if not np.any(mask):
        return b
    return Work(
        **{f.name: np.where(mask, getattr(a, f.name), getattr(b, f.name)) for f in dataclasses.fields(Work)}
    )


@dataclass(frozen=True)
class Priced:
    """One entry of a layer's kernels, priced: ``forward`` calls of ``fwd_s`` each and ``backward``
    of ``bwd_s`` (a GEMM's input- and weight-gradient GEMMs together, ``wgrad_s`` of it the weight
    gradient's), ``memory_calls`` of ``memory_s`` HBM time (roofline memory terms; ``fwd_memory_s`` a forward
    call's, what recomputing it moves again) and ``launches`` kernel launches;
    a GEMM carries its tensor-parallel ``role``, its forward's and input gradient's times (``dgrad_s``),
    HBM times (roofline memory terms) and both times as userbuffers' overlap cuts them (``*_ub_s``)."""

    kernel: Kernel
    forward: float
    backward: float
    fwd_s: np.ndarray
    bwd_s: np.ndarray
    memory_calls: float
    memory_s: np.ndarray
    launches: float
    fwd_memory_s: np.ndarray | float = 0.0
    attention: bool = False
    role: str = ""
    wgrad_s: np.ndarray | float = 0.0
    dgrad_s: np.ndarray | float = 0.0
    fwd_hbm_s: np.ndarray | float = 0.0
    dgrad_hbm_s: np.ndarray | float = 0.0
    fwd_ub_s: np.ndarray | float = 0.0
    dgrad_ub_s: np.ndarray | float = 0.0


def chunked_s(
    gpu: GPU, kernel: Kernel, chunks: ArrayLike, units: ArrayLike | None, whole: ArrayLike | None = None
) -> np.ndarray:
    """Seconds of a GEMM cut into ``chunks`` (:func:`~commodel.workloads.layer.userbuffers.chunk_groups`),
    at least the uncut GEMM's (``whole``, where the caller has timed it): the pieces do all of its work
    and more, where the roofline, which prices a part tile by its FLOPs, could price them a little
    cheaper."""
    cut = sum(np.asarray(n) * timed(gpu, piece, units)[0] for piece, n in chunk_groups(kernel, chunks))
    return np.maximum(cut, timed(gpu, kernel, units)[0] if whole is None else whole)


def _userbuffers_s(
    gpu: GPU,
    role: str,
    forward: tuple[Kernel, np.ndarray],
    dgrad: tuple[Kernel, np.ndarray],
    tp: ArrayLike,
    units: ArrayLike | None,
) -> tuple[np.ndarray, np.ndarray]:
    """(forward, input gradient) seconds of a ``role`` GEMM as userbuffers runs them, from each
    (kernel, uncut seconds): a column GEMM's forward and a row GEMM's input gradient in ``tp``
    ring-exchange chunks, a row GEMM's forward in :data:`UB_SPLITS` chunks on ``SMs - UB_SMS``; the
    rest, and every row at tp 1, uncut."""
    (kernel, f), (dgrad_kernel, d) = forward, dgrad
    if role not in ("column", "row") or np.all(np.asarray(tp) == 1):
        return f, d
    if role == "column":
        return chunked_s(gpu, kernel, tp, units, f), d
    fewer = np.asarray(gpu.compute_units.value if units is None else units) - UB_SMS
    pipelined = np.where(np.asarray(tp) > 1, chunked_s(gpu, kernel, UB_SPLITS, fewer), f)
    return pipelined, chunked_s(gpu, dgrad_kernel, tp, units, d)


def _backward_kernels(kernel: Kernel) -> tuple[Kernel, ...]:
    """The backward kernels of an attention core: unfused attention's two batched GEMMs, flash
    attention's :func:`attention_backward`, none for a memory-bound pass (priced as twice its forward)."""
    if kernel.shape is not None:
        return gemm_backward(kernel)
    return (attention_backward(kernel),) if kernel.name == "attention" else ()


def priced_kernels(
    gpu: GPU, lk: LayerKernels, units: ArrayLike | None = None, tp: ArrayLike = 1
) -> list[Priced]:
    """Every forward kernel of one layer and micro-batch with its backward (module docstring), in
    the order :func:`layer_work` adds them up: GEMMs, attention cores, memory-bound kernels; all of
    them timed in one :func:`timed_all`."""
    gemms = [(kernel, *gemm_backward(kernel)) for kernel, _, _ in lk.gemms]
    cores = [(kernel, *_backward_kernels(kernel)) for kernel, _ in lk.attention]
    every = [k for kernels in (*gemms, *cores) for k in kernels] + [k for k, _, _ in lk.elementwise]
    times = iter(timed_all(gpu, every, units))
    entries = []
    for (kernel, count, role), (_, *backward) in zip(lk.gemms, gemms, strict=True):
        forward, dgrad, wgrad = next(times), next(times), next(times)
        f, hbm = forward[0], forward[2]
        fwd_ub, dgrad_ub = _userbuffers_s(gpu, role, (kernel, f), (backward[0], dgrad[0]), tp, units)
        moved = hbm_share(forward) + hbm_share(dgrad) + hbm_share(wgrad)
        entries.append(
            Priced(kernel, count, count, f, dgrad[0] + wgrad[0], count, moved, 3 * count, hbm_share(forward),
                   role=role, wgrad_s=wgrad[0], dgrad_s=dgrad[0], fwd_hbm_s=hbm, dgrad_hbm_s=dgrad[2],
                   fwd_ub_s=fwd_ub, dgrad_ub_s=dgrad_ub)
        )  # fmt: skip
    for (kernel, count), (_, *backward) in zip(lk.attention, cores, strict=True):
        forward = next(times)
        f, m = forward[0], hbm_share(forward)
        back = [next(times) for _ in backward]
        b_time = sum(b[0] for b in back) if back else 2 * f
        b_mem = sum(hbm_share(b) for b in back) if back else 2 * m
        entries.append(
            Priced(kernel, count, count, f, b_time, count, m + b_mem, count * (1 + max(len(back), 1)), m,
                   attention=True)
        )  # fmt: skip
    for kernel, forward, backward in lk.elementwise:
        priced = next(times)
        f, m = priced[0], hbm_share(priced)
        entries.append(Priced(kernel, forward, backward, f, f, forward + backward, m, forward + backward, m))
    return entries


def layer_work(
    gpu: GPU,
    lk: LayerKernels,
    recompute: np.ndarray,
    modules: ArrayLike = 0,
    units: ArrayLike | None = None,
    tp: ArrayLike = 1,
) -> Work:
    """Forward and backward (with recomputation) compute of one layer for one micro-batch: the sum of
    its :func:`priced_kernels`.

    A GEMM's backward is its input-gradient and weight-gradient GEMMs, flash attention's is
    :data:`ATTENTION_BACKWARD` times its forward, an elementwise pass's twice its forward. Full
    recomputation (``recompute`` 2) runs the forward again, selective (1) the attention core; outside
    full, each of ``modules`` (:attr:`~commodel.workloads.parallel.layout.Layout.recompute_modules`) runs its
    kernels' forward again. What runs again moves its HBM bytes again (``hbm_s``).
    """
    fwd = bwd = weights = mem = launches = attn = fwd_mem = attn_mem = 0.0
    parts = ("fwd", "dgrad", "fwd_hbm", "dgrad_hbm", "fwd_ub", "dgrad_ub")
    by_role = {(role, p): 0.0 for role in ("column", "row") for p in parts}
    for e in priced_kernels(gpu, lk, units, tp):
        fwd, bwd = fwd + e.forward * e.fwd_s, bwd + e.backward * e.bwd_s
        mem, launches = mem + e.memory_calls * e.memory_s, launches + e.launches
        fwd_mem = fwd_mem + e.forward * e.fwd_memory_s
        if e.attention:
            attn, attn_mem = attn + e.forward * e.fwd_s, attn_mem + e.forward * e.fwd_memory_s
        if e.role:
            weights = weights + e.forward * e.wgrad_s
        if e.role in ("column", "row"):
            times = (e.fwd_s, e.dgrad_s, e.fwd_hbm_s, e.dgrad_hbm_s, e.fwd_ub_s, e.dgrad_ub_s)
            for key, value in zip(parts, times, strict=True):
                by_role[e.role, key] = by_role[e.role, key] + e.forward * value
    remade = remade_mem = 0.0
    for name, kernels in lk.remade.items():
        again = has_module(modules, name)
        if np.any(again):  # priced only where some layout recomputes the module
            for kernel, count in kernels:
                priced = timed(gpu, kernel, units)
                remade, remade_mem = (
                    remade + again * count * priced[0],
                    remade_mem + again * count * hbm_share(priced),
                )
    full = recompute == 2
    recompute_s = np.where(full, fwd, np.where(recompute == 1, attn, 0.0) + remade)
    recompute_mem = np.where(full, fwd_mem, np.where(recompute == 1, attn_mem, 0.0) + remade_mem)
    return Work(
        fwd,
        bwd + recompute_s,
        weights,
        attn,
        mem + recompute_mem,
        launches,
        reduce_fwd_s=by_role["row", "fwd"],
        gather_fwd_s=by_role["column", "fwd"],
        reduce_bwd_s=by_role["column", "dgrad"],
        gather_bwd_s=by_role["row", "dgrad"],
        reduce_fwd_hbm_s=by_role["row", "fwd_hbm"],
        reduce_bwd_hbm_s=by_role["column", "dgrad_hbm"],
        gather_fwd_hbm_s=by_role["column", "fwd_hbm"],
        gather_bwd_hbm_s=by_role["row", "dgrad_hbm"],
        reduce_fwd_ub_s=by_role["row", "fwd_ub"],
        gather_fwd_ub_s=by_role["column", "fwd_ub"],
        gather_bwd_ub_s=by_role["row", "dgrad_ub"],
    )


def window(full: Work, part: Work, which: str, idle: tuple[ArrayLike, ArrayLike] = (0.0, 0.0)) -> Window:
    """Overlap window over the forward (``fwd``), backward (``bwd``) or ``both`` passes of one layer,
    with the seconds ``idle`` (forward, backward) in which its GPU computes nothing in each pass (it
    waits for the host, or runs the layer's exposed collectives)."""
    pick = {"fwd": lambda w: w.fwd_s, "bwd": lambda w: w.bwd_s, "both": lambda w: w.total_s}[which]
    compute = pick(full)
    share = np.divide(compute, full.total_s, out=np.zeros_like(compute), where=full.total_s > 0)
    kernel = np.divide(full.total_s, full.launches, out=np.zeros_like(compute), where=full.launches > 0)
    waits = {"fwd": idle[0], "bwd": idle[1], "both": np.add(*idle)}[which]
    return Window(compute, pick(part), full.hbm_s * share, kernel, waits)


def repeat(window: Window, factor: ArrayLike) -> Window:
    """The same window repeated ``factor`` times (a stage of several layers)."""
    f = np.asarray(factor, dtype=float)
    w = window
    return Window(w.compute_s * f, w.partitioned_s * f, w.hbm_s * f, w.kernel_s, w.idle_s * f)


def layer_work_of(
    model: Transformer,
    gpu: GPU,
    x: Layout,
    recipe: Precision,
    attention_impl: str,
    units: ArrayLike | None = None,
    shared_experts: bool = False,
    cut: bool = False,
) -> Work:
    """:func:`layer_work` of every layout in ``x``, computed once per distinct layer shape; with
    ``shared_experts``, of the layer's shared experts alone (nothing without them); with ``cut``, its
    tensor-parallel GEMMs also as userbuffers cuts them (``*_ub_s``; else those are the uncut times)."""
    return layer_works(model, gpu, x, recipe, attention_impl, [(units, cut)], shared_experts)[0]


#: Below this many layouts :func:`layer_works` prices its variants in one call (each call's fixed
#: cost, about a millisecond, outweighs copying the key columns once per variant); above it, one
#: call per variant.
STACKED_ROWS = 4096


def layer_works(
    model: Transformer,
    gpu: GPU,
    x: Layout,
    recipe: Precision,
    attention_impl: str,
    variants: list[tuple[ArrayLike | None, bool]],
    shared_experts: bool = False,
) -> list[Work]:
    """:func:`layer_work_of` of ``x`` for each ``(units, cut)`` variant (the SMs it runs on, all where
    None; whether userbuffers cuts its GEMMs), priced in one call: the variants share the layer's
    kernels, and a single estimate pays the call's fixed cost once instead of once per variant."""

    def work(
        T, mb, seq, tp, cp, ep, sp, recompute, modules, load, etp, fp8_dispatch, flex, fused, eager, sms, cuts
    ):
        lk = layer_kernels(model, T, mb, seq, tp, cp, ep, sp, recipe, attention_impl, load, etp, fp8_dispatch,
                           flex, fused, eager)  # fmt: skip
        if shared_experts:
            lk = lk.shared_experts or LayerKernels([], [], [], {})
        return layer_work(gpu, lk, recompute, modules, sms, np.where(cuts, tp, 1))

    keys = (
        x.tokens, x.micro_batch, x.seq, x.tp, x.cp, x.ep, x.sequence_parallel, x.recompute,
        x.recompute_modules, x.busiest_expert_rank, x.expert_tp, x.fp8_dispatch, x.flex,
        x.permute_fusion, x.elementwise,
    )  # fmt: skip
    shape = np.broadcast_shapes(*(np.shape(k) for k in keys))
    size = int(np.prod(shape))
    full = gpu.compute_units.value
    if len(variants) == 1 or size >= STACKED_ROWS:
        found = distinct(*keys) if len(variants) > 1 else None
        if found is None:
            return [on_unique(work, *keys, full if u is None else u, cut) for u, cut in variants]
        rows, index = found  # the layout's keys coded once for every variant

        def work_at(i: np.ndarray, sms: np.ndarray, cuts: np.ndarray) -> Work:
            return work(*(r[i] for r in rows), sms, cuts)

        return [on_unique(work_at, index, full if u is None else u, cut) for u, cut in variants]
    rows = len(variants) * size

    def joined(values: list[ArrayLike]) -> np.ndarray:
        """Each variant's value over its rows, end to end; one value throughout stays one broadcast
        value (:func:`on_unique` skips it)."""
        arrays = [np.broadcast_to(v, shape) for v in values]
        first = arrays[0].reshape(-1)[:1]
        if all(not any(a.strides) and a.reshape(-1)[0] == first[0] for a in arrays):
            return np.broadcast_to(first, (rows,))
        return np.concatenate([a.ravel() for a in arrays])

    sms = joined([full if units is None else units for units, _ in variants])
    cuts = joined([cut for _, cut in variants])
    priced = on_unique(work, *(joined([k] * len(variants)) for k in keys), sms, cuts)
    return [
        Work(**{
            f.name: np.broadcast_to(getattr(priced, f.name), (rows,))[i * size : (i + 1) * size]
            .reshape(shape)
            for f in dataclasses.fields(Work)
        })
        for i in range(len(variants))
    ]  # fmt: skip


def layer_window(
    model: Transformer, cluster: Cluster, x: Layout, comm_ctas: ArrayLike, recipe: str = "bf16"
) -> Window:
    """The overlap window of one layer's forward and backward for one micro-batch, with the same
    kernels also priced on the SMs a collective of ``comm_ctas`` CTAs leaves free."""
    units = cluster.gpu.compute_units.value - np.asarray(comm_ctas, dtype=float)
    full, part = layer_works(
        model, cluster.gpu, x, precision(recipe), "flash", [(None, False), (units, False)]
    )
    return window(full, part, "both")
