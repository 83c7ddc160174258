"""One training job, end to end: the scalar front door the CLI, validation and studies use.

:func:`train` is the ``training`` evaluator on a one-row table, so a scalar call and a sweep give the
same answer for the same job (DESIGN principle 7).
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import numpy as np

from commodel.errors import CommodelError
from commodel.jobs import TrainingJob, training_job
from commodel.workloads.training import BREAKDOWN

#: Outputs a person reads per step (the rest of the evaluator's columns are job totals).
STEP_FIELDS = (
    "step_time_s",
    "tokens_per_s",
    "tflops_per_gpu",
    "hw_tflops_per_gpu",
    "mfu",
    "memory_per_gpu_bytes",
    "gpu_power_W",
    "it_power_kW",
    "energy_per_token_J",
    "stage_imbalance",
)


def train(job: TrainingJob | None = None, **values: Any) -> dict[str, Any]:
    """Price one training job (a :class:`TrainingJob`, or its fields as keywords): scalar metrics,
    the layout as resolved, a ``breakdown`` of seconds per step, and ``notes`` on what the model
    assumed (a recomputation it chose, tensor parallelism crossing scale-up domains)."""
    from commodel.explore.training_evaluator import evaluate_columns

    job = job if job is not None else training_job(**values)
    table = evaluate_columns({name: np.array([value], dtype=object) for name, value in job}, checked=True)
    row = SimpleNamespace(**{name: values[0] for name, values in table.items()})
    if not row.valid:
        raise CommodelError(f"invalid training job: {row.problem}")
    step = {name: float(getattr(row, name)) for name in STEP_FIELDS}
    per_node = int(row.gpus) // int(row.nodes)
    notes = []
    if job.recompute == "auto":
        notes.append(f"recompute auto: {row.recompute_used} is the least recomputation that fits")
    if float(row.tp_domains) > 1:
        notes.append(
            f"tensor parallelism spans {float(row.tp_domains):g} scale-up domains: its collectives cross "
            "the scale-out network"
        )
    return {
        "model": job.model,
        "system": job.system,
        "gpus": int(row.gpus),
        "nodes": int(row.nodes),
        "gpus_per_node": per_node,
        "layout": {"tp": job.tp, "pp": job.pp, "dp": int(row.dp), "cp": job.cp, "ep": job.ep, "vpp": job.vpp},
        "dtype": job.dtype,
        "overlap": job.overlap,
        "tp_overlap": job.tp_overlap,
        "recompute": str(row.recompute_used),
        **step,
        "fits": bool(row.fits),
        "node_power_kW": float(row.node_power_kW),
        "energy_per_step_J": float(row.it_power_kW) * 1e3 * job.pue * step["step_time_s"],
        "breakdown": {name: float(getattr(row, f"{name}_s")) for name in BREAKDOWN},
        "notes": notes,
    }
