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
    Kernel,
    attention,
    elementwise,
    gemm,
    named,
    quantize,
    unfused_attention,
)
from commodel.compute.precision import Precision
from commodel.errors import pick, unknown
from commodel.workloads.layout import has_module
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
    token reaches with the shared ones (the norms and activation functions are not matrix FLOPs)."""
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
    if model.mla is not None:
        a = model.mla
        again["mla_up_proj"] = model.layers * (
            a.q_lora_rank * model.heads * d_qk + a.kv_lora_rank * model.heads * (a.qk_nope_head_dim + d_v)
        )
    modules_flops = sum(
        np.where(has_module(modules, name), 2.0 * weights, 0.0) for name, weights in again.items()
    )
    return np.where(code == 2, full, np.where(code == 1, scores, 0.0) + modules_flops)


#: How a GEMM meets tensor parallelism (Megatron): a ``column``-parallel GEMM consumes the gathered
#: input (allgather before it with sequence parallelism) and its input gradient is a partial sum
#: (reduced after its backward); a ``row``-parallel GEMM produces partial sums (reduced after it) and
#: its backward consumes the gathered output gradient; a ``local`` GEMM touches no TP collective.
GEMM_ROLES = ("column", "row", "local")


@dataclass(frozen=True)
class LayerKernels:
    """The forward kernels of one (average) layer on one GPU, each with how many run per layer:
    GEMMs with their tensor-parallel role (:data:`GEMM_ROLES`), attention cores, and memory-bound
    kernels with their forward and backward counts (a cast runs in one pass only)."""

    gemms: list[tuple[Kernel, float, str]]
    attention: list[tuple[Kernel, float]]
    elementwise: list[tuple[Kernel, float, float]]
    #: The forward kernels (and counts per layer) each ``--recompute-modules`` module runs again.
    remade: dict[str, list[tuple[Kernel, float]]]
    #: The shared experts' own kernels (GEMMs, casts, activation), which Megatron can run beside the
    #: expert all-to-alls (``--moe-shared-expert-overlap``); ``None`` without shared experts.
    shared_experts: LayerKernels | None = None


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


def layer_kernels(
    model: Transformer,
    tokens: ArrayLike,
    micro_batch: ArrayLike,
    seq: ArrayLike,
    tp: ArrayLike,
    cp: ArrayLike,
    ep: ArrayLike,
    sequence_parallel: ArrayLike,
    recipe: Precision,
    attention_impl: str = "flash",
    expert_load: ArrayLike = 1.0,
    etp: ArrayLike | None = None,
    fp8_dispatch: ArrayLike = False,
    deepep: ArrayLike = False,
    permute_fusion: ArrayLike = False,
) -> LayerKernels:
    """Forward kernels of one layer on one GPU for ``tokens`` = micro_batch x seq / cp local tokens.

    Linear layers run in ``recipe.gemm`` (FP8 under Transformer Engine, with a quantization pass per
    operand: the input forward, the output gradient backward); the router, attention and every
    memory-bound kernel in ``recipe.other``. MoE layers are averaged with dense ones by their share of
    the depth (DeepSeek-V3: 58 of 61): the E/ep local experts, split ``etp`` ways (default: tp), run
    as one grouped GEMM, each receiving ``top_k / E`` of the tokens of its block of ep x etp GPUs
    (``tokens x ep x etp / tp``: each GPU dispatches its sequence shard) (balanced, as the published
    runs force; in a batch too small to reach every expert, only the experts reached run, and their
    weights are all that is read), times ``expert_load`` on the busiest GPU
    (:attr:`~commodel.workloads.layout.Layout.busiest_expert_rank`), whose kernels these are; the
    routed experts touch no tensor-parallel collective of the layer (the dispatcher gathers and
    scatters their tokens); the tokens are permuted to their experts and back (and, across GPUs
    holding several experts each, the received ones sorted by local expert after the dispatch and
    back before the combine, as Megatron's all-to-all dispatcher does; with ``deepep``, Megatron-Core's
    flex dispatcher sends the tokens unpermuted and permutes the received ones into its experts' order
    and back, whatever their number; with ``permute_fusion``, Transformer Engine's fused permute reads
    each token once and writes its ``top_k`` copies, and its unpermute reads the copies and writes one
    row: ``1 + top_k`` rows a pass where the unfused one reads and writes ``2 top_k``). With
    ``fp8_dispatch`` under
    an FP8 recipe the experts' inputs are quantized before the dispatch and their output gradients
    before the combine's backward (DeepSeek-V3 report, section 3.3.2), once per token the GPU holds,
    where the received copies (``top_k`` per token) would each be cast after it. Sliding-window layers
    attend to at most ``window`` keys.
    """
    T = np.asarray(tokens, dtype=float)
    t = np.asarray(tp, dtype=float)
    h = model.hidden
    low, high = recipe.gemm, recipe.other
    moe_share = model.moe_layers / model.layers
    gemms: list[tuple[Kernel, float, str]] = []
    up_projections: list[tuple[Kernel, float, str]] = []
    if model.mla is not None:
        a = model.mla
        qk = a.qk_nope_head_dim + a.qk_rope_head_dim
        up_projections = [
            (named(gemm(T, model.heads * qk / t, a.q_lora_rank, low), "q up"), 1.0, "column"),
            (
                named(
                    gemm(T, model.heads * (a.qk_nope_head_dim + a.v_head_dim) / t, a.kv_lora_rank, low),
                    "kv up",
                ),
                1.0,
                "column",
            ),
        ]
        gemms += [
            (named(gemm(T, a.q_lora_rank, h, low), "q down"), 1.0, "local"),
            (named(gemm(T, a.kv_lora_rank + a.qk_rope_head_dim, h, low), "kv down"), 1.0, "local"),
            (named(gemm(T, h, model.heads * a.v_head_dim / t, low), "attention out"), 1.0, "row"),
        ]
    else:
        d = model.d_head
        kv_per_rank = np.maximum(model.n_kv_heads / t, 1.0)
        gemms += [
            (named(gemm(T, (model.heads / t + 2 * kv_per_rank) * d, h, low), "qkv"), 1.0, "column"),
            (named(gemm(T, h, model.heads * d / t, low), "attention out"), 1.0, "row"),
        ]
    up = 2 if model.gated_mlp else 1
    dense = 1 - moe_share

    def mlp(
        tokens: ArrayLike,
        width: float,
        count: float,
        split: ArrayLike = t,
        batch: ArrayLike | None = None,
        name: str = "",
    ) -> list[tuple[Kernel, float, str]]:
        """FC1 (``up x width``) and FC2 of an MLP, ``count`` per layer: over tensor parallelism a
        column and a row GEMM, or with ``batch`` experts split ``split`` ways, a local grouped GEMM."""
        roles, b = (("column", "row"), 1.0) if batch is None else (("local", "local"), batch)
        fc1 = named(gemm(tokens, up * width / split, h, low, batch=b), f"{name}fc1")
        fc2 = named(gemm(tokens, h, width / split, low, batch=b), f"{name}fc2")
        return [(fc1, count, roles[0]), (fc2, count, roles[1])]

    def quantized(entries: list[tuple[Kernel, float, str]]) -> list[tuple[Kernel, Kernel, float]]:
        """Each FP8 GEMM's casts: its input forward, its output gradient backward, and their count."""
        size = recipe.cast_bytes, recipe.cast_bandwidth
        return [
            (
                named(quantize(k.shape[0] * k.shape[2] * k.shape[3], *size), f"cast {k.label} input"),
                named(quantize(k.shape[0] * k.shape[1] * k.shape[3], *size), f"cast {k.label} grad"),
                n,
            )
            for k, n, _ in entries
            if recipe.quantized
        ]

    # Norms, residual adds and the router run on tokens / tp with sequence parallelism, on all without.
    sp_tokens = dispatched_tokens(T, t, sequence_parallel)
    memory_bound: list[tuple[Kernel, float, float]] = []
    routing: list[tuple[Kernel, float]] = []  # the MoE layer's router and token shuffles (forward)
    dense_mlp = mlp(T, model.ffn_hidden, dense, t) if dense > 0 else []
    experts: list[tuple[Kernel, float, str]] = []
    shared: list[tuple[Kernel, float, str]] = []
    # Activation functions: elements per GPU and layer, and which MLP runs them.
    activations = [(T * model.ffn_hidden / t, dense, "mlp")] if dense > 0 else []
    if model.moe is not None:
        m = model.moe
        e = np.asarray(ep, dtype=float)
        et = t if etp is None else np.asarray(etp, dtype=float)
        # Experts the block's tokens reach (each picks top_k of E; all of them at training batch
        # sizes, a few in a small decode batch), and the tokens each of those receives.
        block = T * e * et / t
        reached = m.experts * -np.expm1(block * np.log1p(-m.top_k / m.experts))
        load = np.asarray(expert_load, dtype=float)
        per_expert = block * m.top_k / reached * load
        local = reached / e
        experts = mlp(per_expert, m.expert_ffn_hidden, moe_share, et, batch=local, name="expert ")
        activations.append((T * m.top_k * load * m.expert_ffn_hidden / t, moe_share, "moe"))
        if m.shared_experts:
            shared = mlp(T, m.shared_experts * m.expert_ffn_hidden, moe_share, t, name="shared ")
            activations.append((T * m.shared_experts * m.expert_ffn_hidden / t, moe_share, "shared_experts"))
        # Megatron's all-to-all dispatcher permutes the tokens to their experts before sending and
        # back after the combine (each a read and a write of top_k copies), and sorts the received
        # chunks by local expert and back when a GPU holds several (``sort_chunks_by_idxs``): two
        # passes more. Its flex dispatcher (DeepEP) sends the tokens as they are and permutes the
        # received ones into its experts' order and back (``get_permuted_hidden_states_by_experts``,
        # ``get_restored_hidden_states_by_experts``): the received copies' two passes only.
        deep = np.asarray(deepep, dtype=bool)
        rows = np.where(np.asarray(permute_fusion, dtype=bool), (1 + m.top_k) / 2, m.top_k)  # read + write
        permute = named(elementwise(sp_tokens * rows * h, high, reads=1, writes=1), "token permute")
        label = "received-token permute" if deep.all() else "token sort"
        received = named(elementwise(per_expert * local * h, high, reads=1, writes=1), label)
        permutes = moe_share * np.where(deep, 0.0, 2.0)
        sorts = moe_share * np.where(deep | ((e > 1) & (local > 1)), 2.0, 0.0)
        memory_bound += [(permute, permutes, permutes), (received, sorts, sorts)]
        routing = [
            (named(gemm(sp_tokens, m.experts, h, high), "router"), moe_share),
            (permute, permutes),
            (received, sorts),
        ]
    # The GEMMs by the recompute module that runs them again (the rest of attention's: by none).
    groups = {
        "": gemms,
        "mla_up_proj": up_projections,
        "mlp": dense_mlp,
        "moe": experts,
        "shared_experts": shared,
    }
    casts = {name: quantized(entries) for name, entries in groups.items()}
    if casts["moe"] and np.any(fp8_dispatch):  # cast once per held token, before the all-to-alls
        (fc1_in, fc1_grad, n), (fc2_in, fc2_grad, _) = casts["moe"]

        def before(cast: Kernel) -> Kernel:
            elements = np.where(fp8_dispatch, sp_tokens * h, cast.bytes / recipe.cast_bytes)
            cast_once = quantize(elements, recipe.cast_bytes, recipe.cast_bandwidth)
            return named(cast_once, cast.label + " (before the all-to-all)")

        casts["moe"] = [(before(fc1_in), fc1_grad, n), (fc2_in, before(fc2_grad), n)]
    gemms = [entry for entries in groups.values() for entry in entries]
    every_cast = [cast for group in casts.values() for cast in group]
    memory_bound += [(fwd, count, 0.0) for fwd, _, count in every_cast]
    memory_bound += [(bwd, 0.0, count) for _, bwd, count in every_cast]
    if routing:  # the router stays in BF16 and is never quantized
        gemms.append((routing[0][0], moe_share, "local"))
    d_qk, d_v = attention_dims(model)
    s = np.asarray(seq, dtype=float)
    if attention_impl not in ATTENTION_IMPLEMENTATIONS:
        raise unknown("attention implementation", attention_impl, ATTENTION_IMPLEMENTATIONS)
    shape = (micro_batch, model.heads / t, s / np.asarray(cp), (d_qk + d_v) / 2, high)
    windowed = model.windowed_layers / model.layers
    if attention_impl == "flash":
        core = [(named(attention(*shape, True, s), "attention"), 1 - windowed)]
        if windowed:
            banded = attention(*shape, True, s, window=model.sliding_window)
            core.append((named(banded, "attention (window)"), windowed))
    else:
        labels = ("attention scores", "attention softmax", "attention values")
        core = [(named(k, label), 1.0) for k, label in zip(unfused_attention(*shape, s), labels, strict=True)]
    norm = named(elementwise(sp_tokens * h, high, reads=1, writes=1, flops_per_element=5), "norms")
    residual = named(elementwise(sp_tokens * h, high, reads=2, writes=1), "residual adds")
    memory_bound += [(norm, 2.0, 4.0), (residual, 2.0, 4.0)]
    acts = {
        name: (
            named(
                elementwise(n, high, reads=up, writes=1, flops_per_element=8),
                f"activation ({name.replace('_', ' ')})",
            ),
            share,
        )
        for n, share, name in activations
    }
    memory_bound += [(kernel, share, 2 * share) for kernel, share in acts.values()]

    def forward(name: str) -> list[tuple[Kernel, float]]:
        """A module's forward GEMMs, their input casts and its activation function."""
        kernels = [(k, n) for k, n, _ in groups[name]] + [(fwd, n) for fwd, _, n in casts[name]]
        return kernels + ([acts[name]] if name in acts else [])

    remade = {name: forward(name) for name in ("mla_up_proj", "mlp", "shared_experts")}
    remade["moe"] = forward("moe") + remade["shared_experts"] + routing
    remade["layernorm"] = [(norm, 2.0)]
    remade["moe_act"] = [acts["moe"]] if "moe" in acts else []
    own = None
    if shared:
        cast_passes = [(fwd, n, 0.0) for fwd, _, n in casts["shared_experts"]]
        cast_passes += [(bwd, 0.0, n) for _, bwd, n in casts["shared_experts"]]
        kernel, share = acts["shared_experts"]
        own = LayerKernels(shared, [], [*cast_passes, (kernel, share, 2 * share)], {})
    return LayerKernels(gemms, core, memory_bound, remade, own)


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
    1-byte dropout masks where the model uses dropout. Under FP8
    the linear layers keep their quantized inputs (1 B) for the backward pass; everything else is
    BF16 (2 B), the MoE router's input (the MLP's norm output: the router GEMM runs in BF16) too.
    Unfused attention adds Korthikanti's ``5 n_h s`` for scores, softmax output and dropout mask.
    With ``fp8_activation_input`` the activation functions keep their inputs (the FC1 outputs) in FP8,
    1 B per element (Megatron's ``--activation-func-fp8-input-store``, DeepSeek-V3 report section
    3.3.3), whatever the recipe.

    recompute 0 = none, 1 = selective (Megatron's checkpointed attention core: its inputs Q, K, V are
    kept, and what the core stores itself is dropped: the unfused scores, softmax and dropout mask;
    flash attention stores nothing more than Q, K, V and the output, which other layers hold anyway,
    so selective saves nothing there), 2 = full (keep only the layer input, 2h).

    Outside full recomputation, each module in ``modules`` (:data:`~commodel.workloads.layout.
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
    bf16 = float(linear == 2.0)  # the linear layers hold their inputs themselves, not FP8 copies
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
    dense_mlp = linear * h + inside(model.ffn_hidden)
    shared = 0.0
    if moe is not None and moe.shared_experts:
        shared = inside(moe.shared_experts * moe.expert_ffn_hidden) + (2.0 - linear) * h
    routed = 0.0 if moe is None else moe.top_k * (linear * h + inside(moe.expert_ffn_hidden))
    moe_mlp = 2.0 * h + routed + shared
    mlp_part = (1 - moe_share) * dense_mlp + moe_share * moe_mlp + mask * h
    none = attention_part + mlp_part + 4 * h
    scores = 5.0 * model.heads * np.asarray(seq, dtype=float) if attention_impl == "unfused" else 0.0
    freed = 0.0
    if np.any(modules):
        mlp_norm_held = moe_share + (1 - moe_share) * bf16  # a MoE router holds it in BF16
        act = 0.0 if moe is None else moe.top_k * 2 * moe.expert_ffn_hidden
        freed = (
            has_module(modules, "layernorm") * (bf16 + mlp_norm_held) * 2 * h
            + has_module(modules, "moe_act") * moe_share * bf16 * act
            + has_module(modules, "mla_up_proj") * (model.mla is not None) * qkv_heads
            # The dense MLP's checkpoint keeps its input in BF16 where FC1 kept an FP8 copy.
            + has_module(modules, "mlp") * (1 - moe_share) * (inside(model.ffn_hidden) - (2.0 - linear) * h)
            + has_module(modules, "moe") * moe_share * (routed + shared)
            + has_module(modules, "shared_experts") * moe_share * shared
        )
    code = np.asarray(recompute)
    return np.where(code == 2, 2.0 * h, np.where(code == 1, none, none + scores) - freed)


def bytes_per(dtype: str) -> float:
    """Bytes per element of ``dtype`` (activations and communicated tensors)."""
    return pick("dtype", dtype, DTYPE_BYTES)
