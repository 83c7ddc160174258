"""Serving a transformer: prefill and decode iterations of an inference engine and the throughput and
latency of continuous batching, from the same kernels, roofline and collectives as training.

**An iteration** (one forward pass of the engine, TensorRT-LLM's in-flight batching, vLLM's scheduler
step) carries ``G`` decode queries and ``c`` whole prompts of ``p`` tokens. Its linear layers are one
GEMM over the ``G + c p`` tokens (:func:`commodel.workloads.layer.kernels.layer_kernels`: weights read
once, so decode alone is bound by the weights and the KV cache, prefill by compute); attention is
two kernels, causal flash attention over the prompts and :func:`commodel.compute.kernels.decode_attention`
over each decode query's cached context; tensor parallelism adds two allreduces per layer, expert
parallelism a dispatch and a combine per MoE layer (:func:`~commodel.workloads.serving.experts.expert_exchange`); the last pipeline stage computes the
logits of the ``G + c`` tokens that sample. With ``pp`` stages, ``pp`` micro-batches are in flight and
a round of all of them takes ``pp x`` the slowest stage.
Continuous batching over such iterations is :mod:`commodel.workloads.serving.continuous`.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from functools import cached_property
from typing import Any

import numpy as np
from numpy.typing import ArrayLike

from commodel.comm.fabric import Fabric, fabric_of
from commodel.compute.kernels import Kernel, attention, decode_attention, gemm, named
from commodel.compute.precision import Precision
from commodel.hardware.cluster import Cluster
from commodel.workloads.layer.kernels import layer_kernels
from commodel.workloads.layer.timing import Timed, timed, timed_all
from commodel.workloads.model.schema import Transformer
from commodel.workloads.model.transformer import attention_dims, bytes_per
from commodel.workloads.parallel.groups import Group, collective, group
from commodel.workloads.parallel.layout_rules import heads_problem
from commodel.workloads.serving.experts import expert_exchange, two_batch_overlap

#: KV-cache dtypes; ``auto`` is FP8 when the linear layers run in FP8 or FP4 (as ModelOpt checkpoints
#: ship), else BF16.
KV_DTYPES = ("auto", "bf16", "fp8")

#: Query heads one CTA of an MLA decode kernel packs as rows (FlashMLA's 64-row query block): a
#: request's heads on a GPU take ``ceil(heads / 64)`` CTAs per split of its context.
MLA_HEADS_PER_CTA = 64

#: Host time per request in an iteration: the engine's own loop (scheduling, input preparation,
#: sampling, stop checks and responses, in Python in TensorRT-LLM's PyTorch executor and vLLM),
#: serialized with the GPU work it prepares. Calibrated: trt-gb200-qwen3-30b-a3b-128-2048.
HOST_PER_REQUEST_S = 18.32e-6

#: How the engine's host loop meets the GPU: ``serial`` (it prepares the next iteration after the
#: GPU ends this one: ``GPU + host``) or ``overlapped`` (TensorRT-LLM's overlap scheduler, vLLM's
#: async scheduling: it prepares iteration i + 1 while the GPU runs i, ``max(GPU, host)``).
HOST_SCHEDULES = ("serial", "overlapped")

#: The per-design fields of an :class:`Engine`.
_SIZES = ("tp", "pp", "ep", "max_batch", "max_num_tokens", "kv_fraction")


def kv_dtype_of(kv_dtype: str, recipe: Precision) -> str:
    """The KV-cache dtype ``auto`` stands for under ``recipe``."""
    if kv_dtype != "auto":
        return kv_dtype
    return "fp8" if recipe.gemm in ("fp8", "fp4") else recipe.other


@dataclass(frozen=True)
class Engine:
    """One serving replica: a model on ``tp x pp`` GPUs of a cluster (experts over ``ep`` of the tp
    ranks), its precision recipe, KV-cache dtype and engine limits (requests in flight, tokens per
    iteration, share of free memory for the KV cache), its host loop (:data:`HOST_SCHEDULES`), how
    it dispatches MoE tokens and what overlaps that (:mod:`commodel.workloads.serving.experts`); sizes
    are arrays, one entry per design."""

    model: Transformer
    cluster: Cluster
    recipe: Precision
    kv_dtype: str
    tp: np.ndarray
    pp: np.ndarray
    ep: np.ndarray
    max_batch: np.ndarray
    max_num_tokens: np.ndarray
    kv_fraction: np.ndarray
    host_schedule: str = "serial"
    dispatcher: str = "alltoall"
    ep_overlap: str = "none"

    def repeated(self, times: int) -> Engine:
        """Each design repeated ``times`` times in a row (a grid per design)."""
        return replace(self, **{name: np.repeat(getattr(self, name), times) for name in _SIZES})

    def select(self, rows: np.ndarray) -> Engine:
        """The designs at ``rows`` (a mask or indices)."""
        return replace(self, **{name: getattr(self, name)[rows] for name in _SIZES})

    @cached_property
    def fabric(self) -> Fabric:
        return fabric_of(self.cluster, launch="graph")  # engines replay decode iterations as CUDA graphs

    @property
    def tp_group(self) -> Group:
        return group(self.tp, 1, self.cluster.domain_gpus)


def _with_host(engine: Engine, gpu_s: np.ndarray, host_s: np.ndarray) -> np.ndarray:
    """An iteration's seconds from its GPU work and its host loop under the engine's
    :data:`HOST_SCHEDULES`: serial adds them, overlapped takes the longer."""
    return np.maximum(gpu_s, host_s) if engine.host_schedule == "overlapped" else gpu_s + host_s


def replica_problems(
    model: Transformer, tp: ArrayLike, pp: ArrayLike, ep: ArrayLike, gpus: ArrayLike, attention_dp: ArrayLike
) -> list:
    """``(mask, message)`` for each rule a serving replica layout breaks: whole replicas of tp x pp,
    heads split by the replica's tp (1 with attention data parallelism), at most one layer per stage,
    experts over ep dividing tp and the experts; attention data parallelism spreads the experts over
    its tp ranks (ep = tp >= 2). With attention data parallelism ep need not divide
    the experts: each rank holds ``ceil(E / ep)``, the expert load balancer's redundant copies filling
    the rest (SGLang's EPLB: 288 experts for DeepSeek-V3's 256 over 72 ranks), which the model prices
    as ``E / ep`` experts' weights and work per rank."""
    tp, pp, ep, gpus = (np.asarray(v, dtype=float) for v in (tp, pp, ep, gpus))
    adp = np.asarray(attention_dp, dtype=float) > 0
    problems = [
        (np.mod(gpus, tp * pp) != 0, "the GPUs are not whole replicas of tp x pp"),
        heads_problem(model, np.where(adp, 1.0, tp)),
        (pp > model.layers, f"pp cannot exceed the layers ({model.layers})"),
        (adp & ((ep != tp) | (tp < 2)),
         "attention data parallelism spreads the experts over the tp GPUs: give ep equal to tp (>= 2)"),
    ]  # fmt: skip
    if model.moe is None:
        return [*problems, (ep > 1, "ep > 1 needs a mixture-of-experts model")]
    divides = (np.mod(tp, ep) == 0) & ((np.mod(model.moe.experts, ep) == 0) | adp)
    return [*problems, (~divides, f"ep must divide tp and the experts ({model.moe.experts})")]


