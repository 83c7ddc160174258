"""The ``training`` evaluator: a training job per row through the training-step, energy and cost models.

Its inputs are :class:`commodel.pricing.jobs.TrainingJob`'s fields with their defaults (derived ones are
``None``: gpus from nodes or nodes from gpus, dp from the GPUs, seq from the model), checked with the
same rules as the CLI. Time to train = ``train_tokens / tokens_per_s``; facility power = IT power x
PUE; energy, carbon and cost over the whole job (:mod:`commodel.ops.energy`). Rows that break a
layout rule (:func:`commodel.workloads.layout.layout_problems`) are returned with ``valid = False`` and
the rule in ``problem``; the resolved ``gpus``, ``nodes`` and ``dp`` replace the inputs.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from commodel.errors import CommodelError
from commodel.hardware import cluster as make_cluster
from commodel.hardware.cluster import Cluster
from commodel.ops.energy import energy_costs, gpu_power_W, it_power_W, node_power_W
from commodel.ops.goodput import STATE_BYTES_PER_PARAM, goodput
from commodel.pricing.evaluator import (
    Evaluator,
    blank_outputs,
    categorical_groups,
    check_inputs,
    evaluate_frame,
    job_inputs,
    numbers,
    problem_messages,
)
from commodel.pricing.jobs import TrainingJob
from commodel.vectorize import per_distinct
from commodel.workloads.catalog import failure_model
from commodel.workloads.catalog import model as get_model
from commodel.workloads.groups import group, job_domain
from commodel.workloads.hetero import hetero_train_step, is_node_groups, parse_node_groups
from commodel.workloads.layout import (
    RECOMPUTE,
    RECOMPUTE_CODES,
    Layout,
    layout_problems,
    make_layout,
    module_bits,
    stage_layers_text,
)
from commodel.workloads.moe_dispatch import cross_domain_problem
from commodel.workloads.pipeline_layout import stage_split
from commodel.workloads.schema import Transformer
from commodel.workloads.training import BREAKDOWN, train_step
from commodel.workloads.transformer import parameters

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
    "offload_share",
    "offloaded_bytes",
    "recompute_used",
    "stage_imbalance",
    "tp_domains",
    "stage_layers",
    "cross_vendor_s",
)
JOB_OUTPUTS = (
    "goodput",
    "job_mtbf_h",
    "checkpoint_interval_min",
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
#: Inputs that split a table into groups priced apart (the overlap strategy is priced per row).
CATEGORICAL = [
    "model",
    "system",
    "fabric",
    "dtype",
    "tp_overlap",
    "ep_overlap",
    "attention",
    "failures",
    "checkpoint",
]


def recompute_names(codes: np.ndarray, recomputed: np.ndarray, offloaded: np.ndarray) -> np.ndarray:
    """What each row does with its activations, in words: none, selective, full, full on a share of
    the layers, or offloading a share of the layers' activations to CPU memory (auto's choice, or
    the job's)."""
    named = np.asarray((*RECOMPUTE, "auto"), dtype=object)[np.asarray(codes, dtype=int)]
    recomputed, offloaded = np.atleast_1d(recomputed), np.atleast_1d(offloaded)
    partial = per_distinct(lambda s: f"full on {100 * s:.0f}% of the layers", recomputed, object)
    moved = per_distinct(
        lambda s: f"none; activations of {100 * s:.0f}% of the layers offloaded to CPU memory",
        offloaded,
        object,
    )
    chosen = np.where(recomputed >= 1, "full", np.where(recomputed > 0, partial, "none"))
    return np.where(offloaded > 0, moved, np.where(named == "auto", chosen, named))


