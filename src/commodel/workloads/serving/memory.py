"""A serving replica's memory: KV-cache bytes per token and sequence, weights and runtime buffers per
GPU, what is left for the KV cache, and how many requests it holds in flight under the engine's
limits (:func:`capacity`), as TensorRT-LLM's guaranteed-no-evict scheduler admits them
(:mod:`commodel.workloads.serving.engine`'s module docstring)."""

from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike

from commodel.compute.precision import Precision, dense_gemm
from commodel.workloads.model.schema import Transformer
from commodel.workloads.model.transformer import bytes_per, layer_weights
from commodel.workloads.serving.continuous import mean_context
from commodel.workloads.serving.engine import Engine

#: TensorRT-LLM's KV-cache block (``tokens_per_block``); the engine limits ``max_batch_size``,
#: ``max_num_tokens`` and ``free_gpu_memory_fraction`` are the job's inputs (:class:`commodel.pricing.serving_job.ServingJob`)
#: with TensorRT-LLM's defaults.
KV_BLOCK_TOKENS = 32

#: Runtime buffers besides weights and KV cache (assumed): activations of one layer for the token
#: budget (hidden states, QKV and the MLP's widest intermediate, BF16) and FP32 logits per request.
ACTIVATION_WIDTHS_H = 4


def kv_bytes_per_token_layer(model: Transformer, tp: ArrayLike, kv_dtype: str) -> np.ndarray:
    """KV-cache bytes one token takes in one layer on one GPU: K and V of its ``kv_heads / tp`` heads
    (at least one: a head is replicated when tp exceeds the KV heads), or MLA's latent and RoPE key,
    which every tensor-parallel rank keeps whole."""
    size = bytes_per(kv_dtype)
    if model.mla is not None:
        return np.full(np.shape(tp), (model.mla.kv_lora_rank + model.mla.qk_rope_head_dim) * size)
    heads = np.maximum(model.n_kv_heads / np.asarray(tp, dtype=float), 1.0)
    return 2 * heads * model.d_head * size


def kv_bytes_per_sequence(
    model: Transformer, tokens: ArrayLike, tp: ArrayLike, pp: ArrayLike, kv_dtype: str
) -> np.ndarray:
    """KV-cache bytes per GPU of one sequence of ``tokens``: its stage's layers, sliding-window layers
    keeping at most their window."""
    t = np.asarray(tokens, dtype=float)
    per = kv_bytes_per_token_layer(model, tp, kv_dtype)
    windowed = model.windowed_layers
    held = (model.layers - windowed) * t + windowed * np.minimum(t, model.sliding_window or np.inf)
    return per * held / np.asarray(pp, dtype=float)


def weight_bytes_per_gpu(
    model: Transformer, tp: ArrayLike, pp: ArrayLike, recipe: Precision, ep: ArrayLike = 1
) -> np.ndarray:
    """Weights per GPU: a stage's layers, linear weights in the recipe's GEMM dtype split over tp (BF16
    outside the routed experts where a 4-bit checkpoint quantizes them only: ``fp4_scope``), the
    routed experts over ``max(tp, ep)`` GPUs (ep x expert-tp = tp; with attention data parallelism tp
    is 1 and the experts are spread over ep), the router BF16; embedding and logits BF16 and
    vocabulary-parallel, on the end stages (both on one GPU without pipelining, unless tied)."""
    t, p = np.asarray(tp, dtype=float), np.asarray(pp, dtype=float)
    spread = np.maximum(t, np.asarray(ep, dtype=float))
    w = layer_weights(model)
    moe_share = model.moe_layers / model.layers
    shared = w.attention + (1 - moe_share) * w.dense_mlp + moe_share * w.moe_shared
    outside = bytes_per(dense_gemm(recipe, model.fp4_scope))  # BF16 where only the experts are 4-bit
    linear = shared / t * outside + moe_share * w.moe_experts / spread * bytes_per(recipe.gemm)
    per_layer = linear + moe_share * w.router * 2 + 2 * model.hidden * 2
    tables = np.where((p == 1) & (not model.tied_embeddings), 2.0, 1.0)
    return np.ceil(model.layers / p) * per_layer + tables * model.vocab * model.hidden * 2 / t


def runtime_bytes_per_gpu(
    model: Transformer, tp: ArrayLike, max_tokens: ArrayLike, max_batch: ArrayLike
) -> np.ndarray:
    """Runtime buffers (assumed, :data:`ACTIVATION_WIDTHS_H`): one layer's activations for the token
    budget and FP32 logits for every request in flight."""
    t = np.asarray(tp, dtype=float)
    up = 2 if model.gated_mlp else 1
    ffn = model.ffn_hidden if model.moe is None else model.moe.expert_ffn_hidden * model.moe.top_k
    widths = ACTIVATION_WIDTHS_H * model.hidden + up * ffn / t
    return np.asarray(max_tokens) * widths * 2 + np.asarray(max_batch) * model.vocab / t * 4


def free_bytes(engine: Engine) -> np.ndarray:
    """HBM per GPU left after weights and runtime buffers (negative when they do not fit)."""
    capacity = engine.cluster.gpu.memory_capacity.value
    used = weight_bytes_per_gpu(engine.model, engine.tp, engine.pp, engine.recipe, engine.ep)
    return (
        capacity
        - used
        - runtime_bytes_per_gpu(engine.model, engine.tp, engine.max_num_tokens, engine.max_batch)
    )


