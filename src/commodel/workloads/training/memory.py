"""Memory per GPU of a training layout: weights, gradients, optimizer state, activations, logits, and
the reserve no tensor can use (:data:`CATEGORIES`, adding up to the total).

Mixed-precision Adam as current Megatron-Core recipes run it (Rajbhandari et al. 2020 for the
ZeRO stages): 2 B of weights per parameter (BF16; under FP8 with ``fp8_param_gather`` the primary
weights are FP8 row-wise and column-wise copies, without it BF16 weights beside those copies: 4 B),
4 B of FP32 gradient buffer (``grad_reduce_in_fp32``, Megatron-LM's default under BF16; 2 B in BF16
without it),
12 B of fp32 master weights, momentum and variance; ZeRO stage 1 (the distributed optimizer) shards
the optimizer state, 2 also the gradients, 3 (FSDP) also the weights, over the dp x cp ranks (expert
parameters, split etp x ep ways, over their tp x cp x dp / (etp x ep) replicas). ZeRO-3 also holds
unsharded copies beside its shards (:func:`unsharded_state`): the gathered layers and the gradients
waiting for their reduce-scatter. Activations follow
:func:`activation_bytes_per_token`; 1F1B keeps ``min(m, pp - i)`` micro-batches in flight on stage
i, interleaving ``1 + (pp - 1) / (pp vpp)`` times more (Narayanan et al. 2021), each stage its own
layers (:func:`stage_split`). The last stage also holds fp32 logits of one micro-batch, and the
multi-token prediction modules. DualPipe
(DeepSeek-V3 report, Table 2) puts two stages on every GPU (stage i and stage pp - 1 - i: twice the
parameters, and the first GPU holds the embedding, the output layer and the logits) and keeps
``min(m, pp + 1)`` micro-batches' activations in flight.
"""

from __future__ import annotations

import numpy as np

from commodel.compute.precision import Precision
from commodel.workloads.model.schema import Transformer
from commodel.workloads.model.transformer import activation_bytes_per_token, layer_weights
from commodel.workloads.parallel.layout import Layout, on_distinct, stage_split

WEIGHT_BYTES, OPTIMIZER_BYTES = 2.0, 12.0
#: Adam's two moments, 4 B each in FP32 or 2 B each in BF16 (Megatron's precision-aware optimizer,
#: ``--exp-avg-dtype bf16 --exp-avg-sq-dtype bf16``): 4 B of :data:`OPTIMIZER_BYTES` less per parameter.
BF16_MOMENTS_SAVING = 4.0

#: Layers a ZeRO-3 (FSDP) GPU holds gathered at once when it frees each after its forward: the layer
#: computing and the next, prefetched (PyTorch FSDP2's implicit prefetch, Megatron-FSDP's double
#: buffer); as many layers' unsharded gradients wait for their reduce-scatter.
FSDP_LAYERS_IN_FLIGHT = 2

#: Weight bytes per parameter under FP8 without ``fp8_param_gather``: BF16 weights and the row-wise and
#: column-wise FP8 copies Transformer Engine keeps of them.
FP8_BESIDE_BF16_BYTES = 4.0

#: HBM kept free whatever the GPU's size: the CUDA context, NCCL's communicator buffers (NVLS's
#: multicast buffers among them), cuBLAS and userbuffers workspaces (assumed).
RESERVED_BYTES = 2 * 2**30
#: HBM the caching allocator leaves unusable, in proportion to what it holds (fragmentation; assumed).
RESERVED_FRACTION = 0.05

#: Activation bytes per token per layer that tensor parallelism without sequence parallelism does not
#: split: layer norm inputs and outputs and dropout masks (Korthikanti et al. 2022: 10 s b h).
REPLICATED_WITHOUT_SP = 10.0


def optimizer_bytes(x: Layout) -> np.ndarray:
    """Optimizer state per parameter: FP32 master weights and Adam's moments, :data:`OPTIMIZER_BYTES`,
    or :data:`BF16_MOMENTS_SAVING` less with the moments in BF16 (``bf16_moments``)."""
    return OPTIMIZER_BYTES - BF16_MOMENTS_SAVING * np.asarray(x.bf16_moments, dtype=float)


