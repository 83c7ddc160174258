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
  balanced; activations and gradients cross stage boundaries as point-to-point sends; the first and
  last stages' layers as stated (:func:`commodel.workloads.layout.stage_split`), the last with the
  logits and any multi-token prediction modules. **DualPipe** (DeepSeek-AI 2024): each GPU holds
  stage i and stage pp - 1 - i, two pipelines run in opposite directions with half the micro-batches
  each, and the bubble is ``(pp/2 - 1)(F&B + B - 3W)`` (DeepSeek-V3 report, Table 2; W: the
  weight-gradient GEMMs the schedule defers); the two copies of the weights double a GPU's model
  state and gradient traffic, and ``pp + 1`` micro-batches' activations are in flight. The warm-up
  and cool-down that pair no forward with a backward are taken as 1F1B's (``pp - 1`` micro-batches;
  assumed).
- **Data parallelism**: gradients reduce (allreduce, or reduce-scatter then parameter allgather with
  ZeRO >= 1) behind the last micro-batch's backward and the first one's forward, each interleaved
  model chunk's share as its work ends (:func:`chunked_exposed`); ZeRO-3 gathers parameters every
  micro-batch.
- **Optimizer**: Adam reads and writes :data:`ADAM_BYTES_PER_PARAM` bytes per local parameter, 8 fewer
  with its moments in BF16 (read and written at 2 B instead of 4).
- **Fitting in memory** (``--recompute auto``): the fewest layers recomputed or offloaded to CPU
  memory, whichever costs less (:mod:`commodel.workloads.activation_fit`).