def job_layout(columns: dict[str, np.ndarray], rows: np.ndarray, net: Transformer, dp: np.ndarray) -> Layout:
    """The parallel layout of the table's ``rows`` (jobs of model ``net``), their data-parallel size
    ``dp`` resolved; a sequence not given is the model's own."""

    def col(name: str) -> np.ndarray:
        return numbers(np.asarray(columns[name])[rows])

    def flag(name: str) -> np.ndarray:
        return np.asarray(columns[name])[rows].astype(bool)

    seq = col("seq")
    split = _layout_splits(np.asarray(columns["pipeline_layout"])[rows], col("pp"), net.layers)

    def stated(name: str, own: np.ndarray) -> np.ndarray:  # the layout's split where a row states one
        return np.where(np.isnan(split[name]), own, split[name]) if split else own

    return make_layout(
        tp=col("tp"), pp=col("pp"), dp=dp, cp=col("cp"), ep=col("ep"), vpp=stated("vpp", col("vpp")),
        micro_batch=col("micro_batch"),
        global_batch=col("global_batch"), seq=np.where(np.isnan(seq), net.seq, seq),
        recompute=per_distinct(RECOMPUTE_CODES.__getitem__, np.asarray(columns["recompute"])[rows]),
        sequence_parallel=flag("sequence_parallel"), zero=col("zero"), expert_load=col("expert_load"),
        dualpipe=np.asarray(columns["schedule"])[rows] == "dualpipe",
        first_layers=stated("first", np.nan_to_num(col("first_stage_layers"))),
        last_layers=stated("last", np.nan_to_num(col("last_stage_layers"))),
        ends_as_layers=flag("ends_as_layers"), fp32_grads=flag("grad_reduce_in_fp32"),
        mtp=stated("mtp", col("mtp_layers")), etp=np.nan_to_num(col("etp")), fp8_dispatch=flag("fp8_dispatch"),
        ep_sms=np.nan_to_num(col("ep_sms")), fp8_param_gather=flag("fp8_param_gather"),
        fp8_activation_input=flag("fp8_activation_input"), bf16_moments=flag("bf16_moments"),
        permute_fusion=flag("permute_fusion"),
        recompute_modules=per_distinct(module_bits, np.asarray(columns["recompute_modules"])[rows]),
        deepep=np.asarray(columns["dispatcher"])[rows] == "deepep", offload_layers=col("offload_layers"),
    )  # fmt: skip


def _layout_splits(texts: np.ndarray, pp: np.ndarray, layers: int) -> dict[str, np.ndarray]:
    """The vpp, first and last stage layers and prediction modules of the rows that state a pipeline
    layout (:func:`stage_split`; a job has taken its own already, a sweep may vary it), NaN in the
    other rows; empty where no row states one."""
    if not np.any(texts != ""):
        return {}
    out = {name: np.full(len(texts), np.nan) for name in ("vpp", "first", "last", "mtp")}
    for text, stages in {(t, s) for t, s in zip(texts, pp, strict=True) if t}:
        split, at = stage_split(text, int(stages), layers), (texts == text) & (pp == stages)
        for name, values in out.items():
            values[at] = getattr(split, name)
    return out


