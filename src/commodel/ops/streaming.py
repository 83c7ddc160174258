"""Fault tolerance of a real-time producer-consumer stream: synchronous checkpoint/restart against
asynchronous checkpoints with progress-aware load redistribution (StreamGuard, Nguyen et al.,
arXiv:2606.30848).

A producer emits ``r`` items/s into ``W`` workers of ``mu`` items/s each, capacity ``K = W mu`` with
headroom ``h = K / r - 1 > 0``; each worker holds ``S`` bytes of state. A fault's **impact** is how
long the stream runs behind real time because of it (lost work redone, recovery, slowdown): the time
until its backlog is drained again (fluid model: a backlog ``Q`` drains at spare capacity).

- ``sync`` (checkpoint/restart): every ``tau`` (Daly's optimum for the pipeline's MTBF) all workers
  stop for ``C = S / B_storage``; fault-free overhead ``C / (tau + C)``. A crash rolls the whole
  pipeline back: down for ``R``, then the ``r (R + a)`` items (``a``: age of the checkpoint, uniform
  over ``tau``) drain at ``K - r``: impact ``R + (R + a) / h``. Partitions are fixed, so a worker
  slowed ``s``-fold for ``d`` seconds falls behind at ``r/W - mu/s`` and catches up at ``mu - r/W``.
- ``async`` (StreamGuard): each worker snapshots to memory, ``c = S / B_memory``, and persists in the
  background (``P = S / B_storage``), every ``tau_a = max(P, Daly(c))``: overhead ``c / (tau_a + c)``.
  A crash restarts only that worker; after detection ``delta`` its partitions move to the others
  (capacity ``K (W - 1) / W``), which load its persisted state (``P`` more) and redo its
  ``r / W (a + P)`` lost items and the ``r / W (delta + P)`` that queued, unless the worker's own
  restart (``R``, then its share's backlog drained at ``K - r``) comes first. A slowed worker's share
  moves by progress after ``delta``: its backlog then drains at ``K - mu (1 - 1/s) - r`` while the
  slowdown lasts (or grows, if that is negative) and at ``K - r`` after it.

Faults: crashes from a per-worker exponential or Weibull lifetime (shape ``k``, same mean), slowdowns
as a Poisson process per worker; over a horizon, seeded (:func:`fault_impacts`).
"""

from __future__ import annotations

from dataclasses import dataclass
from math import gamma

import numpy as np

from commodel.errors import CommodelError, unknown
from commodel.ops.goodput import daly_interval

POLICIES = ("sync", "async")
DISTRIBUTIONS = ("exponential", "weibull")


@dataclass(frozen=True)
class Stream:
    """A stream pipeline and its fault environment (seconds, bytes, items)."""

    workers: int
    rate: float  # items/s the producer emits
    headroom: float  # spare capacity share: K = (1 + headroom) r
    state_bytes: float  # per worker
    storage_Bps: float  # per worker
    memory_Bps: float  # per worker, snapshot to host memory
    restart_s: float
    detect_s: float
    mtbf_s: float  # per worker
    slowdowns_per_s: float  # per worker
    slowdown: float  # factor
    slowdown_s: float  # duration

    def __post_init__(self) -> None:
        for name in ("workers", "rate", "state_bytes", "storage_Bps", "memory_Bps", "mtbf_s", "slowdown_s"):
            if not getattr(self, name) > 0:
                raise CommodelError(
                    f"stream {name.replace('_', ' ')} must be positive, got {getattr(self, name)}"
                )
        if self.headroom <= 0:
            raise CommodelError(
                f"the workers must outrun the stream: headroom must be positive, got {self.headroom}"
            )
        if min(self.restart_s, self.detect_s, self.slowdowns_per_s) < 0 or self.slowdown < 1:
            raise CommodelError(
                "restart, detection and slowdown rates must be non-negative; a slowdown at least 1"
            )

    @property
    def capacity(self) -> float:
        return (1 + self.headroom) * self.rate

    @property
    def worker_rate(self) -> float:
        return self.capacity / self.workers


def checkpointing(policy: str, s: Stream) -> dict[str, float]:
    """Interval, blocking time per checkpoint, background write and fault-free overhead of ``policy``."""
    if policy not in POLICIES:
        raise unknown("checkpoint policy", policy, POLICIES)
    mtbf = s.mtbf_s / s.workers if policy == "sync" else s.mtbf_s
    write = s.state_bytes / s.storage_Bps
    stop = write if policy == "sync" else s.state_bytes / s.memory_Bps
    interval = float(daly_interval(stop, mtbf))
    if policy == "async":
        interval = max(interval, write)
    return {"interval_s": interval, "stop_s": stop, "write_s": 0.0 if policy == "sync" else write,
            "overhead": stop / (interval + stop)}  # fmt: skip


