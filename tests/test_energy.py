"""Power, energy, cost and facility models, by hand."""

import numpy as np
import pandas as pd
import pytest

from commodel.hardware import cluster
from commodel.ops.energy import (
    HBM_J_PER_BYTE,
    NODE_OTHER_LOAD,
    energy_costs,
    gpu_power_W,
    it_power_W,
    node_power_W,
)
from commodel.ops.pooling import BASELINE_PUE, PROPORTIONAL_OVERHEAD, facility_pue
from commodel.pricing.evaluator import evaluator

H100 = cluster("dgx-h100")


def test_gpu_power_runs_from_idle_to_tdp():
    assert gpu_power_W(H100, 0.0) == pytest.approx(142)
    assert gpu_power_W(H100, 1.0) == pytest.approx(700)
    assert gpu_power_W(H100, 0.5) == pytest.approx(142 + 0.5 * 558)


def test_memory_bound_kernels_draw_their_hbm_traffic_and_nothing_passes_tdp():
    assert gpu_power_W(H100, 0.2, 3e12) == pytest.approx(142 + 0.2 * 558 + 48e-12 * 3e12)
    assert gpu_power_W(H100, 0.9, 3e12) == pytest.approx(700)  # capped at TDP
    assert HBM_J_PER_BYTE * H100.gpu.memory_bandwidth.value < 0.5 * (700 - 142)


@pytest.mark.parametrize("system", ["dgx-h100", "dgx-b200", "dgx-a100", "mi300x-8"])
def test_serving_power_follows_what_the_gpu_does(system):
    """Batch-1 decode reads the weights and little else: well below TDP; a full batch computes more
    and draws more; prompt-heavy traffic (compute-bound prefill, as many requests as 8,192 tokens per
    iteration keep in flight) draws the most."""
    from commodel.pricing.run import serve

    def power(**load):
        return serve(model="llama3-8b", system=system, dtype="bf16", **load)["gpu_power_W"]

    tdp = cluster(system).gpu.tdp.value
    one, full = power(batch=1), power()
    prefill = power(prompt=8000, output=4)
    assert one < 0.6 * tdp < prefill and one < full < prefill


def test_node_and_it_power_by_hand():
    node = 8 * (142 + 0.75 * 558) + NODE_OTHER_LOAD * 4600
    assert node_power_W(H100, 0.75) == pytest.approx(node)
    assert it_power_W(H100, 0.75, 2) == pytest.approx(2 * (node + 8 * 80))  # 8 NDR ports at 80 W


def test_energy_carbon_and_cost():
    out = energy_costs(
        it_power=10e3, seconds=3600, gpus=8, pue=1.5, carbon_g_per_kWh=400, price_per_gpu_hour=2.0
    )
    assert out["energy_MWh"] == pytest.approx(0.015)  # 10 kW x 1 h x 1.5
    assert out["co2_t"] == pytest.approx(15 * 400 / 1e6)
    assert out["cost_usd"] == pytest.approx(16.0)


def test_facility_pue():
    assert facility_pue(0.7, 0.7) == pytest.approx(BASELINE_PUE)
    loads = np.array([0.5, 0.7, 0.9, 1.0])
    pue = facility_pue(loads, 0.7)
    assert np.all(np.diff(pue) < 0) and np.all(pue > 1 + PROPORTIONAL_OVERHEAD)


def test_training_evaluator_job_totals():
    ev = evaluator("training")
    frame = pd.DataFrame(
        {"model": "llama3-8b", "system": "dgx-h100", "nodes": [1, 2], "global_batch": 64, "seq": 2048, "zero": 1,
         "pue": 1.2, "price_per_gpu_hour": 2.5, "train_tokens": 1e10}
    )  # fmt: skip
    r = ev(frame)
    assert r.valid.all()
    days = 1e10 / r.tokens_per_s / 86400
    assert np.allclose(r.time_to_train_days, days)
    assert np.allclose(r.cost_usd, [8, 16] * days * 24 * 2.5)
    assert np.allclose(r.power_kW, 1.2 * r.it_power_kW)
    assert r.power_kW.iloc[1] > r.power_kW.iloc[0]


def test_a_job_trains_in_whole_steps():
    """Training takes whole optimizer steps: one token, or one step's tokens, takes one step; one more
    token takes two (it took a fraction of a second where a step took 112 s)."""
    per_step = 64 * 2048
    frame = pd.DataFrame({"model": "llama3-8b", "system": "dgx-h100", "global_batch": 64, "seq": 2048,
                          "train_tokens": [1, per_step, per_step + 1, 10.5 * per_step]})  # fmt: skip
    r = evaluator("training")(frame)
    steps = r.time_to_train_days * 86400 / r.step_time_s
    assert np.allclose(steps, [1, 1, 2, 11])
    assert np.allclose(r.gpu_hours, 8 * r.time_to_train_days * 24)


def test_invalid_rows_are_marked_not_dropped_by_the_evaluator():
    frame = pd.DataFrame({"model": "llama3-8b", "system": "dgx-h100", "tp": [3, 8], "global_batch": 64})
    r = evaluator("training")(frame)
    assert list(r.valid) == [False, True]
    assert np.isnan(r.step_time_s.iloc[0]) and np.isfinite(r.step_time_s.iloc[1])