def evaluate_columns(columns: dict[str, np.ndarray], checked: bool = False) -> dict[str, np.ndarray]:
    """The evaluator's core on a table held as columns (name -> array of one value per row): the
    output columns, and the resolved ``gpus``, ``nodes`` and ``dp``. ``checked``: the rows are
    validated jobs already (as from :func:`commodel.pricing.run.train`)."""
    rows_total = len(columns["model"])
    out = blank_outputs(
        rows_total, OUTPUTS, flags=("fits",), text=("problem", "recompute_used", "stage_layers")
    )
    resolved = {name: numbers(columns[name]) for name in ("gpus", "nodes", "dp")}
    if rows_total == 0:
        return {**out, **resolved}
    if not checked:
        check_inputs(TrainingJob, columns)
    for key, rows in categorical_groups(columns, CATEGORICAL):
        net = get_model(key["model"])
        fleet = _fleet(key["system"], key["fabric"])
        per_node = fleet[0][0].gpus_per_node

        def col(name: str, rows: np.ndarray = rows) -> np.ndarray:
            return numbers(np.asarray(columns[name])[rows])

        gpus, nodes = col("gpus"), col("nodes")
        problems = []
        if len(fleet) == 1 and fleet[0][1] is None:
            nodes = np.where(np.isnan(nodes), np.where(np.isnan(gpus), 1, np.ceil(gpus / per_node)), nodes)
            gpus = np.where(np.isnan(gpus), nodes * per_node, gpus)
            problems += [
                (gpus > nodes * per_node, f"the GPUs do not fit in the nodes ({per_node} GPUs per node)"),
                (
                    (gpus > per_node) & (np.mod(gpus, per_node) != 0),
                    f"the GPUs do not fill whole {key['system']} nodes of {per_node} GPUs",
                ),
            ]
        else:  # node groups: their nodes and GPUs are the job's
            own_nodes = sum(n for _, n in fleet)
            own_gpus = sum(c.gpus_per_node * n for c, n in fleet)
            problems.append(
                (
                    (~np.isnan(nodes) & (nodes != own_nodes)) | (~np.isnan(gpus) & (gpus != own_gpus)),
                    f"the node groups are {own_nodes} nodes of {own_gpus} GPUs",
                )
            )
            gpus, nodes = np.full(len(rows), float(own_gpus)), np.full(len(rows), float(own_nodes))
        tp, pp, cp, dp = (col(k) for k in ("tp", "pp", "cp", "dp"))
        dp = np.where(np.isnan(dp), np.floor(gpus / (tp * pp * cp)), dp)
        layout = job_layout(columns, rows, net, dp)
        problems += layout_problems(net, layout, gpus)
        hostless = [c.name for c, _ in fleet if c.host_offload_Bps <= 0]
        if hostless and np.any(layout.offload_layers):
            problems.append((layout.offload_layers > 0, f"CPU offloading needs host memory, which {hostless[0]}'s "
                             "record does not state ([host_memory] in hardware_db/systems)"))  # fmt: skip
        reason = cross_domain_problem(fleet[0][0]) if len(fleet) == 1 and np.any(layout.deepep) else ""
        if reason:  # DeepEP puts from the GPU across domains
            domain = job_domain(gpus, fleet[0][0].domain_gpus)
            problems.append((layout.deepep & group(layout.ep, layout.expert_tp, domain).spans_nodes, reason))
        stage_layers = np.asarray(columns["stage_layers"])[rows]
        if len(fleet) == 1:
            problems.append((stage_layers != "", "stage layers apply to node groups (SYSTEM:NODES,...)"))
        else:
            problems.append((layout.recompute == RECOMPUTE_CODES["auto"], "recompute auto needs one kind of node; across node groups choose "
                             "none, selective or full"))  # fmt: skip
        for name, values in (("gpus", gpus), ("nodes", nodes), ("dp", dp)):
            resolved[name][rows] = values
        messages = problem_messages(problems, len(rows))
        out["problem"][rows] = messages
        ok = messages == ""
        if not ok.any():
            continue
        sub = layout.select(ok)
        if len(fleet) == 1:
            c = fleet[0][0]
            try:
                result = train_step(
                    net,
                    c,
                    sub,
                    key["dtype"],
                    np.asarray(columns["overlap"], dtype=object)[rows[ok]],
                    key["attention"],
                    key["tp_overlap"],
                    key["ep_overlap"],
                )
            except CommodelError as exc:  # a mechanism this system cannot run (cais without NVLS): say why
                out["problem"][rows[ok]] = str(exc)
                continue
            result |= {"stage_layers": stage_layers_text(net, sub), "cross_vendor_s": 0 * sub.tp}
            powered = [(c, gpus[ok] / per_node)]
        else:
            result, failed = _hetero(net, [c for c, _ in fleet], sub, key, columns, rows[ok])
            out["problem"][rows[ok]] = failed
            if not result:
                continue
            powered = [(c, np.full(int(ok.sum()), float(n))) for c, n in fleet]
        keep = rows[ok]
        for name, values in result.items():
            out[name][keep] = values
        out["recompute_used"][keep] = recompute_names(
            sub.recompute, result["recompute_share"], result["offload_share"]
        )
        inputs = {n: col(n, keep) for n in TOTALS_INPUTS}
        inputs["spares"] = np.asarray(columns["spares"])[keep].astype(bool)
        failures = _failures(net, key, inputs, gpus[ok], powered)
        _job_totals(out, keep, result, powered, gpus[ok], inputs, failures)
        out["valid"][rows] = out["problem"][rows] == ""
    return {**out, **resolved}


#: Inputs the job totals (goodput, energy, carbon, cost, time to train) read.
TOTALS_INPUTS = (
    "pue", "train_tokens", "carbon_g_per_kWh", "price_per_gpu_hour", "mtbf_gpu_hours",
    "checkpoint_interval_min", "storage_GBps", "restart_min", "repair_hours",
)  # fmt: skip


def _fleet(system: str, fabric: str) -> list[tuple[Cluster, int | None]]:
    """The clusters a ``system`` input names, with their node counts (``None``: from the row)."""
    if not is_node_groups(system):
        return [(make_cluster(system, scale_out=fabric or None), None)]
    return [
        (make_cluster(name, nodes, scale_out=fabric or None), nodes)
        for name, nodes in parse_node_groups(system)
    ]


