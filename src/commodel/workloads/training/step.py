"""One training step of a transformer on a cluster: where the time goes, vectorized over layouts.

The step composes the computation model (roofline per kernel), the collective model and the overlap
model; it derives nothing of its own but the schedule:

- **Per layer and micro-batch**: forward kernels, backward kernels (two GEMMs per forward GEMM, flash
  attention backward at 2.5x its forward, elementwise at 2x) and recomputation; tensor-parallel
  collectives (2 allreduces per layer and pass, or 2 allgathers + 2 reduce-scatters with sequence
  parallelism), expert-parallel all-to-alls (dispatch and combine), context-parallel ring exchanges
  of K and V, each exposed according to the overlap strategy.
- **Pipeline** (1F1B, optionally interleaved with ``vpp`` virtual stages, Narayanan et al. 2021):
  ``m x t_slowest + (pp - 1) / vpp x t_mean`` interleaved, and without interleaving the largest of
  the bounds each stage sets (:func:`~commodel.workloads.training.schedule.one_f_one_b`: ``(m - 1)
  t_last + sum t`` where the last stage is the slowest); bubble fraction ``(pp - 1) / (vpp m + pp -
  1)`` when balanced; activations and gradients cross stage boundaries as point-to-point sends; the first and
  last stages' layers as stated (:func:`commodel.workloads.parallel.layout.stage_split`), the last with the
  logits and any multi-token prediction modules. **DualPipe** (DeepSeek-AI 2024): each GPU holds
  stage i and stage pp - 1 - i, two pipelines run in opposite directions with half the micro-batches
  each, and the bubble is ``(pp/2 - 1)(F&B + B - 3W)`` (DeepSeek-V3 report, Table 2; W: the
  weight-gradient GEMMs the schedule defers); the two copies of the weights double a GPU's model
  state and gradient traffic, and ``pp + 1`` micro-batches' activations are in flight. The warm-up
  and cool-down that pair no forward with a backward are taken as 1F1B's (``pp - 1`` micro-batches;
  assumed).
- **Data parallelism**: gradients reduce (allreduce, or reduce-scatter then parameter allgather with
  ZeRO >= 1) behind the last micro-batch's backward and the first one's forward, each interleaved
  model chunk's share as its work ends (:func:`commodel.workloads.training.data_parallel.chunked_exposed`); ZeRO-3 gathers parameters every
  micro-batch.
- **Optimizer**: Adam reads and writes :data:`~commodel.workloads.training.data_parallel.ADAM_BYTES_PER_PARAM` bytes per local parameter, 8 fewer
  with its moments in BF16 (read and written at 2 B instead of 4).
- **Fitting in memory** (``--recompute auto``): the fewest layers recomputed or offloaded to CPU
  memory, whichever costs less (:mod:`commodel.workloads.training.activation_fit`).

Each kernel takes at least the GPU's launch overhead (the host issues kernels no faster than that).
Collectives are priced by NCCL-style tuning over the algorithms NCCL implements, on groups placed
tp-first (:mod:`commodel.workloads.parallel.layout`); all GPUs of a node communicate at once and share its NICs.
"""

from __future__ import annotations

import dataclasses

import numpy as np
from numpy.typing import ArrayLike

from commodel.compute.precision import precision
from commodel.compute.roofline import peak_flops
from commodel.hardware.cluster import Cluster
from commodel.overlap import STRATEGIES
from commodel.vectorize import on_unique, per_distinct
from commodel.workloads.model.schema import Transformer
from commodel.workloads.model.transformer import (
    model_flops_per_token,
    recompute_flops_per_token,
)
from commodel.workloads.moe.token_drop import capacity_flops_per_token, dropped_share
from commodel.workloads.parallel.layout import AUTO, Layout, stage_split
from commodel.workloads.training.activation_fit import fit_activations
from commodel.workloads.training.memory import by_category, fits, memory_with_microbatches
from commodel.workloads.training.microbatch import per_microbatch
from commodel.workloads.training.schedule import one_f_one_b
from commodel.workloads.training.state_offload import state_offload

BREAKDOWN = (
    "compute", "host", "tp_comm", "cp_comm", "ep_comm", "pp_comm", "dp_comm", "offload", "bubble", "optimizer",
)  # fmt: skip

