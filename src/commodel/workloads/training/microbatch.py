"""One micro-batch of a training step, vectorized over layouts (:func:`per_microbatch`): a layer's
compute and the communication each kind of parallelism exposes beside it (tensor, expert, context,
pipeline; data and the optimizer: :mod:`commodel.workloads.training.data_parallel`), the last stage's extra
work, and the memory parts. Everything here
is independent of the number of micro-batches; :mod:`commodel.workloads.training.step` schedules it.
"""

from __future__ import annotations

import numpy as np

from commodel.compute.kernels import gemm, gemm_backward
from commodel.compute.precision import Precision
from commodel.hardware.cluster import Cluster
from commodel.overlap import Window, ctas
from commodel.vectorize import on_unique
from commodel.workloads.layer.timing import timed_all
from commodel.workloads.layer.work import (
    ATTENTION_BACKWARD,
    either,
    layer_works,
    repeat,
    window,
)
from commodel.workloads.model.recompute import has_module
from commodel.workloads.model.schema import Transformer
from commodel.workloads.model.transformer import (
    attention_dims,
    dispatched_tokens,
    recomputed_pairs,
    routed_copies,
    tensor_parallel_mlps,
)
from commodel.workloads.moe.dispatch import DISPATCH_BYTES, flex_group, flex_sms, high_throughput_s
from commodel.workloads.parallel.groups import collective, domain
from commodel.workloads.parallel.layout import Layout, stage_split
from commodel.workloads.training.activation_fit import offload_exposed
from commodel.workloads.training.data_parallel import data_parallel
from commodel.workloads.training.host_issue import host_wait_s
from commodel.workloads.training.memory import memory_parts
from commodel.workloads.training.microbatch_context import MicroBatch
from commodel.workloads.training.tensor_parallel import tensor_parallel_exposed


def expert_passes(x: Layout) -> np.ndarray:
    """Passes of a MoE layer that dispatch and combine: the forward, the backward, and the forward
    again where recomputation runs the MoE layer (full, or ``--recompute-modules moe``)."""
    return 2 + ((x.recompute == 2) | has_module(x.recompute_modules, "moe"))


