"""Training goodput under failures: Daly's interval, sync vs async checkpoints, and the failure data."""

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from commodel.ops.goodput import daly_interval, goodput
from commodel.pricing.run import train
from commodel.workloads.model.catalog import failure_model


def test_the_llama3_failure_data_adds_up():
    model = failure_model("llama3-h100")
    assert sum(model.interruptions.values()) == 419  # unexpected interruptions in the 54-day snapshot
    # one interruption about every 3 hours on 16,384 GPUs, as the paper reports
    assert 1 / (model.rate_per_gpu_hour() * 16384) == pytest.approx(3.09, rel=0.01)
    assert 0.8 < model.hardware_share < 0.9


def test_daly_interval_minimizes_the_expected_wall_time():
    checkpoint, mtbf = 60.0, 4 * 3600.0
    taus = np.linspace(300, 6000, 20000)
    wall = 1 / goodput("sync", 1 / (mtbf / 3600), 1, 1.0, 1 / checkpoint, 1e12, 0.0, taus)["goodput"]
    assert daly_interval(checkpoint, mtbf) == pytest.approx(taus[np.argmin(wall)], rel=0.01)


def simulated_wall_per_work(tau, stop, write, restart, mtbf, segments, seed):
    """Wall seconds per second of work, by a seeded event simulation of the process the closed form
    approximates: work in segments of ``tau``, each followed by a stop of ``stop`` (the checkpoint
    taken), which is durable ``write`` seconds after the stop (0: at once, a synchronous write); a
    failure (Poisson, ``mtbf`` apart) rolls back to the last durable checkpoint, so one during the
    next segment's first ``write`` seconds loses that segment too, and costs a restart of ``restart``,
    which a failure during it begins again."""
    rng = np.random.default_rng(seed)
    wall, durable, completed, pending = 0.0, 0, 0, None  # pending: the write still running
    while completed < segments:
        failure = rng.exponential(mtbf)
        if failure >= tau + stop:
            wall += tau + stop
            completed += 1
            durable += pending is not None  # the last write ended within the segment (write <= tau)
            if write > 0:
                pending = write
            else:
                durable = completed
            continue
        wall += failure
        durable += pending is not None and failure >= pending
        completed, pending = durable, None
        while (again := rng.exponential(mtbf)) < restart:
            wall += again
        wall += restart
    return wall / (segments * tau)


@pytest.mark.parametrize(
    ("mode", "mtbf", "tau", "stop", "write", "restart"),
    [("sync", 10800, 1200, 60, 0, 600), ("sync", 3600, 600, 120, 0, 300),
     ("async", 3600, 600, 5, 300, 900), ("async", 1800, 400, 5, 380, 900)],
)  # fmt: skip
def test_the_closed_form_agrees_with_an_event_simulation_of_failures_and_checkpoints(
    mode, mtbf, tau, stop, write, restart
):
    """Daly's expected wall time is exact for a synchronous checkpoint; for an asynchronous one, whose
    write in flight a failure can lose with the segment after it, the closed form charges every
    failure the write's time more (``e^{(R + P) / M}``). A seeded simulation of each process (20,000
    segments, three seeds) agrees within 1.5% where failures come every 3 to 27 segments; without
    the write's term the asynchronous cases would be 9-24% off."""
    gpus, write_Bps = 1000, 1e9
    state = (stop if mode == "sync" else write) * write_Bps
    pcie = state / gpus / stop if mode == "async" else 1e20
    read = state / write_Bps  # a restart reads the checkpoint back at the write's rate
    closed = goodput(mode, 3600 / mtbf / gpus, gpus, state, write_Bps, pcie, restart - read, tau)
    assert closed["checkpoint_s"] == pytest.approx(stop) and closed["interval_s"] == tau
    simulated = np.mean(
        [simulated_wall_per_work(tau, stop, write, restart, mtbf, 20_000, s) for s in range(3)]
    )
    assert 1 / closed["goodput"] == pytest.approx(simulated, rel=0.015)


@settings(max_examples=200, deadline=None)
@given(
    st.floats(1e2, 1e6),
    st.integers(8, 100_000),
    st.floats(1e11, 1e14),
    st.floats(1e10, 1e13),
    st.floats(0, 3600),
)
def test_goodput_is_a_share_async_never_loses_and_more_failures_hurt(mtbf_gpu_h, gpus, state, write, restart):
    def run(mode, rate):
        return goodput(mode, rate, gpus, state, write, pcie, restart)["goodput"]

    rate = 1 / mtbf_gpu_h
    pcie = 5e10
    write = min(write, gpus * pcie / 2)  # the GPUs' host links outrun storage (async's premise)
    assume(state / write < 3600 * mtbf_gpu_h / gpus)  # a checkpoint takes less than the job's MTBF
    sync, asynchronous = run("sync", rate), run("async", rate)
    assert 0 < sync <= 1 and 0 < asynchronous <= 1
    assert asynchronous >= sync * (1 - 1e-9)
    assert run("sync", 2 * rate) < sync


