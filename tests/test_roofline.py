import numpy as np
import pytest

from commodel.compute import attention, elementwise, gemm, kernel_time
from commodel.compute.kernels import decode_attention
from commodel.compute.roofline import (
    GEMM_K_BLOCK,
    GEMM_TILE_OVERHEAD_K,
    KV_SPLITS,
    SPLIT_K_MAX,
    achievable_flops,
    output_tiling,
    split_k,
    tile_fill,
)
from commodel.errors import CommodelError
from commodel.hardware import default_db
from commodel.workloads.layer.timing import timed, timed_all

DB = default_db()
H100 = DB.gpu("h100-sxm")


def test_gemm_counts():
    k = gemm(4096, 2048, 1024, "bf16")
    assert k.flops == 2 * 4096 * 2048 * 1024
    assert k.bytes == (4096 * 1024 + 1024 * 2048 + 4096 * 2048) * 2
    assert k.tiles == (4096 / 128) * (2048 / 256)


def test_attention_counts():
    k = attention(2, 16, 1024, 128, causal=False)
    assert k.flops == 4 * 2 * 16 * 1024**2 * 128
    assert k.bytes == 4 * 2 * 16 * 1024 * 128 * 2
    assert k.exps == 2 * 16 * 1024**2  # one exponential per score
    # causal: the lower triangle of 8 x 8 blocks of 128 rows, diagonal blocks whole: 36 of 64
    causal = attention(2, 16, 1024, 128, causal=True)
    assert causal.flops == k.flops * 36 / 64 and causal.exps == k.exps * 36 / 64
    # a sliding window of w keys: the key blocks its band touches, whole (two for 128 or 129, three for 130)
    banded = [attention(2, 16, 1024, 128, causal=True, window=w).exps for w in (1, 128, 129, 130, 4096)]
    assert banded == [2 * 16 * 1024 * keys for keys in (128, 256, 256, 384, 1024 * 36 / 64)]


def test_softmax_bounds_attention_where_the_special_function_units_are_slow():
    """d = 64 halves the tensor FLOPs per exponential: on GB200 the softmax then binds, and Blackwell
    Ultra's doubled exponential rate (GB300) speeds the same kernel up."""
    db = default_db()
    kernel = attention(1, 64, 8192, 64, causal=True)
    gb200, gb300 = (kernel_time(db.gpu(g), kernel, launch=False) for g in ("gb200", "gb300"))
    mma_only = kernel.flops / (db.gpu("gb200").peak_flops["bf16"].value * db.gpu("gb200").efficiency("bf16"))
    assert float(gb200.compute_s) > 1.3 * float(mma_only)
    assert float(gb300.time_s) < 0.8 * float(gb200.time_s)


def test_large_gemm_is_compute_bound_near_calibrated_peak():
    r = kernel_time(H100, gemm(16384, 16384, 16384), launch=False)
    assert r.bound == "compute"
    ceiling = 989e12 * H100.efficiency("bf16")
    assert 0.9 * ceiling < r.achieved_flops <= ceiling


def test_skinny_gemm_and_elementwise_are_memory_bound():
    assert kernel_time(H100, gemm(8, 8192, 8192)).bound == "memory"
    r = kernel_time(H100, elementwise(2**28), launch=False)
    assert r.bound == "memory"
    assert r.time_s == pytest.approx(2**28 * 2 * 2 / (3.35e12 * H100.memory_efficiency.value))


def test_wave_quantization_one_extra_tile_costs_a_wave():
    # 132 tiles fill H100's 132 SMs in one wave; 133 tiles need two.
    one_wave = gemm(128 * 132, 256, 4096)
    spill = gemm(128 * 133, 256, 4096)
    t1 = kernel_time(H100, one_wave, launch=False).compute_s
    t2 = kernel_time(H100, spill, launch=False).compute_s
    assert t2 / t1 == pytest.approx(2.0)


def test_small_k_pays_tile_overhead():
    # Same tiles (same waves), different depth: the ratio is the depth efficiency k / (k + K0).
    shallow, deep = achievable_flops(H100, gemm(8192, 8192, [256, 8192]))
    k0 = GEMM_TILE_OVERHEAD_K
    assert shallow / deep == pytest.approx((256 / (256 + k0)) / (8192 / (8192 + k0)))


