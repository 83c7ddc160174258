"""Study ``gpu-centric``: the taxonomy of GPU-centric communication (Unat et al., arXiv:2409.09874)
with each fabric's numbers (:mod:`commodel.comm.initiation`): put latency by size, coordination
latency, message rate, and the crossovers, where each scheme stops or starts beating the host path."""

from __future__ import annotations

import pandas as pd

from commodel.comm.initiation import path_of, scheme_table
from commodel.hardware import cluster
from commodel.studies.base import Claim, StudyResult, study_spec, study_table

GPU_DRIVEN = ("kernel-triggered", "kernel-initiated")


def crossovers(systems: list[str]) -> pd.DataFrame:
    """Per fabric and scheme: coordination latency, message rate, the size above which the host path
    is within 5%, and the coordination rate above which the scheme saves 10% of the wall time."""
    rows = []
    for system in systems:
        for r in scheme_table(path_of(cluster(system, 2)), [8]):
            rows.append(
                {
                    "system": system,
                    **{k: v for k, v in r.items() if k != "put_us"},
                    "put_8B_us": r["put_us"][8],
                }
            )
    return pd.DataFrame(rows)


def run() -> StudyResult:
    spec = study_spec("gpu-centric")
    table = study_table(spec)
    valid = table  # the sweep keeps only the schemes each fabric runs
    small, large = valid.size_bytes.min(), valid.size_bytes.max()

    def best(size: int) -> pd.DataFrame:
        at = valid[valid.size_bytes == size].set_index(["system", "scheme"]).put_us.unstack()
        return at[[s for s in GPU_DRIVEN if s in at]].min(axis=1) / at["host-driven"]

    crossing = crossovers(spec.parameters["systems"])
    device = crossing[crossing.scheme.isin(GPU_DRIVEN)]
    claims = [
        Claim("small messages: GPU-driven put over the host path's, 8 B (worst fabric; paper: device wins)",
              (0.0, 1.0), float(best(small).max()), "x"),
        Claim("large messages: host path over the best GPU-driven put, 64 MiB (paper: host competitive)",
              (1.0, 1.05), float((1 / best(large)).max()), "x"),
        Claim("frequent coordination: GPU-driven coordination over the host path's (worst fabric)",
              (0.0, 1.0), float((device.coordination_us / device.system.map(
                  crossing[crossing.scheme == "host-driven"].set_index("system").coordination_us)).max()), "x"),
    ]  # fmt: skip
    notes = [
        f"{r.system}: {r.scheme} wins above {r.wins_above_per_s:,.0f} coordinations/s; the host path is within "
        f"5% of it above {r.host_competitive_above_bytes / 2**20:.2f} MiB"
        for r in device.itertuples()
    ] + ["kernel-triggered needs host-staged triggered operations (Slingshot CXI); kernel-initiated needs "
         "GPU-initiated work requests (IBGDA/GDAKI on ConnectX): each fabric lists only what its NIC runs"]  # fmt: skip
    return StudyResult.of(spec, claims, table, notes)
