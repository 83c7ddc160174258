"""How a served MoE layer's tokens reach their experts and come back, and what overlaps that exchange:
the dispatcher's time per layer (:func:`expert_exchange`) and SGLang's two-batch overlap
(:func:`two_batch_overlap`)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
from numpy.typing import ArrayLike

from commodel.overlap import Window, exposed
from commodel.overlap.interference import memory_of
from commodel.workloads.layer.timing import hbm_share
from commodel.workloads.model.transformer import bytes_per
from commodel.workloads.moe.dispatch import (
    COMBINE_BYTES,
    DEEPEP_NVL_PEERS,
    DEEPEP_SMS,
    DISPATCH_BYTES,
    NVFP4_DISPATCH_BYTES,
    count_wait_s,
    high_throughput_s,
    low_latency_s,
)
from commodel.workloads.parallel.groups import collective, group, shared_nics

#: How a MoE layer's tokens reach their experts' GPUs and come back: ``alltoall`` (NCCL's all-to-all
#: of every routed copy, each way) or ``deepep`` (DeepEP's kernels, :mod:`commodel.workloads.moe.dispatch`:
#: the high-throughput ones in iterations with prompts, the low-latency ones in decode-only iterations,
#: as SGLang's ``--moe-a2a-backend deepep`` runs them in its auto mode).
DISPATCHERS = ("alltoall", "deepep")

#: How the engine's dispatch and combine meet its compute: on the critical path (``none``), or beside
#: the other half of the batch (``two-batch``: SGLang's ``--enable-two-batch-overlap``).
EP_OVERLAPS = ("none", "two-batch")


def _dispatch_bytes(engine: Any) -> float:
    """Bytes per element DeepEP dispatches: FP8 with per-128 scales, or NVFP4 where the experts
    compute in it."""
    return NVFP4_DISPATCH_BYTES if engine.recipe.gemm == "fp4" else DISPATCH_BYTES


def expert_exchange(engine: Any, tokens: np.ndarray, prompts: np.ndarray) -> np.ndarray:
    """Seconds of one MoE layer's dispatch and combine per GPU for an iteration of ``tokens`` per GPU,
    by the engine's dispatcher: NCCL's all-to-all of the ``top_k`` routed copies (BF16) each way, or
    DeepEP's kernels (dispatched in FP8, or NVFP4 where the experts compute in it; combined in BF16),
    high-throughput where the iteration has ``prompts``, low-latency where it decodes alone. The
    high-throughput dispatch has the host wait for its received counts once per layer
    (:func:`~commodel.workloads.moe.dispatch.count_wait_s`: SGLang's prefill runs eager, outside
    CUDA graphs); the low-latency kernels do not wait."""
    model, fab, domain = engine.model, engine.fabric, engine.cluster.domain_gpus
    if engine.dispatcher == "alltoall":
        act = tokens * model.hidden * bytes_per(engine.recipe.other)
        a2a, _ = collective("alltoall", act * model.moe.top_k, group(engine.ep, 1, domain), fab)
        return 2 * a2a
    each_gpu = shared_nics(fab)
    normal, low = group(engine.ep, 1, min(domain, DEEPEP_NVL_PEERS)), group(engine.ep, 1, domain)
    sizes = (_dispatch_bytes(engine), COMBINE_BYTES)
    high = sum(high_throughput_s(model, engine.cluster, each_gpu, normal, tokens, b) for b in sizes)
    high = high + count_wait_s(engine.cluster)
    latency = sum(low_latency_s(model, engine.cluster, each_gpu, low, tokens, b) for b in sizes)
    return np.where(prompts, high, latency)


def two_batch_overlap(
    engine: Any,
    layer_of: Callable[[float, ArrayLike | None], list],
    exchange_of: Callable[[np.ndarray], np.ndarray],
    tokens: np.ndarray,
    split: np.ndarray,
) -> tuple[list, np.ndarray]:
    """One layer of an iteration split into two micro-batches of half its tokens, each one's dispatch
    and combine beside the other's layer (SGLang's two-batch overlap, with DeepEP): a micro-batch's
    exchange ``X/2`` runs during the other's compute ``C/2``, which loses the SMs DeepEP's kernels hold
    (:data:`~commodel.workloads.moe.dispatch.DEEPEP_SMS`) and shares HBM with the exchange's bytes, so
    the layer takes ``2 T(C/2 beside X/2)`` (:func:`commodel.overlap.exposed`, ``sm-partition``): never
    less than ``max(C', X)`` and, against one batch, paying each half's weight reads and launches again
    (``C' >= C`` where the GEMMs are bound by their weights, as in decode). Where ``split`` is false a
    half would hold no request (a decode-only iteration of fewer than two queries, an iteration of
    fewer than two tokens): SGLang runs it as one batch, its exchange exposed.

    ``layer_of(share, units)``: one layer's kernels for ``share`` of the micro-batch's requests on
    ``units`` SMs, each ``(kernel, calls, timed)``; ``exchange_of(tokens)``: the exchange's seconds
    per layer at ``tokens`` per GPU. Returns the kernels (the two halves', calls doubled, where the
    iteration splits; the whole batch's where not) and the seconds per layer the exchanges leave
    exposed."""
    gpu, model = engine.cluster.gpu, engine.model
    half, fewer = layer_of(0.5, None), layer_of(0.5, gpu.compute_units.value - DEEPEP_SMS)
    compute = sum(calls * t[0] for _, calls, t in half)
    window = Window(
        compute,
        sum(calls * t[0] for _, calls, t in fewer),
        sum(calls * hbm_share(t) for _, calls, t in half),
        compute / sum(calls for _, calls, _ in half),
    )
    exchange = exchange_of(tokens / 2)
    moe_share = model.moe_layers / model.layers
    wire = moe_share * tokens / 2 * model.moe.top_k * model.hidden * (_dispatch_bytes(engine) + COMBINE_BYTES)
    traffic = np.divide(wire, exchange, out=np.zeros_like(exchange), where=exchange > 0)
    each = exposed(
        "sm-partition", window, exchange, traffic_Bps=traffic, memory=memory_of(gpu), calls=2 * moe_share
    )
    if np.all(split):
        return [(k, 2 * calls, t) for k, calls, t in half], 2 * each
    halves = [(k, np.where(split, 2 * calls, 0.0), t) for k, calls, t in half]
    whole = [(k, np.where(split, 0.0, calls), t) for k, calls, t in layer_of(1.0, None)]
    return halves + whole, np.where(split, 2 * each, exchange_of(tokens))
