"""The ``training`` evaluator: a training job per row through the training-step, energy and cost models.

Time to train = ``train_tokens / tokens_per_s``; facility power = IT power x PUE; energy, carbon and
cost over the whole job (:mod:`commodel.ops.energy`). Rows whose layout breaks a rule of
:func:`commodel.workloads.layout.layout_problems` are returned with ``valid = False``.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from commodel.errors import CommodelError
from commodel.explore.evaluators import Evaluator, blank_outputs, categorical_groups, register
from commodel.hardware import cluster as make_cluster
from commodel.ops.energy import energy_costs, gpu_power_W, it_power_W
from commodel.workloads.catalog import model as get_model
from commodel.workloads.layout import RECOMPUTE, layout_problems, make_layout
from commodel.workloads.training import BREAKDOWN, train_step

INPUTS: dict[str, object] = {
    "model": None,
    "system": None,
    "fabric": "",
    "nodes": 1,
    "gpus": 0,
    "tp": 1,
    "pp": 1,
    "dp": 0,
    "cp": 1,
    "ep": 1,
    "vpp": 1,
    "micro_batch": 1,
    "global_batch": 1024,
    "seq": 0,
    "recompute": "none",
    "sequence_parallel": False,
    "zero": 1,
    "dtype": "bf16",
    "overlap": "serial",
    "tp_overlap": "none",
    "attention": "flash",
    "pue": 1.0,
    "carbon_g_per_kWh": 0.0,
    "price_per_gpu_hour": 0.0,
    "train_tokens": 1e12,
}
STEP_OUTPUTS = (
    "step_time_s",
    "tokens_per_s",
    "tflops_per_gpu",
    "hw_tflops_per_gpu",
    "mfu",
    "memory_per_gpu_bytes",
    "fits",
)
JOB_OUTPUTS = (
    "gpu_power_W",
    "it_power_kW",
    "power_kW",
    "energy_per_token_J",
    "time_to_train_days",
    "gpu_hours",
    "energy_MWh",
    "co2_t",
    "cost_usd",
)
OUTPUTS = (*STEP_OUTPUTS, *(f"{b}_s" for b in BREAKDOWN), *JOB_OUTPUTS, "valid")
CATEGORICAL = ["model", "system", "fabric", "dtype", "overlap", "tp_overlap", "attention"]


def _column(frame: pd.DataFrame, name: str, rows: np.ndarray) -> np.ndarray:
    return frame[name].to_numpy()[rows].astype(float)


def evaluate(frame: pd.DataFrame) -> pd.DataFrame:
    out = blank_outputs(len(frame), OUTPUTS, flags=("fits",))
    codes = frame["recompute"].map({name: i for i, name in enumerate(RECOMPUTE)})
    if codes.isna().any():
        bad = sorted(set(frame.loc[codes.isna(), "recompute"].astype(str)))
        raise CommodelError(
            f"unknown recompute mode(s): {', '.join(bad)}; choose from {', '.join(RECOMPUTE)}"
        )
    for key, rows in categorical_groups(frame, CATEGORICAL):
        net = get_model(key["model"])
        c = make_cluster(key["system"], scale_out=key["fabric"] or None)
        per_node = c.gpus_per_node
        nodes = _column(frame, "nodes", rows)
        gpus = np.where(_column(frame, "gpus", rows) > 0, _column(frame, "gpus", rows), nodes * per_node)
        tp, pp, cp = (_column(frame, k, rows) for k in ("tp", "pp", "cp"))
        dp = np.where(
            _column(frame, "dp", rows) > 0, _column(frame, "dp", rows), np.floor(gpus / (tp * pp * cp))
        )
        seq = np.where(_column(frame, "seq", rows) > 0, _column(frame, "seq", rows), net.seq)
        layout = make_layout(
            tp=tp, pp=pp, dp=dp, cp=cp, ep=_column(frame, "ep", rows), vpp=_column(frame, "vpp", rows),
            micro_batch=_column(frame, "micro_batch", rows), global_batch=_column(frame, "global_batch", rows),
            seq=seq, recompute=codes.to_numpy()[rows].astype(float),
            sequence_parallel=frame["sequence_parallel"].to_numpy()[rows].astype(bool),
            zero=_column(frame, "zero", rows),
        )  # fmt: skip
        problems = layout_problems(net, layout, gpus)
        ok = ~np.any([mask for mask, _ in problems], axis=0) & (gpus <= nodes * per_node)
        if not ok.any():
            continue
        keep = rows[ok]
        sub = make_layout(
            **{
                f: np.asarray(getattr(layout, f))[ok] if np.ndim(getattr(layout, f)) else getattr(layout, f)
                for f in layout.__dataclass_fields__
            }
        )
        result = train_step(net, c, sub, key["dtype"], key["overlap"], key["attention"], key["tp_overlap"])
        for name, values in result.items():
            out[name][keep] = values
        busy = result["compute_s"] / result["step_time_s"]
        it_power = it_power_W(c, busy, gpus[ok] / per_node)
        pue = _column(frame, "pue", keep)
        seconds = _column(frame, "train_tokens", keep) / result["tokens_per_s"]
        costs = energy_costs(
            it_power,
            seconds,
            gpus[ok],
            pue,
            _column(frame, "carbon_g_per_kWh", keep),
            _column(frame, "price_per_gpu_hour", keep),
        )
        out["gpu_power_W"][keep] = gpu_power_W(c, busy)
        out["it_power_kW"][keep] = it_power / 1e3
        out["power_kW"][keep] = it_power * pue / 1e3
        out["energy_per_token_J"][keep] = it_power * pue / result["tokens_per_s"]
        out["time_to_train_days"][keep] = seconds / 86400
        out["gpu_hours"][keep] = gpus[ok] * seconds / 3600
        for name in ("energy_MWh", "co2_t", "cost_usd"):
            out[name][keep] = costs[name]
        out["valid"][keep] = True
    return frame.assign(**out)


@register
def training() -> Evaluator:
    return Evaluator(
        "training",
        "a training job per row: step time, throughput, memory, power, time to train, energy, cost",
        INPUTS,
        OUTPUTS,
        evaluate,
    )
