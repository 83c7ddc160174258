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

from commodel.compute.kernels import DTYPE_BYTES, Kernel, attention, elementwise, gemm, unfused_attention
from commodel.errors import pick, unknown
from commodel.workloads.schema import Transformer

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


def model_flops_per_token(model: Transformer, seq: ArrayLike) -> np.ndarray:
    """Training FLOPs per token without recomputation (the MFU convention, see module docstring)."""
    d_qk, d_v = attention_dims(model)
    p = parameters(model)
    attention_scores = 6 * model.layers * np.asarray(seq, dtype=float) * model.heads * (d_qk + d_v)
    logits = 6 * model.vocab * model.hidden
    return 6 * p["matmul_active"] + attention_scores + logits


def recompute_flops_per_token(model: Transformer, seq: ArrayLike, recompute: ArrayLike) -> np.ndarray:
    """Extra forward FLOPs per token of activation recomputation: 0 = none, 1 = selective (attention
    scores), 2 = full (the whole layer forward)."""
    d_qk, d_v = attention_dims(model)
    scores = 2 * model.layers * np.asarray(seq, dtype=float) * model.heads * (d_qk + d_v)
    full = 2 * parameters(model)["matmul_active"] + scores
    code = np.asarray(recompute)
    return np.where(code == 2, full, np.where(code == 1, scores, 0.0))


#: How a GEMM meets tensor parallelism (Megatron): a ``column``-parallel GEMM consumes the gathered
#: input (allgather before it with sequence parallelism) and its input gradient is a partial sum
#: (reduced after its backward); a ``row``-parallel GEMM produces partial sums (reduced after it) and
#: its backward consumes the gathered output gradient; a ``local`` GEMM touches no TP collective.
GEMM_ROLES = ("column", "row", "local")


@dataclass(frozen=True)
class LayerKernels:
    """The forward kernels of one (average) layer on one GPU, each with how many run per layer and,
    for GEMMs, their tensor-parallel role (:data:`GEMM_ROLES`)."""

    gemms: list[tuple[Kernel, float, str]]
    attention: list[Kernel]
    elementwise: list[tuple[Kernel, float]]


