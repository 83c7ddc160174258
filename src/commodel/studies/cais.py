"""Study ``cais``: tensor parallelism with NVLS collectives, T3's fused GEMM + reduce-scatter (on
rings, or reduced by the switch), and compute-aware in-switch reduction (CAIS, with and without its
dataflow optimizer), end to end, on the paper's simulated system: half-width models on GPUs with
half their SMs (setup: ``studies/cais/study.toml``).

Mechanisms are those of :func:`commodel.workloads.training.tensor_parallel.tensor_parallel_exposed`.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping

import pandas as pd

from commodel.hardware import cluster
from commodel.hardware.cluster import Cluster
from commodel.pricing.training import job_layouts
from commodel.studies.base import Claim, StudyResult, study_spec
from commodel.workloads.model.catalog import model as get_model
from commodel.workloads.model.schema import Transformer
from commodel.workloads.training.step import train_step


def simulated(net: Transformer, hidden: int, ffn: int) -> Transformer:
    """``net`` at the hidden and FFN sizes the paper simulates (Table I), its heads kept."""
    return net.model_copy(update={"hidden": hidden, "ffn_hidden": ffn, "head_dim": hidden // net.heads})


def fewer_sms(c: Cluster, share: float) -> Cluster:
    """``c`` whose GPUs keep ``share`` of their SMs, and so of their peak (each SM's rate kept)."""
    gpu = c.gpu
    scaled = {k: v.model_copy(update={"value": v.value * share}) for k, v in gpu.peak_flops.items()}
    units = gpu.compute_units.model_copy(update={"value": round(gpu.compute_units.value * share)})
    return dataclasses.replace(c, gpu=gpu.model_copy(update={"peak_flops": scaled, "compute_units": units}))


def arm_steps(p: Mapping[str, object]) -> pd.DataFrame:
    """One row per workload (Table I) and batch scale: step time under each arm and the TP
    communication over compute of TP-NVLS."""
    c = fewer_sms(cluster(str(p["system"])), float(p["sms"]))
    rows = []
    for name, hidden, ffn, seq, batch in p["workloads"]:
        net = simulated(get_model(name), hidden, ffn)
        for scale in p["batch_scales"]:
            steps = {}
            for arm, (mechanism, sp) in p["arms"].items():
                x = job_layouts({
                    "model": name, "system": str(p["system"]), "gpus": 8, "tp": 8, "seq": seq,
                    "micro_batch": batch * scale, "global_batch": batch * scale, "sequence_parallel": sp,
                    "cuda_graphs": "full_iteration",  # the paper's simulator issues no host work
                })  # fmt: skip
                steps[arm] = train_step(net, c, x, tp_overlap=mechanism)
            base = steps["tp-nvls"]
            row = {"model": name, "batch": batch * scale, "scale": scale,
                   "tp_comm_over_compute": float(base["tp_comm_s"] / base["compute_s"])}  # fmt: skip
            rows.append(row | {f"{arm}_step_s": float(r["step_time_s"]) for arm, r in steps.items()})
    return pd.DataFrame(rows)


def geomean(values: pd.Series) -> float:
    return math.exp(values.map(math.log).mean())


#: The paper's training gains of CAIS over each baseline (geomean speedups, minus 1, in %).
PAPER_GAINS = {"tp-nvls": 37.0, "sp-nvls": 89.0, "t3": 60.0, "t3-nvls": 45.0, "cais-base": (42.0, 47.0)}


def run() -> StudyResult:
    spec = study_spec("cais")
    p = spec.parameters
    table = arm_steps(p)
    for arm in PAPER_GAINS:
        table[f"cais_vs_{arm}"] = table[f"{arm}_step_s"] / table["cais_step_s"]
    stated = table[table.scale == 1]
    definition = "geomean over Table I's three workloads of T(arm) / T(CAIS), training steps, minus 1"

    def gain(arm: str) -> float:
        return 100 * (geomean(stated[f"cais_vs_{arm}"]) - 1)

    t3_over_nvls = geomean(stated["t3_step_s"] / stated["tp-nvls_step_s"])
    t3_reason = (
        f"the model's T3 is {t3_over_nvls:.2f}x TP-NVLS's step where the paper's is 1.17x: its reduce-scatter "
        "hides behind the producer GEMM but for the two slowing each other through HBM (3 bytes per byte "
        "reduced), and its ring gather costs 0.65 of NVLS's all-reduce; what T3 pays per tile handed to its DMA "
        "engines (track-and-trigger at tile granularity) is not published for the model to price"
    )
    utilization = (
        "the paper's gains over T3-NVLS and CAIS-Base equal its link-utilization gain (90.2% / 62.4% = 1.45: "
        "thread-block coordination and traffic control at the switch's merge tables); the model has no merge "
        "table, prices every arm's stores at NVLink's 80% payload efficiency, and sees only the gather CAIS overlaps"
    )
    sp_reason = (
        "the paper's simulator makes SP-NVLS the slower of its NVLS baselines (1.89x against TP-NVLS's 1.37x); "
        "with NCCL's NVLS reduce-scatter and all-gather measured on H100 the model prices SP-NVLS within 1% of "
        "TP-NVLS, the same bytes in two collectives"
    )
    claims = [
        Claim("CAIS training gain over TP-NVLS (paper: 1.37x)", 37.0, gain("tp-nvls"), "%", definition),
        Claim("CAIS training gain over SP-NVLS (paper: 1.89x)", 89.0, gain("sp-nvls"), "%", definition, sp_reason),
        Claim("CAIS training gain over T3, no NVLS (paper: 1.60x)", 60.0, gain("t3"), "%", definition, t3_reason),
        Claim("CAIS training gain over T3-NVLS (paper: 1.45x)", 45.0, gain("t3-nvls"), "%", definition, utilization),
        Claim("CAIS gain over CAIS-Base, ISA and switch only (paper: 1.42-1.47x)", (42.0, 47.0), gain("cais-base"),
              "%", definition + "; CAIS-Base leaves each gather before its consumer GEMM", utilization),
        Claim("T3's step over TP-NVLS's (paper: 1.60 / 1.37 = 1.17x)", 17.0, 100 * (t3_over_nvls - 1), "%",
              "geomean of T(T3) / T(TP-NVLS) over Table I's workloads, minus 1", t3_reason),
    ]  # fmt: skip
    notes = [
        "TP communication over compute in TP-NVLS: "
        + ", ".join(f"{r.model} {r.tp_comm_over_compute:.2f}" for r in stated.itertuples())
        + " (the paper's motivation: about 1.6 for LLaMA-7B at 8 GPUs)",
        "not claimed: link utilization (62% CAIS-Base, 85% with asymmetric overlap, 90% with traffic control): "
        "the model has no merge table or switch traffic control to price it from",
    ]
    return StudyResult.of(spec, claims, table, notes)