def _decode_attention(
    engine: Engine, queries: np.ndarray, context: np.ndarray
) -> list[tuple[Kernel, np.ndarray]]:
    """One layer's decode attention with its calls per layer: the full layers' and the sliding-window
    layers' (which read at most their window) in their shares of the layers; none without queries."""
    model = engine.model
    heads = model.heads / engine.tp
    if model.mla is not None:
        r, rope = model.mla.kv_lora_rank, model.mla.qk_rope_head_dim
        flops, cached, groups = 2 * (2 * r + rope), r + rope, np.ceil(heads / MLA_HEADS_PER_CTA)
    else:
        groups = np.maximum(model.n_kv_heads / engine.tp, 1.0)
        flops, cached = 4 * model.d_head, 2 * groups * model.d_head
    q, some = np.maximum(queries, 1.0), (queries > 0).astype(float)
    windowed = model.windowed_layers / model.layers
    bands = (("decode attention", 1 - windowed, context),
             ("decode attention (window)", windowed, np.minimum(context, model.sliding_window or np.inf)))  # fmt: skip
    kv = engine.kv_dtype
    compute = kv if kv in engine.cluster.gpu.peak_flops else engine.recipe.other  # dequantized as loaded
    return [
        (named(decode_attention(q, heads, keys, flops, cached, kv, compute, groups), label), share * some)
        for label, share, keys in bands
        if share
    ]


def _prefill_attention(
    engine: Engine, prompts: np.ndarray, prompt: np.ndarray
) -> list[tuple[Kernel, np.ndarray]]:
    """One layer's causal flash attention over ``prompts`` prompts of ``prompt`` tokens, with its calls
    per layer (sliding-window layers' in their share); none without prompts."""
    model = engine.model
    d_qk, d_v = attention_dims(model)
    shape = (
        np.maximum(prompts, 1e-9),
        model.heads / engine.tp,
        prompt,
        (d_qk + d_v) / 2,
        engine.recipe.other,
    )
    windowed = model.windowed_layers / model.layers
    some = (prompts > 0).astype(float)
    kernels = [(named(attention(*shape, True), "prefill attention"), (1 - windowed) * some)]
    if windowed:
        window = attention(*shape, True, window=model.sliding_window)
        kernels.append((named(window, "prefill attention (window)"), windowed * some))
    return kernels


