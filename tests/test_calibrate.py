"""commodel calibrate: read nccl-tests logs, recover known constants, write an overlay that applies."""

import dataclasses

import numpy as np
import pandas as pd
import pytest

from commodel.calibrate.collectives import calibrate
from commodel.calibrate.nccl_tests import read
from commodel.cli import main
from commodel.comm.calls import run
from commodel.comm.fabric import fabric_of
from commodel.errors import CommodelError
from commodel.hardware import cluster
from commodel.hardware.loader import OVERLAY_ENV

HEADER = [
    "# nccl-tests version 2.13.10 nccl-headers=22304 nccl-library=22304",
    "# Collective test starting: {binary}_perf",
    "# nThread 1 nGpus 1 minBytes 8 maxBytes 8589934592 step: 2(factor) warmup iters: 5 iters: 20",
]
COLUMNS = [
    "#                                                        out-of-place                       in-place",
    "#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw #wrong",
    "#        (B)    (elements)                               (us)  (GB/s)  (GB/s)            (us)  (GB/s)  (GB/s)",
]


def write_log(
    path, frame, binary="all_reduce", ranks=8, hosts=1, extra=(), root=True, device="NVIDIA H100 80GB HBM3"
):
    """nccl-tests output for a model's result frame (the format all_reduce_perf prints)."""
    lines = [h.format(binary=binary) for h in HEADER] + list(extra)
    per_host = ranks // hosts
    lines += [
        f"#  Rank {r:2d} Group  0 Pid {1000 + r:6d} on {'node-' + str(r // per_host):>8} device {r % per_host:2d} "
        f"[0x18] {device}"
        for r in range(ranks)
    ]
    lines += COLUMNS if root else [c.replace("    root", "") for c in COLUMNS]
    for row in frame.itertuples():
        t = row.time_s * 1e6
        cells = f"{t:8.2f} {row.algbw_GBps:7.2f} {row.busbw_GBps:7.2f}      0"
        lines.append(
            f"{row.size_bytes:>12} {row.size_bytes // 4:>13}     float     sum {'-1' if root else ''} {cells} {cells}"
        )
    lines += ["# Out of bounds values : 0 OK", "# Avg bus bandwidth    : 123.4", "#"]
    path.write_text("\n".join(lines) + "\n")
    return path


def calibrate_argv(log, output, system="dgx-h100"):
    """``commodel calibrate nccl-tests LOG --system SYSTEM -o OUTPUT`` as sys.argv."""
    return ["commodel", "calibrate", "nccl-tests", str(log), "--system", system, "-o", str(output)]


@pytest.fixture
def truth():
    """A DGX H100 whose NVLink delivers 85% (not 80%) and whose NVLS channels move 20.5 GB/s each
    (not 19.3)."""
    c = cluster("dgx-h100")
    fab = fabric_of(c)
    return c, dataclasses.replace(fab, link_Bps=fab.link_line_Bps * 0.85, nvls_Bps=16 * 20.5e9)


SIZES = [2**k for k in range(3, 34, 2)]


def test_reads_both_nccl_tests_formats(tmp_path):
    frame = run("allreduce", cluster("dgx-h100", 2), SIZES, 16)
    new = read(write_log(tmp_path / "a.log", frame, ranks=16, hosts=2))
    old = read(write_log(tmp_path / "all_reduce_perf.log", frame, ranks=16, hosts=2, root=False))
    assert (new.op, new.ranks, new.nodes, len(new.rows)) == ("allreduce", 16, 2, len(SIZES))
    assert old.op == "allreduce" and old.rows.time_s.tolist() == pytest.approx(
        new.rows.time_s.tolist(), rel=1e-3
    )
    # the oldest print an ``error`` column, the largest relative error, where newer ones count #wrong
    path = tmp_path / "all_reduce_perf.log"
    lines = [
        line.replace("#wrong", " error") if line.startswith("#") else line.replace("      0", "  2e-07")
        for line in path.read_text().splitlines()
    ]
    path.write_text("\n".join(lines) + "\n")
    assert "2e-07" in path.read_text() and len(read(path).rows) == len(SIZES)