#: How the expert all-to-alls run: on the critical path (Megatron's default), under another
#: micro-batch's compute (``1f1b``, ``--overlap-moe-expert-parallel-comm``: the 1F1B steady state runs
#: one micro-batch's forward with another's backward, each one's dispatch and combine under the other's
#: attention and expert GEMMs), or beside the same layer's shared experts (``shared-experts``,
#: ``--moe-shared-expert-overlap``: on a second stream, in every micro-batch, forward and backward).
EP_OVERLAP = ("none", "1f1b", "shared-experts")

#: Outputs that add up over a stage's layers, and so mix linearly when some layers are recomputed.
_LINEAR = ("step_time_s", *(f"{name}_s" for name in BREAKDOWN))


#: The overlap strategies by code (:data:`~commodel.overlap.STRATEGIES`).
_STRATEGY_NAMES = np.asarray(STRATEGIES, dtype=object)

#: The layout fields a micro-batch's cost depends on: all but the global batch.
MICROBATCH_FIELDS = tuple(f.name for f in dataclasses.fields(Layout) if f.name != "global_batch")


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
    :func:`commodel.workloads.training.activation_fit.fit_activations`) and ``tp_domains``, the scale-up
    domains a tensor-parallel group spans (above 1 its collectives cross the scale-out network).
    ``strategy`` is one overlap strategy (:data:`~commodel.overlap.STRATEGIES`) or one per layout.
    Layouts that differ only in global batch share one :func:`~commodel.workloads.training.microbatch.per_microbatch` evaluation.
    """
    software = (attention_impl, tp_overlap, ep_overlap)
    auto = np.asarray(x.recompute) == AUTO
    mixed = auto | (np.asarray(x.offload_layers) > 0) | (np.asarray(x.recompute_layers) > 0)
    if np.any(mixed):  # priced without and with full recomputation in one pass, then mixed
        shape = np.broadcast_shapes(x.shape, mixed.shape)
        if not isinstance(strategy, str):  # one per layout: the same again for the second pass
            strategy = np.tile(np.broadcast_to(np.asarray(strategy, dtype=object), shape).ravel(), 2)
        stacked = x.stacked(*(np.where(mixed, code, x.recompute) for code in (0, 2)))
        both = _train_step(model, cluster, stacked, dtype, strategy, *software)
        none, full = ({k: v.reshape(2, *shape)[i] for k, v in both.items()} for i in (0, 1))
        capacity = cluster.gpu.memory_capacity.value
        result = fit_activations(
            none,
            full,
            auto,
            capacity,
            cluster.host_memory_per_gpu - none["offloaded_state_bytes"],
            x,
            model.layers,
            _LINEAR,
        )
    else:
        result = _train_step(model, cluster, x, dtype, strategy, *software)
    result.pop("offload_all_s", None)
    return result


def _schedule(
    model: Transformer, x: Layout, p: dict[str, np.ndarray], split: tuple[np.ndarray, ...]
) -> tuple[np.ndarray, ...]:
    """The pipeline schedule of a step, from :func:`~commodel.workloads.training.microbatch.per_microbatch`'s times ``p`` and the stages'
    layers ``split`` (:func:`stage_split`): the slowest stage's layers and extra work per
    micro-batch, its time and the mean stage's per micro-batch, and the bubble per step.

    Under 1F1B the slowest is a stage before the last (the most layers) or the last (its layers, the
    multi-token prediction modules' and the logits). Under DualPipe a GPU holds stage i and stage
    pp - 1 - i, each for half of the micro-batches: the GPUs with the first and the last stage
    average the two, the others hold two middle stages. The bubble is a stage's idle chunks of mean
    work, pp / 2 - 1 of them under DualPipe, each F&B + B - 3W (``dualpipe_extra_s`` per layer);
    under 1F1B the makespan of the stages (:func:`one_f_one_b`) less the slowest's ``m`` micro-batches.
    """
    first, middle, last = split
    end_s = p["end_s"]

    def per_mb(stage_layers: ArrayLike) -> np.ndarray:
        """A stage's communication per micro-batch: its pipeline sends, ZeRO-3's for its layers."""
        return p["pp_exposed_s"] + p["z3_layer_s"] * stage_layers

    layers = model.layers + x.mtp_layers
    lead_layers, end_layers, end_extra = np.maximum(first, middle), last + x.mtp_layers, end_s
    idle, chunk_extra = (x.pp - 1) / x.vpp, 0.0
    if np.any(x.dualpipe):
        ends = (first + end_layers) / 2
        lead_layers = np.where(x.dualpipe, np.where(x.pp > 2, middle, ends), lead_layers)
        end_layers, end_extra = np.where(x.dualpipe, ends, end_layers), np.where(x.dualpipe, end_s / 2, end_s)
        idle = np.where(x.dualpipe, x.pp / 2 - 1, idle)
        chunk_extra = np.where(x.dualpipe, p["dualpipe_extra_s"], 0.0)
    stage_a = lead_layers * p["layer_s"] + per_mb(lead_layers)
    stage_b = end_layers * p["layer_s"] + end_extra + per_mb(end_layers)
    last_is_slowest = (x.pp == 1) | (stage_b >= stage_a)
    mean = (layers * p["layer_s"] + end_s) / x.pp + per_mb(layers / x.pp)
    bubble = idle * mean
    one_f = ~np.asarray(x.dualpipe, dtype=bool)
    if np.any(one_f):  # 1F1B's makespan on stages of their own sizes, less the slowest's m micro-batches
        stages = (first * p["layer_s"] + per_mb(first), middle * p["layer_s"] + per_mb(middle), stage_b)
        span = one_f_one_b(*stages, p["layer_fwd_share"], x.pp, x.microbatches, x.vpp)
        bubble = np.where(one_f, span - x.microbatches * np.maximum(stage_a, stage_b), bubble)
    # The warm-up's and cool-down's micro-batches pair with none: their all-to-alls run whole, and their
    # GPUs, busy that much longer, wait that much less for the host (as the slowest stage's, _breakdown).
    bubble = bubble + idle * layers / x.pp * (chunk_extra + p["ep_unpaired_s"] - p["host_lone_saved_s"])
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
    split = stage_split(model, x)
    slow_layers, slow_extra, slowest, mean, bubble = _schedule(model, x, p, split)
    parts, extra = _breakdown(x, p, slow_layers, slow_extra, bubble)
    step = x.microbatches * slowest + bubble + parts["optimizer"] + extra
    held = memory_with_microbatches(p, model, x, split)
    states = _offloaded_states(held, x, split, p, slow_layers, cluster)
    parts["offload"] = states.pop("offload_s")
    step = step + parts["offload"]

    tokens = x.global_batch * x.seq
    model_flops = tokens * model_flops_per_token(model, x.seq, mtp=x.mtp_layers)
    hw_flops = model_flops + tokens * (
        recompute_flops_per_token(model, x.seq, x.recompute, modules=x.recompute_modules)
        + capacity_flops_per_token(model, x)
    )
    gpus = x.gpus
    memory = by_category(held, gpu.memory_capacity.value)
    result = {
        "step_time_s": step,
        "tokens_per_s": tokens / step,
        "tflops_per_gpu": model_flops / (step * gpus) / 1e12,
        "hw_tflops_per_gpu": hw_flops / (step * gpus) / 1e12,
        "mfu": model_flops / (step * gpus) / peak_flops(gpu, recipe.gemm),
        **memory,
        "fits": fits(memory["memory_per_gpu_bytes"], gpu.memory_capacity.value)
        & (states["offloaded_state_bytes"] <= cluster.host_memory_per_gpu),
        **states,
        "recompute_share": np.where(x.recompute == 2, 1.0, 0.0),
        "offload_share": np.zeros_like(step),
        "offloaded_bytes": np.zeros_like(step),
        "offload_all_s": x.microbatches * slow_layers * p["offload_layer_s"],
        "stage_imbalance": slowest / mean - 1,
        "dropped_share": dropped_share(model, x),
        "tp_domains": p["tp_domains"],
    }
    result.update({f"{name}_s": value for name, value in parts.items()})
    return {k: np.broadcast_to(v, np.shape(step)) for k, v in result.items()}


def _breakdown(
    x: Layout, p: dict[str, np.ndarray], slow_layers: np.ndarray, slow_extra: np.ndarray, bubble: np.ndarray
) -> tuple[dict[str, np.ndarray], np.ndarray]:
    """Seconds per step of each part on the slowest stage (:func:`train_step`'s breakdown), and what
    the step adds beyond its slowest stage's micro-batches, the bubble and the optimizer.

    Expert all-to-alls overlapped 1F1B-style hide only where a forward and a backward pair up: not in
    the pipeline's warm-up and cool-down (its bubble, and ``pp - 1`` of the stage's own micro-batches;
    without pipelining the first forward and the last backward). Those expose their all-to-alls whole,
    leaving the GPU computing nothing: the collectives those micro-batches exposed (ZeRO-3's, the
    pipeline's sends) and the end-of-step reduction behind the last ones run on beside them, up to
    their length, and the GPU, busy longer, waits less for the host (``host_lone_saved_s``): the windows
    were priced with a paired micro-batch's host waits as idle time, so what the all-to-alls add to
    it is their length less the waits they remove."""
    m, pp_exposed, dp_exposed = x.microbatches, p["pp_exposed_s"], p["dp_exposed_s"]
    lone = np.minimum(np.maximum(x.pp - 1, 1), m)
    unpaired = lone * slow_layers * p["ep_unpaired_s"]
    host_carried = lone * slow_layers * p["host_lone_saved_s"]
    cover = unpaired - host_carried  # beyond the host waits the windows were priced with
    sends, zero3 = lone * pp_exposed, lone * slow_layers * p["z3_layer_s"]
    carried = np.minimum(sends + zero3, cover)
    share = np.divide(carried, sends + zero3, out=np.zeros_like(carried), where=carried > 0)  # of each alike
    carried_dp = np.minimum(dp_exposed, cover - carried)
    parts = {
        "compute": m * (slow_layers * p["layer_compute_s"] + slow_extra),
        "host": m * slow_layers * p["host_exposed_s"] - host_carried,
        "tp_comm": m * slow_layers * p["tp_exposed_s"],
        "cp_comm": m * slow_layers * p["cp_exposed_s"],
        "ep_comm": m * slow_layers * p["ep_exposed_s"] + unpaired,
        "pp_comm": m * pp_exposed - share * sends,
        "dp_comm": m * slow_layers * p["z3_layer_s"] - share * zero3 + dp_exposed - carried_dp,
        "offload": np.zeros_like(bubble),
        "bubble": bubble,
        "optimizer": p["optimizer_s"],
    }  # fmt: skip
    return parts, dp_exposed + unpaired - carried - carried_dp - host_carried


def _offloaded_states(
    held: dict[str, np.ndarray],
    x: Layout,
    split: tuple[np.ndarray, ...],
    p: dict[str, np.ndarray],
    slow_layers: np.ndarray,
    cluster: Cluster,
) -> dict[str, np.ndarray]:
    """Model states kept in CPU memory (:func:`~commodel.workloads.training.state_offload.state_offload`):
    ``held`` updated in place to what stays in HBM; returns ``offload_s`` per step (the slowest
    stage's weight fetches and the optimizer's streams), ``offloaded_state_bytes`` per GPU and
    ``offload_needed_Bps``, the host bandwidth that would hide the weights' fetches."""
    zero = np.zeros(np.shape(p["layer_s"] * x.microbatches))
    if not np.any(x.offload):
        return {"offload_s": zero, "offloaded_state_bytes": zero, "offload_needed_Bps": zero}
    first, middle, last = split
    fwd = p["layer_fwd_share"] * p["layer_s"]
    largest = np.maximum(np.maximum(first, middle), last + x.mtp_layers)
    on_gpu = held | {"gathered_weights": p["gathered_weights"]}
    moved = state_offload(on_gpu, x, largest, fwd, p["layer_s"] - fwd, cluster.host_offload_Bps)
    freed = held["weights"] + held["optimizer"] - moved["weights"] - moved["optimizer"]
    held.update(weights=moved["weights"], optimizer=moved["optimizer"], total=held["total"] - freed)
    return {
        "offload_s": x.microbatches * slow_layers * moved["per_layer_s"] + moved["step_s"],
        "offloaded_state_bytes": moved["host_bytes"],
        "offload_needed_Bps": moved["needed_Bps"],
    }