#: The categories a serving GPU's memory is reported in; they add up to its total (the HBM, where the
#: weights fit): weights, the runtime's activation and logits buffers, the KV cache pool, and what the
#: engine leaves for everything else (``1 - kv_fraction`` of the free memory).
SERVING_CATEGORIES = ("weights", "activations", "kv_cache", "reserved")


def capacity(
    engine: Engine, prompt: ArrayLike, output: ArrayLike, held: ArrayLike | None = None, phase: str = "both"
) -> dict[str, np.ndarray]:
    """Requests the engine can hold in flight: by KV cache (``kv_batch``, each request's blocks
    taking ``kv_per_request`` bytes per GPU), by what the engine admits at all (``engine_batch``:
    ``max_batch_size``, and ``max_num_tokens`` decode tokens in one iteration), by the tokens an
    iteration takes (``token_batch``: in steady state a request's ``p + o`` tokens pass through
    ``o`` iterations, so ``max_num_tokens`` per iteration keep ``max_num_tokens o / (p + o - 1)``
    requests decoding), and the most that all allow (``max_batch``, what ``--batch max`` runs); the
    memory per GPU by
    category (``memory_CATEGORY_bytes``, :data:`SERVING_CATEGORIES`) and ``memory_per_gpu_bytes``.
    ``held``: the tokens a request's KV blocks hold on average (default ``p + o``, reserved up front:
    :func:`kv_tokens_held`). One phase alone (``phase``): a decode pool's iteration holds a token per
    request, so ``max_num_tokens`` requests; a prefill pool's as many whole prompts as it holds."""
    p, o = np.asarray(prompt, dtype=float), np.asarray(output, dtype=float)
    tokens = p + o if held is None else np.asarray(held, dtype=float)
    reserved = np.ceil(tokens / KV_BLOCK_TOKENS) * KV_BLOCK_TOKENS
    free = free_bytes(engine)
    pool = engine.kv_fraction * np.maximum(free, 0.0)
    per_request = kv_bytes_per_sequence(engine.model, reserved, engine.tp, engine.pp, engine.kv_dtype)
    kv_batch = np.floor(pool / per_request)
    budget = {
        "both": np.maximum(engine.max_num_tokens * o / (p + o - 1), 1.0),
        "decode": engine.max_num_tokens,
        "prefill": np.maximum(np.floor(engine.max_num_tokens / p), 1.0),
    }[phase]
    parts = {
        "weights": weight_bytes_per_gpu(engine.model, engine.tp, engine.pp, engine.recipe, engine.ep),
        "activations": runtime_bytes_per_gpu(
            engine.model, engine.tp, engine.max_num_tokens, engine.max_batch
        ),
        "kv_cache": pool,
        "reserved": np.maximum(free, 0.0) - pool,
    }
    shape = np.shape(kv_batch)
    return {
        "kv_batch": kv_batch,
        "kv_per_request": np.broadcast_to(per_request, shape),
        "engine_batch": np.broadcast_to(np.minimum(engine.max_batch, engine.max_num_tokens), shape),
        "token_batch": np.broadcast_to(np.floor(budget), shape),
        "max_batch": np.minimum(np.minimum(kv_batch, engine.max_batch), np.floor(budget)),
        "weights_fit": free > 0,
        **{f"memory_{k}_bytes": np.broadcast_to(np.asarray(v, dtype=float), shape) for k, v in parts.items()},
        "memory_per_gpu_bytes": np.broadcast_to(sum(parts.values()), shape),
    }


def memory_at(cap: dict[str, np.ndarray], batch: ArrayLike) -> dict[str, np.ndarray]:
    """The KV cache and memory per GPU a replica needs at ``batch`` requests in flight: the pool the
    engine allocates (:func:`capacity`), or all the blocks the batch holds where that is more."""
    short = np.maximum(
        np.asarray(batch, dtype=float) * cap["kv_per_request"] - cap["memory_kv_cache_bytes"], 0.0
    )
    return {
        "memory_kv_cache_bytes": cap["memory_kv_cache_bytes"] + short,
        "memory_per_gpu_bytes": cap["memory_per_gpu_bytes"] + short,
    }


#: How a request's KV blocks are held (``--kv-reserve``): ``full``, its prompt plus its whole output
#: from admission on (TensorRT-LLM's guaranteed-no-evict scheduler); ``paged``, only the tokens it has
#: so far (TensorRT-LLM's max-utilization scheduler, vLLM's paged attention; a full pool preempts).
KV_RESERVE = ("full", "paged")


def kv_tokens_held(
    prompt: ArrayLike, output: ArrayLike, output_cv: ArrayLike, paged: ArrayLike
) -> np.ndarray:
    """Tokens a request's KV blocks hold on average in flight: ``p + o`` reserved in full; paged, its
    length-biased mean length (:func:`~commodel.workloads.serving.continuous.mean_context`)."""
    whole = np.asarray(prompt, dtype=float) + np.asarray(output, dtype=float)
    return np.where(
        np.asarray(paged, dtype=bool), np.minimum(mean_context(prompt, output, output_cv), whole), whole
    )
