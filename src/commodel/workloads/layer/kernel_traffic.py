"""What a memory-bound kernel moves per element, by how it runs: fused (Transformer Engine's and
Megatron's kernels, torch.compile's), as PyTorch's eager operations, and the eager glue Megatron-Core
runs around its fused kernels for some models (:func:`commodel.workloads.layer.kernels.layer_kernels`
prices them). Counts are (reads, writes) per element of the tensor named, in 16-bit activations."""

from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike

#: Memory-bound kernels: ``fused`` (Transformer Engine's and Megatron's kernels, or torch.compile's:
#: each reads its inputs and writes its outputs once) or ``eager`` (PyTorch eager mode, torchtitan
#: without ``--compile``: each operation a kernel of its own, :data:`EAGER_PASSES`).
ELEMENTWISE = ("fused", "eager")

#: (reads, writes) per element, in 16-bit activations, of the memory-bound kernels PyTorch runs
#: eagerly where a fused kernel has its own counts. RMSNorm: ATen's composite ``rms_norm`` (PyTorch
#: 2.4-2.7, behind ``nn.RMSNorm``) upcasts to FP32 (r 1, w 2), squares (r 2, w 2), takes the mean
#: (r 2), multiplies by its reciprocal root (r 2, w 2), casts back (r 2, w 1) and multiplies by the
#: weight (r 1, w 1): 10 and 8 where the fused norm has 1 and 1. SwiGLU (torchtitan's
#: ``F.silu(w1(x)) * w3(x)``): silu (r 1, w 1), then the product (r 2, w 1): 3 and 2 where the fused
#: one has 2 and 1. Their backward passes scale alike (assumed); residual adds and casts are one
#: kernel either way.
EAGER_PASSES = {"norm": (10, 8), "swiglu": (3, 2)}

#: (reads, writes) per output element that clamping a gated MLP's two halves adds before its fused
#: activation: Megatron-Core 0.15-0.16 (``weighted_bias_quick_geglu_impl`` with ``clamp_value``) clamps
#: each half (r 1, w 1 each) and concatenates them (r 2, w 2) as eager PyTorch operations.
CLAMP_PASSES = (4, 4)

#: (reads, writes) per element of the routed experts' second GEMM output that adding its bias costs,
#: forward and (about as much) backward: Megatron-Core 0.15-0.16 (``TEGroupedMLP._apply_bias``) weighs
#: each local expert's bias by the tokens' routing probabilities and adds it to their rows (a
#: broadcast product, w 1; the sum, r 2 w 1), then concatenates the experts' rows (r 1, w 1), as
#: eager PyTorch operations (the probabilities in the activations' dtype, as gpt-oss's router keeps them).
EXPERT_BIAS_PASSES = (3, 3)

#: (reads, writes) per query and key element, forward and (about as much) backward, that rotating them
#: in eager operations adds over Transformer Engine's fused RoPE (a read and a write): Megatron-Core
#: 0.16 (``_apply_rotary_pos_emb_bshd``) runs YaRN's rotary embedding unfused, since TE's fused kernel
#: takes no attention factor (``mscale``, 0.1 ln s + 1): ``t cos``, ``cat(-x2, x1)``, its product with
#: ``sin``, the sum and a last ``cat``, r 6.5 w 5.5 forward. The fused RoPE itself is not priced (for
#: any model): a read and a write of the queries and keys, about 0.6% of a dense step (Llama 3 8B on
#: GB200), which Megatron-Core may also fold into the QKV split (``fused_single_qkv_rope``).
YARN_ROPE_PASSES = (5.5, 4.5)


def eager_passes(eager: ArrayLike, kind: str, fused: tuple[int, int]) -> tuple[np.ndarray, np.ndarray]:
    """(reads, writes) per element of a ``kind`` of :data:`EAGER_PASSES`: eager where ``eager``, else
    the ``fused`` kernel's."""
    on = np.asarray(eager, dtype=bool)
    return tuple(np.where(on, e, f) for e, f in zip(EAGER_PASSES[kind], fused, strict=True))  # type: ignore[return-value]
