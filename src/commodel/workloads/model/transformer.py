"""Parameter, FLOP, kernel and activation accounting of a transformer layer (vectorized over layouts).

Conventions (Narayanan et al. 2021; Korthikanti et al. 2022):

- A layer's forward pass is a list of GEMMs ``(m, n, k)`` on one GPU: tokens x (output / tp) x input,
  flash attention, and elementwise kernels. Column-parallel GEMMs split n by tp, row-parallel split k.
- Model FLOPs per token for training (no recomputation):
  ``6 N_matmul + 6 l s n_h (d_qk + d_v) + 6 V h``: matmul weights x 2 FLOPs x 3 passes, full
  (non-causal) attention scores as Megatron and PaLM count them, and the output projection.
- Activation bytes per token per layer (bf16, flash attention, no recomputation), the generalisation
  of Korthikanti's ``34 h`` to GQA and gated MLPs: attention ``2h + 2h + 4 n_kv d + 2h + h``
  (LN output, Q, K and V, attention output, dropout mask), MLP ``2h + 2f_u + 2f + h`` (input, up
  projection(s), activation output, dropout mask), norms ``4h``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike

from commodel.compute.kernels import (
    DTYPE_BYTES,
)
from commodel.compute.precision import Precision
from commodel.errors import pick
from commodel.workloads.model.recompute import has_module
from commodel.workloads.model.schema import Transformer

#: Flash attention (fused, scores stay on chip) or the unfused QK^T / softmax / dropout / PV sequence.
ATTENTION_IMPLEMENTATIONS = ("flash", "unfused")


@dataclass(frozen=True)
class LayerWeights:
    """Weight counts of one layer by block (entries of one matrix each)."""

    attention: int
    dense_mlp: int
    moe_experts: int
    moe_active: int
    moe_shared: int
    router: int


def attention_weights(model: Transformer) -> int:
    """Q, K, V and output projection weights of one layer (MLA: its low-rank factors)."""
    h = model.hidden
    if model.mla is not None:
        a = model.mla
        q = h * a.q_lora_rank + a.q_lora_rank * model.heads * (a.qk_nope_head_dim + a.qk_rope_head_dim)
        kv = h * (a.kv_lora_rank + a.qk_rope_head_dim)
        kv += a.kv_lora_rank * model.heads * (a.qk_nope_head_dim + a.v_head_dim)
        return q + kv + model.heads * a.v_head_dim * h
    d = model.d_head
    return h * (model.heads + 2 * model.n_kv_heads) * d + model.heads * d * h


def mlp_weights(hidden: int, ffn: int, gated: bool) -> int:
    """Up (and gate) and down projections: ``(3 if gated else 2) h f``."""
    return (3 if gated else 2) * hidden * ffn


def layer_weights(model: Transformer) -> LayerWeights:
    h, moe = model.hidden, model.moe
    expert = 0 if moe is None else mlp_weights(h, moe.expert_ffn_hidden, model.gated_mlp)
    return LayerWeights(
        attention=attention_weights(model),
        dense_mlp=mlp_weights(h, model.ffn_hidden, model.gated_mlp),
        moe_experts=0 if moe is None else moe.experts * expert,
        moe_active=0 if moe is None else moe.top_k * expert,
        moe_shared=0 if moe is None else moe.shared_experts * expert,
        router=0 if moe is None else h * moe.experts,
    )


def parameters(model: Transformer) -> dict[str, float]:
    """Total and per-token-active parameter counts, and their parts (norms included)."""
    w = layer_weights(model)
    dense, moe = model.layers - model.moe_layers, model.moe_layers
    norms = 2 * model.hidden * model.layers + model.hidden
    embedding = model.vocab * model.hidden * (1 if model.tied_embeddings else 2)
    layers_total = model.layers * w.attention + dense * w.dense_mlp
    layers_total += moe * (w.moe_experts + w.moe_shared + w.router)
    matmul_active = model.layers * w.attention + dense * w.dense_mlp
    matmul_active += moe * (w.moe_active + w.moe_shared + w.router)
    return {
        "total": layers_total + norms + embedding,
        "active": matmul_active + norms + embedding,
        "layers": layers_total + norms,
        "embedding": embedding,
        "experts": moe * w.moe_experts,
        "matmul_active": matmul_active,
    }


def attention_dims(model: Transformer) -> tuple[int, int]:
    """Head dimensions of the score (QK) and value products."""
    if model.mla is not None:
        return model.mla.qk_nope_head_dim + model.mla.qk_rope_head_dim, model.mla.v_head_dim
    return model.d_head, model.d_head


def attended_keys(model: Transformer, seq: ArrayLike, causal: bool) -> np.ndarray:
    """Keys per query averaged over the layers: ``s`` (``s / 2`` causal, the lower triangle), at most
    the window in sliding-window layers."""
    s = np.asarray(seq, dtype=float)
    full = s / 2 if causal else s
    windowed = model.windowed_layers / model.layers
    return (1 - windowed) * full + windowed * np.minimum(full, model.sliding_window or np.inf)


def model_flops_per_token(
    model: Transformer, seq: ArrayLike, causal: bool = True, mtp: ArrayLike = 0
) -> np.ndarray:
    """Training FLOPs per token without recomputation (the MFU convention, see module docstring):
    ``6 N_matmul + 6 l n_h (d_qk + d_v) keys + 6 V h`` with ``keys`` the attended keys per query
    (:func:`attended_keys`: half the sequence for a causal model, as Megatron-Bridge counts;
    ``causal=False`` is the Megatron/PaLM convention of 2021-22, which counts the full square); each
    of ``mtp`` multi-token prediction modules adds a mean layer, its ``2h -> h`` projection
    (``12 h^2``) and the logits again, as Megatron-LM counts them."""
    d_qk, d_v = attention_dims(model)
    p = parameters(model)
    attention_scores = 6 * model.layers * attended_keys(model, seq, causal) * model.heads * (d_qk + d_v)
    logits = 6 * model.vocab * model.hidden
    layers = 6 * p["matmul_active"] + attention_scores
    module = layers / model.layers + 12 * model.hidden**2 + logits
    return layers + logits + np.asarray(mtp, dtype=float) * module


def recompute_flops_per_token(
    model: Transformer, seq: ArrayLike, recompute: ArrayLike, causal: bool = True, modules: ArrayLike = 0
) -> np.ndarray:
    """Extra forward FLOPs per token of activation recomputation: 0 = none, 1 = selective (attention
    scores), 2 = full (the whole layer forward); outside full, the matrix FLOPs of each module's
    forward run again (``2 x`` its weights per token): ``mla_up_proj`` the up-projections, ``mlp`` the
    dense layers' MLPs, ``shared_experts`` the shared experts, ``moe`` the router and the experts a
    token reaches with the shared ones, ``ops`` the key, attention-output and MLP up projections (the
    norms and activation functions are not matrix FLOPs)."""
    d_qk, d_v = attention_dims(model)
    scores = 2 * model.layers * attended_keys(model, seq, causal) * model.heads * (d_qk + d_v)
    full = 2 * parameters(model)["matmul_active"] + scores
    code = np.asarray(recompute)
    if not np.any(modules):  # the common case, without the arithmetic
        return np.where(code == 2, full, np.where(code == 1, scores, 0.0))
    w = layer_weights(model)
    dense_layers = model.layers - model.moe_layers
    again = {
        "mlp": dense_layers * w.dense_mlp,
        "shared_experts": model.moe_layers * w.moe_shared,
        "moe": model.moe_layers * (w.router + w.moe_active + w.moe_shared),
    }
    if model.moe is None and model.mla is None:  # torchtitan's per-op policy: wk, wo, w3 again
        again["ops"] = (
            model.layers * model.hidden * (model.n_kv_heads * d_qk + model.heads * d_v + model.ffn_hidden)
        )
    if model.mla is not None:
        a = model.mla
        again["mla_up_proj"] = model.layers * (
            a.q_lora_rank * model.heads * d_qk + a.kv_lora_rank * model.heads * (a.qk_nope_head_dim + d_v)
        )
    modules_flops = sum(
        np.where(has_module(modules, name), 2.0 * weights, 0.0) for name, weights in again.items()
    )
    return np.where(code == 2, full, np.where(code == 1, scores, 0.0) + modules_flops)


def routed_copies(model: Transformer, tokens: ArrayLike) -> np.ndarray:
    """Token copies a MoE layer's router sends to experts: ``tokens x top_k`` (0 for a dense model);
    the expert-parallel dispatch moves them, the combine brings them back."""
    return np.asarray(tokens, dtype=float) * (model.moe.top_k if model.moe else 0)


def tensor_parallel_mlps(model: Transformer) -> float:
    """Share of a layer's MLP that runs tensor-parallel, with its gather and reduction: dense layers'
    MLPs and MoE layers' shared experts; routed experts' tokens go through the dispatcher instead."""
    moe_share = model.moe_layers / model.layers
    shared = 1.0 if model.moe is not None and model.moe.shared_experts else 0.0
    return 1 - moe_share + moe_share * shared


def recomputed_pairs(model: Transformer, recompute: ArrayLike, modules: ArrayLike) -> np.ndarray:
    """Share of a layer's forward tensor-parallel collectives that recomputation runs again: all of
    them under full recomputation; else those of the MLPs a whole-module checkpoint re-runs (``mlp``
    the dense layers', ``shared_experts`` or ``moe`` the shared experts'), of the layer's
    ``1 + tensor_parallel_mlps`` gather-reduce pairs (routed experts have none)."""
    full = np.where(np.asarray(recompute) == 2, 1.0, 0.0)
    if not np.any(modules):
        return full
    moe_share = model.moe_layers / model.layers
    shared = moe_share if model.moe is not None and model.moe.shared_experts else 0.0
    mlps = (1 - moe_share) * has_module(modules, "mlp")
    mlps = mlps + shared * (has_module(modules, "shared_experts") | has_module(modules, "moe"))
    return np.where(full == 1, 1.0, mlps / (1 + tensor_parallel_mlps(model)))


def dispatched_tokens(tokens: ArrayLike, tp: ArrayLike, sequence_parallel: ArrayLike) -> np.ndarray:
    """Tokens a GPU holds between tensor-parallel regions: its ``tokens / tp`` sequence shard with
    sequence parallelism, all of them without. A MoE layer routes and dispatches these."""
    T = np.asarray(tokens, dtype=float)
    return np.where(np.asarray(sequence_parallel, dtype=bool), T / np.asarray(tp, dtype=float), T)


def activation_bytes_per_token(
    model: Transformer,
    recompute: ArrayLike,
    seq: ArrayLike = 0,
    attention_impl: str = "flash",
    recipe: Precision | None = None,
    modules: ArrayLike = 0,
    fp8_activation_input: ArrayLike = False,
) -> np.ndarray:
    """Activation bytes stored per token per layer before tensor/sequence splitting.

    Korthikanti et al. (2022), generalised to GQA, MLA, gated MLPs and MoE: the inputs of the four
    linear layers (attention's norm output, the attention output, ``heads x d_v`` wide, the MLP's norm
    output, or its top_k permuted copies, and the activation output), Q, K and V as the fused attention
    keeps them (``heads x d_qk``, ``kv_heads x (d_qk + d_v)``: for MLA every head's up-projected key and
    value; Korthikanti's ``2h`` for Q assumes ``heads x d = h``, which gpt-oss and Qwen3 do not have),
    MLA's query and key-value latents (their norms' inputs and the up-projections' inputs), the FC1
    output, the shared experts' (an MLP of ``shared x f`` beside the routed ones: its FC1 output, its
    activation output and, under FP8, its own copy of the norm output), the two norms' inputs, and
    1-byte dropout masks where the model uses dropout. Under FP8 the linear layers keep their quantized
    inputs (1 B) for the backward pass; everything else is BF16 (2 B), the MoE router's input (the MLP's
    norm output: the router GEMM runs in BF16) too. Unfused attention adds Korthikanti's ``5 n_h s`` for
    scores, softmax output and dropout mask. With ``fp8_activation_input`` the activation functions keep
    their inputs (the FC1 outputs) in FP8, 1 B per element (Megatron's ``--activation-func-fp8-input-
    store``, DeepSeek-V3 report section 3.3.3), whatever the recipe.

    recompute 0 = none, 1 = selective (Megatron's checkpointed attention core: its inputs Q, K, V are
    kept, and what the core stores itself is dropped: the unfused scores, softmax and dropout mask;
    flash attention stores nothing more than Q, K, V and the output, which other layers hold anyway,
    so selective saves nothing there), 2 = full (keep only the layer input, 2h).

    Outside full recomputation, each module in ``modules`` (:data:`~commodel.workloads.parallel.layout.
    RECOMPUTE_MODULES`) frees storage. Megatron-Core's output-discarding checkpoints free an output
    even where a later kernel saved a reference to it: ``layernorm`` the two norm outputs (2 x 2h),
    ``moe_act`` the activation output (top_k x 2f), ``mla_up_proj`` the up-projected Q, K and V (all
    BF16). Under FP8, the first two free only what a BF16 kernel holds (a MoE router's input, 2h):
    the linear layer reading an output saved its own quantized copy of it, which is what the count
    above holds (assumed: Transformer Engine keeps that copy). Whole-module checkpoints keep the
    module's input and free all it holds past it: ``mlp`` a dense MLP's FC1 and activation outputs
    (its BF16 input replacing FC1's FP8 copy under FP8), ``shared_experts`` the shared experts',
    ``moe`` the experts' permuted copies and insides with the shared experts'. A MoE model's layers
    are averaged by kind (DeepSeek-V3: 3 dense MLPs, 58 MoE layers).
    """
    h = model.hidden
    d_qk, d_v = attention_dims(model)
    moe = model.moe
    up = 2 if model.gated_mlp else 1  # FC1 widths: gate and up projections in a gated MLP
    linear = 1.0 if recipe is not None and recipe.quantized else 2.0
    mask = 1.0 if model.dropout else 0.0
    attention_out = linear * model.heads * d_v  # input of the output projection
    qkv_heads = 2 * (model.heads * d_qk + model.n_kv_heads * (d_qk + d_v))
    qkv = qkv_heads
    if model.mla is not None:
        qkv += (2 + linear) * (model.mla.q_lora_rank + model.mla.kv_lora_rank)
    attention_part = linear * h + qkv + attention_out + mask * h

    fc1_out = 2.0 - np.asarray(fp8_activation_input, dtype=float)  # bytes per FC1 output element

    def inside(width: float) -> np.ndarray:
        """What an MLP of ``width`` holds past its input: FC1's output and the activation output."""
        return fc1_out * up * width + linear * width

    # A dense layer's MLP: its norm output (FC1's input) and inside; a MoE layer's: the norm output in
    # BF16 (the router's input), the experts' permuted copies and their insides, the shared experts'
    # insides and, under FP8, their own copy of the norm output. Averaged by the layers of each kind.
    moe_share = model.moe_layers / model.layers
    dense_inside = inside(model.ffn_hidden)
    shared = 0.0
    if moe is not None and moe.shared_experts:
        shared = inside(moe.shared_experts * moe.expert_ffn_hidden) + (2.0 - linear) * h
    routed = 0.0 if moe is None else moe.top_k * (linear * h + inside(moe.expert_ffn_hidden))
    moe_mlp = 2.0 * h + routed + shared
    mlp_part = (1 - moe_share) * (linear * h + dense_inside) + moe_share * moe_mlp + mask * h
    none = attention_part + mlp_part + 4 * h
    scores = 5.0 * model.heads * np.asarray(seq, dtype=float) if attention_impl == "unfused" else 0.0
    parts = (linear, qkv_heads, dense_inside, routed, shared, none)
    freed = _freed(model, modules, *parts) if np.any(modules) else 0.0
    code = np.asarray(recompute)
    return np.where(code == 2, 2.0 * h, np.where(code == 1, none, none + scores) - freed)


def _op_saved(model: Transformer) -> float:
    """Bytes per token and layer torchtitan's per-op checkpointing keeps (``ops``): the block's input
    and the BF16 outputs of the ops its policy saves, the odd matmuls (the query and value projections,
    the MLP's gate and down projections) and attention's output."""
    d_qk, d_v = attention_dims(model)
    h = model.hidden
    return 2.0 * (h + model.heads * d_qk + model.n_kv_heads * d_v + model.heads * d_v + model.ffn_hidden + h)


def _freed(model: Transformer, modules: ArrayLike, linear: float, qkv_heads: float, dense_inside: np.ndarray,
           routed: np.ndarray | float, shared: np.ndarray | float, stored: np.ndarray) -> np.ndarray:  # fmt: skip
    """Bytes per token and layer the recompute ``modules`` free (:func:`activation_bytes_per_token`
    says which and why), given a layer's parts: the Q, K, V heads, the dense MLP's inside, the routed
    experts' copies and insides, the shared experts' part, and all it ``stored`` without them
    (torchtitan's per-op policy keeps only what it saves, :func:`_op_saved`)."""
    h, moe = model.hidden, model.moe
    moe_share = model.moe_layers / model.layers
    bf16 = float(linear == 2.0)  # the linear layers hold their inputs themselves, not FP8 copies
    mlp_norm_held = moe_share + (1 - moe_share) * bf16  # a MoE router holds it in BF16
    act = 0.0 if moe is None else moe.top_k * 2 * moe.expert_ffn_hidden
    return (
        has_module(modules, "layernorm") * (bf16 + mlp_norm_held) * 2 * h
        + has_module(modules, "moe_act") * moe_share * bf16 * act
        + has_module(modules, "mla_up_proj") * (model.mla is not None) * qkv_heads
        # The dense MLP's checkpoint keeps its input in BF16 where FC1 kept an FP8 copy.
        + has_module(modules, "mlp") * (1 - moe_share) * (dense_inside - (2.0 - linear) * h)
        + has_module(modules, "moe") * moe_share * (routed + shared)
        + has_module(modules, "shared_experts") * moe_share * shared
        + has_module(modules, "ops") * np.maximum(stored - _op_saved(model), 0.0)
    )


def bytes_per(dtype: str) -> float:
    """Bytes per element of ``dtype`` (activations and communicated tensors)."""
    return pick("dtype", dtype, DTYPE_BYTES)
