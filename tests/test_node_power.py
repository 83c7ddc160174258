"""Node power and Slurm's power saving: a node's energy by hand, power following use, and the trade-off
between sleeping nodes and the boots jobs wait for."""

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from commodel.errors import CommodelError
from commodel.ops.node_power import ALWAYS_ON, NodeLedger, PowerSaving
from commodel.ops.scheduler import Scheduler
from commodel.ops.scheduling import approximate_waits, simulate_waits
from commodel.pricing.scheduling import scheduling
from commodel.workloads.model.catalog import job_mix
from commodel.workloads.model.schema import NodePowerSpec

POWER = NodePowerSpec(busy=1000.0, idle=200.0, off=10.0, source="test")
MIX = job_mix("hpc-cpu")
RATE = 0.8 * 100 / MIX.job_hours


def test_one_node_by_hand():
    """Empty 1 h (idle 0.5 h, then asleep), a job at half use for 2 h after a 0.1 h boot, empty to 5 h."""
    ledger = NodeLedger(1, POWER, PowerSaving(0.5, 0.1), (0.0, 5.0))
    assert ledger.occupy(0, 1.0, 0.5) == pytest.approx(0.1)
    ledger.release(0, 3.1, 0.5)
    joules = ledger.close(6.0)
    watt_hours = 200 * 0.5 + 10 * 0.5 + 200 * 0.1 + 600 * 2.0 + 200 * 0.5 + 10 * (5.0 - 3.6)
    assert joules / 3600 == pytest.approx(watt_hours) and ledger.boots == 1


def _run(policy, saving=ALWAYS_ON, seed=2):
    return simulate_waits(policy, MIX, 100, RATE, 3000, seed, Scheduler(), saving=saving)


def test_power_follows_use_so_packing_alone_saves_nothing_and_the_approximation_agrees():
    exclusive, packed = _run("exclusive"), _run("tres")
    assert packed["energy_kWh_per_job"] == pytest.approx(exclusive["energy_kWh_per_job"], rel=0.03)
    steady = approximate_waits("exclusive", MIX, 100, RATE, Scheduler())["energy_kWh_per_job"]
    assert float(steady) == pytest.approx(exclusive["energy_kWh_per_job"], rel=0.03)


def test_sleeping_sooner_saves_energy_and_wakes_more_nodes_and_packing_sleeps_more():
    runs = {}
    for policy in ("exclusive", "tres"):
        soon, late = (_run(policy, PowerSaving(t / 60, 5 / 60)) for t in (5.0, 60.0))
        assert soon["energy_kWh_per_job"] < late["energy_kWh_per_job"] < _run(policy)["energy_kWh_per_job"]
        assert soon["boots_per_job"] > late["boots_per_job"] > 0
        runs[policy] = soon
    assert runs["tres"]["energy_kWh_per_job"] < 0.7 * runs["exclusive"]["energy_kWh_per_job"]
    assert runs["tres"]["boots_per_job"] < runs["exclusive"]["boots_per_job"]


def test_a_longer_boot_lengthens_the_waits_not_the_energy_saved():
    quick, slow = (_run("tres", PowerSaving(5 / 60, r / 60)) for r in (1.0, 10.0))
    assert slow["mean_wait_h"] > quick["mean_wait_h"]


def test_power_saving_is_simulated_and_bad_power_is_refused():
    with pytest.raises(CommodelError, match="use method simulation"):
        approximate_waits("tres", MIX, 100, RATE, saving=PowerSaving(0.1, 0.1))
    with pytest.raises(ValueError, match="off <= idle <= busy"):
        NodePowerSpec(busy=100.0, idle=200.0, off=0.0, source="test")
    row = {"job_mix": "hpc-cpu", "nodes": 10, "load": 0.5, "policy": "tres", "method": "approximation",
           "suspend_after_min": 10.0}  # fmt: skip
    asked = scheduling()(pd.DataFrame([row]))  # of the approximation: the row says why it has no waits
    assert (
        not asked.valid[0]
        and "use method simulation" in asked.problem[0]
        and np.isnan(asked.mean_wait_min[0])
    )
    assert np.isfinite(
        scheduling()(pd.DataFrame([row | {"method": "simulation", "jobs": 200}])).energy_kWh_per_job
    ).all()


@settings(max_examples=25, deadline=None)
@given(
    st.floats(0.3, 0.95), st.floats(1.0, 600.0), st.floats(0.0, 30.0), st.sampled_from(["exclusive", "tres"])
)
def test_energy_stays_between_all_asleep_and_all_busy_and_sleeping_never_costs_energy(
    load, suspend, resume, policy
):
    """Physical bounds: a partition draws between every node off and every node busy, and powering
    empty nodes down never raises the energy per job (a boot draws idle power, as an awake empty node)."""
    rate = load * 20 / MIX.job_hours
    awake = simulate_waits(policy, MIX, 20, rate, 600, 3, Scheduler())
    asleep = simulate_waits(
        policy, MIX, 20, rate, 600, 3, Scheduler(), saving=PowerSaving(suspend / 60, resume / 60)
    )
    power = MIX.node_power
    hours_per_job = 20 / rate  # node-hours of the partition per job, at the offered rate
    for run in (awake, asleep):
        assert (
            power.off * hours_per_job / 1e3 * 0.8
            <= run["energy_kWh_per_job"]
            <= power.busy * hours_per_job / 1e3 * 1.2
        )
    assert asleep["energy_kWh_per_job"] <= awake["energy_kWh_per_job"] * 1.02
