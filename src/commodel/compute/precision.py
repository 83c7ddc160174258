"""Training precision recipes: which kernels run in which dtype, as Transformer Engine runs them.

- ``bf16`` / ``fp16``: every kernel in that dtype (mixed precision with fp32 master weights).
- ``fp8`` (Transformer Engine, per-tensor current scaling): the linear layers' GEMMs run in FP8 in
  the forward (fprop) and backward (dgrad, wgrad) passes. Everything else stays in BF16: attention
  (fused, softmax included), norms, activations, residuals, the router, the logits layer, the
  optimizer, and what crosses the wire (TP/SP activations, expert dispatch, gradients). Each FP8 GEMM
  operand is quantized first: an amax pass (read 2 B per element), a cast (read 2 B, write 1 B) and
  the transposed copy the backward GEMM consumes (write 1 B): 6 B of HBM traffic per element.
- ``mxfp8`` (Transformer Engine MXFP8, Blackwell): the same GEMMs with 1 x 32 block scales; one pass
  reads 2 B and writes a row-wise and a column-wise FP8 copy with their scales: 2 + 1 + 1 + 2/32 B,
  at :data:`BLOCK_CAST_BANDWIDTH` of the copy bandwidth (calibrated).
- ``fp8-block`` (Transformer Engine ``Float8BlockScaling``, Megatron's ``--fp8-recipe blockwise``:
  DeepSeek-V3's fine-grained FP8, report section 3.3.2): the same GEMMs with an FP32 scale per
  1 x 128 tile of activations and gradients (128 x 128 block of weights), applied in the GEMM's
  main loop. One pass reads 2 B and writes the row-wise tiles and the column-wise (transposed) copy
  the backward reads, with their scales: 2 + 1 + 1 + 2 x 4/128 B. The casts are assumed to reach
  MXFP8's :data:`BLOCK_CAST_BANDWIDTH` (the same pass: per-block amax, two quantized copies, their
  scales), and the GEMMs the per-tensor FP8 efficiency (DeepSeek overlaps the scaling's promotion to
  CUDA cores with the tensor cores' work and reports no loss).

Serving (:data:`SERVING_RECIPES`) runs the linear layers with quantized weights and activations, as
TensorRT-LLM runs ModelOpt checkpoints: ``fp8`` (static per-tensor scales: read 2 B, write 1 B per
input element) and ``fp4`` (NVFP4 W4A4, Blackwell: read 2 B, write the 4-bit values and their
16-element block scales; on a GPU without FP4 tensor cores, weight-only W4A16: the 4-bit weights
dequantized in the GEMM, BF16 math); the logits layer, router, norms and attention stay BF16.

Per GEMM, the forward quantizes its input (m x k elements) and the backward its output gradient
(m x n); weights are quantized once per step and cached across micro-batches (negligible).
"""

from __future__ import annotations

from dataclasses import dataclass

from commodel.errors import CommodelError, unknown
from commodel.hardware.schema import GPU

PRECISIONS = ("bf16", "fp16", "fp8", "mxfp8", "fp8-block")


@dataclass(frozen=True)
class Precision:
    """``gemm``: dtype of the linear layers' GEMMs; ``other``: dtype of every other kernel, of stored
    activations and of communication; ``cast_bytes``: HBM bytes per element to quantize a GEMM
    operand (0 without FP8); ``cast_bandwidth``: the share of the HBM copy bandwidth the
    quantization kernels reach; ``gathered_bytes``: bytes per parameter a data-parallel parameter
    all-gather moves (ZeRO-1's after the step, ZeRO-3's before each use): the 16-bit weights, or under
    FP8 the primary FP8 weights Megatron's ``--fp8-param-gather`` gathers (per-tensor scaling: the
    row-wise copy, its transpose made after the gather; ``fp8-block``: the 128 x 128-block weights,
    whose transpose keeps its blocks and scales; MXFP8's 1 x 32 blocks do not transpose, so both copies
    with their scales); ``activation_gather_bytes``: bytes per element a sequence-parallel all-gather
    of activations moves: Transformer Engine quantizes a GEMM's input (and output gradient) before it
    gathers them under FP8 (its FP8, MXFP8 and blockwise all-gathers, and userbuffers' ``fp8_buf``),
    so one byte and the recipe's scales (MXFP8's E8M0 per 32, blockwise FP32 per 1 x 128)."""

    name: str
    gemm: str
    other: str
    cast_bytes: float
    cast_bandwidth: float = 1.0
    gathered_bytes: float = 2.0
    activation_gather_bytes: float = 2.0

    @property
    def quantized(self) -> bool:
        return self.cast_bytes > 0


