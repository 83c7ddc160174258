"""Roofline time of a kernel on a GPU (Williams, Waterman & Patterson 2009), with shape effects.

``time = max(FLOPs / achievable FLOP/s, bytes / achievable bandwidth) + launch overhead``

- achievable FLOP/s (tensor-core kernels) = peak[dtype] x matmul_efficiency[dtype] (the GPU's
  measured best GEMM, "MAMF") x wave efficiency x depth efficiency, every clock-bound rate (these, the
  vector peaks, the exponential rate) times the clock share a power limit below the TDP leaves
  (:func:`commodel.compute.power.clock_share`);
- wave efficiency = tiles x fill / (ceil(tiles / SMs) x SMs): a kernel whose tiles do not fill the
  last wave of SMs/CUs leaves the rest idle (wave quantization); the tiles are those the GPU's GEMM
  library runs (:func:`output_tiling`), ``fill`` their share that is output, not padding;
- depth efficiency = k / (k + K0 x r): each output tile pays a prologue and epilogue (filling the
  operand pipeline, storing the tile) that take as long as K0 more elements of a 16-bit k loop
  (:data:`GEMM_TILE_OVERHEAD_K`), which matters for small k; a dtype whose tensor peak is r times the
  16-bit one runs r times the k elements in that time (FP8 tiles take twice the k of BF16 tiles per
  step at the same step time), so its overhead is ``r K0`` elements;
- vector kernels (elementwise) use the fp32 (or their own dtype's) non-tensor peak without these terms;
- achievable bandwidth = HBM bandwidth x memory_efficiency (the GPU's STREAM copy fraction), times
  the kernel's own share of it where a measurement says it falls short of a copy;
- fused attention also evaluates one exponential per score on the special-function units, at
  ``exp_rate`` times the same wave efficiency (an SM without a tile evaluates none; a padded block's
  run too): its compute term is ``max(t_mma, t_exp) + SOFTMAX_EXPOSED x min(t_mma, t_exp)``, the
  two overlapping as FlashAttention-3/4 schedule them (one warp group's softmax under another's GEMM)
  but not perfectly. With d = 128 a forward score costs 512 FLOPs: on H100 (256 FLOPs of tensor peak
  per exponential) the softmax fits under the GEMM; on B200/GB200 (512) the two are co-bound; Blackwell
  Ultra doubles the exponential rate.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike

from commodel.compute.kernels import DTYPE_BYTES, GEMM_TILE, STACKED, Kernel, gemm
from commodel.compute.power import clock_share
from commodel.errors import CommodelError
from commodel.hardware.schema import GPU

#: Per-tile fixed cost in elements of a 16-bit (BF16/FP16) k loop: a time, which a faster dtype's loop
#: covers more k in. Calibrated on measurement a100-gemm-8k (cuBLASLt fp16 8192^3 on A100 = 253.7
#: TFLOP/s = 271.2 x wave 0.998 x 8192 / (8192 + K0) -> K0 = 550); the 4096^3 and 16384^3 rows are
#: held out.
GEMM_TILE_OVERHEAD_K = 550.0

#: Share of the shorter of a fused attention kernel's GEMM and softmax phases that stays exposed.
#: Assumed: FlashAttention-3's ping-pong schedule hides the softmax of one warp group behind the other's
#: GEMMs, but its own measurements (740 of 989 TFLOP/s forward on H100 at d = 128, 75%) sit between full
#: overlap and none; half exposed reproduces that share with H100's 0.803 GEMM efficiency.
SOFTMAX_EXPOSED = 0.5

#: Most slices a split-K GEMM cuts its k loop into (assumed; cuBLASLt's heuristics and CUTLASS's
#: split-K kernels cut it when the output tiles leave SMs idle).
SPLIT_K_MAX = 16

#: Splits a split-KV (FlashDecoding) kernel may cut its keys into: FlashAttention's split heuristic
#: tries up to 128; the model prices the powers of two and runs the fastest.
KV_SPLITS = (1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0, 128.0)

#: Elements of k one step of a tile's main loop consumes (CUTLASS's 128 x 256 x 64 half-precision
#: tiles): a split-K slice is at least this deep, so a GEMM with k below twice it is not split.
GEMM_K_BLOCK = 64


@dataclass(frozen=True)
class KernelTime:
    """Roofline result per kernel instance (arrays): times, FLOP/s, the split-K factor a GEMM ran at
    (:func:`split_k`; 1 otherwise), the HBM bytes it moved (its partial sums included) and the tiling
    it ran at (:func:`output_tiling`)."""

    time_s: np.ndarray
    compute_s: np.ndarray
    memory_s: np.ndarray
    achieved_flops: np.ndarray
    ceiling_flops: np.ndarray
    split_k: np.ndarray | int
    traffic: np.ndarray | float
    tiling: Tiling

    @property
    def bound(self) -> np.ndarray:
        """ "compute" where the FLOP term dominates, else "memory"."""
        return np.where(self.compute_s >= self.memory_s, "compute", "memory")


def peak_flops(gpu: GPU, dtype: str, matmul: bool = True) -> float:
    """Dense peak FLOP/s of ``gpu`` in ``dtype`` (vector kernels: the fp32 peak)."""
    key = dtype if matmul else "fp32"
    if key not in gpu.peak_flops:
        raise CommodelError(
            f"{gpu.description} has no {key} peak in the hardware database; it has: "
            f"{', '.join(gpu.peak_flops)}"
        )
    return gpu.peak_flops[key].value


def achievable_flops(
    gpu: GPU,
    kernel: Kernel,
    units: ArrayLike | None = None,
    split: ArrayLike = 1,
    tiling: Tiling | None = None,
) -> np.ndarray:
    """Achievable FLOP/s for ``kernel`` on ``gpu`` after wave quantization and per-tile overhead.

    ``units`` (default: all SMs/CUs) is the number the kernel may occupy, for kernels sharing the GPU
    with a collective: a kernel on fewer SMs loses throughput in proportion and may need an extra wave.
    ``split``: a GEMM's k loop cut into that many slices, each its own tile of ``k / split`` depth.
    ``tiling``: the kernel's :func:`output_tiling` on those units, where the caller has it.
    """
    total = gpu.compute_units.value
    units = total if units is None else np.asarray(units, dtype=float)
    if not kernel.matmul:
        peak = peak_flops(gpu, kernel.dtype, matmul=False)
        return np.full(np.shape(kernel.flops), peak * clock_share(gpu)) * units / total
    return _tensor_rate(gpu, kernel, *_wave_share(gpu, kernel, units, split, tiling))


def _tensor_rate(gpu: GPU, kernel: Kernel, wave_eff: ArrayLike, depth: ArrayLike) -> np.ndarray:
    """FLOP/s of a tensor-core kernel keeping ``wave_eff`` of the SMs at work (:func:`_wave_share`)
    on tiles ``depth`` deep: the GPU's best GEMM rate times ``wave_eff`` and the depth efficiency."""
    peak = peak_flops(gpu, kernel.dtype)
    sixteen_bit = peak_flops(gpu, "bf16" if "bf16" in gpu.peak_flops else "fp16")
    depth_eff = depth / (depth + GEMM_TILE_OVERHEAD_K * peak / sixteen_bit)
    return peak * clock_share(gpu) * gpu.efficiency(kernel.dtype) * wave_eff * depth_eff


