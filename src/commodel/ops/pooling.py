"""Resource pooling and disaggregation: stranding, scheduling overhead, remote access and energy.

A cluster of servers, each a bundle of resources (GPUs, CPU cores, memory), is divided into pools of
``pool_servers`` servers. Inside a pool, resources are disaggregated: a job may take GPUs, cores and
memory from any server of the pool. A pool of one server is the conventional, server-bound cluster.

- **Stranding** (:func:`pool_utilization`): pools are filled with jobs drawn from a stated mix until
  ``backfill`` consecutive jobs in a row do not fit (the scheduler has looked that deep into its
  queue); utilization = used / capacity per resource. Bigger pools average out the mix and lose less
  to the last job that does not fit. Vectorized over many pools at once, seeded.
- **Scheduling overhead**: a decision scans ``pool_servers`` servers for each of ``backfill``
  candidates (``scan_s`` each), and composing a job attaches every device that is not on its home
  server (``attach_s`` each, a fraction ``1 - 1/pool_servers`` of its devices); relative to the mean
  job duration.
- **Remote access**: the share ``sensitivity`` of a job's time that is bound by traffic to pooled
  resources runs at the pool fabric's bandwidth instead of the local one:
  ``slowdown = sensitivity x remote_share x (B_local / B_fabric - 1)``.
- **Energy**: server power at utilization u (:func:`commodel.ops.energy.node_power_W`) plus the pool
  fabric's power, per unit of delivered work: ``PUE x P(u) x (1 + slowdown) / u_mean``.
- **PUE**: ``1 + a + b / L`` with L the IT load as a share of the servers' full power; ``a`` is the
  overhead that grows with load, ``b`` the fixed part (see :func:`facility_pue`).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache

import numpy as np
from numpy.typing import ArrayLike

#: The measured PUE of Google's fleet (row pue-google, 1.10): the load-proportional overhead ``a`` of
#: an efficient facility near full load.
PROPORTIONAL_OVERHEAD = 0.10

#: The industry-average PUE (row pue-industry, 1.58), taken as the server-bound baseline: it fixes
#: the constant overhead ``b = (1.58 - 1 - a) x L_baseline`` of :func:`facility_pue`.
BASELINE_PUE = 1.58


@dataclass(frozen=True)
class JobMix:
    """Job classes: their shares and the resources (one column per resource) each job asks for."""

    shares: np.ndarray
    demands: np.ndarray

    def __post_init__(self) -> None:
        if not np.isclose(self.shares.sum(), 1.0):
            raise ValueError(f"job shares must add up to 1, they add up to {self.shares.sum():g}")


@cache
def _utilization(
    pool_servers: int, backfill: int, bundle: tuple, shares: tuple, demands: tuple, pools: int, seed: int
) -> np.ndarray:
    rng = np.random.default_rng(seed)
    capacity = pool_servers * np.asarray(bundle, dtype=float)
    demand = np.asarray(demands, dtype=float)
    used = np.zeros((pools, len(bundle)))
    misses = np.zeros(pools, dtype=int)
    active = np.ones(pools, dtype=bool)
    while active.any():
        job = demand[rng.choice(len(shares), size=pools, p=np.asarray(shares))]
        fits = active & np.all(used + job <= capacity + 1e-9, axis=1)
        used[fits] += job[fits]
        misses = np.where(fits, 0, misses + active)
        active &= misses < backfill
    return (used / capacity).mean(axis=0)


def pool_utilization(
    pool_servers: int, backfill: int, bundle: ArrayLike, mix: JobMix, pools: int = 64, seed: int = 0
) -> np.ndarray:
    """Mean utilization of each resource when pools of ``pool_servers`` servers are saturated."""
    return _utilization(
        int(pool_servers), int(backfill), tuple(np.asarray(bundle, dtype=float)), tuple(mix.shares),
        tuple(map(tuple, mix.demands)), int(pools), int(seed),
    )  # fmt: skip


def remote_share(pool_servers: ArrayLike) -> np.ndarray:
    """Expected share of a job's devices away from its home server: ``1 - 1 / pool_servers``."""
    return 1.0 - 1.0 / np.asarray(pool_servers, dtype=float)


def scheduling_overhead(
    pool_servers: ArrayLike,
    backfill: ArrayLike,
    devices_per_job: float,
    scan_s: float,
    attach_s: float,
    job_s: float,
) -> np.ndarray:
    """Scheduling and composition time as a share of the mean job duration."""
    decide = scan_s * np.asarray(pool_servers, dtype=float) * np.asarray(backfill, dtype=float)
    compose = attach_s * devices_per_job * remote_share(pool_servers)
    return (decide + compose) / job_s


def remote_slowdown(
    pool_servers: ArrayLike, sensitivity: float, local_Bps: float, fabric_Bps: ArrayLike
) -> np.ndarray:
    """Fractional slowdown of jobs whose pooled resources sit across the pool fabric."""
    return (
        sensitivity
        * remote_share(pool_servers)
        * np.maximum(local_Bps / np.asarray(fabric_Bps, dtype=float) - 1, 0)
    )


def facility_pue(load: ArrayLike, baseline_load: float) -> np.ndarray:
    """PUE at IT load ``load`` (share of full power) of a facility whose server-bound baseline runs
    at :data:`BASELINE_PUE` at ``baseline_load``: ``1 + a + b / load`` with
    ``b = (BASELINE_PUE - 1 - a) x baseline_load``."""
    b = (BASELINE_PUE - 1 - PROPORTIONAL_OVERHEAD) * baseline_load
    return 1 + PROPORTIONAL_OVERHEAD + b / np.asarray(load, dtype=float)
