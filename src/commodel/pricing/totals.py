"""A training job's totals beyond its step: power, goodput under failures and checkpoints, and the
energy, carbon, cost and time to train the job's tokens (:mod:`commodel.ops.energy`,
:mod:`commodel.ops.goodput`). Read from the job's own fields, per row."""

from __future__ import annotations

import numpy as np

from commodel.hardware.cluster import Cluster
from commodel.ops.energy import energy_costs, gpu_power_W, it_power_W, network_capex_usd, node_power_W
from commodel.ops.goodput import STATE_BYTES_PER_PARAM, checkpoint_bandwidth, goodput
from commodel.pricing.table import Columns, flags, numbers, take
from commodel.workloads.model.catalog import failure_model
from commodel.workloads.model.schema import Transformer
from commodel.workloads.model.transformer import parameters

JOB_OUTPUTS = (
    "goodput",
    "job_mtbf_h",
    "checkpoint_interval_min",
    "gpu_power_W",
    "node_power_kW",
    "it_power_kW",
    "fabric_tiers",
    "network_capex_usd",
    "power_kW",
    "energy_per_token_J",
    "time_to_train_days",
    "gpu_hours",
    "energy_MWh",
    "co2_t",
    "cost_usd",
)


def _failures(
    columns: Columns,
    rows: np.ndarray,
    net: Transformer,
    key: dict,
    gpus: np.ndarray,
    fleet: list,
    step_s: np.ndarray,
) -> dict[str, np.ndarray]:
    """Goodput of each row under its failure model or per-GPU MTBF (:mod:`commodel.ops.goodput`):
    the model state checkpointed, the write bandwidth a checkpoint burst gets, each GPU's PCIe link for async snapshots,
    and a restart that waits for a repair when a hardware failure finds no spare; checkpoints every
    whole number of steps (``step_s``)."""

    def col(name: str) -> np.ndarray:
        return numbers(take(columns, name, rows))

    model = failure_model(key["failures"]) if key["failures"] else None
    mtbf = col("mtbf_gpu_hours")
    rate = np.where(
        np.isnan(mtbf), model.rate_per_gpu_hour() if model else 0.0, 1 / np.where(np.isnan(mtbf), 1, mtbf)
    )
    hardware = model.hardware_share if model else 1.0
    spares = flags(take(columns, "spares", rows))
    restart = 60 * col("restart_min") + np.where(spares, 0.0, hardware * 3600 * col("repair_hours"))
    pcie = min(c.host_link_Bps for c, _ in fleet)
    nodes = sum(np.asarray(n, dtype=float) for _, n in fleet)
    write = checkpoint_bandwidth(
        col("storage_GBps") * 1e9, col("storage_share"), nodes, col("storage_node_GBps") * 1e9
    )
    return goodput(
        key["checkpoint"], rate, gpus, parameters(net)["total"] * STATE_BYTES_PER_PARAM,
        write, pcie, restart, 60 * col("checkpoint_interval_min"), step_s,
    )  # fmt: skip


def job_totals(
    columns: Columns,
    rows: np.ndarray,
    net: Transformer,
    key: dict,
    result: dict[str, np.ndarray],
    fleet: list[tuple[Cluster, np.ndarray]],
    gpus: np.ndarray,
    tokens_per_step: np.ndarray,
) -> dict[str, np.ndarray]:
    """The :data:`JOB_OUTPUTS` of the table's ``rows`` from their step ``result``, over the nodes of
    ``fleet`` ((cluster, nodes) per group): GPUs busy for the step's compute share, the rest of each
    node and the switch ports it uses (:mod:`commodel.ops.energy`); the time to train is whole steps
    of ``tokens_per_step`` (an optimizer step takes its whole global batch: ``ceil(tokens / tokens per
    step)``, at least one), stretched by 1 / goodput under failures, at the same power."""

    def col(name: str) -> np.ndarray:
        return numbers(take(columns, name, rows))

    failures = _failures(columns, rows, net, key, gpus, fleet, result["step_time_s"])
    busy = (
        result["compute_s"] / result["step_time_s"]
    )  # every compute second at TDP, as NODE_OTHER_LOAD's fit
    it_power = sum(it_power_W(c, busy, n) for c, n in fleet)
    pue = col("pue")
    with np.errstate(divide="ignore"):  # goodput 0: the job never ends
        steps = np.ceil(col("train_tokens") / tokens_per_step)
        seconds = steps * result["step_time_s"] / failures["goodput"]
    costs = energy_costs(it_power, seconds, gpus, pue, col("carbon_g_per_kWh"), col("price_per_gpu_hour"))
    nodes = sum(n for _, n in fleet)
    return {
        "goodput": failures["goodput"],
        "job_mtbf_h": failures["job_mtbf_s"] / 3600,
        "checkpoint_interval_min": failures["interval_s"] / 60,
        "gpu_power_W": sum(gpu_power_W(c, busy) * c.gpus_per_node * n for c, n in fleet) / gpus,
        "node_power_kW": sum(node_power_W(c, busy) * n for c, n in fleet) / nodes / 1e3,
        "it_power_kW": it_power / 1e3,
        "power_kW": it_power * pue / 1e3,
        "energy_per_token_J": it_power * pue / result["tokens_per_s"],
        "time_to_train_days": seconds / 86400,
        "fabric_tiers": np.maximum.reduce([c.fabric_tiers(n) for c, n in fleet]).astype(float),
        "network_capex_usd": sum(network_capex_usd(c, n) for c, n in fleet),
        "gpu_hours": gpus * seconds / 3600,
        **{name: costs[name] for name in ("energy_MWh", "co2_t", "cost_usd")},
    }
