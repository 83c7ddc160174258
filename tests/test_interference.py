"""Kernels sharing a GPU slow each other (issue 50): the memory-latency mechanism, the pair of a GEMM
and a collective under each strategy, and ``commodel overlap``."""

import json

import pandas as pd
import pytest
from conftest import picker, run_cli
from hypothesis import given, settings
from hypothesis import strategies as st

from commodel.compute.kernels import gemm
from commodel.compute.power import shared_clock
from commodel.compute.roofline import hbm_bytes
from commodel.hardware import default_db
from commodel.overlap.interference import corun, memory_of, slowdowns, stretch
from commodel.overlap.pair import PAIR_STRATEGIES, Pair, pair_times
from commodel.pricing.evaluator import evaluator
from commodel.pricing.job import make_job
from commodel.pricing.overlap import OverlapJob, price_overlap

loads = st.floats(0.0, 1.0)
times = st.floats(1e-6, 1.0)

#: A GPU's HBM as the records state it, without the power term (no limit binds).
HBM = memory_of(default_db().gpu("h100-sxm"))._replace(power=0.0)
CEILING = HBM.ceiling


@settings(max_examples=200, deadline=None)
@given(loads, loads, loads, st.floats(0.0, 0.5))
def test_more_load_beside_a_side_never_speeds_it(stall, own, other, more):
    assert stretch(stall, own, other, CEILING) >= 1.0
    assert stretch(stall, own, other + more, CEILING) >= stretch(stall, own, other, CEILING) - 1e-12


def test_the_latency_rise_stops_at_the_ceiling_and_bandwidth_is_shared_beyond_a_full_load():
    compute, comm = slowdowns(0.0, 0.3, HBM)
    assert compute == 1.0  # a kernel that moves no HBM bytes waits on none
    assert comm == pytest.approx(1.0)  # a collective beside it: nothing queues before it
    _, latency_bound = slowdowns(0.7, 0.01, HBM)  # NVIDIA/nccl#1433: a GEMM slows send/recv "up to 2x"
    assert latency_bound == pytest.approx((1 - 0.01 * CEILING / 0.71) / (1 - CEILING))
    saturating, _ = slowdowns(1.0, 0.5, HBM)
    assert saturating == pytest.approx(1.5)  # a copy at full bandwidth gets its share of it


@settings(max_examples=300, deadline=None)
@given(loads, loads, loads, st.floats(1.0, 4.0))
def test_a_faster_hbm_never_slows_either_side(stall, own, other, faster):
    """The same two kernels on an HBM ``faster`` times as fast load it ``1 / faster`` as much each:
    neither side's stretch rises (capping the own load alone at the ceiling made it rise wherever
    the sum stayed above it)."""
    for pair in ((own, other), (other, own)):
        scaled = [load / faster for load in pair]
        assert stretch(stall / faster, *scaled, CEILING) <= stretch(stall, *pair, CEILING) + 1e-12  # compute
        assert stretch(1.0, *scaled, CEILING) <= stretch(1.0, *pair, CEILING) + 1e-12  # a collective


def test_h200_never_runs_a_step_slower_than_h100():
    """H200 is H100's die with 1.43x the HBM bandwidth and 1.76x its capacity: over 1,200 random
    jobs (dense and MoE models, every overlap strategy, ZeRO 0-3) no step takes longer on it.
    Qwen3-30B-A3B under ZeRO-3 on 64 GPUs, occupancy-shaped, ran 5.4% slower on H200 bandwidth (and
    20 of 962 jobs up to 5%) while the interference model capped each side's own HBM load alone."""
    pick = picker(7, 1200)
    frame = pd.DataFrame({
        "model": pick("llama3-8b", "llama3-70b", "mixtral-8x7b", "qwen3-30b-a3b"),
        "gpus": pick(8, 16, 64, 256), "tp": pick(1, 2, 4, 8), "pp": pick(1, 2, 4),
        "global_batch": pick(256, 1024), "micro_batch": pick(1, 2), "recompute": pick("auto", "full", "selective"),
        "sequence_parallel": pick(True, False), "dtype": pick("bf16", "fp8"), "zero": pick(0, 1, 3),
        "overlap": pick("serial", "sm-partition", "occupancy-shaped", "ideal"),
    }).infer_objects()  # fmt: skip
    h100 = evaluator("training")(frame.assign(system="dgx-h100"))
    h200 = evaluator("training")(frame.assign(system="hgx-h200"))
    both = h100.valid & h200.valid
    assert both.sum() > 500 and (h100.valid <= h200.valid).all()  # what fits on H100 fits on H200
    assert (h200.step_time_s[both] <= h100.step_time_s[both] * (1 + 1e-12)).all()


