"""One training step of a transformer on a cluster: where the time goes, vectorized over layouts.

The step composes the computation model (roofline per kernel), the collective model and the overlap
model; it derives nothing of its own but the schedule:

- **Per layer and micro-batch**: forward kernels, backward kernels (two GEMMs per forward GEMM, flash
  attention backward at 2.5x its forward, elementwise at 2x) and recomputation; tensor-parallel
  collectives (2 allreduces per layer and pass, or 2 allgathers + 2 reduce-scatters with sequence
  parallelism), expert-parallel all-to-alls (dispatch and combine), context-parallel ring exchanges
  of K and V, each exposed according to the overlap strategy.
- **Pipeline** (1F1B, optionally interleaved with ``vpp`` virtual stages, Narayanan et al. 2021):
  ``m x t_slowest + (pp - 1) / vpp x t_mean``; bubble fraction ``(pp - 1) / (vpp m + pp - 1)`` when
  balanced; activations and gradients cross stage boundaries as point-to-point sends.
- **Data parallelism**: gradients reduce (allreduce, or reduce-scatter then parameter allgather with
  ZeRO >= 1) behind the last micro-batch's backward; ZeRO-3 gathers parameters every micro-batch.
- **Optimizer**: Adam reads and writes :data:`ADAM_BYTES_PER_PARAM` bytes per local parameter.

Each kernel takes at least the GPU's launch overhead (the host issues kernels no faster than that).
Collectives are priced by NCCL-style tuning over the algorithms NCCL implements, on groups placed
tp-first (:mod:`commodel.workloads.layout`); all GPUs of a node communicate at once and share its NICs.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike

from commodel.comm.algorithms import BUSBW_FACTOR, library_algorithms
from commodel.comm.collectives import candidates, tune
from commodel.comm.fabric import Fabric, fabric_of
from commodel.compute.kernels import Kernel, gemm, gemm_backward
from commodel.compute.roofline import kernel_time, peak_flops
from commodel.errors import CommodelError, unknown
from commodel.hardware.cluster import Cluster
from commodel.hardware.schema import GPU
from commodel.overlap import Window, check_strategy, ctas, exposed
from commodel.workloads.layout import Layout
from commodel.workloads.memory import fits, memory_per_gpu, stage_parameters
from commodel.workloads.schema import Transformer
from commodel.workloads.transformer import (
    LayerKernels,
    bytes_per,
    layer_kernels,
    model_flops_per_token,
    recompute_flops_per_token,
)

#: Adam with fp32 master weights: read master, gradient, momentum, variance (16 B), write master,
#: momentum, variance and the bf16 copy (14 B), read the gradient again for the norm (4 B).
ADAM_BYTES_PER_PARAM = 34.0

#: Flash-attention backward runs five matmuls to the forward's two (Dao 2023): 2.5x the forward.
ATTENTION_BACKWARD = 2.5

#: Parameters per data-parallel gradient bucket (Megatron-LM's default bucket of 40 M parameters).
BUCKET_PARAMS = 40e6

BREAKDOWN = ("compute", "tp_comm", "cp_comm", "ep_comm", "pp_comm", "dp_comm", "bubble", "optimizer")


@dataclass(frozen=True)
class Work:
    """Compute of one layer and micro-batch on a given number of SMs: totals and their make-up.

    ``reduce_fwd_s``/``reduce_bwd_s``: GEMMs whose output is a tensor-parallel partial sum (row GEMMs
    forward, column GEMMs' input gradients backward); ``gather_fwd_s``/``gather_bwd_s``: GEMMs that
    consume gathered input (column forward, row input gradients backward); ``reduce_*_hbm_s``: the
    roofline memory term of the reducing GEMMs (what shared HBM bandwidth would stretch).
    """

    fwd_s: np.ndarray
    bwd_s: np.ndarray
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


def _timed(gpu: GPU, kernel: Kernel, units: ArrayLike | None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(time, memory-bound time, HBM time) of a kernel; no kernel is shorter than a launch.

    HBM time is the roofline's memory term (bytes / achievable bandwidth), bound or not.
    """
    r = kernel_time(gpu, kernel, launch=False, units=units)
    time = np.maximum(r.time_s, gpu.launch_overhead.value)
    return time, np.where(r.memory_s >= r.compute_s, time, 0.0), r.memory_s


def layer_work(gpu: GPU, lk: LayerKernels, recompute: np.ndarray, units: ArrayLike | None = None) -> Work:
    """Forward and backward (with recomputation) compute of one layer for one micro-batch.

    A GEMM's backward is its input-gradient and weight-gradient GEMMs, flash attention's is
    :data:`ATTENTION_BACKWARD` times its forward, an elementwise pass's twice its forward.
    """
    fwd = bwd = mem = launches = 0.0
    by_role = {(role, p): 0.0 for role in ("column", "row") for p in ("fwd", "dgrad", "fwd_hbm", "dgrad_hbm")}
    for kernel, count, role in lk.gemms:
        f, m, hbm = _timed(gpu, kernel, units)
        dgrad, wgrad = (_timed(gpu, b, units) for b in gemm_backward(kernel))
        fwd, bwd = fwd + count * f, bwd + count * (dgrad[0] + wgrad[0])
        mem, launches = mem + count * (m + dgrad[1] + wgrad[1]), launches + 3 * count
        if role in ("column", "row"):
            for key, value in (("fwd", f), ("dgrad", dgrad[0]), ("fwd_hbm", hbm), ("dgrad_hbm", dgrad[2])):
                by_role[role, key] = by_role[role, key] + count * value
    attn = 0.0
    for kernel in lk.attention:
        f, m, _ = _timed(gpu, kernel, units)
        if kernel.shape is not None:  # unfused attention's batched GEMMs
            (b1, m1, _), (b2, m2, _) = (_timed(gpu, b, units) for b in gemm_backward(kernel))
            b_time, b_mem, b_launches = b1 + b2, m1 + m2, 2.0
        else:
            factor = ATTENTION_BACKWARD if kernel.name == "attention" else 2.0
            b_time, b_mem, b_launches = factor * f, factor * m, 1.0
        attn, fwd, bwd = attn + f, fwd + f, bwd + b_time
        mem, launches = mem + m + b_mem, launches + 1 + b_launches
    for kernel, count in lk.elementwise:
        f, m, _ = _timed(gpu, kernel, units)
        fwd, bwd, mem, launches = (
            fwd + count * f,
            bwd + 2 * count * f,
            mem + 3 * count * m,
            launches + 2 * count,
        )
    recompute_s = np.where(recompute == 2, fwd, np.where(recompute == 1, attn, 0.0))
    return Work(
        fwd,
        bwd + recompute_s,
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


def _window(full: Work, part: Work, which: str) -> Window:
    """Overlap window over the forward, backward or both passes of one layer."""
    pick = {"fwd": lambda w: w.fwd_s, "bwd": lambda w: w.bwd_s, "both": lambda w: w.total_s}[which]
    compute = pick(full)
    share = np.divide(compute, full.total_s, out=np.zeros_like(compute), where=full.total_s > 0)
    kernel = np.divide(full.total_s, full.launches, out=np.zeros_like(compute), where=full.launches > 0)
    return Window(compute, pick(part), full.memory_bound_s * share, kernel)


def _scale(window: Window, factor: ArrayLike) -> Window:
    """The same window repeated ``factor`` times (a stage of several layers)."""
    f = np.asarray(factor, dtype=float)
    return Window(window.compute_s * f, window.partitioned_s * f, window.memory_bound_s * f, window.kernel_s)


@dataclass(frozen=True)
class Group:
    """Where a communication group sits: ``ranks`` GPUs, ``per_node`` of them in each node."""

    ranks: np.ndarray
    per_node: np.ndarray

    @property
    def nodes(self) -> np.ndarray:
        return self.ranks / self.per_node

    @property
    def spans_nodes(self) -> np.ndarray:
        return self.nodes > 1


def group(ranks: ArrayLike, stride: ArrayLike, gpus_per_node: int) -> Group:
    """A group of ``ranks`` whose members are ``stride`` ranks apart (tp-first rank order)."""
    ranks = np.asarray(ranks, dtype=float)
    per_node = np.clip(np.floor(gpus_per_node / np.asarray(stride, dtype=float)), 1, ranks)
    return Group(ranks, per_node)


def shared_nics(fab: Fabric) -> Fabric:
    """The fabric as one of many concurrent groups sees it: every GPU of a node communicates at once,
    so a group with g GPUs in a node gets g / gpus_per_node of the node's NIC bandwidth."""
    per_gpu = fab.nics_per_node * fab.nic_Bps / fab.gpus_per_node
    return dataclasses.replace(fab, nic_Bps=per_gpu, nics_per_node=fab.gpus_per_node)


def collective(op: str, size: ArrayLike, where: Group, fab: Fabric) -> tuple[np.ndarray, np.ndarray]:
    """(time, per-GPU link bytes/s) of ``op`` on ``size`` bytes over a group, NCCL-tuned."""
    pairs = candidates(op, fab, library_algorithms(op, "nccl", fab))
    time, _, _ = tune(op, size, where.ranks, where.nodes, fab, pairs)
    busbw = np.divide(size, time, out=np.zeros_like(time), where=time > 0) * BUSBW_FACTOR[op](where.ranks)
    return time, busbw


def _domain(fab: Fabric, where: Group) -> np.ndarray:
    """Which CTA budget a group's collective uses: the node's topology, or the network."""
    return np.where(where.spans_nodes, "network", fab.topology)


def _in_switch(fab: Fabric, where: Group) -> np.ndarray:
    return (fab.nvls_Bps is not None) & ~where.spans_nodes


#: Tensor-parallel communication mechanisms: ``none`` (collectives after/before their GEMMs, NCCL's
#: choice of algorithm, NVLS where the switch reduces), ``t3`` (Pati et al., ASPLOS'24: the producer
#: GEMM's tiles feed a ring reduce-scatter as they are written, by DMA, reduced in memory; gathers stay
#: exposed) and ``cais`` (compute-aware in-switch: tiles are reduced by the NVLink switch as they are
#: produced and gathers are multicast into the consumer GEMM's tiles; needs NVLS).
TP_OVERLAP = ("none", "t3", "cais")

#: One GEMM output tile (128 x 256 bf16 = 64 KiB): the unit a fused mechanism hands to the network.
TILE_BYTES = 128 * 256 * 2


def _forced(op: str, algo: str, size: ArrayLike, where: Group, fab: Fabric) -> tuple[np.ndarray, np.ndarray]:
    """(time, per-GPU link bytes/s) of ``op`` with one algorithm (any protocol)."""
    time, _, _ = tune(op, size, where.ranks, where.nodes, fab, candidates(op, fab, (algo,)))
    busbw = np.divide(size, time, out=np.zeros_like(time), where=time > 0) * BUSBW_FACTOR[op](where.ranks)
    return time, busbw


def _fused(compute: np.ndarray, comm: np.ndarray, tail: np.ndarray, slow: np.ndarray) -> np.ndarray:
    """Time a collective adds when fused into ``compute`` tile by tile: it streams behind the tiles,
    slows them by ``slow`` (shared HBM), and ends ``tail`` after the last tile."""
    return np.maximum(np.maximum(comm, compute * slow) + tail - compute, 0.0)


def tensor_parallel_exposed(
    mechanism: str, work: Work, act: np.ndarray, where: Group, fab: Fabric, x: Layout, hbm: float
) -> np.ndarray:
    """Exposed tensor-parallel communication of one layer and micro-batch (all passes).

    Per pass, two reductions (reduce-scatter with sequence parallelism, else allreduce) follow their
    producer GEMMs, and with sequence parallelism two allgathers precede their consumer GEMMs. Full
    recomputation repeats the forward pass's communication.
    """
    if mechanism not in TP_OVERLAP:
        raise unknown("tensor-parallel overlap", mechanism, TP_OVERLAP)
    sp = x.sequence_parallel
    passes = [(work.reduce_fwd_s, work.gather_fwd_s), (work.reduce_bwd_s, work.gather_bwd_s)]
    passes += [(work.reduce_fwd_s * (x.recompute == 2), work.gather_fwd_s * (x.recompute == 2))]
    repeats = [1.0, 1.0, np.where(x.recompute == 2, 1.0, 0.0)]
    ag, _ = collective("allgather", act, where, fab)
    gathers = np.where(sp, 2 * ag, 0.0)
    if mechanism == "none":
        rs, _ = collective("reducescatter", act, where, fab)
        ar, _ = collective("allreduce", act, where, fab)
        per_pass = np.where(sp, 2 * rs, 2 * ar) + gathers
        return per_pass * sum(repeats)
    tile = TILE_BYTES * x.tp
    if mechanism == "t3":
        # Ring reduce-scatter by DMA; allreduce = reduce-scatter + an exposed allgather. Each GPU's HBM
        # serves 3 bytes per byte reduced (read the tile, receive a partial, read-modify-write the sum),
        # which stretches the producer GEMMs' memory term: slow = max(C, hbm B / (B - r)) / C.
        rs, rs_bw = _forced("reducescatter", "ring", act, where, fab)
        tail, _ = _forced("reducescatter", "ring", tile, where, fab)
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
            total = total + r * (_fused(producer, 2 * rs, tail, slow) + 2 * ag)
        return np.where(where.ranks > 1, total, 0.0)
    if fab.nvls_Bps is None:
        raise CommodelError("cais needs a switch that reduces in the network (NVLS); this system has none")
    rs, _ = _forced("reducescatter", "nvls", act, where, fab)
    ar, _ = _forced("allreduce", "nvls", act, where, fab)
    reduce = np.where(sp, 2 * rs, 2 * ar)
    tail, _ = _forced("allreduce", "nvls", tile, where, fab)
    total = 0.0
    for (producer, consumer), r in zip(passes, repeats, strict=True):
        fused = _fused(producer, reduce, tail, np.ones_like(producer))
        fused = fused + np.where(sp, _fused(consumer, gathers, tail, np.ones_like(consumer)), 0.0)
        total = total + r * fused
    return np.where(where.ranks > 1, total, 0.0)


def layer_window(
    model: Transformer, cluster: Cluster, x: Layout, comm_ctas: ArrayLike, dtype: str = "bf16"
) -> Window:
    """The overlap window of one layer's forward and backward for one micro-batch, with the same
    kernels also priced on the SMs a collective of ``comm_ctas`` CTAs leaves free."""
    lk = layer_kernels(model, x.tokens, x.micro_batch, x.seq, x.tp, x.cp, x.ep, x.sequence_parallel, dtype)
    units = cluster.gpu.compute_units.value - np.asarray(comm_ctas, dtype=float)
    return _window(
        layer_work(cluster.gpu, lk, x.recompute), layer_work(cluster.gpu, lk, x.recompute, units), "both"
    )


def train_step(
    model: Transformer,
    cluster: Cluster,
    x: Layout,
    dtype: str = "bf16",
    strategy: str = "serial",
    attention_impl: str = "flash",
    tp_overlap: str = "none",
) -> dict[str, np.ndarray]:
    """Step time, throughput, memory and the breakdown of one training step for every layout in ``x``.

    Returns arrays: ``step_time_s, tokens_per_s, tflops_per_gpu`` (model FLOPs, the MFU convention),
    ``hw_tflops_per_gpu`` (including recomputation), ``mfu, memory_per_gpu_bytes, fits`` and the
    breakdown ``compute_s, tp_comm_s, cp_comm_s, ep_comm_s, pp_comm_s, dp_comm_s, bubble_s,
    optimizer_s`` (seconds per step on the slowest stage, summing to ``step_time_s``).
    """
    check_strategy(strategy)
    gpu, gpn = cluster.gpu, cluster.gpus_per_node
    fab = shared_nics(fabric_of(cluster))
    units = gpu.compute_units.value
    size = bytes_per(dtype)
    hbm = gpu.memory_bandwidth.value * gpu.memory_efficiency.value
    T, h = x.tokens, model.hidden
    lk = layer_kernels(
        model, T, x.micro_batch, x.seq, x.tp, x.cp, x.ep, x.sequence_parallel, dtype, attention_impl
    )
    full = layer_work(gpu, lk, x.recompute)
    overlapping = strategy in ("sm-partition", "in-network")

    def partitioned(k: np.ndarray) -> Work:
        return layer_work(gpu, lk, x.recompute, units - k) if overlapping else full

    tp = group(x.tp, 1, gpn)
    cp = group(x.cp, x.tp, gpn)
    ep = group(x.ep, x.tp, gpn)
    dp = group(x.dp * x.cp, x.tp, gpn)
    edp = group(x.dp * x.cp / x.ep, x.tp * x.ep, gpn)
    pp_nodes = np.where(x.tp * x.cp * x.dp >= gpn, 2.0, 1.0)
    pp = Group(np.full_like(pp_nodes, 2.0), 2.0 / pp_nodes)

    # Tensor parallelism: its mechanism decides what is exposed; ideal overlap hides it behind the layer.
    act = T * h * size
    tp_comm = tensor_parallel_exposed(tp_overlap, full, act, tp, fab, x, hbm)
    # Expert parallelism: dispatch and combine all-to-alls per MoE layer and pass.
    moe_share = model.moe_layers / model.layers
    top_k = model.moe.top_k if model.moe else 0
    a2a, _ = collective("alltoall", T * top_k * h * size, ep, fab)
    ep_comm = moe_share * 4 * a2a
    if strategy == "ideal":
        tp_exposed = np.maximum(tp_comm - full.total_s, 0.0)
        ep_exposed = np.maximum(ep_comm - np.maximum(full.total_s - tp_comm, 0.0), 0.0)
    else:
        tp_exposed, ep_exposed = tp_comm, ep_comm
    # Context parallelism: ring attention exchanges K and V (cp - 1 steps), dK and dV backward.
    kv = 2 * T * np.maximum(model.n_kv_heads / x.tp, 1) * model.d_head * size
    ring, ring_bw = collective("sendrecv", kv, cp, fab)
    ring = np.where(x.cp > 1, ring, 0.0)
    cp_part = partitioned(np.full_like(T, ctas(strategy, "p2p")))
    attn_window = Window(full.attention_fwd_s, cp_part.attention_fwd_s, 0 * T, full.attention_fwd_s)
    ring_kw = {"traffic_Bps": 2 * ring_bw, "hbm_Bps": hbm, "calls": x.cp - 1}
    cp_exposed = exposed(strategy, attn_window, (x.cp - 1) * ring, **ring_kw)
    cp_exposed += exposed(strategy, _scale(attn_window, ATTENTION_BACKWARD), 2 * (x.cp - 1) * ring, **ring_kw)

    layer_time = full.total_s + tp_exposed + ep_exposed + cp_exposed
    # Logits (last stage): output GEMM forward and backward plus an fp32 cross-entropy pass.
    logits = gemm(T, model.vocab / x.tp, h, dtype)
    logits_s = sum(_timed(gpu, k, None)[0] for k in (logits, *gemm_backward(logits)))
    logits_s = logits_s + 3 * T * model.vocab / x.tp * 4 / hbm

    # Pipeline point-to-point: one activation forward, one gradient backward per micro-batch and chunk;
    # each tensor-parallel rank sends its 1/tp slice (sequence parallelism, or Megatron's scatter-gather).
    p2p, p2p_bw = collective("sendrecv", act / x.tp, pp, fab)
    p2p_comm = np.where(x.pp > 1, 2 * x.vpp * p2p, 0.0)
    stage_layers, last_layers = (
        np.ceil(model.layers / x.pp),
        np.where(x.pp > 1, np.floor(model.layers / x.pp), model.layers),
    )
    p2p_part = partitioned(np.full_like(T, ctas(strategy, "p2p")))
    mb_window = _scale(_window(full, p2p_part, "both"), stage_layers)
    pp_exposed = exposed(strategy, mb_window, p2p_comm, traffic_Bps=2 * p2p_bw, hbm_Bps=hbm, calls=2 * x.vpp)

    # Data parallelism and ZeRO.
    dense, experts = stage_parameters(model, x)
    k_dp = ctas(strategy, _domain(fab, dp), _in_switch(fab, dp))
    dp_part = partitioned(k_dp)
    grads = dense * size
    expert_grads = experts * size
    zero3 = x.zero == 3
    sharded = x.zero >= 1
    rs_dp, rs_bw = collective("reducescatter", grads, dp, fab)
    ar_dp, ar_bw = collective("allreduce", grads, dp, fab)
    ag_dp, ag_bw = collective("allgather", grads, dp, fab)
    rs_edp, _ = collective("reducescatter", expert_grads, edp, fab)
    ar_edp, _ = collective("allreduce", expert_grads, edp, fab)
    ag_edp, _ = collective("allgather", expert_grads, edp, fab)
    reduce_s = np.where(sharded, rs_dp + rs_edp, ar_dp + ar_edp)
    reduce_bw = np.where(sharded, rs_bw, ar_bw)
    gather_s = ag_dp + ag_edp
    dp_kw = {"hbm_Bps": hbm, "in_network": _in_switch(fab, dp)}
    buckets = np.ceil((dense + experts) / BUCKET_PARAMS)
    # ZeRO-3: gather parameters for forward and backward and reduce-scatter gradients every micro-batch.
    z3_comm = np.where(zero3, 2 * gather_s + reduce_s, 0.0)
    z3_window = _scale(_window(full, dp_part, "both"), stage_layers)
    z3_exposed = exposed(
        strategy, z3_window, z3_comm, traffic_Bps=2 * reduce_bw, calls=3 * stage_layers, **dp_kw
    )
    per_mb_exposed = pp_exposed + z3_exposed
    # ZeRO 0-2: reduce gradients behind the last micro-batch's backward ...
    bwd_window = _scale(_window(full, dp_part, "bwd"), stage_layers)
    end_reduce = np.where(zero3, 0.0, reduce_s)
    dp_exposed = exposed(strategy, bwd_window, end_reduce, traffic_Bps=2 * reduce_bw, calls=buckets, **dp_kw)
    # ... and with ZeRO 1-2 gather the updated parameters behind the next step's first forward.
    fwd_window = _scale(_window(full, dp_part, "fwd"), stage_layers)
    param_gather = np.where(sharded & ~zero3, gather_s, 0.0)
    dp_exposed = dp_exposed + exposed(
        strategy, fwd_window, param_gather, traffic_Bps=2 * ag_bw, calls=buckets, **dp_kw
    )

    # Optimizer on the local (ZeRO-sharded) parameters.
    local = dense / np.where(sharded, x.dp * x.cp, 1) + experts / np.where(sharded, x.dp * x.cp / x.ep, 1)
    optimizer = local * ADAM_BYTES_PER_PARAM / hbm

    # Pipeline schedule: slowest stage (most layers, or fewer layers plus the logits) and the mean.
    stage_a = stage_layers * layer_time + per_mb_exposed
    stage_b = last_layers * layer_time + logits_s + per_mb_exposed
    last_is_slowest = (x.pp == 1) | (stage_b >= stage_a)
    slow_layers = np.where(last_is_slowest, last_layers, stage_layers)
    slow_logits = np.where(last_is_slowest, logits_s, 0.0)
    slowest = np.maximum(stage_a, stage_b)
    mean = (model.layers * layer_time + logits_s) / x.pp + per_mb_exposed
    m = x.microbatches
    bubble = (x.pp - 1) / x.vpp * mean
    parts = {
        "compute": m * (slow_layers * full.total_s + slow_logits),
        "tp_comm": m * slow_layers * tp_exposed,
        "cp_comm": m * slow_layers * cp_exposed,
        "ep_comm": m * slow_layers * ep_exposed,
        "pp_comm": m * pp_exposed,
        "dp_comm": m * z3_exposed + dp_exposed,
        "bubble": bubble,
        "optimizer": optimizer,
    }
    step = m * slowest + bubble + dp_exposed + optimizer

    tokens = x.global_batch * x.seq
    model_flops = tokens * model_flops_per_token(model, x.seq)
    hw_flops = model_flops + tokens * recompute_flops_per_token(model, x.seq, x.recompute)
    gpus = x.gpus
    memory = memory_per_gpu(model, x, attention_impl)
    result = {
        "step_time_s": step,
        "tokens_per_s": tokens / step,
        "tflops_per_gpu": model_flops / (step * gpus) / 1e12,
        "hw_tflops_per_gpu": hw_flops / (step * gpus) / 1e12,
        "mfu": model_flops / (step * gpus) / peak_flops(gpu, dtype),
        "memory_per_gpu_bytes": memory["total"],
        "fits": fits(memory["total"], gpu.memory_capacity.value),
    }
    result.update({f"{name}_s": value for name, value in parts.items()})
    return {k: np.broadcast_to(v, np.shape(step)) for k, v in result.items()}