Each kernel takes at least the GPU's launch overhead (the host issues kernels no faster than that).
Collectives are priced by NCCL-style tuning over the algorithms NCCL implements, on groups placed
tp-first (:mod:`commodel.workloads.layout`); all GPUs of a node communicate at once and share its NICs.
"""

from __future__ import annotations

import dataclasses

import numpy as np
from numpy.typing import ArrayLike

from commodel.comm.fabric import Fabric, fabric_of
from commodel.compute.kernels import gemm, gemm_backward
from commodel.compute.precision import Precision, precision
from commodel.compute.roofline import peak_flops
from commodel.hardware.cluster import Cluster
from commodel.overlap import STRATEGIES, Window, ctas, exposed, overlapping
from commodel.vectorize import on_unique, per_distinct
from commodel.workloads.activation_fit import fit_activations, offload_exposed
from commodel.workloads.groups import Group, collective, domain, group, in_switch, job_domain, shared_nics
from commodel.workloads.layer_work import (
    ATTENTION_BACKWARD,
    Work,
    either,
    layer_work_of,
    repeat,
    timed,
    window,
)
from commodel.workloads.layout import AUTO, Layout, has_module, stage_split
from commodel.workloads.memory import (
    OPTIMIZER_BYTES,
    fits,
    gradient_bytes,
    memory_parts,
    memory_with_microbatches,
    optimizer_bytes,
    usable_memory,
)
from commodel.workloads.moe_dispatch import DEEPEP_SMS, DISPATCH_BYTES, high_throughput_s
from commodel.workloads.schema import Transformer
from commodel.workloads.tensor_parallel import tensor_parallel_exposed
from commodel.workloads.transformer import (
    attention_dims,
    bytes_per,
    dispatched_tokens,
    model_flops_per_token,
    recompute_flops_per_token,
    recomputed_pairs,
    routed_copies,
    tensor_parallel_mlps,
)

#: Adam with fp32 master weights: read master, gradient, momentum, variance (16 B), write master,
#: momentum, variance and the bf16 copy (14 B), read the gradient again for the norm (4 B).
ADAM_BYTES_PER_PARAM = 34.0

#: Parameters per data-parallel gradient bucket, and per data-parallel rank: Megatron-Core's default
#: bucket, ``max(40 M, 1 M x dp)`` (``DistributedDataParallel``, 0.15: larger buckets at large dp
#: keep NCCL's ring chunks bandwidth-bound).
BUCKET_PARAMS, BUCKET_PARAMS_PER_RANK = 40e6, 1e6

BREAKDOWN = (
    "compute", "tp_comm", "cp_comm", "ep_comm", "pp_comm", "dp_comm", "offload", "bubble", "optimizer",
)  # fmt: skip

#: How the expert all-to-alls run: on the critical path (Megatron's default), under another
#: micro-batch's compute (``1f1b``, ``--overlap-moe-expert-parallel-comm``: the 1F1B steady state runs
#: one micro-batch's forward with another's backward, each one's dispatch and combine under the other's
#: attention and expert GEMMs), or beside the same layer's shared experts (``shared-experts``,
#: ``--moe-shared-expert-overlap``: on a second stream, in every micro-batch, forward and backward).
EP_OVERLAP = ("none", "1f1b", "shared-experts")

#: Outputs that add up over a stage's layers, and so mix linearly when some layers are recomputed.
_LINEAR = ("step_time_s", *(f"{name}_s" for name in BREAKDOWN))


def chunked_exposed(
    strategy: str | np.ndarray,
    layer: Window,
    stage_layers: np.ndarray,
    x: Layout,
    comm_s: np.ndarray,
    traffic_Bps: np.ndarray,
    buckets: np.ndarray,
    **kwargs: object,
) -> np.ndarray:
    """Seconds a data-parallel collective of ``comm_s`` (the whole stage's parameters, in
    ``buckets`` launches) adds to a step, each of the ``vpp`` model chunks' share launched as that
    chunk's work is done.

    Megatron-Core's interleaved schedule reduces a chunk's gradients at its last backward and gathers
    a chunk's parameters one chunk ahead of its first forward (``schedules.py``, 0.15), and the
    chunks take their turns ``pp`` chunk-passes apart (``pp L / vpp`` layers of a stage of ``L``).
    Queued on one stream, chunk ``k``'s share and those after it must fit in ``k`` such gaps and
    the last chunk's own pass, so the exposure is the larger of two ends (it is linear in ``k``): the
    last chunk's share ``comm / vpp`` behind its ``L / vpp`` layers, and all of ``comm`` behind
    ``(1 + (vpp - 1) pp) L / vpp`` layers. Without interleaving (vpp 1) both are ``comm`` behind
    the stage's ``L`` layers."""

    def behind(layers: np.ndarray, share: np.ndarray) -> np.ndarray:
        """Exposure of ``share`` of the collective behind ``layers`` layers' passes."""
        comm, calls = share * comm_s, share * buckets
        return exposed(strategy, repeat(layer, layers), comm, traffic_Bps=traffic_Bps, calls=calls, **kwargs)

    chunk = stage_layers / x.vpp
    return np.maximum(behind(chunk, 1 / x.vpp), behind(chunk * (1 + (x.vpp - 1) * x.pp), 1.0))


