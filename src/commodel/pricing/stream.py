"""The ``stream`` evaluator: a real-time stream pipeline's checkpoint overhead and fault impact per row
and policy (:mod:`commodel.ops.streaming`), over a seeded horizon of faults."""

from __future__ import annotations

import pandas as pd

from commodel.ops.streaming import Stream, fault_impacts
from commodel.pricing.evaluator import Evaluator, blank_outputs

INPUTS: dict[str, object] = {
    "policy": None,
    "workers": 16,
    "headroom": 0.25,
    "state_GB": 4.0,
    "storage_GBps": 1.0,
    "memory_GBps": 20.0,
    "restart_s": 60.0,
    "detect_s": 30.0,
    "mtbf_hours": 12.0,
    "slowdowns_per_day": 0.0,
    "slowdown": 4.0,
    "slowdown_s": 300.0,
    "distribution": "exponential",
    "shape": 1.0,
    "horizon_days": 7.0,
    "seed": 0,
}
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


def evaluate(frame: pd.DataFrame) -> pd.DataFrame:
    out = blank_outputs(len(frame), OUTPUTS)
    for i, row in enumerate(frame.itertuples(index=False)):
        r = fault_impacts(
            row.policy,
            stream_of(row),
            86400 * float(row.horizon_days),
            row.distribution,
            float(row.shape),
            int(row.seed),
        )
        out["overhead_pct"][i] = 100 * r["overhead"]
        out["impact_pct"][i] = 100 * r["impact_share"]
        out["crashes"][i], out["slowdowns"][i], out["interval_s"][i] = (
            r["crashes"],
            r["slowdowns"],
            r["interval_s"],
        )
        out["valid"][i] = True
    return frame.assign(**out)


def stream() -> Evaluator:
    return Evaluator(
        "stream",
        "a real-time stream pipeline under faults: checkpoint overhead and time behind real time, per policy",
        INPUTS,
        OUTPUTS,
        evaluate,
    )