def test_a_run_without_checking_prints_na_for_wrong_and_reads(tmp_path):
    """nccl-tests run with ``-c 0`` prints ``N/A`` for ``#wrong``: the run reads as the checked one; a
    line whose algbw is not its size over its time is an edited log (tests/test_bad_input_files.py)."""
    frame = run("allreduce", cluster("dgx-h100"), SIZES, 8)
    checked = write_log(tmp_path / "checked.log", frame)
    unchecked = tmp_path / "unchecked.log"
    lines = [
        line if line.startswith("#") or not line.strip() else " ".join(
            "N/A" if i in (8, 12) else cell for i, cell in enumerate(line.split())
        )
        for line in checked.read_text().splitlines()
    ]  # fmt: skip
    unchecked.write_text("\n".join(lines) + "\n")
    assert unchecked.read_text().count("N/A") == 2 * len(SIZES)
    assert read(unchecked).rows.equals(read(checked).rows)


def test_fit_recovers_the_constants_that_made_the_log(tmp_path, truth):
    c, fab = truth
    auto = write_log(tmp_path / "auto.log", run("allreduce", c, SIZES, 8, fab=fab))
    ring = run("allreduce", c, SIZES, 8, algo="ring", fab=fab)
    forced = write_log(
        tmp_path / "ring.log", ring, extra=["# node-0:1:1 NCCL INFO NCCL_ALGO set by environment to Ring"]
    )
    fit = calibrate([read(auto), read(forced)], "dgx-h100")
    assert fit.fitted["NVLink payload efficiency"] == pytest.approx(0.85, rel=0.01)
    assert fit.fitted["NVLS channel rate"] == pytest.approx(20.5e9, rel=0.01)
    # One node, stream launches: nothing in these logs crosses a NIC or replays a CUDA graph.
    assert fit.fitted["NIC efficiency"] is None and fit.fitted["NVLS zero-copy latency"] is None
    assert fit.rows.error_after_pct.abs().max() < 1.0 < fit.rows.error_before_pct.abs().max()


def test_a_blackwell_nvls_log_is_fit_by_its_channel_rate(tmp_path):
    """An 8-GPU B300's all-reduce log whose NVLS plateau sits above the model's (NVLS channels of
    25.5 GB/s, not nvlink5's 22.4: 945 GB/s of busbw at 8 GiB): the NVLS channel rate is a constant
    calibrate owns, so the fit moves the plateau onto the log's, from a median error above 5% over the
    NVLS sizes to below it, and no size's error grows."""
    c = cluster("dgx-b300")
    fab = fabric_of(c)
    sizes = [2**k for k in range(26, 34)]
    log = write_log(tmp_path / "b300.log", run("allreduce", c, sizes, 8, fab=dataclasses.replace(fab, nvls_Bps=24 * 25.5e9)),
                    device="NVIDIA B300 SXM6 AC")  # fmt: skip
    fit = calibrate([read(log)], "dgx-b300")
    before, after = fit.rows.error_before_pct.abs(), fit.rows.error_after_pct.abs()
    assert before.median() > 5 > after.median()
    assert (after <= before + 1e-9).all()
    assert fit.fitted["NVLS channel rate"] == pytest.approx(25.5e9, rel=0.01)


@pytest.mark.parametrize("op, binary", [("sendrecv", "sendrecv"), ("allreduce", "all_reduce")])
def test_a_latency_the_record_does_not_state_is_fit_from_a_multi_node_log(tmp_path, op, binary):
    """InfiniBand records state no net plugin latency (a token 0.1 us prior, whose 1% nudge moves
    nothing): two nodes whose every step across them takes 6 us more are still fit, to 6 us."""
    c = cluster("dgx-h100", 2)
    slow = dataclasses.replace(fabric_of(c), net_latency_s=6e-6)
    log = write_log(
        tmp_path / f"{binary}.log", run(op, c, SIZES, 16, fab=slow), binary=binary, ranks=16, hosts=2
    )
    fit = calibrate([read(log)], "dgx-h100")
    assert fit.fitted["net plugin latency"] == pytest.approx(6e-6, rel=0.02)
    assert fit.median_after_pct < 0.1 < 5 < fit.median_before_pct