@pytest.mark.parametrize(
    ("gpu", "dtype", "speedup"), [("h100-sxm", "fp8", 2), ("gb200", "fp8", 2), ("gb200", "fp4", 4)]
)
def test_tile_overhead_is_a_time_so_faster_dtypes_pay_it_in_more_k(gpu, dtype, speedup):
    """A tile's prologue and epilogue take as long whatever its dtype; an FP8 (FP4) k loop covers 2x (4x)
    the k of a BF16 one in that time, so the same shallow GEMM loses more of its ceiling."""
    g, k0 = DB.gpu(gpu), GEMM_TILE_OVERHEAD_K * speedup  # (the datasheets' ratios, to 0.1%)
    shallow, deep = achievable_flops(g, gemm(8192, 8192, [256, 8192], dtype))
    assert shallow / deep == pytest.approx((256 / (256 + k0)) / (8192 / (8192 + k0)), rel=1e-3)
    bf16_shallow, bf16_deep = achievable_flops(g, gemm(8192, 8192, [256, 8192], "bf16"))
    assert shallow / deep < bf16_shallow / bf16_deep


def test_faster_gpu_is_never_slower():
    kernels = [gemm(4096, 4096, 4096), attention(4, 32, 4096, 128), elementwise(2**26)]
    faster = H100.model_copy(
        update={
            "peak_flops": {
                k: v.model_copy(update={"value": v.value * 2}) for k, v in H100.peak_flops.items()
            },
            "memory_bandwidth": H100.memory_bandwidth.model_copy(update={"value": 2 * 3.35e12}),
        }
    )
    for k in kernels:
        assert np.all(kernel_time(faster, k).time_s <= kernel_time(H100, k).time_s)


def test_missing_dtype_is_a_clear_error():
    with pytest.raises(CommodelError, match="no fp8 peak"):
        kernel_time(DB.gpu("a100-sxm-80gb"), gemm(1024, 1024, 1024, "fp8"))
    with pytest.raises(CommodelError, match="unknown dtype"):
        gemm(1, 1, 1, "bf61")
    with pytest.raises(CommodelError, match="m must be positive"):
        gemm(0, 1, 1)


def test_a_gemm_that_leaves_sms_idle_splits_its_k_loop_and_a_full_one_does_not():
    """40 output tiles on 132 SMs: cuBLAS cuts the k loop (split-K) to fill the wave; a GEMM of 132
    tiles or more keeps its wave quantization (split 1)."""
    decode_qkv = gemm(394, 2560, 8192, "fp8")  # 4 x 10 tiles
    assert 1 < float(split_k(H100, decode_qkv)) <= 132 // 40
    unsplit = kernel_time(H100, decode_qkv, launch=False).time_s
    whole = float(achievable_flops(H100, decode_qkv)) ** -1 * float(decode_qkv.flops)
    assert unsplit < 0.5 * whole
    assert unsplit >= float(decode_qkv.bytes) / (3.35e12 * H100.memory_efficiency.value)
    assert split_k(H100, gemm(128 * 132, 256, 4096)) == 1
    assert split_k(H100, gemm(394, 2560, 8192, batch=8)) == 1  # a batched launch keeps its tiles
    # a slice is at least one step of the main loop deep: k = 1 is never cut, k = 256 into at most 4
    assert split_k(H100, gemm(1, 1, 1)) == 1 and split_k(H100, gemm(128, 256, 256)) <= 256 // GEMM_K_BLOCK


def test_the_chosen_split_is_the_fastest_whole_one_within_a_wave():
    """The closed form's pick matches a brute-force search over every split that keeps one wave and
    slices at least one main-loop step deep, for shapes from memory-bound to compute-bound."""
    rng = np.random.default_rng(3)
    m, n, k = (2.0 ** rng.uniform(lo, hi, 400) for lo, hi in ((5, 11), (7, 12), (9, 15)))
    kernel = gemm(np.round(m), np.round(n), np.round(k), "bf16")
    chosen = kernel_time(H100, kernel, launch=False).time_s
    units = H100.compute_units.value
    best = np.full(m.shape, np.inf)
    for s in range(1, SPLIT_K_MAX + 1):
        fits = (kernel.tiles * s <= units) & (s * GEMM_K_BLOCK <= kernel.shape[2])
        compute = kernel.flops / achievable_flops(H100, kernel, None, s)
        extra = 8 * s * kernel.shape[0] * kernel.shape[1] if s > 1 else 0.0
        memory = (kernel.bytes + extra) / (3.35e12 * H100.memory_efficiency.value)
        best = np.where(fits | (s == 1), np.minimum(best, np.maximum(compute, memory)), best)
    assert np.allclose(chosen, best, rtol=1e-9)
    assert np.all(kernel.flops / chosen <= 989e12 * H100.efficiency("bf16") * (1 + 1e-9))


