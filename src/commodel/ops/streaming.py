"""A finite real-time stream run under crashes and slow-node anomalies, and four ways to survive them
(StreamGuard, Nguyen et al., arXiv:2606.30848).

A run needs ``T0`` seconds of work on ``W`` workers, each holding ``S`` bytes of state: failure-free and
fully busy, it ends at ``T0``. Faults strike while the workers work: crashes at ``1 / M`` per second of
the run (on a random worker), and slow-node anomalies at ``a`` per second, each costing its worker an
exponential ``d`` seconds (mean ``D``). What each arm pays:

- ``none`` (the original pipeline; Parsl reruns a failed task): a crash costs its worker the restart
  ``R`` plus the task's work so far (uniform over the task length ``L``).
- ``fixed`` (VeloC every ``tau_f``): a blocking snapshot to host memory, ``c = S / B_copy``, every
  ``tau_f`` (the flush to storage runs behind); a crash costs its worker ``R``, the restore
  ``S / B_storage`` and the work since the snapshot (uniform over ``tau_f``).
- ``sync`` (Flink-like aligned checkpoints, at Daly's interval for ``M``, their best case): all workers
  stop for ``C = S / B_storage`` every ``tau``; a crash rolls every worker back: ``R + C + U(0, tau)``
  of the whole run.
- ``streamguard``: snapshots of ``c`` every ``max(S / B_storage, Daly(c, W M))`` (the persist must
  finish first); a crash moves the failed worker's partition to the survivors, which load its state
  (``S / B_storage`` worker-seconds in all) and redo its work since the snapshot, and the run goes on
  with ``W - 1`` workers until the replacement joins after ``R``: ``R + S / B_storage + U(0, tau)``
  worker-seconds, spread over ``W``. The progress-aware balancer spreads an anomaly's ``d`` likewise.

Fixed partitions (``none``, ``fixed``, and a slowed operator under ``sync``'s backpressure) end with the
worker that lost the most: each worker is a lane that its own faults lengthen. ``streamguard`` is one
lane whose faults cost their worker-seconds over ``W``; ``sync``'s rollbacks cost the whole run.
Checkpoints stretch a lane's work by ``1 + c / tau``. Monte Carlo over ``trials`` runs, seeded; the
fault-free overhead uses the interval a run sets for ``nominal_mttf_s`` (before it observes a fault).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from commodel.errors import CommodelError, unknown
from commodel.ops.goodput import daly_interval

ARMS = ("none", "fixed", "sync", "streamguard")
#: Faults one run may expect, beyond which the fault rates describe a run that never ends.
MAX_FAULTS = 2000

#: Fault draws one call may hold (trials x workers x faults per lane), about 160 MB of them.
MAX_DRAWS = 20_000_000


@dataclass(frozen=True)
class StreamRun:
    """A stream run and its fault environment (seconds, bytes; rates per second of the run)."""

    workers: int
    work_s: float  # T0, the failure-free run
    state_bytes: float  # per worker
    storage_Bps: float  # per worker, to and from the parallel file system
    copy_Bps: float  # per worker, a snapshot to host memory
    restart_s: float  # a replacement worker's start
    task_s: float  # the task a rerun starts over (no resilience)
    fixed_interval_s: float  # VeloC's configured interval
    mttf_s: float  # the run's mean time between crashes (any worker)
    anomalies_per_s: float  # slow-node anomalies (any worker)
    anomaly_s: float  # mean seconds one costs its worker
    nominal_mttf_s: float = 86400.0  # per worker, what a run expects before it observes a fault

    def __post_init__(self) -> None:
        positive = ("workers", "work_s", "state_bytes", "storage_Bps", "copy_Bps", "task_s", "fixed_interval_s",
                    "mttf_s", "nominal_mttf_s")  # fmt: skip
        for name in positive:
            if not getattr(self, name) > 0:
                raise CommodelError(
                    f"stream {name.replace('_', ' ')} must be positive, got {getattr(self, name)}"
                )
        if min(self.restart_s, self.anomalies_per_s, self.anomaly_s) < 0:
            raise CommodelError("restart time, anomaly rate and anomaly length must be non-negative")

    @property
    def restore_s(self) -> float:
        return self.state_bytes / self.storage_Bps

    @property
    def snapshot_s(self) -> float:
        return self.state_bytes / self.copy_Bps


def checkpointing(arm: str, s: StreamRun, mttf_s: float | None = None) -> tuple[float, float]:
    """``(interval, blocking seconds per checkpoint)`` of ``arm`` for a run that expects a crash every
    ``mttf_s`` (default: the injected rate); ``(inf, 0)`` without checkpoints."""
    if arm not in ARMS:
        raise unknown("stream arm", arm, ARMS)
    m = s.mttf_s if mttf_s is None else mttf_s
    if arm == "none":
        return np.inf, 0.0
    if arm == "fixed":
        return s.fixed_interval_s, s.snapshot_s
    if arm == "sync":
        return float(daly_interval(s.restore_s, m)), s.restore_s
    return max(s.restore_s, float(daly_interval(s.snapshot_s, s.workers * m))), s.snapshot_s


def _lane_times(
    work_s: float,
    rate: float,
    losses: Callable[[np.random.Generator, tuple[int, ...]], np.ndarray],
    shape: tuple[int, ...],
    rng: np.random.Generator,
) -> np.ndarray:
    """Wall seconds of lanes needing ``work_s`` of work, hit at ``rate`` per working second by events
    each costing ``losses(rng, shape)`` seconds: ``work_s`` plus the losses of the events that struck
    before the work was done."""
    if rate <= 0:
        return np.full(shape[:-1], work_s)
    arrivals = np.cumsum(rng.exponential(1 / rate, shape), axis=-1)
    struck = arrivals < work_s
    if struck[..., -1].any():
        raise CommodelError(
            f"over {shape[-1]} faults strike one run: it would not finish; check the fault rates"
        )
    return work_s + np.sum(np.where(struck, losses(rng, shape), 0.0), axis=-1)


def completion_times(arm: str, s: StreamRun, trials: int = 400, seed: int = 0) -> np.ndarray:
    """Seconds each of ``trials`` seeded runs of ``arm`` takes, faults and checkpoints included."""
    interval, stop = checkpointing(arm, s)
    work = s.work_s * (1 + stop / interval)
    rng = np.random.default_rng(seed)
    crash_rate, anomaly_rate = 1 / s.mttf_s, s.anomalies_per_s
    expected = (crash_rate + anomaly_rate) * work
    if expected > MAX_FAULTS:
        saving = work - s.work_s  # the run's checkpoints lengthen it too
        also, check = (
            (f" and {saving:.4g} s of its checkpoints", " and the checkpoints' size and bandwidth")
            if saving > 0
            else ("", "")
        )
        raise CommodelError(
            f"{expected:.0f} faults expected in one run (over {MAX_FAULTS}): crashes every {s.mttf_s:g} s and "
            f"{anomaly_rate:g} anomalies per second over {s.work_s:g} s of work{also}; check the fault rates{check}"
        )
    events = int(3 * expected + 40)
    if trials * s.workers * events > MAX_DRAWS:
        raise CommodelError(
            f"{trials} runs of {s.workers} workers with up to {events} faults each are more than {MAX_DRAWS:,} "
            "draws: ask for fewer trials"
        )
    rollback, restore = (s.task_s, 0.0) if arm == "none" else (interval, s.restore_s)

    def crash(r: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
        return s.restart_s + restore + r.uniform(0, rollback, shape)

    def slowed(r: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
        return r.exponential(s.anomaly_s, shape)

    def either(r: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
        is_crash = r.uniform(size=shape) * (crash_rate + anomaly_rate) < crash_rate
        return np.where(is_crash, crash(r, shape), slowed(r, shape))

    lanes = (trials, s.workers, events)
    if arm == "streamguard":  # every loss spread over the workers
        return _lane_times(work, crash_rate + anomaly_rate, lambda r, sh: either(r, sh) / s.workers,
                           (trials, events), rng)  # fmt: skip
    if arm == "sync":  # rollbacks cost the whole run; a slowed operator backpressures its partition
        rollbacks = _lane_times(work, crash_rate, crash, (trials, events), rng)
        return rollbacks + _lane_times(work, anomaly_rate / s.workers, slowed, lanes, rng).max(axis=-1) - work
    return _lane_times(work, (crash_rate + anomaly_rate) / s.workers, either, lanes, rng).max(axis=-1)


def outcome(arm: str, s: StreamRun, deadline_s: float, trials: int = 400, seed: int = 0) -> dict[str, float]:
    """A run of ``arm``: its fault-free overhead (checkpoints at the nominal rate, no faults), the mean
    extra time faults and checkpoints cost over ``T0`` (its impact), and the share of runs that meet
    ``deadline_s``."""
    interval, stop = checkpointing(arm, s, s.nominal_mttf_s / s.workers)
    times = completion_times(arm, s, trials, seed)
    return {
        "overhead": stop / interval,
        "impact": float(times.mean()) / s.work_s - 1,
        "p90_s": float(np.percentile(times, 90)),
        "on_time": float(np.mean(times <= deadline_s)),
        "interval_s": checkpointing(arm, s)[0],
    }