def layer_kernels(
    model: Transformer,
    tokens: ArrayLike,
    micro_batch: ArrayLike,
    seq: ArrayLike,
    tp: ArrayLike,
    cp: ArrayLike,
    ep: ArrayLike,
    sequence_parallel: ArrayLike,
    dtype: str,
    attention_impl: str = "flash",
) -> LayerKernels:
    """Forward kernels of one layer on one GPU for ``tokens`` = micro_batch x seq / cp local tokens.

    MoE layers are averaged with dense ones by their share of the depth (DeepSeek-V3: 58 of 61). Each
    of the E/ep local experts receives ``tokens x top_k x ep / E`` tokens on average (perfect balance).
    """
    T = np.asarray(tokens, dtype=float)
    t = np.asarray(tp, dtype=float)
    h = model.hidden
    moe_share = model.moe_layers / model.layers
    gemms: list[tuple[Kernel, float, str]] = []
    if model.mla is not None:
        a = model.mla
        qk = a.qk_nope_head_dim + a.qk_rope_head_dim
        gemms += [
            (gemm(T, a.q_lora_rank, h, dtype), 1.0, "local"),
            (gemm(T, model.heads * qk / t, a.q_lora_rank, dtype), 1.0, "column"),
            (gemm(T, a.kv_lora_rank + a.qk_rope_head_dim, h, dtype), 1.0, "local"),
            (
                gemm(T, model.heads * (a.qk_nope_head_dim + a.v_head_dim) / t, a.kv_lora_rank, dtype),
                1.0,
                "column",
            ),
            (gemm(T, h, model.heads * a.v_head_dim / t, dtype), 1.0, "row"),
        ]
    else:
        d = model.d_head
        kv_per_rank = np.maximum(model.n_kv_heads / t, 1.0)
        gemms += [
            (gemm(T, (model.heads / t + 2 * kv_per_rank) * d, h, dtype), 1.0, "column"),
            (gemm(T, h, model.heads * d / t, dtype), 1.0, "row"),
        ]
    up = 2 if model.gated_mlp else 1
    dense = 1 - moe_share
    if dense > 0:
        f = model.ffn_hidden
        gemms += [(gemm(T, up * f / t, h, dtype), dense, "column"), (gemm(T, h, f / t, dtype), dense, "row")]
    if model.moe is not None:
        m = model.moe
        e = np.asarray(ep, dtype=float)
        per_expert = T * m.top_k * e / m.experts
        local = m.experts / e
        fe = m.expert_ffn_hidden
        gemms += [
            (gemm(T, m.experts, h, dtype), moe_share, "local"),
            (gemm(per_expert, up * fe / t, h, dtype), moe_share * local, "column"),
            (gemm(per_expert, h, fe / t, dtype), moe_share * local, "row"),
        ]
        if m.shared_experts:
            shared = m.shared_experts * fe
            gemms += [
                (gemm(T, up * shared / t, h, dtype), moe_share, "column"),
                (gemm(T, h, shared / t, dtype), moe_share, "row"),
            ]
    d_qk, d_v = attention_dims(model)
    s = np.asarray(seq, dtype=float)
    if attention_impl not in ATTENTION_IMPLEMENTATIONS:
        raise unknown("attention implementation", attention_impl, ATTENTION_IMPLEMENTATIONS)
    shape = (micro_batch, model.heads / t, s / np.asarray(cp), (d_qk + d_v) / 2, dtype)
    core = [attention(*shape, True, s)] if attention_impl == "flash" else unfused_attention(*shape, s)
    # Norms and residual adds run on tokens / tp with sequence parallelism, on all tokens without.
    norm_tokens = np.where(np.asarray(sequence_parallel, dtype=bool), T / t, T)
    ffn = model.ffn_hidden if model.moe is None else model.moe.expert_ffn_hidden * model.moe.top_k
    elementwise_kernels = [
        (elementwise(norm_tokens * h, dtype, reads=1, writes=1, flops_per_element=5), 2.0),
        (elementwise(norm_tokens * h, dtype, reads=2, writes=1), 2.0),
        (elementwise(T * ffn / t, dtype, reads=up, writes=1, flops_per_element=8), 1.0),
    ]
    return LayerKernels(gemms, core, elementwise_kernels)


def activation_bytes_per_token(
    model: Transformer, recompute: ArrayLike, seq: ArrayLike = 0, attention_impl: str = "flash"
) -> np.ndarray:
    """Activation bytes stored per token per layer before tensor/sequence splitting (bf16).

    recompute 0 = none (module docstring formula; unfused attention adds Korthikanti's ``5 n_h s``
    for scores, softmax output and dropout mask), 1 = selective (drop Q, K, V, the attention output
    and any scores: recomputed with the attention core), 2 = full (keep only the layer input, 2h).
    """
    h, d = model.hidden, model.d_head
    f_up = (2 if model.gated_mlp else 1) * (
        model.ffn_hidden if model.moe is None else model.moe.expert_ffn_hidden
    )
    f_act = model.ffn_hidden if model.moe is None else model.moe.expert_ffn_hidden
    topk = 1 if model.moe is None else model.moe.top_k
    qkv_out = 2 * h + 4 * model.n_kv_heads * d + 2 * h
    attention_part = 2 * h + qkv_out + h
    mlp_part = 2 * h + topk * (2 * f_up + 2 * f_act) + h
    none = attention_part + mlp_part + 4 * h
    scores = 5.0 * model.heads * np.asarray(seq, dtype=float) if attention_impl == "unfused" else 0.0
    code = np.asarray(recompute)
    return np.where(code == 2, 2.0 * h, np.where(code == 1, none - qkv_out, none + scores))


def bytes_per(dtype: str) -> float:
    """Bytes per element of ``dtype`` (activations and communicated tensors)."""
    return pick("dtype", dtype, DTYPE_BYTES)
