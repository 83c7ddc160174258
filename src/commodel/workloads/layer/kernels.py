"""The forward kernels of one transformer layer on one GPU, vectorized over layouts
(:func:`layer_kernels`): its GEMMs by tensor-parallel role, the attention core, the memory-bound
kernels (norms, residual adds, activation functions, casts, token permutes), and what each recompute
module runs again. Linear layers run in the recipe's GEMM precision (Transformer Engine's FP8 recipes
cast each GEMM's input forward and its output gradient backward); the router, attention and every
memory-bound kernel in its other precision, moving what :mod:`commodel.workloads.layer.kernel_traffic` says
each kind moves (fused, PyTorch eager, or with Megatron-Core's eager glue).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
from numpy.typing import ArrayLike

from commodel.compute.kernels import Kernel, attention, elementwise, gemm, named, quantize, unfused_attention
from commodel.compute.precision import Precision, dense_gemm
from commodel.workloads.layer.kernel_traffic import (
    CLAMP_PASSES,
    EXPERT_BIAS_PASSES,
    YARN_ROPE_PASSES,
    eager_passes,
)
from commodel.workloads.model.schema import Transformer
from commodel.workloads.model.transformer import attention_dims, dispatched_tokens

#: How a GEMM meets tensor parallelism (Megatron): a ``column``-parallel GEMM consumes the gathered
#: input (allgather before it with sequence parallelism) and its input gradient is a partial sum
#: (reduced after its backward); a ``row``-parallel GEMM produces partial sums (reduced after it) and
#: its backward consumes the gathered output gradient; a ``local`` GEMM touches no TP collective.
GEMM_ROLES = ("column", "row", "local")

#: A GEMM, how many run per layer, and its tensor-parallel role.
Gemm = tuple[Kernel, float, str]
#: A memory-bound kernel and how many run per layer forward and backward.
Pass = tuple[Kernel, float, float]
#: An FP8 GEMM's casts (its input forward, its output gradient backward) and how many run per layer.
Casts = tuple[Kernel, Kernel, float]


@dataclass(frozen=True)
class LayerKernels:
    """The forward kernels of one (average) layer on one GPU, each with how many run per layer:
    GEMMs with their tensor-parallel role (:data:`GEMM_ROLES`), attention cores, and memory-bound
    kernels with their forward and backward counts (a cast runs in one pass only)."""

    gemms: list[Gemm]
    attention: list[tuple[Kernel, float]]
    elementwise: list[Pass]
    #: The forward kernels (and counts per layer) each ``--recompute-modules`` module runs again.
    remade: dict[str, list[tuple[Kernel, float]]]
    #: The shared experts' own kernels (GEMMs, casts, activation), which Megatron can run beside the
    #: expert all-to-alls (``--moe-shared-expert-overlap``); ``None`` without shared experts.
    shared_experts: LayerKernels | None = None


def _projections(model: Transformer, T: np.ndarray, t: np.ndarray, low: str) -> tuple[list[Gemm], list[Gemm]]:
    """Attention's GEMMs: the QKV and output projections (MLA's down-projections and output), and
    MLA's query and key-value up-projections apart (what ``mla_up_proj`` recomputes)."""
    h = model.hidden
    if model.mla is None:
        d, kv_per_rank = model.d_head, np.maximum(model.n_kv_heads / t, 1.0)
        return [
            (named(gemm(T, (model.heads / t + 2 * kv_per_rank) * d, h, low), "qkv"), 1.0, "column"),
            (named(gemm(T, h, model.heads * d / t, low), "attention out"), 1.0, "row"),
        ], []
    a = model.mla
    qk, kv_up = a.qk_nope_head_dim + a.qk_rope_head_dim, a.qk_nope_head_dim + a.v_head_dim
    own = [
        (named(gemm(T, a.q_lora_rank, h, low), "q down"), 1.0, "local"),
        (named(gemm(T, a.kv_lora_rank + a.qk_rope_head_dim, h, low), "kv down"), 1.0, "local"),
        (named(gemm(T, h, model.heads * a.v_head_dim / t, low), "attention out"), 1.0, "row"),
    ]
    up = [
        (named(gemm(T, model.heads * qk / t, a.q_lora_rank, low), "q up"), 1.0, "column"),
        (named(gemm(T, model.heads * kv_up / t, a.kv_lora_rank, low), "kv up"), 1.0, "column"),
    ]
    return own, up