def _hetero(
    net: Transformer, groups: list[Cluster], sub: Layout, key: dict, columns: dict, rows: np.ndarray
) -> tuple[dict[str, np.ndarray], np.ndarray]:
    """Rows on unlike node groups, one at a time (:func:`commodel.workloads.hetero.hetero_train_step`):
    the results, NaN where a row breaks a rule of the groups, and that rule per row ("" if none)."""
    results, failed = [], np.full(len(rows), "", dtype=object)
    for i, row in enumerate(rows):
        nics = columns["nics"][row]
        try:
            r = hetero_train_step(
                net, groups, sub.select(np.arange(len(rows)) == i), key["dtype"], columns["overlap"][row], key["attention"],
                columns["transport"][row], None if nics is None or nics != nics else int(nics),
                columns["stage_layers"][row],
            )  # fmt: skip
        except CommodelError as exc:
            failed[i] = str(exc)
            r = {}
        results.append(r)
    names = next((list(r) for r in results if r), [])
    blank = {
        name: np.array([""], dtype=object) if name == "stage_layers" else np.array([np.nan]) for name in names
    }
    return {name: np.concatenate([(r or blank)[name] for r in results]) for name in names}, failed


def _failures(
    net: Transformer, key: dict, inputs: dict[str, np.ndarray], gpus: np.ndarray, fleet: list
) -> dict[str, np.ndarray]:
    """Goodput of each row under its failure model or per-GPU MTBF (:mod:`commodel.ops.goodput`):
    the model state checkpointed, the storage bandwidth, each GPU's PCIe link for async snapshots,
    and a restart that waits for a repair when a hardware failure finds no spare."""
    model = failure_model(key["failures"]) if key["failures"] else None
    mtbf = inputs["mtbf_gpu_hours"]
    rate = np.where(
        np.isnan(mtbf), model.rate_per_gpu_hour() if model else 0.0, 1 / np.where(np.isnan(mtbf), 1, mtbf)
    )
    hardware = model.hardware_share if model else 1.0
    restart = 60 * inputs["restart_min"] + np.where(
        inputs["spares"], 0.0, hardware * 3600 * inputs["repair_hours"]
    )
    pcie = min(c.host_link_Bps for c, _ in fleet)
    interval = inputs["checkpoint_interval_min"]
    return goodput(
        key["checkpoint"], rate, gpus, parameters(net)["total"] * STATE_BYTES_PER_PARAM, inputs["storage_GBps"] * 1e9,
        pcie, restart, 60 * interval,
    )  # fmt: skip


def _job_totals(
    out: dict[str, np.ndarray],
    keep: np.ndarray,
    result: dict[str, np.ndarray],
    fleet: list[tuple[Cluster, np.ndarray]],
    gpus: np.ndarray,
    inputs: dict[str, np.ndarray],
    failures: dict[str, np.ndarray],
) -> None:
    """Power, goodput, energy, time to train, carbon and cost of the rows ``keep`` over the nodes of
    ``fleet`` ((cluster, nodes) per group): GPUs busy for the step's compute share, the rest of each
    node and the switch ports it uses (:mod:`commodel.ops.energy`); failures stretch the time to train
    by 1 / goodput, at the same power."""
    busy = result["compute_s"] / result["step_time_s"]
    it_power = sum(it_power_W(c, busy, n) for c, n in fleet)
    pue = inputs["pue"]
    seconds = inputs["train_tokens"] / result["tokens_per_s"] / failures["goodput"]
    out["goodput"][keep] = failures["goodput"]
    out["job_mtbf_h"][keep] = failures["job_mtbf_s"] / 3600
    out["checkpoint_interval_min"][keep] = failures["interval_s"] / 60
    costs = energy_costs(
        it_power, seconds, gpus, pue, inputs["carbon_g_per_kWh"], inputs["price_per_gpu_hour"]
    )
    nodes = sum(n for _, n in fleet)
    out["gpu_power_W"][keep] = sum(gpu_power_W(c, busy) * c.gpus_per_node * n for c, n in fleet) / gpus
    out["node_power_kW"][keep] = sum(node_power_W(c, busy) * n for c, n in fleet) / nodes / 1e3
    out["it_power_kW"][keep] = it_power / 1e3
    out["power_kW"][keep] = it_power * pue / 1e3
    out["energy_per_token_J"][keep] = it_power * pue / result["tokens_per_s"]
    out["time_to_train_days"][keep] = seconds / 86400
    out["gpu_hours"][keep] = gpus * seconds / 3600
    for name in ("energy_MWh", "co2_t", "cost_usd"):
        out[name][keep] = costs[name]


def evaluate(frame: pd.DataFrame) -> pd.DataFrame:
    """The evaluator on a DataFrame (:func:`evaluate_columns`; gpus, nodes and dp resolved)."""
    return evaluate_frame(frame, evaluate_columns, ("gpus", "nodes", "dp"))


def training() -> Evaluator:
    return Evaluator(
        "training",
        "a training job per row: step time, throughput, memory, power, time to train, energy, cost",
        INPUTS,
        OUTPUTS,
        evaluate,
        REQUIRED,
        evaluate_columns,
    )
