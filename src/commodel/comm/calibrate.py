"""Fit a system's calibratable communication constants to the user's own nccl-tests logs.

Only the constants the project documents as calibrated (docs/models.md) are fit, each with bounds:

==========================  =======================================  ==================
parameter                   record field                             what determines it
==========================  =======================================  ==================
NVLink payload efficiency   scale-up link ``efficiency``             large in-domain rings and trees
NVLS channel rate           scale-up link ``nvls_channel_bandwidth``  large NVLS calls
Simple ring step latency    scale-up link ``ring_step_latency``      mid-size ring calls
NVLS zero-copy latency      scale-up link ``nvls_latency``           small NVLS calls in CUDA graphs
NIC efficiency              scale-out link ``efficiency``            large multi-domain calls
net plugin latency          scale-out link ``net_plugin_latency``    small multi-domain calls
==========================  =======================================  ==================

The fit minimizes the squared log-time errors of every row (scipy ``least_squares`` with bounds). A
parameter the data cannot determine (a 1% change moves no row's time by 0.01%) is not fit: it keeps
its prior, and the report says so. The result is a hardware overlay (:mod:`commodel.hardware.loader`)
that gives the system its own copies of its two links with the fitted values, so other systems that
share the built-in links are untouched; each fitted value states the ``range`` its residuals leave it
in, which ``--uncertainty`` and sweep bands then propagate (:mod:`commodel.hardware.uncertain`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from datetime import date

import numpy as np
import pandas as pd
from scipy.optimize import least_squares

from commodel.comm.calls import resolve_layout, run
from commodel.comm.fabric import Fabric, fabric_of, nvls_rate
from commodel.comm.nccl_tests import NcclTestsLog
from commodel.errors import CommodelError
from commodel.hardware.cluster import Cluster, cluster

#: A 1% change in a parameter must move some row's time by at least this share to be fit.
IDENTIFIABLE = 1e-4


@dataclass(frozen=True)
class Parameter:
    """One calibratable constant: which link record and field holds it, its prior and bounds, and how
    it sets the fabric the cost model reads."""

    name: str
    side: str  # "scale_up" or "scale_out"
    field: str
    prior: float
    bounds: tuple[float, float]
    apply: Callable[[Fabric, float], Fabric]


def parameters(where: Cluster, fab: Fabric) -> list[Parameter]:
    """The calibratable constants of a cluster, at their current (prior) values."""
    up, out = where.scale_up, where.scale_out
    links = where.system.scale_up.links_per_gpu.value
    replace = dataclasses.replace
    params = [
        Parameter("NVLink payload efficiency", "scale_up", "efficiency", up.efficiency.value, (0.2, 1.0),
                  lambda f, v: replace(f, link_Bps=f.link_line_Bps * v)),
        Parameter("Simple ring step latency", "scale_up", "ring_step_latency",
                  fab.ring_step_s or 3.4e-6, (0.2e-6, 100e-6), lambda f, v: replace(f, ring_step_s=v)),
        Parameter("NIC efficiency", "scale_out", "efficiency", out.efficiency.value, (0.2, 1.0),
                  lambda f, v: replace(f, nic_Bps=f.nic_line_Bps * v)),
        Parameter("net plugin latency", "scale_out", "net_plugin_latency",
                  max(fab.net_latency_s, 0.1e-6), (0.01e-6, 500e-6), lambda f, v: replace(f, net_latency_s=v)),
    ]  # fmt: skip
    if fab.nvls_Bps is not None and up.nvls_channel_bandwidth is not None:
        params += [
            Parameter("NVLS channel rate", "scale_up", "nvls_channel_bandwidth",
                      up.nvls_channel_bandwidth.value, (1e9, 100e9),
                      lambda f, v: replace(f, nvls_Bps=nvls_rate(v, f.arch, links * up.bandwidth.value))),
            Parameter("NVLS zero-copy latency", "scale_up", "nvls_latency",
                      up.nvls_latency.value if up.nvls_latency else 5e-6, (0.5e-6, 100e-6),
                      lambda f, v: replace(f, nvls_latency_s=v if f.nvls_latency_s is not None else None)),
        ]  # fmt: skip
    return params


@dataclass(frozen=True)
class Calibration:
    """The fit: each parameter's prior and fitted value (or None where the data cannot determine it),
    and every row's error before and after."""

    system: str
    fitted: dict[str, float | None]
    prior: dict[str, float]
    rows: pd.DataFrame
    params: list[Parameter]

    def overlay(self, where: Cluster, logs: list[NcclTestsLog]) -> dict:
        """The hardware overlay: the system's own copies of its links with the fitted fields."""
        names = ", ".join(log.path.name for log in logs)
        before, after = self.rows.error_before_pct.abs().median(), self.rows.error_after_pct.abs().median()
        source = (
            f"calibrated: commodel calibrate nccl-tests {names} ({len(self.rows)} rows; median |error| "
            f"{before:.1f}% -> {after:.1f}%; {date.today().isoformat()})"
        )
        links, systems = {}, {"scale_up": {}, "scale_out": {}}
        for side, record in (("scale_up", where.scale_up), ("scale_out", where.scale_out)):
            changed = {
                p.field: self.fitted[p.name] for p in self.params if p.side == side and self.fitted[p.name]
            }
            if not changed:
                continue
            name = f"{self.system}-{side.replace('_', '-')}"
            fields = record.model_dump(exclude_none=True)
            for field, value in changed.items():
                fields[field] = {
                    "value": float(value),
                    "source": source,
                    "range": self.residual_range(value, field),
                }
            links[name] = fields
            systems[side]["link"] = name
        system = {side: table for side, table in systems.items() if table}
        return {"links": links, "systems": {self.system: system}} if links else {}

    def residual_range(self, value: float, field: str) -> list[float]:
        """The range the fit's residuals leave a fitted value in: the p10-p90 of reality over the
        model across the rows (inverted for a latency), widened to hold the value."""
        low, high = np.percentile(1 + self.rows.error_after_pct.to_numpy() / 100, (10, 90))
        if field.endswith("latency"):
            low, high = 1 / high, 1 / low
        return [float(min(value * low, value)), float(max(value * high, value))]


