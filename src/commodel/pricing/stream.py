"""The ``stream`` evaluator: a real-time stream pipeline's checkpoint overhead and fault impact per row
and policy (:mod:`commodel.ops.streaming`), over a seeded horizon of faults."""

from __future__ import annotations

from typing import Annotated

from pydantic import Field

from commodel.ops.streaming import DISTRIBUTIONS, POLICIES, Stream, fault_impacts
from commodel.pricing.evaluator import Evaluator
from commodel.pricing.job import Choices, Job


class StreamJob(Job):
    """A real-time stream pipeline under faults, checkpointed and recovered by one policy."""

    noun = "stream"
    policy: Annotated[str, Choices("stream policy", POLICIES)] = Field(
        description="sync or async checkpoints."
    )
    workers: int = Field(16, ge=1, description="Workers the stream runs on.")
    headroom: float = Field(0.25, ge=0, description="Spare capacity over the stream's rate, a share.")
    state_GB: float = Field(4.0, gt=0, description="State per worker, GB.")
    storage_GBps: float = Field(1.0, gt=0, description="Checkpoint storage bandwidth per worker, GB/s.")
    memory_GBps: float = Field(20.0, gt=0, description="Memory bandwidth per worker for snapshots, GB/s.")
    restart_s: float = Field(60.0, ge=0, description="Seconds to restart a worker.")
    detect_s: float = Field(30.0, ge=0, description="Seconds to detect a failure.")
    mtbf_hours: float = Field(12.0, gt=0, description="Mean time between a worker's failures, hours.")
    slowdowns_per_day: float = Field(0.0, ge=0, description="Slow-node episodes per worker per day.")
    slowdown: float = Field(4.0, ge=1, description="How many times slower a slow node runs.")
    slowdown_s: float = Field(300.0, ge=0, description="Seconds a slow-node episode lasts.")
    distribution: Annotated[str, Choices("failure distribution", DISTRIBUTIONS)] = Field(
        "exponential", description="Failure inter-arrival times: exponential or weibull."
    )
    shape: float = Field(1.0, gt=0, description="Weibull shape.")
    horizon_days: float = Field(7.0, gt=0, description="Days simulated.")
    seed: int = Field(0, ge=0, description="The simulation's seed.")


OUTPUTS = ("overhead_pct", "impact_pct", "crashes", "slowdowns", "interval_s", "valid")


def stream_of(row: object) -> Stream:
    """The :class:`Stream` a row describes (per-worker figures; items in units of the stream's rate)."""
    return Stream(
        workers=int(row.workers), rate=1.0, headroom=float(row.headroom), state_bytes=1e9 * float(row.state_GB),
        storage_Bps=1e9 * float(row.storage_GBps), memory_Bps=1e9 * float(row.memory_GBps),
        restart_s=float(row.restart_s), detect_s=float(row.detect_s), mtbf_s=3600 * float(row.mtbf_hours),
        slowdowns_per_s=float(row.slowdowns_per_day) / 86400, slowdown=float(row.slowdown),
        slowdown_s=float(row.slowdown_s),
    )  # fmt: skip


def _impact(row: object) -> dict:
    r = fault_impacts(row.policy, stream_of(row), 86400 * float(row.horizon_days), row.distribution,
                      float(row.shape), int(row.seed))  # fmt: skip
    return {"overhead_pct": 100 * r["overhead"], "impact_pct": 100 * r["impact_share"], "crashes": r["crashes"],
            "slowdowns": r["slowdowns"], "interval_s": r["interval_s"]}  # fmt: skip


def stream() -> Evaluator:
    return Evaluator.row_by_row(
        "stream",
        "a real-time stream pipeline under faults: checkpoint overhead and time behind real time, per policy",
        StreamJob,
        OUTPUTS,
        _impact,
    )