def per_microbatch(
    model: Transformer,
    cluster: Cluster,
    x: Layout,
    recipe: Precision,
    strategy: str | np.ndarray,
    attention_impl: str,
    tp_overlap: str,
    ep_overlap: str = "none",
) -> dict[str, np.ndarray]:
    """Everything that does not depend on the number of micro-batches: per-layer and per-stage times
    of one micro-batch, the end-of-step data-parallel and optimizer times, and memory parts."""
    gpu = cluster.gpu
    fab = shared_nics(fabric_of(cluster))
    gpn = job_domain(x.gpus, fab.domain)
    units = gpu.compute_units.value
    size = bytes_per(recipe.other)  # activations and gradients cross the wire in BF16
    hbm = gpu.memory_bandwidth.value * gpu.memory_efficiency.value
    T, h = x.tokens, model.hidden
    full = layer_work_of(model, gpu, x, recipe, attention_impl)
    partitioning = overlapping(strategy)
    on_sms: dict[bytes, Work] = {}

    def partitioned(k: np.ndarray) -> Work:
        """The layer's compute on the SMs a collective of ``k`` CTAs leaves where the strategy
        partitions them (priced once per ``k``), on all SMs elsewhere."""
        if not np.any(partitioning):
            return full
        key = np.asarray(k, dtype=float).tobytes()
        if key not in on_sms:
            on_sms[key] = layer_work_of(model, gpu, x, recipe, attention_impl, units - k)
        return either(partitioning, on_sms[key], full)

    tp = group(x.tp, 1, gpn)
    cp = group(x.cp, x.tp, gpn)
    dp = group(x.dp * x.cp, x.tp, gpn)
    # The expert grid, etp fastest, folded over the same tp x cp x dp ranks (Megatron-Core).
    etp = group(x.expert_tp, 1, gpn)
    ep = group(x.ep, x.expert_tp, gpn)
    edp = group(x.expert_dp, x.expert_tp * x.ep, gpn)
    pp_nodes = np.where(x.tp * x.cp * x.dp >= gpn, 2.0, 1.0)
    pp = Group(np.full_like(pp_nodes, 2.0), 2.0 / pp_nodes)

    # Tensor parallelism: its mechanism decides what is exposed; ideal overlap hides it behind the layer.
    act = T * h * size
    pairs = 1 + tensor_parallel_mlps(model)
    again = recomputed_pairs(model, x.recompute, x.recompute_modules)
    tp_comm = tensor_parallel_exposed(tp_overlap, full, act, tp, fab, x, hbm, units, pairs, again)
    # Expert parallelism: dispatch and combine all-to-alls per MoE layer and pass, as long as the
    # busiest rank's share takes. Each GPU dispatches the tokens it holds (its sequence shard with
    # sequence parallelism); with expert tensor parallelism (etp > 1) Megatron's dispatcher all-gathers
    # the received tokens over the etp group after the dispatch and reduce-scatters them before the
    # combine (the backward the reverse).
    moe_share = model.moe_layers / model.layers
    held = dispatched_tokens(T, x.tp, x.sequence_parallel)
    routed = routed_copies(model, held) * x.busiest_expert_rank * h  # elements
    a2a, a2a_bw = collective("alltoall", routed * size, ep, fab)
    # With FP8 dispatch (DeepSeek-V3 report, section 3.3.2) the all-to-alls towards the experts (the
    # forward dispatch, the gradient of the combine) carry FP8 with per-128 scales; combines stay BF16.
    towards = a2a
    if np.any(x.fp8_dispatch):
        fp8, _ = collective("alltoall", np.where(x.fp8_dispatch, routed * DISPATCH_BYTES, 0.0), ep, fab)
        towards = np.where(x.fp8_dispatch, fp8, a2a)
    if np.any(x.deepep):  # one copy per remote domain, forwarded over NVLink (moe_dispatch.py)
        tokens = held * x.busiest_expert_rank
        by_deepep = [
            high_throughput_s(model, cluster, fab, ep, tokens, np.where(in_fp8, DISPATCH_BYTES, size))
            for in_fp8 in (False, x.fp8_dispatch)
        ]
        a2a, towards = (
            np.where(x.deepep, fast, nccl) for fast, nccl in zip(by_deepep, (a2a, towards), strict=True)
        )
    gathered = np.where(x.sequence_parallel & (x.expert_tp > 1), routed * size * x.expert_tp, 0.0)
    tp_gather, _ = collective("allgather", gathered, etp, fab)
    tp_scatter, _ = collective("reducescatter", gathered, etp, fab)
    # Recomputing the MoE layer (in full, or ``--recompute-modules moe``) dispatches and combines its
    # forward again.
    ep_passes = 2 + ((x.recompute == 2) | has_module(x.recompute_modules, "moe"))
    ep_comm = moe_share * ep_passes * ((a2a + towards) + (tp_gather + tp_scatter))
    ideal = np.asarray(strategy, dtype=object) == "ideal"
    tp_exposed = np.where(ideal, np.maximum(tp_comm - full.total_s, 0.0), tp_comm)
    ep_exposed = np.where(ideal, np.maximum(ep_comm - np.maximum(full.total_s - tp_comm, 0.0), 0.0), ep_comm)
    # With 1F1B overlap the all-to-alls run beside another micro-batch's layer on the SMs they leave;
    # a micro-batch without a partner (pipeline warm-up and cool-down) pays ``ep_unpaired_s`` more.
    # With shared-expert overlap they run beside the layer's own shared experts, in every micro-batch.
    paired = unpaired = ep_exposed
    if ep_overlap != "none":  # the all-to-all kernels hold the library's CTAs, or the SMs stated
        sms = np.where(
            x.ep_sms > 0, x.ep_sms, np.where(x.deepep, DEEPEP_SMS, ctas(strategy, domain(fab, ep)))
        )
        ep_kw = {"traffic_Bps": 2 * a2a_bw, "hbm_Bps": hbm, "calls": 2 * ep_passes * moe_share}
        if ep_overlap == "1f1b":  # beside another micro-batch's layer
            beside = window(full, partitioned(sms), "both")
        else:  # beside this layer's shared experts, which every micro-batch has
            shared = layer_work_of(model, gpu, x, recipe, attention_impl, shared_experts=True)
            shared_part = shared
            if np.any(partitioning):
                on_fewer = layer_work_of(model, gpu, x, recipe, attention_impl, units - sms, True)
                shared_part = either(partitioning, on_fewer, shared)
            beside = window(shared, shared_part, "both")
        paired = np.minimum(exposed(strategy, beside, ep_comm, **ep_kw), ep_exposed)
        unpaired = paired if ep_overlap == "shared-experts" else ep_exposed
    # Context parallelism: ring attention exchanges K and V (cp - 1 steps), dK and dV backward.
    kv = T * np.maximum(model.n_kv_heads / x.tp, 1) * sum(attention_dims(model)) * size
    ring, ring_bw = collective("sendrecv", kv, cp, fab)
    cp_exposed = np.zeros_like(full.total_s)
    if np.any(x.cp > 1):
        ring = np.where(x.cp > 1, ring, 0.0)
        cp_part = partitioned(np.full_like(T, ctas(strategy, "p2p")))
        attn_window = Window(full.attention_fwd_s, cp_part.attention_fwd_s, 0 * T, full.attention_fwd_s)
        ring_kw = {"traffic_Bps": 2 * ring_bw, "hbm_Bps": hbm, "calls": x.cp - 1}
        cp_exposed = exposed(strategy, attn_window, (x.cp - 1) * ring, **ring_kw)
        cp_exposed += exposed(
            strategy, repeat(attn_window, ATTENTION_BACKWARD), 2 * (x.cp - 1) * ring, **ring_kw
        )

    layer_time = full.total_s + tp_exposed + paired + cp_exposed
    # The last stage's work besides its layers: the logits (output GEMM forward and backward plus an
    # fp32 cross-entropy pass), again for each multi-token prediction module with its 2h -> h
    # projection (DeepSeek-V3 report, section 2.2; its transformer layer counts as a layer).
    logits = gemm(T, model.vocab / x.tp, h, recipe.other)
    logits_s = sum(timed(gpu, k, None)[0] for k in (logits, *gemm_backward(logits)))
    logits_s = logits_s + 3 * T * model.vocab / x.tp * 4 / hbm
    end_s = logits_s
    if np.any(x.mtp_layers > 0):
        projection = gemm(T, h / x.tp, 2 * h, recipe.gemm)
        projection_s = sum(timed(gpu, k, None)[0] for k in (projection, *gemm_backward(projection)))
        end_s = end_s + x.mtp_layers * (logits_s + projection_s)

    # Pipeline point-to-point: one activation forward, one gradient backward per micro-batch and chunk;
    # each tensor-parallel rank sends its 1/tp slice (sequence parallelism, or Megatron's scatter-gather).
    p2p, p2p_bw = collective("sendrecv", np.where(x.pp > 1, act / x.tp, 0.0), pp, fab)
    p2p_comm = np.where(x.pp > 1, 2 * x.vpp * p2p, 0.0)
    first, middle, last = stage_split(model, x)
    stage_layers = np.maximum(np.maximum(first, middle), last + x.mtp_layers)  # the largest stage's
    p2p_part = partitioned(np.full_like(T, ctas(strategy, "p2p")))
    mb_window = repeat(window(full, p2p_part, "both"), stage_layers)
    pp_exposed = exposed(strategy, mb_window, p2p_comm, traffic_Bps=2 * p2p_bw, hbm_Bps=hbm, calls=2 * x.vpp)

    # Data parallelism and ZeRO.
    memory = memory_parts(model, x, attention_impl, recipe)
    dense, experts = memory.pop("dense_parameters"), memory.pop("expert_parameters")
    k_dp = ctas(strategy, domain(fab, dp), in_switch(fab, dp))
    dp_part = partitioned(k_dp)
    zero3 = x.zero == 3
    sharded = x.zero >= 1
    gathered = np.where(x.fp8_param_gather, recipe.gathered_bytes, size)  # bytes per parameter
    grad_size = gradient_bytes(x)
    reduce_s, reduce_bw, gather_s, ag_bw = gradient_sync(dense, grad_size, gathered, sharded, dp, fab)
    expert_reduce_s, _, expert_gather_s, _ = gradient_sync(experts, grad_size, gathered, sharded, edp, fab)
    reduce_s, gather_s = reduce_s + expert_reduce_s, gather_s + expert_gather_s
    dp_kw = {"hbm_Bps": hbm, "in_network": in_switch(fab, dp)}
    buckets = np.ceil((dense + experts) / np.maximum(BUCKET_PARAMS, BUCKET_PARAMS_PER_RANK * x.dp))
    # ZeRO-3: gather parameters for forward and backward and reduce-scatter gradients every micro-batch.
    z3_comm = np.where(zero3, 2 * gather_s + reduce_s, 0.0)
    z3_bytes = 2 * gather_s * ag_bw + reduce_s * reduce_bw  # per GPU: the HBM traffic is twice these
    z3_traffic = 2 * np.divide(z3_bytes, z3_comm, out=np.zeros_like(z3_comm), where=z3_comm > 0)
    z3_window = repeat(window(full, dp_part, "both"), stage_layers)
    z3_exposed = exposed(
        strategy, z3_window, z3_comm, traffic_Bps=z3_traffic, calls=3 * stage_layers, **dp_kw
    )
    # ZeRO 0-2: reduce gradients behind the last micro-batches' backward ...
    end_reduce = np.where(zero3, 0.0, reduce_s)
    dp_exposed = chunked_exposed(
        strategy, window(full, dp_part, "bwd"), stage_layers, x, end_reduce, 2 * reduce_bw, buckets, **dp_kw
    )
    # ... and with ZeRO 1-2 gather the updated parameters behind the next step's first forwards.
    param_gather = np.where(sharded & ~zero3, gather_s, 0.0)
    dp_exposed = dp_exposed + chunked_exposed(
        strategy, window(full, dp_part, "fwd"), stage_layers, x, param_gather, 2 * ag_bw, buckets, **dp_kw
    )

    # Optimizer on the local (ZeRO-sharded) parameters.
    local = dense / np.where(sharded, x.dp * x.cp, 1) + experts / np.where(sharded, x.expert_dp, 1)
    moments_saved = OPTIMIZER_BYTES - optimizer_bytes(x)  # BF16 moments: each read and written once
    optimizer = local * (ADAM_BYTES_PER_PARAM - 2 * moments_saved) / hbm

    # Offloading this layer's activations to CPU memory (what --recompute auto may choose instead).
    fwd_share = np.divide(full.fwd_s, full.total_s, out=np.zeros_like(full.total_s), where=full.total_s > 0)
    offload = offload_exposed(
        memory["layer_activations"],
        fwd_share * layer_time,
        (1 - fwd_share) * layer_time,
        cluster.host_offload_Bps,
    )

    return {
        "layer_s": layer_time,
        "layer_compute_s": full.total_s,
        # DualPipe's idle chunk is F&B + B - 3W (DeepSeek-V3 report, Table 2): F&B, a forward and a
        # backward chunk overlapped, as long as the two; B the full backward (with recomputation); W
        # the weight-gradient GEMMs, which the schedule defers into the bubble. Per layer, B - 3W:
        "dualpipe_extra_s": np.maximum(full.bwd_s - 3 * full.wgrad_s, -full.total_s),
        "tp_exposed_s": tp_exposed,
        "cp_exposed_s": cp_exposed,
        "ep_exposed_s": paired,
        "ep_unpaired_s": unpaired - paired,
        "end_s": end_s,
        "pp_exposed_s": pp_exposed,
        "z3_exposed_s": z3_exposed,
        "dp_exposed_s": dp_exposed,
        "optimizer_s": optimizer,
        "tp_domains": tp.nodes,
        "offload_layer_s": offload,
        **memory,  # bytes: weights, gradients, optimizer, ...
    }


