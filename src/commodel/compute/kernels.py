"""FLOP and byte counts of the kernels a training step is made of (vectorized over shapes).

Each kernel also reports its output tiles, the units of work a GPU schedules over its SMs/CUs, so the
roofline can apply wave quantization.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike

from commodel.errors import CommodelError, unknown

#: Bytes per element. FP4 is NVFP4 as stored: a 4-bit e2m1 value plus one e4m3 scale per 16 elements.
DTYPE_BYTES = {"fp64": 8, "fp32": 4, "tf32": 4, "bf16": 2, "fp16": 2, "fp8": 1, "fp4": 0.5 + 1 / 16,
               "w4a16": 0.5 + 1 / 16}  # fmt: skip

#: Weight-only GEMMs (a mixed-input kernel: 4-bit weights with their block scales, dequantized in the
#: main loop, activations and tensor-core math in BF16): the dtype's weight storage and compute dtype.
#: What FP4 checkpoints run as on a GPU without FP4 tensor cores (TensorRT-LLM's W4A16 kernels).
WEIGHT_ONLY = {"w4a16": ("fp4", "bf16")}

#: Share of the achievable HBM bandwidth a weight-only GEMM reads its weights at: its main loop
#: unpacks each 4-bit weight, converts it and applies its block scale on the CUDA cores before the BF16
#: MMA, so a memory-bound (small-batch) call falls well short of a copy. Calibrated: measurement
#: gpus-h100-gptoss120b-tp1-c4 (vLLM 0.10.2's MXFP4 MoE kernel on one H100, four requests in flight:
#: 453 tokens/s where reading the experts at the copy rate gives 779) -> 0.449; held out: the same
#: source's two-GPU run with async scheduling, vLLM issue 30326's two H200 runs (8 and 128 in flight,
#: eight GPUs) and SGLang's one-request H100 run. Measured on vLLM's and SGLang's MXFP4 MoE backends
#: on Hopper; a Marlin-style INT4 kernel, which its authors measure near the copy rate, is not one.
WEIGHT_ONLY_BANDWIDTH_SHARE = 0.449

#: Output tile of a tensor-core GEMM (rows x cols): CUTLASS/cuBLAS's common 128 x 256 for large
#: half-precision GEMMs on A100/H100; one tile is one CTA, so tiles / SMs sets the number of waves.
GEMM_TILE = (128, 256)

#: Flash attention's block of queries per CTA and of keys per step of its loop (FlashAttention-2's 128
#: at head dimension 128, the key block of its split-KV decode kernel too).
ATTENTION_BLOCK = 128


@dataclass(frozen=True)
class Kernel:
    """Work of a batch of kernels: FLOPs, bytes moved to/from HBM, tiles, whether it uses tensor cores,
    the exponentials it evaluates on the special-function units (softmax in attention), the share of
    the achievable HBM bandwidth it reaches (1: a streaming copy's; less where a measurement says the
    kernel falls short of one), the keys one step of a split-KV kernel's loop reads (``kv_block``; 0:
    a kernel whose k loop is not cut into splits, :func:`commodel.compute.roofline.split_k`), the share
    of its tiles' work that is its own (``fill``, for a kernel that is not a GEMM: its padded blocks
    run at full cost), and a ``label`` saying what it computes (``qkv``, ``expert fc1``;
    :func:`named`)."""

    name: str
    flops: np.ndarray
    bytes: np.ndarray
    tiles: np.ndarray
    k_depth: np.ndarray
    dtype: str
    matmul: bool
    shape: tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray] | None = None
    exps: np.ndarray | float = 0.0
    bandwidth_share: np.ndarray | float = 1.0
    kv_block: np.ndarray | float = 0.0
    fill: np.ndarray | float = 1.0
    label: str = ""

    @property
    def intensity(self) -> np.ndarray:
        """Arithmetic intensity in FLOP/byte."""
        return self.flops / self.bytes


def named(kernel: Kernel, label: str) -> Kernel:
    """``kernel`` labelled with what it computes."""
    return dataclasses.replace(kernel, label=label)


def stack(kernels: Sequence[Kernel], shape: tuple[int, ...] = ()) -> Kernel:
    """Kernels of one dtype and kind (tensor cores or not, GEMMs or not) as one :class:`Kernel` whose
    arrays gain a leading axis, one entry per kernel, broadcast over ``shape`` too (the rows a
    caller's other arrays have): the roofline prices them in one call."""
    first = kernels[0]
    values = {name: [getattr(k, name) for k in kernels] for name in STACKED}
    sides = [] if first.shape is None else list(zip(*(k.shape for k in kernels), strict=True))  # m, n, k, b
    sizes = {np.shape(v) for vs in (*values.values(), *sides) for v in vs}
    common = np.broadcast_shapes(shape, *sizes)  # a few distinct shapes (one value, a column of rows)

    def column(vs: Sequence[ArrayLike]) -> np.ndarray:
        out = np.empty((len(vs), *common))
        for i, v in enumerate(vs):
            out[i] = v
        return out

    shape_of = None if first.shape is None else tuple(column(side) for side in sides)
    return dataclasses.replace(first, shape=shape_of, **{name: column(vs) for name, vs in values.items()})


#: The :class:`Kernel` fields :func:`stack` stacks (the rest are the group's own).
STACKED = ("flops", "bytes", "tiles", "k_depth", "exps", "bandwidth_share", "kv_block", "fill")


def _dtype_bytes(dtype: str) -> float:
    if dtype not in DTYPE_BYTES:
        raise unknown("dtype", dtype, DTYPE_BYTES)
    return DTYPE_BYTES[dtype]


def _positive(**shapes: ArrayLike) -> list[np.ndarray]:
    arrays = [np.asarray(v, dtype=float) for v in shapes.values()]
    for name, arr in zip(shapes, arrays, strict=True):
        if (arr <= 0).any():
            raise CommodelError(f"{name} must be positive, got {arr.min():g}")
    return arrays


def gemm(m: ArrayLike, n: ArrayLike, k: ArrayLike, dtype: str = "bf16", batch: ArrayLike = 1) -> Kernel:
    """C[m, n] = A[m, k] B[k, n], ``batch`` of them in one launch: ``2 m n k`` FLOPs each,
    ``(m k + k n + m n) x bytes(dtype)`` of HBM traffic (each operand read once, C written once),
    ``ceil(m/128) ceil(n/256)`` output tiles each (the tile a GPU's library runs instead:
    :func:`commodel.compute.roofline.output_tiling`). A weight-only ``dtype`` (:data:`WEIGHT_ONLY`) reads
    the weights ``B`` at their storage bytes, at :data:`WEIGHT_ONLY_BANDWIDTH_SHARE` of the bandwidth,
    and computes in its compute dtype, the kernel's dtype."""
    m, n, k, b = _positive(m=m, n=n, k=k, batch=batch)
    weights, compute = WEIGHT_ONLY.get(dtype, (dtype, dtype))
    size = _dtype_bytes(compute)
    tiles = b * np.ceil(m / GEMM_TILE[0]) * np.ceil(n / GEMM_TILE[1])
    traffic = b * ((m * k + m * n) * size + k * n * _dtype_bytes(weights))
    share = WEIGHT_ONLY_BANDWIDTH_SHARE if dtype in WEIGHT_ONLY else 1.0  # a dequantizing main loop
    return Kernel(
        "gemm", 2 * b * m * n * k, traffic, tiles, k, compute, True, (m, n, k, b), bandwidth_share=share
    )


def gemm_backward(kernel: Kernel) -> tuple[Kernel, Kernel]:
    """The two backward GEMMs of a forward ``Y[m, n] = X[m, k] W[k, n]``: the input gradient
    ``dX = dY W^T`` (m, k, n) and the weight gradient ``dW = X^T dY`` (k, n, m)."""
    if kernel.shape is None:
        raise ValueError(f"{kernel.name} is not a GEMM")
    m, n, k, b = kernel.shape
    return gemm(m, k, n, kernel.dtype, b), gemm(k, n, m, kernel.dtype, b)


def causal_share(seq: ArrayLike, kv_seq: ArrayLike) -> np.ndarray:
    """Share of the score tiles a causal flash kernel computes: the lower triangle of n x n blocks of
    128 rows, ``(n + 1) / 2n`` (diagonal blocks are computed whole); a rank's s/cp queries against all
    s keys (load-balanced context parallelism) see half."""
    s, s_kv = np.asarray(seq, dtype=float), np.asarray(kv_seq, dtype=float)
    blocks = np.ceil(s / ATTENTION_BLOCK)
    return np.where(s == s_kv, (blocks + 1) / (2 * blocks), 0.5)


def attention(
    batch: ArrayLike,
    heads: ArrayLike,
    seq: ArrayLike,
    head_dim: ArrayLike,
    dtype: str = "bf16",
    causal: bool = True,
    kv_seq: ArrayLike | None = None,
    window: ArrayLike | None = None,
) -> Kernel:
    """Flash-style attention forward (Dao et al. 2022): per score computed, ``4 d`` FLOPs (QK^T and PV)
    and one exponential (softmax); ``(2 s + 2 s_kv) b h d x bytes`` of traffic (read Q, K, V once,
    write O; scores stay on chip). Causal kernels compute :func:`causal_share` of the scores; a
    sliding ``window`` of w keys, the key blocks its band touches, whole as the causal diagonal's:
    ``ceil((w - 1) / 128) + 1`` blocks of 128 keys per query block (two for gpt-oss's 128). ``kv_seq``
    defaults to ``seq``; context parallelism gives each rank s/cp queries against all s keys. Tiles:
    one per (batch, head, 128-row query block), each looping over its key blocks of 128: ``128
    ceil(s_kv / 128) x share`` keys deep (the band's, if shorter); a last query or key block that is
    partly padding runs whole (``fill``, the scores' share of the tiles' query-key slots), and where
    the tiles leave SMs idle the keys are split as decode's are (:func:`decode_attention`)."""
    b, h, s, d = _positive(batch=batch, heads=heads, seq=seq, head_dim=head_dim)
    s_kv = s if kv_seq is None else np.asarray(kv_seq, dtype=float)
    share = causal_share(s, s_kv) if causal else 1.0
    keys, depth = s_kv * share, ATTENTION_BLOCK * np.ceil(s_kv / ATTENTION_BLOCK) * share
    if window is not None:
        band = ATTENTION_BLOCK * (np.ceil((np.asarray(window, dtype=float) - 1) / ATTENTION_BLOCK) + 1)
        keys, depth = np.minimum(keys, band), np.minimum(depth, band)
    scores = b * h * s * keys
    traffic = 2 * (s + s_kv) * b * h * d * _dtype_bytes(dtype)
    rows = np.ceil(s / ATTENTION_BLOCK)
    fill = s * keys / (rows * ATTENTION_BLOCK * depth)
    return Kernel(
        "attention", 4 * d * scores, traffic, b * h * rows, depth, dtype, True,
        exps=scores, kv_block=float(ATTENTION_BLOCK), fill=fill,
    )  # fmt: skip


def decode_attention(
    queries: ArrayLike,
    heads: ArrayLike,
    context: ArrayLike,
    flops_per_score: ArrayLike,
    cached_per_token: ArrayLike,
    kv_dtype: str = "bf16",
    compute: str | None = None,
    head_groups: ArrayLike = 1.0,
) -> Kernel:
    """Attention of ``queries`` new tokens, each over its request's ``context`` cached tokens (the
    decode phase; TensorRT-LLM's XQA, vLLM's paged attention): ``queries x heads x context`` scores of
    ``flops_per_score`` FLOPs and one exponential each, and each request's cache read once:
    ``cached_per_token`` elements per token in ``kv_dtype`` (a GQA group's query heads share one read),
    its math in ``compute`` (default: the cache's dtype; a GPU without FP8 tensor cores dequantizes
    an FP8 cache as it loads it, vLLM's on Ampere, and computes in 16 bits).
    GQA: ``4 d`` FLOPs per score, ``2 kv_heads d`` cached; MLA, absorbed: ``2 (2 r + d_rope)`` and
    ``r + d_rope`` (the latent serves as key and value). Tiles: ``head_groups`` per query (one CTA per
    KV head, its query group packed as rows, FlashAttention-2's decode; FlashMLA's 64 query heads per
    CTA), each looping over the whole context in blocks of :data:`ATTENTION_BLOCK` keys (the last one
    run whole, ``fill``); the roofline cuts the context into the splits that make it fastest
    (split-KV, FlashDecoding: :func:`commodel.compute.roofline.split_k`)."""
    q, h, c, f, w, g = _positive(
        queries=queries,
        heads=heads,
        context=context,
        flops_per_score=flops_per_score,
        cached=cached_per_token,
        head_groups=head_groups,
    )
    scores = q * h * c
    depth = ATTENTION_BLOCK * np.ceil(c / ATTENTION_BLOCK)
    return Kernel(
        "decode-attention", f * scores, q * c * w * _dtype_bytes(kv_dtype), q * g, depth,
        compute or kv_dtype, True, exps=scores, kv_block=float(ATTENTION_BLOCK), fill=c / depth,
    )  # fmt: skip


def unfused_attention(
    batch: ArrayLike,
    heads: ArrayLike,
    seq: ArrayLike,
    head_dim: ArrayLike,
    dtype: str = "bf16",
    kv_seq: ArrayLike | None = None,
) -> list[Kernel]:
    """Attention without flash fusion (Megatron-LM before FlashAttention, 2021): a batched QK^T GEMM
    that writes the ``s x s_kv`` scores to HBM, a fused scale-mask-softmax (reads and writes them) and
    a dropout (reads them, writes them and a 1-byte mask), then a batched PV GEMM that reads them."""
    b, h, s, d = _positive(batch=batch, heads=heads, seq=seq, head_dim=head_dim)
    s_kv = s if kv_seq is None else np.asarray(kv_seq, dtype=float)
    scores = b * h * s * s_kv
    size = _dtype_bytes(dtype)
    passes = Kernel(
        "softmax-dropout",
        8 * scores,
        scores * (4 * size + 1),
        np.ceil(scores / 1024),
        np.ones_like(scores),
        dtype,
        False,
    )
    return [gemm(s, s_kv, d, dtype, b * h), passes, gemm(s, d, s_kv, dtype, b * h)]


def elementwise(
    elements: ArrayLike,
    dtype: str = "bf16",
    reads: int = 1,
    writes: int = 1,
    flops_per_element: float = 1.0,
) -> Kernel:
    """Elementwise kernel (activation, residual add, optimizer update): ``(reads + writes) x elements x
    bytes`` of traffic, ``flops_per_element x elements`` FLOPs on the vector units."""
    (e,) = _positive(elements=elements)
    traffic = (reads + writes) * e * _dtype_bytes(dtype)
    return Kernel(
        "elementwise",
        flops_per_element * e,
        traffic,
        np.ceil(e / 1024),
        np.ones_like(e),
        dtype,
        False,
    )


def quantize(elements: ArrayLike, bytes_per_element: float, bandwidth_share: float = 1.0) -> Kernel:
    """An FP8 quantization pass over ``elements`` (amax, scale, cast and the transposed or column-wise
    copy, :mod:`commodel.compute.precision`): ``bytes_per_element`` of HBM traffic each, two FLOPs,
    at ``bandwidth_share`` of the achievable HBM bandwidth."""
    e = np.asarray(elements, dtype=float)
    tiles = np.ceil(e / 1024)
    return Kernel(
        "quantize", 2 * e, bytes_per_element * e, tiles, np.ones_like(e), "bf16", False,
        bandwidth_share=bandwidth_share,
    )  # fmt: skip


def example_kernels(seq: int = 4096) -> dict[str, Kernel]:
    """Typical kernels of a transformer step, for placing on a roofline chart: two large GEMMs (a
    projection and a square one), a decode GEMM of 16 tokens, flash attention over ``seq`` tokens (4
    sequences, 32 heads of 128) and an elementwise pass over 256 M elements."""
    return {
        "GEMM 8192^3": gemm(8192, 8192, 8192),
        "GEMM 4096x512x4096": gemm(4096, 512, 4096),
        "GEMM 16x8192x8192 (decode)": gemm(16, 8192, 8192),
        f"attention s={seq}": attention(4, 32, seq, 128),
        "elementwise 256M": elementwise(2**28),
    }