@settings(max_examples=200, deadline=None)
@given(loads, loads, st.floats(0.0, 0.5), st.floats(0.0, 0.5))
def test_the_collectives_hbm_power_slows_only_the_computes_clock_bound_part(compute, comm, power, more):
    """A board at its limit: the watts the collective's traffic draws come out of the compute's clock,
    more with more watts, never out of the collective's own pace, and not at all with none."""
    plain, comm_plain = slowdowns(compute, comm, HBM)
    heated, comm_heated = slowdowns(compute, comm, HBM._replace(power=power))
    hotter, _ = slowdowns(compute, comm, HBM._replace(power=power + more))
    assert heated >= plain - 1e-12 and hotter >= heated - 1e-12
    assert comm_heated == comm_plain
    clock = shared_clock(power, comm)
    assert heated == pytest.approx((1 - compute) / clock + (plain - (1 - compute)))
    assert float(shared_clock(0.0, comm)) == 1.0


@settings(max_examples=200, deadline=None)
@given(times, times, st.floats(0.0, 1.0), st.floats(1.0, 2.5), st.floats(1.0, 2.5))
def test_two_sides_together_take_at_least_the_longer_and_at_most_both_slowed_end_to_end(C, M, d, fc, fm):
    compute_end, comm_end = corun(C, M, d * C, fc, fm)
    total = max(compute_end, comm_end)
    assert total >= max(C, d * C + M) * (1 - 1e-12)
    assert total <= d * C + C * fc + M * fm + 1e-12
    assert compute_end >= C - 1e-12 and comm_end - d * C >= M - 1e-12


@settings(max_examples=200, deadline=None)
@given(times, times, st.floats(1.0, 2.5), st.floats(1.0, 2.5), st.floats(0.0, 1.0), st.floats(0.0, 1.0))
def test_a_collective_started_earlier_never_ends_later_while_the_slowdowns_are_moderate(C, M, fc, fm, d1, d2):
    """Priority starts the collective at once instead of behind the running kernel: never later, as
    long as waiting does not let it run alone at full speed for less than the contended time it
    saves (``f_c (1 - 1 / f_m) <= 1``, true of every pair of loads at most the ceiling apart)."""
    if fc * (1 - 1 / fm) > 1:
        return
    early, late = sorted((d1 * C, d2 * C))
    assert corun(C, M, early, fc, fm)[1] <= corun(C, M, late, fc, fm)[1] + 1e-12


def _pair(**changes):
    base = dict(compute_s=1e-3, partitioned_s=1.2e-3, waves=8.0, compute_load=0.2, comm_s=6e-4,
                comm_load=0.3, memory=HBM, chunk_s=1.6e-4, chunks=8)  # fmt: skip
    return Pair(**(base | changes))


@pytest.mark.parametrize("strategy", PAIR_STRATEGIES)
def test_more_sms_or_hbm_taken_by_the_collective_never_speeds_the_kernel(strategy):
    base = pair_times(strategy, _pair()).compute
    assert pair_times(strategy, _pair(partitioned_s=1.5e-3)).compute >= base - 1e-15
    assert pair_times(strategy, _pair(comm_load=0.5)).compute >= base - 1e-15


@pytest.mark.parametrize("strategy", [s for s in PAIR_STRATEGIES if s not in ("fused", "fused-copy-engine")])
def test_every_strategy_takes_at_least_the_longer_side(strategy):
    ends = pair_times(strategy, _pair())
    assert ends.total >= max(1e-3, 6e-4)


def test_a_gemm_loads_hbm_with_each_waves_operand_panels():
    """8192^3 BF16 on H100: 16 waves of 132 tiles read 1.26 GB, three times the operands read once;
    a GEMM of one wave reads each operand once."""
    h100 = default_db().gpu("h100-sxm")
    big, one_wave = gemm(8192, 8192, 8192), gemm(512, 4096, 14336)
    assert float(hbm_bytes(h100, big)) == pytest.approx(1.2557e9, rel=1e-3)
    assert float(hbm_bytes(h100, one_wave)) == pytest.approx(float(one_wave.bytes))
    assert float(hbm_bytes(h100, big, units=66)) > float(hbm_bytes(h100, big))  # fewer SMs, smaller waves


def _priced(**values):
    return price_overlap(make_job(OverlapJob, **values))