def _mlp(model: Transformer, tokens: ArrayLike, width: float, count: float, split: ArrayLike, low: str,
         batch: ArrayLike | None = None, name: str = "") -> list[Gemm]:  # fmt: skip
    """FC1 (gated: ``2 x width``) and FC2 of an MLP, ``count`` per layer: over tensor parallelism a
    column and a row GEMM, or with ``batch`` experts split ``split`` ways, a local grouped GEMM."""
    up, h = (2 if model.gated_mlp else 1), model.hidden
    roles, b = (("column", "row"), 1.0) if batch is None else (("local", "local"), batch)
    fc1 = named(gemm(tokens, up * width / split, h, low, batch=b), f"{name}fc1")
    fc2 = named(gemm(tokens, h, width / split, low, batch=b), f"{name}fc2")
    return [(fc1, count, roles[0]), (fc2, count, roles[1])]


def _casts(entries: list[Gemm], recipe: Precision) -> list[Casts]:
    """Each quantized GEMM's casts (FP8, FP4: those in the recipe's GEMM dtype): its input forward, its
    output gradient backward, and their count."""
    if not recipe.quantized:
        return []
    size = recipe.cast_bytes, recipe.cast_bandwidth
    return [
        (
            named(quantize(k.shape[0] * k.shape[2] * k.shape[3], *size), f"cast {k.label} input"),
            named(quantize(k.shape[0] * k.shape[1] * k.shape[3], *size), f"cast {k.label} grad"),
            n,
        )
        for k, n, _ in entries
        if k.dtype == recipe.gemm
    ]


@dataclass
class _Experts:
    """A MoE layer's own kernels: the routed experts' and shared experts' GEMMs, the activation
    functions they run (elements per GPU, share of the layers, module), the router and the token
    permutes (forward, with counts), and the permutes' passes."""

    routed: list[Gemm] = field(default_factory=list)
    shared: list[Gemm] = field(default_factory=list)
    activations: list[tuple[np.ndarray, float, str]] = field(default_factory=list)
    routing: list[tuple[Kernel, float]] = field(default_factory=list)
    passes: list[Pass] = field(default_factory=list)


def _experts(model: Transformer, T: np.ndarray, t: np.ndarray, sp_tokens: np.ndarray, recipe: Precision,
             ep: ArrayLike, etp: ArrayLike | None, expert_load: ArrayLike, flex: ArrayLike,
             permute_fusion: ArrayLike, eager_glue: bool, outside: str) -> _Experts:  # fmt: skip
    """A MoE layer's kernels (:func:`layer_kernels` says how experts, tokens and permutes are priced);
    the shared experts' GEMMs in ``outside``, the dtype of the linear layers outside the routed ones."""
    m, h, share = model.moe, model.hidden, model.moe_layers / model.layers
    if m is None:
        return _Experts()
    e = np.asarray(ep, dtype=float)
    et = t if etp is None else np.asarray(etp, dtype=float)
    # Experts the block's tokens reach (each picks top_k of E; all of them at training batch sizes, a
    # few in a small decode batch), and the tokens each of those receives.
    block = T * e * et / t
    with np.errstate(divide="ignore"):  # top_k = experts: log(0), and every expert reached
        reached = m.experts * -np.expm1(block * np.log1p(-m.top_k / m.experts))
    load = np.asarray(expert_load, dtype=float)
    per_expert, local = block * m.top_k / reached * load, reached / e
    out = _Experts(
        routed=_mlp(model, per_expert, m.expert_ffn_hidden, share, et, recipe.gemm, local, "expert ")
    )
    out.activations.append((T * m.top_k * load * m.expert_ffn_hidden / t, share, "moe"))
    if m.shared_experts:
        out.shared = _mlp(model, T, m.shared_experts * m.expert_ffn_hidden, share, t, outside, name="shared ")
        out.activations.append((T * m.shared_experts * m.expert_ffn_hidden / t, share, "shared_experts"))
    # Megatron's all-to-all dispatcher permutes the tokens to their experts before sending and back
    # after the combine (each a read and a write of top_k copies), and sorts the received chunks by
    # local expert and back when a GPU holds several (``sort_chunks_by_idxs``): two passes more. Its
    # flex dispatcher (DeepEP) sends the tokens as they are and permutes the received ones into its
    # experts' order and back (``get_permuted_hidden_states_by_experts``,
    # ``get_restored_hidden_states_by_experts``): the received copies' two passes only.
    deep = np.asarray(flex, dtype=bool)
    rows = np.where(np.asarray(permute_fusion, dtype=bool), (1 + m.top_k) / 2, m.top_k)  # read + write
    permute = named(elementwise(sp_tokens * rows * h, recipe.other, reads=1, writes=1), "token permute")
    label = "received-token permute" if deep.all() else "token sort"
    received = named(elementwise(per_expert * local * h, recipe.other, reads=1, writes=1), label)
    permutes = share * np.where(deep, 0.0, 2.0)
    sorts = share * np.where(deep | ((e > 1) & (local > 1)), 2.0, 0.0)
    out.passes = [(permute, permutes, permutes), (received, sorts, sorts)]
    if eager_glue and model.expert_bias:
        reads, writes = EXPERT_BIAS_PASSES
        bias = named(elementwise(per_expert * local * h, recipe.other, reads, writes), "expert bias")
        out.passes.append((bias, share, share))
    router = named(gemm(sp_tokens, m.experts, h, recipe.other), "router")
    out.routing = [(router, share), (permute, permutes), (received, sorts)]
    return out


