"""The ``scheduling`` evaluator: a batch partition's queue waits per row, under node-exclusive
allocation or consumable-resource packing, by the queueing approximation or the simulation
(:mod:`commodel.ops.scheduling`).

``load`` is the offered load as a share of the node-exclusive capacity (``lambda E[S] / nodes``); both
policies see the same arrivals, so packing lowers its own utilization. Outputs in minutes.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from commodel.errors import CommodelError, unknown
from commodel.ops.scheduling import POLICIES, approximate_waits, simulate_waits
from commodel.pricing.evaluator import Evaluator, blank_outputs
from commodel.workloads.catalog import job_mix

METHODS = ("approximation", "simulation")
INPUTS: dict[str, object] = {
    "job_mix": "hpc-cpu",
    "nodes": 100,
    "load": None,
    "policy": None,
    "method": "approximation",
    "jobs": 10000,
    "seed": 0,
}
OUTPUTS = ("mean_wait_min", "median_wait_min", "wait_probability", "utilization", "valid")


def arrivals_per_h(mix_name: str, nodes: float, load: float) -> float:
    """Arrivals per hour that offer ``load`` of the node-exclusive capacity."""
    if not 0 < load < 1:
        raise CommodelError(
            f"load must be between 0 and 1 (a share of the node-exclusive capacity), got {load}"
        )
    if nodes < 1:
        raise CommodelError(f"a partition needs at least one node, got {nodes}")
    return load * nodes / job_mix(mix_name).job_hours


def evaluate(frame: pd.DataFrame) -> pd.DataFrame:
    out = blank_outputs(len(frame), OUTPUTS)
    for i, row in enumerate(frame.itertuples(index=False)):
        if row.policy not in POLICIES:
            raise unknown("scheduling policy", row.policy, POLICIES)
        if row.method not in METHODS:
            raise unknown("queue-wait method", row.method, METHODS)
        mix = job_mix(row.job_mix)
        rate = arrivals_per_h(row.job_mix, float(row.nodes), float(row.load))
        if row.method == "approximation":
            r = {
                k: float(np.asarray(v))
                for k, v in approximate_waits(row.policy, mix, row.nodes, rate).items()
            }
        else:
            r = simulate_waits(row.policy, mix, int(row.nodes), rate, int(row.jobs), int(row.seed))
        out["mean_wait_min"][i] = 60 * r["mean_wait_h"]
        out["median_wait_min"][i] = 60 * r["median_wait_h"]
        out["wait_probability"][i] = r.get("wait_probability", np.nan)
        out["utilization"][i] = r["utilization"]
        out["valid"][i] = True
    return frame.assign(**out)


def scheduling() -> Evaluator:
    return Evaluator(
        "scheduling",
        "a batch partition's queue waits under node-exclusive or packed (TRES) allocation",
        INPUTS,
        OUTPUTS,
        evaluate,
    )
