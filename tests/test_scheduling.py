"""Queue waits: Erlang C by hand, monotone in load, packing never waits longer, the simulation agrees."""

import numpy as np
import pandas as pd
import pytest

from commodel.errors import CommodelError
from commodel.ops.scheduling import approximate_waits, erlang_c, servers
from commodel.studies import run_study
from commodel.workloads.catalog import job_mix


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


def test_a_load_at_or_above_capacity_is_an_error():
    from commodel.pricing.scheduling import scheduling

    with pytest.raises(CommodelError, match="below 1"):
        approximate_waits("exclusive", job_mix("hpc-cpu"), 10, 10 / 2.0)
    with pytest.raises(CommodelError, match="--load: Input should be less than 1"):
        scheduling()(pd.DataFrame([{"job_mix": "hpc-cpu", "nodes": 10, "load": 1.0, "policy": "tres",
                                "method": "approximation", "jobs": 100, "seed": 0}]))  # fmt: skip


def test_tres_study_simulation_agrees_and_packing_removes_the_wait():
    from commodel.studies.tres import TOLERANCE

    result = run_study("tres")
    check = result.table.dropna(subset=["sim_mean_min"])
    exclusive = check[check.policy == "exclusive"]
    ratio = exclusive.sim_mean_min / exclusive.approx_mean_min
    assert ((ratio >= 1 / TOLERANCE) & (ratio <= TOLERANCE)).all()
    assert (check[check.policy == "tres"].sim_median_min < 1).all()
    assert all(c.model < 3 for c in result.claims)
