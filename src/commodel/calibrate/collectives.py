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

The fit minimizes the mean |log-time error| of the rows, which it reports beside the median |error|
(:func:`calibrate`), and keeps the priors unless it lowers the one without raising the other. A
parameter the data cannot determine (a 1% change moves no row's time by 0.01%, nor, from a token prior
such as an unstated net plugin latency, a step of 0.1% of its bounds' width) is not fit: it keeps
its prior, and the report says so. The result is a hardware overlay (:mod:`commodel.hardware.loader`)
that gives the system its own copies of its two links with the fitted values, so other systems that
share the built-in links are untouched; each fitted value states the ``range`` its residuals leave it
in, which ``--uncertainty`` and sweep bands then propagate (:mod:`commodel.hardware.uncertain`).
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable
from dataclasses import dataclass
from datetime import date

import numpy as np
import pandas as pd

from commodel.calibrate.fit import determined, fit, mean_log_error
from commodel.calibrate.nccl_tests import NcclTestsLog
from commodel.calibrate.overlay import residual_range, system_overlay
from commodel.comm.calls import resolve_layout, run
from commodel.comm.fabric import Fabric, fabric_of, nvls_channel, nvls_rate
from commodel.errors import CommodelError
from commodel.hardware.cluster import Cluster, cluster
from commodel.hardware.loader import default_db


@dataclass(frozen=True)
class Parameter:
    """One calibratable constant (a :class:`~commodel.calibrate.fit.Bounded` with where it lives):
    which record holds it (``side``: the scale_up or scale_out link, or the ``system`` itself) and at
    which field (dotted in a system), its prior and bounds, and how it sets the fabric the cost model
    reads."""

    name: str
    side: str  # "scale_up" or "scale_out" (a link), or "system"
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
    channel = nvls_channel(where)
    if fab.nvls_Bps is not None and channel is not None:
        own = where.system.scale_up.nvls_channel_bandwidth is not None  # the system's switches set it
        params += [
            Parameter("NVLS channel rate", *(("system", "scale_up.nvls_channel_bandwidth") if own
                                             else ("scale_up", "nvls_channel_bandwidth")),
                      channel.value, (1e9, 100e9),
                      lambda f, v: replace(f, nvls_Bps=nvls_rate(v, f.arch, links * up.bandwidth.value))),
            Parameter("NVLS zero-copy latency", "scale_up", "nvls_latency",
                      up.nvls_latency.value if up.nvls_latency else 5e-6, (0.5e-6, 100e-6),
                      lambda f, v: replace(f, nvls_latency_s=v if f.nvls_latency_s is not None else None)),
        ]  # fmt: skip
    return params


@dataclass(frozen=True)
class Calibration:
    """The fit: each parameter's prior and fitted value (None where the data cannot determine it, or
    where no fit beats the priors), every row's error before and after, and the parameters the data
    determine."""

    system: str
    fitted: dict[str, float | None]
    prior: dict[str, float]
    rows: pd.DataFrame
    params: list[Parameter]
    determined: tuple[str, ...] = ()

    @property
    def median_before_pct(self) -> float:
        return float(self.rows.error_before_pct.abs().median())

    @property
    def median_after_pct(self) -> float:
        return float(self.rows.error_after_pct.abs().median())

    def mean_log_error(self, when: str) -> float:
        """The fit's objective (:func:`mean_log_error`) ``before`` or ``after`` the fit."""
        return mean_log_error(np.log1p(self.rows[f"error_{when}_pct"].to_numpy() / 100))

    def overlay(self, where: Cluster, logs: list[NcclTestsLog]) -> dict:
        """The hardware overlay (:func:`commodel.calibrate.overlay.system_overlay`): the system's own
        copies of its links with the fitted fields, each with the range the rows' residuals leave it
        in; empty when nothing was fit."""
        names = ", ".join(log.path.name for log in logs)
        source = (
            f"calibrated: commodel calibrate nccl-tests {names} ({len(self.rows)} rows; median |error| "
            f"{self.median_before_pct:.1f}% -> {self.median_after_pct:.1f}%; {date.today().isoformat()})"
        )
        links = {"scale_up": where.system.scale_up.link, "scale_out": where.system.scale_out.link}
        speed = (
            1 + self.rows.error_after_pct.to_numpy() / 100
        )  # model time over measured: reality's speed over the model's
        changes = {
            ("system", self.system, tuple(p.field.split("."))) if p.side == "system" else ("link", links[p.side], (p.field,)): value
            for p in self.params
            if (value := self.fitted[p.name])
        }  # fmt: skip
        ranges = {key: residual_range(v, speed, key[2][-1].endswith("latency")) for key, v in changes.items()}
        return system_overlay(default_db(), self.system, changes, source, ranges)


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


#: A GPU model token in a device name: H100, A100, B300, GB200, MI300X, A40.
_GPU_TOKEN = re.compile(r"\b(G?[A-Z]{1,2}\d{2,3}X?)\b")


def _check_log(log: NcclTestsLog, where: Cluster, gpus: int | None, nodes: int | None) -> None:
    """A --gpus, --nodes or --system that contradicts what the log itself records is an error."""
    if gpus and log.ranks and gpus != log.ranks:
        raise CommodelError(f"{log.path}: the log ran on {log.ranks} ranks; --gpus {gpus} contradicts it")
    if nodes and log.nodes and nodes != log.nodes:
        raise CommodelError(f"{log.path}: the log ran on {log.nodes} nodes; --nodes {nodes} contradicts it")
    expected = where.system.gpu.split("-")[0].upper()
    seen = {m[1] for name in log.devices if (m := _GPU_TOKEN.search(name.upper()))}
    if seen and expected not in seen:
        raise CommodelError(
            f"{log.path}: the log ran on {', '.join(sorted(seen))} GPUs but --system {where.name} has "
            f"{expected}; calibrate the system the log ran on"
        )


#: How far a run's busbw may exceed what a GPU puts on its wires. busbw counts the bytes a ring moves
#: on each GPU's links, ``2 (n - 1) / n`` of the buffer for an all-reduce; an in-network reduction
#: (NVLS, SHARP) moves each byte once each way, so a run's busbw stays below twice the wire.
IN_NETWORK_GAIN = 2.0


def _check_wire(log: NcclTestsLog, where: Cluster, ranks: int, fab: Fabric) -> None:
    """A log whose busbw exceeds :data:`IN_NETWORK_GAIN` x a GPU's line rate (its scale-up links at the
    call's GPUs per domain, and its share of the domain's NICs) is no run of these GPUs: an error."""
    g = min(ranks, where.domain_gpus)
    wire = float(fab.up_Bps(g)) * fab.link_line_Bps / fab.link_Bps
    wire += float(fab.net_Bps(g)) / g * fab.nic_line_Bps / fab.nic_Bps
    fastest = float(log.rows.busbw_GBps.max()) * 1e9
    if fastest > IN_NETWORK_GAIN * wire:
        raise CommodelError(
            f"{log.path}: its busbw reaches {fastest / 1e9:,.0f} GB/s, {fastest / wire:.1f}x the {wire / 1e9:,.0f} "
            f"GB/s line rate a GPU of {where.name} puts on its links and NICs (an in-network reduction at "
            f"most doubles busbw): not a run these GPUs can make (check the log's units and --system)"
        )


def _layout(log: NcclTestsLog, system: str, gpus: int | None, nodes: int | None) -> tuple[Cluster, int]:
    """The cluster and GPU count a log ran on, checked against what the log records."""
    ranks = gpus or log.ranks
    if ranks is None:
        raise CommodelError(f"{log.path}: the log does not say how many GPUs ran it; give --gpus")
    where = cluster(system, 1)
    _check_log(log, where, gpus, nodes)
    count = nodes or log.nodes or -(-ranks // where.gpus_per_node)
    where = cluster(system, max(count, -(-ranks // where.gpus_per_node)))
    try:
        resolve_layout(where, ranks)  # a GPU count the system cannot hold is an error here
    except CommodelError as exc:
        raise CommodelError(f"{log.path}: {exc}") from None
    return where, ranks


def _check_run_settings(logs: list[NcclTestsLog], launch: str | None, gpus_per_process: int | None) -> None:
    """``--launch`` and ``--gpus-per-process`` as the logs record them (nccl-tests' -G and -g), where
    they do; a process drives a whole number of a log's GPUs."""
    for log in logs:
        if launch is not None and log.graph is not None and (launch == "graph") != log.graph:
            said = "replayed CUDA graphs (graph: 1)" if log.graph else "launched each call (graph: 0)"
            raise CommodelError(f"{log.path.name}: the run {said}; --launch {launch} says otherwise")
        recorded = log.gpus_per_process
        if gpus_per_process is not None and recorded is not None and gpus_per_process != recorded:
            raise CommodelError(
                f"{log.path.name}: each process drove {recorded} GPU(s) (nThread x nGpus); "
                f"--gpus-per-process {gpus_per_process} says otherwise"
            )
        if gpus_per_process is not None and log.ranks and log.ranks % gpus_per_process:
            raise CommodelError(
                f"{log.path.name}: --gpus-per-process {gpus_per_process} does not divide its {log.ranks} ranks"
            )


def _movable(params: list[Parameter], residuals: Callable, logs: list[NcclTestsLog]) -> list[Parameter]:
    """The constants the logs determine (:func:`~commodel.calibrate.fit.determined`); more of them
    than the logs have distinct sizes is an error (one size cannot fit a latency and a rate)."""
    movable = [params[i] for i in determined(params, residuals)]
    points = len({(i, size) for i, log in enumerate(logs) for size in log.rows.size_bytes})
    if len(movable) > points:
        raise CommodelError(
            f"the logs hold {points} distinct size(s), too few to fit the {len(movable)} constants they move "
            f"({', '.join(p.name for p in movable)}); run a sweep of sizes (nccl-tests -b 8 -e 8G -f 2)"
        )
    return movable


def calibrate(
    logs: list[NcclTestsLog],
    system: str,
    gpus: int | None = None,
    nodes: int | None = None,
    launch: str | None = None,
    gpus_per_process: int | None = None,
    algo: str = "auto",
) -> Calibration:
    """Fit ``system``'s calibratable constants to ``logs`` (out-of-place times); ``algo`` is the
    algorithm the runs forced where a log does not say (``auto``: NCCL's own choice). ``launch``
    (stream or graph) and ``gpus_per_process`` default to what the first log records.

    The fit is :func:`commodel.calibrate.fit.fit` on the rows' log-time errors: it never makes the
    logs' own median error worse."""
    if not logs:
        raise CommodelError("give at least one nccl-tests log")
    layouts = [_layout(log, system, gpus, nodes) for log in logs]
    _check_run_settings(logs, launch, gpus_per_process)
    launch = launch or ("graph" if logs[0].graph else "stream")
    base = fabric_of(
        layouts[0][0], launch=launch, gpus_per_process=gpus_per_process or logs[0].gpus_per_process or 1
    )
    for log, (where, ranks) in zip(logs, layouts, strict=True):
        _check_wire(log, where, ranks, base)
    params = parameters(layouts[0][0], base)
    measured = np.concatenate([log.rows.time_s.to_numpy() for log in logs])

    def fabric(values: np.ndarray, chosen: list[Parameter]) -> Fabric:
        fab = base
        for p, v in zip(chosen, values, strict=True):
            fab = p.apply(fab, float(v))
        return fab

    def residuals(values: np.ndarray, chosen: list[Parameter]) -> np.ndarray:
        return np.log(_model_times(logs, layouts, fabric(values, chosen), algo) / measured)

    movable = _movable(params, lambda values: residuals(values, params), logs)
    result = fit(movable, lambda values: residuals(values, movable))
    fitted: dict[str, float | None] = {p.name: None for p in params}
    if result.values is not None:
        fitted.update({p.name: float(v) for p, v in zip(movable, result.values, strict=True)})
    start, after = result.before, result.after
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
    prior_values = {p.name: p.prior for p in params}
    return Calibration(system, fitted, prior_values, rows, params, tuple(p.name for p in movable))