def test_a_gemm_library_runs_the_tile_that_fills_the_waves():
    """AMD's MAF shapes are one tile per CU of 304 in hipBLASLt's tiles: 4096 x 3648 FP8 in 16 x 19
    tiles of 256 x 192 (CUTLASS's 128 x 256 alone would need 480 tiles, two waves with a fifth of the
    CUs idle in the second). Taking the library's tiles away lowers the rate; on NVIDIA (no list) the
    tile stays 128 x 256."""
    mi300x = DB.gpu("mi300x")
    fp8 = gemm(4096, 3648, 32896, "fp8")
    tiling = output_tiling(mi300x, fp8)
    assert (float(tiling.rows), float(tiling.cols), float(tiling.tiles)) == (256, 192, 304)
    one_tile = mi300x.model_copy(update={"gemm_tiles": None})
    assert float(output_tiling(one_tile, fp8).tiles) == 480
    with_tiles, without = (float(achievable_flops(g, fp8)) for g in (mi300x, one_tile))
    assert without < 0.85 * with_tiles
    assert with_tiles <= mi300x.peak_flops["fp8"].value * mi300x.efficiency("fp8")
    assert (float(output_tiling(H100, fp8).rows), float(output_tiling(H100, fp8).cols)) == (128, 256)
    # vectorized over shapes and SM counts: each element its own tile
    many = output_tiling(
        mi300x, gemm(np.array([4096, 4096, 1]), np.array([3648, 4864, 8192]), 4096), units=304
    )
    assert many.tiles.tolist() == [304, 304, 32]


def test_the_padding_of_a_listed_tile_is_charged_and_a_short_side_is_not():
    """A record that lists its library's tiles pays for the padding of the tile it runs: 8192 rows in
    tiles of 224 are 37 tiles, 8,288 rows (0.988 filled), two waves of 304 CUs as 256-row tiles would
    take, so the 224 x 256 tile runs at 0.962 of the peak's wave share, not 1 (and not the 0.842 of
    256 x 256). A side shorter than every listed tile (decode's rows) is not charged; one at least as
    long as the shortest is, whichever tile runs it."""
    mi300x = DB.gpu("mi300x")
    square = gemm(8192, 4096, 4096)
    tiling = output_tiling(mi300x, square)
    assert (float(tiling.rows), float(tiling.cols), float(tiling.tiles)) == (224, 256, 592)
    assert float(tiling.fill) == pytest.approx(8192 / 8288)
    peak = mi300x.peak_flops["bf16"].value * mi300x.efficiency("bf16")
    share = float(achievable_flops(mi300x, square)) / peak
    depth = 4096 / (4096 + GEMM_TILE_OVERHEAD_K)
    assert share == pytest.approx(592 * 8192 / 8288 / 608 * depth)
    assert float(tile_fill(100, 8192, 256, 128, (128, 128))) == 1.0  # decode: narrower tiles run it
    assert float(tile_fill(200, 8192, 256, 128, (128, 128))) == pytest.approx(200 / 256)
    # a record without tiles runs CUTLASS's 128 x 256 and pays its padding as well (200 rows in two)
    assert float(output_tiling(H100, gemm(200, 8192, 4096)).fill) == pytest.approx(200 / 256)
    assert float(output_tiling(H100, gemm(100, 8192, 4096)).fill) == 1.0


@pytest.mark.parametrize("gpu", ["h100-sxm", "a100-sxm-80gb", "b200-sxm", "gb200", "mi300x"])
def test_no_gemm_is_faster_with_more_rows_or_columns(gpu):
    """Over 2,000 random GEMMs a GPU runs: one more row or column, or 64 more, never takes less time
    (with the stand-in's padded tiles counted as work, 289 of 3,000 got faster with 64 more columns,
    by up to 24%: 9823 x 486 x 13113 FP8 on B200 ran 24% faster as 9823 x 550)."""
    rng = np.random.default_rng(5)
    m, n, k = (rng.integers(1, 20000, 2000).astype(float) for _ in range(3))
    record = DB.gpu(gpu)
    dtype = "fp8" if "fp8" in record.peak_flops else "bf16"
    base = kernel_time(record, gemm(m, n, k, dtype), launch=False).time_s
    for step in (1, 64):
        for more in (gemm(m + step, n, k, dtype), gemm(m, n + step, k, dtype)):
            assert (kernel_time(record, more, launch=False).time_s >= base * (1 - 1e-12)).all()


@pytest.mark.parametrize("gpu", ["h100-sxm", "a100-sxm-80gb", "b200-sxm", "mi300x"])
def test_no_decode_attention_is_faster_with_more_context_or_queries(gpu):
    """A decode step over a longer context, or for more queries, never takes less time, for GQA and
    MLA caches in 16 and 8 bits. (Tiles once counted one per 256 keys, each the whole context deep:
    one MLA query over 257 keys took 46% less time than over 256.)"""
    record = DB.gpu(gpu)
    rng = np.random.default_rng(11)
    c, q = rng.integers(1, 40000, 3000).astype(float), rng.integers(1, 300, 3000).astype(float)
    shapes = [(16.0, 512.0, 2 * 128.0, 1.0), (128.0, 2176.0, 576.0, 2.0), (64.0, 512.0, 8 * 256.0, 8.0)]
    for heads, flops, cached, groups in shapes:
        for kv in ("bf16", "fp8") if "fp8" in record.peak_flops else ("bf16",):
            times = [
                kernel_time(record, decode_attention(qs, heads, cs, flops, cached, kv, None, groups)).time_s
                for qs, cs in ((q, c), (q, c + 1), (q, c + 128), (q + 1, c))
            ]
            for more in times[1:]:
                assert (more >= times[0] * (1 - 1e-12)).all()


