"""Compute of one transformer layer and micro-batch on a GPU, and the overlap windows it offers.

A layer's forward kernels come from :func:`commodel.workloads.transformer.layer_kernels`; each is
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
from commodel.compute.roofline import kernel_time
from commodel.hardware.cluster import Cluster
from commodel.hardware.schema import GPU
from commodel.overlap import Window
from commodel.vectorize import on_unique
from commodel.workloads.layout import Layout, has_module
from commodel.workloads.schema import Transformer
from commodel.workloads.transformer import LayerKernels, layer_kernels

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
    consume gathered input (column forward, row input gradients backward); ``reduce_*_hbm_s``: the
    roofline memory term of the reducing GEMMs (what shared HBM bandwidth would stretch);
    ``wgrad_s``: the weight-gradient GEMMs of the backward (what zero-bubble schedules defer).
    """

    fwd_s: np.ndarray
    bwd_s: np.ndarray
    wgrad_s: np.ndarray
    attention_fwd_s: np.ndarray
    memory_bound_s: np.ndarray
    launches: np.ndarray
    reduce_fwd_s: np.ndarray
    gather_fwd_s: np.ndarray
    reduce_bwd_s: np.ndarray
    gather_bwd_s: np.ndarray
    reduce_fwd_hbm_s: np.ndarray
    reduce_bwd_hbm_s: np.ndarray

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