#: The overlap strategies by code (:data:`~commodel.overlap.STRATEGIES`).
_STRATEGY_NAMES = np.asarray(STRATEGIES, dtype=object)

#: The layout fields a micro-batch's cost depends on: all but the global batch.
MICROBATCH_FIELDS = tuple(f.name for f in dataclasses.fields(Layout) if f.name != "global_batch")


def gradient_sync(
    params: np.ndarray,
    grad_bytes: ArrayLike,
    gathered_bytes: ArrayLike,
    sharded: np.ndarray,
    where: Group,
    fab: Fabric,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(reduce seconds, its per-GPU bytes/s, parameter gather seconds, its bytes/s) of the gradients
    of ``params`` parameters (``grad_bytes`` each) over a data-parallel group: an allreduce, or with a
    sharded optimizer (ZeRO >= 1) a reduce-scatter and an allgather of the updated parameters,
    ``gathered_bytes`` each (:attr:`~commodel.compute.precision.Precision.gathered_bytes` under FP8
    with ``fp8_param_gather``). Only what a layout runs is priced."""
    nbytes = params * grad_bytes
    rs, rs_bw = collective("reducescatter", np.where(sharded, nbytes, 0.0), where, fab)
    ar, ar_bw = collective("allreduce", np.where(sharded, 0.0, nbytes), where, fab)
    ag, ag_bw = collective("allgather", np.where(sharded, params * gathered_bytes, 0.0), where, fab)
    return np.where(sharded, rs, ar), np.where(sharded, rs_bw, ar_bw), ag, ag_bw


def train_step(
    model: Transformer,
    cluster: Cluster,
    x: Layout,
    dtype: str = "bf16",
    strategy: str | ArrayLike = "serial",
    attention_impl: str = "flash",
    tp_overlap: str = "none",
    ep_overlap: str = "none",
) -> dict[str, np.ndarray]:
    """Step time, throughput, memory and the breakdown of one training step for every layout in ``x``.

    Returns arrays: ``step_time_s, tokens_per_s, tflops_per_gpu`` (model FLOPs, the MFU convention),
    ``hw_tflops_per_gpu`` (including recomputation), ``mfu, memory_per_gpu_bytes, fits`` and the
    breakdown ``compute_s, tp_comm_s, cp_comm_s, ep_comm_s, pp_comm_s, dp_comm_s, offload_s,
    bubble_s, optimizer_s`` (seconds per step on the slowest stage, summing to ``step_time_s``), the
    slowest pipeline stage's excess over the mean (``stage_imbalance``: uneven layers, the logits
    and loss on the last stage), the shares of layers recomputed in full and whose activations are
    offloaded to CPU memory (``recompute_share``, ``offload_share``, and the ``offloaded_bytes`` per
    GPU; code 3 in ``x.recompute`` means *auto*:
    :func:`commodel.workloads.activation_fit.fit_activations`) and ``tp_domains``, the scale-up
    domains a tensor-parallel group spans (above 1 its collectives cross the scale-out network).
    ``strategy`` is one overlap strategy (:data:`~commodel.overlap.STRATEGIES`) or one per layout.
    Layouts that differ only in global batch share one :func:`per_microbatch` evaluation.
    """
    software = (attention_impl, tp_overlap, ep_overlap)
    auto = np.asarray(x.recompute) == AUTO
    mixed = auto | (np.asarray(x.offload_layers) > 0)
    if np.any(mixed):  # priced without and with full recomputation in one pass, then mixed
        shape = np.broadcast_shapes(x.shape, mixed.shape)
        if not isinstance(strategy, str):  # one per layout: the same again for the second pass
            strategy = np.tile(np.broadcast_to(np.asarray(strategy, dtype=object), shape).ravel(), 2)
        stacked = x.stacked(*(np.where(mixed, code, x.recompute) for code in (0, 2)))
        both = _train_step(model, cluster, stacked, dtype, strategy, *software)
        none, full = ({k: v.reshape(2, *shape)[i] for k, v in both.items()} for i in (0, 1))
        capacity = usable_memory(cluster.gpu.memory_capacity.value)
        result = fit_activations(
            none, full, auto, capacity, cluster.host_memory_per_gpu, x, model.layers, _LINEAR
        )
    else:
        result = _train_step(model, cluster, x, dtype, strategy, *software)
    result.pop("offload_all_s", None)
    return result


def _schedule(
    model: Transformer, x: Layout, p: dict[str, np.ndarray], split: tuple[np.ndarray, ...]
) -> tuple[np.ndarray, ...]:
    """The pipeline schedule of a step, from :func:`per_microbatch`'s times ``p`` and the stages'
    layers ``split`` (:func:`stage_split`): the slowest stage's layers and extra work per
    micro-batch, its time and the mean stage's per micro-batch, and the bubble per step.

    Under 1F1B the slowest is a stage before the last (the most layers) or the last (its layers, the
    multi-token prediction modules' and the logits). Under DualPipe a GPU holds stage i and stage
    pp - 1 - i, each for half of the micro-batches: the GPUs with the first and the last stage
    average the two, the others hold two middle stages. The bubble is a stage's idle chunks of mean
    work: (pp - 1) / vpp under 1F1B; pp / 2 - 1 under DualPipe, each F&B + B - 3W
    (``dualpipe_extra_s`` per layer).
    """
    first, middle, last = split
    end_s, per_mb = p["end_s"], p["pp_exposed_s"] + p["z3_exposed_s"]
    layers = model.layers + x.mtp_layers
    lead_layers, end_layers, end_extra = np.maximum(first, middle), last + x.mtp_layers, end_s
    idle, chunk_extra = (x.pp - 1) / x.vpp, 0.0
    if np.any(x.dualpipe):
        ends = (first + end_layers) / 2
        lead_layers = np.where(x.dualpipe, np.where(x.pp > 2, middle, ends), lead_layers)
        end_layers, end_extra = np.where(x.dualpipe, ends, end_layers), np.where(x.dualpipe, end_s / 2, end_s)
        idle = np.where(x.dualpipe, x.pp / 2 - 1, idle)
        chunk_extra = np.where(x.dualpipe, p["dualpipe_extra_s"], 0.0)
    stage_a = lead_layers * p["layer_s"] + per_mb
    stage_b = end_layers * p["layer_s"] + end_extra + per_mb
    last_is_slowest = (x.pp == 1) | (stage_b >= stage_a)
    mean = (layers * p["layer_s"] + end_s) / x.pp + per_mb
    bubble = idle * (mean + layers / x.pp * (chunk_extra + p["ep_unpaired_s"]))
    return (
        np.where(last_is_slowest, end_layers, lead_layers),
        np.where(last_is_slowest, end_extra, 0.0),
        np.maximum(stage_a, stage_b),
        mean,
        bubble,
    )


def _train_step(
    model: Transformer,
    cluster: Cluster,
    x: Layout,
    dtype: str,
    strategy: str | ArrayLike,
    attention_impl: str,
    tp_overlap: str,
    ep_overlap: str,
) -> dict[str, np.ndarray]:
    """:func:`train_step` at the recomputation ``x`` states, with ``offload_all_s``: the seconds per
    step offloading every layer's activations would expose."""
    recipe = precision(dtype, cluster.gpu)

    def priced(*fields: np.ndarray) -> dict[str, np.ndarray]:
        *layout_fields, codes = fields
        sub = Layout(**dict(zip(MICROBATCH_FIELDS, layout_fields, strict=True)), global_batch=np.asarray(1.0))
        named = np.asarray(_STRATEGY_NAMES[codes], dtype=object)
        one = named.flat[0] if np.all(named == named.flat[0]) else named  # one strategy: its own branch
        return per_microbatch(model, cluster, sub, recipe, one, attention_impl, tp_overlap, ep_overlap)

    codes = per_distinct(STRATEGIES.index, strategy, int)
    p = on_unique(priced, *(getattr(x, name) for name in MICROBATCH_FIELDS), codes)
    gpu = cluster.gpu
    pp_exposed, z3_exposed = p["pp_exposed_s"], p["z3_exposed_s"]
    dp_exposed, optimizer = p["dp_exposed_s"], p["optimizer_s"]
    split = stage_split(model, x)
    slow_layers, slow_extra, slowest, mean, bubble = _schedule(model, x, p, split)
    m = x.microbatches
    # Expert all-to-alls overlapped 1F1B-style hide only where a forward and a backward pair up: not
    # in the pipeline's warm-up and cool-down (its bubble, and pp - 1 of the stage's own micro-batches;
    # without pipelining the first forward and the last backward).
    unpaired = np.minimum(np.maximum(x.pp - 1, 1), m) * slow_layers * p["ep_unpaired_s"]
    parts = {
        "compute": m * (slow_layers * p["layer_compute_s"] + slow_extra),
        "tp_comm": m * slow_layers * p["tp_exposed_s"],
        "cp_comm": m * slow_layers * p["cp_exposed_s"],
        "ep_comm": m * slow_layers * p["ep_exposed_s"] + unpaired,
        "pp_comm": m * pp_exposed,
        "dp_comm": m * z3_exposed + dp_exposed,
        "offload": np.zeros_like(bubble),
        "bubble": bubble,
        "optimizer": optimizer,
    }
    step = m * slowest + bubble + dp_exposed + optimizer + unpaired

    tokens = x.global_batch * x.seq
    model_flops = tokens * model_flops_per_token(model, x.seq, mtp=x.mtp_layers)
    hw_flops = model_flops + tokens * recompute_flops_per_token(
        model, x.seq, x.recompute, modules=x.recompute_modules
    )
    gpus = x.gpus
    memory = memory_with_microbatches(p, model, x, split)
    result = {
        "step_time_s": step,
        "tokens_per_s": tokens / step,
        "tflops_per_gpu": model_flops / (step * gpus) / 1e12,
        "hw_tflops_per_gpu": hw_flops / (step * gpus) / 1e12,
        "mfu": model_flops / (step * gpus) / peak_flops(gpu, recipe.gemm),
        "memory_per_gpu_bytes": memory["total"],
        "fits": fits(memory["total"], gpu.memory_capacity.value),
        "recompute_share": np.where(x.recompute == 2, 1.0, 0.0),
        "offload_share": np.zeros_like(step),
        "offloaded_bytes": np.zeros_like(step),
        "offload_all_s": m * slow_layers * p["offload_layer_s"],
        "stage_imbalance": slowest / mean - 1,
        "tp_domains": p["tp_domains"],
    }
    result.update({f"{name}_s": value for name, value in parts.items()})
    return {k: np.broadcast_to(v, np.shape(step)) for k, v in result.items()}