def _dispatch_casts(casts: list[Casts], fp8_dispatch: ArrayLike, sp_tokens: np.ndarray, h: int,
                    recipe: Precision) -> list[Casts]:  # fmt: skip
    """The experts' casts where their inputs travel in FP8: FC1's input and FC2's output gradient
    cast once per token the GPU holds, before the all-to-alls, instead of once per received copy."""

    def before(cast: Kernel) -> Kernel:
        elements = np.where(fp8_dispatch, sp_tokens * h, cast.bytes / recipe.cast_bytes)
        return named(
            quantize(elements, recipe.cast_bytes, recipe.cast_bandwidth),
            cast.label + " (before the all-to-all)",
        )

    (fc1_in, fc1_grad, n), (fc2_in, fc2_grad, _) = casts
    return [(before(fc1_in), fc1_grad, n), (fc2_in, before(fc2_grad), n)]


def _attention_core(model: Transformer, micro_batch: ArrayLike, seq: ArrayLike, cp: ArrayLike, t: np.ndarray,
                    high: str, implementation: str) -> list[tuple[Kernel, float]]:  # fmt: skip
    """The attention core: flash attention (banded on sliding-window layers, which attend to at most
    ``window`` keys), or the unfused scores, softmax and values."""
    d_qk, d_v = attention_dims(model)
    s = np.asarray(seq, dtype=float)
    shape = (micro_batch, model.heads / t, s / np.asarray(cp), (d_qk + d_v) / 2, high)
    if implementation != "flash":
        labels = ("attention scores", "attention softmax", "attention values")
        return [(named(k, label), 1.0) for k, label in zip(unfused_attention(*shape, s), labels, strict=True)]
    windowed = model.windowed_layers / model.layers
    core = [(named(attention(*shape, True, s), "attention"), 1 - windowed)]
    if windowed:
        core.append(
            (named(attention(*shape, True, s, window=model.sliding_window), "attention (window)"), windowed)
        )
    return core


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
    flex: ArrayLike = False,
    permute_fusion: ArrayLike = False,
    eager: ArrayLike = False,
    eager_glue: bool = True,
) -> LayerKernels:
    """Forward kernels of one layer on one GPU for ``tokens`` = micro_batch x seq / cp local tokens.

    Linear layers run in ``recipe.gemm`` (FP8 under Transformer Engine, with a quantization pass per
    operand: the input forward, the output gradient backward), outside the routed experts in
    :func:`~commodel.compute.precision.dense_gemm`'s dtype; the router, attention and every
    memory-bound kernel in ``recipe.other``. MoE layers are averaged with dense ones by their share of
    the depth (DeepSeek-V3: 58 of 61): the E/ep local experts, split ``etp`` ways (default: tp), run
    as one grouped GEMM, each receiving ``top_k / E`` of the tokens of its block of ep x etp GPUs
    (``tokens x ep x etp / tp``: each GPU dispatches its sequence shard) (balanced, as the published
    runs force; in a batch too small to reach every expert, only the experts reached run, and their
    weights are all that is read), times ``expert_load`` on the busiest GPU
    (:attr:`~commodel.workloads.parallel.layout.Layout.busiest_expert_rank`), whose kernels these are; the
    routed experts touch no tensor-parallel collective of the layer (the dispatcher gathers and
    scatters their tokens); the tokens are permuted to their experts and back (and, across GPUs
    holding several experts each, the received ones sorted by local expert after the dispatch and
    back before the combine, as Megatron's all-to-all dispatcher does; with ``flex``, Megatron-Core's
    flex dispatcher (DeepEP or HybridEP) sends the tokens unpermuted and permutes the received ones
    into its experts' order and back, whatever their number; with ``permute_fusion``, Transformer
    Engine's fused permute reads each token once and writes its ``top_k`` copies, and its unpermute
    reads the copies and writes one row: ``1 + top_k`` rows a pass where the unfused reads and writes
    ``2 top_k``). With
    ``fp8_dispatch`` under an FP8 recipe the experts' inputs are quantized before the dispatch and
    their output gradients before the combine's backward (DeepSeek-V3 report, section 3.3.2), once
    per token the GPU holds, where the received copies (``top_k`` per token) would each be cast after
    it. Sliding-window layers attend to at most ``window`` keys. ``eager``: PyTorch's eager norms and
    SwiGLU; ``eager_glue``: Megatron-Core's eager glue around its fused kernels (off: serving's).
    """
    T, t, h = np.asarray(tokens, dtype=float), np.asarray(tp, dtype=float), model.hidden
    dense, outside = 1 - model.moe_layers / model.layers, dense_gemm(recipe, model.fp4_scope)
    # Norms, residual adds and the router run on tokens / tp with sequence parallelism, on all without.
    sp_tokens = dispatched_tokens(T, t, sequence_parallel)
    own, up_projections = _projections(model, T, t, outside)
    moe = _experts(
        model, T, t, sp_tokens, recipe, ep, etp, expert_load, flex, permute_fusion, eager_glue, outside
    )
    # The GEMMs by the recompute module that runs them again (the rest of attention's: by none).
    groups = {
        "": own,
        "mla_up_proj": up_projections,
        "mlp": _mlp(model, T, model.ffn_hidden, dense, t, outside) if dense > 0 else [],
        "moe": moe.routed,
        "shared_experts": moe.shared,
    }
    casts = {name: _casts(entries, recipe) for name, entries in groups.items()}
    if casts["moe"] and np.any(fp8_dispatch):
        casts["moe"] = _dispatch_casts(casts["moe"], fp8_dispatch, sp_tokens, h, recipe)
    every_cast = [cast for group in casts.values() for cast in group]
    passes = [*moe.passes, *((f, n, 0.0) for f, _, n in every_cast), *((b, 0.0, n) for _, b, n in every_cast)]
    gemms = [entry for entries in groups.values() for entry in entries]
    if moe.routing:  # the router stays in BF16 and is never quantized
        gemms.append((moe.routing[0][0], moe.routing[0][1], "local"))
    norm, residual, acts = _layer_passes(
        model, T / t, sp_tokens, dense, moe.activations, recipe.other, eager, eager_glue
    )
    passes += [(norm, 2.0, 4.0), (residual, 2.0, 4.0), *((k, share, 2 * share) for k, share in acts.values())]
    passes += _attention_passes(model, T / t, recipe.other, eager_glue)
    core = _attention_core(model, micro_batch, seq, cp, t, recipe.other, attention_impl)
    remade = _remade(groups, casts, acts, moe.routing, norm)
    remade["ops"] = _per_op_policy(model, T, t, recipe, own[1], [(norm, 2.0), *acts.values()])
    return LayerKernels(gemms, core, passes, remade, _shared(moe, casts, acts))