def test_overlay_changes_only_the_calibrated_system(tmp_path, truth, monkeypatch, capsys):
    c, fab = truth
    log = write_log(tmp_path / "auto.log", run("allreduce", c, SIZES, 8, fab=fab))
    overlay = tmp_path / "my-h100.toml"
    monkeypatch.setattr("sys.argv", calibrate_argv(log, overlay))
    main()  # success returns; an error would exit 2
    assert "NVLS channel rate" in capsys.readouterr().out
    before = {s: run("allreduce", cluster(s), [2**33]).busbw_GBps.iloc[0] for s in ("dgx-h100", "hgx-h200")}
    monkeypatch.setenv(OVERLAY_ENV, str(overlay))
    after = {s: run("allreduce", cluster(s), [2**33]).busbw_GBps.iloc[0] for s in ("dgx-h100", "hgx-h200")}
    assert after["dgx-h100"] == pytest.approx(
        run("allreduce", c, [2**33], fab=fab).busbw_GBps.iloc[0], rel=0.01
    )
    assert after["dgx-h100"] > before["dgx-h100"] * 1.03
    assert after["hgx-h200"] == before["hgx-h200"]  # shares NVLink 4, not the calibration
    # each fitted value states the range its residuals leave it in, which the bands then propagate
    from commodel.hardware.loader import default_db
    from commodel.hardware.uncertain import uncertain_parameters

    fitted = default_db().link("dgx-h100-nvlink4").nvls_channel_bandwidth
    assert fitted.range is not None and fitted.range[0] <= fitted.value <= fitted.range[1]
    found = {p.label: p for p in uncertain_parameters(default_db(), ["dgx-h100"], ({}, {}))}
    assert found["dgx-h100-nvlink4.nvls_channel_bandwidth"].source.startswith(
        "stated range (calibrated: commodel"
    )


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("", "empty file"),
        ("hello\nworld\n", "not nccl-tests output"),
        ("\n".join(COLUMNS) + "\n", "no result rows"),
        ("\n".join(COLUMNS) + "\n  1024  256  float  sum  -1  12.0  0.1\n", "line 4: expected size, count"),
        (
            "\n".join(COLUMNS) + "\n  1024  256  float  sum  -1  x  0.1  0.1  0  1  1  1  0\n",
            "line 4: a result field",
        ),
    ],
)
def test_logs_that_are_not_nccl_tests_output_are_one_line_errors(
    tmp_path, content, message, capsys, monkeypatch
):
    log = tmp_path / "all_reduce_perf.log"
    log.write_text(content)
    monkeypatch.setattr("sys.argv", calibrate_argv(log, tmp_path / "o.toml"))
    with pytest.raises(SystemExit) as done:
        main()
    err = capsys.readouterr().err
    assert done.value.code == 2 and message in err and str(log) in err and "Traceback" not in err
    assert not (tmp_path / "o.toml").exists()


def test_a_log_faster_than_the_wires_is_refused(tmp_path, capsys, monkeypatch):
    """A DGX H100 GPU puts 450 GB/s on its NVLink and 50 on its NIC (line rates): an all-reduce log whose
    busbw is the model's 2.5x (about 1,200 GB/s at 8 GiB, above twice that wire, which an in-network
    reduction cannot beat) is refused naming the log; at the model's own busbw it reads."""
    frame = run("allreduce", cluster("dgx-h100"), SIZES, 8)
    fast = frame.assign(busbw_GBps=2.5 * frame.busbw_GBps, algbw_GBps=2.5 * frame.algbw_GBps,
                        time_s=frame.time_s / 2.5)  # fmt: skip
    for scale, table in ((1, frame), (2.5, fast)):
        log = write_log(tmp_path / f"x{scale}.log", table)
        monkeypatch.setattr("sys.argv", calibrate_argv(log, tmp_path / "o.toml"))
        try:
            main()
            code = 0
        except SystemExit as done:
            code = done.code
        err = capsys.readouterr().err
        assert (code, "not a run these GPUs can make" in err) == ((2, True) if scale > 1 else (0, False)), err