def _wave_share(
    gpu: GPU, kernel: Kernel, units: ArrayLike, split: ArrayLike, tiling: Tiling | None
) -> tuple[np.ndarray, np.ndarray]:
    """The share of the GPU's SMs a tensor-core kernel keeps at work on ``units`` of them, ``t fill w /
    (ceil(t / U) SMs)`` for its ``t`` tiles at ``split`` slices, ``fill`` their output share and ``w``
    their slices' (:func:`_slice_depth`), and a tile's k depth."""
    tiling = tiling or output_tiling(gpu, kernel, units)
    tiles, (depth, work) = tiling.tiles * split, _slice_depth(kernel, split)
    waves = np.ceil(tiles / units)
    return tiles * tiling.fill * work / (waves * gpu.compute_units.value), depth


def _slice_depth(kernel: Kernel, split: ArrayLike) -> tuple[np.ndarray, np.ndarray | float]:
    """A tile's k depth when the kernel's k loop is cut into ``split`` slices, and the share of it that
    is work: ``k / s``, all of it, for a split-K GEMM; for a split-KV kernel (whose ``k`` already
    counts whole key blocks, its padding in its ``fill``) each of ``s > 1`` slices is whole blocks
    of ``kv_block`` keys, ``ceil(k / (s B)) B`` deep, of which ``k / s`` are keys (a slice's last
    block, and a slice past the context's end, run at full cost)."""
    s = np.asarray(split, dtype=float)
    depth = kernel.k_depth / s
    if not np.any(kernel.kv_block):
        return depth, 1.0
    sliced = (np.asarray(kernel.kv_block) > 0) & (s > 1)
    block = np.where(sliced, kernel.kv_block, 1.0)
    padded = np.where(sliced, np.ceil(depth / block) * block, depth)
    return padded, depth / padded


