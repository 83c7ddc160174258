"""The ``scheduling`` evaluator: a batch partition's queue waits per row, under node-exclusive
allocation or consumable-resource packing, by the queueing approximation or the simulation
(:mod:`commodel.ops.scheduling`).

``load`` is the offered load as a share of the node-exclusive capacity (``lambda E[S] / nodes``); both
policies see the same arrivals, so packing lowers its own utilization. Outputs in minutes.
"""

from __future__ import annotations

from typing import Annotated

import numpy as np
from pydantic import Field

from commodel.ops.scheduling import POLICIES, approximate_waits, simulate_waits
from commodel.pricing.evaluator import Evaluator
from commodel.pricing.job import MAX_NODES, Choices, Job
from commodel.workloads.catalog import job_mix, job_mixes

METHODS = ("approximation", "simulation")


class SchedulingJob(Job):
    """A batch partition under one allocation policy and an offered load."""

    noun = "scheduling"
    job_mix: Annotated[str, Choices("job mix", job_mixes)] = Field(
        "hpc-cpu", description="Job mix (workloads/job_mixes/)."
    )
    nodes: int = Field(100, ge=1, le=MAX_NODES, description="Nodes in the partition.")
    load: float = Field(gt=0, lt=1, description="Offered load, a share of the node-exclusive capacity.")
    policy: Annotated[str, Choices("scheduling policy", POLICIES)] = Field(
        description="exclusive or tres (packing)."
    )
    method: Annotated[str, Choices("queue-wait method", METHODS)] = Field(
        "approximation", description="The M/G/c approximation or the seeded simulation."
    )
    jobs: int = Field(10000, ge=1, description="Jobs the simulation runs.")
    seed: int = Field(0, ge=0, description="The simulation's seed.")


OUTPUTS = ("mean_wait_min", "median_wait_min", "wait_probability", "utilization", "valid")


def arrivals_per_h(mix_name: str, nodes: float, load: float) -> float:
    """Arrivals per hour that offer ``load`` of the node-exclusive capacity."""
    return load * nodes / job_mix(mix_name).job_hours


def _waits(row: object) -> dict:
    """One partition's waits, in minutes, by the row's method."""
    mix, rate = job_mix(row.job_mix), arrivals_per_h(row.job_mix, float(row.nodes), float(row.load))
    if row.method == "approximation":
        r = {k: float(np.asarray(v)) for k, v in approximate_waits(row.policy, mix, row.nodes, rate).items()}
    else:
        r = simulate_waits(row.policy, mix, int(row.nodes), rate, int(row.jobs), int(row.seed))
    return {"mean_wait_min": 60 * r["mean_wait_h"], "median_wait_min": 60 * r["median_wait_h"],
            "wait_probability": r.get("wait_probability", np.nan), "utilization": r["utilization"]}  # fmt: skip


def scheduling() -> Evaluator:
    return Evaluator.row_by_row(
        "scheduling",
        "a batch partition's queue waits under node-exclusive or packed (TRES) allocation",
        SchedulingJob,
        OUTPUTS,
        _waits,
    )