def crash_impact(policy: str, s: Stream, age: np.ndarray) -> np.ndarray:
    """Seconds behind real time after a crash whose last checkpoint is ``age`` seconds old."""
    ck = checkpointing(policy, s)
    if policy == "sync":
        return s.restart_s + (s.restart_s + age) / s.headroom
    share = s.rate / s.workers
    # whichever comes first resumes the partitions: the others take them after detection (loading the
    # persisted state), or the worker itself restarts and the whole pipeline drains its backlog
    restarted = s.restart_s + share * (age + ck["write_s"] + s.restart_s) / (s.capacity - s.rate)
    spare = s.capacity * (s.workers - 1) / s.workers - s.rate
    if spare <= 0:
        return np.asarray(restarted, dtype=float)
    moved = s.detect_s + share * (age + 2 * ck["write_s"] + s.detect_s) / spare
    return np.minimum(moved, restarted)


def slowdown_impact(policy: str, s: Stream) -> float:
    """Seconds behind real time after one worker runs ``slowdown``-fold slower for ``slowdown_s``."""
    share, mu = s.rate / s.workers, s.worker_rate
    slow = mu / s.slowdown
    if policy == "sync":  # fixed partitions: the slow worker's own share falls behind
        behind = max(share - slow, 0.0) * s.slowdown_s
        return s.slowdown_s + behind / (mu - share) if behind else 0.0
    # behind on its own share until detection; then its share moves by progress and the pipeline runs
    # at K - mu + mu/s until the slowdown ends, then at K: the backlog drains at whichever spare holds
    detected = min(s.detect_s, s.slowdown_s)
    behind = max(share - slow, 0.0) * detected
    if not behind:
        return 0.0
    slowed_spare = s.capacity - (mu - slow) - s.rate
    if slowed_spare > 0 and detected + behind / slowed_spare <= s.slowdown_s:
        return detected + behind / slowed_spare
    left = behind - slowed_spare * (s.slowdown_s - detected)  # grows when the slowed pipeline cannot keep up
    return s.slowdown_s + left / (s.capacity - s.rate)


def _lifetimes(rng: np.random.Generator, distribution: str, shape: float, mean: float, n: int) -> np.ndarray:
    if distribution == "exponential":
        return rng.exponential(mean, n)
    if distribution != "weibull":
        raise unknown("failure distribution", distribution, DISTRIBUTIONS)
    if shape <= 0:
        raise CommodelError(f"a Weibull shape must be positive, got {shape}")

    return mean / gamma(1 + 1 / shape) * rng.weibull(shape, n)


def fault_impacts(
    policy: str,
    s: Stream,
    horizon_s: float,
    distribution: str = "exponential",
    shape: float = 1.0,
    seed: int = 0,
) -> dict[str, float]:
    """Faults over ``horizon_s`` (renewal crashes per worker, Poisson slowdowns), seeded: their count
    and the total seconds the stream ran behind because of them, and the fault-free overhead."""
    rng = np.random.default_rng(seed)
    crashes = 0
    for _ in range(s.workers):
        t = np.cumsum(_lifetimes(rng, distribution, shape, s.mtbf_s, int(3 * horizon_s / s.mtbf_s) + 10))
        crashes += int(np.sum(t < horizon_s))
    slowdowns = int(rng.poisson(s.slowdowns_per_s * s.workers * horizon_s))
    ck = checkpointing(policy, s)
    ages = rng.uniform(0, ck["interval_s"], crashes)
    crash = float(np.sum(crash_impact(policy, s, ages)))
    slow = slowdowns * slowdown_impact(policy, s)
    return {
        "crashes": crashes,
        "slowdowns": slowdowns,
        "crash_impact_s": crash,
        "slowdown_impact_s": slow,
        "impact_share": (crash + slow) / horizon_s,
        "overhead": ck["overhead"],
        "interval_s": ck["interval_s"],
    }


def interval_costs(policy: str, s: Stream, intervals: np.ndarray) -> dict[str, np.ndarray]:
    """Fault-free overhead and expected crash impact (shares of time) for checkpoints every ``intervals``
    seconds: the trade-off Daly's interval balances (impact is linear in the checkpoint's age, so its
    mean is the impact at half the interval)."""
    tau = np.asarray(intervals, dtype=float)
    stop = checkpointing(policy, s)["stop_s"]
    crashes_per_s = s.workers / s.mtbf_s
    return {
        "overhead": stop / (tau + stop),
        "impact_share": crashes_per_s * crash_impact(policy, s, tau / 2),
    }