@dataclass(frozen=True)
class Tiling:
    """How a kernel's output is cut into tiles (one CTA each): ``tiles`` per launch, each ``rows x
    cols``, of which ``fill`` is the kernel's output (:func:`tile_fill`)."""

    tiles: np.ndarray
    rows: np.ndarray | float
    cols: np.ndarray | float
    fill: np.ndarray | float = 1.0


def tile_fill(
    m: ArrayLike, n: ArrayLike, rows: ArrayLike, cols: ArrayLike, shortest: tuple[float, float] = (0.0, 0.0)
) -> np.ndarray:
    """The share of an ``m x n`` output's ``rows x cols`` tiles that is output, not padding:
    ``d / (ceil(d / t) t)`` along each side ``d`` (the last tile's padding runs at the tile's full
    cost); a side shorter than the ``shortest`` tile side listed is not charged, as libraries run
    such GEMMs (decode's few rows) on narrower tiles than the large ones listed."""

    def side(d: np.ndarray, t: ArrayLike, least: float) -> np.ndarray:
        return np.where(d >= least, d / (np.ceil(d / t) * t), 1.0)

    return side(np.asarray(m, dtype=float), rows, shortest[0]) * side(
        np.asarray(n, dtype=float), cols, shortest[1]
    )


def output_tiling(gpu: GPU, kernel: Kernel, units: ArrayLike | None = None) -> Tiling:
    """The tiling a GEMM library runs ``kernel`` at on ``units`` SMs/CUs (default all) of ``gpu``.

    Of the GPU's tiles (:attr:`GPU.gemm_tiles`), the one whose waves take least time,
    ``ceil(t / U) x rows x cols`` for ``t = b ceil(m / rows) ceil(n / cols)`` tiles (a tile's time is
    its area at one rate per SM, padding included); of two as fast, the one with less padding
    (``t x rows x cols``), then the first listed. The rate pays the chosen tiles' padding (their
    ``fill``, :func:`tile_fill`: a side shorter than the shortest tile, decode's few rows, is not
    charged). A GPU whose record lists no tiles runs CUTLASS's 128 x 256 so. (Its padded tiles once
    counted whole, as work: a GEMM ran faster with more rows, 641 x 10668 x 6245 FP8 on H100 16%
    faster than 640 rows, its sixth row of tiles, one row filled, counted full.) A kernel that is not a
    GEMM keeps its own tiles.
    """
    if kernel.shape is None:
        return Tiling(kernel.tiles, *GEMM_TILE, kernel.fill)
    m, n, _, b = (np.asarray(v, dtype=float) for v in kernel.shape)
    listed = gpu.gemm_tiles.value if gpu.gemm_tiles is not None else [GEMM_TILE]
    shortest = tuple(float(min(side)) for side in zip(*listed, strict=True))
    if len(listed) == 1:
        ((r, c),) = listed
        return Tiling(b * np.ceil(m / r) * np.ceil(n / c), r, c, tile_fill(m, n, r, c, shortest))
    units = gpu.compute_units.value if units is None else np.asarray(units, dtype=float)
    sides = np.array(listed, dtype=float)
    rows, cols = (sides[:, i].reshape((-1,) + (1,) * np.ndim(m * n * units)) for i in (0, 1))
    tiles = b * np.ceil(m / rows) * np.ceil(n / cols)
    fill = tile_fill(m, n, rows, cols, shortest)
    time, padded = np.broadcast_arrays(np.ceil(tiles / units) * rows * cols, tiles * rows * cols)
    best = np.lexsort((padded, time), axis=0)[:1]
    tiles, rows, cols, fill = (
        np.take_along_axis(np.broadcast_to(v, tiles.shape), best, 0)[0] for v in (tiles, rows, cols, fill)
    )
    return Tiling(tiles, rows, cols, fill)