@pytest.mark.parametrize("gpu", ["h100-sxm", "b200-sxm", "mi300x"])
def test_no_flash_attention_is_faster_with_a_longer_sequence_or_more_heads(gpu):
    """Causal, full and sliding-window flash attention over 2,000 random shapes: one more query, 128
    more, or one more head never take less time. (A last query block of one row once counted as a
    whole tile of work, its softmax spread over SMs no tile ran on: 129 queries took 37% less time
    than 128 on H100.)"""
    record = DB.gpu(gpu)
    rng = np.random.default_rng(12)
    b, h, s = (rng.integers(1, hi, 2000).astype(float) for hi in (8, 64, 20000))
    for causal, window in ((True, None), (False, None), (True, 128)):
        times = [
            kernel_time(record, attention(bs, hs, ss, 128, "bf16", causal, window=window)).time_s
            for bs, hs, ss in ((b, h, s), (b, h, s + 1), (b, h, s + 128), (b, h + 1, s))
        ]
        for more in times[1:]:
            assert (more >= times[0] * (1 - 1e-12)).all()


def test_a_decode_step_splits_its_keys_where_its_queries_leave_sms_idle():
    """One MLA query of 128 heads over 8,192 keys is two CTAs on 132 SMs: the keys are cut into
    splits (FlashDecoding), the fastest of the candidates, and the step runs at least 10x faster than
    unsplit; 256 queries fill the GPU and run unsplit. The partial outputs are read back."""
    one = decode_attention(1, 128, 8192, 2176, 576, "bf16", None, 2)
    result = kernel_time(H100, one, launch=False)
    assert float(result.split_k) in KV_SPLITS and float(result.split_k) >= 32
    unsplit = float(one.flops / achievable_flops(H100, one, None, 1.0))
    assert float(result.time_s) < unsplit / 10
    assert float(result.traffic) > float(one.bytes)
    full = kernel_time(H100, decode_attention(256, 128, 8192, 2176, 576, "bf16", None, 2))
    assert float(full.split_k) == 1 and float(full.traffic) == 256 * 8192 * 576 * 2


def test_a_batch_of_gemms_splits_only_its_single_ones_row_by_row():
    """Split-K is a property of each GEMM: rows of one call that run a grouped launch (batch > 1) keep
    one slice without stopping the single GEMMs beside them from splitting."""
    single = kernel_time(H100, gemm(512, 512, 16384, "bf16"), launch=False)
    assert single.split_k > 1
    both = kernel_time(H100, gemm(512, 512, 16384, "bf16", batch=np.array([1.0, 4.0])), launch=False)
    assert both.split_k[0] == single.split_k and both.split_k[1] == 1
    assert both.time_s[0] == single.time_s


@pytest.mark.parametrize("units", [None, np.array([132.0, 100.0, 66.0])])
def test_kernels_timed_together_take_each_ones_time_alone(units):
    """:func:`timed_all` prices kernels of one kind in one roofline call: every kernel gets exactly the
    numbers it gets alone, across GEMMs (single, grouped, weight-only), attention and memory-bound
    passes, decode attention split or not beside prefill attention, with arrays of rows and scalars
    mixed."""
    rows = np.array([256.0, 4096.0, 16384.0])
    kernels = [
        gemm(rows, 8192, 8192, "bf16"),
        gemm(512, 512, 16384, "bf16"),
        gemm(rows, 1024, 2048, "bf16", batch=8),
        gemm(rows, 2880, 2880, "w4a16"),
        gemm(rows, 4096, 4096, "fp8"),
        attention(1, 64, rows, 128),
        decode_attention(rows / 64, 128, 8192, 2176, 576, "bf16", None, 2),
        decode_attention(1, 16, rows, 512, 256, "bf16"),
        elementwise(rows * 8192, "bf16", 1, 1),
        elementwise(1e6, "bf16", 2, 1),
    ]
    together = timed_all(H100, kernels, units)
    for kernel, joint in zip(kernels, together, strict=True):
        for a, b in zip(timed(H100, kernel, units), joint, strict=True):
            np.testing.assert_array_equal(np.broadcast_to(a, np.shape(b)), b)