def test_bad_overlays_are_one_line_errors(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv(OVERLAY_ENV, "")  # --hardware sets it: restore it after the test
    cases = {
        "[linkz.a]\nx = 1\n": "unknown table [linkz] (did you mean 'links'?)",
        '[links.nvlink4]\nefficiency = { value = 1.5, source = "mine" }\n': "[links.nvlink4]: field 'efficiency.value': must be at most 1",
        '[systems.dgx-h100]\nscale_up = { link = "nvlink9" }\n': "unknown link 'nvlink9'",
    }
    for text, message in cases.items():
        overlay = tmp_path / "o.toml"
        overlay.write_text(text)
        monkeypatch.setattr("sys.argv", ["commodel", "--hardware", str(overlay), "hw", "list"])
        with pytest.raises(SystemExit) as done:
            main()
        err = capsys.readouterr().err
        assert done.value.code == 2 and message in err, err


def _published_series():
    """Every series of published nccl-tests rows in data/measurements.csv (one system, rank count,
    collective and algorithm; at least four sizes): the logs the project can calibrate on."""
    from commodel.validate.measurements import load_measurements

    table = load_measurements()
    rows = table[(table.kind == "collective") & table.size_bytes.notna() & table.gpus.notna()]
    keys = ["model_target", "gpus", "nodes", "op", "algo"]
    return [
        pytest.param(key, group, id=f"{key[0]}-{int(key[1])}")
        for key, group in rows.groupby(keys)
        if len(group) >= 4
    ]


def published_log(path, key, group):
    """The series as the nccl-tests log that printed it (times from bus bandwidth, or as quoted)."""
    system, gpus, nodes = key[0], int(key[1]), int(key[2])
    factor = 2 * (gpus - 1) / gpus
    size = group.size_bytes.astype(float).to_numpy()
    value = group.value.astype(float).to_numpy()
    time = np.where(group.metric == "time", value * 1e-6, size * factor / (value * 1e9))
    frame = pd.DataFrame({"size_bytes": size.astype(int), "time_s": time}).sort_values("size_bytes")
    frame = frame.assign(algbw_GBps=frame.size_bytes / frame.time_s / 1e9)
    frame = frame.assign(busbw_GBps=frame.algbw_GBps * factor)
    device = "NVIDIA " + cluster(system).system.gpu.split("-")[0].upper()
    return write_log(path, frame, ranks=gpus, hosts=nodes, device=device)


@pytest.mark.parametrize(("key", "group"), _published_series())
def test_calibrating_on_a_published_log_never_worsens_its_median_error(tmp_path, key, group):
    fit = calibrate([read(published_log(tmp_path / "log.txt", key, group))], key[0])
    assert fit.median_after_pct <= fit.median_before_pct
    assert fit.mean_log_error("after") <= fit.mean_log_error("before")


def test_a_fit_that_cannot_beat_the_defaults_keeps_them(tmp_path, truth, monkeypatch):
    """The guard: an optimizer that lands somewhere worse than the priors returns nothing."""
    import types

    c, fab = truth
    log = read(write_log(tmp_path / "auto.log", run("allreduce", c, SIZES, 8, fab=fab)))
    assert calibrate([log], "dgx-h100").fitted["NVLS channel rate"] is not None

    def worst(fun, x0, bounds, **options):  # the lower bound of every parameter
        low = bounds[0] if isinstance(bounds, tuple) else [b[0] for b in bounds]
        return types.SimpleNamespace(x=np.asarray(low))

    monkeypatch.setattr("commodel.calibrate.fit.least_squares", worst)
    monkeypatch.setattr("commodel.calibrate.fit.minimize", worst)
    fit = calibrate([log], "dgx-h100")
    assert fit.determined and all(value is None for value in fit.fitted.values())
    assert fit.median_after_pct == fit.median_before_pct and fit.overlay(c, [log]) == {}


def _frame(op, ranks, sizes=(2**20, 2**26, 2**30)):
    c = cluster("dgx-h100")
    return run(op, c, list(sizes), ranks).assign(algbw_GBps=lambda f: f.size_bytes / f.time_s / 1e9)


def _log(path, op, ranks=8, binary="", header=True, redop="sum", root="-1", per_rank=False, device=None):
    """A log of ``op`` as nccl-tests prints it: the operator, root and element count its binary uses."""
    frame = _frame(op, ranks)
    lines = [HEADER[0]] + ([f"# Collective test starting: {binary}_perf"] if header and binary else [])
    lines.append(
        "# nThread 1 nGpus 1 minBytes 8 maxBytes 8589934592 step: 2(factor) warmup iters: 5 iters: 20 agg iters: 1 validation: 1 graph: 1"
    )
    lines += [
        f"#  Rank {r:2d} Group  0 Pid {1000 + r:6d} on   node-0 device {r:2d} [0x18] {device or 'NVIDIA H100 80GB HBM3'}"
        for r in range(ranks)
    ]
    lines += COLUMNS
    for row in frame.itertuples():
        count = row.size_bytes // 4 // (ranks if per_rank else 1)
        cells = f"{row.time_s * 1e6:8.2f} {row.algbw_GBps:7.2f} {row.busbw_GBps:7.2f}      0"
        lines.append(f"{row.size_bytes:>12} {count:>13}     float {redop:>7} {root:>7} {cells} {cells}")
    path.write_text("\n".join(lines) + "\n")
    return path


@pytest.mark.parametrize(
    ("op", "redop", "root", "per_rank"),
    [
        ("allreduce", "sum", "-1", False),
        ("reducescatter", "sum", "-1", True),
        ("broadcast", "none", "0", False),
        ("reduce", "sum", "0", False),
    ],
)
def test_the_collective_is_read_from_the_columns_when_nothing_names_it(tmp_path, op, redop, root, per_rank):
    log = read(_log(tmp_path / "run.txt", op, redop=redop, root=root, per_rank=per_rank))
    assert log.op == op and log.ranks == 8 and log.graph is True and log.gpus_per_process == 1


def test_a_name_the_columns_contradict_is_refused(tmp_path):
    allreduce = _log(tmp_path / "all_gather_perf.log", "allreduce")
    with pytest.raises(CommodelError, match=r"its file name says allgather but its columns .* fit allreduce"):
        read(allreduce)
    with pytest.raises(CommodelError, match="--op says reducescatter"):
        read(allreduce, op="reducescatter")
    assert read(allreduce, op="allreduce").op == "allreduce"
    # all_gather and alltoall print the same columns: only a name can tell them apart
    gather = _log(tmp_path / "run.txt", "allgather", redop="none", per_rank=True)
    with pytest.raises(CommodelError, match="allgather or alltoall; name it with --op"):
        read(gather)
    assert read(gather, op="alltoall").op == "alltoall"


def test_gpus_nodes_and_system_are_checked_against_the_log(tmp_path):
    log = read(_log(tmp_path / "all_reduce_perf.log", "allreduce", header=False))
    with pytest.raises(CommodelError, match="ran on 8 ranks; --gpus 7"):
        calibrate([log], "dgx-h100", gpus=7)
    with pytest.raises(CommodelError, match="ran on 1 nodes; --nodes 2"):
        calibrate([log], "dgx-h100", nodes=2)
    with pytest.raises(CommodelError, match="ran on H100 GPUs but --system dgx-a100 has A100"):
        calibrate([log], "dgx-a100")
    b300 = read(_log(tmp_path / "b300.log", "allreduce", device="NVIDIA B300 SXM6 AC"))
    assert calibrate([b300], "dgx-b300").rows.size == len(b300.rows) * 6  # accepted on its own system


def test_calibrate_cli_takes_op_and_reports_the_objective(tmp_path, capsys, monkeypatch):
    log = _log(tmp_path / "run.txt", "allgather", redop="none", per_rank=True)
    argv = calibrate_argv(log, tmp_path / "o.toml")
    monkeypatch.setattr("sys.argv", [*argv, "--op", "allgather"])
    main()
    out = capsys.readouterr().out
    assert "Mean |log error| (what the fit minimizes)" in out and "(never raised)" in out
    monkeypatch.setattr("sys.argv", [*argv, "--op", "allgathr"])
    with pytest.raises(SystemExit) as done:
        main()
    assert done.value.code == 2 and "did you mean 'allgather'" in capsys.readouterr().err
