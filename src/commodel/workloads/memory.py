"""Memory per GPU of a training layout: weights, gradients, optimizer state, activations, logits.

Mixed-precision Adam as current Megatron-Core recipes run it (Rajbhandari et al. 2020 for the
ZeRO stages): 2 B of weights per parameter (BF16; under FP8 the primary weights are FP8 row-wise and
column-wise copies, ``fp8_param_gather``), 2 B of BF16 gradient buffer (``grad_reduce_in_fp32`` off),
12 B of fp32 master weights, momentum and variance; ZeRO stage 1 (the distributed optimizer) shards
the optimizer state, 2 also the gradients, 3 (FSDP) also the weights, over the dp x cp ranks (expert
parameters over dp x cp / ep). Activations follow :func:`activation_bytes_per_token`; 1F1B keeps ``min(m, pp)``
micro-batches in flight on the first stage, interleaving ``1 + (pp - 1) / (pp vpp)`` times more
(Narayanan et al. 2021). The last stage also holds fp32 logits of one micro-batch. DualPipe
(DeepSeek-V3 report, Table 2) puts two stages on every GPU (stage i and stage pp - 1 - i: twice the
parameters, and the first GPU holds the embedding, the output layer and the logits) and keeps
``min(m, pp + 1)`` micro-batches' activations in flight.
"""

from __future__ import annotations

import numpy as np

from commodel.compute.precision import Precision
from commodel.workloads.layout import Layout
from commodel.workloads.schema import Transformer
from commodel.workloads.transformer import activation_bytes_per_token, layer_weights

WEIGHT_BYTES, GRAD_BYTES, OPTIMIZER_BYTES = 2.0, 2.0, 12.0

#: HBM kept free for the CUDA context, NCCL buffers, workspaces and allocator fragmentation (assumed).
RESERVED_FRACTION = 0.10

#: Activation bytes per token per layer that tensor parallelism without sequence parallelism does not
#: split: layer norm inputs and outputs and dropout masks (Korthikanti et al. 2022: 10 s b h).
REPLICATED_WITHOUT_SP = 10.0


def stage_parameters(model: Transformer, x: Layout) -> tuple[np.ndarray, np.ndarray]:
    """(dense, expert) parameters held by one GPU of the largest pipeline stage (of the two stages a
    GPU holds under DualPipe)."""
    w = layer_weights(model)
    layers = np.ceil(model.layers / x.pp) * np.where(x.dualpipe, 2, 1)
    moe_share = model.moe_layers / model.layers
    per_layer = w.attention + (1 - moe_share) * w.dense_mlp + moe_share * (w.moe_shared + w.router)
    embeddings = (
        np.where(x.holds_both_ends, 1 if model.tied_embeddings else 2, 1) * model.vocab * model.hidden
    )
    dense = (layers * (per_layer + 2 * model.hidden) + embeddings) / x.tp
    experts = layers * moe_share * w.moe_experts / (x.tp * x.ep)
    return dense, experts


def memory_parts(
    model: Transformer, x: Layout, attention_impl: str = "flash", recipe: Precision | None = None
) -> dict[str, np.ndarray]:
    """What a GPU of the largest stage holds independently of the number of micro-batches: model
    states (weights, gradients, optimizer) and one micro-batch's activations and logits."""
    dense, experts = stage_parameters(model, x)
    shard_dense, shard_experts = x.dp * x.cp, x.dp * x.cp / x.ep

    def sharded(per_param: float, from_stage: int) -> np.ndarray:
        on = x.zero >= from_stage
        return per_param * (dense / np.where(on, shard_dense, 1) + experts / np.where(on, shard_experts, 1))

    per_token = activation_bytes_per_token(model, x.recompute, x.seq / x.cp, attention_impl, recipe)
    replicated = REPLICATED_WITHOUT_SP * model.hidden
    split = np.where(
        x.sequence_parallel,
        per_token / x.tp,
        np.maximum(per_token - replicated, 0) / x.tp + np.minimum(per_token, replicated),
    )
    return {
        "weights": sharded(WEIGHT_BYTES, 3),
        "gradients": sharded(GRAD_BYTES, 2),
        "optimizer": sharded(OPTIMIZER_BYTES, 1),
        "stage_activations": np.ceil(model.layers / x.pp) * x.tokens * split,
        "logits": 4.0 * x.tokens * model.vocab / x.tp,
    }


def memory_with_microbatches(parts: dict[str, np.ndarray], x: Layout) -> dict[str, np.ndarray]:
    """Bytes per GPU by kind, and ``total``, the larger of the first stage (``min(m, pp)`` micro-batches
    in flight, more when interleaved) and the last (one micro-batch plus its logits); under DualPipe
    one GPU holds both (``min(m, pp + 1)`` micro-batches and the logits)."""
    interleaved = np.minimum(x.microbatches, x.pp) * np.where(x.vpp > 1, 1 + (x.pp - 1) / (x.pp * x.vpp), 1.0)
    in_flight = np.where(x.dualpipe, np.minimum(x.microbatches, x.pp + 1), interleaved)
    first = parts["stage_activations"] * in_flight
    last = parts["stage_activations"] + parts["logits"]
    activations = np.where(x.holds_both_ends, first, np.maximum(first, last) - parts["logits"])
    logits = np.where(x.holds_both_ends | (last > first), parts["logits"], 0.0)
    states = parts["weights"] + parts["gradients"] + parts["optimizer"]
    return {
        "weights": parts["weights"],
        "gradients": parts["gradients"],
        "optimizer": parts["optimizer"],
        "activations": activations,
        "logits": logits,
        "total": states + activations + logits,
    }


def memory_per_gpu(model: Transformer, x: Layout, attention_impl: str = "flash") -> dict[str, np.ndarray]:
    """Bytes per GPU by kind (weights, gradients, optimizer, activations, logits) and ``total``."""
    return memory_with_microbatches(memory_parts(model, x, attention_impl), x)


def usable_memory(capacity_bytes: float) -> float:
    """HBM a training job can use: the capacity less :data:`RESERVED_FRACTION`."""
    return capacity_bytes * (1 - RESERVED_FRACTION)


def fits(total_bytes: np.ndarray, capacity_bytes: float) -> np.ndarray:
    """Whether ``total_bytes`` fits in HBM after :data:`RESERVED_FRACTION` is set aside."""
    return total_bytes <= usable_memory(capacity_bytes)