def test_train_reports_goodput_and_a_shorter_mtbf_lowers_it():
    job = dict(model="llama3-70b", system="dgx-h100", gpus=1024, tp=8, pp=4, global_batch=1024, seq=8192,
               sequence_parallel=True)  # fmt: skip
    none = train(**job)
    assert none["goodput"] == 1 and "job_mtbf_h" not in none
    long, short = (train(**job, mtbf_gpu_hours=h) for h in (50_000, 5_000))
    assert 1 > long["goodput"] > short["goodput"]
    assert short["time_to_train_days"] > long["time_to_train_days"] > none["time_to_train_days"]
    no_spares = train(**job, failures="llama3-h100", spares=False)
    assert no_spares["goodput"] < train(**job, failures="llama3-h100")["goodput"]


def test_a_checkpoint_burst_gets_its_share_of_the_file_system_and_no_more_than_its_links():
    """A small job is bound by its nodes' links to storage, a large one by its share of the file
    system; a slower write lengthens Daly's interval (as the square root) and costs goodput."""
    from commodel.ops.goodput import checkpoint_bandwidth

    assert checkpoint_bandwidth(2e12, 1.0, 8, 1e11) == pytest.approx(8e11)  # 8 nodes' links
    assert checkpoint_bandwidth(2e12, 0.25, 2048, 1e11) == pytest.approx(5e11)  # a quarter of the FS
    job = {"model": "llama3-70b", "system": "dgx-h100", "gpus": 64, "tp": 8, "global_batch": 64, "seq": 4096,
           "sequence_parallel": True, "failures": "llama3-h100"}  # fmt: skip
    roomy, narrow = (train(**job, storage_node_GBps=b) for b in (1000.0, 25.0))
    assert narrow["goodput"] < roomy["goodput"]
    assert narrow["checkpoint_interval_min"] > roomy["checkpoint_interval_min"]
    shared = train(**job, storage_node_GBps=1000.0, storage_share=0.1)
    assert shared["checkpoint_interval_min"] > roomy["checkpoint_interval_min"]


def test_each_fleet_states_its_source_and_rates_follow_its_counts():
    from commodel.workloads.model.catalog import failure_models

    fleets = failure_models()
    assert {"llama3-h100", "bloom-a100", "opt-a100"} <= set(fleets)
    for fleet in fleets.values():
        total = sum(fleet.interruptions.values())
        assert fleet.source and fleet.rate_per_gpu_hour() == pytest.approx(
            total / (fleet.gpus * 24 * fleet.days)
        )
    job = {
        "model": "llama3-70b",
        "system": "dgx-h100",
        "gpus": 1024,
        "tp": 8,
        "global_batch": 1024,
        "seq": 4096,
        "sequence_parallel": True,
    }
    worse = [train(**job, failures=f)["goodput"] for f in ("llama3-h100", "opt-a100")]
    assert worse[1] < worse[0]  # OPT's fleet failed 3.5x as often per GPU-hour


def test_a_job_that_cannot_outrun_its_failures_never_trains_and_says_why(capsys, monkeypatch):
    """A checkpoint written at 1 B/s cannot keep any work between the Llama 3 fleet's failures: goodput
    0, an infinite time to train, energy and GPU hours, a cost and carbon of 0 where no price or
    intensity is given (not 0 x infinity) and infinite where one is; the command says so in its
    table and a note instead of failing. At 2 TB/s the same job trains."""
    import pandas as pd
    from conftest import run_cli

    from commodel.pricing.evaluator import evaluator

    job = {
        "model": "llama3-8b",
        "system": "dgx-h100",
        "gpus": 8,
        "recompute": "full",
        "failures": "llama3-h100",
    }
    table = evaluator("training")(pd.DataFrame([job | {"storage_GBps": s, "price_per_gpu_hour": p}
                                                for s, p in ((1e-9, 0.0), (1e-9, 2.0), (2000.0, 2.0))]))  # fmt: skip
    assert table.goodput.tolist()[:2] == [0.0, 0.0] and 0 < table.goodput[2] < 1
    assert np.isinf(table.time_to_train_days[:2]).all() and np.isinf(table.gpu_hours[:2]).all()
    assert (
        table.cost_usd.tolist()[0] == 0.0 and np.isinf(table.cost_usd[1]) and np.isfinite(table.cost_usd[2])
    )
    args = ["train", "--model", "llama3-8b", "--system", "dgx-h100", "--gpus", "8", "--recompute", "full",
            "--failures", "llama3-h100", "--storage-GBps", "1e-9"]  # fmt: skip
    code, out = run_cli(args, capsys, monkeypatch)
    assert code == 0 and "never trains" in out.out and "note: never finishes" in out.out, out.err
