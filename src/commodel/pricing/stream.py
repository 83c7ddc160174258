"""The ``stream`` evaluator: a finite real-time stream run under crashes and slow-node anomalies, per
arm (:mod:`commodel.ops.streaming`): its fault-free overhead, the extra time faults cost, and how
often it meets its deadline, over seeded runs."""

from __future__ import annotations

from typing import Annotated

from pydantic import Field

from commodel.ops.streaming import ARMS, StreamRun, outcome
from commodel.pricing.evaluator import Evaluator
from commodel.pricing.job import Choices, Job


class StreamJob(Job):
    """A stream run to a deadline under faults, survived by one arm."""

    noun = "stream"
    arm: Annotated[str, Choices("stream arm", ARMS)] = Field(
        description="none (rerun the failed task), fixed (VeloC every fixed_interval_s), sync (aligned "
        "checkpoints, global rollback) or streamguard (async snapshots, redistribution)."
    )
    workers: int = Field(8, ge=2, le=4096, description="Workers the stream runs on.")
    work_s: float = Field(800.0, gt=0, description="Seconds of the failure-free run.")
    deadline_s: float = Field(1000.0, gt=0, description="Seconds the run must end within.")
    state_GB: float = Field(4.3, gt=0, description="State per worker, GB.")
    storage_GBps: float = Field(1.0, gt=0, description="File-system bandwidth per worker, GB/s.")
    copy_GBps: float = Field(25.0, gt=0, description="Snapshot bandwidth to host memory per worker, GB/s.")
    restart_s: float = Field(30.0, ge=0, description="Seconds until a replacement worker runs.")
    task_s: float = Field(200.0, gt=0, description="Seconds of the task a rerun starts over (arm none).")
    fixed_interval_s: float = Field(
        60.0, gt=0, description="Seconds between VeloC's checkpoints (arm fixed)."
    )
    mttf_s: float = Field(40.0, gt=0, description="Mean seconds between crashes, any worker.")
    anomalies_per_crash: float = Field(
        0.0, ge=0, description="Slow-node anomalies per crash (their rate over the crashes')."
    )
    anomaly_s: float = Field(1.0, ge=0, description="Mean seconds an anomaly costs its worker.")
    trials: int = Field(400, ge=1, le=10_000, description="Seeded runs averaged.")
    seed: int = Field(0, ge=0, description="The simulation's seed.")


#: A run the model refuses (faults so frequent that no run gets through) is its row's ``problem``.
OUTPUTS = ("overhead_pct", "impact_pct", "p90_s", "on_time_pct", "interval_s", "problem", "valid")


def run_of(row: object) -> StreamRun:
    """The :class:`StreamRun` a row describes."""
    return StreamRun(
        workers=int(row.workers), work_s=float(row.work_s), state_bytes=1e9 * float(row.state_GB),
        storage_Bps=1e9 * float(row.storage_GBps), copy_Bps=1e9 * float(row.copy_GBps),
        restart_s=float(row.restart_s), task_s=float(row.task_s), fixed_interval_s=float(row.fixed_interval_s),
        mttf_s=float(row.mttf_s), anomalies_per_s=float(row.anomalies_per_crash) / float(row.mttf_s), anomaly_s=float(row.anomaly_s),
    )  # fmt: skip


def _outcome(row: object) -> dict:
    r = outcome(row.arm, run_of(row), float(row.deadline_s), int(row.trials), int(row.seed))
    return {"overhead_pct": 100 * r["overhead"], "impact_pct": 100 * r["impact"], "p90_s": r["p90_s"],
            "on_time_pct": 100 * r["on_time"], "interval_s": r["interval_s"]}  # fmt: skip


def stream() -> Evaluator:
    return Evaluator.row_by_row(
        "stream",
        "a real-time stream run to a deadline under crashes and slow nodes: overhead, extra time, on-time share",
        StreamJob,
        OUTPUTS,
        _outcome,
        ("problem",),
    )