def timed(gpu: GPU, kernel: Kernel, units: ArrayLike | None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(time, memory-bound time, HBM time) of a kernel; no kernel is shorter than a launch.

    HBM time is the roofline's memory term (bytes / achievable bandwidth), bound or not.
    """
    r = kernel_time(gpu, kernel, launch=False, units=units)
    time = np.maximum(r.time_s, gpu.launch_overhead.value)
    return time, np.where(r.memory_s >= r.compute_s, time, 0.0), r.memory_s


def layer_work(
    gpu: GPU, lk: LayerKernels, recompute: np.ndarray, modules: ArrayLike = 0, units: ArrayLike | None = None
) -> Work:
    """Forward and backward (with recomputation) compute of one layer for one micro-batch.

    A GEMM's backward is its input-gradient and weight-gradient GEMMs, flash attention's is
    :data:`ATTENTION_BACKWARD` times its forward, an elementwise pass's twice its forward. Full
    recomputation (``recompute`` 2) runs the forward again, selective (1) the attention core; outside
    full, each of ``modules`` (:attr:`~commodel.workloads.layout.Layout.recompute_modules`) runs its
    kernels' forward again.
    """
    fwd = bwd = weights = mem = launches = 0.0
    by_role = {(role, p): 0.0 for role in ("column", "row") for p in ("fwd", "dgrad", "fwd_hbm", "dgrad_hbm")}
    for kernel, count, role in lk.gemms:
        f, m, hbm = timed(gpu, kernel, units)
        dgrad, wgrad = (timed(gpu, b, units) for b in gemm_backward(kernel))
        fwd, bwd, weights = fwd + count * f, bwd + count * (dgrad[0] + wgrad[0]), weights + count * wgrad[0]
        mem, launches = mem + count * (m + dgrad[1] + wgrad[1]), launches + 3 * count
        if role in ("column", "row"):
            for key, value in (("fwd", f), ("dgrad", dgrad[0]), ("fwd_hbm", hbm), ("dgrad_hbm", dgrad[2])):
                by_role[role, key] = by_role[role, key] + count * value
    attn = 0.0
    for kernel, count in lk.attention:
        f, m, _ = timed(gpu, kernel, units)
        if kernel.shape is not None:  # unfused attention's batched GEMMs
            (b1, m1, _), (b2, m2, _) = (timed(gpu, b, units) for b in gemm_backward(kernel))
            b_time, b_mem, b_launches = b1 + b2, m1 + m2, 2.0
        elif kernel.name == "attention":
            b_time, b_mem, b_launches = timed(gpu, attention_backward(kernel), units)[0], 0.0, 1.0
        else:
            b_time, b_mem, b_launches = 2 * f, 2 * m, 1.0
        attn, fwd, bwd = attn + count * f, fwd + count * f, bwd + count * b_time
        mem, launches = mem + count * (m + b_mem), launches + count * (1 + b_launches)
    for kernel, forward, backward in lk.elementwise:
        f, m, _ = timed(gpu, kernel, units)
        fwd, bwd = fwd + forward * f, bwd + backward * f
        mem, launches = mem + (forward + backward) * m, launches + forward + backward
    remade = 0.0
    for name, kernels in lk.remade.items():
        again = has_module(modules, name)
        if np.any(again):  # priced only where some layout recomputes the module
            remade = remade + again * sum(count * timed(gpu, kernel, units)[0] for kernel, count in kernels)
    recompute_s = np.where(recompute == 2, fwd, np.where(recompute == 1, attn, 0.0) + remade)
    return Work(
        fwd,
        bwd + recompute_s,
        weights,
        attn,
        mem,
        launches,
        reduce_fwd_s=by_role["row", "fwd"],
        gather_fwd_s=by_role["column", "fwd"],
        reduce_bwd_s=by_role["column", "dgrad"],
        gather_bwd_s=by_role["row", "dgrad"],
        reduce_fwd_hbm_s=by_role["row", "fwd_hbm"],
        reduce_bwd_hbm_s=by_role["column", "dgrad_hbm"],
    )


def window(full: Work, part: Work, which: str) -> Window:
    """Overlap window over the forward (``fwd``), backward (``bwd``) or ``both`` passes of one layer."""
    pick = {"fwd": lambda w: w.fwd_s, "bwd": lambda w: w.bwd_s, "both": lambda w: w.total_s}[which]
    compute = pick(full)
    share = np.divide(compute, full.total_s, out=np.zeros_like(compute), where=full.total_s > 0)
    kernel = np.divide(full.total_s, full.launches, out=np.zeros_like(compute), where=full.launches > 0)
    return Window(compute, pick(part), full.memory_bound_s * share, kernel)


def repeat(window: Window, factor: ArrayLike) -> Window:
    """The same window repeated ``factor`` times (a stage of several layers)."""
    f = np.asarray(factor, dtype=float)
    return Window(window.compute_s * f, window.partitioned_s * f, window.memory_bound_s * f, window.kernel_s)


def layer_work_of(
    model: Transformer,
    gpu: GPU,
    x: Layout,
    recipe: Precision,
    attention_impl: str,
    units: ArrayLike | None = None,
    shared_experts: bool = False,
) -> Work:
    """:func:`layer_work` of every layout in ``x``, computed once per distinct layer shape; with
    ``shared_experts``, of the layer's shared experts alone (nothing without them)."""

    def work(T, mb, seq, tp, cp, ep, sp, recompute, modules, load, etp, sms):
        lk = layer_kernels(model, T, mb, seq, tp, cp, ep, sp, recipe, attention_impl, load, etp)
        if shared_experts:
            lk = lk.shared_experts or LayerKernels([], [], [], {})
        return layer_work(gpu, lk, recompute, modules, sms)

    sms = gpu.compute_units.value if units is None else units
    return on_unique(
        work,
        x.tokens,
        x.micro_batch,
        x.seq,
        x.tp,
        x.cp,
        x.ep,
        x.sequence_parallel,
        x.recompute,
        x.recompute_modules,
        x.busiest_expert_rank,
        x.expert_tp,
        sms,
    )


def layer_window(
    model: Transformer, cluster: Cluster, x: Layout, comm_ctas: ArrayLike, recipe: str = "bf16"
) -> Window:
    """The overlap window of one layer's forward and backward for one micro-batch, with the same
    kernels also priced on the SMs a collective of ``comm_ctas`` CTAs leaves free."""
    units = cluster.gpu.compute_units.value - np.asarray(comm_ctas, dtype=float)
    mix = precision(recipe)
    full = layer_work_of(model, cluster.gpu, x, mix, "flash")
    return window(full, layer_work_of(model, cluster.gpu, x, mix, "flash", units), "both")