def _layer(
    engine: Engine,
    g: np.ndarray,
    c: np.ndarray,
    p: np.ndarray,
    context: np.ndarray,
    spread: np.ndarray,
    units: ArrayLike | None = None,
) -> list[tuple[Kernel, np.ndarray, Timed]]:
    """One layer's kernels for ``g`` decode queries and ``c`` prompts of ``p`` tokens, each with its
    calls per layer and its :func:`~commodel.workloads.layer.timing.timed` seconds on ``units`` SMs."""
    lk = layer_kernels(
        engine.model, g + c * p, 1, p, engine.tp, 1, engine.ep, False, engine.recipe, eager_glue=False
    )
    kernels = [
        *((k, np.asarray(count, dtype=float)) for k, count, _ in lk.gemms),
        *((k, np.asarray(forward, dtype=float)) for k, forward, _ in lk.elementwise if np.any(forward)),
        *_prefill_attention(engine, c / spread, p * spread),
        *_decode_attention(engine, g, context),
    ]
    times = timed_all(engine.cluster.gpu, [k for k, _ in kernels], units)
    return [(k, calls, t) for (k, calls), t in zip(kernels, times, strict=True)]


def iteration_time(
    engine: Engine,
    queries: ArrayLike,
    prompts: ArrayLike,
    prompt: ArrayLike,
    context: ArrayLike,
    prompt_cv: ArrayLike = 0.0,
) -> dict[str, Any]:
    """Seconds of one engine iteration carrying ``queries`` decode queries (each over ``context`` cached
    tokens) and ``prompts`` whole prompts of ``prompt`` tokens on average (coefficient of variation
    ``prompt_cv``: causal attention grows as ``E[p^2] = p^2 (1 + cv^2)``, priced as ``prompts / (1 + cv^2)``
    prompts of ``p (1 + cv^2)`` tokens, the same tokens): ``time_s`` (a round of the pipeline), and its
    ``compute_s``, ``comm_s`` and ``host_s``, the ``compute_bound_s`` of the compute and the
    ``hbm_bytes`` its memory-bound kernels stream (for :func:`commodel.ops.energy.gpu_power_W`); and
    what makes it, for a person (:func:`~commodel.workloads.serving.continuous.iteration_table`):
    ``layer``, one layer's kernels for one of the ``pp`` micro-batches with their calls per layer and
    seconds a call, and ``logits``, the last stage's logits GEMM over the tokens that sample and its
    seconds."""
    model, gpu, fab = engine.model, engine.cluster.gpu, engine.fabric
    pp = engine.pp
    g = np.asarray(queries, dtype=float) / pp  # one of pp micro-batches
    c = np.asarray(prompts, dtype=float) / pp
    p = np.asarray(prompt, dtype=float)
    tokens = g + c * p
    spread = 1 + np.asarray(prompt_cv, dtype=float) ** 2

    def layer_of(share: float, units: ArrayLike | None = None) -> list:
        return _layer(engine, share * g, share * c, p, np.asarray(context, dtype=float), spread, units)

    act = tokens * model.hidden * bytes_per(engine.recipe.other)
    ar, _ = collective("allreduce", act, engine.tp_group, fab)
    comm = np.where(engine.tp > 1, 2 * ar, 0.0)
    if model.moe is None:
        priced = layer_of(1.0)
    else:
        moe = np.where(engine.ep > 1, model.moe_layers / model.layers, 0.0)

        def exchange_of(at: np.ndarray) -> np.ndarray:
            return moe * expert_exchange(engine, at, c > 0)

        if engine.ep_overlap == "two-batch":
            split = np.where(c > 0, tokens >= 2, g >= 2)  # each half holds a request's work
            priced, exposed = two_batch_overlap(engine, layer_of, exchange_of, tokens, split)
        else:
            priced, exposed = layer_of(1.0), exchange_of(tokens)
        comm = comm + exposed
    layer = sum(calls * t[0] for _, calls, t in priced)
    logits = named(gemm(g + c, model.vocab / engine.tp, model.hidden, engine.recipe.other), "logits")
    logits_s, logits_memory_s, _ = timed(gpu, logits, None)
    # Per GPU and iteration: compute-bound seconds and the bytes memory-bound kernels stream (power).
    bound = sum(calls * (t[0] - t[1]) for _, calls, t in priced)
    streamed = sum(calls * k.bytes * (t[1] > 0) for k, calls, t in priced)
    stage_layers = np.ceil(model.layers / pp)
    send, _ = collective("sendrecv", act, Group(np.full_like(tokens, 2.0), np.full_like(tokens, 2.0)), fab)
    stage_comm = stage_layers * comm + np.where(pp > 1, send, 0.0)
    stage_compute = stage_layers * layer + logits_s
    host = HOST_PER_REQUEST_S * (np.asarray(queries, dtype=float) + np.asarray(prompts, dtype=float))
    gpu_s = pp * (stage_compute + stage_comm)
    time_s = _with_host(engine, gpu_s, host)
    return {
        "time_s": time_s,
        "compute_s": pp * stage_compute,
        "comm_s": pp * stage_comm,
        "host_s": time_s - gpu_s,  # what the host adds: all of it serial, its excess overlapped
        "compute_bound_s": pp * (stage_layers * bound + logits_s - logits_memory_s),
        "hbm_bytes": pp * (stage_layers * streamed + logits.bytes * (logits_memory_s > 0)),
        "layer": [(k, calls, t[0]) for k, calls, t in priced],
        "logits": (logits, logits_s),
    }
