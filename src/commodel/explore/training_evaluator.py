"""The ``training`` evaluator: a training job per row through the training-step, energy and cost models.

Its inputs are :class:`commodel.jobs.TrainingJob`'s fields with their defaults (derived ones are
``None``: gpus from nodes or nodes from gpus, dp from the GPUs, seq from the model), checked with the
same rules as the CLI. Time to train = ``train_tokens / tokens_per_s``; facility power = IT power x
PUE; energy, carbon and cost over the whole job (:mod:`commodel.ops.energy`). Rows that break a
layout rule (:func:`commodel.workloads.layout.layout_problems`) are returned with ``valid = False`` and
the rule in ``problem``; the resolved ``gpus``, ``nodes`` and ``dp`` replace the inputs.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from commodel.explore.evaluators import (
    Evaluator,
    blank_outputs,
    categorical_groups,
    check_inputs,
    job_inputs,
    numbers,
    problem_messages,
    register,
)
from commodel.hardware import cluster as make_cluster
from commodel.jobs import TrainingJob
from commodel.ops.energy import energy_costs, gpu_power_W, it_power_W, node_power_W
from commodel.workloads.catalog import model as get_model
from commodel.workloads.layout import RECOMPUTE, RECOMPUTE_CODES, layout_problems, make_layout
from commodel.workloads.training import BREAKDOWN, train_step

if TYPE_CHECKING:
    import pandas as pd

INPUTS, REQUIRED = job_inputs(TrainingJob)
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
    "stage_imbalance",
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


def evaluate_columns(columns: dict[str, np.ndarray], checked: bool = False) -> dict[str, np.ndarray]:
    """The evaluator's core on a table held as columns (name -> array of one value per row): the
    output columns, and the resolved ``gpus``, ``nodes`` and ``dp``. ``checked``: the rows are
    validated jobs already (as from :func:`commodel.workloads.run.train`)."""
    rows_total = len(columns["model"])
    out = blank_outputs(rows_total, OUTPUTS, flags=("fits",), text=("problem", "recompute_used"))
    resolved = {name: numbers(columns[name]) for name in ("gpus", "nodes", "dp")}
    if rows_total == 0:
        return {**out, **resolved}
    if not checked:
        check_inputs(TrainingJob, columns)
    for key, rows in categorical_groups(columns, CATEGORICAL):
        net = get_model(key["model"])
        c = make_cluster(key["system"], scale_out=key["fabric"] or None)
        per_node = c.gpus_per_node

        def col(name: str, rows: np.ndarray = rows) -> np.ndarray:
            return numbers(np.asarray(columns[name])[rows])

        gpus, nodes = col("gpus"), col("nodes")
        nodes = np.where(np.isnan(nodes), np.where(np.isnan(gpus), 1, np.ceil(gpus / per_node)), nodes)
        gpus = np.where(np.isnan(gpus), nodes * per_node, gpus)
        tp, pp, cp, dp, seq = (col(k) for k in ("tp", "pp", "cp", "dp", "seq"))
        dp = np.where(np.isnan(dp), np.floor(gpus / (tp * pp * cp)), dp)
        seq = np.where(np.isnan(seq), net.seq, seq)
        codes = np.array([RECOMPUTE_CODES[v] for v in np.asarray(columns["recompute"])[rows]], dtype=float)
        layout = make_layout(
            tp=tp, pp=pp, dp=dp, cp=cp, ep=col("ep"), vpp=col("vpp"), micro_batch=col("micro_batch"),
            global_batch=col("global_batch"), seq=seq, recompute=codes,
            sequence_parallel=np.asarray(columns["sequence_parallel"])[rows].astype(bool), zero=col("zero"),
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
        messages = problem_messages(problems, len(rows))
        out["problem"][rows] = messages
        ok = messages == ""
        if not ok.any():
            continue
        keep = rows[ok]
        sub = layout.select(ok)
        result = train_step(net, c, sub, key["dtype"], key["overlap"], key["attention"], key["tp_overlap"])
        for name, values in result.items():
            out[name][keep] = values
        out["recompute_used"][keep] = recompute_names(sub.recompute, result["recompute_share"])
        busy = result["compute_s"] / result["step_time_s"]
        it_power = it_power_W(c, busy, gpus[ok] / per_node)
        pue = col("pue", keep)
        seconds = col("train_tokens", keep) / result["tokens_per_s"]
        costs = energy_costs(
            it_power, seconds, gpus[ok], pue, col("carbon_g_per_kWh", keep), col("price_per_gpu_hour", keep)
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
    return {**out, **resolved}


def evaluate(frame: pd.DataFrame) -> pd.DataFrame:
    """The evaluator on a DataFrame: :func:`evaluate_columns` on its columns, resolved inputs as
    nullable integers."""
    import pandas as pd

    out = evaluate_columns({name: frame[name].to_numpy(dtype=object) for name in frame.columns})
    resolved = {name: pd.array(out.pop(name), dtype="Int64") for name in ("gpus", "nodes", "dp")}
    return frame.assign(**out, **resolved)


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