def test_async_tensor_parallelism_loses_to_gemm_then_reduce_scatter_at_small_m_and_closes_in_as_m_grows():
    """meta-pytorch/kraken#19 on 8 H100: decomposed GEMM + reduce-scatter takes 4.6x the sequential
    at M = 512 and 1.8x at M = 2048: each of 8 cut GEMMs reads the whole weight, and each step pays its
    host-issued copy; the sequential pair stays faster."""
    ratio = {}
    for m in (512, 2048):
        job = dict(m=m, n=4096, k=14336, op="reducescatter", size_bytes=m * 4096 * 2)
        ratio[m] = (
            _priced(**job, strategy="decomposed")["time_s"] / _priced(**job, strategy="serial")["time_s"]
        )
    assert ratio[512] > 3 and 1 < ratio[2048] < ratio[512]


def test_the_collective_slows_more_beside_a_gemm_that_loads_hbm_more():
    """The same all-gather beside a square GEMM (compute-bound, a fifth of HBM) and beside an
    elementwise pass (all of it), each longer than the collective: the pass slows it more, and is
    slowed more itself."""
    square = _priced(m=8192, n=8192, k=8192, size_bytes=2**26, strategy="copy-engine")
    stream = _priced(m=8192, n=65536, kernel="elementwise", size_bytes=2**26, strategy="copy-engine")
    assert stream["comm_slowdown"] > square["comm_slowdown"] > 1
    assert stream["compute_slowdown"] > square["compute_slowdown"] > 1


def test_the_overlap_evaluator_prices_a_table_as_the_cli_does():
    rows = pd.DataFrame([{"strategy": s, "m": 4096} for s in ("serial", "fused", "decomposed")])
    table = evaluator("overlap")(rows)
    for row in table.itertuples():
        assert row.time_s == pytest.approx(_priced(strategy=row.strategy, m=4096)["time_s"])
    serial = table.iloc[0]
    assert serial.time_s == pytest.approx(serial.compute_s + serial.comm_s) and serial.gain_share == 0


def test_an_nvl72_racks_collective_pairs_with_a_gemm_and_no_kernel_is_shorter_than_a_launch():
    """An overlap runs within a scale-up domain, which on GB200 NVL72 spans 18 trays of 4: an all-reduce
    over the rack's 72 GPUs (NVLS there) beside a GEMM, where one tray was the limit. A 1x1x1 GEMM takes
    a launch, not the nanoseconds its FLOPs would, as in training."""
    rack = _priced(system="gb200-nvl72", gpus=72, op="allreduce", size_bytes=2**30, strategy="serial")
    tray = _priced(system="gb200-nvl72", gpus=4, op="allreduce", size_bytes=2**30, strategy="serial")
    assert rack["comm_s"] > tray["comm_s"] > 0 and rack["compute_s"] == tray["compute_s"]
    tiny = _priced(m=1, n=1, k=1)
    assert tiny["compute_s"] == pytest.approx(3e-6)  # h100-sxm's launch overhead


def test_in_network_is_measured_against_the_same_serial_run_as_every_strategy():
    """NCCL picks a ring for a 256 MiB all-gather on 8 H100s, faster than the NVLS that in-network
    forces: in-network's pair then takes longer than the serial run (the GEMM, then NCCL's choice), so
    it is slower than serial and its gain is negative; it was measured against its own NVLS serial run
    and shown as a gain. An all-reduce, where NCCL's choice is NVLS, has one serial run either way."""
    serial, nvls = (_priced(strategy=s, size_bytes=2**28) for s in ("serial", "in-network"))
    assert nvls["comm_s"] > serial["comm_s"] and nvls["serial_s"] == pytest.approx(serial["time_s"])
    assert nvls["time_s"] > serial["time_s"] and nvls["gain_share"] < 0
    serial, nvls = (_priced(strategy=s, op="allreduce", size_bytes=2**30) for s in ("serial", "in-network"))
    assert nvls["comm_s"] == pytest.approx(serial["comm_s"]) and nvls["serial_s"] == pytest.approx(
        serial["serial_s"]
    )


def test_commodel_overlap_prints_every_strategy_and_json(capsys, monkeypatch):
    code, out = run_cli(["overlap", "--system", "dgx-a100", "--m", "4096"], capsys, monkeypatch)
    assert code == 0
    lines = out.out.splitlines()
    assert all(any(line.startswith(s) for line in lines) for s in PAIR_STRATEGIES)
    assert "in-network         cannot run" in out.out  # A100's switch does not reduce
    code, out = run_cli(["overlap", "--kernel", "elementwise", "--n", "1024"], capsys, monkeypatch)
    assert code == 0 and out.out.startswith("elementwise pass over 8192x1024 bf16 beside allgather")
    assert all(f"{s:18} cannot run" in out.out for s in ("fused", "fused-copy-engine", "decomposed"))
    code, out = run_cli(["overlap", "--strategy", "fused", "--size", "96MiB", "--json"], capsys, monkeypatch)
    record = json.loads(out.out)
    assert code == 0 and record["size_bytes"] == 96 * 2**20 and list(record["strategies"]) == ["fused"]


