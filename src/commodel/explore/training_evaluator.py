"""The ``training`` evaluator: a training job per row through the training-step, energy and cost models.

Its inputs are :class:`commodel.jobs.TrainingJob`'s fields with their defaults (derived ones are
``None``: gpus from nodes or nodes from gpus, dp from the GPUs, seq from the model), checked with the
same rules as the CLI. Time to train = ``train_tokens / tokens_per_s``; facility power = IT power x
PUE; energy, carbon and cost over the whole job (:mod:`commodel.ops.energy`). Rows that break a
layout rule (:func:`commodel.workloads.layout.layout_problems`) are returned with ``valid = False`` and
the rule in ``problem``; the resolved ``gpus``, ``nodes`` and ``dp`` replace the inputs.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from commodel.explore.evaluators import Evaluator, blank_outputs, categorical_groups, register
from commodel.hardware import cluster as make_cluster
from commodel.jobs import TrainingJob, check_column
from commodel.ops.energy import energy_costs, gpu_power_W, it_power_W, node_power_W
from commodel.workloads.catalog import model as get_model
from commodel.workloads.layout import RECOMPUTE, RECOMPUTE_CODES, layout_problems, make_layout
from commodel.workloads.training import BREAKDOWN, train_step

FIELDS = TrainingJob.model_fields
INPUTS: dict[str, object] = {name: (None if f.is_required() else f.default) for name, f in FIELDS.items()}
REQUIRED = tuple(name for name, f in FIELDS.items() if f.is_required())
STEP_OUTPUTS = (
    "step_time_s",
    "tokens_per_s",
    "tflops_per_gpu",
    "hw_tflops_per_gpu",
    "mfu",
    "memory_per_gpu_bytes",
    "fits",
    "recompute_share",
    "recompute_used",
    "tp_domains",
)
JOB_OUTPUTS = (
    "gpu_power_W",
    "node_power_kW",
    "it_power_kW",
    "power_kW",
    "energy_per_token_J",
    "time_to_train_days",
    "gpu_hours",
    "energy_MWh",
    "co2_t",
    "cost_usd",
)
OUTPUTS = (*STEP_OUTPUTS, *(f"{b}_s" for b in BREAKDOWN), *JOB_OUTPUTS, "problem", "valid")
CATEGORICAL = ["model", "system", "fabric", "dtype", "overlap", "tp_overlap", "attention"]


def recompute_names(codes: np.ndarray, share: np.ndarray) -> np.ndarray:
    """What each row recomputes, in words: none, selective, full, or full on a share of the layers."""
    named = np.asarray((*RECOMPUTE, "auto"), dtype=object)[np.asarray(codes, dtype=int)]
    partial = np.array([f"full on {100 * s:.0f}% of the layers" for s in np.atleast_1d(share)], dtype=object)
    chosen = np.where(share >= 1, "full", np.where(share > 0, partial, "none"))
    return np.where(named == "auto", chosen, named)


def _column(frame: pd.DataFrame, name: str, rows: np.ndarray) -> np.ndarray:
    return pd.to_numeric(frame[name].iloc[rows], errors="coerce").to_numpy(dtype=float)


def _check_inputs(frame: pd.DataFrame) -> None:
    """Every distinct value of every input, by the job's own rules (a sweep gets the CLI's bounds)."""
    base = {"model": frame["model"].iloc[0], "system": frame["system"].iloc[0]}
    for name in INPUTS:
        values = pd.unique(frame[name].astype(object))
        check_column(name, values, base)


def evaluate(frame: pd.DataFrame) -> pd.DataFrame:
    out = blank_outputs(len(frame), OUTPUTS, flags=("fits",), text=("problem", "recompute_used"))
    if len(frame) == 0:
        return frame.assign(**out)
    _check_inputs(frame)
    resolved = {name: frame[name].to_numpy(dtype=object).copy() for name in ("gpus", "nodes", "dp")}
    for key, rows in categorical_groups(frame, CATEGORICAL):
        net = get_model(key["model"])
        c = make_cluster(key["system"], scale_out=key["fabric"] or None)
        per_node = c.gpus_per_node
        gpus, nodes = _column(frame, "gpus", rows), _column(frame, "nodes", rows)
        nodes = np.where(np.isnan(nodes), np.where(np.isnan(gpus), 1, np.ceil(gpus / per_node)), nodes)
        gpus = np.where(np.isnan(gpus), nodes * per_node, gpus)
        tp, pp, cp = (_column(frame, k, rows) for k in ("tp", "pp", "cp"))
        dp = _column(frame, "dp", rows)
        dp = np.where(np.isnan(dp), np.floor(gpus / (tp * pp * cp)), dp)
        seq = _column(frame, "seq", rows)
        seq = np.where(np.isnan(seq), net.seq, seq)
        codes = frame["recompute"].iloc[rows].map(RECOMPUTE_CODES).to_numpy(dtype=float)
        layout = make_layout(
            tp=tp, pp=pp, dp=dp, cp=cp, ep=_column(frame, "ep", rows), vpp=_column(frame, "vpp", rows),
            micro_batch=_column(frame, "micro_batch", rows), global_batch=_column(frame, "global_batch", rows),
            seq=seq, recompute=codes, sequence_parallel=frame["sequence_parallel"].iloc[rows].to_numpy(dtype=bool),
            zero=_column(frame, "zero", rows),
        )  # fmt: skip
        problems = layout_problems(net, layout, gpus)
        problems.append(
            (gpus > nodes * per_node, f"the GPUs do not fit in the nodes ({per_node} GPUs per node)")
        )
        problems.append(
            (
                (gpus > per_node) & (np.mod(gpus, per_node) != 0),
                f"the GPUs do not fill whole {key['system']} nodes of {per_node} GPUs",
            )
        )
        for name, values in (("gpus", gpus), ("nodes", nodes), ("dp", dp)):
            resolved[name][rows] = values
        messages = np.full(len(rows), "", dtype=object)
        for mask, message in problems:
            joined = np.where(messages == "", message, messages + "; " + message)
            messages = np.where(np.broadcast_to(mask, messages.shape), joined, messages)
        out["problem"][rows] = messages
        ok = messages == ""
        if not ok.any():
            continue
        keep = rows[ok]
        sub = layout.select(np.broadcast_to(ok, np.shape(layout.tp)) if np.ndim(layout.tp) else ok)
        result = train_step(net, c, sub, key["dtype"], key["overlap"], key["attention"], key["tp_overlap"])
        for name, values in result.items():
            out[name][keep] = values
        out["recompute_used"][keep] = recompute_names(sub.recompute, result["recompute_share"])
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
        out["node_power_kW"][keep] = node_power_W(c, busy) / 1e3
        out["it_power_kW"][keep] = it_power / 1e3
        out["power_kW"][keep] = it_power * pue / 1e3
        out["energy_per_token_J"][keep] = it_power * pue / result["tokens_per_s"]
        out["time_to_train_days"][keep] = seconds / 86400
        out["gpu_hours"][keep] = gpus[ok] * seconds / 3600
        for name in ("energy_MWh", "co2_t", "cost_usd"):
            out[name][keep] = costs[name]
        out["valid"][keep] = True
    return frame.assign(**out, **{name: pd.array(values, dtype="Int64") for name, values in resolved.items()})


@register
def training() -> Evaluator:
    return Evaluator(
        "training",
        "a training job per row: step time, throughput, memory, power, time to train, energy, cost",
        INPUTS,
        OUTPUTS,
        evaluate,
        REQUIRED,
    )
