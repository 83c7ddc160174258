"""Study ``overlap``: where occupancy-shaped overlap saves training time, per GPU and message size.

Mechanism (:mod:`commodel.overlap`): naive overlap puts a collective's CTAs beside compute kernels,
which then pay wave quantization on the SMs left (the tail effect) and, without stream priority,
delay the collective behind running kernels; occupancy shaping keeps the collective's SMs free and
gives its stream priority, leaving only shared-HBM interference. End-to-end times come from the
training evaluator over the study's design space (GPU x strategy).
"""

from __future__ import annotations

import pandas as pd

from commodel.comm.calls import run as run_collective
from commodel.compute import gemm, kernel_time
from commodel.explore.spec import SweepSpec
from commodel.hardware import cluster as make_cluster
from commodel.hardware import default_db
from commodel.overlap import COMM_CTAS, window_time
from commodel.pricing.training import job_layouts
from commodel.studies.base import Claim, StudyResult, study_spec, study_table
from commodel.units import parse_sizes
from commodel.workloads.catalog import model as get_model
from commodel.workloads.layer_work import layer_window

#: What identifies one workload of the study (the strategies are compared within it).
WORKLOAD = ["system", "model", "gpus", "micro_batch"]


def end_to_end(table: pd.DataFrame) -> pd.DataFrame:
    """One row per workload that fits: step time per strategy, the communication share of the serial
    step, and the reductions of naive and occupancy-shaped overlap against serial execution."""
    fitting = table[table.feasible]
    times = fitting.pivot_table(index=WORKLOAD, columns="overlap", values="step_time_s")
    serial = fitting[fitting.overlap == "serial"].set_index(WORKLOAD)
    rows = pd.DataFrame(
        {
            "serial_s": times["serial"],
            "comm_share_pct": 100 * serial.dp_comm_s / serial.step_time_s,
            "naive_vs_serial_pct": 100 * (1 - times["sm-partition"] / times["serial"]),
            "shaped_vs_serial_pct": 100 * (1 - times["occupancy-shaped"] / times["serial"]),
            "shaped_vs_naive_pct": 100 * (1 - times["occupancy-shaped"] / times["sm-partition"]),
        }
    ).reset_index()
    rows.insert(1, "gpu", rows.system.map(lambda s: make_cluster(s).gpu.description.split(" (")[0]))
    return rows


def tail_effect(gpu_name: str, comm_ctas: int, k: int, waves: int = 1) -> float:
    """Slowdown of a GEMM of ``waves`` full waves (tiles = waves x SMs) when a collective holds
    ``comm_ctas`` SMs: ``ceil(tiles / (S - k)) / waves``."""
    gpu = default_db().gpu(gpu_name)
    sms = int(gpu.compute_units.value)
    rows = max(d for d in range(1, int(sms**0.5) + 1) if sms % d == 0)  # tiles as square as possible
    kernel = gemm(128 * rows * waves, 256 * (sms // rows), k)
    alone = kernel_time(gpu, kernel, launch=False).time_s
    beside = kernel_time(gpu, kernel, launch=False, units=sms - comm_ctas).time_s
    return float(beside / alone)


def by_message_size(spec: SweepSpec) -> pd.DataFrame:
    """Reduction of one layer's window time vs serial when it overlaps an all-gather of each size."""
    f = spec.fixed
    name = str(spec.parameters["message_model"])
    net = get_model(name)
    gpus = 8
    sizes = parse_sizes(",".join(map(str, spec.parameters["message_sizes"])))
    rows = []
    for system in spec.variables["system"].choice:
        c = make_cluster(system)
        x = job_layouts({"model": name, "system": system, "gpus": gpus, "global_batch": gpus, "micro_batch": 1,
                         **{k: f[k] for k in ("seq", "zero", "recompute")}})  # fmt: skip
        window = layer_window(net, c, x, COMM_CTAS[c.system.scale_up.topology])
        hbm = c.gpu.memory_bandwidth.value * c.gpu.memory_efficiency.value
        ag = run_collective("allgather", c, sizes, gpus)
        for size, comm, busbw in zip(sizes, ag.time_s, ag.busbw_GBps, strict=True):
            serial = window_time("serial", window, comm, traffic_Bps=0.0, hbm_Bps=hbm)
            row = {
                "system": system,
                "size_bytes": int(size),
                "comm_over_compute": float(comm / window.compute_s),
            }
            for strategy in ("sm-partition", "occupancy-shaped"):
                t = window_time(strategy, window, comm, traffic_Bps=2e9 * busbw, hbm_Bps=hbm, calls=1)
                row[f"{strategy}_reduction_pct"] = float(100 * (1 - t / serial))
            rows.append(row)
    return pd.DataFrame(rows)


def message_size_table() -> pd.DataFrame:
    """The by-message-size table of the shipped study (used by its notebook)."""
    return by_message_size(study_spec("overlap"))


def run() -> StudyResult:
    spec = study_spec("overlap")
    p = spec.parameters
    table = end_to_end(study_table(spec))
    best = table.loc[table.shaped_vs_serial_pct.idxmax()]
    sizes = by_message_size(spec)
    claims = [
        Claim("end-to-end training time reduction, best workload of the four GPUs (occupancy-shaped vs serial)",
              25.5, float(best.shaped_vs_serial_pct), "%"),
        Claim("end-to-end training time reduction, median workload (occupancy-shaped vs serial; paper: 'up to')",
              (0.0, 25.5), float(table.shaped_vs_serial_pct.median()), "%"),
        Claim("H100: a one-wave GEMM beside a 24-CTA all-gather takes about 2x as long (tail effect)",
              2.0, tail_effect(str(p["tail_gpu"]), int(p["tail_comm_ctas"]), int(p["tail_k"])), "x"),
    ]  # fmt: skip
    per_gpu = table.groupby("gpu").shaped_vs_serial_pct.agg(["max", "median"])
    notes = [
        f"best: {best.model} on {int(best.gpus)} x {best.gpu} ({best.system}), micro-batch {int(best.micro_batch)}: "
        f"{best.shaped_vs_serial_pct:.1f}% (the allreduce is {best.comm_share_pct:.1f}% of the serial step); "
        "per GPU (best / median): "
        + "; ".join(f"{g}: {r['max']:.1f}% / {r['median']:.1f}%" for g, r in per_gpu.iterrows()),
        "the saving over serial is bounded by the communication share of the step (overlap can hide at most "
        "min(C, M) of C + M): data-parallel training of a model that fits one GPU communicates 2 bytes per "
        "parameter per step, most over PCIe (A40), least over NVLink and xGMI; the paper's 'up to 25.5%' is "
        "the model's best case, its median workload gains a third of that",
        "the saving over naive overlap comes from the tail effect and stream priority, and grows with the "
        "collective's share of the SMs (24 of 132 on H100, 4 of 84 over PCIe on A40)",
        "by message size (one layer's window, all-gather inside the node): "
        + "; ".join(
            f"{r.system} {r.size_bytes / 2**20:g} MiB: naive {r['sm-partition_reduction_pct']:.1f}%, "
            f"shaped {r['occupancy-shaped_reduction_pct']:.1f}%"
            for _, r in sizes.iterrows()
        ),
    ]
    return StudyResult("overlap", spec.study.title, str(p["paper"]), claims, table, notes)