def _model_times(logs: list[NcclTestsLog], layouts: list, fab: Fabric, algo: str) -> np.ndarray:
    """The model's time of every row: NCCL's choice, or the algorithm a log forced (NCCL_ALGO)."""
    return np.concatenate(
        [
            run(
                log.op, where, log.rows.size_bytes.to_numpy(float), gpus, algo=log.algo or algo, fab=fab
            ).time_s.to_numpy()
            for log, (where, gpus) in zip(logs, layouts, strict=True)
        ]
    )


def calibrate(
    logs: list[NcclTestsLog],
    system: str,
    gpus: int | None = None,
    nodes: int | None = None,
    launch: str = "stream",
    gpus_per_process: int = 1,
    algo: str = "auto",
) -> Calibration:
    """Fit ``system``'s calibratable constants to ``logs`` (out-of-place times); ``algo`` is the
    algorithm the runs forced where a log does not say (``auto``: NCCL's own choice)."""
    if not logs:
        raise CommodelError("give at least one nccl-tests log")
    layouts = []
    for log in logs:
        ranks = gpus or log.ranks
        if ranks is None:
            raise CommodelError(f"{log.path}: the log does not say how many GPUs ran it; give --gpus")
        where = cluster(system, 1)
        count = nodes or log.nodes or -(-ranks // where.gpus_per_node)
        where = cluster(system, max(count, -(-ranks // where.gpus_per_node)))
        resolve_layout(where, ranks)  # a GPU count the system cannot hold is an error here
        layouts.append((where, ranks))
    base = fabric_of(layouts[0][0], launch=launch, gpus_per_process=gpus_per_process)
    params = parameters(layouts[0][0], base)
    measured = np.concatenate([log.rows.time_s.to_numpy() for log in logs])

    def fabric(values: np.ndarray, chosen: list[Parameter]) -> Fabric:
        fab = base
        for p, v in zip(chosen, values, strict=True):
            fab = p.apply(fab, float(v))
        return fab

    def residuals(values: np.ndarray, chosen: list[Parameter]) -> np.ndarray:
        return np.log(_model_times(logs, layouts, fabric(values, chosen), algo) / measured)

    prior = np.array([p.prior for p in params])
    start = residuals(prior, params)
    movable = []
    for i, p in enumerate(params):
        nudged = prior.copy()
        nudged[i] = min(max(prior[i] * 1.01, p.bounds[0]), p.bounds[1])
        if nudged[i] == prior[i]:
            nudged[i] = prior[i] * 0.99
        if np.max(np.abs(residuals(nudged, params) - start)) >= IDENTIFIABLE:
            movable.append(p)
    fitted: dict[str, float | None] = {p.name: None for p in params}
    values = np.array([p.prior for p in movable])
    if movable:
        lo, hi = (np.array([p.bounds[k] for p in movable]) for k in (0, 1))
        result = least_squares(
            lambda x: residuals(np.exp(x), movable), np.log(np.clip(values, lo, hi)),
            bounds=(np.log(lo), np.log(hi)), x_scale=1.0,
        )  # fmt: skip
        values = np.exp(result.x)
        fitted.update({p.name: float(v) for p, v in zip(movable, values, strict=True)})
    after = residuals(values, movable) if movable else start
    rows = pd.concat(
        [
            log.rows.assign(log=log.path.name, op=log.op)[["log", "op", "size_bytes", "time_s"]]
            for log in logs
        ],
        ignore_index=True,
    ).assign(
        error_before_pct=100 * np.expm1(start),
        error_after_pct=100 * np.expm1(after),
    )
    return Calibration(system, fitted, {p.name: p.prior for p in params}, rows, params)