#: Share of the HBM copy bandwidth Transformer Engine's block-scaled quantization reaches (row-wise and
#: column-wise casts with a scale per block: MXFP8's E8M0 per 32 elements, its scales swizzled into
#: cuBLAS's layout; assumed the same for ``fp8-block``'s FP32 scale per 128).
#: Calibrated on measurement mb-gb200-llama3-8b-mx: Megatron-Bridge's Llama 3 8B runs 5.5% slower in
#: FP8-MX than in FP8-CS on the same 8 GB200 (29,789 vs 31,508 tokens/s per GPU), where copy-speed
#: casts would make MXFP8 2% faster (one pass of 4.06 B per element against current scaling's amax and
#: cast passes, 6 B). Held out: the GB300 pair and the MXFP8 MoE rows (DeepSeek-V3, Qwen3-30B-A3B).
BLOCK_CAST_BANDWIDTH = 0.349

RECIPES = {
    "bf16": Precision("bf16", "bf16", "bf16", 0.0),
    "fp16": Precision("fp16", "fp16", "fp16", 0.0),
    "fp8": Precision("fp8", "fp8", "bf16", 2 + 2 + 1 + 1, gathered_bytes=1.0, activation_gather_bytes=1.0),
    "mxfp8": Precision(
        "mxfp8", "fp8", "bf16", 2 + 1 + 1 + 2 / 32, BLOCK_CAST_BANDWIDTH, 2 + 2 / 32, 1 + 1 / 32
    ),
    "fp8-block": Precision(
        "fp8-block", "fp8", "bf16", 2 + 1 + 1 + 2 * 4 / 128, BLOCK_CAST_BANDWIDTH, 1 + 4 / 128**2, 1 + 4 / 128
    ),
}


#: Inference recipes (no backward pass, so no transposed copies).
SERVING_RECIPES = {
    "bf16": RECIPES["bf16"],
    "fp8": Precision("fp8", "fp8", "bf16", 2 + 1),
    "fp4": Precision("fp4", "fp4", "bf16", 2 + 0.5 + 1 / 16),
}


def _check_tensor_cores(recipe: Precision, gpu: GPU, recipes: dict[str, Precision]) -> None:
    """Raise if ``gpu`` has no tensor cores for ``recipe``'s GEMMs, naming the ``recipes`` it can run."""
    if recipe.gemm not in gpu.peak_flops:
        usable = ", ".join(name for name, other in recipes.items() if other.gemm in gpu.peak_flops)
        raise CommodelError(f"{gpu.description} has no {recipe.gemm} tensor cores; use {usable}")


#: FP4 weights on a GPU without FP4 tensor cores: weight-only, dequantized to BF16 in the GEMM
#: (:data:`commodel.compute.kernels.WEIGHT_ONLY`), the weights at 4 bits and their scales in memory.
FP4_WEIGHT_ONLY = Precision("fp4 weight-only", "w4a16", "bf16", 0.0)


def dense_gemm(recipe: Precision, fp4_scope: str) -> str:
    """The dtype of a layer's linear layers outside its routed experts: the recipe's, but BF16 (its
    ``other``) where a 4-bit checkpoint quantizes the routed experts only (``fp4_scope`` ``experts``)."""
    four_bit = recipe.gemm in ("fp4", FP4_WEIGHT_ONLY.gemm)
    return recipe.other if four_bit and fp4_scope == "experts" else recipe.gemm


def serving_precision(name: str, gpu: GPU) -> Precision:
    """The inference recipe called ``name``, checked against ``gpu``'s tensor cores; FP4 weights where
    there are no FP4 tensor cores run weight-only (:data:`FP4_WEIGHT_ONLY`)."""
    if name not in SERVING_RECIPES:
        raise unknown("serving precision", name, SERVING_RECIPES)
    recipe = SERVING_RECIPES[name]
    if name == "fp4" and recipe.gemm not in gpu.peak_flops:
        return FP4_WEIGHT_ONLY
    _check_tensor_cores(recipe, gpu, SERVING_RECIPES)
    return recipe


def precision(name: str, gpu: GPU | None = None) -> Precision:
    """The recipe called ``name``; with a ``gpu``, check that it can run it (FP8 tensor cores;
    MXFP8 block scaling on Blackwell)."""
    if name not in RECIPES:
        raise unknown("training precision", name, RECIPES)
    recipe = RECIPES[name]
    if gpu is not None:
        _check_tensor_cores(recipe, gpu, RECIPES)
        if name == "mxfp8" and gpu.architecture != "blackwell":
            raise CommodelError(
                f"mxfp8 (block-scaled FP8) needs Blackwell tensor cores; {gpu.description} has fp8"
            )
    return recipe
