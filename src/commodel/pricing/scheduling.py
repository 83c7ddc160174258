"""The ``scheduling`` evaluator: a batch partition's queue waits per row, under node-exclusive
allocation or consumable-resource packing, by the queueing approximation or the simulation
(:mod:`commodel.ops.scheduling`).

``load`` is the offered load as a share of the node-exclusive capacity (``lambda E[runtime] / nodes``);
both policies see the same arrivals, so packing lowers its own utilization. The scheduler's cycle
and per-job costs and the arrivals' bursts and daily cycle are row inputs
(:mod:`commodel.ops.scheduler`), so a sweep varies them beside the policy. Outputs in minutes.
"""

from __future__ import annotations

from typing import Annotated

import numpy as np
from pydantic import Field

from commodel.ops.node_power import ALWAYS_ON, PowerSaving
from commodel.ops.scheduler import Arrivals, Scheduler
from commodel.ops.scheduling import POLICIES, approximate_waits, simulate_waits
from commodel.pricing.evaluator import Evaluator
from commodel.pricing.job import MAX_NODES, Choices, Job
from commodel.workloads.model.catalog import job_mix, job_mixes

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
    jobs: int = Field(10000, ge=1, le=1_000_000, description="Jobs the simulation runs.")
    seed: int = Field(0, ge=0, description="The simulation's seed.")
    sched_interval_s: float = Field(
        60.0, ge=0, le=3600, description="Slurm's main scheduling loop period (sched_interval; default 60 s)."
    )
    bf_interval_s: float = Field(
        30.0, ge=0, le=3600, description="Slurm's backfill loop period (bf_interval; default 30 s)."
    )
    defer: bool = Field(False, description="No scheduling at submission (SchedulerParameters=defer).")
    prolog_s: float = Field(
        10.0, ge=0, le=3600, description="Prolog and node health check per job (assumed 10 s)."
    )
    launch_s: float = Field(5.0, ge=0, le=3600, description="Step launch and container start (assumed 5 s).")
    epilog_s: float = Field(5.0, ge=0, le=3600, description="Epilog per job (assumed 5 s).")
    burst: int = Field(1, ge=1, le=10_000, description="Jobs submitted together (a job array of this size).")
    daily_amplitude: float = Field(
        0.0, ge=0, lt=1, description="Arrivals modulated by 1 + a sin(2 pi t / 24 h) (simulation only)."
    )
    suspend_after_min: float = Field(
        0.0,
        ge=0,
        le=10_080,
        description="Minutes a node stays empty before it powers down (Slurm's SuspendTime; "
        "0: never; simulation only).",
    )
    resume_min: float = Field(
        5.0,
        ge=0,
        le=120,
        description="Minutes a suspended node takes to boot (assumed 5: a large-memory "
        "server's POST and OS boot).",
    )


#: A partition the model cannot price (a load its scheduler's costs push past capacity, a daily cycle
#: or power saving asked of the approximation) is its row's ``problem``.
OUTPUTS = (
    "mean_wait_min", "median_wait_min", "wait_probability", "utilization", "start_overhead_min",
    "median_start_min", "mean_start_min", "energy_kWh_per_job", "boots_per_job", "problem", "valid",
)  # fmt: skip


def arrivals_per_h(mix_name: str, nodes: float, load: float) -> float:
    """Arrivals per hour that offer ``load`` of the node-exclusive capacity."""
    return load * nodes / job_mix(mix_name).job_hours


def _waits(row: object) -> dict:
    """One partition's waits, in minutes, by the row's method; the median and mean starts add the
    start overhead (prolog and launch) to the median and mean waits; energy per job in kWh."""
    mix, rate = job_mix(row.job_mix), arrivals_per_h(row.job_mix, float(row.nodes), float(row.load))
    costs = Scheduler(float(row.sched_interval_s), float(row.bf_interval_s), bool(row.defer),
                      float(row.prolog_s), float(row.launch_s), float(row.epilog_s))  # fmt: skip
    arrivals = Arrivals(int(row.burst), float(row.daily_amplitude))
    suspend = float(row.suspend_after_min)
    saving = PowerSaving(suspend / 60, float(row.resume_min) / 60) if suspend else ALWAYS_ON
    if row.method == "approximation":
        r = approximate_waits(row.policy, mix, row.nodes, rate, costs, arrivals, saving)
        r = {k: float(np.asarray(v)) for k, v in r.items()}
    else:
        r = simulate_waits(
            row.policy, mix, int(row.nodes), rate, int(row.jobs), int(row.seed), costs, arrivals, saving
        )
    return {"mean_wait_min": 60 * r["mean_wait_h"], "median_wait_min": 60 * r["median_wait_h"],
            "wait_probability": r.get("wait_probability", np.nan), "utilization": r["utilization"],
            "start_overhead_min": 60 * r["start_overhead_h"],
            "median_start_min": 60 * (r["median_wait_h"] + r["start_overhead_h"]),
            "mean_start_min": 60 * (r["mean_wait_h"] + r["start_overhead_h"]),
            "energy_kWh_per_job": r["energy_kWh_per_job"], "boots_per_job": r["boots_per_job"]}  # fmt: skip


def scheduling() -> Evaluator:
    return Evaluator.row_by_row(
        "scheduling",
        "a batch partition's queue waits under node-exclusive or packed (TRES) allocation",
        SchedulingJob,
        OUTPUTS,
        _waits,
        ("problem",),
    )
