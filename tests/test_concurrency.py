"""A GEMM beside a collective, block by block: residency, the arms' times, and the overlap study's
claims moving with the inputs that drive them."""

import numpy as np
import pytest

from commodel.compute.residency import Block, gemm_time, padded, resident_blocks, tiled_gemm
from commodel.compute.roofline import peak_flops
from commodel.errors import CommodelError
from commodel.hardware import default_db
from commodel.overlap import streams
from commodel.studies import overlap as study
from commodel.studies.base import study_spec

H100 = default_db().gpu("h100-sxm")


def test_residency_is_the_occupancy_calculators_minimum():
    sm = H100.multiprocessor
    block = Block(threads=128, shared_memory=24 * 1024, registers_per_thread=64)
    assert resident_blocks(sm, block) == 8  # registers: 65536 / (128 x 64)
    assert resident_blocks(sm, Block(128, 24 * 1024, 32)) == 9  # shared memory: 228 / 24
    assert resident_blocks(sm, Block(1024, 0, 16)) == 2  # threads: 2048 / 1024
    nccl = Block(544, 8 * 1024, 32)
    assert resident_blocks(sm, block, nccl) == 5  # (65536 - 544 x 32) / 8192
    for cap in (1, 3, 7):
        assert resident_blocks(sm, padded(sm, Block(128, 1024, 16), cap)) == cap


def test_a_gemm_never_beats_its_tensor_rate_and_gains_from_residency_until_latency_is_hidden():
    gemm = tiled_gemm(H100, 8192, 8192, 8192, (64, 64, 32), "fp16", 3, 128, 64)
    floor = 2 * 8192**3 / (peak_flops(H100, "fp16") * H100.efficiency("fp16"))
    times = np.array([float(gemm_time(H100, gemm, b)) for b in range(1, 9)])
    assert (times >= floor * (1 - 1e-9)).all()
    assert times[0] > 2 * times[-1]  # one block cannot hide a 500 ns load behind 3 x 44 ns of math
    shallow = tiled_gemm(H100, 8192, 8192, 8192, (64, 64, 32), "fp16", 1, 128, 64)
    assert float(gemm_time(H100, shallow, 2)) > float(gemm_time(H100, gemm, 2))  # fewer stages in flight


def test_a_gpu_without_multiprocessor_limits_is_a_clear_error():
    bare = H100.model_copy(update={"multiprocessor": None})
    with pytest.raises(CommodelError, match="multiprocessor"):
        gemm_time(bare, tiled_gemm(bare, 64, 64, 64, (64, 64, 32), "fp16", 1, 128, 64), 1)


def _table(**changes):
    return study.concurrency_table(study_spec("overlap").parameters | changes)


def test_best_reduction_follows_how_evenly_the_gemm_and_collective_split_the_time():
    base = _table()
    best = base.loc[base.shaped_vs_sequential_pct.idxmax()]
    ideal = 100 * min(best.comm_ms, best.sequential_ms - best.comm_ms) / best.sequential_ms
    assert best.shaped_vs_sequential_pct <= ideal + 1e-9  # shaping hides at most the shorter kernel
    hidden = np.minimum(base.comm_ms, base.sequential_ms - base.comm_ms) / base.sequential_ms
    assert (base.shaped_vs_sequential_pct <= 100 * hidden + 1e-9).all()
    # A 64th of the collective is far shorter than every GEMM: little left to hide anywhere (an eighth
    # would bring the A40's slow all-reduce closer to its GEMM, and its reduction up).
    smaller = _table(message="14MB")
    assert smaller.shaped_vs_sequential_pct.max() < base.shaped_vs_sequential_pct.max() / 2


def test_the_collectives_hbm_power_slows_the_gemm_beside_it_and_lowers_the_best_reduction(monkeypatch):
    """The board runs the GEMM at its power limit: the collective's HBM watts come out of its clock.
    The more a byte costs, the less the shaped arm gains; at no cost the clock stays whole."""
    import commodel.compute.power as power

    base = _table()
    assert (base.gemm_clock_beside_pct < 100).all() and (base.gemm_clock_beside_pct > 80).all()
    monkeypatch.setattr(power, "HBM_J_PER_BYTE", 2 * power.HBM_J_PER_BYTE)
    dearer = _table()
    assert (dearer.gemm_clock_beside_pct < base.gemm_clock_beside_pct).all()
    assert dearer.shaped_vs_sequential_pct.max() < base.shaped_vs_sequential_pct.max()
    monkeypatch.setattr(power, "HBM_J_PER_BYTE", 0.0)
    free = _table()
    assert (free.gemm_clock_beside_pct == 100).all()
    assert free.shaped_vs_sequential_pct.max() > base.shaped_vs_sequential_pct.max()


def test_shaped_beats_naive_on_nvidia_because_naive_blocks_dispatch_in_order(monkeypatch):
    nvidia = _table().query("system != 'frontier-node'")
    assert nvidia.shaped_vs_naive_pct.min() > 0
    monkeypatch.setitem(streams.DISPATCH, "nvidia", "interleaved")
    interleaved = _table().query("system != 'frontier-node'")
    assert interleaved.shaped_vs_naive_pct.max() < nvidia.shaped_vs_naive_pct.min()


def test_mi250x_shaping_loses_only_because_amd_already_interleaves_the_streams(monkeypatch):
    claim = study.claims(_table())[2]
    assert claim.model < 0
    monkeypatch.setitem(streams.DISPATCH, "amd", "in-order")
    assert study.claims(_table())[2].model > 10  # in order, naive streams would hold the collective back


def test_a_collective_cta_that_leaves_no_room_is_refused():
    with pytest.raises(CommodelError, match="cannot reside"):
        _table(collective_registers=120)  # 544 x 120 registers leave no GEMM block its 8192
