"""Study ``gicc``: GPU-triggered communication and coordination (Shan et al., arXiv:2604.22126): the
coordination and put latencies of the schemes (:mod:`commodel.comm.initiation`) and two stencils'
scaling under GPU-aware MPI and kernel-triggered exchange (:mod:`commodel.workloads.hpc.stencil`), on
the paper's two platforms. Setup: ``studies/gicc/study.toml``."""

from __future__ import annotations

from collections.abc import Mapping

import pandas as pd

from commodel.comm.initiation import handoff, path_of, put_latency
from commodel.hardware import cluster, nodes_for
from commodel.studies.base import Claim, StudyResult, study_spec
from commodel.workloads.hpc.stencil import (
    SCHEMES,
    Stencil,
    iteration_time,
    strong_efficiency,
    weak_efficiency,
)

MPI, GICC = SCHEMES  # host-driven (GPU-aware MPI), kernel-triggered (GICC)


def scaling_table(p: Mapping[str, object]) -> pd.DataFrame:
    """Each benchmark at each size: both schemes' efficiency and communication time at ``gpus``."""
    gpus = int(p["gpus"])
    c = cluster(str(p["tioga"]), nodes_for(str(p["tioga"]), gpus))
    rows = []
    for bench, sizes, efficiency in (
        ("jacobi weak", p["jacobi_sizes"], weak_efficiency),
        ("minimod strong", p["minimod_grids"], strong_efficiency),
    ):
        kernel = Stencil(**p[bench.split()[0]])
        for size in sizes:
            n = size if efficiency is weak_efficiency else round(size / gpus ** (1 / kernel.dims))
            row = {"benchmark": bench, "size": size, "gpus": gpus}
            for scheme in SCHEMES:
                row[f"{scheme}_efficiency_pct"] = 100 * efficiency(scheme, c, size, gpus, kernel)
                row[f"{scheme}_comm_us"] = 1e6 * iteration_time(scheme, c, n, gpus, kernel)["comm_s"]
            row["mpi_extra_comm_pct"] = 100 * (row[f"{MPI}_comm_us"] / row[f"{GICC}_comm_us"] - 1)
            rows.append(row)
    return pd.DataFrame(rows)


def run() -> StudyResult:
    spec = study_spec("gicc")
    p = spec.parameters
    tioga, maple = path_of(cluster(str(p["tioga"]), 2)), path_of(cluster(str(p["maple"]), 2))
    table = scaling_table(p)
    jacobi = table[(table.benchmark == "jacobi weak") & (table["size"] == p["jacobi_n"])].iloc[0]
    minimod = table[(table.benchmark == "minimod strong") & (table["size"] == p["minimod_grid"])].iloc[0]
    host = float(put_latency(MPI, tioga, 8) + tioga.launch)
    trigger = handoff(GICC, tioga)
    nvshmem = float(put_latency("proxy", maple, 8, shared_queue=True) / put_latency(GICC, maple, 8))
    weak, strong = f"at {p['gpus']} GCDs (8 nodes), weak scaling", f"on {p['gpus']} GCDs, strong scaling"
    claims = [
        Claim("host-driven coordination on Slingshot", 25.2, 1e6 * host, "us",
              "a kernel's end to the peer's next kernel: the host sees the end, calls MPI, the signal crosses, "
              "the peer's progress engine sees it and relaunches"),
        Claim("GICC's trigger hand-off on Slingshot", 0.11, 1e6 * trigger, "us",
              "what a GPU thread spends handing a pre-staged operation to the NIC (the wire excluded)",
              "the model assumes a release fence and a posted store (0.2 us) where the paper measures 0.11 us; the "
              "GPU side of a hand-off is a few hundred cycles that no record in the data measures"),
        Claim("put latency, NVSHMEM over GICC, InfiniBand (Maple)", 1.95, nvshmem, "x",
              "8-byte put, decision to payload visible: NVSHMEM's proxy thread behind a shared channel against "
              "a GPU-triggered pre-built work request"),
        Claim(f"Jacobi parallel efficiency {weak}, GPU-aware MPI", 60.0, float(jacobi[f"{MPI}_efficiency_pct"]), "%",
              "one GCD's iteration time over one iteration at scale"),
        Claim(f"Jacobi parallel efficiency {weak}, GICC", 76.0, float(jacobi[f"{GICC}_efficiency_pct"]), "%",
              "one GCD's iteration time over one iteration at scale",
              "at the stated subdomain the interior sweep outlasts the exchange, so the model's GICC hides all "
              "of it but the poll; the paper's 76% leaves a quarter of the iteration exposed, which the "
              "persistent kernel's own per-iteration costs (its grid-wide barrier, the triggered operations' "
              "counters and the double-buffered queue's epochs) would have to take, and none is published; the "
              "Jacobi size is not given either (the table: 74.5% at 1024)"),
        Claim(f"Minimod parallel efficiency {strong}, GPU-aware MPI", 35.4,
              float(minimod[f"{MPI}_efficiency_pct"]), "%", "one GCD's time over 64 times the time at 64"),
        Claim(f"Minimod parallel efficiency {strong}, GICC", 42.0, float(minimod[f"{GICC}_efficiency_pct"]), "%",
              "one GCD's time over 64 times the time at 64"),
        Claim(f"MPI's extra communication time {strong} (paper: over 52%)", ">52",
              float(minimod.mpi_extra_comm_pct), "%",
              "MPI's communication time per iteration over GICC's exposed time beyond its sweep, minus 1"),
    ]  # fmt: skip
    notes = [
        f"coordination ratio (the paper's 229x): {host / trigger:.0f}x; host-driven pieces on Tioga: host sees the "
        f"kernel end {1e6 * tioga.host_sync:.1f} us, MPI call {1e6 * tioga.host_call:.1f} us, progress "
        f"{1e6 * tioga.progress:.1f} us, relaunch {1e6 * tioga.launch:.1f} us, the wire and NICs the rest",
        "Jacobi and Minimod sizes the paper does not give: the table shows how both efficiencies move with them; "
        "GICC removes the host and hides the exchange behind the interior sweep: where the interior outlasts "
        "the exchange (Jacobi) its gain is the host cost, shrinking as the subdomain grows; where it does not "
        "(Minimod at 64 GCDs), more interior hides more, and the gain grows with the grid",
    ]
    return StudyResult.of(spec, claims, table, notes)