def _per_op_policy(model: Transformer, T: np.ndarray, t: np.ndarray, recipe: Precision, out: Gemm,
                   passes: list[tuple[Kernel, float]]) -> list[tuple[Kernel, float]]:  # fmt: skip
    """What torchtitan's per-op checkpointing runs again (``ops``,
    :data:`~commodel.workloads.model.recompute.RECOMPUTE_MODULES`) besides a dense block's memory-bound
    ``passes``: every second of a Llama block's matmuls ``wq, wk, wv, wo, w1, w3, w2`` (its key
    projection, attention output ``out`` and MLP up projection) with their input casts; none outside
    dense models with Llama-style attention."""
    if model.moe is not None or model.mla is not None:
        return []
    h, kv = model.hidden, np.maximum(model.n_kv_heads / t, 1.0)
    wk = (named(gemm(T, kv * model.d_head, h, recipe.gemm), "wk"), 1.0, "column")
    w3 = (named(gemm(T, model.ffn_hidden / t, h, recipe.gemm), "w3"), 1.0, "column")
    matmuls = [wk, out, w3]
    return [*((k, n) for k, n, _ in matmuls), *((fwd, n) for fwd, _, n in _casts(matmuls, recipe)), *passes]


def _layer_passes(
    model: Transformer,
    tp_tokens: np.ndarray,
    sp_tokens: np.ndarray,
    dense: float,
    moe_activations: list[tuple[np.ndarray, float, str]],
    dtype: str,
    eager: ArrayLike,
    eager_glue: bool,
) -> tuple[Kernel, Kernel, dict[str, tuple[Kernel, float]]]:
    """A layer's norms and residual adds (over ``sp_tokens`` of ``hidden``), and its activation
    functions by module with their share of the layers: the dense MLP's over ``tp_tokens`` of its
    width, and the experts'; fused or, where ``eager``, PyTorch's eager operations; with ``eager_glue``,
    a clamped activation's clamps and concatenation ahead of it (``CLAMP_PASSES``)."""
    h = model.hidden
    norm = named(
        elementwise(sp_tokens * h, dtype, *eager_passes(eager, "norm", (1, 1)), flops_per_element=5), "norms"
    )
    residual = named(elementwise(sp_tokens * h, dtype, reads=2, writes=1), "residual adds")
    activations = [(tp_tokens * model.ffn_hidden, dense, "mlp")] if dense > 0 else []
    reads, writes = eager_passes(eager, "swiglu", (2, 1)) if model.gated_mlp else (1, 1)
    if eager_glue and model.activation_clamp is not None:
        reads, writes = reads + CLAMP_PASSES[0], writes + CLAMP_PASSES[1]
    acts = {
        name: (named(elementwise(n, dtype, reads, writes, flops_per_element=8),
                     f"activation ({name.replace('_', ' ')})"), share)
        for n, share, name in [*activations, *moe_activations]
    }  # fmt: skip
    return norm, residual, acts