def achievable_bandwidth(gpu: GPU) -> float:
    """Achievable HBM bandwidth in bytes/s (STREAM-copy fraction of the vendor figure)."""
    return gpu.memory_bandwidth.value * gpu.memory_efficiency.value


def kernel_time(gpu: GPU, kernel: Kernel, launch: bool = True, units: ArrayLike | None = None) -> KernelTime:
    """Roofline time of ``kernel`` on ``gpu`` using ``units`` SMs/CUs (default all).

    ``launch`` adds the GPU's kernel launch overhead. A GEMM whose output tiles leave SMs idle runs
    at the split-K factor that makes it fastest (:func:`split_k`), as cuBLAS's heuristics pick one;
    a split-KV kernel at its fastest split of the keys.
    """
    tiling = output_tiling(gpu, kernel, units)
    split = split_k(gpu, kernel, units, tiling)
    compute, memory, ceiling, traffic = _phases(gpu, kernel, units, split, tiling)
    time = np.maximum(compute, memory) + (gpu.launch_overhead.value if launch else 0.0)
    return KernelTime(time, compute, memory, kernel.flops / time, ceiling, split, traffic, tiling)


def _phases(
    gpu: GPU, kernel: Kernel, units: ArrayLike | None, split: ArrayLike, tiling: Tiling
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """A kernel's compute and memory seconds at ``split`` slices of its k loop, with its FLOP/s
    ceiling and the HBM bytes it moves (its partial sums included). The exponentials run on the SMs
    its tiles keep at work, padding included (the wave share its tensor rate has)."""
    total = gpu.compute_units.value
    units = total if units is None else np.asarray(units, dtype=float)
    if kernel.matmul:
        busy, depth = _wave_share(gpu, kernel, units, split, tiling)
        ceiling = _tensor_rate(gpu, kernel, busy, depth)
    else:
        busy, ceiling = units / total, achievable_flops(gpu, kernel, units)
    compute = kernel.flops / ceiling
    if gpu.exp_rate is not None and np.any(kernel.exps):
        softmax = kernel.exps / (gpu.exp_rate.value * clock_share(gpu) * busy)
        compute = np.maximum(compute, softmax) + SOFTMAX_EXPOSED * np.minimum(compute, softmax)
    traffic = kernel.bytes + _partial_sum_bytes(kernel, split)
    return compute, traffic / _bandwidth(gpu, kernel), ceiling, traffic


def hbm_bytes(
    gpu: GPU,
    kernel: Kernel,
    units: ArrayLike | None = None,
    tile: tuple[int, int] | None = None,
    resident: int = 1,
) -> np.ndarray:
    """HBM bytes a kernel moves as it runs: its roofline traffic, and for a GEMM the operand panels
    each wave of tiles reads. The ``w`` tiles in flight on ``U`` SMs (or all SMs), rastered as a block
    of ``r x c`` tiles (``r c = w``, as square as the grid allows), read ``r`` row panels of A and
    ``c`` column panels of B of ``k`` elements; L2 serves their reuse within the wave, not across
    waves (whose panels it has long evicted), so::

        bytes = waves (r b_m + c b_n) k s_in + m n s_out    (at least each operand once)

    For 8192^3 BF16 on H100 (132 SMs, 128 x 256 tiles) that is 1.1 GB against 0.4 GB read once: a
    compute-bound GEMM still loads HBM with a quarter of its bandwidth, what a collective beside it
    contends with. The roofline's memory term keeps the once-read traffic (the wave's panels stream
    under the math)."""
    if kernel.shape is None:
        return np.asarray(kernel.bytes, dtype=float)
    m, n, k, b = (np.asarray(v, dtype=float) for v in kernel.shape)
    units = gpu.compute_units.value if units is None else np.asarray(units, dtype=float)
    if tile is None:
        tiling = output_tiling(gpu, kernel, units)
        tile = (tiling.rows, tiling.cols)
    rows, cols = np.ceil(m / tile[0]), np.ceil(n / tile[1])
    flight = np.minimum(rows * cols, units * resident)
    r = np.clip(np.sqrt(flight), 1.0, rows)
    c = np.minimum(cols, flight / r)
    r = np.minimum(rows, flight / c)
    size = DTYPE_BYTES[kernel.dtype]
    panels = b * (rows * cols / flight) * (r * tile[0] + c * tile[1]) * k * size + b * m * n * size
    return np.maximum(panels, kernel.bytes)


def hbm_time(
    gpu: GPU, kernel: Kernel, units: ArrayLike | None = None, tiling: Tiling | None = None
) -> np.ndarray:
    """Seconds :func:`hbm_bytes` take at the kernel's achievable bandwidth: the time it spends moving
    HBM bytes, which a co-running kernel's traffic contends with; ``tiling``: the kernel's
    :func:`output_tiling`, where the caller has it (a :class:`KernelTime`'s)."""
    tile = None if tiling is None else (tiling.rows, tiling.cols)
    return hbm_bytes(gpu, kernel, units, tile) / _bandwidth(gpu, kernel)


def _bandwidth(gpu: GPU, kernel: Kernel) -> float:
    return achievable_bandwidth(gpu) * kernel.bandwidth_share


def _partial_sum_bytes(kernel: Kernel, split: ArrayLike) -> np.ndarray | float:
    """Bytes a split kernel adds: its ``s`` FP32 partial outputs written and read back, ``8 s m n`` for
    a split-K GEMM; for a split-KV kernel ``8 s q h d_v``, with ``q h d_v = F / (4 k fill)`` (its ``F``
    FLOPs over ``k fill`` keys: PV takes half a score's FLOPs, ``2 d_v``; padded query rows write
    theirs too)."""
    s = np.asarray(split, dtype=float)
    if kernel.shape is None:
        per_slice = 2 * kernel.flops / (kernel.k_depth * kernel.fill)
        return np.where((np.asarray(kernel.kv_block) > 0) & (s > 1), s * per_slice, 0.0)
    m, n = kernel.shape[:2]
    return np.where(s > 1, 8 * s * m * n, 0.0)


def split_k(
    gpu: GPU, kernel: Kernel, units: ArrayLike | None = None, tiling: Tiling | None = None
) -> np.ndarray | int:
    """The split-K factor ``s`` a GEMM runs at: 1 unless it is one GEMM (not a batched or grouped
    launch) whose ``t`` output tiles do not fill one wave of the ``U`` SMs it may use (NVIDIA's GEMM
    guide shows full-size GEMMs keeping their wave quantization). Such a GEMM's k loop may be cut into
    ``s <= min(U / t, k / GEMM_K_BLOCK, SPLIT_K_MAX)`` slices (each at least one step of the main loop
    deep), one wave of ``t s`` tiles ``k / s`` deep: compute time
    ``a / s + c`` (wave efficiency ``t s / SMs``, depth efficiency ``k / (k + s K0 r)``), memory time
    ``b + 8 m n s / BW`` (the FP32 partial outputs, :func:`_partial_sum_bytes`). The best ``s`` is 1 or a
    whole number next to where the two meet, ``d s^2 + (b - c) s - a = 0`` with ``d = 8 m n / BW``.
    A split-KV kernel runs at the fastest of :data:`KV_SPLITS` (:func:`_split_kv`)."""
    if np.any(kernel.kv_block):
        return _split_kv(gpu, kernel, units, tiling or output_tiling(gpu, kernel, units))
    if kernel.shape is None:
        return 1
    units = gpu.compute_units.value if units is None else np.asarray(units, dtype=float)
    tiling = tiling or output_tiling(gpu, kernel, units)
    under = (tiling.tiles < units) & (np.asarray(kernel.shape[3]) == 1)
    if not np.any(under):
        return 1
    blocks = np.floor(np.asarray(kernel.shape[2], dtype=float) / GEMM_K_BLOCK)  # k's main-loop steps
    most = np.where(under, np.clip(np.minimum(np.floor(units / tiling.tiles), blocks), 1.0, SPLIT_K_MAX), 1.0)
    one, deepest = (kernel.flops / achievable_flops(gpu, kernel, units, s, tiling) for s in (1.0, most))
    a = (one - deepest) * most / np.maximum(most - 1, 1)  # 0 where no split fits (most 1)
    c = one - a
    m, n = kernel.shape[:2]
    b, d = kernel.bytes / _bandwidth(gpu, kernel), 8 * m * n / _bandwidth(gpu, kernel)
    meet = ((c - b) + np.sqrt((b - c) ** 2 + 4 * a * d)) / (2 * d)
    best, fastest = np.ones_like(most), np.maximum(one, b)
    for s in (np.floor(meet), np.ceil(meet)):
        s = np.clip(s, 1.0, most)
        time = np.maximum(a / s + c, b + np.where(s > 1, d * s, 0.0))
        best, fastest = np.where(time < fastest, s, best), np.minimum(time, fastest)
    return best


def _split_kv(gpu: GPU, kernel: Kernel, units: ArrayLike | None, tiling: Tiling) -> np.ndarray:
    """The split of a split-KV kernel's keys that makes it fastest, of :data:`KV_SPLITS`, where its
    ``t`` tiles do not fill one wave of the ``U`` SMs (FlashAttention's heuristic splits only then, as
    split-K does; 1 elsewhere, and for its stacked kernels that are not split-KV): each candidate
    priced whole, waves of ``t s`` tiles of whole key blocks, its partial outputs read back
    (:func:`_slice_depth`, :func:`_partial_sum_bytes`). The candidates do not depend on the context
    and only shrink as the tiles grow, so the time, their minimum of times each non-decreasing in the
    context and the queries, is non-decreasing too: more context never runs faster."""
    u = gpu.compute_units.value if units is None else np.asarray(units, dtype=float)
    shape = np.broadcast_shapes(np.shape(u), *(np.shape(getattr(kernel, f)) for f in STACKED))
    under = np.broadcast_to((np.asarray(kernel.kv_block) > 0) & (tiling.tiles < u), shape)
    best = np.ones(shape)
    if not under.any():
        return best

    def rows(value: ArrayLike) -> np.ndarray:
        return np.broadcast_to(value, shape)[under]

    sub = dataclasses.replace(kernel, **{f: rows(getattr(kernel, f)) for f in STACKED})
    subtiling = Tiling(rows(tiling.tiles), rows(tiling.rows), rows(tiling.cols), rows(tiling.fill))
    splits = np.reshape(KV_SPLITS, (-1, 1))
    compute, memory, *_ = _phases(gpu, sub, None if units is None else rows(u), splits, subtiling)
    best[under] = splits.ravel()[np.argmin(np.maximum(compute, memory), axis=0)]
    return best


def gemm_summary(gpu: GPU, m: int, n: int, k: int, dtype: str, launch: bool = True) -> dict[str, object]:
    """One GEMM on ``gpu`` as plain values: its roofline time (with its launch unless ``launch`` is
    off: back-to-back kernels, as GEMM benchmarks time them), achieved TFLOP/s, bound, arithmetic
    intensity, split-K factor, and the output tile it runs at (:func:`output_tiling`), with the
    tiles and waves of them (``commodel roofline gemm``)."""
    kernel = gemm(m, n, k, dtype)
    result = kernel_time(gpu, kernel, launch=launch)
    tiling = result.tiling
    tiles = float(tiling.tiles) * int(result.split_k)
    return {
        "m": m, "n": n, "k": k, "dtype": dtype, "time_s": float(result.time_s),
        "tflops": float(result.achieved_flops) / 1e12, "bound": str(result.bound),
        "intensity_flop_per_byte": float(kernel.intensity), "split_k": int(result.split_k),
        "tile": f"{int(tiling.rows)}x{int(tiling.cols)}", "tiles": int(tiles),
        "waves": int(np.ceil(tiles / gpu.compute_units.value)),
    }  # fmt: skip