def gradient_bytes(x: Layout) -> np.ndarray:
    """Bytes per gradient, held and reduced: 4 where the layout accumulates and reduces them in FP32
    (``grad_reduce_in_fp32``), else 2 (BF16)."""
    return np.where(x.grad_reduce_in_fp32, 4.0, 2.0)


def _stage_loads(
    model: Transformer, x: Layout, split: tuple[np.ndarray, ...] | None = None
) -> list[tuple[np.ndarray, ...]]:
    """What the GPUs of each kind of pipeline position hold, as (valid, layers, tables, end) per
    kind: the first stage, a middle stage (the second: the most micro-batches in flight of the middle
    ones) and the last (with the multi-token prediction modules' layers) under 1F1B; under DualPipe
    the GPU with the first and last stage and one with two middle stages (layers at the two stages'
    mean: a micro-batch in flight is one stage's). ``tables``: vocabulary-sized weight matrices held
    (the embedding, the output layer; one where they are tied and one GPU holds both); ``end``: 1
    where the position holds the logits and the multi-token prediction modules' projections.
    ``split``: :func:`stage_split`'s result, where the caller has it."""
    first, middle, last = stage_split(model, x) if split is None else split
    last = last + x.mtp_layers
    both_tables = 1 if model.tied_embeddings else 2
    dual = x.dualpipe
    return [
        (~dual & (x.pp > 1), first, 1, 0),
        (x.pp > 2, middle, 0, 0),
        (~dual, last, np.where(x.pp == 1, both_tables, 1), 1),
        (dual, (first + last) / 2, both_tables, 1),
    ]


def layer_parameters(model: Transformer, x: Layout) -> tuple[np.ndarray, np.ndarray]:
    """(dense, expert) parameters of one (average) layer on one GPU before any ZeRO sharding: its
    attention, dense MLP or router and shared experts and its two norms over tp, its routed experts
    over etp x ep."""
    w = layer_weights(model)
    moe_share = model.moe_layers / model.layers
    per_layer = w.attention + (1 - moe_share) * w.dense_mlp + moe_share * (w.moe_shared + w.router)
    return (per_layer + 2 * model.hidden) / x.tp, moe_share * w.moe_experts / (x.expert_tp * x.ep)


#: The layout fields :func:`stage_parameters` reads: a sweep's layouts share few combinations of them.
STAGE_FIELDS = (
    "pp", "tp", "etp", "ep", "schedule", "mtp_layers", "first_stage_layers", "last_stage_layers", "ends_as_layers",
)  # fmt: skip


def stage_parameters(model: Transformer, x: Layout) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(dense, expert, root) parameters held by one GPU of the largest pipeline stage (of the two
    stages a GPU holds under DualPipe): its layers (:func:`layer_parameters`), its vocabulary-sized
    tables and, on the last stage, the multi-token prediction modules' ``2h x h`` projections.
    ``root``: the part of ``dense`` outside the layers (the tables and projections), which FSDP
    wraps in the root module rather than in a layer's. Priced once per distinct :data:`STAGE_FIELDS`."""
    return on_distinct(lambda at: _stage_parameters(model, at), x, STAGE_FIELDS)


def _stage_parameters(model: Transformer, x: Layout) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    layer_dense, layer_experts = layer_parameters(model, x)
    copies = np.where(x.dualpipe, 2, 1)
    h = model.hidden
    best_dense = best_experts = best_root = np.zeros(np.shape(x.pp))
    for valid, layers, tables, end in _stage_loads(model, x):
        held = copies * layers
        root = (tables * model.vocab * h + end * x.mtp_layers * 2 * h**2) / x.tp
        dense = held * layer_dense + root
        experts = held * layer_experts
        larger = valid & (dense + experts > best_dense + best_experts)
        best_dense, best_experts, best_root = (
            np.where(larger, dense, best_dense),
            np.where(larger, experts, best_experts),
            np.where(larger, root, best_root),
        )
    return best_dense, best_experts, best_root


def weight_bytes(x: Layout, recipe: Precision | None) -> np.ndarray:
    """Weight bytes per parameter: :data:`WEIGHT_BYTES`, or under FP8 without ``fp8_param_gather``
    :data:`FP8_BESIDE_BF16_BYTES`."""
    quantized = recipe is not None and recipe.quantized
    return np.where(
        quantized & ~np.asarray(x.fp8_param_gather, dtype=bool), FP8_BESIDE_BF16_BYTES, WEIGHT_BYTES
    )


