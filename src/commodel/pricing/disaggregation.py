"""The ``disaggregation`` evaluator: a cluster pooled at a given granularity, per row.

Rows give a pool size (servers per pool) and a scheduler backfill depth; the pool's fabric follows
from its size (chassis, rack or multi-rack). Outputs: utilization per resource and its gain over the
server-bound cluster with the same scheduler, scheduling overhead, remote-access slowdown, server
power, PUE and energy per delivered server-hour of work (:mod:`commodel.ops.pooling`).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from commodel.hardware import cluster as make_cluster
from commodel.hardware import default_db
from commodel.ops.energy import node_power_W
from commodel.ops.pooling import JobMix, facility_pue, pool_utilization, remote_slowdown, scheduling_overhead
from commodel.pricing.evaluator import Evaluator, blank_outputs, categorical_groups
from commodel.workloads.catalog import job_mix

INPUTS: dict[str, object] = {
    "pool_servers": None,
    "backfill": 1,
    "job_mix": "shared-ai",
    "system": "dgx-h100",
    "servers_per_chassis": 2,
    "servers_per_rack": 8,
    "chassis_fabric": "pcie5",
    "rack_fabric": "pcie6",
    "cluster_fabric": "roce-400g",
    "local_memory_GBps": 614.0,
    "sensitivity": 0.01,
    "scan_us": 20.0,
    "attach_s": 2.0,
}
OUTPUTS = (
    "level", "util_gpus", "util_cores", "util_memory", "util_mean", "util_gain_pct", "sched_overhead_pct",
    "remote_slowdown_pct", "server_power_kW", "it_load", "pue", "pue_delta", "energy_kWh_per_work", "valid",
)  # fmt: skip
LEVELS = ("server", "chassis", "rack", "multi-rack")


def _level(pool: np.ndarray, chassis: np.ndarray, rack: np.ndarray) -> np.ndarray:
    return np.select([pool <= 1, pool <= chassis, pool <= rack], list(LEVELS[:3]), LEVELS[3])


def evaluate(frame: pd.DataFrame) -> pd.DataFrame:
    out = blank_outputs(len(frame), OUTPUTS, text=("level",))
    db = default_db()
    for key, rows in categorical_groups(
        frame, ["job_mix", "system", "chassis_fabric", "rack_fabric", "cluster_fabric"]
    ):
        spec = job_mix(key["job_mix"])
        mix = JobMix(np.array([c.share for c in spec.classes]), np.array([c.demand for c in spec.classes]))
        c = make_cluster(key["system"])
        full = float(node_power_W(c, 1.0))
        gpu_column = spec.resources.index("gpus") if "gpus" in spec.resources else None
        sub = frame.iloc[rows]
        pool = sub["pool_servers"].to_numpy(dtype=float)
        backfill = sub["backfill"].to_numpy(dtype=float)
        util = np.array(
            [pool_utilization(p, b, spec.server, mix) for p, b in zip(pool, backfill, strict=True)]
        )
        base = np.array([pool_utilization(1, b, spec.server, mix) for b in backfill])
        busy, base_busy = (
            u[:, gpu_column] if gpu_column is not None else u.mean(axis=1) for u in (util, base)
        )
        level = _level(pool, sub["servers_per_chassis"].to_numpy(), sub["servers_per_rack"].to_numpy())
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
            sub["sensitivity"].to_numpy(dtype=float),
            sub["local_memory_GBps"].to_numpy(dtype=float) * 1e9,
            fabric_Bps,
        )
        overhead = scheduling_overhead(
            pool, backfill, spec.devices_per_job, sub["scan_us"].to_numpy(dtype=float) * 1e-6,
            sub["attach_s"].to_numpy(dtype=float), spec.job_hours * 3600,
        )  # fmt: skip
        power = node_power_W(c, busy) + ports * port_W
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
    return frame.assign(**out)


def disaggregation() -> Evaluator:
    return Evaluator(
        "disaggregation",
        "a cluster pooled at a granularity: utilization, scheduling overhead, remote access, PUE, energy",
        INPUTS,
        OUTPUTS,
        evaluate,
    )