def _attention_passes(model: Transformer, tp_tokens: np.ndarray, dtype: str, eager_glue: bool) -> list[Pass]:
    """Attention's memory-bound kernels on its queries and keys (``tp_tokens`` x their heads on this
    GPU): a fused RMSNorm of each head where the model normalizes them (QK-norm: Qwen3; Megatron's
    ``qk_layernorm``, Transformer Engine's norm, as the layer's own norms run), and, with
    ``eager_glue``, YaRN's rotary embedding run unfused (``YARN_ROPE_PASSES``). MLA's queries and keys
    are its up-projections' (none here)."""
    if model.mla is not None:
        return []
    rotated = tp_tokens * (model.heads + model.n_kv_heads) * model.d_head
    passes: list[Pass] = []
    if model.qk_norm:
        norms = elementwise(rotated, dtype, reads=1, writes=1, flops_per_element=5)
        passes.append((named(norms, "query and key norms"), 1.0, 2.0))
    if eager_glue and model.rotary_scaling == "yarn":
        rope = elementwise(rotated, dtype, *YARN_ROPE_PASSES)
        passes.append((named(rope, "rotary embedding (yarn)"), 1.0, 1.0))
    return passes


def _remade(groups: dict[str, list[Gemm]], casts: dict[str, list[Casts]], acts: dict[str, tuple[Kernel, float]],
            routing: list[tuple[Kernel, float]], norm: Kernel) -> dict[str, list[tuple[Kernel, float]]]:  # fmt: skip
    """What each recompute module runs again: its forward GEMMs, their input casts and its activation
    function (``moe`` with the shared experts and the routing, ``layernorm`` the norms, ``moe_act``
    the experts' activation)."""

    def forward(name: str) -> list[tuple[Kernel, float]]:
        kernels = [(k, n) for k, n, _ in groups[name]] + [(fwd, n) for fwd, _, n in casts[name]]
        return kernels + ([acts[name]] if name in acts else [])

    remade = {name: forward(name) for name in ("mla_up_proj", "mlp", "shared_experts")}
    remade["moe"] = forward("moe") + remade["shared_experts"] + routing
    remade["layernorm"] = [(norm, 2.0)]
    remade["moe_act"] = [acts["moe"]] if "moe" in acts else []
    return remade


def _shared(
    moe: _Experts, casts: dict[str, list[Casts]], acts: dict[str, tuple[Kernel, float]]
) -> LayerKernels | None:
    """The shared experts' own kernels (``None`` without shared experts)."""
    if not moe.shared:
        return None
    cast_passes = [(fwd, n, 0.0) for fwd, _, n in casts["shared_experts"]]
    cast_passes += [(bwd, 0.0, n) for _, bwd, n in casts["shared_experts"]]
    kernel, share = acts["shared_experts"]
    return LayerKernels(moe.shared, [], [*cast_passes, (kernel, share, 2 * share)], {})
