"""The ``disaggregation`` evaluator: a cluster pooled at a given granularity, per row.

Rows give a pool size (servers per pool) and a scheduler backfill depth; the pool's fabric follows
from its size (chassis, rack or multi-rack). Outputs: utilization per resource and its gain over the
server-bound cluster with the same scheduler, scheduling overhead, remote-access slowdown, server
power, PUE and energy per delivered server-hour of work (:mod:`commodel.ops.pooling`).
"""

from __future__ import annotations

from typing import Annotated

import numpy as np
from pydantic import Field

from commodel.hardware import cluster as make_cluster
from commodel.hardware import default_db
from commodel.ops.energy import node_power_W
from commodel.ops.pooling import JobMix, facility_pue, pool_utilization, remote_slowdown, scheduling_overhead
from commodel.pricing.evaluator import Evaluator
from commodel.pricing.job import LINK, SYSTEM, Choices, Job
from commodel.pricing.table import Columns, blank_outputs, flags, groups, numbers
from commodel.workloads.model.catalog import job_mix, job_mixes


class PoolingJob(Job):
    """A cluster of one system pooled at a granularity, under a scheduler's backfill depth."""

    noun = "disaggregation"
    pool_servers: int = Field(ge=1, description="Servers per pool (1: server-bound).")
    backfill: int = Field(1, ge=1, description="Jobs the scheduler looks ahead of the first waiting one.")
    job_mix: Annotated[str, Choices("job mix", job_mixes)] = Field(
        "shared-ai", description="Job mix (workloads/job_mixes/)."
    )
    system: Annotated[str, SYSTEM] = Field("dgx-h100", description="System (node) name of the servers.")
    servers_per_chassis: int = Field(2, ge=1, description="Servers a chassis fabric joins.")
    servers_per_rack: int = Field(8, ge=1, description="Servers a rack fabric joins.")
    chassis_fabric: Annotated[str, LINK] = Field("pcie5", description="Link inside a chassis.")
    rack_fabric: Annotated[str, LINK] = Field("pcie6", description="Link inside a rack.")
    cluster_fabric: Annotated[str, LINK] = Field("roce-400g", description="Link across racks.")
    local_memory_GBps: float = Field(
        614.0, gt=0, le=1e5, description="A server's own memory bandwidth, GB/s."
    )
    sensitivity: float = Field(0.01, ge=0, description="Slowdown per unit of remote-access deficit.")
    scan_us: float = Field(20.0, ge=0, description="Scheduler time per candidate device, us.")
    attach_s: float = Field(2.0, ge=0, description="Seconds to attach pooled devices to a job.")
    power_down: bool = Field(
        False,
        description="Pooled GPUs no job holds are powered down (a server-bound GPU idles beside its "
        "server's jobs).",
    )


OUTPUTS = (
    "level", "util_gpus", "util_cores", "util_memory", "util_mean", "util_gain_pct", "sched_overhead_pct",
    "remote_slowdown_pct", "server_power_kW", "it_load", "pue", "pue_delta", "energy_kWh_per_work", "valid",
)  # fmt: skip
LEVELS = ("server", "chassis", "rack", "multi-rack")


def _level(pool: np.ndarray, chassis: np.ndarray, rack: np.ndarray) -> np.ndarray:
    return np.select([pool <= 1, pool <= chassis, pool <= rack], list(LEVELS[:3]), LEVELS[3])


def price_pooling(columns: Columns) -> Columns:
    """The ``disaggregation`` evaluator's pricing of a table of pooled clusters held as columns."""
    out = blank_outputs(len(columns["pool_servers"]), OUTPUTS, text=("level",))
    db = default_db()
    for key, rows in groups(columns, PoolingJob.group_keys()):
        spec = job_mix(key["job_mix"])
        mix = JobMix(np.array([c.share for c in spec.classes]), np.array([c.demand for c in spec.classes]))
        c = make_cluster(key["system"])
        full = float(node_power_W(c, 1.0))
        gpu_column = spec.resources.index("gpus") if "gpus" in spec.resources else None
        sub = {name: np.asarray(values)[rows] for name, values in columns.items()}
        pool = numbers(sub["pool_servers"])
        backfill = numbers(sub["backfill"])
        util = np.array(
            [pool_utilization(p, b, spec.server, mix) for p, b in zip(pool, backfill, strict=True)]
        )
        base = np.array([pool_utilization(1, b, spec.server, mix) for b in backfill])
        busy, base_busy = (
            u[:, gpu_column] if gpu_column is not None else u.mean(axis=1) for u in (util, base)
        )
        level = _level(pool, numbers(sub["servers_per_chassis"]), numbers(sub["servers_per_rack"]))
        fabrics = {name: db.link(key[f"{name}_fabric"]) for name in ("chassis", "rack", "cluster")}
        by_level = {"chassis": fabrics["chassis"], "rack": fabrics["rack"], "multi-rack": fabrics["cluster"]}
        fabric_Bps = np.array(
            [
                by_level[lv].bandwidth.value * by_level[lv].efficiency.value if lv != "server" else np.inf
                for lv in level
            ]
        )
        port_W = np.array([(by_level[lv].endpoint_power.value if lv != "server" else 0.0) for lv in level])
        ports = spec.server[gpu_column] + 2 if gpu_column is not None else 2
        slowdown = remote_slowdown(
            pool,
            numbers(sub["sensitivity"]),
            numbers(sub["local_memory_GBps"]) * 1e9,
            fabric_Bps,
        )
        overhead = scheduling_overhead(
            pool, backfill, spec.devices_per_job, numbers(sub["scan_us"]) * 1e-6,
            numbers(sub["attach_s"]), spec.job_hours * 3600,
        )  # fmt: skip
        asleep = np.where(flags(sub["power_down"]) & (pool > 1), c.gpus_per_node * (1 - busy), 0.0)
        power = node_power_W(c, busy) - asleep * c.gpu.idle_power.value + ports * port_W
        base_power = node_power_W(c, base_busy)
        pue = facility_pue(power / full, base_power / full)
        mean = util.mean(axis=1)
        values = {
            "level": level,
            "util_gpus": util[:, gpu_column] if gpu_column is not None else np.nan,
            "util_cores": util[:, spec.resources.index("cores")] if "cores" in spec.resources else np.nan,
            "util_memory": util[:, spec.resources.index("memory_TB")]
            if "memory_TB" in spec.resources
            else np.nan,
            "util_mean": mean,
            "util_gain_pct": 100 * (mean / base.mean(axis=1) - 1),
            "sched_overhead_pct": 100 * overhead,
            "remote_slowdown_pct": 100 * slowdown,
            "server_power_kW": power / 1e3,
            "it_load": power / full,
            "pue": pue,
            "pue_delta": pue - facility_pue(base_power / full, base_power / full),
            "energy_kWh_per_work": pue * power * (1 + slowdown) / mean / 1e3,
            "valid": np.ones(len(rows), dtype=bool),
        }
        for name, value in values.items():
            out[name][rows] = value
    return out


def disaggregation() -> Evaluator:
    return Evaluator(
        "disaggregation",
        "a cluster pooled at a granularity: utilization, scheduling overhead, remote access, PUE, energy",
        PoolingJob,
        OUTPUTS,
        price_pooling,
        text=("level",),
    )
