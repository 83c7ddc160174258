"""Study ``cais``: tensor parallelism with NVLS collectives, T3's fused GEMM + reduce-scatter, and
compute-aware in-switch reduction (CAIS), end to end.

Mechanisms are those of :func:`commodel.workloads.tensor_parallel.tensor_parallel_exposed`: the baseline
serializes each GEMM with its collective (NCCL's choice, NVLS where faster); T3 streams the producer
GEMM's tiles into a ring reduce-scatter (its bandwidth, plus three HBM bytes per byte reduced, and the
allgather half stays exposed); CAIS reduces tiles in the switch as they are produced and multicasts
gathers into the consumer GEMM, leaving only a one-tile tail exposed.
"""

from __future__ import annotations

import math

import pandas as pd

from commodel.studies.base import Claim, StudyResult, study_spec, study_table


def speedups(table: pd.DataFrame) -> pd.DataFrame:
    """One row per (model, system): step time per mechanism, TP share and the three speedups."""
    steps = table.pivot_table(index=["model", "system"], columns="tp_overlap", values="step_time_s")
    tp = table[table.tp_overlap == "none"].set_index(["model", "system"])
    out = pd.DataFrame(
        {
            **{f"{m}_step_s": steps[m] for m in ("none", "userbuffers", "t3", "cais")},
            "tp_comm_share_pct": 100 * tp.tp_comm_s / tp.step_time_s,
            "cais_vs_nvls": steps["none"] / steps["cais"],
            "cais_vs_t3": steps["t3"] / steps["cais"],
            "t3_vs_nvls": steps["none"] / steps["t3"],
            "t3_vs_userbuffers": steps["userbuffers"] / steps["t3"],
            "cais_vs_userbuffers": steps["userbuffers"] / steps["cais"],
        }
    )
    return out.reset_index()


def run() -> StudyResult:
    spec = study_spec("cais")
    p = spec.parameters
    table = speedups(study_table(spec))
    reference = table[(table.model == p["reference_model"]) & (table.system == p["reference_system"])].iloc[0]
    claims = [
        Claim(
            "CAIS training speedup over NVLS-based tensor parallelism",
            1.38,
            float(reference.cais_vs_nvls),
            "x",
        ),
        Claim("CAIS training speedup over T3", 1.61, float(reference.cais_vs_t3), "x"),
    ]
    geo = math.exp(table.cais_vs_nvls.map(math.log).mean())
    notes = [
        f"reference: {reference.model} on {spec.fixed['nodes']} x {reference.system}, tp {spec.fixed['tp']}, "
        f"pp {spec.fixed['pp']}; TP communication is {reference.tp_comm_share_pct:.1f}% of the NVLS-based step",
        f"sweep geomean CAIS vs NVLS-based TP: {geo:.2f}x; the speedup tracks the TP communication share until "
        "GEMMs get too short to hide it",
        "why the model does not reach 1.61x over T3: the paper's two figures put T3 at 1.61 / 1.38 = 1.17x slower "
        "than its NVLS-based baseline. T3 hides its reduce-scatter behind the producer GEMM and exposes only a "
        "ring allgather, while a baseline that runs its collectives between the GEMMs exposes both, and NVLS "
        "reduce-scatters and allgathers carry no fewer bytes per GPU link than rings: against that baseline T3 "
        f"is faster ({reference.t3_vs_nvls:.2f}x here), at any communication share. T3 falls behind only a "
        "baseline that hides communication too, as the paper's abstract says NVLS-based approaches do, "
        "inefficiently: against Transformer Engine's userbuffers overlap on the same collectives T3 is "
        f"{1 / reference.t3_vs_userbuffers:.2f}x slower (paper 1.17x), but then CAIS gains only "
        f"{reference.cais_vs_userbuffers:.2f}x over the baseline (paper 1.38x). No baseline the paper names, on "
        "the mechanisms it states, gives both figures; its cycle-accurate simulator's workloads are not stated",
    ]
    return StudyResult.of(spec, claims, table, notes)