def gathered_bytes(x: Layout, recipe: Precision | None) -> np.ndarray:
    """Bytes per parameter a data-parallel all-gather delivers: the 16-bit weights, or under FP8 with
    ``fp8_param_gather`` the recipe's gathered FP8 weights (:attr:`Precision.gathered_bytes`)."""
    gathered = WEIGHT_BYTES if recipe is None else recipe.gathered_bytes  # 16-bit recipes: 2 B
    return np.where(np.asarray(x.fp8_param_gather, dtype=bool), gathered, WEIGHT_BYTES)


def unsharded_state(
    model: Transformer, x: Layout, recipe: Precision | None, root: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """(weight, gradient) bytes ZeRO-3 (FSDP) holds unsharded beside its shards: the gathered
    parameters (:func:`gathered_bytes` each) of :data:`FSDP_LAYERS_IN_FLIGHT` layers, or with
    ``reshard_after_forward`` off of every layer of the largest stage (each held from its forward to
    its backward), and the unsharded gradients of :data:`FSDP_LAYERS_IN_FLIGHT` layers waiting for
    their reduce-scatter. The ``root`` parameters outside the layers (the embedding and output
    tables) stay gathered from the forward's start to the backward's end, in 16 bits, and their
    gradients wait unsharded for the root's reduce-scatter at the backward's end: PyTorch FSDP2's
    ``fully_shard`` does not reshard the root module after its forward (its ``reshard_after_forward``
    is set to False for the root, whose parameters the backward would gather again at once), and the
    output layer's gradient comes first in the backward. A parameter whose data-parallel group is
    one rank (experts at ``expert_dp`` 1, dense ones at ``dp x cp`` 1) is never sharded, so never
    gathered. Nothing below ZeRO-3."""
    dense, experts = layer_parameters(model, x)
    first, middle, last = stage_split(model, x)
    layers = np.maximum(np.maximum(first, middle), last) * np.where(x.dualpipe, 2, 1)
    held = np.where(x.reshard_after_forward, np.minimum(FSDP_LAYERS_IN_FLIGHT, layers), layers)
    zero3 = np.asarray(x.zero) == 3
    # A parameter held by one rank of its data-parallel group is whole already: nothing to gather.
    split_dense, split_experts = x.dp * x.cp > 1, x.expert_dp > 1
    per_layer = np.where(zero3, dense * split_dense + experts * split_experts, 0.0)
    root = np.where(zero3 & split_dense, root, 0.0)
    weights = per_layer * held * gathered_bytes(x, recipe) + root * WEIGHT_BYTES
    return weights, (per_layer * FSDP_LAYERS_IN_FLIGHT + root) * gradient_bytes(x)


def memory_parts(
    model: Transformer, x: Layout, attention_impl: str = "flash", recipe: Precision | None = None
) -> dict[str, np.ndarray]:
    """What a GPU of the largest stage holds independently of the number of micro-batches: its
    parameters (:func:`stage_parameters`), model states in bytes (weights, gradients, optimizer; of
    the weights, ``gathered_weights`` are ZeRO-3's unsharded copies), one layer's activations for one
    micro-batch, and the logits of one micro-batch (one set per multi-token prediction module more)."""
    dense, experts, root = stage_parameters(model, x)
    shard_dense, shard_experts = x.dp * x.cp, x.expert_dp

    def sharded(per_param: float, from_stage: int) -> np.ndarray:
        on = x.zero >= from_stage
        return per_param * (dense / np.where(on, shard_dense, 1) + experts / np.where(on, shard_experts, 1))

    per_token = activation_bytes_per_token(
        model, x.recompute, x.seq / x.cp, attention_impl, recipe, x.recompute_modules, x.fp8_activation_input
    )
    replicated = REPLICATED_WITHOUT_SP * model.hidden
    split = np.where(
        x.sequence_parallel,
        per_token / x.tp,
        np.maximum(per_token - replicated, 0) / x.tp + np.minimum(per_token, replicated),
    )
    gathered, unsharded_grads = unsharded_state(model, x, recipe, root)
    return {
        "dense_parameters": dense,
        "expert_parameters": experts,
        "root_parameters": root,
        "weights": sharded(1.0, 3) * weight_bytes(x, recipe) + gathered,
        "gathered_weights": gathered,
        "gradients": sharded(gradient_bytes(x), 2) + unsharded_grads,
        "optimizer": sharded(optimizer_bytes(x), 1),
        "layer_activations": x.tokens * split,
        "logits": (1 + x.mtp_layers) * 4.0 * x.tokens * model.vocab / x.tp,
    }


def memory_with_microbatches(
    parts: dict[str, np.ndarray], model: Transformer, x: Layout, split: tuple[np.ndarray, ...] | None = None
) -> dict[str, np.ndarray]:
    """Bytes per GPU by kind, and ``total``, at the pipeline position that needs the most: a stage's
    layers times its micro-batches in flight (``min(m, pp - i)`` on stage i under 1F1B, interleaving
    ``1 + (pp - 1) / (pp vpp)`` times more; ``min(m, pp + 1)`` under DualPipe), and on the end stage
    the logits of one micro-batch (which the last stage holds with a single micro-batch in flight).
    The model states are the largest stage's (:func:`stage_parameters`): where that is not the stage
    with the most activations, the total is an upper bound. ``split``: as :func:`_stage_loads`."""
    m = x.microbatches
    interleave = np.where(x.vpp > 1, 1 + (x.pp - 1) / (x.pp * x.vpp), 1.0)
    dual_flight = np.minimum(m, x.pp + 1)
    in_flight = [
        np.minimum(m, x.pp) * interleave,
        np.where(x.dualpipe, dual_flight, np.minimum(m, x.pp - 1) * interleave),
        1.0,
        dual_flight,
    ]
    # The positions without the logits (the first and middle stages) against those with them.
    loads = _stage_loads(model, x, split)
    layer = parts["layer_activations"]
    held = [
        (end, valid * layers * layer * flight)
        for (valid, layers, _, end), flight in zip(loads, in_flight, strict=True)
    ]
    inner = [h for end, h in held if not end]
    ends = [h for end, h in held if end]
    inner_peak = np.maximum(*inner)
    end_held = ends[0] + ends[1]  # one of the two is valid: 1F1B's last stage, or DualPipe's end GPU
    end_wins = end_held + parts["logits"] >= inner_peak
    activations = np.where(end_wins, end_held, inner_peak)
    logits = np.where(end_wins, parts["logits"], 0.0)
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
    return memory_with_microbatches(memory_parts(model, x, attention_impl), model, x)


#: The categories a GPU's memory is reported in; they add up to its total.
CATEGORIES = ("weights", "gradients", "optimizer", "activations", "logits", "reserved")


def reserved_memory(capacity_bytes: float) -> float:
    """HBM no tensor of the job can use: :data:`RESERVED_BYTES` (CUDA context, NCCL's buffers,
    workspaces) and :data:`RESERVED_FRACTION` of the capacity (the caching allocator's)."""
    return RESERVED_BYTES + RESERVED_FRACTION * capacity_bytes


def by_category(memory: dict[str, np.ndarray], capacity_bytes: float) -> dict[str, np.ndarray]:
    """``memory_CATEGORY_bytes`` of :func:`memory_with_microbatches`'s parts with the reserve
    (:func:`reserved_memory`), and ``memory_per_gpu_bytes``, their sum: what the GPU must hold."""
    parts = {**{k: memory[k] for k in CATEGORIES[:-1]}, "reserved": reserved_memory(capacity_bytes)}
    shape = np.shape(memory["total"])
    out = {f"memory_{k}_bytes": np.broadcast_to(np.asarray(v, dtype=float), shape) for k, v in parts.items()}
    return out | {"memory_per_gpu_bytes": memory["total"] + parts["reserved"]}


def fits(memory_bytes: np.ndarray, capacity_bytes: float) -> np.ndarray:
    """Whether a GPU holding ``memory_bytes`` (its reserve included: :func:`by_category`) fits its
    HBM."""
    return memory_bytes <= capacity_bytes * (1 + 1e-12)
