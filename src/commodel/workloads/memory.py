"""Memory per GPU of a training layout: weights, gradients, optimizer state, activations, logits.

Mixed-precision Adam (Rajbhandari et al. 2020, ZeRO): bf16 weights (2 B), fp32 main gradients (4 B),
fp32 master weights, momentum and variance (12 B) per parameter; ZeRO stage 1 shards the optimizer
state, 2 also the gradients, 3 also the weights, over the dp x cp ranks (expert parameters over
dp x cp / ep). Activations follow :func:`activation_bytes_per_token`; 1F1B keeps ``min(m, pp)``
micro-batches in flight on the first stage, interleaving ``1 + (pp - 1) / (pp vpp)`` times more
(Narayanan et al. 2021). The last stage also holds fp32 logits of one micro-batch.
"""

from __future__ import annotations

import numpy as np

from commodel.workloads.layout import Layout
from commodel.workloads.schema import Transformer
from commodel.workloads.transformer import activation_bytes_per_token, layer_weights

WEIGHT_BYTES, GRAD_BYTES, OPTIMIZER_BYTES = 2.0, 4.0, 12.0

#: HBM kept free for the CUDA context, NCCL buffers, workspaces and allocator fragmentation (assumed).
RESERVED_FRACTION = 0.10

#: Activation bytes per token per layer that tensor parallelism without sequence parallelism does not
#: split: layer norm inputs and outputs and dropout masks (Korthikanti et al. 2022: 10 s b h).
REPLICATED_WITHOUT_SP = 10.0


def stage_parameters(model: Transformer, x: Layout) -> tuple[np.ndarray, np.ndarray]:
    """(dense, expert) parameters held by one GPU of the largest pipeline stage."""
    w = layer_weights(model)
    layers = np.ceil(model.layers / x.pp)
    moe_share = model.moe_layers / model.layers
    per_layer = w.attention + (1 - moe_share) * w.dense_mlp + moe_share * (w.moe_shared + w.router)
    embeddings = np.where(x.pp == 1, 1 if model.tied_embeddings else 2, 1) * model.vocab * model.hidden
    dense = (layers * (per_layer + 2 * model.hidden) + embeddings) / x.tp
    experts = layers * moe_share * w.moe_experts / (x.tp * x.ep)
    return dense, experts


def memory_per_gpu(model: Transformer, x: Layout, attention_impl: str = "flash") -> dict[str, np.ndarray]:
    """Bytes per GPU by kind, and ``total`` (the larger of the first and last pipeline stage)."""
    dense, experts = stage_parameters(model, x)
    shard_dense, shard_experts = x.dp * x.cp, x.dp * x.cp / x.ep

    def sharded(per_param: float, from_stage: int) -> np.ndarray:
        on = x.zero >= from_stage
        return per_param * (dense / np.where(on, shard_dense, 1) + experts / np.where(on, shard_experts, 1))

    weights, grads, optimizer = sharded(WEIGHT_BYTES, 3), sharded(GRAD_BYTES, 2), sharded(OPTIMIZER_BYTES, 1)
    per_token = activation_bytes_per_token(model, x.recompute, x.seq / x.cp, attention_impl)
    split = np.where(
        x.sequence_parallel,
        per_token / x.tp,
        np.maximum(per_token - REPLICATED_WITHOUT_SP * model.hidden, 0) / x.tp
        + np.minimum(per_token, REPLICATED_WITHOUT_SP * model.hidden),
    )
    layer = x.tokens * split
    stage_layers = np.ceil(model.layers / x.pp)
    in_flight = np.minimum(x.microbatches, x.pp) * np.where(x.vpp > 1, 1 + (x.pp - 1) / (x.pp * x.vpp), 1.0)
    first = stage_layers * layer * in_flight
    logits = 4.0 * x.tokens * model.vocab / x.tp
    last = stage_layers * layer + logits
    activations = np.where(x.pp == 1, first, np.maximum(first, last) - logits)
    logits = np.where(x.pp == 1, logits, np.where(last > first, logits, 0.0))
    total = weights + grads + optimizer + activations + logits
    return {
        "weights": weights,
        "gradients": grads,
        "optimizer": optimizer,
        "activations": activations,
        "logits": logits,
        "total": total,
    }


def fits(total_bytes: np.ndarray, capacity_bytes: float) -> np.ndarray:
    """Whether ``total_bytes`` fits in HBM after :data:`RESERVED_FRACTION` is set aside."""
    return total_bytes <= capacity_bytes * (1 - RESERVED_FRACTION)
