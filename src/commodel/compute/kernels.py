"""FLOP and byte counts of the kernels a training step is made of (vectorized over shapes).

Each kernel also reports its output tiles, the units of work a GPU schedules over its SMs/CUs, so the
roofline can apply wave quantization.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike

from commodel.errors import CommodelError, unknown

DTYPE_BYTES = {"fp64": 8, "fp32": 4, "tf32": 4, "bf16": 2, "fp16": 2, "fp8": 1, "fp4": 0.5}

#: Output tile of a tensor-core GEMM (rows x cols): CUTLASS/cuBLAS's common 128 x 256 for large
#: half-precision GEMMs on A100/H100; one tile is one CTA, so tiles / SMs sets the number of waves.
GEMM_TILE = (128, 256)

#: Flash-attention query block per CTA (FlashAttention-2 uses 128 rows).
ATTENTION_BLOCK = 128


@dataclass(frozen=True)
class Kernel:
    """Work of a batch of kernels: FLOPs, bytes moved to/from HBM, tiles, and whether it uses tensor cores."""

    name: str
    flops: np.ndarray
    bytes: np.ndarray
    tiles: np.ndarray
    k_depth: np.ndarray
    dtype: str
    matmul: bool

    @property
    def intensity(self) -> np.ndarray:
        """Arithmetic intensity in FLOP/byte."""
        return self.flops / self.bytes


def _dtype_bytes(dtype: str) -> float:
    if dtype not in DTYPE_BYTES:
        raise unknown("dtype", dtype, DTYPE_BYTES)
    return DTYPE_BYTES[dtype]


def _positive(**shapes: ArrayLike) -> list[np.ndarray]:
    arrays = [np.asarray(v, dtype=float) for v in shapes.values()]
    for name, arr in zip(shapes, arrays, strict=True):
        if np.any(arr <= 0):
            raise CommodelError(f"{name} must be positive, got {arr.min():g}")
    return arrays


def gemm(m: ArrayLike, n: ArrayLike, k: ArrayLike, dtype: str = "bf16") -> Kernel:
    """C[m, n] = A[m, k] B[k, n]: ``2 m n k`` FLOPs, ``(m k + k n + m n) x bytes(dtype)`` of HBM
    traffic (each operand read once, C written once), ``ceil(m/128) ceil(n/256)`` output tiles."""
    m, n, k = _positive(m=m, n=n, k=k)
    size = _dtype_bytes(dtype)
    tiles = np.ceil(m / GEMM_TILE[0]) * np.ceil(n / GEMM_TILE[1])
    return Kernel("gemm", 2 * m * n * k, (m * k + k * n + m * n) * size, tiles, k, dtype, True)


def attention(
    batch: ArrayLike,
    heads: ArrayLike,
    seq: ArrayLike,
    head_dim: ArrayLike,
    dtype: str = "bf16",
    causal: bool = True,
) -> Kernel:
    """Flash-style attention forward: ``4 b h s^2 d`` FLOPs (QK^T and PV; half when causal) and
    ``4 b h s d x bytes`` of traffic (read Q, K, V once, write O; scores stay on chip,
    Dao et al. 2022). Tiles: one per (batch, head, 128-row query block)."""
    b, h, s, d = _positive(batch=batch, heads=heads, seq=seq, head_dim=head_dim)
    flops = 4 * b * h * s * s * d * (0.5 if causal else 1.0)
    tiles = b * h * np.ceil(s / ATTENTION_BLOCK)
    return Kernel("attention", flops, 4 * b * h * s * d * _dtype_bytes(dtype), tiles, s, dtype, True)


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
