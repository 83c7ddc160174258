"""Queue waits: Erlang C by hand, monotone in load, packing never waits longer, the simulation agrees."""

import numpy as np
import pandas as pd
import pytest

from commodel.errors import CommodelError
from commodel.ops.scheduling import approximate_waits, erlang_c, servers
from commodel.studies import run_study
from commodel.workloads.model.catalog import job_mix


def test_erlang_c_by_hand():
    assert erlang_c(1, 0.5) == pytest.approx(0.5)  # M/M/1: waits with probability rho
    assert erlang_c(2, 1.0) == pytest.approx(
        1 / 3
    )  # c = 2, a = 1: (a^2/2 / (1 - 1/2)) / (1 + a + a^2/2 / (1/2))
    assert erlang_c(100, 99.9) > erlang_c(100, 90) > erlang_c(100, 50)


@pytest.mark.parametrize("name", ["hpc-cpu", "hpc-gpu"])
def test_higher_load_lengthens_waits_and_packing_never_waits_longer(name):
    mix, nodes = job_mix(name), 40
    rates = np.linspace(0.5, 0.99, 30) * nodes / mix.job_hours
    exclusive = approximate_waits("exclusive", mix, nodes, rates)
    packed = approximate_waits("tres", mix, nodes, rates)
    assert np.all(np.diff(exclusive["mean_wait_h"]) > 0) and np.all(np.diff(exclusive["median_wait_h"]) >= 0)
    assert np.all(packed["mean_wait_h"] <= exclusive["mean_wait_h"])
    assert servers("tres", mix, nodes) > servers("exclusive", mix, nodes)


def test_a_load_at_or_above_capacity_is_an_error_and_in_a_sweep_its_rows_problem():
    """A load of 1 or more is bad input; a load just below 1 that the prolog and epilog push past the
    capacity is a partition that cannot keep up: its row says so and a sweep prices the others."""
    from commodel.pricing.scheduling import scheduling

    with pytest.raises(CommodelError, match="below 1"):
        approximate_waits("exclusive", job_mix("hpc-cpu"), 10, 10 / 2.0)
    with pytest.raises(CommodelError, match="--load: Input should be less than 1"):
        scheduling()(pd.DataFrame([{"job_mix": "hpc-cpu", "nodes": 10, "load": 1.0, "policy": "tres",
                                "method": "approximation", "jobs": 100, "seed": 0}]))  # fmt: skip
    table = scheduling()(pd.DataFrame([{"job_mix": "hpc-cpu", "nodes": 10, "load": load, "policy": "exclusive"}
                                       for load in (0.9, 0.999)]))  # fmt: skip
    assert table.valid.tolist() == [True, False] and "prolog and epilog" in table.problem[1]
    assert table.mean_wait_min[0] > 0 and np.isnan(table.mean_wait_min[1])


def test_tres_study_simulation_agrees_and_its_predictions_move_with_their_inputs():
    """The simulation agrees with the approximation under node-exclusive allocation; the CPU jobs'
    reduction falls as more jobs ask for whole nodes (packing gains less), and the floor after the
    move rises with the prolog and with a deferred scheduler."""
    from commodel.studies.base import study_spec
    from commodel.studies.tres import TOLERANCE, waits

    result = run_study("tres")
    check = result.table.dropna(subset=["sim_mean_min"])
    exclusive = check[check.policy == "exclusive"]
    ratio = exclusive.sim_mean_min / exclusive.approx_mean_min
    assert ((ratio >= 1 / TOLERANCE) & (ratio <= TOLERANCE)).all()
    p = dict(study_spec("tres").parameters)
    base = waits(p)
    assert base["cpu_before"] == pytest.approx(277, rel=1e-6)  # the calibration
    slower = waits({**p, "prolog_s": 120.0})
    deferred = waits({**p, "defer": True})
    assert slower["cpu_start_after"] > base["cpu_start_after"] + 1.5
    assert deferred["cpu_after"] == pytest.approx(base["cpu_after"] + 0.25)  # half of the 30 s pass


def test_packing_gains_less_where_jobs_ask_for_whole_nodes():
    mix = job_mix("hpc-cpu")
    nodes, rate = 100, 0.95 * 100 / mix.job_hours
    whole = mix.model_copy(
        update={"classes": [c.model_copy(update={"demand": list(mix.server)}) for c in mix.classes]}
    )
    assert servers("tres", whole, nodes) == pytest.approx(nodes)
    small = approximate_waits("tres", mix, nodes, rate)["median_wait_h"]
    big = approximate_waits("tres", whole, nodes, rate)["median_wait_h"]
    assert big > small


def test_the_scheduler_sets_a_floor_and_holds_nodes():
    from commodel.ops.scheduler import Scheduler

    mix, nodes = job_mix("hpc-gpu"), 40
    rate = 0.3 * nodes / mix.job_hours
    ideal = approximate_waits("exclusive", mix, nodes, rate)
    slurm = approximate_waits("exclusive", mix, nodes, rate, Scheduler(prolog_s=60, epilog_s=60))
    deferred = approximate_waits("exclusive", mix, nodes, rate, Scheduler(defer=True))
    assert ideal["median_wait_h"] == 0 and ideal["start_overhead_h"] == 0
    assert slurm["utilization"] > ideal["utilization"] and slurm["mean_wait_h"] > ideal["mean_wait_h"]
    assert slurm["start_overhead_h"] == pytest.approx(65 / 3600)
    assert deferred["median_wait_h"] == pytest.approx(15 / 3600)  # half the 30 s backfill pass


def test_simulation_and_approximation_agree_for_poisson_arrivals_and_part_for_job_arrays():
    """Both with Slurm's cycle: single Poisson arrivals within the study's tolerance; arrays of 8 jobs
    wait far longer in the simulation than Allen-Cunneen's c_a^2 = 8 says (a burst finds fewer than 8
    free slots far more often than Erlang C's single arrivals do)."""
    from commodel.ops.scheduler import Arrivals, Scheduler
    from commodel.ops.scheduling import simulate_waits
    from commodel.studies.tres import TOLERANCE

    mix, nodes, slurm = job_mix("hpc-gpu"), 40, Scheduler()
    rate = 0.8 * nodes / mix.job_hours
    for burst, agree in ((1, True), (8, False)):
        arrivals = Arrivals(burst=burst)
        approx = float(approximate_waits("exclusive", mix, nodes, rate, slurm, arrivals)["mean_wait_h"])
        sim = np.mean([simulate_waits("exclusive", mix, nodes, rate, 6000, seed, slurm, arrivals)["mean_wait_h"]
                       for seed in range(3)])  # fmt: skip
        assert bool(1 / TOLERANCE <= sim / approx <= TOLERANCE) is agree, (burst, sim, approx)
    with pytest.raises(CommodelError, match="simulation"):
        approximate_waits("exclusive", mix, nodes, rate, slurm, Arrivals(daily_amplitude=0.5))
    day = [simulate_waits("exclusive", mix, nodes, rate, 6000, 0, slurm, Arrivals(daily_amplitude=a))["mean_wait_h"]
           for a in (0.0, 0.6)]  # fmt: skip
    assert day[1] > day[0]  # the same jobs, bunched into the day's peak, wait longer