def _expert_comm(m: MicroBatch, ep_overlap: str, tp_comm: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Seconds of expert all-to-alls a micro-batch exposes per layer where another micro-batch pairs
    with it, and where none does (pipeline warm-up and cool-down).

    Dispatch and combine per MoE layer and pass, as long as the busiest rank's share takes. Each GPU
    dispatches the tokens it holds (its sequence shard with sequence parallelism); with expert tensor
    parallelism (etp > 1) Megatron's dispatcher all-gathers the received tokens over the etp group
    after the dispatch and reduce-scatters them before the combine (the backward the reverse). With
    FP8 dispatch (DeepSeek-V3 report, section 3.3.2) the all-to-alls towards the experts (the forward
    dispatch, the gradient of the combine) carry FP8 with per-128 scales; combines stay BF16. DeepEP
    sends one copy per remote domain, forwarded over NVLink (:mod:`commodel.workloads.moe.dispatch`).
    Recomputing the MoE layer (in full, or ``--recompute-modules moe``) dispatches and combines its
    forward again. With 1F1B overlap the all-to-alls run beside another micro-batch's layer on the SMs
    they leave; with shared-expert overlap beside the layer's own shared experts, in every micro-batch."""
    x, model, fab, size = m.x, m.model, m.fab, m.size
    moe_share = model.moe_layers / model.layers
    held = dispatched_tokens(x.tokens, x.tp, x.sequence_parallel)
    routed = routed_copies(model, held) * x.busiest_expert_rank * model.hidden  # elements
    a2a, a2a_bw = collective("alltoall", routed * size, m.ep, fab)
    towards = a2a
    if np.any(x.fp8_dispatch):
        fp8, _ = collective("alltoall", np.where(x.fp8_dispatch, routed * DISPATCH_BYTES, 0.0), m.ep, fab)
        towards = np.where(x.fp8_dispatch, fp8, a2a)
    if np.any(x.flex):
        tokens, where = held * x.busiest_expert_rank, flex_group(m.ep, x.deepep)
        by_flex = [
            high_throughput_s(model, m.cluster, fab, where, tokens, np.where(in_fp8, DISPATCH_BYTES, size))
            for in_fp8 in (False, x.fp8_dispatch)
        ]
        a2a, towards = (
            np.where(x.flex, fast, nccl) for fast, nccl in zip(by_flex, (a2a, towards), strict=True)
        )
    gathered = np.where(x.sequence_parallel & (x.expert_tp > 1), routed * size * x.expert_tp, 0.0)
    tp_gather, _ = collective("allgather", gathered, m.etp, fab)
    tp_scatter, _ = collective("reducescatter", gathered, m.etp, fab)
    ep_passes = expert_passes(x)
    ep_comm = moe_share * ep_passes * ((a2a + towards) + (tp_gather + tp_scatter))
    ideal = np.asarray(m.strategy, dtype=object) == "ideal"
    ep_exposed = np.where(
        ideal, np.maximum(ep_comm - np.maximum(m.full.total_s - tp_comm, 0.0), 0.0), ep_comm
    )
    if ep_overlap == "none":
        return ep_exposed, ep_exposed
    # the all-to-all kernels hold the library's CTAs, or the SMs stated
    sms = np.where(
        x.ep_sms > 0, x.ep_sms, np.where(x.flex, flex_sms(x.deepep), ctas(m.strategy, domain(fab, m.ep)))
    )
    kwargs = {"traffic_Bps": 2 * a2a_bw, "calls": 2 * ep_passes * moe_share}
    if ep_overlap == "1f1b":  # beside another micro-batch's layer
        beside = window(m.full, m.partitioned(sms), "both")
    else:  # beside this layer's shared experts, which every micro-batch has
        fewer = [(m.units - sms, False)] if np.any(m.partitioning) else []
        shared, *on_fewer = layer_works(
            model, m.gpu, x, m.recipe, m.attention_impl, [(None, False), *fewer], True
        )
        shared_part = either(m.partitioning, on_fewer[0], shared) if on_fewer else shared
        beside = window(shared, shared_part, "both")
    paired = np.minimum(m.exposed(beside, ep_comm, **kwargs), ep_exposed)
    return paired, paired if ep_overlap == "shared-experts" else ep_exposed


def _context_comm(m: MicroBatch) -> tuple[np.ndarray, np.ndarray]:
    """Seconds context parallelism's ring attention exposes per layer, forward and backward: K and V
    exchanged in ``cp - 1`` steps forward, dK and dV backward, beside the attention they feed."""
    x, full = m.x, m.full
    if not np.any(x.cp > 1):
        return np.zeros_like(full.total_s), np.zeros_like(full.total_s)
    kv = x.tokens * np.maximum(m.model.n_kv_heads / x.tp, 1) * sum(attention_dims(m.model)) * m.size
    ring, ring_bw = collective("sendrecv", kv, m.cp, m.fab)
    ring = np.where(x.cp > 1, ring, 0.0)
    cp_part = m.partitioned(m.p2p_ctas)
    attn_window = Window(full.attention_fwd_s, cp_part.attention_fwd_s, 0 * x.tokens, full.attention_fwd_s)
    kwargs = {"traffic_Bps": 2 * ring_bw, "calls": x.cp - 1}
    forward = m.exposed(attn_window, (x.cp - 1) * ring, **kwargs)
    return forward, m.exposed(repeat(attn_window, ATTENTION_BACKWARD), 2 * (x.cp - 1) * ring, **kwargs)


def _last_stage_extra(m: MicroBatch) -> np.ndarray:
    """The last stage's work besides its layers: the logits (output GEMM forward and backward plus an
    fp32 cross-entropy pass), again for each multi-token prediction module with its 2h -> h
    projection (DeepSeek-V3 report, section 2.2; its transformer layer counts as a layer). Priced once
    per distinct (tokens, tp, MTP modules): a sweep's layouts share few of them."""
    x, h, model = m.x, m.model.hidden, m.model

    def extra(tokens: np.ndarray, tp: np.ndarray, mtp_layers: np.ndarray) -> np.ndarray:
        logits = gemm(tokens, model.vocab / tp, h, m.recipe.other)
        logits_s = sum(t[0] for t in timed_all(m.gpu, (logits, *gemm_backward(logits)), None))
        logits_s = logits_s + 3 * tokens * model.vocab / tp * 4 / m.hbm
        if not np.any(mtp_layers > 0):
            return logits_s
        projection = gemm(tokens, h / tp, 2 * h, m.recipe.gemm)
        projection_s = sum(t[0] for t in timed_all(m.gpu, (projection, *gemm_backward(projection)), None))
        return logits_s + mtp_layers * (logits_s + projection_s)

    return on_unique(extra, x.tokens, x.tp, x.mtp_layers)


def _pipeline_comm(
    m: MicroBatch, stage_layers: np.ndarray, idle: tuple[np.ndarray, np.ndarray]
) -> np.ndarray:
    """Seconds the pipeline's point-to-point sends expose per micro-batch: one activation forward, one
    gradient backward per micro-batch and chunk; each tensor-parallel rank sends its 1/tp slice
    (sequence parallelism, or Megatron's scatter-gather), beside the stage's layers and the time
    their GPU waits for the host (``idle`` per layer, forward and backward); across pods at the
    core's share (:meth:`~commodel.comm.fabric.Fabric.pipeline_share`)."""
    x = m.x
    act = x.tokens * m.model.hidden * m.size
    p2p, p2p_bw = collective("sendrecv", np.where(x.pp > 1, act / x.tp, 0.0), m.pp, m.fab)
    # Stages that meet across pods share the core (Fabric.pipeline_share, in place of the pair's own
    # pod share): the send's time scaled by it, its latency with it (a small overstatement).
    core = m.fab.pipeline_share(x.tp * x.cp * x.dp, x.gpus) / m.fab.pod_share(m.pp.nodes)
    p2p, p2p_bw = p2p / core, p2p_bw * core
    p2p_comm = np.where(x.pp > 1, 2 * x.vpp * p2p, 0.0)
    p2p_part = m.partitioned(m.p2p_ctas)
    mb_window = repeat(window(m.full, p2p_part, "both", idle), stage_layers)
    return m.exposed(mb_window, p2p_comm, traffic_Bps=2 * p2p_bw, calls=2 * x.vpp)


def _host_waits(
    m: MicroBatch, gpu_fwd: np.ndarray, gpu_time: np.ndarray, ep_fwd: np.ndarray, lone: np.ndarray
) -> tuple[tuple[np.ndarray, np.ndarray], np.ndarray]:
    """Seconds per layer the GPU waits for the host, forward and backward (:func:`host_wait_s`), of
    a layer whose GPU works ``gpu_time`` in all, ``gpu_fwd`` of it in the forward; and what those waits
    shrink by in a micro-batch no other pairs with, which runs its all-to-alls whole (``lone`` more,
    ``ep_fwd`` of it forward): its GPU works that much longer, so the host runs further ahead (both
    priced in one call)."""
    gpu = [np.stack(np.broadcast_arrays(g, g + share * lone))
           for g, share in ((gpu_fwd, ep_fwd), (gpu_time - gpu_fwd, 1 - ep_fwd))]  # fmt: skip
    fwd, bwd = host_wait_s(m.model, m.cluster, m.x, m.recipe.cast_bytes > 0, *gpu)
    return (fwd[0], bwd[0]), fwd[0] + bwd[0] - fwd[1] - bwd[1]


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
    m = MicroBatch(model, cluster, x, recipe, strategy, attention_impl, tp_overlap == "userbuffers")
    full = m.full
    # Tensor parallelism: its mechanism decides what is exposed; ideal overlap hides it behind the layer.
    act = x.tokens * model.hidden * m.size
    pairs = 1 + tensor_parallel_mlps(model)
    again = recomputed_pairs(model, x.recompute, x.recompute_modules)
    gathered = x.tokens * model.hidden * recipe.activation_gather_bytes  # quantized first under FP8
    tp_comm = tensor_parallel_exposed(
        tp_overlap, full, act, gathered, m.tp, m.fab, x, m.memory, m.units, pairs, again
    )
    ideal = np.asarray(strategy, dtype=object) == "ideal"
    tp_exposed = np.where(ideal, np.maximum(tp_comm - full.total_s, 0.0), tp_comm)
    paired, unpaired = _expert_comm(m, ep_overlap, tp_comm)
    cp_fwd, cp_bwd = _context_comm(m)
    cp_exposed = cp_fwd + cp_bwd
    gpu_time = full.total_s + tp_exposed + paired + cp_exposed
    # Each pass carries its own collectives: one of the 2 + again passes of tensor parallelism's
    # (the backward's regathers aside) and of the expert all-to-alls', the ring's forward steps.
    ep_fwd = 1 / expert_passes(x)
    comm_fwd = tp_exposed / (2 + again) + ep_fwd * paired + cp_fwd
    comm = tp_exposed + paired + cp_exposed  # the layer's own collectives, no compute beside them
    waits, saved = _host_waits(m, full.fwd_s + comm_fwd, gpu_time, ep_fwd, unpaired - paired)
    host_wait = waits[0] + waits[1]
    idle = (waits[0] + comm_fwd, waits[1] + comm - comm_fwd)
    layer_time = gpu_time + host_wait
    forward = full.fwd_s + comm_fwd + waits[0]
    fwd_share = np.divide(forward, layer_time, out=np.zeros_like(layer_time), where=layer_time > 0)
    first, middle, last = stage_split(model, x)
    stage_layers = np.maximum(np.maximum(first, middle), last + x.mtp_layers)  # the largest stage's
    memory = memory_parts(model, x, attention_impl, recipe)
    dense, experts = memory.pop("dense_parameters"), memory.pop("expert_parameters")
    root = memory.pop("root_parameters")
    z3_exposed, dp_exposed, optimizer = data_parallel(m, stage_layers, dense, experts, root, idle)
    # Offloading this layer's activations to CPU memory (what --recompute auto may choose instead).
    offload = offload_exposed(
        memory["layer_activations"], forward, layer_time - forward, cluster.host_offload_Bps
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
        "host_exposed_s": host_wait,
        "host_lone_saved_s": saved,
        "ep_exposed_s": paired,
        "ep_unpaired_s": unpaired - paired,
        "end_s": _last_stage_extra(m),
        "pp_exposed_s": _pipeline_comm(m, stage_layers, idle),
        # ZeRO-3's per layer: a stage's gathers and reduce-scatters, and the compute they hide behind,
        # scale with its layers (priced on the largest stage's).
        "z3_layer_s": z3_exposed / np.maximum(stage_layers, 1),
        "dp_exposed_s": dp_exposed,
        "optimizer_s": optimizer,
        "tp_domains": m.tp.nodes,
        "offload_layer_s": offload,
        "layer_fwd_share": fwd_share,
        **memory,  # bytes: weights, gradients, optimizer, ...
    }
