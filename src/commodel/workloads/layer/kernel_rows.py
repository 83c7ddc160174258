"""One layer's kernels as a person reads them: a row per kernel with its shape, roofline bound and
rates (:func:`kernel_table`), as ``commodel train --kernels`` and ``commodel serve --kernels`` print
them."""

from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike

from commodel.compute.kernels import Kernel
from commodel.compute.precision import Precision
from commodel.compute.roofline import kernel_time
from commodel.hardware.schema import GPU
from commodel.workloads.layer.kernels import layer_kernels
from commodel.workloads.layer.work import priced_kernels
from commodel.workloads.model.schema import Transformer
from commodel.workloads.parallel.layout import Layout


def kernel_table(
    model: Transformer, gpu: GPU, x: Layout, recipe: Precision, attention_impl: str = "flash"
) -> list[dict[str, object]]:
    """One row per kernel of one (average) layer and micro-batch of the single layout ``x``: the
    forward call's :func:`kernel_row`, calls per layer (``forward``, ``backward``; a MoE model's
    expert kernels weighed by the share of MoE layers) and the forward and backward milliseconds per
    layer. The rows add up to :func:`layer_work_of`'s forward and backward, recomputation aside."""
    lk = layer_kernels(model, x.tokens, x.micro_batch, x.seq, x.tp, x.cp, x.ep, x.sequence_parallel, recipe,
                       attention_impl, x.busiest_expert_rank, x.expert_tp, x.fp8_dispatch, x.flex,
                       x.permute_fusion, x.elementwise)  # fmt: skip
    return [
        {**kernel_row(gpu, e.kernel, e.fwd_s), "forward": first_design(e.forward), "backward": first_design(e.backward),
         "fwd_ms": 1e3 * first_design(e.forward) * first_design(e.fwd_s), "bwd_ms": 1e3 * first_design(e.backward) * first_design(e.bwd_s)}
        for e in priced_kernels(gpu, lk)
    ]  # fmt: skip


def first_design(value: ArrayLike) -> float:
    """The first design's value of a per-design array (or a scalar), as a float."""
    return float(np.ravel(value)[0])


def kernel_row(gpu: GPU, kernel: Kernel, time: ArrayLike) -> dict[str, object]:
    """What a kernel table prints of the first design's ``kernel`` priced at ``time`` seconds a call
    (:func:`timed`): what it computes, its shape (GEMMs: ``m x n x k`` and how many in a grouped
    launch), dtype, GFLOP, MB of HBM traffic, roofline ``bound`` (compute, with the special-function
    units' exponentials, memory, or the launch floor), achieved TFLOP/s and GB/s; a GEMM's split-K
    factor where it has one (:func:`~commodel.compute.roofline.split_k`; its MB count the partial sums)."""
    roofline, seconds = kernel_time(gpu, kernel, launch=False), first_design(time)
    split = first_design(roofline.split_k)
    if first_design(roofline.time_s) < seconds:
        bound = "launch"
    else:
        bound = "memory" if first_design(roofline.memory_s) >= first_design(roofline.compute_s) else "compute"
    shape = ""
    if kernel.shape is not None:
        m, n, depth, b = (first_design(v) for v in kernel.shape)
        shape = f"{m:.0f} x {n:.0f} x {depth:.0f}" + (f" ({b:.0f} grouped)" if b > 1 else "")
        shape += f" (split-K {split:.0f})" if split > 1 else ""
    flops, traffic = first_design(kernel.flops), first_design(roofline.traffic)
    return {
        "kernel": kernel.label or kernel.name, "shape": shape, "dtype": kernel.dtype, "gflop": flops / 1e9,
        "mb": traffic / 1e6, "bound": bound, "tflops": flops / seconds / 1e12, "gbps": traffic / seconds / 1e9,
    }  # fmt: skip