@pytest.mark.parametrize(
    "args, message",
    [
        (["--strategy", "fusd"], "did you mean 'fused'"),
        (["--size", "1MiB,2MiB"], "one size"),
        (["--gpus", "16"], "within one scale-up domain: dgx-h100's has 8 GPUs"),
        (["--system", "gb200-nvl72", "--gpus", "144"], "gb200-nvl72's has 72 GPUs"),
        (["--op", "alltoall"], "collective"),
        (["--kernel", "elementwise", "--strategy", "decomposed"], "which an elementwise pass does not have"),
    ],
)
def test_bad_overlap_input_is_one_clear_line(args, message, capsys, monkeypatch):
    code, out = run_cli(["overlap", *args], capsys, monkeypatch)
    assert code == 2 and message in out.err and "Traceback" not in out.err


def test_validate_prints_the_overlap_command_that_prices_each_row(capsys, monkeypatch):
    code, out = run_cli(["validate", "--row", "flux-h800-ag-gemm", "--json"], capsys, monkeypatch)
    detail = json.loads(out.out)
    assert code == 0 and detail["command"].startswith("commodel overlap --system hgx-h800")
    argv = [*detail["command"].split()[1:], "--json"]
    code, out = run_cli(argv, capsys, monkeypatch)
    priced = json.loads(out.out)["strategies"]["fused"]["time_s"]
    assert 1e3 * priced == pytest.approx(detail["model"])


def test_the_contention_constants_are_the_gpus_and_an_overlay_moves_them(tmp_path, monkeypatch):
    """HBM bytes per wire byte and the load ceiling are a GPU record's (``memory_contention``), with
    stated ranges that ``--uncertainty`` draws and ``commodel calibrate`` fits within; an overlay
    that makes each wire byte cost more HBM slows the GEMM beside the collective."""
    from commodel.hardware.loader import OVERLAY_ENV
    from commodel.validate.bands import hardware_uncertainty

    found = {u.path: u for u in hardware_uncertainty(["dgx-a100"]) if u.path[0] == "memory_contention"}
    assert found[("memory_contention", "hbm_per_wire_byte")].low == pytest.approx(1 / 1.5)
    assert found[("memory_contention", "load_ceiling")].high == pytest.approx(0.8 / 0.6)
    job = make_job(OverlapJob, system="dgx-a100", m=5120, n=5120, k=5120, strategy="sm-partition",
                   size_bytes=2**28, collective_first=True)  # fmt: skip
    base = price_overlap(job)["compute_slowdown"]
    (tmp_path / "gpus").mkdir()
    (tmp_path / "gpus" / "a100-sxm-80gb.toml").write_text(
        '[memory_contention]\nhbm_per_wire_byte = { value = 1.0, range = [1.0, 1.5], source = "test" }\n'
    )
    monkeypatch.setenv(OVERLAY_ENV, str(tmp_path))
    assert price_overlap(job)["compute_slowdown"] < base


@pytest.mark.parametrize("strategy", ["serial", "ideal", "sm-partition", "occupancy-shaped", "copy-engine"])
def test_a_collective_runs_on_while_the_gpu_waits_for_the_host(strategy):
    """A window's idle time (the GPU waits for the host to issue the next kernel) carries what it can of
    a collective on its own stream, undisturbed; compute hides the rest (serial: none of it)."""
    from commodel.overlap import Window, exposed

    compute, idle, comm = 1e-3, 4e-4, 1.5e-3
    busy = Window(compute, 1.2e-3, 3e-4, 1e-4)
    waiting = Window(compute, 1.2e-3, 3e-4, 1e-4, idle)
    kw = {"memory": HBM, "traffic_Bps": 4e11}
    alone = float(exposed(strategy, busy, comm, **kw))
    if strategy == "serial":
        assert float(exposed(strategy, waiting, comm, **kw)) == pytest.approx(alone)
    else:
        assert float(exposed(strategy, waiting, comm, **kw)) == pytest.approx(
            float(exposed(strategy, busy, comm - idle, **kw))
        )
        assert float(exposed(strategy, waiting, comm, **kw)) < alone
    assert float(exposed(strategy, waiting, 0.5 * idle, **kw)) == pytest.approx(
        0.5 * idle if strategy == "serial" else 0.0
    )
