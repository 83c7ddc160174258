"""One training configuration by name, end to end: the front door the CLI, validation and studies use."""

from __future__ import annotations

from dataclasses import dataclass

from commodel.errors import CommodelError
from commodel.hardware import cluster as make_cluster
from commodel.ops.energy import energy_costs, gpu_power_W, it_power_W, node_power_W
from commodel.workloads.catalog import model as get_model
from commodel.workloads.layout import check, make_layout, recompute_code
from commodel.workloads.training import BREAKDOWN, train_step


@dataclass(frozen=True)
class TrainConfig:
    """A training run as a user states it (names and integers)."""

    model: str
    system: str
    gpus: int
    tp: int = 1
    pp: int = 1
    dp: int | None = None
    cp: int = 1
    ep: int = 1
    vpp: int = 1
    global_batch: int = 1
    micro_batch: int = 1
    seq: int | None = None
    recompute: str = "none"
    sequence_parallel: bool = False
    zero: int = 0
    dtype: str = "bf16"
    overlap: str = "serial"
    attention: str = "flash"
    tp_overlap: str = "none"
    pue: float = 1.0


def train(config: TrainConfig) -> dict[str, object]:
    """Price one configuration: scalar metrics plus a ``breakdown`` dict of seconds per step."""
    c = config
    net = get_model(c.model)
    if c.gpus < 1:
        raise CommodelError(f"--gpus must be at least 1, got {c.gpus}")
    per_node = int(make_cluster(c.system).gpus_per_node)
    nodes = -(-c.gpus // per_node)
    if c.gpus > per_node and c.gpus % per_node:
        raise CommodelError(f"{c.gpus} GPUs do not fill whole {c.system} nodes of {per_node} GPUs")
    model_parallel = c.tp * c.pp * c.cp
    if model_parallel < 1:
        raise CommodelError("tp, pp and cp must be at least 1")
    dp = c.dp if c.dp is not None else c.gpus // model_parallel
    seq = c.seq or net.seq
    layout = make_layout(
        tp=c.tp,
        pp=c.pp,
        dp=dp,
        cp=c.cp,
        ep=c.ep,
        vpp=c.vpp,
        micro_batch=c.micro_batch,
        global_batch=c.global_batch,
        seq=seq,
        recompute=recompute_code(c.recompute),
        sequence_parallel=c.sequence_parallel,
        zero=c.zero,
    )
    check(net, layout, c.gpus)
    if not c.pue >= 1.0:
        raise CommodelError(f"PUE is facility energy over IT energy, so at least 1; got {c.pue}")
    cluster = make_cluster(c.system, nodes)
    result = train_step(net, cluster, layout, c.dtype, c.overlap, c.attention, c.tp_overlap)
    scalars = {k: v.item() for k, v in result.items()}
    busy = scalars["compute_s"] / scalars["step_time_s"]
    it_power = float(it_power_W(cluster, busy, c.gpus / per_node))
    energy = energy_costs(it_power, scalars["step_time_s"], c.gpus, c.pue)["energy_J"]
    tokens = c.global_batch * seq
    scalars |= {
        "gpu_power_W": float(gpu_power_W(cluster, busy)),
        "node_power_kW": float(node_power_W(cluster, busy)) / 1e3,
        "it_power_kW": it_power / 1e3,
        "energy_per_step_J": float(energy),
        "energy_per_token_J": float(energy) / tokens,
    }
    breakdown = {name: scalars.pop(f"{name}_s") for name in BREAKDOWN}
    return {
        "model": c.model,
        "system": c.system,
        "gpus": c.gpus,
        "layout": {"tp": c.tp, "pp": c.pp, "dp": dp, "cp": c.cp, "ep": c.ep, "vpp": c.vpp},
        "overlap": c.overlap,
        "tp_overlap": c.tp_overlap,
        **scalars,
        "fits": bool(scalars["fits"]),
        "breakdown": breakdown,
    }
